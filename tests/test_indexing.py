"""The embedding backfill and the keyword table."""

from __future__ import annotations

import threading

import psycopg

from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.index.keywords import index_all, index_source
from memory_pipelines.index.vectors import LOADERS, embed_all, embed_source, finish_memories, pending_total
from memory_pipelines.text.keywords import terms
from tests.factories import add_learning, add_memory, add_task, waiting_on_a_lock

LONG = " ".join(
    f"Sentence number {i} explains one more detail of the deployment pipeline." for i in range(150)
)


def _seed(pool, n: int = 30) -> None:
    with pool.connection() as conn:
        for i in range(n):
            add_task(conn, "alice", f"task {i} about deployment", f"details {i}")
        add_learning(conn, "alice", "auth error", "token expired", failure_class="AUTH")
        add_memory(conn, "alice", LONG)


def _model_counts(pool, model: str) -> dict[str, int]:
    with pool.connection() as conn:
        return {
            table: conn.execute(
                f"SELECT count(*) FROM {table} WHERE embedding_model = %s", (model,)
            ).fetchone()[0]
            for table in ("tasks", "learnings", "fragments", "memories")
        }


def test_embeds_everything_once(pool, fake_embedder):
    _seed(pool)
    results = embed_all(pool, fake_embedder)
    assert sum(r.failed for r in results) == 0
    assert pending_total(pool, fake_embedder.model_name) == 0
    counts = _model_counts(pool, fake_embedder.model_name)
    assert counts["tasks"] == 30 and counts["learnings"] == 1 and counts["memories"] == 1
    assert counts["fragments"] >= 3  # the long memory was chunked
    embedded_texts = fake_embedder.texts_embedded
    again = embed_all(pool, fake_embedder)
    assert sum(r.embedded for r in again) == 0 and fake_embedder.texts_embedded == embedded_texts
    with pool.connection() as conn:
        status = conn.execute("SELECT embedding_status, avg_embedding IS NOT NULL FROM memories").fetchone()
    assert status == ("done", True)


def test_finishing_memories_locks_them_in_id_order_so_parallel_loaders_queue_instead_of_deadlocking(
    pool, fake_embedder
):
    with pool.connection() as conn:
        ids = sorted(add_memory(conn, "alice", f"memory {i} about the night train") for i in range(12))
    embed_source(pool, fake_embedder, "fragment")
    with pool.connection() as conn:
        for memory_id in reversed(ids):  # rewritten last id first: the heap now runs against id order
            conn.execute("UPDATE memories SET embedding_status = 'pending' WHERE id = %s", (memory_id,))
    blocker = psycopg.connect(pool.conninfo)
    blocker.execute("SELECT 1 FROM memories WHERE id = %s FOR UPDATE", (ids[-1],))
    finished: list[int] = []

    def finish() -> None:
        with pool.connection() as conn:
            finished.append(finish_memories(conn, fake_embedder.model_name))

    loader = threading.Thread(target=finish)
    loader.start()
    try:
        assert waiting_on_a_lock(pool)
        held = []
        with psycopg.connect(pool.conninfo, autocommit=True) as probe:
            for memory_id in ids[:-1]:
                try:
                    probe.execute("SELECT 1 FROM memories WHERE id = %s FOR NO KEY UPDATE NOWAIT", (memory_id,))
                except psycopg.errors.LockNotAvailable:
                    held.append(memory_id)
        assert held == ids[:-1]  # every lower id taken before it waits for the last one
    finally:
        blocker.commit()
        blocker.close()
        loader.join(timeout=30)
    assert finished == [12]
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM memories WHERE embedding_status = 'done'").fetchone()[0] == 12


def test_killed_run_resumes_without_redoing_work(pool):
    _seed(pool, n=50)
    failing = FakeEmbedder(384, batch_size=10)
    failing.fail_after = 25  # two batches of 10 succeed, the third fails, and so on
    first = embed_source(pool, failing, "task", batch_size=10, max_consecutive_failures=1)
    # Each of the parallel loaders stops at its first failed batch (a loader's last batch may be short).
    assert 20 <= first.embedded <= 25 and 10 <= first.failed <= 10 * LOADERS and first.errors
    healthy = FakeEmbedder(384, batch_size=10)
    second = embed_source(pool, healthy, "task", batch_size=10)
    left = 50 - first.embedded
    assert second.embedded == left and healthy.texts_embedded == left  # only what was still pending
    assert _model_counts(pool, healthy.model_name)["tasks"] == 50


def test_changed_content_and_new_model_are_re_embedded(pool, fake_embedder):
    _seed(pool, n=5)
    embed_all(pool, fake_embedder)
    with pool.connection() as conn:
        conn.execute("UPDATE tasks SET description = 'rewritten' WHERE title = 'task 3 about deployment'")
    assert embed_source(pool, fake_embedder, "task").embedded == 1
    other = FakeEmbedder(384, model_name="other")
    assert embed_source(pool, other, "task").embedded == 5


def test_keyword_index_is_incremental(pool):
    _seed(pool, n=5)
    first = index_all(pool)
    assert {r.source: r.indexed for r in first}["task"] == 5
    assert sum(r.indexed for r in index_all(pool)) == 0
    with pool.connection() as conn:
        conn.execute(
            "UPDATE tasks SET description = 'kubernetes rollout' WHERE title = 'task 1 about deployment'"
        )
        conn.execute("UPDATE tasks SET is_active = false WHERE title = 'task 2 about deployment'")
    again = index_source(pool, "task")
    assert again.indexed == 1 and again.removed == 1
    with pool.connection() as conn:
        hits = conn.execute(
            "SELECT count(*) FROM keywords WHERE source = 'task' AND keyword = ANY(%s)", (terms("kubernetes"),)
        ).fetchone()[0]
    assert hits == 1
    assert index_source(pool, "task", full=True).indexed == 4


def test_a_full_pass_in_small_batches_stores_impacts_from_each_owners_exact_average_length(pool):
    from memory_pipelines.index.keywords import impact

    with pool.connection() as conn:
        for i in range(7):
            add_task(conn, "alice", f"task {i} about deployment", " ".join(["rollout step"] * (i * 3)))
        add_task(conn, "bob", "bob's only task", "one short line")
        add_task(conn, "bob", "bob's other task", " ".join(["a much longer line of words"] * 9))
    index_source(pool, "task", batch_size=2)
    assert index_source(pool, "task", full=True, batch_size=2).indexed == 9  # each batch replaces its docs
    with pool.connection() as conn:
        averages = dict(
            conn.execute("SELECT owner_id, avg(doc_len) FROM keyword_docs WHERE source = 'task' GROUP BY 1")
        )
        postings = conn.execute(
            "SELECT k.owner_id, k.tf, d.doc_len, k.impact FROM keywords k"
            " JOIN keyword_docs d USING (source, item_id) WHERE k.source = 'task'"
        ).fetchall()
    assert len(averages) == 2 and averages["alice"] != averages["bob"]
    assert len(postings) > 20
    for owner, tf, doc_len, stored in postings:
        assert abs(stored - impact(tf, doc_len, float(averages[owner]))) < 1e-6, (owner, tf, doc_len)


def test_a_single_write_reads_the_owners_stored_statistics_not_every_document(pool):
    from memory_pipelines.index.keywords import impact, index_rows

    with pool.connection() as conn:
        for i in range(4):
            add_task(conn, "alice", f"task {i} about deployment", "rollout step " * (i + 1))
        new_id = add_task(conn, "alice", "one more", "")
    index_source(pool, "task")
    with pool.connection() as conn:
        # stand-in for statistics refreshed long ago: the write must read them, not sum alice's documents
        n, total = conn.execute(
            "UPDATE keyword_stats SET total_len = total_len * 10 WHERE owner_id = 'alice' AND source = 'task'"
            " RETURNING n, total_len"
        ).fetchone()
        index_rows(conn, "task", [(new_id, "alice", "alpha beta beta", "h")])
        stored = conn.execute(
            "SELECT impact FROM keywords WHERE source = 'task' AND item_id = %s AND keyword = 'beta'", (new_id,)
        ).fetchone()[0]
    assert abs(stored - impact(2, 3, (total + 3) / (n + 1))) < 1e-6


def test_a_bulk_keyword_pass_analyzes_the_tables_it_filled_before_joining_them(pool):
    """The weight refresh joins the postings a pass just wrote; planned on a never-analyzed table it ran a nested
    loop for a minute over the demo corpus. A pass that grows a table past autovacuum's analyze threshold
    analyzes it first; a pass that adds a little leaves that to autovacuum."""

    def reltuples() -> dict[str, float]:
        with pool.connection() as conn:
            return {t: conn.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", (t,)).fetchone()[0]
                    for t in ("keywords", "keyword_docs")}

    assert set(reltuples().values()) == {-1.0}  # never analyzed
    _seed(pool, n=120)
    result = index_source(pool, "task")
    after = reltuples()
    assert after == {"keywords": result.terms, "keyword_docs": 120}  # analyzed: exact counts of these tables
    with pool.connection() as conn:
        add_task(conn, "alice", "one more task", "a few words")
    assert index_source(pool, "task").indexed == 1
    assert reltuples() == after  # not analyzed again for one row
