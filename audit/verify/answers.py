"""§8.9 ``generation``, the answers (spec/protocol.md; ``--replay-answers GENERATOR --corpus DIR``): for every
valid receipt whose account handed over its question, the answer is recomputed from the committed seed, the
corpus and the question, and its hash must equal the signed h_answer (``audit/protocol/replay.py`` says what must
match).
A policy whose generator cannot be replayed (``replayable: false``) has no answer compared."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from ..protocol.bundle import AuditorInputError
from ..protocol.policy import Policy
from .run import Run, guarded
from .scores import scores_of

#: a valid receipt of this window (``receipts.Evidence.valid``): (its line, its body, its citations or None, the
#: question its account handed over or None)
ValidReceipt = tuple[int, dict[str, Any], Any, str | None]


def check_8_9_answers(
    run: Run,
    valid: Sequence[ValidReceipt],
    generator: object,
    corpus: dict[str, list[str]] | None,
    children: tuple[Callable[[], object] | None, ...] = (),
) -> None:
    """§8.9 (answers, optional): nothing without a generator; the corpus is then the auditor's input (exit 2
    without it, once the background ``children`` are reaped)."""
    if generator is None:
        return
    if corpus is None:
        for child in children:
            if child is not None:
                child()  # reap the child
        raise AuditorInputError("answer replay needs the corpus (--corpus)")
    _replay_answers(run, valid, generator, corpus)


@guarded("generation")
def _replay_answers(run: Run, valid: Sequence[ValidReceipt], generator: object, corpus: dict[str, list[str]]) -> None:
    """§8.9 (answers, optional): replay the answer of every receipt whose account handed over its question,
    with the committed corpus and the auditor's generator, and compare it with the signed h_answer."""
    from ..protocol.replay import answer_hash, replay_answer

    # verify() replays the answers only with every epoch's policy and seed; replayable is a mechanism's property,
    # and the mechanism is one of the log's constants (§3.4)
    policy = cast(Policy, run.policy)
    if not policy.generation.replayable:
        # a hosted text generator (dp-ksa, replayable: false): nobody can re-run it, so no answer is compared
        # (a mismatch would FAIL an honest provider); the verdict's trust list says what that leaves on trust
        run.checked["answers_replayed"] = 0
        run.checked["answers_not_replayable"] = sum(1 for _, _, _, q in valid if q is not None)
        return
    done = 0
    replayed: set[int] = set()
    for k, body, _, question in valid:
        pos = body["pos"]
        if pos in replayed:  # one replay per ledger position, however many receipt lines name it (§8.9)
            continue
        if pos < run.base and question is not None:
            from .state import StateError

            raise StateError(
                f"receipt {k} hands in the question of leaf {pos}, which an earlier run verified: its answer cannot "
                "be replayed from the auditor's state (replay it with a whole bundle, without --state)"
            )
        # rec is read only for a position §8.7 accepted (``run.queries``), whose record is never None
        rec, op = cast("dict[str, Any]", run.records[pos]), run.openings.get(pos)
        texts = corpus.get(body["tenant"]) if corpus else None
        if (
            question is None
            or op is None
            or texts is None
            or not run.is_query(pos)
            or rec.get("h_req") != body["h_req"]
        ):
            continue
        replayed.add(pos)
        ep = run.epoch_at(pos)
        got = answer_hash(
            replay_answer(
                cast(Policy, ep.policy), cast(bytes, ep.seed), op, scores_of(run, pos), texts, question, generator
            )
        )
        if got != body["h_answer"]:
            run.fail(
                "generation",
                f"receipt {k}: the signed answer is not the committed mechanism's answer "
                f"(replayed from the seed, the corpus and the question)",
            )
        done += 1
    run.checked["answers_replayed"] = done
