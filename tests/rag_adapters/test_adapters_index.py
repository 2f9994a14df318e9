"""Indexes and the dense retriever: exact search vs brute force, bit-for-bit per-document scores,
FAISS Flat vs exact, HNSW recall, score bins, retriever errors. Data are seeded (deterministic: no
false failures beyond the fixed seeds)."""

import math

import numpy as np
import pytest

from dprag.accounting.protocols import Retriever
from dprag.errors import InvalidParameterError, UnknownDocumentError
from dprag.rag_adapters.embedder import EmbeddingCache
from dprag.rag_adapters.index import ExactIndex, FaissFlatIndex, FaissHNSWIndex, top_k_desc
from dprag.rag_adapters.retriever import DenseRetriever
from dprag.rag_adapters.scoring import MINILM_BINS, PAPER_BINS, ScoreBins


def unit(rng, n, d):
    x = rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def brute_topk(vecs, q, k):
    """Oracle: exact dot products with math.fsum, sorted by (-score, id)."""
    s = [math.fsum(float(a) * float(b) for a, b in zip(row, q, strict=False)) for row in vecs]
    order = sorted(range(len(s)), key=lambda i: (-s[i], i))[:k]
    return order, [s[i] for i in order]


def test_exact_index_matches_brute_force_with_ties():
    rng = np.random.default_rng(0)
    v = unit(rng, 300, 16)
    v[100] = v[7]  # exact duplicates: ties must go to the lower id
    v[200] = v[7]
    q = v[7].astype(np.float64)
    ix = ExactIndex(16)
    ix.add(v[:150])
    ix.add(v[150:])
    assert len(ix) == 300
    sc, ids = ix.search(q, 10)
    want_ids, want_sc = brute_topk(v, q, 10)
    assert list(ids[0]) == want_ids
    assert list(ids[0][:3]) == [7, 100, 200]
    np.testing.assert_allclose(sc[0], want_sc, rtol=0, atol=1e-14)
    sc2, ids2 = ix.search(np.stack([q, -q]), 300)  # k = n, two queries
    assert list(ids2[0]) == brute_topk(v, q, 300)[0]
    assert list(ids2[1]) == brute_topk(v, -q, 300)[0]


def test_top_k_desc_ties_and_order():
    s = np.array([1.0, 3.0, 3.0, 2.0, 3.0, 0.0])
    assert list(top_k_desc(s, 2)) == [1, 2]
    assert list(top_k_desc(s, 4)) == [1, 2, 4, 3]
    assert list(top_k_desc(s, 6)) == [1, 2, 4, 3, 0, 5]


def test_exact_scores_depend_only_on_document_and_query():
    """The private-path property: a document's score is bit-identical whatever the other documents are."""
    rng = np.random.default_rng(1)
    v = unit(rng, 2000, 37)
    q = unit(rng, 1, 37)[0]
    full = ExactIndex(37, chunk_rows=500)
    full.add(v)
    s_full = full.scores(q)
    perm = rng.permutation(2000)[:1234]  # other documents removed and reordered
    part = ExactIndex(37, chunk_rows=999)
    part.add(v[perm])
    assert np.array_equal(part.scores(q), s_full[perm])
    one = ExactIndex(37)
    one.add(v[5:6])
    assert one.scores(q)[0] == s_full[5]
    assert s_full.dtype == np.float64


def test_quantized_exact_index_is_integer_exact():
    rng = np.random.default_rng(5)
    v = unit(rng, 500, 24)
    q = unit(rng, 1, 24)[0]
    S = 2**10
    ix = ExactIndex(24, quantization=S)
    ix.add(v)
    rows = ix.int16_rows()
    assert rows.dtype == np.dtype("<i2")
    # oracle: python integers, round-half-even of S*v (python's round is half-even)
    vi = [[round(float(x) * S) for x in row] for row in v[:50]]
    qi = [round(float(x) * S) for x in q]
    assert rows[:50].tolist() == vi
    want = [sum(a * b for a, b in zip(row, qi, strict=False)) / S**2 for row in vi]
    assert ix.scores(q)[:50].tolist() == want  # exactly equal
    np.testing.assert_allclose(ix.scores(q), v.astype(np.float64) @ q, atol=24 / S)
    sub = ExactIndex(24, quantization=S)
    sub.add(v[::-7])
    assert np.array_equal(sub.scores(q), ix.scores(q)[::-7])
    with pytest.raises(InvalidParameterError):
        ExactIndex(24).int16_rows()
    with pytest.raises(InvalidParameterError):
        ExactIndex(24, quantization=2**15)


@pytest.mark.parametrize(
    "bad, field",
    [
        (np.zeros((0, 4)), "vectors"),
        (np.zeros((2, 5)), "vectors"),
        (np.full((1, 4), np.nan), "vectors"),
        (np.ones((2, 4), dtype=np.int64), "vectors"),
    ],
)
def test_index_rejects_bad_vectors(bad, field):
    ix = ExactIndex(4)
    with pytest.raises(InvalidParameterError) as e:
        ix.add(bad)
    assert e.value.field == field
    assert len(ix) == 0


def test_index_k_errors():
    ix = ExactIndex(4)
    with pytest.raises(InvalidParameterError, match="empty"):
        ix.search(np.ones(4), 1)
    ix.add(np.eye(4))
    for k in (0, 5, True, 1.5):
        with pytest.raises(InvalidParameterError) as e:
            ix.search(np.ones(4), k)
        assert e.value.field == "k"


def test_faiss_flat_agrees_with_exact():
    rng = np.random.default_rng(2)
    v = unit(rng, 3000, 64)
    qs = unit(rng, 20, 64)
    ex, fl = ExactIndex(64), FaissFlatIndex(64)
    ex.add(v)
    fl.add(v)
    sc_e, ids_e = ex.search(qs, 10)
    sc_f, ids_f = fl.search(qs, 10)
    assert sc_f.dtype == np.float64 and ids_f.dtype == np.int64
    np.testing.assert_allclose(sc_f, sc_e, atol=1e-5)  # float32 arithmetic
    for r in range(len(qs)):  # FAISS's scores are the exact scores of the ids it returns
        np.testing.assert_allclose(sc_f[r], ex.scores(qs[r])[ids_f[r]], atol=1e-5)
    assert (ids_f == ids_e).mean() > 0.99  # identical up to float32 near-ties
    assert not fl.private_ok and ex.private_ok


def test_hnsw_recall_sanity():
    rng = np.random.default_rng(3)
    centers = unit(rng, 50, 32)
    v = centers[rng.integers(0, 50, 5000)] + 0.3 * rng.standard_normal((5000, 32)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    qs = v[rng.choice(5000, 50, replace=False)] + 0.05 * rng.standard_normal((50, 32)).astype(np.float32)
    ex, hn = ExactIndex(32), FaissHNSWIndex(32, m=16, ef_search=64)
    ex.add(v)
    hn.add(v)
    _, ids_e = ex.search(qs, 10)
    _, ids_h = hn.search(qs, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids_e, ids_h, strict=False)])
    assert recall >= 0.9, recall
    hn.ef_search = 1
    _, ids_1 = hn.search(qs, 10)
    recall_1 = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids_e, ids_1, strict=False)])
    assert recall_1 < recall  # ef_search = 1 is visibly approximate (measured 0.58 vs 1.0)
    assert not hn.exact_topk and not hn.private_ok


class BowEmbedder:
    """Toy embedder: hashed bag of lower-case words, L2-normalised; counts its calls."""

    dim = 64
    fingerprint = "bow-64"

    def __init__(self):
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, sum(map(ord, w)) % self.dim] += 1.0
        n = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(n == 0, 1, n)


DOCS = [
    "the cat sat on the mat",
    "dogs chase cats",
    "stock markets fell today",
    "a cat and a dog",
    "interest rates rise",
    "zorvex is prescribed for gout",
]


def test_dense_retriever_exact_scores(tmp_path):
    emb = BowEmbedder()
    r = DenseRetriever(emb, None, DOCS, cache=EmbeddingCache(tmp_path))
    assert isinstance(r, Retriever) and len(r) == 6 and r.private_ok
    s = r.scores("which drug for gout zorvex")
    assert s.shape == (6,) and s.dtype == np.float64
    d = emb.embed(DOCS).astype(np.float64)
    q = emb.embed(["which drug for gout zorvex"])[0].astype(np.float64)
    np.testing.assert_allclose(s, 100 * d @ q, atol=1e-10)  # 100 * cosine
    assert int(np.argmax(s)) == 5
    ids, top = r.top_k("which drug for gout zorvex", 2)
    assert ids[0] == 5 and top[0] == pytest.approx(s[5])
    assert r.document(5) == DOCS[5]
    for bad in (-1, 6, "1", True):
        with pytest.raises(UnknownDocumentError):
            r.document(bad)
    with pytest.raises(InvalidParameterError):
        r.top_k("cat", 7)  # k larger than the corpus
    with pytest.raises(InvalidParameterError):
        r.scores("   ")


def test_dense_retriever_refuses_ann_for_private_scores(tmp_path):
    r = DenseRetriever(BowEmbedder(), FaissHNSWIndex(64), DOCS, cache=False)
    assert not r.private_ok
    with pytest.raises(InvalidParameterError, match="ExactIndex") as e:
        r.scores("cat")
    assert e.value.field == "index"
    ids, _ = r.top_k("cat", 3)  # baselines may still search
    assert len(ids) == 3


def test_dense_retriever_input_errors(tmp_path):
    with pytest.raises(InvalidParameterError) as e:
        DenseRetriever(BowEmbedder(), None, [], cache=False)
    assert e.value.field == "documents"
    ix = ExactIndex(64)
    ix.add(np.eye(64, dtype=np.float32)[:3])
    with pytest.raises(InvalidParameterError, match="holds 3 vectors"):
        DenseRetriever(BowEmbedder(), ix, DOCS, cache=False)
    with pytest.raises(InvalidParameterError):
        DenseRetriever(BowEmbedder(), ExactIndex(8), DOCS, cache=False)
    with pytest.raises(InvalidParameterError):
        DenseRetriever(BowEmbedder(), None, DOCS, cache=False, score_scale=float("nan"))


def test_score_bins_hand_worked():
    assert PAPER_BINS.count == 150  # 001 Appendix E: 70..100, step 0.2
    s = np.array([100.0, 101.0, 99.9, 99.8, 99.79, 85.05, 70.0, 69.99, -5.0])
    # bin i = [100 - 0.2(i+1), 100 - 0.2 i): 99.9 -> 0, 99.8 -> 0, 99.79 -> 1, 85.05 -> floor(14.95/0.2) = 74
    assert list(PAPER_BINS.assign(s)) == [0, 0, 0, 0, 1, 74, 149, -1, -1]
    assert PAPER_BINS.counts(s).sum() == 7 and PAPER_BINS.counts(s)[0] == 4
    b = ScoreBins(0.0, 1.0, 0.25)
    assert list(b.edges()) == [1.0, 0.75, 0.5, 0.25, 0.0]
    rng = np.random.default_rng(4)
    x = rng.uniform(-0.5, 1.5, 1000)
    brute = [0 if v >= 1 else (-1 if v < 0 else next(i for i in range(4) if 1 - 0.25 * (i + 1) <= v)) for v in x]
    assert list(b.assign(x)) == brute
    assert MINILM_BINS.width == PAPER_BINS.width


@pytest.mark.parametrize("args", [(1, 0, 0.2), (0, 1, 0), (0, 1, 0.3), (0, float("inf"), 0.1)])
def test_score_bins_rejects_bad_config(args):
    with pytest.raises(InvalidParameterError):
        ScoreBins(*args)


def test_embedding_cache_hit_miss_by_corpus_hash(tmp_path):
    emb = BowEmbedder()
    cache = EmbeddingCache(tmp_path)
    a = cache.embed_corpus(emb, DOCS)
    assert (cache.hits, cache.misses, emb.calls) == (0, 1, 1)
    again = EmbeddingCache(tmp_path)  # a new process would see the same files
    b = again.embed_corpus(emb, DOCS)
    assert (again.hits, again.misses, emb.calls) == (1, 0, 1)
    assert np.array_equal(a, b)
    changed = DOCS[:-1] + ["zorvex is prescribed for gout!"]
    again.embed_corpus(emb, changed)
    assert again.misses == 1 and emb.calls == 2
    # length-prefixed hashing: ("ab","c") and ("a","bc") are different corpora
    assert EmbeddingCache.key("f", ["ab", "c"]) != EmbeddingCache.key("f", ["a", "bc"])
    assert EmbeddingCache.key("f", DOCS) != EmbeddingCache.key("g", DOCS)  # model fingerprint in the key
    # a damaged entry (wrong shape) is recomputed, not trusted
    np.save(cache.path(emb.fingerprint, DOCS), np.zeros((2, 2), dtype=np.float32))
    fresh = EmbeddingCache(tmp_path)
    assert np.array_equal(fresh.embed_corpus(emb, DOCS), a) and fresh.misses == 1
    with pytest.raises(InvalidParameterError):
        cache.embed_corpus(emb, [])
