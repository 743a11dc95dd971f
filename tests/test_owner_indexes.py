"""Owners over the exact-scan cap get an HNSW index of their own, the only graphs of the searched tables: built
and dropped as they qualify (by every embedding load, `migrate` and the asset), taken by the planner for their
searches, flagged by `status` when missing or when a build was interrupted."""

from __future__ import annotations

import psycopg

from memory_pipelines.index import owner_indexes
from memory_pipelines.index.owner_indexes import existing_owner_indexes, owner_index_name, sync_owner_indexes
from memory_pipelines.index.vectors import embed_all, embed_source
from memory_pipelines.operations.status import collect_status, format_status
from memory_pipelines.retrieval import planning
from memory_pipelines.retrieval.memo import Memo
from memory_pipelines.retrieval.planning import PLANS
from memory_pipelines.retrieval.search import SearchFilters, search
from tests.factories import add_task
from tests.test_index_healing import _cli, _env

ONLY_TASKS = SearchFilters(sources=("task",))
ALICE = owner_index_name("tasks", "alice")
BOB = owner_index_name("tasks", "bob")


def _small_caps(monkeypatch) -> None:
    """20 rows instead of 10,000 for the exact-scan cap; fresh plan memos."""
    monkeypatch.setattr(owner_indexes, "EXACT_SCAN_MAX_ROWS", 20)
    monkeypatch.setattr(planning, "EXACT_SCAN_MAX_ROWS", 20)
    for memo in ("_owner_indexes", "_index_lists", "_counts"):
        monkeypatch.setattr(planning, memo, Memo())


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


def _exact(pool, owner: str, qvec) -> list[tuple[str, float]]:
    with pool.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        return conn.execute("SELECT id::text, embedding <=> %s FROM tasks WHERE owner_id = %s ORDER BY 2",
                            (qvec, owner)).fetchall()


def _nearest(hits, exact: list[tuple[str, float]]) -> bool:
    """The hits are the exact top ten (ties at the cut may swap)."""
    tenth, distance = exact[9][1], dict(exact)
    return len(hits) == 10 and all(distance[h.id] <= tenth + 1e-6 for h in hits)


def test_every_owner_over_the_cap_gets_her_own_index_and_her_search_takes_it(
    pool, fake_embedder, db_url, monkeypatch
):
    """alice holds 60 of 170 tasks and bob 100 (both over the cap of 20; bob over half the table, which once
    left him on a table-wide graph): the load that embedded them built an index for each. carol (10, under the
    cap) has none and the table no graph of all its rows. Each search plans for the owner's graph, the planner
    takes her index, and her hits are her exact nearest."""
    _small_caps(monkeypatch)
    _load(pool, fake_embedder, {"alice": 60, "bob": 100, "carol": 10})
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert existing_owner_indexes(conn, "tasks") == {ALICE: True, BOB: True}
        done = sync_owner_indexes(conn, fake_embedder.dimension)  # a second sync changes nothing
        assert (done.built, done.dropped, done.kept) == ([], [], 2)
        hnsw = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'tasks'"
                                           " AND indexdef LIKE '%USING hnsw%'")}
    assert hnsw == {ALICE, BOB}
    qvec = fake_embedder.embed_query("alice note about topic 3")
    assert ALICE in _plan(pool, "alice", qvec) and BOB in _plan(pool, "bob", qvec)
    for owner in ("alice", "bob"):
        owned = PLANS["hnsw-owner"]
        hits = search(pool, fake_embedder, owner, "q", mode="semantic", limit=10, query_vector=qvec,
                      filters=ONLY_TASKS).hits
        assert PLANS["hnsw-owner"] == owned + 1
        assert _nearest(hits, _exact(pool, owner, qvec))


def test_an_owner_over_the_cap_without_her_index_is_scanned_exactly_and_status_names_it(
    pool, fake_embedder, db_url, runtime, monkeypatch
):
    """Her index dropped (or not built yet): her search scans exactly (right answers, no index), `status` names
    the missing index as a problem, and the next embedding load builds it."""
    _small_caps(monkeypatch)
    _load(pool, fake_embedder, {"alice": 60, "carol": 10})
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {ALICE}")
        assert owner_indexes.missing_owner_indexes(conn) == {ALICE: ("tasks", "alice", 60)}
    qvec = fake_embedder.embed_query("alice note about topic 3")
    unindexed = PLANS["exact-unindexed"]
    hits = search(pool, fake_embedder, "alice", "q", mode="semantic", limit=10, query_vector=qvec,
                  filters=ONLY_TASKS).hits
    assert PLANS["exact-unindexed"] == unindexed + 1
    assert _nearest(hits, _exact(pool, "alice", qvec))
    assert {h.id for h in hits} <= {i for i, _ in _exact(pool, "alice", qvec)}

    text = format_status(collect_status(runtime))  # in this process: its cap of 20
    assert f"PROBLEM    HNSW index {ALICE} is missing: owner 'alice' holds 60 embedded rows of tasks" in text
    embed_all(pool, fake_embedder)  # nothing pending: the load still syncs its table's owners
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert existing_owner_indexes(conn, "tasks") == {ALICE: True}
        assert owner_indexes.missing_owner_indexes(conn) == {}


def test_an_owner_who_no_longer_qualifies_loses_her_index(pool, fake_embedder, db_url, monkeypatch):
    _small_caps(monkeypatch)
    _load(pool, fake_embedder, {"alice": 60, "bob": 100})
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert existing_owner_indexes(conn, "tasks") == {ALICE: True, BOB: True}
        conn.execute("DELETE FROM tasks WHERE owner_id = 'alice' AND id IN"
                     " (SELECT id FROM tasks WHERE owner_id = 'alice' LIMIT 45)")
        done = sync_owner_indexes(conn, fake_embedder.dimension)
        assert done.dropped == [ALICE] and done.built == []
        assert existing_owner_indexes(conn, "tasks") == {BOB: True}


def test_status_flags_an_invalid_owner_index_and_migrate_rebuilds_it(
    pool, fake_embedder, db_url, tmp_path, fake_openai, monkeypatch
):
    """A CREATE INDEX CONCURRENTLY killed midway leaves an invalid index: `status` names it a problem, and the
    next sync (here `migrate`) drops it and builds it again."""
    _small_caps(monkeypatch)
    _load(pool, fake_embedder, {"alice": 60, "bob": 100})
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {BOB}")  # bob is over the cap of 20 here, and under the real cap in `migrate`
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
        sync_owner_indexes(conn, fake_embedder.dimension)  # this process's cap of 20: both qualify again
        assert existing_owner_indexes(conn, "tasks") == {ALICE: True, BOB: True}
    assert "PROBLEM" not in _cli(env, "status").stdout


def test_a_bulk_load_that_defers_the_tables_index_defers_the_owners_and_rebuilds_them(
    pool, fake_embedder, db_url, monkeypatch
):
    """A deferred load drops the owners' graphs of the table (each would slow every row written), and builds
    them again when it is done."""
    _small_caps(monkeypatch)
    _load(pool, fake_embedder, {"alice": 60, "bob": 100})
    with psycopg.connect(db_url, autocommit=True) as conn:
        before = conn.execute("SELECT %s::regclass::oid", (ALICE,)).fetchone()[0]
        conn.execute("UPDATE tasks SET embedding = NULL, embedding_model = NULL, embedded_hash = NULL")
    result = embed_source(pool, fake_embedder, "task", defer_index=True)
    assert result.embedded == 160 and sorted(result.indexes_built) == sorted([ALICE, BOB])
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert existing_owner_indexes(conn, "tasks") == {ALICE: True, BOB: True}
        assert conn.execute("SELECT %s::regclass::oid", (ALICE,)).fetchone()[0] != before  # built anew


def test_a_live_pass_looks_only_at_the_owners_it_wrote(pool, fake_embedder, db_url, monkeypatch):
    """A server's background pass (`live`) counts only the owners whose rows it embedded, each up to the cap (a
    batch sync counts every owner of the table): alice crosses the cap with it and gets her graph at once; bob,
    who shrank under the cap meanwhile, keeps his until a batch sync drops it."""
    _small_caps(monkeypatch)
    _load(pool, fake_embedder, {"alice": 15, "bob": 40})
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert existing_owner_indexes(conn, "tasks") == {BOB: True}
        conn.execute("DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE owner_id = 'bob' LIMIT 30)")
        for i in range(10):
            add_task(conn, "alice", f"alice late note {i}", "written while the server runs")
    result = embed_source(pool, fake_embedder, "task", defer_index=False, live=True)
    assert result.embedded == 10 and result.owners == {"alice"} and result.indexes_built == [ALICE]
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert existing_owner_indexes(conn, "tasks") == {ALICE: True, BOB: True}
        assert sync_owner_indexes(conn, fake_embedder.dimension).dropped == [BOB]  # the batch sync
