"""The named baseline of benchmarks/bench_serve.py: the same stack (FastAPI on uvicorn, JSON over HTTP, one process per
replica) serving the same toy pipeline — the toy window's corpus, its policy's MuRAG generation (m voters of the toy
generator through ``PureDpRagParams.respond``, the answer the service would generate) — WITHOUT dprag's audit: no
signed request, no commitments, no ledger, no per-document filter or store, no receipt, no consistency proof.

    python benchmarks/serve_baseline.py --port P
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi import FastAPI  # noqa: E402
from fastapi import Request as HttpRequest  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from starlette.concurrency import run_in_threadpool  # noqa: E402

from dprag.audit import commitments as cm  # noqa: E402
from dprag.audit.api.toy import CLINIC, toy_policy  # noqa: E402
from dprag.audit.toy import HashEmbedder, ToyGenerator  # noqa: E402


class _Docs:
    def __init__(self, docs):
        self.docs = docs

    def __len__(self):
        return len(self.docs)

    def document(self, i):
        return self.docs[int(i)]


def create_app():
    policy = toy_policy()
    r, g = policy.retrieval, policy.generation
    emb = HashEmbedder(32)
    scale = 1 << 10
    index = cm.quantise_embeddings(emb.embed(CLINIC), scale)
    params, gen, docs = policy.rag_params(), ToyGenerator(), _Docs(CLINIC)
    k = g.m * g.docs_per_voter
    app = FastAPI()

    def answer(question: str) -> dict:
        q = cm.quantise_embeddings(np.asarray(emb.embed([question])), scale)[0]
        scores = cm.integer_scores(index, q, r.score_clip, r.score_shift)
        top = np.argsort(-scores, kind="stable")[:k]
        ans = params.respond(question, top, docs, gen)  # the OS CSPRNG
        return {"answer": ans.text, "citations": [int(i) for i in top[: r.K]]}

    @app.post("/v1/requests")
    async def submit(request: HttpRequest):
        body = await request.json()
        return JSONResponse(await run_in_threadpool(answer, body["question"]))

    @app.get("/v1/info")
    async def info():
        return {"api": "baseline"}

    return app


if __name__ == "__main__":
    import uvicorn

    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    uvicorn.run(create_app(), host="127.0.0.1", port=a.port, log_level="warning", access_log=False)
