"""The local embedder's query cache and its concurrent calls (see LocalE5Embedder and bench/load.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.embeddings.base import QueryCache
from memory_pipelines.embeddings.local import LocalE5Embedder

QUERIES = [f"{w} 令牌过期 {i}" for i, w in enumerate(["auth", "deploy", "rollback", "缓存", "timeout", "索引"] * 4)]


def test_query_cache_is_a_bounded_lru_of_copies():
    cache = QueryCache(size=2)
    cache.put("a", np.ones(3, dtype=np.float32))
    cache.put("b", np.zeros(3, dtype=np.float32))
    got = cache.get("a")  # "a" is now the most recent
    got[0] = 9
    assert cache.get("a")[0] == 1  # a copy was handed out
    cache.put("c", np.zeros(3, dtype=np.float32))
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    assert (cache.hits, cache.misses) == (4, 1)


def test_owners_do_not_share_cached_query_vectors(pool):
    """A cached query answers much faster, so one owner's hit would tell it what another owner asked."""
    emb = LocalE5Embedder()
    query = "what did we decide about the rollout window?"
    build_memory_context(pool, emb, "alice", query)
    misses, hits = emb.queries.misses, emb.queries.hits
    build_memory_context(pool, emb, "bob", query)
    assert (emb.queries.misses, emb.queries.hits) == (misses + 1, hits)
    build_memory_context(pool, emb, "alice", query)
    assert (emb.queries.misses, emb.queries.hits) == (misses + 1, hits + 1)


def test_cached_and_concurrent_query_vectors_equal_serial_ones():
    emb = LocalE5Embedder()
    serial = np.stack([emb.embed_batch([q], kind="query")[0] for q in QUERIES])
    with ThreadPoolExecutor(max_workers=6) as pool:
        concurrent = np.stack(list(pool.map(emb.embed_query, QUERIES)))
    assert np.allclose(concurrent, serial, atol=1e-6)
    hits = emb.queries.hits
    again = np.stack([emb.embed_query(q) for q in QUERIES])
    assert emb.queries.hits == hits + len(QUERIES)
    assert np.allclose(again, serial, atol=1e-6)
    batch = emb.embed(QUERIES, kind="query")  # a batch on one thread gives the same vectors
    assert np.allclose(batch, serial, atol=1e-5)


WORDS = ["deploy", "令牌", "cache", "索引", "retry"] * 2
PASSAGES = [f"{w} 部署流程与回滚 {i} " * (3 + i % 5) for i, w in enumerate(WORDS)]


def test_a_passage_batch_split_over_the_free_cores_equals_one_call():
    split = LocalE5Embedder(cores=3)
    one = LocalE5Embedder(cores=1)
    expected = np.stack([one.embed_batch([p])[0] for p in PASSAGES])
    assert np.allclose(one.embed_batch(PASSAGES), expected, atol=1e-6)
    assert np.allclose(split.embed_batch(PASSAGES), expected, atol=1e-6)
    with ThreadPoolExecutor(max_workers=4) as pool:  # batches and queries at once: every slot comes back
        got = list(pool.map(lambda i: split.embed_batch(PASSAGES[i:] + PASSAGES[:i]), range(4)))
        queries = list(pool.map(split.embed_query, QUERIES[:6]))
    for i, vectors in enumerate(got):
        assert np.allclose(vectors, np.roll(expected, -i, axis=0), atol=1e-6)
    assert len(queries) == 6
    assert all(s._value == 3 for s in split._slots.values())


def test_split_keeps_order_and_balances_length():
    from memory_pipelines.embeddings.local import _split

    texts = ["a" * 400, "b" * 350, "c" * 270, "d" * 290]
    assert _split(texts, 2) == [texts[:2], texts[2:]]
    assert _split(["a", "b", "c" * 1000], 2) == [["a", "b"], ["c" * 1000]]
    assert _split(["a" * 1000, "b", "c"], 3) == [["a" * 1000], ["b"], ["c"]]
    assert _split(["x"], 2) == [["x"]]
