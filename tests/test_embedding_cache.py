"""`eval --embedding-cache`: a wrapped embedder reads vectors it already computed from disk."""

from __future__ import annotations

import numpy as np

from memory_pipelines.embeddings import Embedder, FakeEmbedder
from memory_pipelines.embeddings.cache import CachedEmbedder, cache_key

TEXTS = ["the deploy broke", "we moved the meeting", "猫学会了开门", "the deploy broke", ""]


class Floored(FakeEmbedder):
    """A fake with language floors, like the local e5 model."""

    similarity_floor = 0.6
    LANGUAGE_FLOORS = {("zh", "zh"): 0.8}

    def floor_for(self, query_lang: str, doc_lang: str) -> float:
        return self.LANGUAGE_FLOORS.get((query_lang, doc_lang), self.similarity_floor)


def test_a_second_run_reads_everything_from_disk_with_identical_vectors(tmp_path):
    first_inner = FakeEmbedder(64, batch_size=2)
    first = CachedEmbedder(first_inner, tmp_path / "cache")
    passages = first.embed(TEXTS, kind="passage")
    batch = first.embed_batch(TEXTS[:2], kind="passage")
    query = first.embed_query("when did the deploy break?")
    assert first_inner.texts_embedded == 4 + 1  # four distinct passages, one query; the batch was cached
    assert (first.hits, first.misses) == (2, 5 + 1)  # the repeated text counts as a miss of its batch
    first.close()

    inner = FakeEmbedder(64, batch_size=2)
    again = CachedEmbedder(inner, tmp_path / "cache")
    assert np.array_equal(again.embed(TEXTS, kind="passage"), passages)
    assert np.array_equal(again.embed_batch(TEXTS[:2], kind="passage"), batch)
    assert np.array_equal(again.embed_query("when did the deploy break?"), query)
    assert inner.calls == 0 and inner.texts_embedded == 0
    assert again.misses == 0 and again.stored() == 5
    reference = FakeEmbedder(64)
    assert np.array_equal(passages, reference.embed(TEXTS)) and passages.dtype == np.float32
    assert np.array_equal(query, reference.embed_query("when did the deploy break?"))


def test_kind_model_and_text_are_part_of_the_key(tmp_path):
    cached = CachedEmbedder(FakeEmbedder(64), tmp_path)
    cached.embed(["alpha"], kind="passage")
    cached.embed(["alpha"], kind="query")  # another kind: a miss
    other = CachedEmbedder(FakeEmbedder(32), tmp_path)  # another model name (fake-hash-32): a miss
    assert other.embed(["alpha"]).shape == (1, 32) and other.inner.calls == 1
    mixed = cached.embed(["new one", "alpha", "another"], kind="passage")  # hits and misses keep their order
    assert np.array_equal(mixed, FakeEmbedder(64).embed(["new one", "alpha", "another"]))
    assert (cached.hits, cached.misses) == (1, 4)
    assert len({cache_key("m", k, t) for k in ("query", "passage") for t in ("a", "b")}) == 4
    assert cache_key("ab", "c", "d") != cache_key("a", "bc", "d")
    assert cached.embed([]).shape == (0, 64)


def test_everything_else_is_the_wrapped_embedders(tmp_path):
    inner = Floored(48, batch_size=7, model_name="floored")
    cached = CachedEmbedder(inner, tmp_path)
    assert isinstance(cached, Embedder)
    assert (cached.model_name, cached.dimension, cached.batch_size) == ("floored-48", 48, 7)
    assert cached.similarity_floor == 0.6
    assert cached.floor_for("zh", "zh") == 0.8 and cached.floor_for("en", "en") == 0.6
    assert cached.LANGUAGE_FLOORS is inner.LANGUAGE_FLOORS
    assert [len(b) for b in cached.batches(list("abcdefghij"))] == [7, 3]
