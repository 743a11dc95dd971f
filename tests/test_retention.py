"""Retention against the real database: the log and the events pruned past their ages in batches, the hit rates
rolled up first, so the web view's history and the tuner's report read the same before and after."""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from memory_pipelines.context.history import hit_rates
from memory_pipelines.index.keywords import index_all
from memory_pipelines.infra.auth import create_key
from memory_pipelines.infra.errors import ValidationError
from memory_pipelines.operations import retention
from memory_pipelines.operations.retention import RetentionPolicy, log_status, parse_age, prune
from memory_pipelines.tuning import report
from memory_pipelines.tuning.frames import load_log
from memory_pipelines.tuning.report import hit_rate_table
from memory_pipelines.tuning.rollup import rolled_up, with_rolled_up
from memory_pipelines.tuning.run import run_tuning
from tests.factories import add_event
from tests.removal_world import builds_with_feedback, keyword_state, settle, stats_of_docs, write_owner
from tests.test_api import client

QUERIES = ["deploy release checklist", "memory vectors pgvector", "trip to Lisbon", "deploy timeout retry",
           "login dark mode", "embedding writes COPY"]


@pytest.fixture
def logged(pool, fake_embedder, fake_openai):
    """Two owners with items, twelve builds each spread over the last 110 days (most with feedback), and
    events of every age."""
    for owner in ("alice", "carol"):
        write_owner(pool, fake_embedder, fake_openai, owner, common=5)
    settle(pool, fake_embedder)
    for owner in ("alice", "carol"):
        ids = builds_with_feedback(pool, fake_embedder, owner, QUERIES * 2)
        with pool.connection() as conn:
            for k, rid in enumerate(ids):
                conn.execute("UPDATE retrievals SET created_at = created_at - %s, feedback_at = CASE WHEN %s"
                             " THEN NULL ELSE feedback_at END WHERE id = %s",
                             (timedelta(days=10 * k, hours=k), k % 5 == 4, rid))
            for days in (1, 20, 50, 80, 120):
                add_event(conn, owner, "task_failed", {"error": f"deploy failed {days} days ago"}, hours=24 * days)
    index_all(pool)


def _tuner_table(pool, since_days=None):
    frames = load_log(pool, since_days=since_days)
    return with_rolled_up(hit_rate_table(frames.candidates, "injected"), rolled_up(pool, since_days=since_days),
                          "injected")


def _same_records(a: list[dict], b: list[dict]) -> bool:
    """Equal rows, NaN equal to NaN (a cell without labels has no rate)."""
    def norm(rows):
        return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]
    return norm(a) == norm(b)


def _counts(pool) -> dict[str, int]:
    with pool.connection() as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("retrievals", "retrieval_candidates", "events", "retrieval_daily", "retrieval_daily_items")}


def test_prune_keeps_the_hit_rate_history_and_the_tuners_report(pool, logged) -> None:
    before = {o: hit_rates(pool, o, days=200) for o in ("alice", "carol")}
    table = _tuner_table(pool)
    window = _tuner_table(pool, since_days=45)
    tuner_report = run_tuning(pool)["hit_rates"]
    counts = _counts(pool)
    assert before["alice"]["total"]["builds"] == 12 and before["alice"]["total"]["used"] > 0

    out = prune(pool, RetentionPolicy(candidates=timedelta(days=30), builds=timedelta(days=60),
                                      events=timedelta(days=45), batch_builds=3, batch_events=2))
    after = _counts(pool)
    with pool.connection() as conn:
        old_candidates = conn.execute(
            "SELECT count(*) FROM retrieval_candidates c JOIN retrievals r ON r.id = c.retrieval_id"
            " WHERE r.created_at < now() - interval '30 days'").fetchone()[0]
        old_builds = conn.execute("SELECT count(*) FROM retrievals WHERE created_at < now() - interval '60 days'"
                                  ).fetchone()[0]
        stripped = conn.execute("SELECT count(*) FROM retrievals WHERE candidates_pruned_at IS NOT NULL").fetchone()[0]
        old_events = conn.execute("SELECT count(*) FROM events WHERE created_at < now() - interval '45 days'"
                                  ).fetchone()[0]
    assert old_candidates == old_builds == old_events == 0
    assert stripped == 2 * 3  # builds 30-60 days old keep their row, not their candidates
    assert out.removed["retrievals"] == counts["retrievals"] - after["retrievals"] == 2 * 6
    assert out.removed["retrieval_candidates"] == counts["retrieval_candidates"] - after["retrieval_candidates"] > 0
    assert out.removed["events"] == counts["events"] - after["events"] == 2 * 3  # the failures 50-120 days old
    assert out.batches >= 4 and after["retrieval_daily_items"] > 0

    # What the web view and the tuner show is unchanged, for every day.
    assert {o: hit_rates(pool, o, days=200) for o in ("alice", "carol")} == before
    assert _tuner_table(pool).equals(table)
    assert _tuner_table(pool, since_days=45).equals(window)
    assert _same_records(run_tuning(pool)["hit_rates"], tuner_report)
    # The pruned events' keyword entries went with them, the statistics exact.
    assert {k: keyword_state(pool)[k] for k in ("stats", "df")} == stats_of_docs(pool)
    # A second run finds nothing more to prune.
    again = prune(pool, RetentionPolicy(candidates=timedelta(days=30), builds=timedelta(days=60),
                                        events=timedelta(days=45)))
    assert sum(again.removed.values()) == 0 and _counts(pool) == after
    assert {o: hit_rates(pool, o, days=200) for o in ("alice", "carol")} == before


def test_status_reports_the_log_size_and_oldest_rows_kept(pool, logged) -> None:
    with pool.connection() as conn:
        before = log_status(conn)
    assert before["retrieval_candidates"]["rows"] == _counts(pool)["retrieval_candidates"]
    assert before["retrievals"]["exact"] and before["rolled_up"]["days"] == 0
    prune(pool, RetentionPolicy(candidates=timedelta(days=30), builds=timedelta(days=60)))
    with pool.connection() as conn:
        after = log_status(conn)
    assert after["retrieval_candidates"]["oldest"] > before["retrieval_candidates"]["oldest"]
    assert after["retrievals"]["oldest"] < after["retrieval_candidates"]["oldest"]
    assert after["rolled_up"]["days"] > 0
    assert any("rolled up" in line for line in retention.format_log_status(after))


def test_a_prune_meeting_a_feedback_on_the_same_build_waits_its_turn_and_counts_it(pool, logged) -> None:
    with pool.connection() as conn:
        rid, item = conn.execute(
            "SELECT r.id::text, c.item_id FROM retrievals r JOIN retrieval_candidates c ON c.retrieval_id = r.id"
            " WHERE r.owner_id = 'alice' AND r.feedback_at IS NULL AND c.injected AND c.source <> 'okr'"
            " ORDER BY r.created_at LIMIT 1"  # a profile goal is never counted
        ).fetchone()
    before = hit_rates(pool, "alice", days=200)["total"]
    feedback = pool.getconn()
    try:  # a feedback request half done (record_feedback's statements): its marks written, not committed
        feedback.execute("UPDATE retrieval_candidates SET used = (item_id = %s), used_by = 'explicit'"
                         " WHERE retrieval_id = %s AND owner_id = 'alice' AND injected", (item, rid))
        with ThreadPoolExecutor(1) as ex:
            pruning = ex.submit(prune, pool, RetentionPolicy(candidates=timedelta(0), builds=timedelta(days=365)))
            time.sleep(0.6)
            feedback.execute("UPDATE retrievals SET feedback_at = now() WHERE id = %s", (rid,))  # never a deadlock
            feedback.commit()
            out = pruning.result(30)
    finally:
        pool.putconn(feedback)
    assert out.retried >= 1
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM retrieval_candidates").fetchone()[0] == 0
    total = hit_rates(pool, "alice", days=200)["total"]
    assert (total["with_feedback"], total["used"]) == (before["with_feedback"] + 1, before["used"] + 1)


def test_retention_ages_are_checked_and_name_their_field() -> None:
    assert parse_age("a", "30d") == timedelta(days=30)
    assert parse_age("a", "12h") == timedelta(hours=12)
    assert parse_age("a", "90m") == timedelta(minutes=90)
    assert parse_age("a", "3600s") == timedelta(hours=1)
    assert parse_age("a", "2w") == timedelta(days=14)
    assert parse_age("a", "7") == parse_age("a", 7) == timedelta(days=7)
    assert parse_age("a", 0) == timedelta(0)
    for bad in ("-5d", -1, "abc", "5x", "", "30 days", math.nan, math.inf, True, None, timedelta(days=-1),
                "99999999999999999999d", 10**20, "36501d", timedelta(days=40_000)):
        with pytest.raises(ValidationError) as err:
            parse_age("older_than", bad)
        assert err.value.field == "older_than"
    env = {"MEMORY_PIPELINES_RETAIN_CANDIDATES": "7d", "MEMORY_PIPELINES_RETAIN_EVENTS": "bogus"}
    with pytest.raises(ValidationError) as err:
        RetentionPolicy.from_env(env)
    assert err.value.field == "MEMORY_PIPELINES_RETAIN_EVENTS"
    policy = RetentionPolicy.from_env({"MEMORY_PIPELINES_RETAIN_CANDIDATES": "7d"}, builds="10d")
    assert (policy.candidates, policy.builds, policy.events) == (timedelta(days=7), timedelta(days=10),
                                                                 retention.DEFAULT_AGES["events"])


def test_the_library_prune_counts_on_a_dry_run_and_refuses_a_name_it_does_not_take(runtime, logged) -> None:
    """`Memory.prune(dry_run=True)` and `prune(older_than="120d")` (the CLI's flags) were taken as ages of no
    part, ignored: both pruned for real at the default ages."""
    from memory_pipelines import Memory

    memory = Memory(runtime, llm=None)
    before = _counts(runtime.pool)
    preview = memory.prune(dry_run=True, events="45d")
    assert preview["dry_run"] and preview["removed"]["events"] > 0 and _counts(runtime.pool) == before
    for name in ("older_than", "bogus"):
        with pytest.raises(ValidationError) as err:
            memory.prune(**{name: "120d"})
        assert err.value.field == name
    assert _counts(runtime.pool) == before
    assert memory.prune(events="45d")["removed"]["events"] == preview["removed"]["events"]


def test_the_roll_up_buckets_are_the_tuners() -> None:
    assert (*retention.AGE_EDGES, math.inf) == report.AGE_EDGES
    assert (retention.AGE_LABELS, retention.NO_AGE) == (report.AGE_LABELS, report.NO_AGE)


def test_concurrent_prunes_count_every_row_once(pool, logged) -> None:
    before = hit_rates(pool, "alice", days=200)
    policy = RetentionPolicy(candidates=timedelta(0), builds=timedelta(days=15), batch_builds=2)
    barrier = threading.Barrier(2)

    def run():
        barrier.wait()
        return prune(pool, policy)

    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda _i: run(), range(2)))
    assert sum(r.removed["retrievals"] for r in results) == 2 * 10
    assert hit_rates(pool, "alice", days=200) == before


def test_feedback_on_a_build_whose_candidates_were_pruned_is_refused_and_the_history_stays(pool, logged, live):
    """Feedback after the prune took a build's candidates (rolled up as without feedback) set its feedback_at:
    the history then counted a build with feedback whose injected items it never counted."""
    prune(pool, RetentionPolicy(candidates=timedelta(days=30), builds=timedelta(days=365)))
    with pool.connection() as conn:
        rid = conn.execute("SELECT id::text FROM retrievals WHERE owner_id = 'alice' AND feedback_at IS NULL"
                           " AND candidates_pruned_at IS NOT NULL LIMIT 1").fetchone()[0]
    before = hit_rates(pool, "alice", days=200)
    alice = client(live, create_key(pool, "alice")[1])
    for path, body in (("/api/brain/memory/feedback", {"retrieval_id": rid, "used_ids": []}),
                       ("/api/brain/memory/feedback/implicit", {"retrieval_id": rid, "output": "deploy checklist"})):
        answer = alice.post(path, json=body)
        assert answer.status_code == 422 and "retrieval_id" in answer.text and "pruned" in answer.text, answer.text
    assert hit_rates(pool, "alice", days=200) == before
