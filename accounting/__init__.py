"""dprag.accounting — privacy math: events, RDP curves, composition, noise, mechanisms, filters, collusion.

The most used names are re-exported here; each lives in a small module named after its concept:
``events`` (what a mechanism spent), ``rdp`` (RDP curves and conversions), ``composition`` (accountants,
advanced/optimal composition, PLD), ``gdp`` (exact Gaussian composition), ``noise`` (samplers drawing from
a ``RandomSource``), ``mechanisms`` (Laplace, Gaussian, exponential, LimitedDomain, sparse vector, prefix
sums, subsampling, DP-KSA), ``filters`` and ``stores`` (the individual Rényi filter), ``collusion`` (002's
bounds), ``rag`` (the DP-RAG algorithms) and ``testing`` (hypothesis strategies and an empirical DP checker).
"""

if __name__ != "dprag.accounting":  # one folder, one module: never loaded twice under two names
    raise ImportError(
        f"the folder accounting/ is the package dprag.accounting: import dprag.accounting, not {__name__} "
        "(pip install -e . from the repository root)"
    )
from dprag.errors import (
    BudgetExhaustedError,
    DpragError,
    InvalidParameterError,
    UnknownDocumentError,
    UnsupportedEventError,
)

from .events import (
    ApproxDpEvent,
    ApproxRdpEvent,
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    NoOpEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PureDpEvent,
    RdpCurveEvent,
    SelfComposedEvent,
    ZCDpEvent,
    from_dp_event,
)
from .noise.source import RandomSource
from .rdp import DEFAULT_ORDERS, epsilon_of, rdp_curve, rdp_to_epsilon

__all__ = [
    "ApproxDpEvent",
    "ApproxRdpEvent",
    "BudgetExhaustedError",
    "ComposedEvent",
    "DEFAULT_ORDERS",
    "DiscreteGaussianEvent",
    "DiscreteLaplaceEvent",
    "DpragError",
    "ExponentialMechanismEvent",
    "GaussianEvent",
    "InvalidParameterError",
    "LaplaceEvent",
    "NoOpEvent",
    "PoissonSampledEvent",
    "PrivacyEvent",
    "PureDpEvent",
    "RandomSource",
    "RdpCurveEvent",
    "SelfComposedEvent",
    "UnknownDocumentError",
    "UnsupportedEventError",
    "ZCDpEvent",
    "epsilon_of",
    "from_dp_event",
    "rdp_curve",
    "rdp_to_epsilon",
]
