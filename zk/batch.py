"""Proving many witnesses under one key: in local processes (default) or on a Dask cluster.

Each proof is independent; r and s are drawn where the proof is made (the local worker process or the Dask
worker) from the OS CSPRNG (``secrets``, never zero, never fixed), so two proofs of the same witness differ and
proofs from either engine verify the same way under the key's verification key.

Dask (``dask.distributed``, the ``dask`` extra): give ``scheduler`` as a scheduler address (``tcp://host:8786``)
or an existing ``distributed.Client``. The proving key is scattered to the workers once (``Client.scatter``,
broadcast) and every task receives it by reference, never a copy per proof; the witnesses are scattered as one
datum each; tasks are impure (``pure=False``), so proving the same witness twice gives two fresh proofs. The
workers need ``dprag`` importable (same version as the client). A scheduler that cannot be reached or an address
that cannot be parsed raises ``InvalidParameterError`` naming ``scheduler``.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from dprag.errors import InvalidParameterError
from dprag.zk.keys import Proof, ProvingKey

if TYPE_CHECKING:
    from distributed import Client

_PK: ProvingKey | None = None


def _init(pk: ProvingKey) -> None:
    global _PK
    _PK = pk


def _prove_one(w: Sequence[int]) -> Proof:
    from dprag.zk.prove import prove

    assert _PK is not None
    return prove(_PK, w)


def _prove_with_key(w: Sequence[int], pk: ProvingKey) -> Proof:
    """The Dask task: ``pk`` arrives as the scattered key (resolved by the worker from its local data)."""
    from dprag.zk.prove import prove

    return prove(pk, w)


def _check_witnesses(pk: ProvingKey, witnesses: Sequence[Sequence[int]]) -> None:
    for i, w in enumerate(witnesses):
        if len(w) != pk.n_vars:
            raise InvalidParameterError(f"witnesses[{i}]", f"needs {pk.n_vars} values", len(w))


def prove_many(
    pk: ProvingKey,
    witnesses: Sequence[Sequence[int]],
    *,
    processes: int = 1,
    scheduler: str | Client | None = None,
    timeout: float = 10.0,
) -> list[Proof]:
    """Proofs for ``witnesses``, in order.

    Without ``scheduler``: ``processes`` > 1 runs them in a local process pool (the key is sent once per process).
    With ``scheduler`` (a Dask scheduler address or a ``distributed.Client``): on that cluster, the key scattered
    once; ``timeout`` bounds the connection attempt (seconds). ``processes`` must then be left at 1.
    """
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise InvalidParameterError("processes", "must be an integer >= 1", processes)
    _check_witnesses(pk, witnesses)
    if scheduler is not None:
        if processes != 1:
            raise InvalidParameterError(
                "processes",
                "is for local proving; with a Dask scheduler the cluster's workers do the work (leave processes at 1)",
                processes,
            )
        return _prove_dask(pk, witnesses, scheduler, timeout)
    if processes == 1 or len(witnesses) <= 1:
        from dprag.zk.prove import prove

        return [prove(pk, w) for w in witnesses]
    with cf.ProcessPoolExecutor(
        max_workers=min(processes, len(witnesses)), mp_context=mp.get_context("fork"), initializer=_init, initargs=(pk,)
    ) as ex:
        return list(ex.map(_prove_one, witnesses))


# ---------------------------------------------------------------- Dask
def _import_distributed() -> type[Client]:
    """``distributed.Client``; InvalidParameterError naming ``scheduler`` when dask.distributed is not installed."""
    try:
        import distributed
    except ImportError:  # pragma: no cover - dask is a dev / extra dependency
        raise InvalidParameterError(
            "scheduler", "needs dask.distributed installed (pip install 'dprag[dask]')", None
        ) from None
    return distributed.Client


def connect(address: str, timeout: float = 10.0) -> Client:
    """A ``distributed.Client`` for the scheduler at ``address``; ``InvalidParameterError('scheduler', ...)`` if the
    address cannot be parsed or no Dask scheduler answers there within ``timeout`` seconds."""
    client_cls = _import_distributed()
    if not isinstance(address, str) or not address.strip():
        raise InvalidParameterError("scheduler", "must be a Dask scheduler address such as tcp://host:8786", address)
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise InvalidParameterError("timeout", "must be a number of seconds > 0", timeout)
    import asyncio

    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.core import connect as comm_connect
    from distributed.comm.registry import get_backend

    try:
        scheme, loc = parse_address(address)
        get_backend(scheme)  # unknown scheme: ValueError
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(loc)  # host and port, port a number
    except (ValueError, TypeError) as e:
        raise InvalidParameterError("scheduler", f"is not a Dask scheduler address ({e})", address) from None

    async def probe() -> None:
        comm = await comm_connect(address, timeout=timeout)
        await comm.close()

    # probe first with dask's own comm layer: a failed Client() would leave a half-started client whose
    # finaliser blocks and prints at exit
    try:
        asyncio.run(probe())
    except Exception as e:  # noqa: BLE001 - anything the transport raises means: no scheduler there
        msg = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        raise InvalidParameterError(
            "scheduler", f"no Dask scheduler answered at this address within {timeout:g} s ({msg})", address
        ) from None
    try:
        return client_cls(address, timeout=timeout, set_as_default=False)
    except Exception as e:  # noqa: BLE001
        raise InvalidParameterError(
            "scheduler", f"could not connect a Dask client ({type(e).__name__}: {e})", address
        ) from None


def _prove_dask(
    pk: ProvingKey, witnesses: Sequence[Sequence[int]], scheduler: str | Client, timeout: float
) -> list[Proof]:
    client_cls = _import_distributed()
    if isinstance(scheduler, client_cls):
        client, own = scheduler, False
    else:
        client, own = connect(cast(str, scheduler), timeout), True  # not a Client (client_cls is Client): an address
    try:
        if not witnesses:
            return []
        key = client.scatter(pk, broadcast=True, hash=False)  # once: every task gets it by reference
        ws = client.scatter([list(w) for w in witnesses], hash=False)
        futures = client.map(_prove_with_key, ws, pk=key, pure=False)
        try:
            return cast("list[Proof]", client.gather(futures))  # one Proof per witness, in order
        finally:
            client.cancel([*futures, *ws, key])
    finally:
        if own:
            client.close()
