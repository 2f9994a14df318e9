"""Toy stand-ins that need no model: for tests, fuzzing, the README's examples and the offline quick demo.

- ``HashEmbedder``: a deterministic bag-of-words embedder. Each word maps to a fixed pseudo-random Gaussian
  vector derived from SHA-256 of the word; a text's embedding is the sum over its words (lower-cased,
  punctuation stripped). Texts sharing words have high cosine.
- ``ToyRetriever`` and ``ToyGenerator``: implement ``accounting.protocols`` (Retriever, Generator). The toy
  "LLM" is transparent: a document containing ``ANSWER: w1 w2 ...`` (or DP-KSA's ``Keywords: w1, w2``) makes a
  voter that reads it say ``w1 w2 ... <eos>``; a voter with no such document (and the non-RAG lane) says its
  ``default`` answer. Logits are one-hot-like (the planned token gets ``confidence``, others 0), so the vote
  histogram is exactly the voters' plans.
- ``ToyTextGenerator``: the toy generator seen only through text (what a hosted LLM offers), deterministic;
  ``HostedToyLLM``: a callable ``prompt_text -> str`` that nobody can replay.
- The toy windows' corpora (``CLINIC``, ``LEGAL``) and their one policy, ``toy_policy``; ``SERVE_TOY`` its
  settings for ``dprag serve --toy``.
- ``dprag serve --toy``: ``make_toy_directory`` writes a service directory that starts in seconds (hash
  embedder, toy generator, two tenants, accounts whose keys it writes), for tests and smoke checks of the HTTP
  API. Besides the service directory itself it writes under DIR: ``accounts/<name>/`` an account directory as
  ``dprag account new`` makes it (``account.key`` 0600, ``account.vkey``, ``config.json`` pinning the provider
  key and the toy embedder, so the account computes Q itself); ``auditor.key`` (0600) and ``auditor.vkey``: the
  key the confidential bundle export is authenticated with; ``provider.vkey`` and ``chain.id``: what an auditor
  pins. TEST ONLY: with ``DPRAG_TEST_TOY_HOLD`` set in its environment, ``dprag serve --toy`` generates with
  ``HoldingToyGenerator`` (``toy_generator``), which holds the answer of chosen requests after their record
  committed, so a fault test can kill a replica in exactly that state. Never set it in production.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dprag.accounting.collusion import exact_sigma
from dprag.accounting.protocols import Prompt
from dprag.errors import InvalidParameterError

from ..protocol.commitments import EmbedderDescriptor
from ..protocol.encoding import loads_bounded
from ..protocol.policy import CoalitionPolicy, GenerationPolicy, Policy, RetrievalPolicy, SamplerSpec
from ..protocol.request import AccountKey

_ANSWER = re.compile(r"(?:ANSWER|Keywords):\s*([^\n.]+)")
_WORD = re.compile(r"[a-z0-9]+")


class HashEmbedder:
    def __init__(self, dimension: int = 32):
        self.dimension = dimension
        self._cache: dict[str, np.ndarray] = {}

    def _word(self, w: str) -> np.ndarray:
        v = self._cache.get(w)
        if v is None:
            seed = int.from_bytes(hashlib.sha256(w.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dimension)
            self._cache[w] = v
        return v

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension))
        for i, t in enumerate(texts):
            for w in _WORD.findall(t.lower()):
                out[i] += self._word(w)
        return out

    def descriptor(self, schema: dict[str, int], prompt_template: str = "toy") -> EmbedderDescriptor:
        h = hashlib.sha256(f"dprag.HashEmbedder/{self.dimension}".encode()).hexdigest()
        return EmbedderDescriptor(
            model=f"hash-bow-{self.dimension}",
            entry_point="toy-hash-32" if self.dimension == 32 else None,
            weights_sha256=h,
            dimension=self.dimension,
            prompt_template=prompt_template,
            tokenizer_sha256=h,
            schema=schema,
        )


class ToyRetriever:
    """Exact scores: the number of query words a document contains, plus a tiny id tie-breaker."""

    def __init__(self, documents: Sequence[str]):
        self.docs = list(documents)
        self._words = [set(d.lower().split()) for d in self.docs]

    def __len__(self) -> int:
        return len(self.docs)

    def scores(self, query: str) -> np.ndarray:
        q = set(query.lower().split())
        return np.array([len(q & w) for w in self._words], dtype=np.float64)

    def document(self, doc_id: int) -> str:
        if not 0 <= doc_id < len(self.docs):
            raise InvalidParameterError("doc_id", f"must lie in [0, {len(self.docs)})", doc_id)
        return self.docs[doc_id]


class _ToySession:
    def __init__(self, gen: ToyGenerator, plans: list[list[int]]):
        self.gen, self.plans, self.t = gen, plans, 0

    def logits(self) -> np.ndarray:
        out = np.zeros((len(self.plans), self.gen.vocab_size), dtype=np.float32)
        for i, plan in enumerate(self.plans):
            tok = plan[self.t] if self.t < len(plan) else self.gen.eos_token_id
            out[i, tok] = self.gen.confidence
        return out

    def advance(self, token_id: int) -> None:
        self.t += 1


class ToyGenerator:
    """Vocabulary grows as words are seen; token 0 is <eos>, the last id (``vocab_size - 1``) is <unk>: a word seen
    once the vocabulary is full maps to it. Sessions never raise, whatever the documents: the generator declares
    ``failure_free_sessions`` (spec/provider.md §3.5; tests/audit/provider/test_failure_free_sessions.py drives it)."""

    eos_token_id = 0
    failure_free_sessions = True
    #: what C_emb binds as the prompt template of a window served by the toy generator (its class path when it was
    #: first committed; explicit, so that moving the class never changes a committed toy window's bytes)
    prompt_template = "dprag.audit.toy.ToyGenerator"

    def __init__(self, default: str = "unknown", vocab_size: int = 512, confidence: float = 10.0):
        self.vocab = ["<eos>"]
        self.index = {"<eos>": 0}
        self.vocab_size = vocab_size
        self.default = default
        self.confidence = confidence
        self.calls = 0

    @property
    def unk_token_id(self) -> int:
        return self.vocab_size - 1

    def _tok(self, word: str) -> int:
        if word not in self.index:
            if len(self.vocab) >= self.unk_token_id:
                return self.unk_token_id  # full: never an error that would depend on the documents' words
            self.index[word] = len(self.vocab)
            self.vocab.append(word)
        return self.index[word]

    def plan(self, prompt: Prompt) -> list[int]:
        for ctx in prompt.contexts:
            m = _ANSWER.search(ctx)
            if m:
                return [self._tok(w) for w in m.group(1).replace(",", " ").split()] + [0]
        # an earlier answer to a question sharing >= 2 words is reused (models answer-history reuse)
        words = set(prompt.question.lower().split())
        for q, a in prompt.history:
            if len(words & set(q.lower().split())) >= 2 and a and a != self.default:
                return [self._tok(w) for w in a.split()] + [0]
        return [self._tok(w) for w in self.default.split()] + [0]

    def start(self, prompts: Sequence[Prompt], *, max_new_tokens: int = 1) -> _ToySession:
        self.calls += 1
        return _ToySession(self, [self.plan(p) for p in prompts])

    def encode(self, text: str) -> list[int]:
        return [self._tok(w) for w in text.split()]

    def worst_case_bytes(self, question: str, n_contexts: int, batch: int, max_new_tokens: int) -> int:
        """A session's public worst case (spec/provider.md §3.6): its float32 logits, ``batch`` rows."""
        return int(batch) * self.vocab_size * 4

    def generate_many(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[str]:
        return [self.generate(p, max_new_tokens) for p in prompts]

    def decode(self, token_ids: Sequence[int]) -> str:
        unk = self.unk_token_id
        return " ".join(
            self.vocab[t] if t < len(self.vocab) else "<unk>" if t == unk else f"<tok{t}>" for t in token_ids if t != 0
        )

    def generate(self, prompt: Prompt, max_new_tokens: int) -> str:
        return self.decode(self.plan(prompt)[:max_new_tokens])


class ToyTextGenerator:
    """The toy generator seen only through text (no logits, no tokenizer): what a hosted LLM offers. Deterministic,
    so an auditor can replay it (``replayable=True`` policies)."""

    prompt_template = "toy text-only generator (accounting.rag.toy.ToyGenerator plans)"

    def __init__(self):
        self._toy = ToyGenerator()

    def generate(self, prompt, max_new_tokens: int) -> str:
        return self._toy.generate(prompt, max_new_tokens)

    def generate_many(self, prompts, max_new_tokens: int) -> list[str]:
        return [self.generate(p, max_new_tokens) for p in prompts]


class HostedToyLLM:
    """A 'hosted LLM': a callable prompt_text -> str that nobody can replay (it appends a fresh random word, as a
    sampling API would vary its wording). It answers the toy documents' ANSWER words found in its prompt. Safe to
    call from several threads (``TextOnlyGenerator`` runs the voters' calls concurrently): ``calls`` is exact."""

    def __init__(self):
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, text: str) -> str:
        with self._lock:
            self.calls += 1
        found = re.findall(r"(?:ANSWER|Keywords):\s*([^\n.]+)", text)
        word = found[0].replace(",", " ").strip() if found else "unknown"
        return f"{word} {os.urandom(4).hex()}"


def load_hash_embedder() -> HashEmbedder:
    """The ``toy-hash-32`` entry point (``dprag.embedders``): what toy accounts compute Q with."""
    return HashEmbedder(32)


def load_toy_generator():
    """The ``toy`` entry point (``dprag.generators``)."""
    return ToyGenerator()


# -- the toy windows' corpora and policy (audit/testing/window.py, dprag serve --toy) ------------------------------
CLINIC = [f"patient {i} asthma protocol inhaler drug ANSWER: zorvatin" for i in range(30)] + [
    f"note {i} garden weather rain" for i in range(70)
]
LEGAL = [f"case {i} contract dispute court ANSWER: settled" for i in range(20)] + [
    f"memo {i} lunch menu soup" for i in range(30)
]


def toy_policy(
    algorithm: str = "murag",
    *,
    n: int = 20,
    k_max: int = 5,
    window: str = "w1",
    max_queries_per_doc: int = 2,
    mechanism: str = "pure-dp-rag",
    replayable: bool = True,
    vote_selection: str = "universal",
    vote_delta: float | None = None,
    abstain_empty: bool = False,
    normalizer: str = "basic",
    vote_epsilon: float = 4.0,
    release_period: float | None = None,
) -> Policy:
    sens = ((1 << 20) >> 10) + 1
    if algorithm == "murag":
        gen = GenerationPolicy(
            algorithm="murag",
            m=10,
            epsilon_token=4.0,
            max_private_tokens=3,
            max_queries_per_doc=max_queries_per_doc,
            tau=300,
        )
    else:
        gen = GenerationPolicy(
            algorithm="murag-ada",
            m=10,
            epsilon_token=4.0,
            max_private_tokens=3,
            max_queries_per_doc=max_queries_per_doc,
            edges=(1024, 800, 600, 400, 200),
            epsilon_thr=1.0,
        )
    if mechanism == "dp-ksa":
        import dataclasses

        # 20 voters (Top-20 of the charged documents) agree on the toy answer word when they read the clinic's
        # answer documents (gap d_1 = 20): the PTR offset at ε_ptr = 4 (discrete Laplace scale 1/2, δ = 1e-12) is
        # c = 13, so the test passes unless the noise is <= -5 (probability e^-10/(1+e^-2) = 4.0e-5)
        gen = dataclasses.replace(
            gen,
            m=20,
            mechanism="dp-ksa",
            ksa_epsilon_em=2.0,
            ksa_epsilon_ptr=4.0,
            ksa_delta=1e-12,
            ksa_max_keywords=5,
            ksa_response_tokens=8,
            ksa_replayable=replayable,
        )
    if mechanism == "answer-vote":
        import dataclasses

        gen = dataclasses.replace(
            gen,
            mechanism="answer-vote",
            vote_epsilon=vote_epsilon,
            vote_threshold=2.0,
            key_words=2,
            normalizer=normalizer,
            vote_selection=vote_selection,
            vote_delta=vote_delta,
            abstain_empty=abstain_empty,
        )
    return Policy(
        window=window,
        retrieval=RetrievalPolicy(
            enabled_tenants=("clinic",),
            K=5,
            n=n,
            epsilon_acc=1.0,
            delta_acc=1e-6,
            sigma=exact_sigma(1.0, 1e-6, n, sens),
            sensitivity=sens,
            score_clip=(0, 1 << 20),
            score_shift=10,
            sampler=SamplerSpec(9.5, 64, 1e-12),
        ),
        coalition=CoalitionPolicy(k_max=k_max, delta_policy=1e-5),
        generation=gen,
        release_period=release_period,
    )


#: ``toy_policy``'s settings for the window ``dprag serve --toy`` makes: MuRAG, citations on for the clinic, 200
#: queries per account, 20 queries per document, k_max 4
SERVE_TOY = {"algorithm": "murag", "window": "toy-1", "n": 200, "k_max": 4, "max_queries_per_doc": 20}


#: TEST ONLY (see module docstring): the environment variable ``toy_generator`` reads
HOLD_ENV = "DPRAG_TEST_TOY_HOLD"


class HoldingToyGenerator(ToyGenerator):
    """TEST ONLY. The toy generator that, before generating the answer to a question ``match`` (a regular expression)
    finds, writes ``DIR/<first 16 hex of SHA-256(question)>.held`` (JSON: the question, this process's id, the time)
    and then holds ``seconds``. Generation runs after the request's record committed and before its answer is stored
    (spec/provider.md §6), so while the file exists and the hold lasts, the request is recorded — charged, its query
    leaf appended — and has no stored answer. It commits to what ``ToyGenerator`` commits to: the answers are the
    same, only later."""

    def __init__(self, match: str, seconds: float, directory: str | os.PathLike):
        super().__init__()
        self.match, self.seconds, self.dir = re.compile(match), float(seconds), Path(directory)

    def _hold(self, questions) -> None:
        for q in questions:
            if self.match.search(q):
                self.dir.mkdir(parents=True, exist_ok=True)
                name = hashlib.sha256(q.encode("utf-8")).hexdigest()[:16]
                tmp = self.dir / f"{name}.{os.getpid()}.tmp"
                tmp.write_text(json.dumps({"question": q, "pid": os.getpid(), "time": time.time()}))
                os.replace(tmp, self.dir / f"{name}.held")  # whole or absent
                time.sleep(self.seconds)
                return

    def start(self, prompts, *, max_new_tokens: int = 1):
        self._hold(sorted({p.question for p in prompts}))
        return super().start(prompts, max_new_tokens=max_new_tokens)

    def generate_many(self, prompts, max_new_tokens: int) -> list[str]:
        self._hold(sorted({p.question for p in prompts}))
        return super().generate_many(prompts, max_new_tokens)


def toy_generator() -> ToyGenerator:
    """The toy window's generator: ``ToyGenerator``, or, TEST ONLY, with ``DPRAG_TEST_TOY_HOLD`` set to JSON
    ``{"match": REGEX, "seconds": S, "dir": DIR}``, a ``HoldingToyGenerator`` (see its docstring)."""
    raw = os.environ.get(HOLD_ENV)
    if not raw:
        return ToyGenerator()
    try:
        cfg = loads_bounded(raw, what=HOLD_ENV)
        gen = HoldingToyGenerator(cfg["match"], cfg["seconds"], cfg["dir"])
    except (ValueError, KeyError, TypeError, re.error) as e:
        raise InvalidParameterError(HOLD_ENV, 'must be JSON {"match": REGEX, "seconds": S, "dir": DIR}', raw) from e
    if not 0 <= gen.seconds <= 3600:
        raise InvalidParameterError(HOLD_ENV, "seconds must lie in [0, 3600]", raw)
    return gen


def toy_accounts(count: int) -> dict[str, str]:
    """``count`` accounts: alice, bob, carol, dave, then a05, a06, ... (carol on the legal tenant, the rest clinic)."""
    names = ["alice", "bob", "carol", "dave"][:count] + [f"a{i:02d}" for i in range(5, count + 1)]
    return {a: ("legal" if a == "carol" else "clinic") for a in names}


def _private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def make_toy_directory(
    d: Path,
    *,
    store: str | None = None,
    n: int = 200,
    accounts: int = 4,
    seed: bytes | None = None,
    generator: ToyGenerator | None = None,
    signer=None,
):
    """Create the toy service directory at ``d`` (see module docstring); returns the open ProviderService
    (``generator``: a ``ToyGenerator`` to serve with, ``toy_generator()`` for ``dprag serve --toy``)."""
    from ..provider.service import ProviderService

    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    registry = toy_accounts(accounts)
    keys = {a: AccountKey.generate() for a in registry}
    auditor = AccountKey.generate()
    emb = HashEmbedder(32)
    svc = ProviderService.create(
        d / "service",
        policy=toy_policy(**{**SERVE_TOY, "n": n}),
        embedder=emb,
        embedder_descriptor=emb.descriptor({"clinic": len(CLINIC), "legal": len(LEGAL)}),
        generator=ToyGenerator() if generator is None else generator,
        tenants={"clinic": CLINIC, "legal": LEGAL},
        accounts={a: (t, keys[a].vkey) for a, t in registry.items()},
        store=store,
        seed=seed,
        signer=signer,
        allow_weak=True,
    )
    for a, k in keys.items():
        ad = d / "accounts" / a
        ad.mkdir(parents=True, exist_ok=True)
        _private(ad / "account.key", k.to_hex() + "\n")
        (ad / "account.vkey").write_text(k.vkey + "\n")
        cfg = {
            "account": a,
            "window": svc.policy.window,
            "provider_key": svc.signer.vkey(),
            "origin": svc.origin,
            "embedder": "toy-hash-32",
            "embedding_scale": int(svc.embedder_descriptor["embedding_scale"]),
        }
        (ad / "config.json").write_text(json.dumps(cfg, sort_keys=True) + "\n")
    _private(d / "auditor.key", auditor.to_hex() + "\n")
    (d / "auditor.vkey").write_text(auditor.vkey + "\n")
    (d / "provider.vkey").write_text(svc.signer.vkey() + "\n")
    (d / "chain.id").write_text(svc.chain_id + "\n")
    return svc


def open_toy_directory(d: Path, *, store: str | None = None, generator: ToyGenerator | None = None, signer=None):
    from ..provider.service import ProviderService

    gen = ToyGenerator() if generator is None else generator
    return ProviderService.open(
        Path(d) / "service", embedder=HashEmbedder(32), generator=gen, store=store, signer=signer
    )
