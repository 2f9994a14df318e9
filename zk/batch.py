"""Proving many witnesses under one key, in local processes (each proof is independent; r and s are drawn in the
worker from the OS CSPRNG, so proofs of the same witness differ). A Dask cluster backend (issue 11) is not here yet."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
from collections.abc import Sequence

from dprag.accounting.errors import InvalidParameterError
from dprag.zk.keys import Proof, ProvingKey

_PK: ProvingKey | None = None


def _init(pk: ProvingKey) -> None:
    global _PK
    _PK = pk


def _prove_one(w: Sequence[int]) -> Proof:
    from dprag.zk.prove import prove

    assert _PK is not None
    return prove(_PK, w)


def prove_many(pk: ProvingKey, witnesses: Sequence[Sequence[int]], *, processes: int = 1) -> list[Proof]:
    """Proofs for ``witnesses`` in order; ``processes`` > 1 runs them in a local process pool (the key is sent once
    per process)."""
    if processes < 1:
        raise InvalidParameterError("processes", "must be >= 1", processes)
    if processes == 1 or len(witnesses) <= 1:
        from dprag.zk.prove import prove

        return [prove(pk, w) for w in witnesses]
    with cf.ProcessPoolExecutor(max_workers=min(processes, len(witnesses)), mp_context=mp.get_context("fork"),
                                initializer=_init, initargs=(pk,)) as ex:
        return list(ex.map(_prove_one, witnesses))
