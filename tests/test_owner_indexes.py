"""Owners between the exact-scan cap and half a table get an HNSW index of their own: built and dropped as
they qualify, taken by the planner for their searches, flagged by `status` when a build was interrupted."""

from __future__ import annotations

import psycopg

from memory_pipelines.index import owner_indexes
from memory_pipelines.index.owner_indexes import existing_owner_indexes, owner_index_name, sync_owner_indexes
from memory_pipelines.index.vectors import embed_all, embed_source
from memory_pipelines.retrieval import search as search_module
from memory_pipelines.retrieval.search import PLANS, SearchFilters, search
from tests.factories import add_task
from tests.test_index_healing import _cli, _env

ONLY_TASKS = SearchFilters(sources=("task",))
ALICE = owner_index_name("tasks", "alice")


def _small_caps(monkeypatch) -> None:
    """20 rows instead of 10,000 for the exact-scan cap; fresh plan memos."""
    monkeypatch.setattr(owner_indexes, "EXACT_SCAN_MAX_ROWS", 20)
    monkeypatch.setattr(search_module, "EXACT_SCAN_MAX_ROWS", 20)
    for memo in ("_owner_indexes", "_index_lists", "_counts"):
        monkeypatch.setattr(search_module, memo, search_module._Memo())


def _load(pool, fake_embedder, rows: dict[str, int]) -> None:
    with pool.connection() as conn:
        for owner, n in rows.items():
            for i in range(n):
                add_task(conn, owner, f"{owner} note {i} about topic {i % 7}", f"details {i * 7 % 13}")
    embed_all(pool, fake_embedder)
    with pool.connection() as conn:
        conn.execute("ANALYZE tasks")


def _plan(pool, owner: str, qvec) -> str:
    """The index the planner takes for the owner's nearest tasks (a pooled connection: custom plans)."""
    with pool.connection() as conn, conn.transaction():
        for way in ("seqscan", "bitmapscan", "sort"):  # a table this small would otherwise be read and sorted
            conn.execute(f"SET LOCAL enable_{way} = off")
        plan = conn.execute("EXPLAIN SELECT t.id FROM tasks t WHERE t.owner_id = %s ORDER BY t.embedding <=> %s"
                            " LIMIT 10", (owner, qvec)).fetchall()
    return " ".join(r[0] for r in plan)


def test_an_owner_between_the_cap_and_half_the_table_gets_her_own_index_and_her_search_takes_it(
    pool, fake_embedder, db_url, monkeypatch
):
    """alice holds 60 of 170 tasks (over the cap of 20, under half): her own index. bob holds 100 (over
    half) and carol 10 (under the cap): none. alice's semantic search plans for her graph and the planner
    takes her index; her hits are her exact nearest; bob's search stays on the table's index."""
    _small_caps(monkeypatch)
    _load(pool, fake_embedder, {"alice": 60, "bob": 100, "carol": 10})
    with psycopg.connect(db_url, autocommit=True) as conn:
        done = sync_owner_indexes(conn, fake_embedder.dimension)
        assert done.built == [ALICE] and done.dropped == []
        assert existing_owner_indexes(conn, "tasks") == {ALICE: True}
        assert sync_owner_indexes(conn, fake_embedder.dimension).kept == 1  # a second run changes nothing
    qvec = fake_embedder.embed_query("alice note about topic 3")
    assert ALICE in _plan(pool, "alice", qvec)
    assert "tasks_embedding_hnsw" in _plan(pool, "bob", qvec) and ALICE not in _plan(pool, "bob", qvec)

    owned, shared = PLANS["hnsw-owner"], PLANS["hnsw-iterative"]
    hits = search(pool, fake_embedder, "alice", "q", mode="semantic", limit=10, query_vector=qvec,
                  filters=ONLY_TASKS).hits
    assert PLANS["hnsw-owner"] == owned + 1
    with pool.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        exact = conn.execute("SELECT id::text, embedding <=> %s FROM tasks WHERE owner_id = 'alice' ORDER BY 2",
                             (qvec,)).fetchall()
    tenth = exact[9][1]
    distance = dict(exact)
    assert len(hits) == 10 and all(distance[h.id] <= tenth + 1e-6 for h in hits)  # ties at the cut may swap
    search(pool, fake_embedder, "bob", "q", mode="semantic", limit=10, query_vector=qvec, filters=ONLY_TASKS)
    assert PLANS["hnsw-iterative"] == shared + 1


def test_an_owner_who_no_longer_qualifies_loses_her_index(pool, fake_embedder, db_url, monkeypatch):
    _small_caps(monkeypatch)
    _load(pool, fake_embedder, {"alice": 60, "bob": 100})
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert sync_owner_indexes(conn, fake_embedder.dimension).built == [ALICE]
        conn.execute("DELETE FROM tasks WHERE owner_id = 'alice' AND id IN"
                     " (SELECT id FROM tasks WHERE owner_id = 'alice' LIMIT 45)")
        done = sync_owner_indexes(conn, fake_embedder.dimension)
        assert done.dropped == [ALICE] and done.built == []
        assert existing_owner_indexes(conn, "tasks") == {}


def test_status_flags_an_invalid_owner_index_and_migrate_rebuilds_it(
    pool, fake_embedder, db_url, tmp_path, fake_openai, monkeypatch
):
    """A CREATE INDEX CONCURRENTLY killed midway leaves an invalid index: `status` names it a problem, and the
    next sync (here `migrate`) drops it and builds it again."""
    _small_caps(monkeypatch)
    _load(pool, fake_embedder, {"alice": 60, "bob": 100})
    with psycopg.connect(db_url, autocommit=True) as conn:
        sync_owner_indexes(conn, fake_embedder.dimension)
        conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", (ALICE,))
        assert existing_owner_indexes(conn, "tasks") == {ALICE: False}
    env = _env(db_url, tmp_path, fake_openai)
    status = _cli(env, "status")
    assert status.returncode == 0, status.stderr
    assert "PROBLEM    1 owner HNSW index(es) on tasks are invalid" in status.stdout
    # migrate runs in its own process, with the real cap of 10,000 rows: nobody qualifies there, so the
    # invalid index is dropped and none is built
    migrated = _cli(env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert existing_owner_indexes(conn, "tasks") == {}
        sync_owner_indexes(conn, fake_embedder.dimension)  # this process's cap of 20: alice qualifies again
        assert existing_owner_indexes(conn, "tasks") == {ALICE: True}
    assert "PROBLEM" not in _cli(env, "status").stdout


def test_a_bulk_load_that_defers_the_tables_index_defers_the_owners_and_rebuilds_them(
    pool, fake_embedder, db_url, monkeypatch
):
    """A deferred load drops the table's index and the owners' (each would slow every row written), and builds
    both again when it is done."""
    _small_caps(monkeypatch)
    _load(pool, fake_embedder, {"alice": 60, "bob": 100})
    with psycopg.connect(db_url, autocommit=True) as conn:
        sync_owner_indexes(conn, fake_embedder.dimension)
        before = conn.execute("SELECT %s::regclass::oid", (ALICE,)).fetchone()[0]
        conn.execute("UPDATE tasks SET embedding = NULL, embedding_model = NULL, embedded_hash = NULL")
    result = embed_source(pool, fake_embedder, "task", defer_index=True)
    assert result.embedded == 160 and result.index_rebuilt
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert existing_owner_indexes(conn, "tasks") == {ALICE: True}
        assert conn.execute("SELECT %s::regclass::oid", (ALICE,)).fetchone()[0] != before  # built anew
