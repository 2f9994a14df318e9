"""Composition and conversions: accountants over privacy events, (ε, δ) composition theorems, PLD.

Modules (see spec/accounting/composition.md):

- ``advanced``  — basic, Dwork–Rothblum–Vadhan, Kairouz–Oh–Viswanath (closed form, Thm 3.5, and exact optimal,
  Thm 3.3), Murtagh–Vadhan exact heterogeneous composition, Poisson amplification of (ε, δ).
- ``accountant`` — ``RdpAccountant``, ``PureDpAccountant``, ``MixedAccountant``.
- ``pld``        — ``PldAccountant`` (dp_accounting's PLDAccountant plus (ε, δ)-only events).
- ``conversions`` — zCDP ↔ RDP and zCDP → (ε, δ).

RDP → (ε, δ) in both directions lives in ``accounting.rdp`` (``rdp_to_epsilon``, ``rdp_to_delta``).
"""

from .accountant import MixedAccountant, PureDpAccountant, RdpAccountant, dp_terms, epsilon_with_tv
from .advanced import (
    DEFAULT_MAX_STATES,
    basic_composition,
    drv_composition,
    kov_composition,
    optimal_composition_delta,
    optimal_composition_epsilon,
    optimal_composition_states,
    optimal_homogeneous_delta,
    optimal_homogeneous_epsilon,
    poisson_amplify,
)
from .conversions import zcdp_rdp, zcdp_to_epsilon
from .pld import PldAccountant

__all__ = [
    "DEFAULT_MAX_STATES",
    "MixedAccountant",
    "PldAccountant",
    "PureDpAccountant",
    "RdpAccountant",
    "basic_composition",
    "dp_terms",
    "drv_composition",
    "epsilon_with_tv",
    "kov_composition",
    "optimal_composition_delta",
    "optimal_composition_epsilon",
    "optimal_composition_states",
    "optimal_homogeneous_delta",
    "optimal_homogeneous_epsilon",
    "poisson_amplify",
    "zcdp_rdp",
    "zcdp_to_epsilon",
]
