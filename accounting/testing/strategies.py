"""Hypothesis strategies for property-based tests of privacy code (needs ``hypothesis``, a test dependency).

Parameters: ``epsilons()``, ``deltas()``, ``orders()``, ``noise_multipliers()``, ``sampling_probabilities()``,
``sources()``. Privacy events (accounting/events.py): ``leaf_events()``, ``events()`` (recursive: every
event type as a leaf, combined by composition, self-composition, Poisson sampling and δ-approximation),
``compositions()``, ``gaussian_compositions()``. Neighbouring inputs: ``mechanism_inputs()`` (alias
``neighbouring_histograms()``) and ``neighbouring_scores()``.

``events()`` has two restrictions for tests that need them:

- ``rdp_only=True``: only events ``accounting.rdp.rdp_curve`` accepts (no ``ApproxDpEvent``; Poisson
  sampling only over nested compositions of Gaussians, which is what dp_accounting's RDP accountant
  amplifies);
- ``convertible=True``: only events with a ``to_dp_event()`` that dp_accounting's ``RdpAccountant`` can
  compose (so a test can cross-check ``rdp_curve`` against dp_accounting).

Example::

    from hypothesis import given
    from dprag.accounting.rdp import rdp_curve, DEFAULT_ORDERS
    from dprag.accounting.testing import strategies as dps

    @given(dps.events(rdp_only=True))
    def test_rdp_is_never_negative(event):
        assert (rdp_curve(event, np.array(DEFAULT_ORDERS)) >= 0).all()

Neighbouring inputs are generated honestly: a dataset of records is drawn first, then a neighbour is made by
changing ONE record under the chosen relation ("replace" one record, or "add_remove" one record), and both
are mapped through the same statistic (a vote histogram, a per-record token-set histogram, or per-document
scores). So the pairs obey exactly the sensitivity the mechanisms assume — e.g. for ``contribution=
"token_sets"`` (004's keyword histogram: a response adds 1 to every token it contains) every count moves by
at most 1, while the L1 distance can be large.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import strategies as st

from ..events import (
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
)
from ..noise.source import RandomSource

#: a pair of neighbouring inputs (either order)
_HistogramPair = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]
_ScorePair = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]

__all__ = [
    "epsilons",
    "deltas",
    "orders",
    "noise_multipliers",
    "sampling_probabilities",
    "sources",
    "leaf_events",
    "events",
    "compositions",
    "gaussian_compositions",
    "neighbouring_histograms",
    "mechanism_inputs",
    "neighbouring_scores",
]


# -- parameters ----------------------------------------------------------------------------------------
def epsilons(min_value: float = 1e-3, max_value: float = 10.0, *, allow_zero: bool = False) -> st.SearchStrategy[float]:
    """Finite ε in [min_value, max_value] (and 0 if ``allow_zero``)."""
    s = st.floats(min_value=min_value, max_value=max_value, allow_nan=False, allow_infinity=False)
    return st.one_of(st.just(0.0), s) if allow_zero else s


def deltas(min_value: float = 1e-12, max_value: float = 0.1, *, allow_zero: bool = False) -> st.SearchStrategy[float]:
    """δ in [min_value, max_value] ⊂ (0, 1), drawn log-uniformly-ish (hypothesis also tries the ends)."""
    lo, hi = np.log10(min_value), np.log10(max_value)
    s = st.floats(min_value=lo, max_value=hi, allow_nan=False).map(
        lambda x: float(min(max(10.0**x, min_value), max_value))
    )
    return st.one_of(st.just(0.0), s) if allow_zero else s


def orders(min_size: int = 1, max_size: int = 16, max_order: float = 1024.0) -> st.SearchStrategy[tuple[float, ...]]:
    """A sorted tuple of distinct Rényi orders α, each finite and > 1."""
    alpha = st.one_of(
        st.floats(min_value=1.0, max_value=max_order, exclude_min=True, allow_nan=False),
        st.integers(min_value=2, max_value=int(max_order)).map(float),
    )
    return st.lists(alpha, min_size=min_size, max_size=max_size, unique=True).map(lambda xs: tuple(sorted(xs)))


def noise_multipliers(min_value: float = 0.1, max_value: float = 100.0) -> st.SearchStrategy[float]:
    """σ/Δ of a Gaussian (or b/Δ of a Laplace) mechanism."""
    return st.floats(min_value=min_value, max_value=max_value, allow_nan=False, allow_infinity=False)


def sampling_probabilities(min_value: float = 0.0, max_value: float = 1.0) -> st.SearchStrategy[float]:
    return st.floats(min_value=min_value, max_value=max_value, allow_nan=False)


def sources() -> st.SearchStrategy[RandomSource]:
    """Seeded (deterministic, reproducible) RandomSources."""
    return st.binary(min_size=1, max_size=16).map(lambda seed: RandomSource.from_seed(seed, b"hypothesis"))


# -- events --------------------------------------------------------------------------------------------
_sens = st.floats(min_value=0.1, max_value=10.0, allow_nan=False)
_int_sens = st.integers(min_value=1, max_value=10)


def _gaussian_leaves() -> st.SearchStrategy[PrivacyEvent]:
    return st.one_of(
        st.builds(GaussianEvent, sigma=noise_multipliers(0.2, 50.0), sensitivity=_sens),
        st.builds(DiscreteGaussianEvent, sigma=noise_multipliers(0.2, 50.0), sensitivity=_int_sens),
    )


def _rdp_curve_events() -> st.SearchStrategy[RdpCurveEvent]:
    def build(pairs: list[tuple[float, float]]) -> RdpCurveEvent:
        pairs = sorted(pairs)
        # an RDP curve must be non-decreasing in α: accumulate the drawn increments
        values = np.cumsum([v for _, v in pairs]).tolist()
        return RdpCurveEvent(tuple(a for a, _ in pairs), tuple(values))

    pair = st.tuples(st.floats(min_value=1.01, max_value=512.0), st.floats(min_value=0.0, max_value=5.0))
    return st.lists(pair, min_size=1, max_size=8, unique_by=lambda p: p[0]).map(build)


def leaf_events(*, rdp_only: bool = False, convertible: bool = False) -> st.SearchStrategy[PrivacyEvent]:
    """A single mechanism's event, of every leaf type in accounting/events.py the restrictions allow."""
    conv: list[st.SearchStrategy[PrivacyEvent]] = [
        st.just(NoOpEvent()),
        st.builds(LaplaceEvent, scale=noise_multipliers(0.05, 50.0), sensitivity=_sens),
        st.builds(GaussianEvent, sigma=noise_multipliers(0.2, 50.0), sensitivity=_sens),
        st.builds(DiscreteGaussianEvent, sigma=noise_multipliers(0.2, 50.0), sensitivity=_int_sens),
    ]
    if convertible:
        return st.one_of(conv)
    rdp = conv + [
        st.builds(PureDpEvent, epsilon=epsilons(allow_zero=True)),
        st.builds(DiscreteLaplaceEvent, scale=noise_multipliers(0.05, 50.0), sensitivity=_int_sens),
        st.builds(ExponentialMechanismEvent, epsilon=epsilons(allow_zero=True), bounded_range=st.booleans()),
        st.builds(
            DiscreteGaussianEvent,
            sigma=noise_multipliers(0.2, 50.0),
            sensitivity=_int_sens,
            sampler_tv=deltas(1e-15, 1e-6),
        ),
        _rdp_curve_events(),
    ]
    if rdp_only:
        return st.one_of(rdp)
    return st.one_of(rdp + [st.builds(ApproxDpEvent, epsilon=epsilons(allow_zero=True), delta=deltas(allow_zero=True))])


def _gaussian_structures(max_leaves: int) -> st.SearchStrategy[PrivacyEvent]:
    """Nested compositions bottoming out in Gaussians: what dp_accounting amplifies by Poisson sampling."""
    return st.recursive(
        st.builds(GaussianEvent, sigma=noise_multipliers(0.5, 50.0), sensitivity=_sens),
        lambda c: st.one_of(
            st.lists(c, min_size=1, max_size=3).map(lambda es: ComposedEvent(tuple(es))),
            st.builds(SelfComposedEvent, event=c, count=st.integers(1, 20)),
        ),
        max_leaves=max_leaves,
    )


def events(
    *,
    max_leaves: int = 8,
    rdp_only: bool = False,
    convertible: bool = False,
    extra_leaves: st.SearchStrategy[PrivacyEvent] | None = None,
) -> st.SearchStrategy[PrivacyEvent]:
    """Recursive privacy events: leaves of every type, composed, self-composed, Poisson-sampled, δ-approximate.

    ``extra_leaves``: a strategy for event types other modules define (e.g. a new mechanism's event), mixed
    into the leaves; the caller vouches that they meet the requested restriction.
    """
    poisson = st.builds(
        PoissonSampledEvent,
        sampling_probability=sampling_probabilities(),
        event=_gaussian_structures(max(1, max_leaves // 2)),
    )
    leaves = st.one_of(leaf_events(rdp_only=rdp_only, convertible=convertible), poisson)
    if extra_leaves is not None:
        leaves = st.one_of(leaves, extra_leaves)

    def extend(children: st.SearchStrategy[PrivacyEvent]) -> st.SearchStrategy[PrivacyEvent]:
        options: list[st.SearchStrategy[PrivacyEvent]] = [
            st.lists(children, min_size=0, max_size=4).map(lambda es: ComposedEvent(tuple(es))),
            # dp_accounting refuses count 0 (events.py converts SelfComposedEvent(e, 0) as is)
            st.builds(SelfComposedEvent, event=children, count=st.integers(1 if convertible else 0, 50)),
        ]
        if not convertible:
            options.append(st.builds(ApproxRdpEvent, event=children, delta=deltas(allow_zero=True)))
        if not (rdp_only or convertible):
            options.append(
                st.builds(PoissonSampledEvent, sampling_probability=sampling_probabilities(), event=children)
            )
        return st.one_of(options)

    return st.recursive(leaves, extend, max_leaves=max_leaves)


def compositions(
    *, min_size: int = 1, max_size: int = 10, rdp_only: bool = True, convertible: bool = False
) -> st.SearchStrategy[ComposedEvent]:
    """A flat ``ComposedEvent`` of leaf events (heterogeneous mechanisms run one after another)."""
    return st.lists(leaf_events(rdp_only=rdp_only, convertible=convertible), min_size=min_size, max_size=max_size).map(
        lambda es: ComposedEvent(tuple(es))
    )


def gaussian_compositions(
    *, min_size: int = 1, max_size: int = 12, discrete: bool = True
) -> st.SearchStrategy[ComposedEvent]:
    """A ``ComposedEvent`` of (self-composed) Gaussian mechanisms with heterogeneous σ and sensitivity.

    Its exact privacy is that of one Gaussian with noise multiplier (Σ count·(Δ/σ)²)^(-1/2) (μ-GDP with
    μ² = Σ count·(Δ/σ)², Dong–Roth–Su 2022), which tests can compute independently. ``discrete`` also
    draws exact discrete Gaussians (same RDP and GDP, Canonne–Kamath–Steinke 2020).
    """
    leaf: st.SearchStrategy[PrivacyEvent] = st.builds(
        GaussianEvent, sigma=noise_multipliers(0.3, 30.0), sensitivity=_sens
    )
    if discrete:
        leaf = st.one_of(
            leaf, st.builds(DiscreteGaussianEvent, sigma=noise_multipliers(0.3, 30.0), sensitivity=_int_sens)
        )
    item = st.one_of(leaf, st.builds(SelfComposedEvent, event=leaf, count=st.integers(1, 100)))
    return st.lists(item, min_size=min_size, max_size=max_size).map(lambda es: ComposedEvent(tuple(es)))


# -- neighbouring inputs -------------------------------------------------------------------------------
@st.composite
def neighbouring_histograms(
    draw: st.DrawFn,
    *,
    min_bins: int = 2,
    max_bins: int = 12,
    max_records: int = 40,
    contribution: str = "votes",
    relation: str = "replace",
) -> _HistogramPair:
    """A pair (h0, h1) of int64 count histograms over the same public bins, from neighbouring datasets.

    ``contribution="votes"``: each record casts one vote for one bin (DPVoteRAG / pure-DP DP-RAG vote
    histograms): the pair differs in L1 by ≤ 2 (replace) or 1 (add/remove).
    ``contribution="token_sets"``: each record contributes a *set* of bins, each at most once (004's keyword
    histogram H, one record = one response): every count differs by ≤ 1 (L∞ ≤ 1).
    ``relation``: "replace" one record, or "add_remove" one record.
    """
    if contribution not in ("votes", "token_sets"):
        raise ValueError("contribution must be 'votes' or 'token_sets'")
    if relation not in ("replace", "add_remove"):
        raise ValueError("relation must be 'replace' or 'add_remove'")
    n_bins = draw(st.integers(min_bins, max_bins))
    record: st.SearchStrategy[tuple[int, ...]]
    if contribution == "votes":
        record = st.integers(0, n_bins - 1).map(lambda b: (b,))
    else:
        record = st.lists(st.integers(0, n_bins - 1), max_size=n_bins, unique=True).map(tuple)
    min_records = 1 if relation == "replace" else 0
    records = draw(st.lists(record, min_size=min_records, max_size=max_records))
    changed = list(records)
    if relation == "replace":
        i = draw(st.integers(0, len(records) - 1))
        changed[i] = draw(record)
    elif records and bool(draw(st.booleans())):  # bool(): no list context for the draw's type
        del changed[draw(st.integers(0, len(records) - 1))]
    else:
        changed.append(draw(record))

    def histogram(recs: list[tuple[int, ...]]) -> npt.NDArray[np.int64]:
        h = np.zeros(n_bins, dtype=np.int64)
        for r in recs:
            h[list(r)] += 1
        return h

    h0, h1 = histogram(records), histogram(changed)
    return (h0, h1) if draw(st.booleans()) else (h1, h0)


def mechanism_inputs(
    kind: str = "votes", **kwargs: Any
) -> st.SearchStrategy[_HistogramPair] | st.SearchStrategy[_ScorePair]:
    """Neighbouring inputs for a mechanism: ``kind`` is "votes" or "token_sets" (histograms, see
    ``neighbouring_histograms``) or "scores" (see ``neighbouring_scores``)."""
    if kind == "scores":
        return neighbouring_scores(**kwargs)
    return neighbouring_histograms(contribution=kind, **kwargs)


@st.composite
def neighbouring_scores(
    draw: st.DrawFn,
    *,
    min_docs: int = 1,
    max_docs: int = 20,
    relation: str = "replace",
    low: float = -1.0,
    high: float = 1.0,
) -> _ScorePair:
    """Per-document relevance scores (s0, s1) of neighbouring corpora: each document's score depends on that
    document only, so "replace" changes one entry arbitrarily and "add_remove" removes one entry."""
    if relation not in ("replace", "add_remove"):
        raise ValueError("relation must be 'replace' or 'add_remove'")
    score = st.floats(min_value=low, max_value=high, allow_nan=False)
    s0 = np.asarray(draw(st.lists(score, min_size=max(min_docs, 1), max_size=max_docs)), dtype=np.float64)
    i = draw(st.integers(0, len(s0) - 1))
    if relation == "replace":
        s1 = s0.copy()
        s1[i] = draw(score)
    else:
        s1 = np.delete(s0, i)
    return (s0, s1) if draw(st.booleans()) else (s1, s0)
