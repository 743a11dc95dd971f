"""The local embedder's query cache and its concurrent calls (see LocalE5Embedder and bench/load.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

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
