"""Rank-1 constraint systems over F_r: a builder with witness generation, and the compiled R1CS.

A constraint is ``<A, w> * <B, w> = <C, w>`` for linear combinations A, B, C of the witness ``w``, where ``w[0] = 1``
and, after ``compile()``, ``w[1..n_public]`` are the public signals (circom / snarkjs order: the constant one, then
the public signals, then the private ones).

Building a circuit records two things: the constraints, and *hints* -- small functions that compute new witness
values from earlier ones (like a circom witness calculator). ``R1CS.witness(inputs)`` replays the hints on the
named inputs, so one compiled circuit (and one setup) serves every witness.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast, overload

from dprag.errors import DpragError, InvalidParameterError
from dprag.zk.field import R


class UnsatisfiedError(DpragError):
    """The witness does not satisfy a constraint (names the constraint index and its label)."""

    def __init__(self, index: int, label: str):
        self.index = index
        self.label = label
        super().__init__(f"constraint {index} ({label or 'unlabelled'}) is not satisfied by the witness")


class LC:
    """A linear combination sum(coeff * w[var]) with ``terms = {var: coeff}`` (coefficients mod r, no zeros)."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[int, int] | None = None):
        self.terms = terms if terms is not None else {}

    @staticmethod
    def const(c: int) -> LC:
        c %= R
        return LC({0: c} if c else {})

    @staticmethod
    def _coerce(other: object) -> LC | None:
        """``other`` as an LC (an int as a constant); None for any other type."""
        if isinstance(other, LC):
            return other
        if isinstance(other, int):
            return LC.const(other)
        return None

    def __add__(self, other: LC | int) -> LC:
        o = LC._coerce(other)
        if o is None:
            return NotImplemented
        t = dict(self.terms)
        for k, v in o.terms.items():
            nv = (t.get(k, 0) + v) % R
            if nv:
                t[k] = nv
            else:
                t.pop(k, None)
        return LC(t)

    __radd__ = __add__

    def __neg__(self) -> LC:
        return LC({k: R - v for k, v in self.terms.items()})

    def __sub__(self, other: LC | int) -> LC:
        o = LC._coerce(other)
        if o is None:
            return NotImplemented
        return self + (-o)

    def __rsub__(self, other: LC | int) -> LC:
        return (-self) + other

    def __mul__(self, k: int) -> LC:
        if not isinstance(k, int):
            return NotImplemented
        k %= R
        if k == 0:
            return LC()
        return LC({v: c * k % R for v, c in self.terms.items()})

    __rmul__ = __mul__

    def is_const(self) -> bool:
        return all(k == 0 for k in self.terms)

    def eval(self, w: Sequence[int]) -> int:
        return sum(c * w[v] for v, c in self.terms.items()) % R

    def __repr__(self) -> str:
        return f"LC({self.terms})"


def lc_sum(items: Iterable[LC | int]) -> LC:
    t: dict[int, int] = {}
    for it in items:
        it = it if isinstance(it, LC) else LC.const(it)
        for k, v in it.terms.items():
            t[k] = (t.get(k, 0) + v) % R
    return LC({k: v for k, v in t.items() if v})


ONE = LC({0: 1})

Hint = Callable[..., "int | Sequence[int]"]
HintEntry = tuple[list[int], Hint, list[LC | int]]  # (output variables, hint, its inputs)
Constraint = tuple[dict[int, int], dict[int, int], dict[int, int]]  # A, B, C as {variable: coefficient}


@dataclass
class R1CS:
    """A compiled constraint system (variables renumbered: 0 = one, 1..n_public = public, then private)."""

    n_vars: int
    n_public: int
    constraints: list[tuple[dict[int, int], dict[int, int], dict[int, int]]]
    labels: list[str]
    input_names: dict[str, list[int]]  # name -> final variable indices
    public_names: list[str]
    _hints: list[HintEntry] = field(default_factory=list, repr=False)
    _perm: list[int] = field(default_factory=list, repr=False)  # build index -> final index
    _inputs_build: dict[str, list[int]] = field(default_factory=dict, repr=False)

    @property
    def n_constraints(self) -> int:
        return len(self.constraints)

    def witness(self, inputs: dict[str, int | Sequence[int]]) -> list[int]:
        """The full witness for named ``inputs`` (each an int or a list of ints in (-r, r); a negative x stands for
        the field element r - |x|). Raises InvalidParameterError naming a missing, unknown or malformed input."""
        n = self.n_vars
        wb = [0] * n
        wb[0] = 1
        missing = set(self._inputs_build) - set(inputs)
        if missing:
            raise InvalidParameterError("inputs", f"missing circuit inputs {sorted(missing)}", sorted(inputs))
        for name, value in inputs.items():
            idx = self._inputs_build.get(name)
            if idx is None:
                raise InvalidParameterError("inputs", f"unknown circuit input {name!r}", name)
            vals = [value] if isinstance(value, int) else list(value)
            if len(vals) != len(idx):
                raise InvalidParameterError(name, f"needs {len(idx)} values", len(vals))
            for i, v in zip(idx, vals, strict=False):
                if isinstance(v, bool) or not isinstance(v, int) or not -R < v < R:
                    raise InvalidParameterError(name, "values must be integers in (-r, r)", v)
                wb[i] = v % R
        for outs, fn, ins in self._hints:
            vals = [lc.eval(wb) if isinstance(lc, LC) else lc for lc in ins]
            res = fn(*vals)
            if len(outs) == 1 and isinstance(res, int):
                wb[outs[0]] = res % R
            else:
                res = list(cast("Sequence[int]", res))  # several outputs: the hint returns a sequence
                if len(res) != len(outs):
                    raise DpragError(f"hint returned {len(res)} values for {len(outs)} variables")
                for o, v in zip(outs, res, strict=False):
                    wb[o] = v % R
        w = [0] * n
        for b, f in enumerate(self._perm):
            w[f] = wb[b]
        return w

    def public_values(self, w: Sequence[int]) -> list[int]:
        return list(w[1 : 1 + self.n_public])

    def check(self, w: Sequence[int]) -> None:
        """Raise UnsatisfiedError naming the first constraint ``w`` violates."""
        if len(w) != self.n_vars or w[0] != 1:
            raise InvalidParameterError("witness", f"must have {self.n_vars} values with w[0] = 1", len(w))
        for i, (a, b, c) in enumerate(self.constraints):
            av = sum(k * w[v] for v, k in a.items())
            bv = sum(k * w[v] for v, k in b.items())
            cv = sum(k * w[v] for v, k in c.items())
            if (av * bv - cv) % R:
                raise UnsatisfiedError(i, self.labels[i])

    def is_satisfied(self, w: Sequence[int]) -> bool:
        try:
            self.check(w)
        except UnsatisfiedError:
            return False
        return True


class ConstraintSystem:
    """Builder. Variables are created by ``input`` (named circuit inputs) or ``alloc`` (computed by a hint); public
    signals by ``public`` (a copy of a value, constrained equal to it)."""

    def __init__(self) -> None:
        self.n_vars = 1
        self.constraints: list[Constraint] = []
        self.labels: list[str] = []
        self.hints: list[HintEntry] = []
        self.publics: list[int] = []
        self.public_names: list[str] = []
        self.inputs: dict[str, list[int]] = {}
        self._label = ""

    # ---------------------------------------------------------------- variables
    def _new(self) -> int:
        i = self.n_vars
        self.n_vars += 1
        return i

    @overload
    def input(self, name: str, n: None = None, public: bool = False) -> LC: ...
    @overload
    def input(self, name: str, n: int, public: bool = False) -> list[LC]: ...
    def input(self, name: str, n: int | None = None, public: bool = False) -> LC | list[LC]:
        """A named circuit input (a scalar, or a vector of ``n``). Public inputs become public signals."""
        if name in self.inputs:
            raise InvalidParameterError("name", "input names must be unique", name)
        count = 1 if n is None else n
        idx = [self._new() for _ in range(count)]
        self.inputs[name] = idx
        if public:
            for j, i in enumerate(idx):
                self.publics.append(i)
                self.public_names.append(name if n is None else f"{name}[{j}]")
        lcs = [LC({i: 1}) for i in idx]
        return lcs[0] if n is None else lcs

    def alloc(self, fn: Hint, *ins: LC | int) -> LC:
        """One new variable whose witness value is ``fn(*values of ins)``. Unconstrained until you constrain it."""
        i = self._new()
        self.hints.append(([i], fn, list(ins)))
        return LC({i: 1})

    def alloc_many(self, n: int, fn: Hint, *ins: LC | int) -> list[LC]:
        idx = [self._new() for _ in range(n)]
        self.hints.append((idx, fn, list(ins)))
        return [LC({i: 1}) for i in idx]

    def public(self, name: str, value: LC) -> LC:
        """Expose ``value`` as the next public signal."""
        v = self.alloc(lambda x: x, value)
        (i,) = v.terms
        self.publics.append(i)
        self.public_names.append(name)
        self.enforce(value, ONE, v, "public " + name)
        return v

    # ---------------------------------------------------------------- constraints
    def enforce(self, a: LC | int, b: LC | int, c: LC | int, label: str = "") -> None:
        a = a if isinstance(a, LC) else LC.const(a)
        b = b if isinstance(b, LC) else LC.const(b)
        c = c if isinstance(c, LC) else LC.const(c)
        self.constraints.append((a.terms, b.terms, c.terms))
        self.labels.append(label or self._label)

    def enforce_equal(self, a: LC | int, b: LC | int, label: str = "") -> None:
        self.enforce(LC.const(0) + a - b, ONE, 0, label)

    def mul(self, a: LC, b: LC, label: str = "") -> LC:
        """A new variable constrained to a * b (free when one side is a constant)."""
        if isinstance(a, int) or a.is_const():
            return b * (a if isinstance(a, int) else a.terms.get(0, 0))
        if isinstance(b, int) or b.is_const():
            return a * (b if isinstance(b, int) else b.terms.get(0, 0))
        v = self.alloc(lambda x, y: x * y % R, a, b)
        self.enforce(a, b, v, label)
        return v

    def assert_bool(self, x: LC, label: str = "") -> None:
        self.enforce(x, x - 1, 0, label or "boolean")

    def label(self, text: str) -> _Label:
        return _Label(self, text)

    # ---------------------------------------------------------------- compile
    def compile(self) -> R1CS:
        n = self.n_vars
        perm = [0] * n
        pub_set = set(self.publics)
        for j, i in enumerate(self.publics):
            perm[i] = 1 + j
        nxt = 1 + len(self.publics)
        for i in range(1, n):
            if i not in pub_set:
                perm[i] = nxt
                nxt += 1

        def re(t: dict[int, int]) -> dict[int, int]:
            return {perm[k]: v for k, v in t.items()}

        cons = [(re(a), re(b), re(c)) for a, b, c in self.constraints]
        return R1CS(
            n_vars=n,
            n_public=len(self.publics),
            constraints=cons,
            labels=list(self.labels),
            input_names={k: [perm[i] for i in v] for k, v in self.inputs.items()},
            public_names=list(self.public_names),
            _hints=list(self.hints),
            _perm=perm,
            _inputs_build={k: list(v) for k, v in self.inputs.items()},
        )


class _Label:
    def __init__(self, cs: ConstraintSystem, text: str):
        self.cs = cs
        self.text = text

    def __enter__(self) -> None:
        self.prev = self.cs._label
        self.cs._label = self.text

    def __exit__(self, *exc: object) -> None:
        self.cs._label = self.prev
