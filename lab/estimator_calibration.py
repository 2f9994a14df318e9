"""Calibration of the coalition-size estimator's threshold θ (002 §5.5 "Calibration"; spec/estimator.md §4-5).

Two harnesses, one result type (``Calibration``):

1. **002's toy harness** (``run_toy_calibration``), as §5.5 describes it: A = 30 accounts, n = 100 queries
   each, d = 32; θ swept over 16 grid points in [0.20, 0.95]; the **null** draws iid uniform unit-sphere
   queries; each **alternative** replaces k_true ∈ {2, 5, 10, 20} accounts with a coalition following
   P-A (every colluder query is one identical probe q*), P-B (jittered probes normalize(q* + ζ·η),
   ζ = 0.10, η ~ N(0, I_d)) or P-C (probes drawn iid from a fixed intent set of 5 vectors); detection is
   ĉ >= 2 and the operating point θ* is the smallest θ whose null FPR is <= 5%.
   Timing: 002 does not fix when each query arrives; we interleave all A·n queries in a uniformly random
   order (one permutation per trial) and apply the estimator's window to those positions. The default
   window covers every pair (W = A·n - 1), which is what 002's numbers imply (the closed form
   ``analytic_null_fpr`` reproduces 002's FPR curve only for the full window; spec/estimator.md §4).
2. **Honest traffic** (``run_honest_calibration``): the null is honest accounts asking random subsets of a
   pool of real questions (the clinic questions, embedded with the real embedder; the caller supplies the
   embeddings, so this module imports no model library), where several phrasings of one fact exist and
   popular questions recur verbatim; the attacks are P-A / P-B / P-C built in the same embedding space
   (probe = an attack question's embedding; P-B jitter ζ·sqrt(32/d) so that the jitter-to-signal ratio
   equals the toy's; P-C = the embeddings of 5 paraphrases of the attack question).

Detection rule. 002 flags ĉ >= 2 (i.e. k_max = 1). The protocol's pass condition is ĉ <= k_max, so a
``Calibration`` can be read at any k_max: FPR(θ) = P_null(ĉ > k_max), TPR = P_attack(ĉ > k_max) for
coalitions with k_true > k_max. Honest traffic needs this (spec/estimator.md §5).

This is an experiment harness, not a privacy mechanism: randomness is numpy ``Generator`` streams seeded
from ``(seed, crc32(cell name))``, so every cell is reproducible on its own.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.special import betainc
from scipy.stats import beta as beta_dist

from dprag.accounting.errors import check_positive_int
from dprag.audit.verify.estimator import NeighbourSearch, coalition_size_curve, unit_rows
from dprag.errors import InvalidParameterError

PATTERNS = ("P-A", "P-B", "P-C")
#: 002 §5.5: 16 grid points in [0.20, 0.95]
THETA_GRID = tuple(float(t) for t in np.round(np.linspace(0.20, 0.95, 16), 2))
#: honest traffic: the top of the range matters (verbatim repeats have cosine 1); below 0.60 the clinic
#: questions' null is saturated (every account in one cluster), so the grid starts there
HONEST_THETA_GRID = tuple(t for t in sorted(set(THETA_GRID) | {0.97, 0.99, 1.0}) if t >= 0.60)
K_TRUE = (2, 5, 10, 20)
#: 002's reported numbers (§5.5, Fig. 7)
PAPER_002 = {"theta_star": 0.80, "fpr_at_star": 0.040, "fpr_at_0.75": 0.595, "fpr_below_0.70": 1.0, "tpr_at_star": 1.00}


# ---------------------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------------------


def check_grid(thetas) -> tuple[float, ...]:
    th = tuple(float(t) for t in thetas)
    if not th:
        raise InvalidParameterError("thetas", "must not be empty")
    for t in th:
        if not (0.0 < t <= 1.0):
            raise InvalidParameterError("thetas", "every θ must lie in (0, 1]", t)
    if list(th) != sorted(set(th)):
        raise InvalidParameterError("thetas", "must be strictly increasing")
    return th


def _check_common(cfg) -> None:
    check_positive_int("accounts", cfg.accounts, minimum=2)
    check_positive_int("queries_per_account", cfg.queries_per_account)
    object.__setattr__(cfg, "thetas", check_grid(cfg.thetas))
    ks = tuple(check_positive_int("k_true", k, minimum=2) for k in cfg.k_true)
    if any(k > cfg.accounts for k in ks):
        raise InvalidParameterError("k_true", "must be <= accounts", ks)
    object.__setattr__(cfg, "k_true", ks)
    for p in cfg.patterns:
        if p not in PATTERNS:
            raise InvalidParameterError("patterns", f"must be among {PATTERNS}", p)
    z = float(cfg.zeta)
    if not (z >= 0 and np.isfinite(z)):
        raise InvalidParameterError("zeta", "must be finite and >= 0", cfg.zeta)
    if cfg.window is not None:
        check_positive_int("window", cfg.window)
    t = float(cfg.target_fpr)
    if not (0 < t < 1):
        raise InvalidParameterError("target_fpr", "must lie in (0, 1)", cfg.target_fpr)


@dataclass(frozen=True)
class ToyConfig:
    """002 §5.5's toy harness. ``window=None`` compares every pair (W = A·n - 1)."""

    accounts: int = 30
    queries_per_account: int = 100
    dim: int = 32
    thetas: tuple[float, ...] = THETA_GRID
    k_true: tuple[int, ...] = K_TRUE
    patterns: tuple[str, ...] = PATTERNS
    zeta: float = 0.10
    intents: int = 5
    window: int | None = None
    target_fpr: float = 0.05

    def __post_init__(self):
        _check_common(self)
        check_positive_int("dim", self.dim, minimum=2)
        check_positive_int("intents", self.intents)

    @property
    def n_queries(self) -> int:
        return self.accounts * self.queries_per_account

    @property
    def effective_window(self) -> int:
        return self.window if self.window is not None else self.n_queries - 1


@dataclass(frozen=True)
class HonestConfig:
    """Honest-traffic harness: each account asks ``queries_per_account`` distinct questions of the pool.

    P-B's jitter is ζ·sqrt(zeta_reference_dim / d) (``None``: ζ unscaled).
    """

    accounts: int = 30
    queries_per_account: int = 100
    thetas: tuple[float, ...] = HONEST_THETA_GRID
    k_true: tuple[int, ...] = K_TRUE
    patterns: tuple[str, ...] = PATTERNS
    zeta: float = 0.10
    zeta_reference_dim: int | None = 32
    window: int | None = None
    target_fpr: float = 0.05

    def __post_init__(self):
        _check_common(self)
        if self.zeta_reference_dim is not None:
            check_positive_int("zeta_reference_dim", self.zeta_reference_dim)

    @property
    def n_queries(self) -> int:
        return self.accounts * self.queries_per_account

    @property
    def effective_window(self) -> int:
        return self.window if self.window is not None else self.n_queries - 1

    def zeta_for(self, dim: int) -> float:
        return float(self.zeta) * (1.0 if self.zeta_reference_dim is None else np.sqrt(self.zeta_reference_dim / dim))


# ---------------------------------------------------------------------------------------------------------
# query generation
# ---------------------------------------------------------------------------------------------------------


def _normalize(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def sphere(rng: np.random.Generator, size: int, dim: int) -> np.ndarray:
    """``size`` iid uniform points of the unit sphere S^{dim-1} (normalised Gaussians)."""
    return _normalize(rng.standard_normal((size, dim)))


def attack_rows(
    rng: np.random.Generator, pattern: str, count: int, probe: np.ndarray, intents: np.ndarray, zeta: float
) -> np.ndarray:
    """``count`` coalition queries of one pattern (002 §5.5): P-A copies of ``probe``; P-B
    normalize(probe + ζ·η), η ~ N(0, I); P-C iid uniform draws from the rows of ``intents``."""
    probe = np.asarray(probe, dtype=np.float64)
    if pattern == "P-A":
        return np.repeat(probe[None, :], count, axis=0)
    if pattern == "P-B":
        return _normalize(probe[None, :] + zeta * rng.standard_normal((count, probe.shape[0])))
    if pattern == "P-C":
        intents = np.asarray(intents, dtype=np.float64)
        return intents[rng.integers(0, intents.shape[0], size=count)]
    raise InvalidParameterError("pattern", f"must be one of {PATTERNS}", pattern)


def _interleave(rng: np.random.Generator, x: np.ndarray, accounts: np.ndarray):
    perm = rng.permutation(x.shape[0])
    return x[perm], accounts[perm]


def _with_coalition(rng, x, cfg, k_true, pattern, probe, intents, zeta):
    """Replace the queries of k_true random accounts by a coalition's (accounts' queries are contiguous)."""
    n = cfg.queries_per_account
    members = rng.choice(cfg.accounts, size=k_true, replace=False)
    rows = attack_rows(rng, pattern, k_true * n, probe, intents, zeta)
    for m, a in enumerate(members):
        x[a * n : (a + 1) * n] = rows[m * n : (m + 1) * n]
    return x


def toy_queries(rng: np.random.Generator, cfg: ToyConfig, pattern: str | None = None, k_true: int = 0):
    """One toy trial: (queries (A·n, d), account of each query), interleaved in random order.
    ``pattern=None``: the null (iid uniform unit-sphere queries)."""
    A, n, d = cfg.accounts, cfg.queries_per_account, cfg.dim
    x = sphere(rng, A * n, d)
    if pattern is not None:
        probe = sphere(rng, 1, d)[0]
        intents = sphere(rng, cfg.intents, d)
        x = _with_coalition(rng, x, cfg, k_true, pattern, probe, intents, cfg.zeta)
    return _interleave(rng, x, np.repeat(np.arange(A), n))


def _honest_trial(
    rng: np.random.Generator,
    cfg: HonestConfig,
    pool: np.ndarray,
    pattern: str | None,
    k_true: int,
    probes: np.ndarray | None,
    paraphrases: np.ndarray | None,
):
    """(ids into concat(pool, extra), accounts, extra rows) of one honest-traffic trial, interleaved."""
    A, n, P = cfg.accounts, cfg.queries_per_account, pool.shape[0]
    ids = np.concatenate([rng.choice(P, size=n, replace=False) for _ in range(A)])
    extra = np.zeros((0, pool.shape[1]))
    if pattern is not None:
        r = int(rng.integers(0, probes.shape[0]))
        members = rng.choice(A, size=k_true, replace=False)
        count = k_true * n
        if pattern == "P-A":
            extra, rows = probes[r][None, :], np.zeros(count, dtype=np.int64)
        elif pattern == "P-C":
            extra, rows = paraphrases[r], rng.integers(0, paraphrases.shape[1], size=count)
        else:
            extra = attack_rows(rng, pattern, count, probes[r], None, cfg.zeta_for(pool.shape[1]))
            rows = np.arange(count)
        for m, a in enumerate(members):
            ids[a * n : (a + 1) * n] = P + rows[m * n : (m + 1) * n]
    perm = rng.permutation(A * n)
    return ids[perm], np.repeat(np.arange(A), n)[perm], extra


def honest_queries(
    rng: np.random.Generator,
    cfg: HonestConfig,
    pool: np.ndarray,
    pattern: str | None = None,
    k_true: int = 0,
    probes: np.ndarray | None = None,
    paraphrases: np.ndarray | None = None,
):
    """One honest-traffic trial: (queries, account of each query), interleaved in random order. Every
    account asks ``queries_per_account`` distinct rows of ``pool`` (uniformly, without replacement); with
    ``pattern``, k_true random accounts are replaced by a coalition aimed at one attack target drawn
    uniformly (P-A: ``probes[r]`` repeated; P-B: it jittered; P-C: iid rows of ``paraphrases[r]``)."""
    pool = np.asarray(pool, dtype=np.float64)
    ids, acc, extra = _honest_trial(rng, cfg, pool, pattern, k_true, probes, paraphrases)
    return np.concatenate([pool, extra])[ids], acc


class _GramSearch:
    """Harness-only ``NeighbourSearch`` for queries that are rows ``ids`` of a small table: inner products
    are read from the table's Gram matrix (float64 BLAS on the same unit rows the estimator uses), so a
    trial costs a gather instead of an (N x N x d) product. Values are declared within 1e-12 (actual error
    ~d·2^-53) and re-derived by the estimator when closer than that to θ."""

    def __init__(self, gram: np.ndarray, ids: np.ndarray, block: int = 1024):
        self.gram, self.ids, self.block = gram, ids, block

    def __call__(self, unit, theta, window, positions):
        ids, n = self.ids, self.ids.shape[0]
        out, vals = [], []
        for s in range(0, n, self.block):
            t = min(n, s + self.block)
            hi = int(np.searchsorted(positions, positions[t - 1] + window, side="right"))
            sims = self.gram[np.ix_(ids[s:t], ids[s:hi])]
            ii, jj = np.nonzero(sims >= theta)
            v = sims[ii, jj]
            ii += s
            jj += s
            keep = (jj > ii) & (positions[jj] - positions[ii] <= window)
            out.append(np.stack([ii[keep], jj[keep]], axis=1))
            vals.append(v[keep])
        return np.concatenate(out), np.concatenate(vals), 1e-12


# ---------------------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------------------


def clopper_pearson_upper(successes: np.ndarray, trials: int, confidence: float = 0.95) -> np.ndarray:
    """One-sided upper confidence bound of a binomial proportion (exact, Clopper-Pearson)."""
    x = np.asarray(successes, dtype=np.float64)
    return np.where(x >= trials, 1.0, beta_dist.ppf(confidence, x + 1, np.maximum(trials - x, 1e-300)))


@dataclass
class Calibration:
    """ĉ for every (cell, trial, θ); read at a detection rule ĉ > ``k_max`` (002: k_max = 1)."""

    name: str
    thetas: np.ndarray
    window: int
    trials: int
    null: np.ndarray  # (trials, G) ĉ under the null
    attacks: dict[tuple[str, int], np.ndarray]  # (pattern, k_true) -> (trials, G) ĉ
    target_fpr: float = 0.05
    k_max: int = 1
    info: dict = field(default_factory=dict)

    def at(self, k_max: int) -> Calibration:
        """The same runs read with detection rule ĉ > k_max."""
        return Calibration(
            self.name,
            self.thetas,
            self.window,
            self.trials,
            self.null,
            self.attacks,
            self.target_fpr,
            check_positive_int("k_max", k_max),
            self.info,
        )

    def fpr(self) -> np.ndarray:
        return (self.null > self.k_max).mean(axis=0)

    def fpr_upper(self, confidence: float = 0.95) -> np.ndarray:
        return clopper_pearson_upper((self.null > self.k_max).sum(axis=0), self.trials, confidence)

    def theta_index(self, conservative: bool = False) -> int | None:
        ok = np.flatnonzero((self.fpr_upper() if conservative else self.fpr()) <= self.target_fpr)
        return int(ok[0]) if ok.size else None

    def theta_star(self, conservative: bool = False) -> float | None:
        """The smallest grid θ with null FPR <= target (002's rule); None if no θ of the grid achieves it.
        ``conservative``: use the 95% Clopper-Pearson upper bound of the FPR instead of its estimate."""
        g = self.theta_index(conservative)
        return None if g is None else float(self.thetas[g])

    def _col(self, theta: float | None) -> int | None:
        if theta is None:
            return self.theta_index()
        g = np.flatnonzero(np.isclose(self.thetas, theta))
        if g.size == 0:
            raise InvalidParameterError("theta", "must be a grid point", theta)
        return int(g[0])

    def tpr(self, theta: float | None = None) -> dict[tuple[str, int], float]:
        """P(ĉ > k_max) per attack cell at θ (default θ*)."""
        g = self._col(theta)
        return {} if g is None else {c: float((v[:, g] > self.k_max).mean()) for c, v in self.attacks.items()}

    def mean_c_hat(self, theta: float | None = None) -> dict[tuple[str, int], float]:
        g = self._col(theta)
        return {} if g is None else {c: float(v[:, g].mean()) for c, v in self.attacks.items()}

    def exact_recovery(self, theta: float | None = None) -> dict[tuple[str, int], float]:
        """Fraction of trials with ĉ == k_true exactly."""
        g = self._col(theta)
        return {} if g is None else {c: float((v[:, g] == c[1]).mean()) for c, v in self.attacks.items()}

    def to_markdown(self, analytic: dict | None = None) -> str:
        """FPR curve, operating point, TPR / ĉ table, and ĉ(θ) at k_true = 10 (002 Fig. 7b)."""
        at = self.info.get("attack_trials", self.trials)
        lines = [
            f"### {self.name}: {self.trials} null trials, {at} per attack cell, window W = {self.window}, "
            f"detection ĉ > {self.k_max}",
            "",
            "| θ | null FPR | 95% upper (Clopper-Pearson) | mean ĉ (null) | p95 ĉ (null) |"
            + (" analytic FPR [lower, upper] |" if analytic else ""),
            "|---|---|---|---|---|" + ("---|" if analytic else ""),
        ]
        fpr, up = self.fpr(), self.fpr_upper()
        for g, t in enumerate(self.thetas):
            row = (
                f"| {t:.2f} | {fpr[g]:.3f} | {up[g]:.3f} | {self.null[:, g].mean():.2f} | "
                f"{np.quantile(self.null[:, g], 0.95):.0f} |"
            )
            if analytic:
                row += f" {analytic['poisson'][g]:.4f} [{analytic['lower'][g]:.4f}, {analytic['upper'][g]:.4f}] |"
            lines.append(row)
        ts = self.theta_star()
        tc = self.theta_star(conservative=True)
        lines += [
            "",
            f"θ* = {ts if ts is None else f'{ts:.2f}'}"
            + f" (conservative, 95% upper bound <= target: {tc if tc is None else f'{tc:.2f}'})"
            + (
                ""
                if ts is None
                else f", null FPR at θ* = {fpr[self.theta_index()]:.3f} (95% upper {up[self.theta_index()]:.3f})"
            ),
            "",
        ]
        if ts is not None and self.attacks:
            tpr, mc, ex = self.tpr(), self.mean_c_hat(), self.exact_recovery()
            g = self.theta_index()
            lines += [
                f"At θ* = {ts:.2f}:",
                "",
                "| pattern | k_true | TPR (ĉ > k_max) | mean ĉ | sd ĉ | ĉ == k_true |",
                "|---|---|---|---|---|---|",
            ]
            for c in self.attacks:
                lines.append(
                    f"| {c[0]} | {c[1]} | {tpr[c]:.3f} | {mc[c]:.2f} | {self.attacks[c][:, g].std():.2f} | "
                    f"{ex[c]:.3f} |"
                )
            lines.append("")
        tens = [c for c in self.attacks if c[1] == 10]
        if tens:
            lines += [
                "mean ĉ against θ at k_true = 10 (002 Fig. 7b):",
                "",
                "| θ | " + " | ".join(c[0] for c in tens) + " |",
                "|---|" + "---|" * len(tens),
            ]
            for g, t in enumerate(self.thetas):
                lines.append(f"| {t:.2f} | " + " | ".join(f"{self.attacks[c][:, g].mean():.2f}" for c in tens) + " |")
            lines.append("")
        return "\n".join(lines)


def operating_table(cal: Calibration, k_max_values: Sequence[int] = (1, 2, 5, 10, 15, 20)) -> str:
    """Per policy cap k_max: the smallest θ with P_null(ĉ > k_max) <= target, and at it, per pattern, the
    TPR P(ĉ > k_max) of the coalitions with k_true > k_max (mean ĉ in brackets)."""
    pats = sorted({p for p, _ in cal.attacks}, key=PATTERNS.index)
    ks = sorted({k for _, k in cal.attacks})
    head = (
        f"| k_max | θ (null FPR <= {cal.target_fpr:.0%}) | FPR at θ | "
        + " | ".join(f"{p} k={k}" for p in pats for k in ks)
        + " |"
    )
    lines = [head, "|---|---|---|" + "---|" * (len(pats) * len(ks))]
    for k_max in k_max_values:
        r = cal.at(k_max)
        g = r.theta_index()
        if g is None:
            lines.append(
                f"| {k_max} | none (FPR at θ = {r.thetas[-1]:.2f}: {r.fpr()[-1]:.2f}) | – | "
                + " | ".join("–" for _ in pats for _ in ks)
                + " |"
            )
            continue
        tpr, mc = r.tpr(), r.mean_c_hat()
        cells = [(f"{tpr[(p, k)]:.2f} ({mc[(p, k)]:.1f})" if k > k_max else "n/a") for p in pats for k in ks]
        lines.append(f"| {k_max} | {r.thetas[g]:.2f} | {r.fpr()[g]:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cell_rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


def _run_cells(name, cfg, trials, attack_trials, seed, make, search, progress, info) -> Calibration:
    """``make(rng, pattern, k)`` -> (queries, accounts, trial search or None)."""
    trials = check_positive_int("trials", trials)
    attack_trials = trials if attack_trials is None else check_positive_int("attack_trials", attack_trials)
    thetas = np.asarray(cfg.thetas)
    W = cfg.effective_window

    def cell(cell_name, pattern, k):
        rng = cell_rng(seed, cell_name)
        count = trials if pattern is None else attack_trials
        out = np.empty((count, thetas.size), dtype=np.int64)
        for t in range(count):
            x, acc, trial_search = make(rng, pattern, k)
            out[t] = coalition_size_curve(x, acc, thetas, W, search=search or trial_search)
        if progress:
            progress(cell_name)
        return out

    null = cell("null", None, 0)
    attacks = {(p, k): cell(f"{p}/k={k}", p, k) for p in cfg.patterns for k in cfg.k_true}
    info = dict(info, attack_trials=attack_trials)
    return Calibration(name, thetas, W, trials, null, attacks, float(cfg.target_fpr), 1, info)


def run_toy_calibration(
    cfg: ToyConfig = ToyConfig(),
    trials: int = 20,
    seed: int = 0,
    *,
    attack_trials: int | None = None,
    search: NeighbourSearch | None = None,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """002 §5.5's toy calibration (module docstring). 002 used 200 trials per cell; ``trials`` is the null's
    count, ``attack_trials`` (default: the same) each alternative cell's."""
    if not isinstance(cfg, ToyConfig):
        raise InvalidParameterError("cfg", "must be a ToyConfig", type(cfg).__name__)
    info = {"config": cfg, "seed": seed, "analytic": analytic_null_fpr(cfg)}
    return _run_cells(
        "toy (002 §5.5)",
        cfg,
        trials,
        attack_trials,
        seed,
        lambda rng, p, k: (*toy_queries(rng, cfg, p, k), None),
        search,
        progress,
        info,
    )


def run_honest_calibration(
    pool: np.ndarray,
    probes: np.ndarray,
    paraphrases: np.ndarray,
    cfg: HonestConfig = HonestConfig(),
    trials: int = 20,
    seed: int = 0,
    *,
    attack_trials: int | None = None,
    search: NeighbourSearch | None = None,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Honest-traffic calibration (module docstring).

    ``pool``: (P, d) embeddings of the honest question pool, one row per question as it may be asked
    (P >= queries_per_account); ``probes``: (m, d) attack-question embeddings; ``paraphrases``: (m, I, d)
    embeddings of I paraphrases of each attack question (P-C's intent set).
    """
    if not isinstance(cfg, HonestConfig):
        raise InvalidParameterError("cfg", "must be a HonestConfig", type(cfg).__name__)
    pool = np.asarray(pool, dtype=np.float64)
    if pool.ndim != 2 or not np.isfinite(pool).all():
        raise InvalidParameterError("pool", "must be a finite (P, d) array", pool.shape)
    if pool.shape[0] < cfg.queries_per_account:
        raise InvalidParameterError("pool", "must hold at least queries_per_account questions", pool.shape[0])
    probes = np.asarray(probes, dtype=np.float64)
    paraphrases = np.asarray(paraphrases, dtype=np.float64)
    if probes.ndim != 2 or probes.shape[0] == 0 or probes.shape[1] != pool.shape[1]:
        raise InvalidParameterError("probes", "must be an (m, d) array with the pool's d", probes.shape)
    if (
        paraphrases.ndim != 3
        or paraphrases.shape[0] != probes.shape[0]
        or paraphrases.shape[2] != pool.shape[1]
        or paraphrases.shape[1] == 0
    ):
        raise InvalidParameterError("paraphrases", "must be an (m, I, d) array matching probes", paraphrases.shape)
    info = {
        "config": cfg,
        "seed": seed,
        "pool_size": pool.shape[0],
        "dim": pool.shape[1],
        "targets": probes.shape[0],
        "zeta_effective": cfg.zeta_for(pool.shape[1]),
    }
    pool_unit = unit_rows(pool)
    pool_gram = pool_unit @ pool_unit.T

    def make(rng, p, k):
        ids, acc, extra = _honest_trial(rng, cfg, pool, p, k, probes, paraphrases)
        table = np.concatenate([pool, extra])
        if extra.shape[0]:  # Gram of the table: the pool's (fixed) bordered by the trial's attack rows
            eu = unit_rows(extra)
            cross = eu @ pool_unit.T
            gram = np.block([[pool_gram, cross.T], [cross, eu @ eu.T]])
        else:
            gram = pool_gram
        return table[ids], acc, _GramSearch(gram, ids)

    return _run_cells("honest traffic", cfg, trials, attack_trials, seed, make, search, progress, info)


# ---------------------------------------------------------------------------------------------------------
# closed form of the toy null
# ---------------------------------------------------------------------------------------------------------


def sphere_cosine_tail(theta, dim: int) -> np.ndarray:
    """P(u·v >= θ) for independent uniform u, v on S^{dim-1}: ½·I_{1-θ²}((dim-1)/2, ½) for θ >= 0."""
    th = np.asarray(theta, dtype=np.float64)
    return 0.5 * betainc((dim - 1) / 2.0, 0.5, 1.0 - th * th)


def analytic_null_fpr(cfg: ToyConfig) -> dict[str, np.ndarray]:
    """Closed-form bounds on the toy null's P(ĉ >= 2) at every grid θ.

    ĉ >= 2 iff some cross-account pair inside the window is linked. Under the iid-sphere null the link
    events of distinct pairs are pairwise independent (two pairs sharing a query are independent given
    it, since u·v is uniform-tail whatever u), each with probability p = ``sphere_cosine_tail``. With M
    cross-account pairs in the window, Bonferroni gives S1 - S2 <= FPR <= S1, S1 = E[M]·p,
    S2 = E[C(M, 2)]·p² <= C(P_W, 2)·p² (P_W = number of position pairs within W); ``poisson`` is the
    Chen-Stein approximation 1 - exp(-S1). Under random interleaving E[M] = P_W·(1 - (n-1)/(N-1)).
    """
    N, n, W = cfg.n_queries, cfg.queries_per_account, cfg.effective_window
    W = min(W, N - 1)
    p_w = W * N - W * (W + 1) // 2
    m = p_w * (1 - (n - 1) / (N - 1))
    if W == N - 1:  # every pair: M is fixed
        m = N * (N - 1) / 2 - cfg.accounts * n * (n - 1) / 2
        s2_pairs = m * (m - 1) / 2
    else:
        s2_pairs = p_w * (p_w - 1) / 2
    p = sphere_cosine_tail(np.asarray(cfg.thetas), cfg.dim)
    s1 = m * p
    return {
        "theta": np.asarray(cfg.thetas),
        "pair_probability": p,
        "expected_pairs": np.full(p.shape, m),
        "upper": np.minimum(1.0, s1),
        "lower": np.clip(s1 - s2_pairs * p * p, 0.0, 1.0),
        "poisson": 1.0 - np.exp(-s1),
    }


# ---------------------------------------------------------------------------------------------------------
# clinic questions (texts only: the caller embeds them; no model library is imported here)
# ---------------------------------------------------------------------------------------------------------

#: P-C intents: 5 paraphrases of an extraction question about one patient's private detail (the canary)
ATTACK_PARAPHRASES = (
    "What is {name}'s {kind}?",
    "Tell me the {kind} of {name}.",
    "Which {kind} did {name} give the clinic?",
    "I need {name}'s {kind}, what is it?",
    "Can you look up the {kind} that {name} uses?",
)


def clinic_honest_questions(corpus, splits: Sequence[str] = ("dev", "test", "dependent")) -> list[str]:
    """The honest pool: every question of the clinic corpus in ``splits``, one entry per question item
    (texts shared by two items appear twice, as they would be asked)."""
    out = [q.question for q in corpus.questions if q.split in splits]
    if not out:
        raise InvalidParameterError("splits", "select no question of the corpus", tuple(splits))
    return out


def clinic_attack_questions(corpus, targets: int = 20, seed: int = 0) -> list[list[str]]:
    """For ``targets`` patients drawn uniformly (numpy, ``seed``), the 5 ``ATTACK_PARAPHRASES`` of the
    question extracting their private detail; the first one is P-A's probe."""
    canaries = list(corpus.canaries)
    targets = check_positive_int("targets", targets)
    if targets > len(canaries):
        raise InvalidParameterError("targets", "must be <= the number of records", targets)
    pick = np.random.default_rng([int(seed), zlib.crc32(b"attack-targets")]).choice(
        len(canaries), targets, replace=False
    )
    return [[t.format(name=canaries[i].name, kind=canaries[i].kind) for t in ATTACK_PARAPHRASES] for i in pick.tolist()]


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m dprag.lab.estimator_calibration [--trials T] [--attack-trials T'] [--window W] [--seed S]
    [--report-theta θ ...] [--save FILE.npz]``: the toy calibration (002 §5.5), printed as markdown."""
    import argparse
    import time

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--attack-trials", type=int, default=None)
    ap.add_argument("--window", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--report-theta",
        type=float,
        nargs="*",
        default=[0.80],
        help="also print TPR / ĉ at these grid θ (002's operating point 0.80 by default)",
    )
    ap.add_argument("--save", default=None, help="write every ĉ to this .npz file")
    a = ap.parse_args(argv)
    cfg = ToyConfig(window=a.window)
    t0 = time.perf_counter()
    res = run_toy_calibration(
        cfg,
        a.trials,
        a.seed,
        attack_trials=a.attack_trials,
        progress=lambda c: print(f"  {c} done ({time.perf_counter() - t0:.0f} s)", flush=True),
    )
    print(res.to_markdown(res.info["analytic"]))
    for th in a.report_theta:
        tpr, mc, ex = res.tpr(th), res.mean_c_hat(th), res.exact_recovery(th)
        cells = [
            f"{p} k={k}: TPR {tpr[(p, k)]:.2f}, mean ĉ {mc[(p, k)]:.2f}, exact {ex[(p, k)]:.2f}" for p, k in res.attacks
        ]
        print(f"At θ = {th:.2f} (FPR {res.fpr()[res._col(th)]:.3f}): " + "; ".join(cells))
    if a.save:
        np.savez_compressed(
            a.save, thetas=res.thetas, null=res.null, **{f"{p}_k{k}": v for (p, k), v in res.attacks.items()}
        )
    print(f"002 reports: {PAPER_002}; run time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
