"""Removals meeting the writers of the same rows, on real concurrent connections: the keyword indexer, the
embedding backfill, the background embedding and arbitration of deferred memories, a keyword statistics
refresh. A removal never lets a row come back nor leaves a fragment, posting, version or statistic behind."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.context.log import write_log
from memory_pipelines.context.retrieve import Candidate
from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.index.keywords import index_all, index_rows, refresh_stats
from memory_pipelines.index.vectors import embed_source
from memory_pipelines.infra.errors import NotFoundError
from memory_pipelines.store.ingest import finish_deferred, ingest_memory
from memory_pipelines.store.removal import erase_owner, forget
from memory_pipelines.vocabulary import FORGOTTEN_PREFIX, INDEXED
from tests.factories import add_task, waiting_on_a_lock
from tests.removal_world import keyword_state, rows_mentioning, stats_of_docs

T = 0.5
WAIT = 10.0


class GatedEmbedder(FakeEmbedder):
    """The test embedder, holding its first call until released (a backfill caught mid-batch)."""

    def __init__(self) -> None:
        super().__init__(384)
        self.entered, self.release = threading.Event(), threading.Event()

    def embed_batch(self, texts, kind: str = "passage") -> np.ndarray:
        if not self.release.is_set():
            self.entered.set()
            assert self.release.wait(WAIT)
        return super().embed_batch(texts, kind)


class GatedLLM:
    """An arbiter that answers REPLACE (of the first candidate) once released: an arbitration caught midway."""

    model = "gated"

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def complete_json(self, system: str, user: str, budget: object = None) -> dict[str, Any]:
        self.entered.set()
        assert self.release.wait(WAIT)
        return {"action": "REPLACE", "reason": "newer"}


def _fragment_rows(pool, memory_ids) -> dict[str, int]:
    with pool.connection() as conn:
        return {
            "memories": conn.execute("SELECT count(*) FROM memories WHERE id = ANY(%s)", (memory_ids,)).fetchone()[0],
            "fragments": conn.execute("SELECT count(*) FROM fragments WHERE memory_id = ANY(%s)",
                                      (memory_ids,)).fetchone()[0],
            "keyword_docs": conn.execute("SELECT count(*) FROM keyword_docs WHERE source = 'fragment'"
                                         " AND split_part(item_id, '_', 2) = ANY(%s)",
                                         ([m.split("_")[1] for m in memory_ids],)).fetchone()[0],
            "memory_versions": conn.execute("SELECT count(*) FROM memory_versions WHERE memory_id = ANY(%s)",
                                            (memory_ids,)).fetchone()[0],
            "memory_arbitrations": conn.execute(
                "SELECT count(*) FROM memory_arbitrations WHERE new_memory_id = ANY(%s)"
                " OR candidate_memory_id = ANY(%s)", (memory_ids, memory_ids)).fetchone()[0],
        }


def _consistent(pool, *, after_pass: bool = False) -> None:
    """Stored keyword statistics are what the indexed documents give; no posting outlives its row. `after_pass`:
    once the keyword pass ran (a write re-indexed documents since the statistics were refreshed, so they were
    behind before the removal already)."""
    if after_pass:
        index_all(pool)
    state = keyword_state(pool)
    assert {k: state[k] for k in ("stats", "df")} == stats_of_docs(pool)
    with pool.connection() as conn:
        for name, spec in INDEXED.items():
            orphans = conn.execute(
                f"SELECT count(*) FROM keyword_docs d WHERE d.source = %s AND NOT EXISTS"
                f" (SELECT 1 FROM {spec.table} t WHERE t.id::text = d.item_id)", (name,)).fetchone()[0]
            assert orphans == 0, name


def test_a_forget_waits_for_the_indexer_holding_the_row_then_takes_its_postings_too(pool, fake_embedder) -> None:
    with pool.connection() as conn:
        task = add_task(conn, "alice", "deploy zqrace1 release", "checklist")
    index_all(pool)
    spec = INDEXED["task"]
    with pool.connection() as conn:
        rows = conn.execute(f"SELECT t.id::text, t.owner_id, {spec.text_sql}, t.content_hash FROM {spec.from_sql}"
                            " WHERE t.id = %s", (task,)).fetchall()
    indexer = pool.getconn()
    try:
        index_rows(indexer, "task", rows)  # re-indexed, not committed: the row is locked against deletion
        with ThreadPoolExecutor(1) as ex:
            pending = ex.submit(forget, pool, "alice", "task", task)
            time.sleep(0.5)
            assert not pending.done()  # the forget waits for the indexer ...
            indexer.commit()
            assert pending.result(WAIT)["removed"]["keyword_docs"] == 1  # ... then deletes what it wrote
    finally:
        pool.putconn(indexer)
    assert rows_mentioning(pool, "zqrace1") == {}
    _consistent(pool, after_pass=True)


def test_an_indexer_that_read_a_row_before_its_forget_writes_nothing_for_it(pool, fake_embedder) -> None:
    with pool.connection() as conn:
        task = add_task(conn, "alice", "deploy zqrace2 release", "checklist")
        add_task(conn, "alice", "deploy other release", "checklist")
    spec = INDEXED["task"]
    with pool.connection() as conn:  # the keyword pass's reader has the row ...
        rows = conn.execute(f"SELECT t.id::text, t.owner_id, {spec.text_sql}, t.content_hash FROM {spec.from_sql}"
                            " ORDER BY t.id").fetchall()
    forget(pool, "alice", "task", task)  # ... the item is forgotten ...
    with pool.connection() as conn, conn.transaction():
        index_rows(conn, "task", rows)  # ... and its writer finds the row gone
    assert rows_mentioning(pool, "zqrace2") == {}
    _consistent(pool, after_pass=True)


def test_a_backfill_mid_batch_never_brings_a_forgotten_row_back(pool) -> None:
    embedder = GatedEmbedder()
    with pool.connection() as conn:
        tasks = [add_task(conn, "alice", f"deploy zqrace3 step {i}", "checklist") for i in range(5)]
    with ThreadPoolExecutor(1) as ex:
        backfill = ex.submit(embed_source, pool, embedder, "task", defer_index=False)
        assert embedder.entered.wait(WAIT)  # it read the rows and is embedding them
        for task in tasks[:3]:
            forget(pool, "alice", "task", task)
        embedder.release.set()
        result = backfill.result(WAIT)
    assert result.embedded == 2
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM tasks WHERE id = ANY(%s::uuid[])", (tasks[:3],)).fetchone()[0] == 0
        assert conn.execute("SELECT count(embedding) FROM tasks").fetchone()[0] == 2


def test_the_background_embedding_of_a_memory_forgotten_meanwhile_leaves_nothing(pool, fake_embedder) -> None:
    embedder = GatedEmbedder()
    embedder.release.set()
    kept = ingest_memory(pool, embedder, None, "alice", content="Deploys go out on Tuesdays after the review.",
                         content_type="plan", project_name="ops", conflict_threshold=T)
    queued = ingest_memory(pool, embedder, None, "alice", content="zqrace4 rollout: canary first, then everyone.",
                           content_type="plan", project_name="ops", wait=False, conflict_threshold=T)
    assert queued.action == "DEFERRED"
    index_all(pool)  # statistics exact before the forget
    embedder.release.clear()
    with ThreadPoolExecutor(1) as ex:
        worker = ex.submit(finish_deferred, pool, embedder, None, conflict_threshold=T, live=True)
        assert embedder.entered.wait(WAIT)  # embedding the queued memory's fragments
        forget(pool, "alice", "memory", queued.id)
        embedder.release.set()
        out = worker.result(WAIT)
    assert out["arbitrated"] == 0
    assert _fragment_rows(pool, [queued.id]) == dict.fromkeys(
        ("memories", "fragments", "keyword_docs", "memory_versions", "memory_arbitrations"), 0)
    assert rows_mentioning(pool, "zqrace4", skip=("removals",)) == {}
    assert _fragment_rows(pool, [kept.id])["memories"] == 1
    _consistent(pool)


def _deferred_pair(pool, embedder, llm=None):
    """An active memory, and a deferred update of it (stored while the provider was down)."""
    held = ingest_memory(pool, embedder, None, "alice", content="Decision zqrace5: vectors live in pgvector with HNSW.",
                         content_type="development", project_name="agent", conflict_threshold=T)
    embedder.fail_after = embedder.texts_embedded
    update = ingest_memory(pool, embedder, None, "alice",
                           content="Decision zqrace5: vectors live in pgvector with HNSW, ef_search 200.",
                           content_type="development", project_name="agent", conflict_threshold=T)
    embedder.fail_after = None
    return held, update


@pytest.mark.parametrize("target", ["held", "update"])
def test_a_forget_meeting_an_arbitration_of_the_same_memory_leaves_no_version_behind(pool, fake_embedder,
                                                                                     target) -> None:
    held, update = _deferred_pair(pool, fake_embedder)
    llm = GatedLLM()
    victim = held.id if target == "held" else update.id
    with ThreadPoolExecutor(2) as ex:
        settle = ex.submit(finish_deferred, pool, fake_embedder, llm, conflict_threshold=T)
        assert llm.entered.wait(WAIT)  # judging the update against the held memory, the project locked
        removal = ex.submit(forget, pool, "alice", "memory", victim)
        time.sleep(0.5)
        assert not removal.done()  # the forget waits for the project's lock ...
        llm.release.set()
        assert settle.result(WAIT)["actions"] == {"REPLACE": 1}  # ... the update folded into the held memory
        out = removal.result(WAIT)
    if target == "held":  # the held memory, its version (its old text) and the update folded into it all go
        assert out["removed"]["memories"] == 2 and out["removed"]["memory_versions"] == 1
        assert _fragment_rows(pool, [held.id, update.id]) == dict.fromkeys(
            ("memories", "fragments", "keyword_docs", "memory_versions", "memory_arbitrations"), 0)
        assert rows_mentioning(pool, "zqrace5", skip=("removals",)) == {}
    else:  # the update's own row goes; its text lives on as the held memory's, which it replaced
        assert out["removed"]["memories"] == 1
        assert _fragment_rows(pool, [update.id])["memories"] == 0
        assert _fragment_rows(pool, [held.id])["memories"] == 1
    _consistent(pool, after_pass=True)


def test_an_arbitration_after_the_forget_finds_nothing_to_judge(pool, fake_embedder) -> None:
    held, update = _deferred_pair(pool, fake_embedder)
    other, other_update = (ingest_memory(pool, fake_embedder, None, "alice", content=c, content_type="plan",
                                         project_name="zz-other", conflict_threshold=T, wait=w)
                           for c, w in (("Release train leaves every Monday.", True),
                                        ("Release train leaves every Monday, hotfixes any day.", False)))
    with pool.connection() as conn:  # the other project's update is judged first
        conn.execute("UPDATE memories SET created_at = created_at - interval '1 hour' WHERE id = %s",
                     (other_update.id,))
    llm = GatedLLM()
    with ThreadPoolExecutor(1) as ex:
        settle = ex.submit(finish_deferred, pool, fake_embedder, llm, conflict_threshold=T)
        assert llm.entered.wait(WAIT)  # busy with the other project; this one's update is next in its list
        forget(pool, "alice", "memory", update.id)
        llm.release.set()
        out = settle.result(WAIT)
    assert [o["id"] for o in out["outcomes"]] == [other_update.id]
    assert _fragment_rows(pool, [update.id]) == dict.fromkeys(
        ("memories", "fragments", "keyword_docs", "memory_versions", "memory_arbitrations"), 0)
    with pytest.raises(NotFoundError):
        forget(pool, "alice", "memory", update.id)
    assert _fragment_rows(pool, [held.id, other.id])["memories"] == 2
    _consistent(pool, after_pass=True)


def test_an_erase_meeting_a_statistics_refresh_leaves_no_statistic_behind(pool, fake_embedder) -> None:
    with pool.connection() as conn:
        for i in range(60):
            add_task(conn, "bob", f"deploy zqrace6 step {i}", "routine")
        add_task(conn, "alice", "deploy alone", "routine")
    index_all(pool)
    refresher = pool.getconn()
    try:
        refresh_stats(refresher, "task", ["bob"])  # rewritten from bob's documents, not committed yet
        with ThreadPoolExecutor(1) as ex:
            erasing = ex.submit(erase_owner, pool, "bob", confirm="bob")
            time.sleep(0.5)
            refresher.commit()  # the refresh commits what it read before the erase's deletes
            out = erasing.result(WAIT)
    finally:
        pool.putconn(refresher)
    assert out["counts"]["tasks"] == 60
    assert rows_mentioning(pool, "zqrace6", skip=("removals",)) == {}
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM keyword_stats WHERE owner_id = 'bob'").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM keyword_df WHERE owner_id = 'bob'").fetchone()[0] == 0
    _consistent(pool)


def test_a_turn_written_while_the_turn_before_it_is_forgotten_is_not_indexed_with_it(pool) -> None:
    embedder = GatedEmbedder()
    embedder.release.set()
    first = ingest_memory(pool, embedder, None, "alice", content="Ann says zqrace7 the hotel is by the sea",
                          content_type="insight", project_name="chat", session="trip", speaker="Ann")
    embedder.release.clear()
    with ThreadPoolExecutor(1) as ex:  # the reply read its context (the first turn) and is being embedded
        reply = ex.submit(ingest_memory, pool, embedder, None, "alice", content="Bo says lovely, book it",
                          content_type="insight", project_name="chat", session="trip", speaker="Bo")
        assert embedder.entered.wait(WAIT)
        forget(pool, "alice", "memory", first.id)
        embedder.release.set()
        written = reply.result(WAIT)
    assert written.action == "DEFERRED"  # indexed anew under the lock, embedded later
    with pool.connection() as conn:
        assert conn.execute("SELECT context FROM memories WHERE id = %s", (written.id,)).fetchone()[0] is None
    assert rows_mentioning(pool, "zqrace7", skip=("removals",)) == {}
    finish_deferred(pool, embedder, None, conflict_threshold=T)
    assert rows_mentioning(pool, "zqrace7", skip=("removals",)) == {}


def test_an_erase_meeting_a_write_of_the_same_owner_leaves_no_row_of_hers(pool, fake_embedder) -> None:
    """A write that commits while the erase runs, after its postings' DELETE and before its memory's, left those
    postings (the erased owner's words in the keyword index): the erase deletes again until a round finds none."""
    first = ingest_memory(pool, fake_embedder, None, "dora", content="Dora keeps zqrace8 notes on quasars",
                          content_type="insight", project_name="sky")
    holder = pool.getconn()
    try:
        holder.execute("SELECT 1 FROM memories WHERE id = %s FOR UPDATE", (first.id,))  # the erase waits here
        with ThreadPoolExecutor(1) as ex:
            erasing = ex.submit(erase_owner, pool, "dora", confirm="dora")
            _wait_for_lock_wait(pool, 'DELETE FROM "memories"')
            written = ingest_memory(pool, fake_embedder, None, "dora", content="Budget zqrace9 for the pulsar trip",
                                    content_type="plan", project_name="sky")
            with pool.connection() as conn:  # committed whole: the postings' DELETE already ran
                assert conn.execute("SELECT count(*) FROM keyword_docs WHERE item_id LIKE %s",
                                    (f"{written.id}%",)).fetchone()[0] > 0
            holder.rollback()
            out = erasing.result(WAIT)
    finally:
        pool.putconn(holder)
    assert out["counts"]["memories"] >= 1 and out["counts"]["keyword_docs"] >= 2  # the second write's too
    assert rows_mentioning(pool, "zqrace9", skip=("removals",)) == {}
    assert rows_mentioning(pool, "zqrace8", skip=("removals",)) == {}
    with pool.connection() as conn:
        for table in ("keywords", "keyword_docs", "fragments", "memories", "projects"):
            assert conn.execute(f"SELECT count(*) FROM {table} WHERE owner_id = 'dora'").fetchone()[0] == 0, table


def _wait_for_lock_wait(pool, statement: str) -> None:
    """Until another session runs `statement` and waits on a lock."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        with pool.connection() as conn:
            if conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                            (f"%{statement}%",)).fetchone()[0]:
                return
        time.sleep(0.05)
    raise AssertionError(f"nobody waits on a lock in {statement}")


def test_a_context_build_logged_after_its_memory_was_forgotten_keeps_no_line_of_it(pool, fake_embedder) -> None:
    """A build that read a memory before its forget committed, and logged after, wrote the memory's id and block
    line into the log the forget had just scrubbed: the forgotten words were back. The log now finds the row
    gone and keeps a stand-in, as the forget would have."""
    written = ingest_memory(pool, fake_embedder, None, "erin", content="Erin hides the zqrace10 keys in the blue vault",
                            content_type="insight", project_name="home")
    holder = pool.getconn()
    try:
        holder.execute("LOCK TABLE retrievals IN SHARE MODE")  # the build's log waits here, after its reads
        with ThreadPoolExecutor(1) as ex:
            building = ex.submit(build_memory_context, pool, fake_embedder, "erin", "where are the vault keys", "chat")
            _wait_for_lock_wait(pool, "INSERT INTO retrievals")
            forget(pool, "erin", "memory", written.id)
            holder.rollback()
            built = building.result(WAIT)
    finally:
        pool.putconn(holder)
    assert [it.id for it in built.items] == [written.id]  # read before the forget: the agent saw it
    assert rows_mentioning(pool, "zqrace10", skip=("removals",)) == {}
    with pool.connection() as conn:
        logged = conn.execute("SELECT item_id, line FROM retrieval_candidates WHERE retrieval_id = %s",
                              (built.retrieval_id,)).fetchall()
    assert len(logged) == 1 and logged[0][0].startswith(FORGOTTEN_PREFIX) and logged[0][1] is None


def test_a_forget_waits_for_a_build_logging_its_memory_then_scrubs_that_log(pool, fake_embedder) -> None:
    """The other order: the log holds the row (FOR KEY SHARE) until it commits, so a forget waits, then scrubs it."""
    written = ingest_memory(pool, fake_embedder, None, "erin", content="Erin hides the zqrace11 keys in the red vault",
                            content_type="insight", project_name="home")
    conn = pool.getconn()
    try:
        built = build_memory_context(pool, fake_embedder, "erin", "where are the vault keys", "chat", log_build=False)
        ranked = [Candidate(source=it.source, id=it.id, title=it.title, text=it.line, created_at=None,
                            relevance=it.relevance) for it in built.items]
        write_log(conn, owner="erin", query="where are the vault keys", mode="chat", budget=1000,
                  tokens_used=10, config_version=1, degraded=None, as_of=datetime.now(UTC), ranked=ranked,
                  injected={(c.source, c.id): (1, 10) for c in ranked}, injected_sources=["memory"],
                  lines={(c.source, c.id): c.text for c in ranked})  # not committed yet
        with ThreadPoolExecutor(1) as ex:
            pending = ex.submit(forget, pool, "erin", "memory", written.id)
            _wait_for_lock_wait(pool, "FROM memories")
            assert not pending.done()  # the forget waits for the log ...
            conn.commit()
            assert pending.result(WAIT)["removed"]["retrieval_candidates"] == 1  # ... then scrubs it
    finally:
        pool.putconn(conn)
    assert rows_mentioning(pool, "zqrace11", skip=("removals",)) == {}


def test_the_fragment_embedding_meeting_a_project_drop_waits_for_it_instead_of_deadlocking(pool) -> None:
    """A drop locks the project's memories, then deletes their fragments; the fragment embedding updated
    fragments first, then locked their memories to set the memory vector: the two deadlocked (a 503 over HTTP).
    The embedding now locks the memories first, in id order, so it waits for the drop holding no fragment."""
    embedder = FakeEmbedder(384)
    dropped = ingest_memory(pool, embedder, None, "alice", content="zqrace12 the old launch checklist",
                            content_type="plan", project_name="legacy", wait=False, conflict_threshold=T)
    kept = ingest_memory(pool, embedder, None, "alice", content="The on-call rota changes on Mondays.",
                         content_type="plan", project_name="ops", wait=False, conflict_threshold=T)
    with ThreadPoolExecutor(1) as ex:
        with pool.connection() as drop:  # the drop's steps, in its order
            drop.execute("SELECT id FROM memories WHERE id = %s FOR UPDATE", (dropped.id,))
            backfill = ex.submit(embed_source, pool, embedder, "fragment", defer_index=False)
            assert waiting_on_a_lock(pool)  # the embedding waits on the dropped memory
            drop.execute("SET LOCAL lock_timeout = '5s'")
            assert drop.execute("DELETE FROM fragments WHERE memory_id = %s", (dropped.id,)).rowcount >= 1
            drop.execute("DELETE FROM memories WHERE id = %s", (dropped.id,))
        result = backfill.result(WAIT)
    assert result.embedded >= 1 and not result.errors
    with pool.connection() as conn:
        status = dict(conn.execute("SELECT id, embedding_status FROM memories").fetchall())
        pending = conn.execute("SELECT count(*) FROM fragments WHERE embedding IS NULL").fetchone()[0]
    assert status == {kept.id: "done"} and pending == 0

