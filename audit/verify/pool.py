"""The verifier's process-pool engine (spec/protocol.md §8 item 13, "Scale"): none of it changes a verdict.

Worker processes are forked when ``verify`` starts, before the bundle is read (``running``), and serve the maps
of the canonical (§8.2), receipt (§8.6), request (§8.7) and retrieval (§8.8) checks (``fork_map``: each map
pickles its task and context to them once, then one chunk of items at a time); the pool ends after the
retrieval replay (``release``). The certified ε and the coalition estimate (§8.10) run in fresh Python
processes beside the other checks (``background``). ``DPRAG_VERIFY_WORKERS=1`` runs everything in process.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import EllipsisType
from typing import IO, TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

_TASK: Callable[[Any], Any] | None = None
#: below this many items a map runs in this process (forking costs ~0.1 s)
FORK_MIN_ITEMS = 4096
_FORK_CHUNK = 512


def _worker_init() -> None:
    """One BLAS thread per worker: the workers already fill the cores (threadpoolctl when installed)."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except Exception:  # noqa: BLE001 — an optimisation only
        pass


def _run_chunk(chunk: list[Any]) -> tuple[bool, list[Any]]:
    try:
        task = cast("Callable[[Any], Any]", _TASK)  # set by _forked before the pool forks
        return True, [task(x) for x in chunk]
    except BaseException:  # noqa: BLE001 — the parent redoes the map in-process, which raises the same error
        return False, []


def workers() -> int:
    env = os.environ.get("DPRAG_VERIFY_WORKERS")
    if env is not None and env.strip().isdigit():
        return max(1, int(env))
    return max(1, min(8, os.cpu_count() or 1))


#: a task (function and context, pickled) larger than this is not sent to the pool: workers forked at that
#: moment share it with the verifier instead (e.g. the index of a 10^6-document tenant)
POOL_TASK_MAX = 64 << 20
#: per thread: ``pool``, the worker pool of the running ``verify`` (None: none started, or closed), and
#: ``depth``, how many calls of ``verify`` are running (the outermost owns the pool)
_LOCAL = threading.local()


def _current() -> WorkerPool | None:
    return getattr(_LOCAL, "pool", None)


def _pool_worker(conn: Connection, inherited: list[Connection]) -> None:
    """A worker of ``WorkerPool``: receives a task (b"t" + pickled callable), then chunks (b"c" + pickled
    items), answering each with the pickled ((ok, results), its CPU seconds so far); b"x" or EOF ends it."""
    import pickle

    for c in inherited:  # the verifier's ends of the workers started before this one
        c.close()
    _worker_init()
    fn: Any = None  # the task; None (unpicklable) makes every chunk fail
    while True:
        try:
            msg = conn.recv_bytes()
        except (EOFError, OSError):
            return
        kind = msg[:1]
        if kind == b"x":
            return
        if kind == b"t":
            fn = None  # the previous task's context goes first
            try:
                fn = pickle.loads(memoryview(msg)[1:])  # (no copy of a message of tens of MB: the noise table)
            except BaseException:  # noqa: BLE001 — every chunk then fails: the map reruns in the verifier
                fn = None
            del msg
            continue
        try:
            items = pickle.loads(memoryview(msg)[1:])
            del msg
            out = pickle.dumps(((True, [fn(x) for x in items]), time.process_time()), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:  # noqa: BLE001 — the verifier redoes the map in-process, raising the same error
            out = pickle.dumps(((False, None), time.process_time()), protocol=pickle.HIGHEST_PROTOCOL)
        items = None
        try:
            conn.send_bytes(out)
        except OSError:
            return


class WorkerPool:
    """Worker processes forked when ``verify`` starts, before the bundle is read: they share with the
    verifier only the pages of the interpreter and the imported modules, so nothing the verifier parses or
    writes later is copied into them (a pool forked from the parsed bundle keeps the old copy of every page
    the verifier writes while it runs: ~0.4 GiB more PSS at 10^5 queries). A map sends each worker the
    function once (pickled, with the context it reads: a ``functools.partial`` of a module-level function),
    then one chunk of items at a time (one in flight per worker, so neither side can block the other on a
    full pipe); results come back pickled, in order."""

    def __init__(self, workers: int):
        ctx = mp.get_context("fork")
        self.conns: list[Connection] = []
        self.procs: list[BaseProcess] = []
        self.cpu: dict[int, float] = {}  # worker -> its CPU seconds at its last answer
        gc.freeze()  # the workers' collector never walks (so never writes) the inherited heap
        try:
            for _ in range(workers):
                a, b = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=_pool_worker, args=(b, list(self.conns)), daemon=True)
                proc.start()
                b.close()
                self.conns.append(a)
                self.procs.append(proc)
        finally:
            gc.unfreeze()

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], size: int) -> tuple[str, list[Any] | None]:
        """("ok", results), ("unfit", None) if the task does not pickle or exceeds ``POOL_TASK_MAX``, or
        ("failed", None) if a worker raised or died (a dead worker closes the pool)."""
        import pickle
        from multiprocessing.connection import wait

        if not self.conns:
            return "unfit", None
        try:
            task = b"t" + pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 — e.g. a closure: the caller forks workers now instead
            return "unfit", None
        if len(task) > POOL_TASK_MAX:
            return "unfit", None
        try:
            for c in self.conns:
                c.send_bytes(task)
            del task
            starts = iter(enumerate(range(0, len(items), size)))
            out: list[Any] = [None] * (-(-len(items) // size))
            busy: dict[Connection, tuple[int, int]] = {}  # connection -> (worker, chunk number)
            failed = False

            def feed(w: int, c: Connection) -> None:
                nxt = None if failed else next(starts, None)
                if nxt is not None:
                    k, a = nxt
                    c.send_bytes(b"c" + pickle.dumps(items[a : a + size], protocol=pickle.HIGHEST_PROTOCOL))
                    busy[c] = (w, k)

            for w, c in enumerate(self.conns):
                feed(w, c)
            while busy:
                for c in cast("list[Connection]", wait(list(busy))):  # the connections of busy
                    (ok, part), cpu = pickle.loads(c.recv_bytes())
                    w, k = busy.pop(c)
                    self.cpu[w] = cpu
                    if ok:
                        out[k] = part
                    else:
                        failed = True
                    feed(w, c)
            return ("failed", None) if failed else ("ok", [x for part in out for x in part])
        except Exception:  # noqa: BLE001 — a worker died or a pipe broke: no pool from here on
            self.close()
            return "failed", None

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send_bytes(b"x")
            except OSError:
                pass
            c.close()
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        self.conns, self.procs, self.cpu = [], [], {}  # reaped: their CPU is now in RUSAGE_CHILDREN


def start_pool(bundle_path: str | os.PathLike[str], receipts: str | os.PathLike[str] | None) -> WorkerPool | None:
    """The worker pool, if a map may fork: several workers, ``fork`` available, and a bundle or receipts file
    of at least ``FORK_MIN_ITEMS`` short records (sizes from ``stat``, nothing read: a guess that decides
    where the work runs, never what it finds)."""
    if workers() < 2 or "fork" not in mp.get_all_start_methods() or _DASK is not None:
        return None  # (with a Dask cluster the maps run there)
    sizes: list[int] = []
    for path, follow in (
        (Path(bundle_path) / "public" / "leaves.bin", False),
        (Path(bundle_path) / "auditor" / "openings.jsonl", False),
        (receipts, True),
    ):  # (the auditor may keep its receipts behind a link)
        try:
            sizes.append(os.stat(path, follow_symlinks=follow).st_size if path is not None else 0)
        except (OSError, TypeError, ValueError):
            sizes.append(0)
    if max(sizes) < FORK_MIN_ITEMS * 64:
        return None
    try:
        return WorkerPool(workers())
    except Exception:  # noqa: BLE001 — no processes: every map runs as without the pool
        return None


def close_pool() -> None:
    pool = _current()
    if pool is not None:
        _LOCAL.pool = None
        pool.close()


@contextmanager
def running(bundle_path: str | os.PathLike[str], receipts: str | os.PathLike[str] | None) -> Iterator[None]:
    """The worker pool of one call of ``verify``, forked now (``start_pool``), before anything is read, and
    closed at the end; a nested ``verify`` (e.g. from a progress callback) uses the running pool."""
    depth = getattr(_LOCAL, "depth", 0)
    if depth == 0:
        _LOCAL.pool = start_pool(bundle_path, receipts)
    _LOCAL.depth = depth + 1
    try:
        yield
    finally:
        _LOCAL.depth = depth
        if depth == 0:
            close_pool()


def release() -> None:
    """The last map is done (after the retrieval replay): the outermost ``verify`` closes its pool, so the idle
    workers' pages go before the coalition estimate starts, and gives back the heap the replay freed (``trim``)."""
    if _LOCAL.depth == 1:
        close_pool()
    trim()


def trim() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``): the parses and maps free far
    more than the verifier keeps, and the allocator holds freed pages in the middle of its heap until asked
    (spec/protocol.md §8 item 13). A no-op where the C library has no ``malloc_trim``."""
    import ctypes

    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    fn(0)


def cpu_seconds() -> float:
    """CPU seconds of this process, of its finished children (workers forked by ``fork_map``, background
    processes) and of the pool's workers so far (as each last reported it)."""
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    pool = _current()
    return time.process_time() + c.ru_utime + c.ru_stime + (sum(pool.cpu.values()) if pool is not None else 0.0)


class Lazy(Sequence[Any]):
    """``[make(k) for k in range(n)]`` made a slice at a time, as the maps send their chunks: items that read
    spooled lines (``protocol.spool``) exist only while their chunk is on its way (spec/protocol.md §8 item 13)."""

    def __init__(self, n: int, make: Callable[[int], Any]):
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self.make(i) for i in range(*k.indices(self.n))]
        if not -self.n <= k < self.n:
            raise IndexError("item index out of range")
        return self.make(k % self.n)


def fork_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    *,
    serial: Callable[[Any], Any] | EllipsisType | None = ...,
    chunk: int | None = None,
    min_items: int | None = None,
) -> list[Any] | None:
    """``[fn(x) for x in items]`` on the machine's cores, in forked worker processes (Ed25519 verification,
    canonical decoding and hashing hold the GIL, so threads do not help): those of the pool ``verify``
    started before reading the bundle (``WorkerPool``: ``fn`` is pickled to them, with the context it
    carries), else — no pool, or ``fn`` too large to pickle to each worker — workers forked now, which
    inherit everything at fork, with the garbage collector's heap frozen. Items and results travel pickled
    through pipes (small: bytes, tuples). ``DPRAG_VERIFY_WORKERS=1`` (or few items,
    or no ``fork``) runs in this process: ``[serial(x) for x in items]`` (``serial`` defaults to ``fn``;
    ``serial=None`` returns None then, for a caller with a cheaper in-process path). Any failure inside a
    worker makes the whole map rerun in this process, so errors are exactly the in-process ones."""
    if serial is ...:
        serial = fn
    if _DASK is not None and items:
        on_dask = _dask_map(fn, items, chunk)
        if on_dask is not None:
            return on_dask
    n_workers = workers()
    forked = None
    if (
        n_workers > 1
        and len(items) >= (FORK_MIN_ITEMS if min_items is None else min_items)
        and "fork" in mp.get_all_start_methods()
    ):
        status, pool = "unfit", _current()
        if pool is not None:
            status, forked = pool.map(fn, items, chunk or _FORK_CHUNK)
        if status == "unfit":
            forked = _forked(fn, items, n_workers, chunk or _FORK_CHUNK)
    if forked is not None:
        return forked
    return None if serial is None else [serial(x) for x in items]


#: the Dask client of the running ``verify`` (``dask_engine``), or None: the maps run on its workers
_DASK: Any = None
#: maps run on Dask and maps that fell back to this process (a worker's failure), since the process started
DASK_STATS = {"maps": 0, "fallbacks": 0}


def dask_client() -> Any:
    """The Dask ``distributed.Client`` the running ``verify`` maps on, or None."""
    return _DASK


@contextmanager
def dask_engine(scheduler: str | None, n_workers: int | None) -> Iterator[Any]:
    """While ``verify`` runs: its maps (``fork_map``) and the coalition scan on a Dask cluster — the scheduler at
    ``scheduler`` (``--scheduler tcp://host:8786``), or a LocalCluster of ``n_workers`` single-threaded worker
    processes (``--workers N``) — instead of the local process pool; neither: nothing changes. A scheduler that
    cannot be reached, or a bad count, is the auditor's exit 2 naming the flag. None of it changes a verdict
    (tests/audit/verify/test_verifier_dask.py)."""
    global _DASK
    if scheduler is None and n_workers is None:
        yield None
        return
    from ..protocol.bundle import AuditorInputError

    if scheduler is not None and n_workers is not None:
        raise AuditorInputError("--workers starts a local cluster; with --scheduler the cluster's workers are used")
    if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1):
        raise AuditorInputError(f"--workers must be a positive number of worker processes, got {n_workers!r}")
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise AuditorInputError("--scheduler/--workers need the dask extra (pip install 'dprag[dask]')") from None
    cluster = None
    try:
        if scheduler is not None:
            client = Client(scheduler, timeout=10)
        else:
            cluster = LocalCluster(
                n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
            )
            client = Client(cluster)
    except (OSError, ValueError, TimeoutError) as e:
        if cluster is not None:
            cluster.close()
        raise AuditorInputError(f"--scheduler {scheduler}: cannot reach it ({type(e).__name__}: {e})") from None
    _DASK = client
    try:
        yield client
    finally:
        _DASK = None
        client.close()
        if cluster is not None:
            cluster.close()


@contextmanager
def engine(dask: str | int | None, bundle_path: str | os.PathLike[str], receipts: Any) -> Iterator[None]:
    """Where one ``verify`` runs its maps: a Dask cluster (``dask_engine``: ``dask`` a scheduler's address or a
    number of local workers), else the local pool forked now, before anything is read (``running``; ``receipts``: a
    path or several, the first sizes the pool)."""
    first = receipts if receipts is None or isinstance(receipts, (str, os.PathLike)) else next(iter(receipts), None)
    scheduler = dask if isinstance(dask, str) else None
    n_workers = dask if dask is not None and not isinstance(dask, str) else None
    with dask_engine(scheduler, n_workers), running(bundle_path, first):
        yield


def _apply_chunk(chunk: list[Any], fn: Callable[[Any], Any]) -> list[Any]:
    return [fn(x) for x in chunk]


#: items per chunk of a Dask map (at most), and chunks in flight per worker: the verifier holds at most
#: ``DASK_IN_FLIGHT`` x workers chunks and their results beyond what it has already taken (§8 item 13)
DASK_CHUNK_MAX = 2048
DASK_IN_FLIGHT = 2


def _dask_map(fn: Callable[[Any], Any], items: Sequence[Any], chunk: int | None) -> list[Any] | None:
    """``[fn(x) for x in items]`` on the Dask cluster: ``fn`` (with the context it carries) scattered to every
    worker once, then the items a chunk at a time (``chunk`` items if the caller sets it, as for the local pool, else
    at most ``DASK_CHUNK_MAX``), ``DASK_IN_FLIGHT`` chunks per worker in flight — a chunk is
    sliced from ``items`` (so a ``Lazy`` sequence is read) only when one before it has come back, and each result
    is taken as it arrives, its future released — so neither this process (where a LocalCluster's scheduler also
    runs) nor the cluster ever holds the whole map's items or results at once. None on any failure (``fork_map``
    then runs the map here, so errors are exactly the in-process ones)."""
    client = _DASK
    try:
        from distributed import as_completed

        n = max(1, len(client.scheduler_info().get("workers", {})))
        # ``chunk``: the caller's own size (1 for the retrieval jobs and receipt chunks, each already hundreds of
        # queries: a Dask chunk of ~1,000 jobs held ~0.5 GB of opening lines and as much of scores)
        size = chunk if chunk is not None else max(1, min(DASK_CHUNK_MAX, -(-len(items) // (4 * n))))
        [task] = client.scatter([fn], broadcast=True, hash=False)
        starts = iter(range(0, len(items), size))
        parts: dict[int, list[Any]] = {}

        def submit() -> Any:
            a = next(starts, None)
            if a is None:
                return None
            fut = client.submit(_apply_chunk, list(items[a : a + size]), fn=task, pure=False)
            index[fut.key] = a
            return fut

        index: dict[str, int] = {}
        first = [f for f in (submit() for _ in range(DASK_IN_FLIGHT * n)) if f is not None]
        done = as_completed(first, with_results=True)
        del first
        for fut, part in done:
            parts[index.pop(fut.key)] = part
            del fut, part  # (the future's last reference here: the cluster lets its result go)
            nxt = submit()
            if nxt is not None:
                done.add(nxt)
                del nxt
    except Exception:  # noqa: BLE001 — a worker's failure: the map reruns in this process
        DASK_STATS["fallbacks"] += 1
        return None
    DASK_STATS["maps"] += 1
    return [x for a in sorted(parts) for x in parts.pop(a)]


def background(task: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """Start ``task(*args)`` (a module-level function: it is pickled by name) in a fresh Python process (not a
    fork: a long-lived fork would end up holding a copy of every page the verifier touches meanwhile); the
    arguments go pickled through its stdin (fed by a thread, so this returns at once) — a ``qrows.SharedRows`` as
    its memory file's descriptor, which the child inherits and maps — and the result comes back pickled through
    its stdout. Returns a function that waits for the result: ``(value,)``, or None if the
    child failed in any way (the caller then computes it in-process, raising what it raises)."""
    if workers() < 2:
        return lambda: None
    import pickle
    import subprocess
    import sys
    import threading

    from .qrows import SharedRows

    try:
        payload = [pickle.dumps((task, args), protocol=pickle.HIGHEST_PROTOCOL)]  # dropped once written
        proc = subprocess.Popen(
            [sys.executable, "-c", "from dprag.audit.verify.pool import task_main; task_main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=tuple(a.fd for a in args if isinstance(a, SharedRows)),  # mapped there, not copied
        )
    except Exception:  # noqa: BLE001
        return lambda: None

    def feed() -> None:
        try:
            stdin = cast("IO[bytes]", proc.stdin)  # stdin=PIPE
            stdin.write(payload.pop())
            stdin.close()
        except OSError:
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    done: list[Any] = []

    def result() -> Any:
        if done:
            return done[0]
        out = None
        try:
            stdout = cast("IO[bytes]", proc.stdout)  # stdout=PIPE
            data = stdout.read()
            stdout.close()
            writer.join()
            if proc.wait() == 0 and data:
                out = pickle.loads(data)
        except Exception:  # noqa: BLE001
            out = None
        done.append(out)
        return out

    return result


def task_main() -> None:
    """The child side of ``background``."""
    import pickle
    import sys

    task, args = pickle.loads(sys.stdin.buffer.read())
    out = (task(*args),)
    sys.stdout.buffer.write(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


def _forked(fn: Callable[[Any], Any], items: Sequence[Any], workers: int, size: int) -> list[Any] | None:
    global _TASK
    _TASK = fn
    gc.freeze()
    try:
        with mp.get_context("fork").Pool(workers, initializer=_worker_init) as pool:
            out: list[Any] = []
            chunks = (list(items[a : a + size]) for a in range(0, len(items), size))
            for ok, part in pool.imap(_run_chunk, chunks):
                if not ok:
                    return None
                out.extend(part)
            return out
    except Exception:  # noqa: BLE001 — no fork, no pipe, an unpicklable result: do it in-process
        return None
    finally:
        gc.unfreeze()
        _TASK = None
