"""The scalar mechanism M* of 002 (3.3)–(3.4) under the lower-bound attack, as Monte Carlo trials.

One trial = one pair of worlds (target in: s_in = +1, i.e. x* = q*; replaced: s_out = s_in − gap), each releasing
k·n noisy copies of the probe's score through the library's Gaussian mechanism
(``accounting.mechanisms.additive.gaussian_mechanism``: secure granular discrete Gaussian, σ/γ ≥ 2^39).

Accounts are cut into k/g groups of g = gcd(k, k_t(ρ) for every split fraction ρ) accounts
(k_t(ρ) = ⌈ρk⌉, ``adversaries.split_accounts``), so the pooled mean of all k accounts and of the first k_t
accounts are functions of the group sums. Two exactly equivalent ways to draw them (spec/experiments-collusion.md
§2, "sufficiency"):
* ``per-query``: every release drawn, one gaussian_mechanism call on the 2kn values (s_b, ..., s_b) with σ,
  then summed per group;
* ``sufficient``: the group sums drawn directly, one gaussian_mechanism call on the 2k/g values g·n·s_b with
  σ√(g·n). For Gaussian noise Σ_{i≤m}(s_b + Z_i) ~ N(m s_b, mσ²) exactly, and every statistic below (pooled
  mean, Bayes LR, split) is a function of group sums only. (The library's noise is a discrete Gaussian on a
  grid γ ≤ σ·2^-39: its sums and a single draw at σ√m differ from N(m s_b, mσ²) only at that lattice scale.)

One random stream per trial (``montecarlo.trial_source(seed, cell.key, t)``), both worlds drawn from it.
Row layout: [ȳ_in, ȳ_out, ȳ_in(ρ_1), ȳ_out(ρ_1), ...].
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dprag.accounting import collusion
from dprag.accounting.mechanisms.additive import gaussian_mechanism
from dprag.errors import InvalidParameterError
from dprag.lab.leakage.adversaries import split_accounts
from dprag.lab.leakage.montecarlo import trial_source

CALIBRATIONS = ("3.4", "exact")
MODES = ("sufficient", "per-query")


def calibrate_sigma(eps_acc: float, delta_acc: float, n: int, sensitivity: float, calibration: str) -> float:
    """Per-query σ for one account's n queries at (ε_acc, δ_acc), replace-one, score sensitivity Δ:
    "3.4" = 002's (3.4) (``collusion.eq_3_4_sigma``: (3.1) with the classical Gaussian mechanism) or
    "exact" = the smallest σ making the n-fold composition exactly (ε_acc, δ_acc)-DP (``collusion.exact_sigma``)."""
    if calibration == "3.4":
        return collusion.eq_3_4_sigma(eps_acc, delta_acc, n, sensitivity)
    if calibration == "exact":
        return collusion.exact_sigma(eps_acc, delta_acc, n, sensitivity)
    raise InvalidParameterError("calibration", "must be '3.4' or 'exact'", calibration)


@dataclass(frozen=True)
class ScalarCell:
    k: int
    n: int
    eps_acc: float
    delta_acc: float
    sigma: float
    gap: float = 2.0  # realised score gap s_in − s_out (2 = x*' = −q*, the raw-cosine worst case)
    sensitivity: float = 2.0  # score sensitivity σ is calibrated for (raw cosine, replace-one)
    rhos: tuple[float, ...] = ()
    mode: str = "sufficient"
    calibration: str = "3.4"
    key: str = field(default="", compare=False)

    def __post_init__(self):
        if self.mode not in MODES:
            raise InvalidParameterError("mode", f"must be one of {MODES}", self.mode)
        if not (0 < self.gap <= self.sensitivity):
            raise InvalidParameterError("gap", "must lie in (0, sensitivity]", self.gap)
        if not self.key:
            # the draws depend on the cell's identity, not on its place in a grid; mode is not part of the key,
            # so both modes of one cell read the same streams (their samples differ: different consumption)
            object.__setattr__(
                self,
                "key",
                f"scalar/k={self.k}/n={self.n}/eps={self.eps_acc!r}/dacc="
                f"{self.delta_acc!r}/sigma={self.sigma!r}/gap={self.gap!r}",
            )

    def blocks(self) -> list[int]:
        """Account boundaries 0 < b_1 < ... < b_r = k (the k_t of every ρ, and k)."""
        return sorted({split_accounts(self.k, r) for r in self.rhos} | {self.k})

    @property
    def columns(self) -> list[str]:
        cols = ["pooled_in", "pooled_out"]
        for r in self.rhos:
            cols += [f"split{r:g}_in", f"split{r:g}_out"]
        return cols


def group_size(cell: ScalarCell) -> int:
    """Accounts per group g = gcd of the block boundaries: every boundary is a whole number of groups."""
    return math.gcd(*cell.blocks())


def _group_sums(cell: ScalarCell, source) -> tuple[np.ndarray, np.ndarray]:
    """Per-group sums of releases (k/g groups of g accounts, in account order) for world in and world out.

    ``sufficient``: one call of the library's Gaussian mechanism for both worlds, on the vector
    (g·n·s_in, ..., g·n·s_out, ...) with σ√(g·n) (a group's sum of g·n releases is N(g·n·s_b, g·n·σ²) exactly).
    ``per-query``: one call for all 2·k·n releases with σ, then summed per group.
    """
    s_in, s_out = 1.0, 1.0 - cell.gap
    g = group_size(cell)
    G = cell.k // g
    m = g * cell.n
    if cell.mode == "sufficient":
        vals = np.concatenate([np.full(G, m * s_in), np.full(G, m * s_out)])
        y, _ = gaussian_mechanism(vals, m * cell.sensitivity, cell.sigma * math.sqrt(m), source, l0_sensitivity=1)
        y = np.asarray(y, dtype=np.float64)
    else:
        vals = np.concatenate([np.full(G * m, s_in), np.full(G * m, s_out)])
        y, _ = gaussian_mechanism(vals, cell.sensitivity, cell.sigma, source, l0_sensitivity=1)
        y = np.asarray(y, dtype=np.float64).reshape(2 * G, m).sum(axis=1)
    return y[:G], y[G:]


def scalar_trials(cell: ScalarCell, seed: bytes, start: int, stop: int) -> np.ndarray:
    """Trials [start, stop) of ``cell`` (module docstring for the row layout)."""
    g = group_size(cell)
    rows = np.empty((stop - start, 2 + 2 * len(cell.rhos)))
    for i, t in enumerate(range(start, stop)):
        gin, gout = _group_sums(cell, trial_source(seed, cell.key, t))
        cin, cout = np.cumsum(gin), np.cumsum(gout)
        rows[i, 0] = cin[-1] / (cell.k * cell.n)
        rows[i, 1] = cout[-1] / (cell.k * cell.n)
        for j, r in enumerate(cell.rhos):
            kt = split_accounts(cell.k, r)
            rows[i, 2 + 2 * j] = cin[kt // g - 1] / (kt * cell.n)
            rows[i, 3 + 2 * j] = cout[kt // g - 1] / (kt * cell.n)
    return rows
