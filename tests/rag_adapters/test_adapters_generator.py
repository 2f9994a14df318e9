"""Batched KV-cached sessions (tiny random-weight GPT-2 and Llama): logits equal per-sequence full forward
passes without cache, across advance steps, different prompt lengths, shared prefix on/off. Plus greedy
generation, window limits, truncation and input errors. Deterministic (seeded weights)."""

import subprocess
import sys

import numpy as np
import pytest

from dprag.accounting.protocols import DecodingSession, Generator, Prompt
from dprag.errors import InvalidParameterError
from dprag.rag_adapters.generator import ByteTokenizer, CausalLMGenerator, tiny_gpt2, tiny_llama
from dprag.rag_adapters.prompting import SYSTEM_PROMPT

PROMPTS = [
    Prompt("What does the clinic prescribe for gout?", ("Record 1: gout -> Zorvex 40 mg.",)),
    Prompt(
        "What does the clinic prescribe for gout?",
        ("Record 2: a much longer record about a patient with gout who was given Zorvex 40 mg twice daily.",),
    ),
    Prompt("What does the clinic prescribe for gout?"),  # the no-context prompt (DPSparseVoteRAG) in the same batch
    Prompt("Why?", ("x",), history=(("Earlier question?", "Earlier answer."),)),
]
STEPS = [72, 101, 258, 32, 0]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from threads; one thread keeps the file fast on a shared 2-core machine."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)  # includes the end-of-turn and a NUL byte: any token id is legal


def _check_session(gen, prompts, share_prefix, tol):
    seqs = [gen.render(p) for p in prompts]
    assert len({len(s) for s in seqs}) > 1  # different lengths: padding is exercised
    sess = gen.start(prompts, share_prefix=share_prefix, max_new_tokens=len(STEPS) + 1)
    assert isinstance(sess, DecodingSession)
    if share_prefix:
        assert sess.prefix_length > 10  # the chat template's system turn is shared
    else:
        assert sess.prefix_length == 0
    worst = 0.0
    for step in range(len(STEPS) + 1):
        got = sess.logits()
        assert got.shape == (len(prompts), gen.vocab_size)
        for i, s in enumerate(seqs):
            worst = max(worst, float(np.abs(got[i] - gen.reference_logits(s)).max()))
        if step < len(STEPS):
            sess.advance(STEPS[step])
            seqs = [s + [STEPS[step]] for s in seqs]
    assert sess.lengths == [len(s) for s in seqs] and sess.steps == len(STEPS)
    assert worst <= tol, worst


@pytest.mark.parametrize("make", [tiny_gpt2, tiny_llama])
@pytest.mark.parametrize("share_prefix", [True, False])
def test_batched_session_equals_full_forward_float64(make, share_prefix):
    _check_session(make(0, dtype="float64"), PROMPTS, share_prefix, 1e-10)


@pytest.mark.parametrize("make", [tiny_gpt2, tiny_llama])
def test_batched_session_equals_full_forward_float32(make):
    _check_session(make(1), PROMPTS, True, 1e-4)


def test_single_prompt_and_advance_each():
    gen = tiny_llama(2, dtype="float64")
    s1 = gen.start(PROMPTS[:1])
    ref = gen.reference_logits(gen.render(PROMPTS[0]))
    np.testing.assert_allclose(s1.logits()[0], ref, atol=1e-10)
    sess = gen.start(PROMPTS[:3], max_new_tokens=152)
    seqs = [gen.render(p) for p in PROMPTS[:3]]
    for toks in ([65, 66, 67], [1, 258, 100]):
        sess.advance_each(toks)
        seqs = [s + [t] for s, t in zip(seqs, toks, strict=False)]
    for i, s in enumerate(seqs):
        np.testing.assert_allclose(sess.logits()[i], gen.reference_logits(s), atol=1e-10)
    # a long decode in the buffer preallocated for all 152 tokens; one more is refused (the budget is public)
    for j in range(150):
        sess.advance(40 + j % 50)
        seqs = [s + [40 + j % 50] for s in seqs]
    for i, s in enumerate(seqs):
        np.testing.assert_allclose(sess.logits()[i], gen.reference_logits(s), atol=1e-10)
    with pytest.raises(InvalidParameterError, match="max_new_tokens = 152"):
        sess.advance(40)


def test_generate_is_greedy_and_batched_generation_agrees():
    gen = tiny_gpt2(3)
    assert isinstance(gen, Generator)
    assert gen.decode(gen.encode("plain text")) == "plain text"
    # oracle: argmax loop over full forward passes, stopping at an end-of-turn token
    ids = gen.render(PROMPTS[0])
    want = []
    for _ in range(6):
        t = int(np.argmax(gen.reference_logits(ids + want)))
        if t in gen.stop_token_ids:
            break
        want.append(t)
    assert gen.generate(PROMPTS[0], 6) == gen.decode(want)
    many = gen.generate_many(PROMPTS, 6)
    assert many == [gen.generate(p, 6) for p in PROMPTS]


def test_prompt_rendering_is_the_documented_chatml():
    gen = tiny_gpt2(0)
    text = gen.render_text(Prompt("Q?", ("c1", "c2"), history=(("h?", "a."),)))
    assert text == (
        f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
        "<|im_start|>user\nQuestion: h?<|im_end|>\n<|im_start|>assistant\na.<|im_end|>\n"
        "<|im_start|>user\nContext:\nc1\n\nc2\n\nQuestion: Q?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert gen.render(Prompt("Q?"))[:1] == [257]  # <|im_start|> is one special token
    assert ByteTokenizer().decode(ByteTokenizer().encode("héllo<|im_end|>")) == "héllo"


def test_context_truncation_is_documented_not_silent():
    gen = tiny_gpt2(0, max_context_tokens=10)
    text = gen.render_text(Prompt("Q?", ("0123456789ABCDEF",)))
    assert "0123456789\n" in text and "A" not in text.split("Context:")[1].split("Question")[0]


def test_window_limits():
    gen = tiny_gpt2(0, n_positions=200)
    with pytest.raises(InvalidParameterError, match="context window") as e:
        gen.start([Prompt("q" * 300)])  # a question longer than the window: an error, never truncated
    assert e.value.field == "prompt"
    base = len(gen.render(Prompt("q?")))
    with pytest.raises(InvalidParameterError, match="context window"):
        gen.start([Prompt("q?")], max_new_tokens=200 - base + 1)
    sess = gen.start([Prompt("q?")], max_new_tokens=200 - base)
    for _ in range(200 - base):
        sess.advance(65)
    with pytest.raises(InvalidParameterError, match="full"):
        sess.advance(65)


def test_bad_inputs():
    gen = tiny_gpt2(0)
    for bad in ([], Prompt("x")):
        with pytest.raises(InvalidParameterError) as e:
            gen.start(bad)
        assert e.value.field == "prompts"
    with pytest.raises(InvalidParameterError):
        gen.start([Prompt("   ")])
    with pytest.raises(InvalidParameterError):
        gen.start(["a plain string"])
    with pytest.raises(InvalidParameterError):
        gen.start([Prompt("q", (1,))])
    sess = gen.start(PROMPTS[:2])
    before = sess.logits().copy()
    for tok in (-1, gen.vocab_size, True, 1.0, "a"):
        with pytest.raises(InvalidParameterError):
            sess.advance(tok)
    assert np.array_equal(sess.logits(), before) and sess.steps == 0  # a refused token changes nothing
    with pytest.raises(InvalidParameterError):
        sess.advance_each([1])
    with pytest.raises(ValueError):
        sess.logits()[0, 0] = 1.0  # read-only
    sess.close()
    with pytest.raises(InvalidParameterError):
        sess.logits()
    with pytest.raises(InvalidParameterError):
        gen.generate(PROMPTS[0], 0)


@pytest.mark.integration
def test_importing_adapters_does_not_import_torch():
    code = (
        "import sys, dprag.rag_adapters, dprag.rag_adapters.metrics, dprag.rag_adapters.datasets; "
        "from dprag.rag_adapters import ExactIndex, generate_clinic_corpus, DenseRetriever; "
        "bad = [m for m in ('torch', 'transformers', 'faiss', 'sentence_transformers') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# ------------------------------------------------------------------------------------------------------
# issue 10 item 2: every row a function of its own inputs only (bit for bit, not atol)
# ------------------------------------------------------------------------------------------------------
Q = "What does the clinic prescribe for gout?"
SHORT = Prompt(Q, ("gout: Zorvex",))
LONG = Prompt(
    Q,
    (
        "A much longer record about a patient with gout who was given Zorvex 40 mg twice daily; "
        "follow-up booked after 30 days, nothing else of note in this visit.",
    ),
)
MIDDLE = Prompt(Q, ("Record 7: gout -> Zorvex 40 mg.",))


def _rows_over_steps(sess, rows, tokens):
    got = []
    for t in tokens:
        got.append(sess.logits()[rows].copy())
        sess.advance(t) if not isinstance(t, list) else sess.advance_each(t)
    got.append(sess.logits()[rows].copy())
    return got


@pytest.mark.parametrize("make", [tiny_gpt2, tiny_llama])
@pytest.mark.parametrize("share_prefix", [True, False])
def test_rows_do_not_depend_on_other_rows_bit_for_bit(make, share_prefix):
    """Row 0 (the no-context lane) and row 2 are identical, bit for bit, whether row 1 holds a 13-byte or a
    150-byte private document, over the prefill and 5 shared decode steps and 3 steps of per-row tokens. The
    earlier padded session (``start_padded_ids``) changes ~200 logits of those rows here: the test can fail."""
    gen = make(0)
    tokens = [72, 101, 258, 32, 0, [65, 66, 67], [10, 11, 12], [1, 2, 3]]
    runs = []
    for middle in (SHORT, LONG):
        sess = gen.start([Prompt(Q), middle, MIDDLE], share_prefix=share_prefix, max_new_tokens=len(tokens) + 1)
        runs.append(_rows_over_steps(sess, [0, 2], tokens))
    for a, b in zip(*runs, strict=False):
        assert np.array_equal(a, b)
    # the same rows under the earlier padded session do differ: the property is not vacuous on these inputs
    seqs = lambda mid: [gen.render(p) for p in (Prompt(Q), mid, MIDDLE)]  # noqa: E731
    old = [_rows_over_steps(gen.start_padded_ids(seqs(mid), headroom=16), [0, 2], tokens[:2]) for mid in (SHORT, LONG)]
    assert any(not np.array_equal(a, b) for a, b in zip(*old, strict=False))


def test_public_prefix_is_public_and_shared():
    """The public prefix depends on the template only (not on any context) and every ChatML row reuses it;
    a row that does not start with it is computed from scratch, with the same logits as alone."""
    gen = tiny_llama(0)
    pp = gen.public_prefix(SHORT)
    assert pp == gen.public_prefix(LONG) == gen.public_prefix(Prompt(Q))
    text = gen.tokenizer.decode(pp)
    assert text.endswith("<|im_start|>user\n") or text.endswith("user\n"), text
    assert SYSTEM_PROMPT in text
    odd = [5, 6, 7, 8]  # does not start with the prefix
    sess = gen.start_ids([gen.render(SHORT), odd], public_prefix=pp, headroom=4)
    alone = gen.start_ids([odd], headroom=4)
    assert sess.prefix_length == len(pp)
    np.testing.assert_allclose(sess.logits()[1], alone.logits()[0], atol=1e-6)
    np.testing.assert_allclose(sess.logits()[1], gen.reference_logits(odd), atol=1e-6)
    with pytest.raises(InvalidParameterError, match="public_prefix"):
        gen.start_ids([odd], public_prefix=[9999])


def test_a_voter_whose_documents_overflow_the_window_is_replaced_by_its_empty_context_prompt():
    """spec/protocol.md §5.3: after the charge no error may depend on the documents. A voter prompt over its public
    token budget (``prompt_capacity``; here the window less the new tokens) only because of its documents is
    replaced by its empty-context prompt (spec/accounting/rag.md §6), bit for bit the session in which that row
    held the empty-context prompt from the start; a prompt that overflows without documents (the question: public)
    still raises. The public bound covers every voter."""
    gen = tiny_llama(0, max_position_embeddings=400)
    short, long_doc = "a short note", "x " * 300  # bytes are tokens: with the template, over the window of 400
    sess = gen.start([Prompt("q?", (short,)), Prompt("q?", (long_doc,))], max_new_tokens=4)
    emptied = gen.start([Prompt("q?", (short,)), Prompt("q?", ("",))], max_new_tokens=4)
    for _ in range(2):
        assert np.array_equal(sess.logits(), emptied.logits())
        sess.advance(65)
        emptied.advance(65)
    assert not np.array_equal(sess.logits()[0], sess.logits()[1])  # the short note's row is not replaced
    sess.close()
    emptied.close()
    with pytest.raises(InvalidParameterError, match="context window"):
        gen.start([Prompt("q" * 600, (short,))], max_new_tokens=4)
    assert gen.prompt_token_bound("q?", 1, 4) is None  # documents not truncated: no public bound
    capped = CausalLMGenerator(gen.model, gen.tokenizer, name="capped", max_context_tokens=32)
    bound = capped.prompt_token_bound("q?", 2, 4)
    worst = capped.render(Prompt("q?", ("y" * 500, "z" * 500)), reserve=4)
    assert len(worst) + 4 <= bound
