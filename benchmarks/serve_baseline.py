"""The named baseline of benchmarks/bench_serve.py and benchmarks/bench_serve_real.py: the same stack (FastAPI on
uvicorn, JSON over HTTP, one process per replica) serving the same pipeline as ``dprag serve`` — WITHOUT dprag's
audit: no signed request, no commitments, no ledger, no per-document filter or store, no receipt, no consistency
proof, no retrieval channel's noise (the citations are the plain top-K).

    python benchmarks/serve_baseline.py --port P
    python benchmarks/serve_baseline.py --port P --dir D --generator NAME [--embedder NAME] [--tenant T]

- Toy (no ``--dir``): the toy window's corpus, its policy's MuRAG generation (m voters of the toy generator through
  ``PureDpRagParams.respond``, the answer the service would generate) from the plain top m·docs_per_voter documents.
- ``--dir D --generator NAME``: the window directory ``ProviderService.create`` made (what ``dprag serve --dir D
  --generator NAME`` serves), read from its public files only: the policy (config/policy.json), the tenant's quantised
  index (index/<T>.i16) and documents (docs/<T>.json), the committed embedder's name and scale (config/embedder.json;
  ``--embedder`` as in ``dprag serve``), the generator from the same ``dprag.generators`` entry point, wrapped as the
  service wraps it (``serving_models.serving_generator``). Per request the server does the model work the dprag
  service does (``ProviderService._prepare``/``_finish``/``_generate``): Q = the embedder's vector of the question
  quantised at the committed scale (dprag: the account computes it and sends it along), the exact integer scores
  against the same index, the documents the policy's retrieval selects — MuRAG: score > τ, the top m·docs_per_voter
  by score, padded with the empty document (000 Alg. 3, ``top_k_padded``, as ``recorded_top``); MuRAG-Ada: the
  documents at or above the lowest bin edge, without the noisy prefix-sum release — and the policy's generation
  ``policy.rag_params().respond(...)`` (same m voters, the fallback row, the same prompts, the same max_tokens) with
  randomness from the OS CSPRNG instead of the committed seed's stream. What it omits is every step of the audit:
  the request's signature and counter checks, the question-size refusal, the retrieval channel (noise-then-select
  top-K), the filter (no document's budget is checked or charged, so none runs out: where dprag's filter has
  refused a document the two arms generate from different documents), the ledger leaf, the opening, the served
  row, the two store transactions, the checkpoint and the receipt's signature. The response also names the
  documents the answer was generated from (``documents``), for the benchmark to compare with dprag's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio.to_thread  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from fastapi import Request as HttpRequest  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402

from dprag.audit.protocol import commitments as cm  # noqa: E402
from dprag.audit.testing.toy import CLINIC, SERVE_TOY, HashEmbedder, ToyGenerator, toy_policy  # noqa: E402


class _Docs:
    def __init__(self, docs):
        self.docs = docs

    def __len__(self):
        return len(self.docs)

    def document(self, i):
        return self.docs[int(i)]


def create_app(
    directory: Path | None = None,
    *,
    generator: str | None = None,
    embedder: str | None = None,
    tenant=None,
    threads: int | None = None,
):
    """The toy baseline, or with ``directory`` and ``generator`` the one of a window directory (module docstring).
    ``threads``: answers computed at once (as ``dprag serve --threads``; None: anyio's default, 40)."""
    answer = _toy_pipeline() if directory is None else _window_pipeline(Path(directory), generator, embedder, tenant)
    app = FastAPI()
    limiter: list = []

    @app.post("/v1/requests")
    async def submit(request: HttpRequest):
        body = await request.json()
        if threads is not None and not limiter:
            limiter.append(anyio.CapacityLimiter(threads))
        lim = limiter[0] if limiter else None
        return JSONResponse(await anyio.to_thread.run_sync(answer, body["question"], limiter=lim))

    @app.get("/v1/info")
    async def info():
        return {"api": "baseline"}

    return app


def _toy_pipeline():
    policy = toy_policy(**SERVE_TOY)
    r, g = policy.retrieval, policy.generation
    emb = HashEmbedder(32)
    scale = 1 << 10
    index = cm.quantise_embeddings(emb.embed(CLINIC), scale)
    params, gen, docs = policy.rag_params(), ToyGenerator(), _Docs(CLINIC)
    k = g.m * g.docs_per_voter

    def answer(question: str) -> dict:
        q = cm.quantise_embeddings(np.asarray(emb.embed([question])), scale)[0]
        scores = cm.integer_scores(index, q, r.score_clip, r.score_shift)
        top = np.argsort(-scores, kind="stable")[:k]
        ans = params.respond(question, top, docs, gen)  # the OS CSPRNG
        return {"answer": ans.text, "citations": [int(i) for i in top[: r.K]]}

    return answer


def _window_pipeline(d: Path, generator: str | None, embedder: str | None, tenant: str | None):
    from importlib.metadata import entry_points

    from dprag.accounting.rag.common import top_k_padded
    from dprag.audit.protocol.encoding import decode
    from dprag.audit.protocol.policy import Policy
    from dprag.audit.provider.models import load_embedder, serving_generator

    if generator is None:
        raise SystemExit("--dir needs --generator NAME (a dprag.generators entry point, as for dprag serve)")
    policy = Policy.from_dict(decode((d / "config" / "policy.json").read_bytes(), what="policy")).validate()
    r, g = policy.retrieval, policy.generation
    tenants = decode((d / "config" / "tenants.json").read_bytes(), what="tenants")
    if tenant is None:
        if len(tenants) != 1:
            raise SystemExit(f"--dir {d} holds tenants {sorted(tenants)}: name one with --tenant")
        tenant = next(iter(tenants))
    meta = tenants[tenant]
    index = np.frombuffer((d / "index" / f"{tenant}.i16").read_bytes(), dtype="<i2").reshape(
        meta["n_docs"], meta["dimension"]
    )
    docs = _Docs(decode((d / "docs" / f"{tenant}.json").read_bytes(), what="documents")["texts"])
    desc = decode((d / "config" / "embedder.json").read_bytes(), what="embedder")
    if embedder is None:  # as dprag serve names the committed embedder
        embedder = {"hash-bow-32": "toy-hash-32"}.get(desc.get("model"), desc.get("model"))
    emb, scale = load_embedder(embedder), int(desc["embedding_scale"])
    gens = {ep.name: ep for ep in entry_points(group="dprag.generators")}
    if generator not in gens:
        raise SystemExit(f"--generator {generator}: no such dprag.generators entry point ({sorted(gens)})")
    gen = serving_generator(policy, gens[generator].load()())
    params, k = policy.rag_params(), g.m * g.docs_per_voter

    def answer(question: str) -> dict:
        q = cm.quantise_embeddings(np.asarray(emb.embed([question]))[0:1], scale)[0]
        scores = cm.integer_scores(index, q, r.score_clip, r.score_shift)
        if g.algorithm == "murag":
            cand = np.flatnonzero(scores > g.tau)
        else:  # murag-ada: the binned documents, without the noisy release
            cand = np.flatnonzero(scores >= g.edges[-1])
        top = top_k_padded(cand, scores[cand].astype(np.float64), k)
        ans = params.respond(question, top, docs, gen)  # the OS CSPRNG
        cited = np.argsort(-scores, kind="stable")[: r.K]
        return {
            "answer": ans.text,
            "citations": [int(i) for i in cited],
            "documents": [int(i) for i in top if i >= 0],
        }

    return answer


if __name__ == "__main__":
    import uvicorn

    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--dir", type=Path, default=None, help="a window directory (ProviderService.create); default: toy")
    ap.add_argument("--generator", default=None, help="with --dir: a dprag.generators entry point")
    ap.add_argument("--embedder", default=None, help="with --dir: a dprag.embedders entry point (default: committed)")
    ap.add_argument("--tenant", default=None, help="with --dir: the tenant to serve (default: the only one)")
    ap.add_argument("--threads", type=int, default=None, help="answers computed at once (default: anyio's 40)")
    a = ap.parse_args()
    app = create_app(a.dir, generator=a.generator, embedder=a.embedder, tenant=a.tenant, threads=a.threads)
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False)
