"""(ε, δ, k)-collusion bounds for multi-tenant RAG (paper 002: "Auditing Privacy in Multi-Tenant RAG under
Account Collusion", §3 and §5), and a *certified* joint ε computed from the mechanism's actual parameters.

Setting (002 §2-3).  Each query of an account releases the tenant's retrieval-score vector plus i.i.d. Gaussian
noise N(0, σ²) per coordinate (or discrete Gaussian N_Z(0, σ²) on integer-quantised scores), before top-K.
Each of the k colluding accounts issues n queries; by Lemma 3.3 the coalition is one adaptive analyst with kn
queries, so the joint transcript is the adaptive kn-fold composition of the per-query mechanism.

Neighbouring relation (every bound here).  **Replace-one**: D and D' differ in one document of the target
tenant (002 Definition 2.2, D = D₀ ∪ {x*}, D' = D₀ ∪ {x*'}), the document keeping its position in the score
vector, so one query's score vector changes in one coordinate by at most Δ = sup_q |s(q, x*) − s(q, x*')|.
For raw cosine similarity of unit vectors Δ = 2 (x*' = −x*), **not 1** as 002 §3.5 assumes ("Δ ∈ (0, 1]");
Δ = 1 needs scores clipped to an interval of length 1.  Under add/remove the same formulas hold only if the
mechanism releases a fixed phantom score s₀ for an absent document, with Δ = sup |s(q, x) − s₀|.

What is exact and what is not.
* ``thm_3_4_leading`` (= (3.2)'s and (5.2)'s leading term √k·ε_acc·√(log(1/δ)/log(1/δ_acc))) is what 002
  prints (3.16 at k = 10, ε_acc = 1).  It is *not* an upper bound: with σ calibrated exactly to per-account
  (1, 10⁻⁶) over n = 10⁴ queries, k = 100 has an exact joint ε ≈ 11.0 at δ + kδ_acc = 1.01·10⁻⁴, above 10.00.
  Nor is it tight: with σ from (3.4) the exact joint ε at k = 10, δ = 10⁻⁶ is ≈ 0.347, nine times below 3.16.
* ``thm_3_4_closed_form`` (Lemma 3.2 with the residual kn·ε_q(e^{ε_q} − 1), at δ + kδ_acc) and
  ``thm_3_9_rdp`` ((3.6)) are valid upper bounds.
* ``certified_joint_epsilon`` is the exact ε of the composition (Gaussian DP, ``accounting.gdp``) with
  outward rounding, or, for the discrete Gaussian, the certified ε of its own lattice privacy-loss
  distribution.  A verdict must use this value.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from scipy.special import ndtr

from dprag.errors import InvalidParameterError

from . import gdp
from .errors import check_delta, check_epsilon, check_positive_int

NEIGHBOURING = (
    "replace-one: D and D' differ in one document of the target tenant (002 Definition 2.2), which keeps its "
    "position; each query's score vector changes in one coordinate by at most the score sensitivity"
)
SENSITIVITY_NOTE = (
    "score sensitivity: raw cosine similarity of unit vectors has sensitivity 2 under replace-one; 1 holds only "
    "if scores are clipped to an interval of length 1 (002 §3.5 assumes Delta <= 1 without clipping)"
)


# ----------------------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------------------


def _k(k: int) -> int:
    return check_positive_int("k", k)


def _n(n: int) -> int:
    return check_positive_int("n", n)


def _eps_acc(e: float) -> float:
    return check_epsilon("eps_acc", e)


def _delta_acc(d: float) -> float:
    return check_delta("delta_acc", d)


def _sens(s: float) -> float:
    return check_epsilon("sensitivity", s)


# ----------------------------------------------------------------------------------------------------------
# §3.2 per-query calibration
# ----------------------------------------------------------------------------------------------------------


def eq_3_1_per_query(eps_acc: float, delta_acc: float, n: int) -> tuple[float, float]:
    """(3.1): ε_q = ε_acc / √(2n log(1/δ_acc)), δ_q = δ_acc / n.

    Caveat (002 footnote 2, and Lemma 3.2 itself): n such queries compose to (ε_acc + n ε_q(e^{ε_q} − 1),
    2δ_acc), not exactly (ε_acc, δ_acc).  Neighbouring relation: replace-one (module docstring).
    """
    eps_acc, delta_acc, n = _eps_acc(eps_acc), _delta_acc(delta_acc), _n(n)
    return eps_acc / math.sqrt(2.0 * n * math.log(1.0 / delta_acc)), delta_acc / n


def eq_3_4_sigma(eps_acc: float, delta_acc: float, n: int, sensitivity: float = 1.0) -> float:
    """(3.4): σ = Δ √(2n log(1/δ_acc) · 2 log(1.25/δ_q)) / ε_acc with δ_q = δ_acc/n.

    This is the classical Gaussian mechanism (Dwork–Roth Thm A.1, σ = Δ√(2 log(1.25/δ_q))/ε_q, valid for
    ε_q < 1) applied to the per-query target (3.1).  Replace-one; Δ is the score sensitivity.
    """
    eps_acc, delta_acc, n, d = _eps_acc(eps_acc), _delta_acc(delta_acc), _n(n), _sens(sensitivity)
    dq = delta_acc / n
    return d * math.sqrt(2.0 * n * math.log(1.0 / delta_acc) * 2.0 * math.log(1.25 / dq)) / eps_acc


def thm_3_9_sigma(eps_acc: float, delta_acc: float, n: int, sensitivity: float = 1.0) -> float:
    """Theorem 3.9's calibration σ = Δ √(2n log(1/δ_acc)) / ε_acc ("per-account (ε_acc, δ_acc) via RDP (R3)").

    Disagreement with the paper: with this σ, (R3) at k = 1, δ = δ_acc gives ε_acc + ε_acc²/(4 log(1/δ_acc)),
    slightly *more* than ε_acc; and A.3 calls it "the same σ from (3.1)" although the σ that realises (3.1) is
    (3.4)'s, larger by √(2 log(1.25/δ_q)) (≈ 6.8 at n = 10⁴, δ_acc = 10⁻⁶).
    """
    eps_acc, delta_acc, n, d = _eps_acc(eps_acc), _delta_acc(delta_acc), _n(n), _sens(sensitivity)
    return d * math.sqrt(2.0 * n * math.log(1.0 / delta_acc)) / eps_acc


def exact_sigma(eps_acc: float, delta_acc: float, n: int, sensitivity: float = 1.0) -> float:
    """Beyond the paper: the smallest σ (rounded up) for which one account's n Gaussian queries are exactly
    (ε_acc, δ_acc)-DP (Gaussian DP / analytic Gaussian, ``accounting.gdp.gaussian_sigma_for``)."""
    return gdp.gaussian_sigma_for(_eps_acc(eps_acc), _delta_acc(delta_acc), _n(n), _sens(sensitivity))


# ----------------------------------------------------------------------------------------------------------
# §3.1, §3.4 advanced composition and Theorem 3.4
# ----------------------------------------------------------------------------------------------------------


def lemma_3_2_advanced_composition(eps0: float, delta0: float, m: int, delta_prime: float) -> tuple[float, float]:
    """Lemma 3.2 (Dwork–Rothblum–Vadhan 2010; Dwork–Roth Thm 3.20): m adaptive (ε₀, δ₀)-DP mechanisms are
    (√(2m log(1/δ')) ε₀ + m ε₀ (e^{ε₀} − 1), m δ₀ + δ')-DP.  Holds for every ε₀ > 0 (002 restricts to ε₀ ≤ 1,
    which the proof does not need).  Same neighbouring relation as the composed mechanisms.
    """
    eps0 = check_epsilon("eps0", eps0, allow_zero=True)
    delta0 = check_delta("delta0", delta0, allow_zero=True)
    m = check_positive_int("m", m)
    dp = check_delta("delta_prime", delta_prime)
    eps = math.sqrt(2.0 * m * math.log(1.0 / dp)) * eps0 + m * eps0 * math.expm1(eps0)
    return eps, m * delta0 + dp


def thm_3_4_leading(k: int, eps_acc: float, delta_acc: float, delta: float | None = None) -> float:
    """Leading term of Theorem 3.4, (3.2): √k · ε_acc · √(log(1/δ) / log(1/δ_acc)) (δ defaults to δ_acc).

    **Not an upper bound** (module docstring): the theorem's guarantee is this plus a positive residual, at
    δ + kδ_acc.  Replace-one.
    """
    k, eps_acc, delta_acc = _k(k), _eps_acc(eps_acc), _delta_acc(delta_acc)
    delta = delta_acc if delta is None else check_delta("delta", delta)
    return math.sqrt(k) * eps_acc * math.sqrt(math.log(1.0 / delta) / math.log(1.0 / delta_acc))


def thm_3_4_closed_form(
    k: int, eps_acc: float, delta_acc: float, n: int, delta: float | None = None, eps_q: float | None = None
) -> tuple[float, float]:
    """Theorem 3.4 with its residual and δ accounting: Lemma 3.2 with m = kn, ε₀ = ε_q, δ₀ = δ_q = δ_acc/n,
    δ' = δ, i.e. (√(2kn log(1/δ)) ε_q + kn ε_q (e^{ε_q} − 1),  δ + kδ_acc).

    ``eps_q`` defaults to (3.1)'s; pass the per-query ε that the actual σ certifies at δ_q when σ is not (3.4)'s.
    002 states the theorem for δ ≥ δ_acc; the formula is valid for every δ ∈ (0, 1).  Replace-one.
    """
    k, eps_acc, delta_acc, n = _k(k), _eps_acc(eps_acc), _delta_acc(delta_acc), _n(n)
    delta = delta_acc if delta is None else check_delta("delta", delta)
    eq, dq = eq_3_1_per_query(eps_acc, delta_acc, n)
    if eps_q is not None:
        eq = check_epsilon("eps_q", eps_q)
    eps, _ = lemma_3_2_advanced_composition(eq, dq, k * n, delta)
    return eps, delta + k * delta_acc


# ----------------------------------------------------------------------------------------------------------
# §3.7 Theorem 3.9 (RDP)
# ----------------------------------------------------------------------------------------------------------


def thm_3_9_rdp(k: int, n: int, sigma: float, delta: float, sensitivity: float = 1.0) -> tuple[float, float]:
    """Theorem 3.9, (3.6): ε = Δ√(2kn log(1/δ))/σ + knΔ²/(2σ²) at δ, attained at the optimal order
    α* = 1 + σ√(2 log(1/δ)/(knΔ²)); returns (ε, α*).

    kn-fold composition of the Gaussian's RDP αΔ²/(2σ²) (Mironov 2017, Prop. 7; for the discrete Gaussian the
    same curve is an upper bound, Canonne–Kamath–Steinke 2020) and the standard conversion (R3).  The paper's
    optimisation is correct.  Valid upper bound (no δ_acc term: RDP has no per-query δ).  Replace-one.
    """
    k, n = _k(k), _n(n)
    sigma = check_epsilon("sigma", sigma)
    delta = check_delta("delta", delta)
    d = _sens(sensitivity)
    m = k * n
    L = math.log(1.0 / delta)
    eps = d * math.sqrt(2.0 * m * L) / sigma + m * d * d / (2.0 * sigma * sigma)
    alpha = 1.0 + sigma * math.sqrt(2.0 * L / (m * d * d))
    return eps, alpha


# ----------------------------------------------------------------------------------------------------------
# §3.5 lower bound and §3.8 membership inference
# ----------------------------------------------------------------------------------------------------------


def thm_3_5_advantage(k: int, n: int, sigma: float, sensitivity: float = 1.0) -> float:
    """Theorem 3.5: exact advantage of the pooled-mean adversary A* on the scalar mechanism M* (3.3),
    Adv = 2Φ(Δ√(kn)/(2σ)) − 1 (= total variation between N(0, σ²/kn) and N(Δ, σ²/kn)).  Replace-one."""
    k, n = _k(k), _n(n)
    sigma = check_epsilon("sigma", sigma)
    d = _sens(sensitivity)
    return float(2.0 * ndtr(d * math.sqrt(k * n) / (2.0 * sigma)) - 1.0)


def cor_3_13_advantage_lower(k: int, eps_acc: float, delta_acc: float, n: int) -> float:
    """Corollary 3.13, (3.10): Adv(A*) ≥ (1/√(2π)) · √k ε_acc / (4√(log(1/δ_acc) log(1.25/δ_q))), δ_q = δ_acc/n.

    This is z/√(2π) with z = Δ√(kn)/(2σ) for σ from (3.4).  The paper's proof uses "Φ(z) − ½ ≥ z/√(2π) on
    [0, 1]", which is false (φ ≤ 1/√(2π) gives the reverse); the corollary still holds for z ≤ 1 because
    2(Φ(z) − ½) ≥ 2φ(1)z ≈ 0.48z (concavity of Φ on [0, ∞)), but it fails for large z (the bound exceeds 1).
    """
    k, eps_acc, delta_acc, n = _k(k), _eps_acc(eps_acc), _delta_acc(delta_acc), _n(n)
    dq = delta_acc / n
    z = math.sqrt(k) * eps_acc / (4.0 * math.sqrt(math.log(1.0 / delta_acc) * math.log(1.25 / dq)))
    return z / math.sqrt(2.0 * math.pi)


def lemma_3_11_advantage_upper(epsilon: float, delta: float) -> float:
    """Lemma 3.11, (3.8): an (ε, δ)-DP mechanism allows MIA advantage ≤ (e^ε − 1 + 2δ)/(e^ε + 1) ≤ tanh(ε/2) + δ.
    (Correct: the minimum of FPR + FNR over the (ε, δ) region is 2(1 − δ)/(1 + e^ε).)"""
    eps = check_epsilon("epsilon", epsilon, allow_zero=True, allow_inf=True)
    delta = check_delta("delta", delta, allow_zero=True)
    if eps == math.inf:
        return 1.0
    return min(1.0, 1.0 - 2.0 * (1.0 - delta) / (1.0 + math.exp(min(eps, 709.0))))


def cor_3_12_auc_upper(epsilon: float, delta: float) -> float:
    """Corollaries 3.12/3.13 with AUC = ½(1 + Adv): AUC ≤ ½(1 + tanh(ε/2) + δ), as 002 states it.

    **Not valid for every (ε, δ)-DP mechanism**: ½(1 + Adv) is the balanced accuracy of one threshold, not the
    ROC area.  The largest AUC under (ε, δ)-DP is ``auc_upper_bound`` = 1 − (1 − δ)²/(1 + e^ε), which exceeds
    this value whenever e^ε < 3 − 2δ and δ > 0.  Exact when δ = 0.
    """
    eps = check_epsilon("epsilon", epsilon, allow_zero=True, allow_inf=True)
    delta = check_delta("delta", delta, allow_zero=True)
    return min(1.0, 0.5 * (1.0 + math.tanh(eps / 2.0) + delta))


def auc_upper_bound(epsilon: float, delta: float) -> float:
    """Largest ROC AUC of any membership test against an (ε, δ)-DP mechanism: 1 − (1 − δ)²/(1 + e^ε).

    Area under the envelope TPR ≤ min(1, e^ε·FPR + δ, 1 − e^{−ε}(1 − δ − FPR)) of the (ε, δ) region (Kairouz,
    Oh & Viswanath 2015); attained by a mechanism, so tight.  Beyond the paper (replaces Cor. 3.12's AUC form).
    """
    eps = check_epsilon("epsilon", epsilon, allow_zero=True, allow_inf=True)
    delta = check_delta("delta", delta, allow_zero=True)
    if eps == math.inf:
        return 1.0
    return 1.0 - (1.0 - delta) ** 2 / (1.0 + math.exp(min(eps, 709.0)))


def pooled_mean_auc(k: int, n: int, sigma: float, sensitivity: float = 1.0) -> float:
    """Exact ROC AUC of the pooled-mean test on the scalar mechanism M*: Φ(Δ√(kn)/(√2 σ)).

    ȳ ~ N(m_b, σ²/(kn)) under either index, so AUC = P(ȳ₁ > ȳ₀) = Φ(Δ/√(2σ²/kn)).  It is also the largest
    AUC of *any* test on any kn Gaussian releases of sensitivity Δ: they are μ-GDP with μ = Δ√(kn)/σ (Dong–Roth–
    Su), whose trade-off curve has area Φ(μ/√2).  002's (3.11) has no constants; Figure 2's "½ + ½Φ(...)" is
    not an AUC (it is ¾ at zero signal).  Replace-one.
    """
    k, n = _k(k), _n(n)
    sigma = check_epsilon("sigma", sigma)
    d = _sens(sensitivity)
    return float(ndtr(d * math.sqrt(k * n) / (math.sqrt(2.0) * sigma)))


# ----------------------------------------------------------------------------------------------------------
# §5.6 audit formula
# ----------------------------------------------------------------------------------------------------------


def eq_5_2_delta_comp(k_max: int, delta_acc: float, delta_policy: float) -> float:
    """(5.2)'s reparametrisation δ_comp = δ_policy − k_max δ_acc; refuses δ_policy ≤ k_max δ_acc (C_policy's
    well-formedness constraint).  Note Theorem 3.4 is stated for δ ≥ δ_acc, i.e. δ_policy ≥ (k_max + 1)δ_acc."""
    k_max, delta_acc = check_positive_int("k_max", k_max), _delta_acc(delta_acc)
    delta_policy = check_delta("delta_policy", delta_policy)
    # compare the decimal values the user wrote (1e-5 vs 10 * 1e-6 must count as equal, hence refused)
    as_written = Decimal(repr(delta_policy)) > k_max * Decimal(repr(delta_acc))
    if not (as_written and delta_policy > k_max * delta_acc):
        raise InvalidParameterError(
            "delta_policy",
            f"must exceed k_max*delta_acc = {k_max * delta_acc!r} (002 §5.3 well-formedness)",
            delta_policy,
        )
    return delta_policy - k_max * delta_acc


def eq_5_2_audit(
    k_max: int, eps_acc: float, delta_acc: float, delta_policy: float, n: int | None = None
) -> dict[str, float]:
    """(5.2): ε_audit = √k_max ε_acc √(log(1/δ_comp)/log(1/δ_acc)) + O(k_max ε_acc²/log(1/δ_acc)) at δ_policy.

    Returns {"delta_comp", "leading"} and, if ``n`` is given, "closed_form" (Theorem 3.4 with residual at
    δ_comp, whose joint δ is exactly δ_policy).  The leading term is **not** a certified bound.
    """
    dc = eq_5_2_delta_comp(k_max, delta_acc, delta_policy)
    out = {"delta_comp": dc, "leading": thm_3_4_leading(k_max, eps_acc, delta_acc, dc)}
    if n is not None:
        out["closed_form"] = thm_3_4_closed_form(k_max, eps_acc, delta_acc, n, dc)[0]
    return out


# ----------------------------------------------------------------------------------------------------------
# Beyond the paper: the certified joint ε
# ----------------------------------------------------------------------------------------------------------


def _check_noise(noise: str) -> str:
    if noise not in ("gaussian", "discrete"):
        raise InvalidParameterError("noise", "must be 'gaussian' or 'discrete'", noise)
    return noise


def certified_joint_epsilon(
    k: int, n: int, sigma: float, delta: float, sensitivity: float = 1.0, noise: str = "gaussian"
) -> float:
    """Certified ε at ``delta`` of the coalition's kn adaptive releases (Lemma 3.3 + exact composition).

    Gaussian: exact GDP composition μ = Δ√(kn)/σ with outward rounding (``accounting.gdp``).  Discrete
    Gaussian (σ and integer Δ in quantised score units): its own lattice PLD, certified
    (``gdp.discrete_gaussian_epsilon``).  No δ_acc term: exact composition has no per-query failure
    probability.  Replace-one.
    """
    k, n = _k(k), _n(n)
    sigma = check_epsilon("sigma", sigma)
    delta = check_delta("delta", delta)
    noise = _check_noise(noise)
    if noise == "gaussian":
        return gdp.certified_gaussian_epsilon(sigma, delta, _sens(sensitivity), k * n)
    return gdp.discrete_gaussian_epsilon(sigma, sensitivity, k * n, delta).epsilon


def _joint(noise: str, sigma: float, sens: float, m: int, delta: float) -> tuple[float, float]:
    """(exact-or-lower, certified) ε of m releases at delta."""
    if noise == "gaussian":
        comp = gdp.GaussianComposition.of(sigma, sens, m)
        return comp.epsilon(delta), comp.certified_epsilon(delta)
    r = gdp.discrete_gaussian_epsilon(sigma, sens, m, delta)
    return r.lower, r.epsilon


def collusion_report(
    k: int,
    eps_acc: float,
    delta_acc: float,
    n: int,
    delta: float | None = None,
    sigma: float | None = None,
    sensitivity: float = 1.0,
    noise: str = "gaussian",
    calibration: str = "3.4",
    delta_policy: float | None = None,
) -> dict[str, Any]:
    """Every 002 bound for one configuration next to the certified joint ε (used by ``dprag accounting collusion``).

    k accounts × n queries each, per-account target (ε_acc, δ_acc); ``delta`` (default δ_acc) is the δ at which
    ``exact``/``certified``/``rdp`` are reported and the composition slack of Theorem 3.4 (whose guarantee is at
    ``delta_joint`` = δ + kδ_acc).  Without ``sigma``, σ is calibrated by ``calibration``: "3.4" (default: (3.1)
    with the classical Gaussian mechanism, as 002 does), "exact" (n-fold composition exactly (ε_acc, δ_acc)),
    or "3.9" (Theorem 3.9's).  ``noise="discrete"`` treats σ and an integer ``sensitivity`` in quantised units.
    Raises InvalidParameterError on bad input before computing anything.
    """
    k, eps_acc, delta_acc, n = _k(k), _eps_acc(eps_acc), _delta_acc(delta_acc), _n(n)
    noise = _check_noise(noise)
    sens = _sens(sensitivity)
    if noise == "discrete":
        if int(sens) != sens:
            raise InvalidParameterError("sensitivity", "must be an integer >= 1 for the discrete Gaussian", sensitivity)
        sens = int(sens)
    delta = delta_acc if delta is None else check_delta("delta", delta)
    delta_joint = delta + k * delta_acc
    if not delta_joint < 1.0:
        raise InvalidParameterError("delta", "delta + k*delta_acc must be < 1 (Theorem 3.4's joint delta)", delta)
    if calibration not in ("3.4", "exact", "3.9"):
        raise InvalidParameterError("calibration", "must be '3.4', 'exact' or '3.9'", calibration)
    if delta_policy is not None:
        delta_comp = eq_5_2_delta_comp(k, delta_acc, delta_policy)
    if sigma is not None:
        sigma = check_epsilon("sigma", sigma)

    notes = []
    sigma_34 = eq_3_4_sigma(eps_acc, delta_acc, n, sens)
    if sigma is None:
        if calibration == "3.4":
            sigma = sigma_34
            source = "calibrated: per-query (eps_q, delta_q) of (3.1) with the classical Gaussian mechanism, eq. (3.4)"
        elif calibration == "exact":
            sigma = exact_sigma(eps_acc, delta_acc, n, sens)
            source = "calibrated: n-fold Gaussian composition exactly (eps_acc, delta_acc)-DP (Gaussian DP)"
        else:
            sigma = thm_3_9_sigma(eps_acc, delta_acc, n, sens)
            source = "calibrated: Theorem 3.9's sigma = Delta*sqrt(2n log(1/delta_acc))/eps_acc"
    else:
        source = "given (--sigma)"

    m = k * n
    eps_q31, delta_q = eq_3_1_per_query(eps_acc, delta_acc, n)
    if noise == "gaussian" and eps_q31 < 1.0 and sigma >= sigma_34:
        eps_q, eps_q_source = eps_q31, "(3.1): sigma >= (3.4)'s, classical Gaussian mechanism applies"
    else:
        if noise == "gaussian":
            eps_q = gdp.certified_gaussian_epsilon(sigma, delta_q, sens, 1)
        else:
            eps_q = gdp.discrete_gaussian_epsilon(sigma, sens, 1, delta_q).epsilon
        eps_q_source = "certified per-query epsilon of the actual sigma at delta_q"
        if noise == "discrete":
            notes.append(
                "discrete Gaussian: Theorem 3.4 is evaluated with the certified per-query epsilon of N_Z(0, sigma^2)"
            )
        else:
            notes.append(
                "Theorem 3.4's hypothesis (3.1) is not met by sigma: it is evaluated with the per-query epsilon "
                "sigma gives"
            )

    leading = thm_3_4_leading(k, eps_acc, delta_acc, delta)
    closed, _ = thm_3_4_closed_form(k, eps_acc, delta_acc, n, delta, eps_q=eps_q)
    rdp, alpha = thm_3_9_rdp(k, n, sigma, delta, sens)
    exact, certified = _joint(noise, sigma, sens, m, delta)
    exact_j, certified_j = _joint(noise, sigma, sens, m, delta_joint)
    _, per_account = _joint(noise, sigma, sens, n, delta_acc)

    from .events import GaussianEvent, SelfComposedEvent
    from .rdp import epsilon_of

    rdp_acc = epsilon_of(SelfComposedEvent(GaussianEvent(float(sigma), float(sens)), m), delta)[0]

    report: dict[str, Any] = {
        "k": k,
        "n": n,
        "eps_acc": eps_acc,
        "delta_acc": delta_acc,
        "delta": delta,
        "delta_joint": delta_joint,
        "noise": noise,
        "sensitivity": sens,
        "neighbouring": NEIGHBOURING,
        "sigma": float(sigma),
        "sigma_source": source,
        "sigma_eq_3_4": sigma_34,
        "eps_q": eps_q,
        "eps_q_source": eps_q_source,
        "delta_q": delta_q,
        "leading": leading,
        "closed_form": closed,
        "rdp": rdp,
        "rdp_alpha": alpha,
        "rdp_accountant": rdp_acc,
        "exact": exact,
        "certified": certified,
        "exact_at_delta_joint": exact_j,
        "certified_at_delta_joint": certified_j,
        "leading_is_upper_bound": bool(leading >= certified_j),
        "per_account_certified": per_account,
        "per_account_meets_eps_acc": bool(per_account <= eps_acc),
        "mia": {
            "advantage_lemma_3_11_upper": lemma_3_11_advantage_upper(certified, delta),
            "auc_upper_bound": auc_upper_bound(certified, delta),
            "auc_cor_3_12_paper_form": cor_3_12_auc_upper(certified, delta),
        },
        "notes": notes,
    }
    if noise == "gaussian":
        report["mu"] = gdp.gdp_mu(sigma, sens, m)
        report["mia"].update(
            {
                "advantage_thm_3_5": thm_3_5_advantage(k, n, sigma, sens),
                "auc_pooled_mean": pooled_mean_auc(k, n, sigma, sens),
            }
        )
        if source.startswith("calibrated: per-query"):
            report["mia"]["advantage_cor_3_13_lower"] = cor_3_13_advantage_lower(k, eps_acc, delta_acc, n)
    else:
        report["exact_is_lower_bound"] = True
        notes.append(
            "discrete Gaussian: 'exact' is a certified lower end of the exact epsilon, 'certified' the upper end"
        )
    if delta_policy is not None:
        audit = eq_5_2_audit(k, eps_acc, delta_acc, delta_policy)
        audit["delta_policy"] = float(delta_policy)
        audit["closed_form"] = thm_3_4_closed_form(k, eps_acc, delta_acc, n, delta_comp, eps_q=eps_q)[0]
        audit["certified"] = _joint(noise, sigma, sens, m, float(delta_policy))[1]
        report["audit"] = audit
    if sens < 2:
        notes.append(SENSITIVITY_NOTE)
    if not report["leading_is_upper_bound"]:
        notes.append(
            "the leading term sqrt(k)*eps_acc... of (3.2)/(5.2) is below the certified joint epsilon: "
            "it is not an upper bound here"
        )
    if not report["per_account_meets_eps_acc"]:
        notes.append("sigma does not meet the per-account (eps_acc, delta_acc) target under exact composition")
    return report
