"""Issue 10 item 1: the discrete Gaussian's PLD is the lattice mechanism's own, never a continuous Gaussian's.

References (tests/accounting/_reference_pld.py): the exact PLD of m releases of N_Z(0, σ²) by brute-force convolution in
40-digit mpmath. Deterministic: no randomness.
"""

import math

import dp_accounting
import pytest
from _reference_pld import dg_exact_delta, dg_exact_epsilon

from dprag.accounting.composition import PldAccountant, RdpAccountant
from dprag.accounting.composition import pld as pld_module
from dprag.accounting.events import ComposedEvent, DiscreteGaussianEvent, GaussianEvent, PoissonSampledEvent
from dprag.errors import UnsupportedEventError


@pytest.mark.parametrize("sigma, count, delta, exact_printed", [(1.0, 10, 1e-6, 19.4916), (3.0, 5, 1e-9, 4.4763)])
def test_pld_of_discrete_gaussian_is_at_least_the_exact_epsilon(sigma, count, delta, exact_printed):
    # Before the fix the event went to dp_accounting as a continuous GaussianDpEvent: 19.4237 and 4.4747.
    exact = dg_exact_epsilon(sigma, 1, count, delta)
    assert exact == pytest.approx(exact_printed, abs=1e-4)  # the figures
    got = PldAccountant().compose(DiscreteGaussianEvent(sigma), count).get_epsilon(delta)
    assert got >= exact, (got, exact)
    assert got <= exact + 1e-3  # and tight: pessimistic connect-the-dots on a 1e-4 grid
    # the true δ at the reported ε is within the budget
    assert dg_exact_delta(sigma, 1, count, got) <= delta


def test_pld_get_delta_of_discrete_gaussian_is_an_upper_bound():
    acc = PldAccountant().compose(DiscreteGaussianEvent(1.0), 10)
    for eps in (5.0, 12.0, 19.4237):
        assert acc.get_delta(eps) >= float(dg_exact_delta(1.0, 1, 10, eps))


def test_sampler_tv_and_truncation_enter_the_pld_as_a_tv_term():
    assert hasattr(pld_module, "discrete_gaussian_truncation"), "the PLD must account for the truncated mass"
    t, tau = pld_module.discrete_gaussian_truncation(2.0, 1)
    assert t == math.ceil(15.3 * 2.0) + 1 and 0 < tau < 1e-50
    exact = PldAccountant().compose(DiscreteGaussianEvent(2.0), 4)
    tv = 1e-9
    inexact = PldAccountant().compose(DiscreteGaussianEvent(2.0, sampler_tv=tv), 4)
    eps = 3.0
    assert inexact.get_delta(eps) >= exact.get_delta(eps) + (1 + math.exp(eps)) * 4 * tv * (1 - 1e-12)
    e = inexact.get_epsilon(1e-6)
    assert e > exact.get_epsilon(1e-6)
    assert inexact.get_delta(e) <= 1e-6 * (1 + 1e-9)


def test_poisson_sampled_discrete_gaussian_uses_the_lattice_pld():
    assert hasattr(pld_module, "discrete_gaussian_truncation"), "the PLD must account for the truncated mass"
    acc = PldAccountant().compose(PoissonSampledEvent(0.1, DiscreteGaussianEvent(1.0)), 20)
    ref = dp_accounting.pld.privacy_loss_distribution.from_discrete_gaussian_mechanism(
        1.0,
        sampling_prob=0.1,
        truncation_bound=pld_module.discrete_gaussian_truncation(1.0, 1)[0],
        use_connect_dots=True,
    ).self_compose(20)
    # equal up to FFT rounding (the accountant composes onto its empty PLD first)
    assert acc.get_epsilon(1e-6) == pytest.approx(float(ref.get_epsilon_for_delta(1e-6)), rel=1e-9)
    # before the fix: the continuous subsampled Gaussian's PLD
    cont = PldAccountant().compose(PoissonSampledEvent(0.1, GaussianEvent(1.0)), 20).get_epsilon(1e-6)
    assert acc.get_epsilon(1e-6) - cont > 1e-5


def test_discrete_gaussian_exports_as_zcdp_event():
    # issue 8 §2: dp_accounting has no discrete-Gaussian event; ours exports as ZCDpEvent(Δ²/(2σ²)), which
    # dp_accounting's RDP accountant counts (same curve as ours) and its PLD accountant refuses.
    ev = DiscreteGaussianEvent(2.0, sensitivity=3)
    dpe = ev.to_dp_event()
    assert isinstance(dpe, dp_accounting.ZCDpEvent) and dpe.rho == pytest.approx(9 / 8, rel=1e-15)
    assert not dp_accounting.pld.PLDAccountant().supports(dpe)
    assert not dp_accounting.pld.PLDAccountant().supports(ComposedEvent((GaussianEvent(1.0), ev)).to_dp_event())
    theirs = dp_accounting.rdp.RdpAccountant().compose(dpe, 7)
    ours = RdpAccountant().compose(ev, 7)
    assert ours.get_epsilon(1e-6) == pytest.approx(theirs.get_epsilon(1e-6), rel=1e-9)
    with pytest.raises(UnsupportedEventError, match="sampler_tv"):
        DiscreteGaussianEvent(2.0, sampler_tv=1e-9).to_dp_event()
