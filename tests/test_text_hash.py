"""The content hash covers exactly the indexed text (sql/005_indexed_text.sql).

A change of anything the text reads (a task's status, a memory's speaker, a project's name) makes exactly
the affected rows pending for the embedding backfill and the keyword refresh; a change of anything else
does not; and the migration keeps the embeddings of rows whose text did not change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import psycopg

from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.embeddings.base import to_array
from memory_pipelines.index.keywords import index_all, index_rows, index_source, keyword_staleness
from memory_pipelines.index.vectors import count_pending, embed_all, embed_source, model_text
from memory_pipelines.infra.db import connect, get_pool
from memory_pipelines.infra.migrate import index_exists, load_migrations, migrate
from memory_pipelines.store.ingest import ingest_memory
from memory_pipelines.text.keywords import terms as kw_terms
from memory_pipelines.vocabulary import INDEXED, INDEXED_NAMES
from tests.factories import add_capability, add_event, add_learning, add_memory, add_task

DIM = 384


class RecordingEmbedder(FakeEmbedder):
    """The fake embedder, keeping every text it was asked to embed."""

    def __init__(self) -> None:
        super().__init__(DIM)
        self.seen: list[str] = []

    def embed_batch(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        self.seen.extend(texts)
        return super().embed_batch(texts, kind)


def md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def _texts(conn, source_name: str, where: str = "true", params: tuple = ()) -> dict[str, tuple[str, str]]:
    """id -> (indexed text, content_hash) of one source."""
    src = INDEXED[source_name]
    rows = conn.execute(
        f"SELECT t.id::text, {src.text_sql}, t.content_hash FROM {src.from_sql} WHERE {where}", params
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def _pending(pool, model: str) -> dict[str, int]:
    with pool.connection() as conn:
        return {name: count_pending(conn, name, model)[0] for name in INDEXED_NAMES}


def _stale_keywords(pool) -> dict[str, int]:
    with pool.connection() as conn:
        return {name: keyword_staleness(conn, name)["stale"] for name in INDEXED_NAMES}


def _memory_vector_is_its_fragments_mean(pool, memory_id: str) -> bool:
    with pool.connection() as conn:
        own = [to_array(r[0]) for r in conn.execute(
            "SELECT embedding FROM fragments WHERE memory_id = %s AND NOT with_context", (memory_id,))]
        vector = to_array(conn.execute("SELECT avg_embedding FROM memories WHERE id = %s", (memory_id,)).fetchone()[0])
    mean = np.mean(own, axis=0)
    return bool(np.allclose(vector / np.linalg.norm(vector), mean / np.linalg.norm(mean), atol=1e-5))


def _seed(pool) -> dict[str, str]:
    with pool.connection() as conn:
        ids = {f"task{i}": add_task(conn, "alice", f"task {i} about deployment", f"details {i}",
                                    status="in_progress", project_key="apollo") for i in range(4)}
        ids["learning"] = add_learning(conn, "alice", "auth error", "token expired", failure_class="AUTH")
        ids["capability"] = add_capability(conn, "alice", "deploy", "ships services")
        ids["mem_a"] = add_memory(conn, "alice", "apollo uses blue green deploys", project="apollo")
        ids["mem_a2"] = add_memory(conn, "alice", "apollo canary stage lasts ten minutes", project="apollo",
                                   speaker="bob")
        ids["mem_b"] = add_memory(conn, "alice", "hermes retries payments three times", project="hermes")
        ids["event"] = add_event(conn, "alice", "task_failed", {"error": "deploy timed out", "attempt": 3})
    return ids


def _settle(pool, embedder) -> None:
    embed_all(pool, embedder)
    index_all(pool)
    assert _pending(pool, embedder.model_name) == dict.fromkeys(INDEXED_NAMES, 0)
    assert _stale_keywords(pool) == dict.fromkeys(INDEXED_NAMES, 0)


def test_hash_is_md5_of_the_text_the_backfill_embeds(pool):
    _seed(pool)
    for name in INDEXED_NAMES:
        rec = RecordingEmbedder()
        result = embed_source(pool, rec, name)
        assert result.embedded == len(rec.seen) > 0
        with pool.connection() as conn:
            rows = _texts(conn, name)
            stored = dict(conn.execute(
                f"SELECT t.id::text, t.embedded_hash FROM {INDEXED[name].from_sql}").fetchall())
        assert sorted(model_text(text) for text, _ in rows.values()) == sorted(rec.seen)  # the model: no day
        for item_id, (text, content_hash) in rows.items():
            assert content_hash == md5(text) == stored[item_id], (name, text)
    with pool.connection() as conn:
        text = conn.execute("SELECT mp_task_text('T', 'body', NULL, 'failed', 'apollo', '2024-03-05 23:30-02')")
        assert text.fetchone()[0] == "T\nbody\n[task · - · failed · apollo · 2024-03-06]"
        # content_hash is derived: writing it directly is overruled by the trigger
        for name in INDEXED_NAMES:
            table = INDEXED[name].table
            hashes = conn.execute(f"UPDATE {table} SET content_hash = 'x' RETURNING content_hash").fetchall()
            assert hashes and ("x",) not in hashes


def test_ingest_writes_the_hash_the_trigger_computes(pool):
    rec = RecordingEmbedder()
    result = ingest_memory(pool, rec, None, "alice", content="the release train leaves on fridays",
                           content_type="plan", project_name="Apollo", speaker="bob",
                           ts=1_767_225_600)  # 2026-01-01T00:00:00Z: the date its indexed text carries
    with pool.connection() as conn:
        rows = _texts(conn, "fragment", "t.memory_id = %s", (result.id,))
        embedded = conn.execute(
            "SELECT embedded_hash FROM fragments WHERE memory_id = %s", (result.id,)).fetchall()
        kd = conn.execute(
            "SELECT kd.content_hash FROM keyword_docs kd JOIN fragments f ON f.id = kd.item_id"
            " WHERE kd.source = 'fragment' AND f.memory_id = %s", (result.id,)).fetchall()
    text = "bob: the release train leaves on fridays\n[Apollo · plan"
    assert [text for text, _ in rows.values()] == [text + " · 2026-01-01]"]
    assert rec.seen == [text + "]"]  # the model reads no day
    assert [(h,) for _, h in rows.values()] == embedded == kd
    assert _pending(pool, rec.model_name)["fragment"] == 0


def test_status_change_reembeds_exactly_that_task(pool, fake_embedder):
    ids = _seed(pool)
    _settle(pool, fake_embedder)
    with pool.connection() as conn:
        # changes outside the text leave everything current
        conn.execute("UPDATE tasks SET metadata = '{\"x\": 1}', updated_at = now() WHERE id = %s", (ids["task1"],))
        conn.execute("UPDATE learnings SET trigger_event = 'login' WHERE id = %s", (ids["learning"],))
        conn.execute("UPDATE projects SET updated_at = now(), machine_name = 'box'")
    assert _pending(pool, fake_embedder.model_name) == dict.fromkeys(INDEXED_NAMES, 0)
    with pool.connection() as conn:
        conn.execute("UPDATE tasks SET status = 'failed', updated_at = now() WHERE id = %s", (ids["task2"],))
    assert _pending(pool, fake_embedder.model_name) == {
        "task": 1, "learning": 0, "capability": 0, "fragment": 0, "event": 0}
    assert _stale_keywords(pool)["task"] == 1

    rec = RecordingEmbedder()
    assert embed_source(pool, rec, "task").embedded == 1
    assert len(rec.seen) == 1 and rec.seen[0].startswith("task 2 about deployment\n")
    assert "· failed ·" in rec.seen[0]
    keywords = index_source(pool, "task")
    assert keywords.indexed == 1
    with pool.connection() as conn:
        terms = {r[0] for r in conn.execute(
            "SELECT keyword FROM keywords WHERE source = 'task' AND item_id = %s", (ids["task2"],))}
    assert kw_terms("failed")[0] in terms and "in_progress" not in terms  # stored as stems: "fail"
    assert _pending(pool, fake_embedder.model_name)["task"] == 0 and _stale_keywords(pool)["task"] == 0


def test_project_rename_and_memory_edit_reembed_their_fragments(pool, fake_embedder):
    ids = _seed(pool)
    _settle(pool, fake_embedder)
    with pool.connection() as conn:
        apollo = conn.execute(
            "SELECT count(*) FROM fragments WHERE memory_id = ANY(%s)", ([ids["mem_a"], ids["mem_a2"]],)
        ).fetchone()[0]
        conn.execute("UPDATE projects SET project_name = 'Apollo Platform' WHERE project_key = 'apollo'")
    assert _pending(pool, fake_embedder.model_name) == {
        "task": 0, "learning": 0, "capability": 0, "fragment": apollo, "event": 0}
    assert _stale_keywords(pool)["fragment"] == apollo

    rec = RecordingEmbedder()
    assert embed_source(pool, rec, "fragment").embedded == apollo == len(rec.seen)
    assert all("[Apollo Platform · insight]" in text for text in rec.seen)
    for memory in (ids["mem_a"], ids["mem_a2"]):  # each memory's vector is its fragments' new mean
        assert _memory_vector_is_its_fragments_mean(pool, memory)
    assert index_source(pool, "fragment").indexed == apollo
    with pool.connection() as conn:
        terms = {r[0] for r in conn.execute(
            "SELECT k.keyword FROM keywords k JOIN fragments f ON f.id = k.item_id"
            " WHERE k.source = 'fragment' AND f.memory_id = %s", (ids["mem_a"],))}
    assert "platform" in terms

    with pool.connection() as conn:  # what the text reads from the memory: speaker, type, date
        conn.execute("UPDATE memories SET speaker = 'carol' WHERE id = %s", (ids["mem_b"],))
        conn.execute("UPDATE memories SET summary = 'other' WHERE id = %s", (ids["mem_a"],))
    rec = RecordingEmbedder()
    assert embed_source(pool, rec, "fragment").embedded == len(rec.seen) == 1
    assert rec.seen[0].startswith("carol: hermes retries payments")
    assert _pending(pool, fake_embedder.model_name) == dict.fromkeys(INDEXED_NAMES, 0)


# --- the migration on a database populated under 004 ---------------------------------------------------------


def _migrate_through(url: str, last: int) -> None:
    """Apply migrations up to `last` the way the runner does (schema_migrations rows included)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for mig in load_migrations():
            if mig.version <= last:
                with conn.transaction():
                    conn.execute(mig.sql.replace("{{EMBED_DIM}}", str(DIM)))
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                        (mig.version, mig.name, mig.checksum),
                    )


def test_migration_keeps_current_embeddings_and_requeues_changed_rows(empty_db_url):
    _migrate_through(empty_db_url, 4)
    model = FakeEmbedder(DIM).model_name
    vec = np.ones(DIM, dtype=np.float32) / np.sqrt(DIM)
    with connect(empty_db_url, autocommit=True) as conn:
        kept = add_task(conn, "alice", "kept task", "unchanged since embedded", project_key="apollo")
        moved = add_task(conn, "alice", "moved task", "status changed after embedding", status="in_progress")
        fresh = add_task(conn, "alice", "fresh task", "never embedded")
        add_learning(conn, "alice", "auth error", "token expired", failure_class="AUTH")
        add_capability(conn, "alice", "deploy", "ships services")
        add_memory(conn, "alice", "apollo uses blue green deploys", project="apollo", speaker="bob")
        # what 004's backfill and ingest wrote: embedded_hash = the generated content_hash of the time
        for table in ("tasks", "learnings", "capabilities", "fragments"):
            conn.execute(
                f"UPDATE {table} SET embedding = %s, embedding_model = %s, embedded_hash = content_hash,"
                " embedded_at = now() WHERE id::text <> %s",
                (vec, model, fresh),
            )
        for source, table in (("task", "tasks"), ("learning", "learnings"), ("capability", "capabilities"),
                              ("fragment", "fragments")):
            rows = conn.execute(f"SELECT id::text, owner_id, id::text, content_hash FROM {table}").fetchall()
            index_rows(conn, source, rows)
        conn.execute(
            "UPDATE tasks SET status = 'failed', updated_at = embedded_at + interval '1 minute' WHERE id = %s",
            (moved,),
        )
        old = dict(conn.execute("SELECT id::text, content_hash FROM tasks").fetchall())
        embedded_at = dict(conn.execute("SELECT id::text, embedded_at FROM tasks").fetchall())

    applied = migrate(empty_db_url, DIM, model)
    assert applied[0] == "005_indexed_text"
    assert migrate(empty_db_url, DIM, model) == []

    with connect(empty_db_url, autocommit=True) as conn:
        for name in INDEXED_NAMES:  # every hash recomputed as md5 of the indexed text
            for text, content_hash in _texts(conn, name).values():
                assert content_hash == md5(text)
        assert all(old[i] != h for i, (_, h) in _texts(conn, "task").items())
        for index in ("tasks_embedding_hnsw", "learnings_embedding_hnsw", "fragments_embedding_hnsw"):
            assert not index_exists(conn, index)  # rebuilt by 005, then gone in 012: owners' graphs instead
        # 005 kept every unchanged row's keyword entry current; 011 (stems) and 016 (Chinese word parts) then sent
        # every entry back to the refresh by prefixing its hash: without the prefixes, only the moved task's is stale
        stale_kw = {name: conn.execute(
            "SELECT count(*) FILTER (WHERE kd.content_hash IS DISTINCT FROM 'pre-parts:pre-stem:' || t.content_hash),"
            " count(*) FILTER (WHERE kd.content_hash = t.content_hash)"
            f" FROM {INDEXED[name].from_sql} JOIN keyword_docs kd ON kd.source = %s AND kd.item_id = t.id::text",
            (name,)).fetchone() for name in INDEXED_NAMES}
        pending = {name: count_pending(conn, name, model)[0] for name in INDEXED_NAMES}
        # 017 (the model reads no day) then sent every dated vector back by prefixing its hash: without the prefix,
        # 005 kept every unchanged row's embedding current and only the moved and the fresh task are pending
        requeued = {name: conn.execute(
            f"SELECT count(*) FILTER (WHERE t.embedded_hash IS DISTINCT FROM 'dated:' || t.content_hash)"
            f" FROM {INDEXED[name].from_sql}").fetchone()[0] for name in ("task", "learning", "fragment")}
    assert pending == {"task": 3, "learning": 1, "capability": 0, "fragment": 1, "event": 0}
    assert requeued == {"task": 2, "learning": 0, "fragment": 0}  # moved + fresh
    assert {name: stale for name, (stale, _) in stale_kw.items()} == {
        "task": 1, "learning": 0, "capability": 0, "fragment": 0, "event": 0}  # moved
    assert all(current == 0 for _, current in stale_kw.values())

    pool = get_pool(empty_db_url, max_size=2)
    rec = RecordingEmbedder()
    assert sum(r.embedded for r in embed_all(pool, rec)) == 5  # 017: every task, learning and fragment again
    firsts = sorted(t.split("\n")[0] for t in rec.seen)
    assert [f for f in firsts if f.endswith("task")] == ["fresh task", "kept task", "moved task"]
    assert any("· failed" in t for t in rec.seen) and not any("· 20" in t for t in rec.seen)
    assert _pending(pool, model) == dict.fromkeys(INDEXED_NAMES, 0)
    assert {r.source: r.indexed for r in index_all(pool)} == {  # every row once: 011 re-indexes with stems
        "task": 3, "learning": 1, "capability": 1, "fragment": 1, "event": 0}
    assert sum(r.indexed for r in index_all(pool)) == 0
    with pool.connection() as conn:
        after = dict(conn.execute("SELECT id::text, embedded_at FROM tasks").fetchall())
    assert after[kept] > embedded_at[kept] and after[moved] > embedded_at[moved]
