"""``DenseRetriever``: the accounting.protocols.Retriever the DP-RAG algorithms read documents through.

Score scale: ``scores(query)[i] = score_scale * <e(query), e(doc_i)>`` with unit-norm embeddings, i.e.
``100 * cosine`` by default -- a value in [-100, 100] -- computed in float64 by ``ExactIndex.scores``
(bit-for-bit a function of document i and the query only). The papers (001 §4.2, DPR) use raw DPR inner
products, "most scores lie between 70 and 100"; our scale is different, which is why MuRAG-Ada's bins are
configuration (``rag_adapters.scoring``), fixed before any private data is seen (001 Remark 1).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dprag.errors import InvalidParameterError, UnknownDocumentError

from .common import check_texts
from .embedder import Embedder, EmbeddingCache
from .index import ExactIndex, Index, check_k


class DenseRetriever:
    """Exact dense retrieval over a fixed corpus (implements ``accounting.protocols.Retriever``).

    ``index`` is either empty (the corpus embeddings are added to it) or already holds exactly
    ``len(documents)`` vectors built from these documents in this order. ``cache``: an EmbeddingCache, None
    for the default one (~/.cache/dprag/embeddings), or False to embed without caching.
    """

    def __init__(
        self,
        embedder: Embedder,
        index: Index | None,
        documents: Sequence[str],
        *,
        cache: EmbeddingCache | None | bool = None,
        score_scale: float = 100.0,
    ):
        self.documents = check_texts("documents", documents)
        self.embedder = embedder
        if not (isinstance(score_scale, (int, float)) and np.isfinite(score_scale) and score_scale > 0):
            raise InvalidParameterError("score_scale", "must be finite and > 0", score_scale)
        self.score_scale = float(score_scale)
        self.index = ExactIndex(embedder.dim) if index is None else index
        if self.index.dim != embedder.dim:
            raise InvalidParameterError("index", f"dimension {self.index.dim} != embedder dimension {embedder.dim}")
        if len(self.index) == 0:
            if cache is False:
                emb = embedder.embed(self.documents)
            else:
                emb = (cache if isinstance(cache, EmbeddingCache) else EmbeddingCache()).embed_corpus(
                    embedder, self.documents
                )
            self.index.add(emb)
        elif len(self.index) != len(self.documents):
            raise InvalidParameterError(
                "index", f"holds {len(self.index)} vectors but there are {len(self.documents)} documents"
            )

    def __len__(self) -> int:
        return len(self.documents)

    @property
    def private_ok(self) -> bool:
        return bool(self.index.private_ok)

    def embed_query(self, query: str) -> np.ndarray:
        if not isinstance(query, str) or not query.strip():
            raise InvalidParameterError("query", "must be a non-empty string", query)
        return self.embedder.embed([query])[0]

    def scores(self, query: str) -> np.ndarray:
        """``score_scale * cosine`` of every document, shape (len(self),), float64 (exact index only)."""
        if not self.index.private_ok:
            raise InvalidParameterError(
                "index",
                f"{type(self.index).__name__} cannot give exact per-document scores; private paths use "
                "ExactIndex (HNSW / FAISS serve non-private baselines and attacks only)",
            )
        return self.score_scale * self.index.scores(self.embed_query(query))

    def top_k(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, scores) of the k best documents, best first, through the index (any index: baselines)."""
        k = check_k(k, len(self))
        sc, ids = self.index.search(self.embed_query(query)[None, :], k)
        return ids[0], self.score_scale * sc[0]

    def document(self, doc_id: int) -> str:
        if isinstance(doc_id, bool) or not isinstance(doc_id, (int, np.integer)) or not 0 <= doc_id < len(self):
            raise UnknownDocumentError([doc_id], len(self))
        return self.documents[int(doc_id)]
