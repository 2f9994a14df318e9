"""The multi-tenant top-K harness of 002 §4.4 (Figure 2(b)) and §4.7 (same-tenant vs external under M4).

Per trial (geometry from the trial's own stream, shared by both worlds of the pair): a probe q* uniform on the
unit sphere of R^d, ``n_background`` background documents uniform on the sphere, and the target slot at a uniform
position: x* = q* (target in) or x*' a unit vector orthogonal to q* (replaced; replace-one, cosine gap 1).
Scores exactly as the provider serves them (``audit.provider.service.ProviderService``): embeddings quantised at scale S
(``audit.protocol.commitments.quantise_embeddings``), integer scores clip(E·Q, 0, S²) >> log2 S
(``audit.protocol.commitments.integer_scores``), noise from the policy's discrete Gaussian table
(``audit.protocol.retrieval.noise_table(σ, 10, 64)``), one value per document per query, then top-K of score +
noise with
ties to the smaller id (``audit.protocol.retrieval.noisy_top_k``'s rule; ``target_in_noisy_top_k`` is its vectorised
membership test, checked against it in tests/lab/test_leakage_topk.py). Noise first, select second.

Regimes: ``same-tenant``: the k accounts query the victim tenant's index (n_background + 1 documents).
``external-m4``: the k accounts belong to another tenant whose own ``n_background`` documents sit in the same
shared backend index as the victim's (M4, 002 Remark 2.1: "an over-broad shared index"), so every query is
scored against both tenants' documents. Without M4 an external account never sees the victim index (zero leakage).

Statistic (the user-observable one of 002 §4.4): the number of the kn queries whose top-K holds the target slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dprag.accounting.errors import check_positive_int
from dprag.audit.protocol.commitments import integer_scores, quantise_embeddings
from dprag.audit.protocol.retrieval import noise_table
from dprag.errors import InvalidParameterError
from dprag.lab.leakage.montecarlo import trial_rng, trial_source

REGIMES = ("same-tenant", "external-m4")
TABLE_TAIL, TABLE_BITS = 10.0, 64  # the policy's sampler (audit.protocol.policy.Policy.recommended)


def score_sensitivity(scale: int) -> int:
    """Integer score sensitivity of clipped scores, as the policy sets it: (S² >> log2 S) + 1."""
    shift = scale.bit_length() - 1
    return ((scale * scale) >> shift) + 1


def target_in_noisy_top_k(scores: np.ndarray, noise: np.ndarray, target: int, K: int) -> np.ndarray:
    """Row-wise: is ``target`` among the K largest scores + noise[r] (ties to the smaller id)?  (m,) bool."""
    s = np.asarray(scores, dtype=np.int64)[None, :] + np.asarray(noise, dtype=np.int64)
    st = s[:, target][:, None]
    ids = np.arange(s.shape[1])[None, :]
    ahead = (s > st) | ((s == st) & (ids < target))
    return ahead.sum(axis=1) < K


def _unit(rng, shape):
    v = rng.standard_normal(shape)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@dataclass(frozen=True)
class TopKCell:
    k: int
    n: int
    eps_acc: float
    delta_acc: float
    sigma: float  # in integer score units
    regime: str = "same-tenant"
    K: int = 5
    n_background: int = 50
    d: int = 32
    scale: int = 1 << 10
    calibration: str = "exact"
    key: str = field(default="", compare=False)

    def __post_init__(self):
        if self.regime not in REGIMES:
            raise InvalidParameterError("regime", f"must be one of {REGIMES}", self.regime)
        check_positive_int("K", self.K)
        if self.K > self.n_background:
            raise InvalidParameterError("K", "must be <= n_background", self.K)
        if not self.key:
            object.__setattr__(
                self,
                "key",
                f"topk/{self.regime}/k={self.k}/n={self.n}/eps={self.eps_acc!r}/dacc="
                f"{self.delta_acc!r}/sigma={self.sigma!r}/K={self.K}/bg={self.n_background}"
                f"/d={self.d}/S={self.scale}",
            )

    @property
    def sensitivity(self) -> int:
        return score_sensitivity(self.scale)

    @property
    def columns(self) -> list[str]:
        return ["hits_in", "hits_out"]


def geometry(cell: TopKCell, seed: bytes, t: int):
    """(integer scores in world 'in', in world 'out', target position) of trial t."""
    rng = trial_rng(seed, cell.key, t, "geometry")
    q = _unit(rng, (cell.d,))
    u = rng.standard_normal(cell.d)
    u -= (u @ q) * q
    decoy = u / np.linalg.norm(u)
    bg = _unit(rng, (cell.n_background, cell.d))
    pos = int(rng.integers(0, cell.n_background + 1))
    other = _unit(rng, (cell.n_background, cell.d)) if cell.regime == "external-m4" else np.empty((0, cell.d))
    shift = cell.scale.bit_length() - 1
    qq = quantise_embeddings(q[None, :], cell.scale)[0]
    out = []
    for x in (q, decoy):
        docs = np.concatenate([bg[:pos], x[None, :], bg[pos:], other])
        out.append(integer_scores(quantise_embeddings(docs, cell.scale), qq, (0, cell.scale * cell.scale), shift))
    return out[0], out[1], pos


def topk_trials(cell: TopKCell, seed: bytes, start: int, stop: int) -> np.ndarray:
    """Trials [start, stop): rows [hits_in, hits_out] (counts of queries whose top-K holds the target slot)."""
    table = noise_table(cell.sigma, TABLE_TAIL, TABLE_BITS)
    m = cell.k * cell.n
    rows = np.empty((stop - start, 2))
    for i, t in enumerate(range(start, stop)):
        s_in, s_out, pos = geometry(cell, seed, t)
        for j, (w, s) in enumerate((("in", s_in), ("out", s_out))):
            z = table.sample(m * s.size, trial_source(seed, cell.key, t, w)).reshape(m, s.size)
            rows[i, j] = int(target_in_noisy_top_k(s, z, pos, cell.K).sum())
    return rows
