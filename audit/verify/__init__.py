"""Phase D: the verifier (spec/protocol.md §8), protocol version 4.

``verify(bundle, receipts=..., mode=..., key=..., trusted_checkpoint=...) -> Verdict`` runs the checks of §8 in
the spec's order, one module each, named after what it checks (``files``, ``canonical``, ``commitments``,
``policy``, ``ledger``, ``receipts``, ``requests``, ``retrieval`` and ``zk_proofs``, ``generation`` and
``answers``, ``coalition``); each appends reasons ``"<check>: <what>"`` and counts what it checked. The verdict
(``verdict``) is PASS iff no check found a reason; a FAIL carries no ε. Only the auditor's own inputs
(``inputs``) raise ``AuditorInputError`` (exit 2); every defect of the bundle is a FAIL. ``pool`` and
``scores`` make it fast at scale without changing a verdict (§8 item 13). Nothing here spends budget or
writes anything.

``verify``'s inputs: ``key``, a file holding the provider's note verifier key, pinned by the auditor (else the
bundle's own key is used and the verdict says it was not pinned); ``origin``, the log's name the auditor pinned
(``dprag/<chain id>``; else the verdict says it was not pinned); ``trusted_checkpoint``, a checkpoint note seen
earlier, which the ledger must extend; ``corpus``, tenant -> document texts, to check C_docs; ``theta`` and
``coalition_window`` (None = the whole window), the coalition estimator's parameters; ``max_read``, the most bytes
the verifier reads from the bundle in all (None: the per-file caps genesis implies, spec/protocol.md §7);
``state``, ``state_key``, ``state_hash``: the auditor's state (§8.14: only the leaves after it are replayed, and it
moves to the bundle's size); ``dask``: a Dask scheduler's address, or a number of local Dask workers, to run the
maps and the coalition scan on (§8 item 13).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..protocol.certify import DEFAULT_MAX_EPSILON
from . import incremental, pool
from .answers import check_8_9_answers
from .canonical import check_8_2_canonical
from .coalition import check_8_10_coalition, start_coalition
from .commitments import check_8_3_commitments, check_8_3_pinned_key
from .estimator import DEFAULT_THETA, DEFAULT_WINDOW
from .files import check_8_1_files
from .generation import check_8_9_generation
from .history import check_8_10_history, parse_origin, read_bundle
from .inputs import read_auditor_inputs
from .ledger import check_8_5_ledger, check_8_5_witnesses
from .policy import check_8_4_policy
from .receipts import check_8_6_receipts, read_receipts
from .requests import check_8_7_requests
from .retrieval import check_8_8_retrieval, sample_leaves
from .verdict import Verdict, conclude, start_certify
from .zk_proofs import check_8_8_proofs

__all__ = ["Verdict", "verify"]


def verify(
    bundle_path: str | Path,
    *,
    receipts: str | Path | Sequence[str | Path] | None = None,
    mode: str = "full",
    samples: int | None = None,
    key: str | Path | None = None,
    origin: str | None = None,
    trusted_checkpoint: str | Path | None = None,
    corpus: dict[str, list[str]] | None = None,
    embedder: Any = None,
    witnesses: Sequence[str | Path] = (),
    min_witnesses: int | None = None,
    replay_generator: object = None,
    zk_vkey: str | Path | None = None,
    theta: float = DEFAULT_THETA,
    coalition_window: int | None = DEFAULT_WINDOW,
    progress: Callable[[str, int], None] | None = None,
    max_read: int | None = None,
    max_epsilon: float = DEFAULT_MAX_EPSILON,
    state: str | Path | None = None,
    state_key: str | Path | None = None,
    state_hash: str | None = None,
    dask: str | int | None = None,
) -> Verdict:
    """Run every check of spec/protocol.md §8 on the bundle's log, in the spec's order (module docstring)."""
    pinned_origin = None if origin is None else parse_origin(origin)
    sf = incremental.open_for(**{k: v for k, v in locals().items() if k in incremental.STATE_OPTIONS})
    with pool.engine(dask, bundle_path, receipts):  # Dask, or local workers forked now (§8 item 13)
        given = read_auditor_inputs(**{k: v for k, v in locals().items() if k in INPUT_OPTIONS})
        run = incremental.join(read_bundle(bundle_path, progress, max_read), sf, given)
        sampled: list[tuple[int, int]] = []
        check_8_1_files(run)
        check_8_2_canonical(run)
        check_8_3_commitments(run, corpus, embedder)
        check_8_3_pinned_key(run, given.pinned)
        check_8_4_policy(run)
        certify = start_certify(run)  # the certified ε (policy alone), beside the checks
        evidence = read_receipts(run, given, replay_generator is not None)  # §8.6.s input, before §8.5
        trusted_size = check_8_5_ledger(run, evidence.sizes() | {run.n - 1}, given.trusted, given.pinned)
        check_8_5_witnesses(run, given.witnesses, given.min_witnesses)
        check_8_6_receipts(run, evidence)
        if run.policy is not None and run.genesis is not None:
            check_8_7_requests(run)
            coalition = None
            if run.seed is not None:  # steps 8 and 9 replay from the committed seed
                check_8_8_retrieval(run, sample_leaves(run.queries, mode, samples, sampled))
                pool.release()  # the last map is done: the idle workers go before the coalition estimate
                check_8_8_proofs(run, given.zk_vkey)
                coalition = start_coalition(run, theta, coalition_window)
                check_8_9_generation(run)
                check_8_9_answers(run, evidence.valid, replay_generator, corpus, (certify, coalition))
            run.drop_openings()
            check_8_10_coalition(run, theta, coalition_window, coalition)
        elif not run.reasons:
            run.fail("commitments", "no usable policy or genesis: nothing can be certified")
        check_8_10_history(run, given, pinned_origin)
        v = conclude(run, given, certify, mode=mode, sampled=sampled, trusted_size=incremental.merge(run, trusted_size))
        return incremental.finish(v, run, sf, given)


#: verify()'s keyword arguments that are the auditor's inputs (read_auditor_inputs)
INPUT_OPTIONS = (
    "mode",
    "samples",
    "theta",
    "key",
    "receipts",
    "trusted_checkpoint",
    "witnesses",
    "min_witnesses",
    "zk_vkey",
    "max_epsilon",
)
