"""Property tests: the filter never admits a charge beyond a document's budget, under arbitrary sequences
and interleavings of charges and batches, in pure-ε and RDP modes, on both stores.

The oracle is an independent brute-force model written here with Python integers and
``fractions.Fraction`` (no numpy, no code from accounting/filters.py):

* units: a cost c is ceil(c·2^32) units, a budget B is floor(B·2^32) units, as the spec defines;
  the filter's decisions must equal the model's exactly;
* soundness, in exact rationals and independent of units: for every document and order, the sum of the
  costs of its admitted charges is <= B;
* near-completeness: a refusal only happens when the exact spend plus the cost exceeds B minus the
  rounding slack (k + 2)·2^-32, k = the document's number of admitted charges.
"""

from __future__ import annotations

import math
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprag.accounting.filters import IndividualRenyiFilter
from dprag.accounting.stores import MemoryBudgetStore, SqliteBudgetStore

TWO32 = 2**32
SLACK = Fraction(1, TWO32)


class Model:
    """Brute-force reference filter."""

    def __init__(self, n_docs: int, budget: list[float]):
        self.budget = [Fraction(b) for b in budget]
        self.limit = [math.floor(b * TWO32) for b in self.budget]
        k = len(budget)
        self.units = [[0] * k for _ in range(n_docs)]
        self.exact = [[Fraction(0)] * k for _ in range(n_docs)]
        self.count = [0] * n_docs

    @staticmethod
    def cost_units(c: float):
        return math.inf if math.isinf(c) else math.ceil(Fraction(c) * TWO32)

    def charge(self, ids, cost: list[float]) -> list[bool]:
        u = [self.cost_units(c) for c in cost]
        out = []
        for z in ids:
            ok = all(self.units[z][j] + u[j] <= self.limit[j] for j in range(len(u)))
            if ok:
                for j, c in enumerate(cost):
                    self.units[z][j] += u[j]
                    self.exact[z][j] += Fraction(c)
                self.count[z] += 1
            else:
                # near-completeness: refused only if some order is (almost) exhausted in exact terms
                k = self.count[z]
                assert any(
                    math.isinf(c) or self.exact[z][j] + Fraction(c) > self.budget[j] - (k + 2) * SLACK
                    for j, c in enumerate(cost)
                ), "refused although the exact spend had room beyond the rounding slack"
            out.append(ok)
        return out

    def check_sound(self):
        for z in range(len(self.units)):
            for j in range(len(self.limit)):
                assert self.exact[z][j] <= self.budget[j], "admitted spend exceeds the budget"


special = st.sampled_from([0.0, 0.1, 0.2, 0.3, 1 / 3, 0.25, 0.5, 0.7, 1.0, 2.0**-32, 1e-300, math.inf])
cost_value = st.one_of(special, st.floats(0.0, 12.0, allow_nan=False, allow_infinity=False))
budget_value = st.one_of(st.sampled_from([1.0, 0.3, 1 / 3, 2.5]), st.floats(0.01, 10.0, allow_nan=False))


@st.composite
def scenario(draw):
    n = draw(st.integers(1, 7))
    mode = draw(st.sampled_from(["pure", "rdp"]))
    k = 1 if mode == "pure" else draw(st.integers(1, 4))
    budget = [draw(budget_value) for _ in range(k)]

    def request():
        ids = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
        cost = [draw(cost_value) for _ in range(k)]
        return ids, cost

    ops = []
    for _ in range(draw(st.integers(1, 30))):
        handle = draw(st.integers(0, 1))
        if draw(st.booleans()):
            ops.append((handle, [request()]))
        else:
            ops.append((handle, [request() for _ in range(draw(st.integers(1, 4)))]))
    return n, mode, budget, ops


def _as_cost(mode, cost):
    return cost[0] if mode == "pure" else np.asarray(cost)


def _run(store_factory, n, mode, budget, ops):
    orders = None if mode == "pure" else tuple(2.0 + i for i in range(len(budget)))
    b = budget[0] if mode == "pure" else budget
    stores = store_factory(n)
    filters = [IndividualRenyiFilter(s, b, orders=orders) for s in stores]
    model = Model(n, budget)
    for handle, reqs in ops:
        f = filters[handle % len(filters)]
        if len(reqs) == 1:
            res = [f.try_charge(reqs[0][0], _as_cost(mode, reqs[0][1]))]
        else:
            res = f.try_charge_many([(ids, _as_cost(mode, c)) for ids, c in reqs])
        for (ids, cost), r in zip(reqs, res, strict=False):
            expected = model.charge(ids, cost)
            assert r.mask.tolist() == expected
            assert r.admitted.tolist() == [z for z, ok in zip(ids, expected, strict=False) if ok]
        model.check_sound()
    for f in filters:  # every handle sees the same committed state
        rows = f.spent_units(range(n))
        assert rows.tolist() == model.units
        assert np.all(rows <= f.budget.limits)
    for s in stores:
        s.close()


@settings(max_examples=150)
@given(scenario())
def test_memory_filter_never_overspends(sc):
    n, mode, budget, ops = sc
    _run(lambda n_: [MemoryBudgetStore(n_)], n, mode, budget, ops)


@settings(max_examples=40)
@given(scenario())
def test_sqlite_filter_never_overspends_with_two_interleaved_handles(sc):
    # Two store objects (two SQLite connections) on one file, charges interleaved arbitrarily between them.
    n, mode, budget, ops = sc
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.db"
        _run(
            lambda n_: [
                SqliteBudgetStore(path, n_, synchronous="NORMAL"),
                SqliteBudgetStore(path, n_, synchronous="NORMAL"),
            ],
            n,
            mode,
            budget,
            ops,
        )


@pytest.mark.slow
@settings(max_examples=2000)
@given(scenario())
def test_memory_filter_never_overspends_large_sweep(sc):
    n, mode, budget, ops = sc
    _run(lambda n_: [MemoryBudgetStore(n_)], n, mode, budget, ops)
