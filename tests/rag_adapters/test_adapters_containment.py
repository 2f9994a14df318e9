"""Per-voter containment on real (tiny, random-weight) models: a failing voter moves no other voter, bit for bit
(spec/accounting/rag.md §6, spec/adapters.md §1), and the KV buffers are allocated at the public worst case.

Failures are injected into a tiny GPT-2 and a tiny Llama (RoPE, grouped-query attention: SmolLM2's architecture):
``start`` raises on a prompt holding a poisoned document, or the model raises at the decoding step at which the
long record's row crosses a position limit (a memory limit crossed as the answer grows). The other rows' logits
at every step, and their greedy tokens, must be ``np.array_equal`` to the failure-free run's. Deterministic
(seeded weights)."""

from __future__ import annotations

import numpy as np
import pytest

from dprag.accounting.protocols import Prompt
from dprag.accounting.rag.common import voter_responses
from dprag.rag_adapters.generator import ByteTokenizer, CausalLMGenerator, tiny_gpt2, tiny_llama

Q = "What does the clinic prescribe for gout?"
SHORT = Prompt(Q, ("gout: Zorvex",))
MIDDLE = Prompt(Q, ("Record 7: gout -> Zorvex 40 mg.",))
LONG = Prompt(
    Q,
    (
        "A much longer record about a patient with gout who was given Zorvex 40 mg twice daily; "
        "follow-up booked after 30 days, nothing else of note in this visit.",
    ),
)
POISONED = Prompt(Q, ("POISON record: gout -> Vexorin 10 mg.",))
MODELS = [tiny_gpt2, tiny_llama]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from threads; one thread keeps the file fast on a shared 2-core machine."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


class _Recorded:
    """A session that records every logits array it hands out."""

    def __init__(self, inner, steps: list):
        self._inner, self._steps = inner, steps

    def logits(self):
        out = self._inner.logits()
        self._steps.append(np.array(out, copy=True))
        return out

    def __getattr__(self, name):
        return getattr(self._inner, name)


class Faulty(CausalLMGenerator):
    """The tiny model, failing on request: ``start`` raises on a prompt holding "POISON" (``poison``), the forward
    pass raises once a decoding position reaches ``limit`` (``limit``); both messages quote the document. Every
    session it starts is recorded: (its prompts, the logits of every step)."""

    def __init__(self, make, *, poison: bool = False, limit: int | None = None):
        super().__init__(make(0).model, ByteTokenizer(), name="faulty")
        self.poison, self.sessions = poison, []
        if limit is not None:

            def crossing(module, args, kwargs):
                pos = kwargs.get("position_ids")
                if pos is not None and pos.shape[1] == 1 and int(pos.max()) >= limit:
                    raise MemoryError(f"out of memory at position {int(pos.max())} of {LONG.contexts[0][:30]}")

            self.model.register_forward_pre_hook(crossing, with_kwargs=True)

    def start(self, prompts, **kw):
        if self.poison and any("POISON" in c for p in prompts for c in p.contexts):
            raise MemoryError(f"out of memory on {[c for p in prompts for c in p.contexts if 'POISON' in c][0]}")
        rec = (list(prompts), [])
        self.sessions.append(rec)
        return _Recorded(super().start(prompts, **kw), rec[1])


def _producing_logits(gen: Faulty, prompt: Prompt) -> np.ndarray:
    """The logits (steps, vocab) of ``prompt``'s row in the last session that held it: the session its answer came
    from."""
    prompts, steps = [s for s in gen.sessions if prompt in s[0]][-1]
    return np.stack([s[prompts.index(prompt)] for s in steps])


@pytest.mark.parametrize("make", MODELS)
@pytest.mark.parametrize("failure", ["start", "decode"])
def test_a_failing_voter_moves_no_other_voter_bit_for_bit(make, failure):
    """``voter_responses`` (answer-level voting, DP-KSA) on four rows -- the no-context lane, two voters, and one
    whose call fails: the other rows' greedy answers and every step's logits are np.array_equal to the failure-free
    run's; the failing voter abstains (None); every session has the public shape 4. On the parent commit the failed
    batch was re-run one prompt at a time (batch 1), and the other rows' decode logits moved (~230 of 259 differ)."""
    bad = POISONED if failure == "start" else LONG
    rows = [Prompt(Q), SHORT, bad, MIDDLE]
    n = 4
    clean = Faulty(make)
    want = voter_responses(clean, rows, n)
    limit = len(clean.render(LONG)) + 1  # the long row's second decoding step; no other row gets that far
    faulty = Faulty(make, poison=failure == "start", limit=None if failure == "start" else limit)
    got = voter_responses(faulty, rows, n)
    assert got[2] is None and want[2] is not None
    for i in (0, 1, 3):
        assert got[i] == want[i]  # the generated tokens (a byte tokenizer: text = tokens)
        a, b = _producing_logits(clean, rows[i]), _producing_logits(faulty, rows[i])
        assert a.shape == b.shape and a.shape[0] >= 2
        assert np.array_equal(a, b), (i, int((a != b).sum()))
    assert {len(prompts) for prompts, _ in faulty.sessions} == {len(rows)}


@pytest.mark.parametrize("make", MODELS)
def test_a_voter_failing_mid_answer_is_replaced_from_that_step_bit_for_bit(make):
    """000 Alg. 5's lock-step session (``ContainedSession``): the long record's row crosses the position limit at
    its third decoding step. From that step on its logits are those of its empty-context prompt given the released
    prefix (bit for bit the session in which it held that prompt from the start), before it those of its own prompt;
    the other rows' logits are bit for bit the failure-free session's at every step."""
    from dprag.accounting.rag.containment import ContainedSession

    rows = [Prompt(Q), SHORT, LONG, MIDDLE]
    tokens = [72, 101, 258, 32, 0]

    def drive(gen, prompts):
        s = ContainedSession(gen, prompts, len(tokens) + 1)
        out = [s.logits().copy()]
        for t in tokens:
            s.advance(t)
            out.append(s.logits().copy())
        s.close()
        return out, s.replaced

    clean, none = drive(Faulty(make), rows)
    fails_at = 3  # the third advance feeds the long row's position len + 2
    limited = Faulty(make, limit=len(Faulty(make).render(LONG)) + fails_at - 1)
    failing, replaced = drive(limited, rows)
    emptied, _ = drive(Faulty(make), [Prompt(Q), SHORT, LONG.empty_context(), MIDDLE])
    assert none == frozenset() and replaced == {2}
    for k in range(len(tokens) + 1):
        assert np.array_equal(failing[k][[0, 1, 3]], clean[k][[0, 1, 3]]), k
        assert np.array_equal(failing[k][2], (clean if k < fails_at else emptied)[k][2]), k
    assert not np.array_equal(clean[fails_at][2], emptied[fails_at][2])  # the replacement shows: not vacuous
    assert {len(p) for p, _ in limited.sessions} == {len(rows)}


def _kv_bytes(sess) -> list[int]:
    """Bytes allocated for every layer's keys (the buffer the cache's ``keys`` view lives in)."""
    return [layer.keys.untyped_storage().nbytes() for layer in sess._cache.layers]


@pytest.mark.parametrize("make", MODELS)
def test_kv_buffers_are_preallocated_at_the_public_worst_case(make):
    """The KV buffers of a session are allocated once, at a size that depends on public quantities only: the same
    for a 13- and a 150-byte document in row 1, unchanged over every step, and equal to B rows x (prompt capacity +
    new tokens) positions, here the window (documents not truncated) -- computed from the model's config. On the
    parent commit the buffer was the longest row plus headroom (doubling when full): it differed with the
    document."""
    gen = make(0)
    T = 6
    cfg = gen.model.config
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.n_head
    head_dim = cfg.hidden_size // (getattr(cfg, "num_attention_heads", None) or cfg.n_head)
    sizes = []
    for middle in (SHORT, LONG):
        sess = gen.start([Prompt(Q), middle, MIDDLE], max_new_tokens=T)
        seen = {tuple(_kv_bytes(sess))}
        for t in [72, 101, 258, 32, 0, 7]:
            sess.advance(t)
            seen.add(tuple(_kv_bytes(sess)))
        assert len(seen) == 1  # never reallocated
        assert sess.forward_passes == 1 + 3 + 6  # the public prefix once, each row, each step: counted, not timed
        sizes.append(seen.pop())
        sess.close()
    assert sizes[0] == sizes[1]
    assert set(sizes[0]) == {3 * heads * gen.max_positions * head_dim * 4}  # float32


def test_truncated_documents_give_a_smaller_public_capacity():
    """With documents truncated to c tokens, a voter's budget is its empty-context rendering plus c + 8 per document
    (``prompt_capacity``), whatever the documents hold; the KV buffer is that plus the new tokens, per row."""
    gen = tiny_llama(0)
    capped = CausalLMGenerator(gen.model, gen.tokenizer, name="capped", max_context_tokens=16)
    T = 3
    base = len(capped.render(Prompt(Q, ("", ""))))  # independent of the code under test: the rendered padding
    assert capped.prompt_capacity(Prompt(Q, ("x" * 400, "y")), T) == base + 2 * (16 + 8)
    sess = capped.start([Prompt(Q, ("x" * 400, "y")), Prompt(Q, ("a", "b"))], max_new_tokens=T)
    assert sess.kv_positions == base + 2 * 24 + T
    heads, head_dim = gen.model.config.num_key_value_heads, 64 // 4
    assert set(_kv_bytes(sess)) == {2 * heads * (base + 2 * 24 + T) * head_dim * 4}


@pytest.mark.parametrize("make", MODELS)
def test_the_reserved_worst_case_bounds_what_a_session_allocates(make):
    """spec/provider.md §3.6: ``worst_case_bytes`` (reserved before the charge, from public quantities) is at least
    the KV buffers a session of that shape allocates, with short documents and with documents over the token cap;
    and it is within 64x of them (a bound, not a blank cheque)."""
    g = make()
    g.max_context_tokens = 48
    batch, new = 4, 8
    bound = g.worst_case_bytes(Q, 1, batch, new)
    for docs in ((SHORT,) * batch, (LONG, MIDDLE, POISONED, SHORT)):
        s = g.start(list(docs), max_new_tokens=new)
        kv = sum(layer.keys.nbytes + layer.values.nbytes for layer in s._cache.layers)
        s.close()
        assert 0 < kv <= bound < 64 * kv, (kv, bound)
