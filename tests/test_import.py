"""Bulk import (store/imports.py) of JSON Lines, CSV and Parquet files into a real database."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memory_pipelines.retrieval.search import search
from memory_pipelines.store.imports import ImportFileError, import_file


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def _count(pool, table: str, owner: str | None = None) -> int:
    with pool.connection() as conn:
        if owner is None:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        return conn.execute(f"SELECT count(*) FROM {table} WHERE owner_id = %s", (owner,)).fetchone()[0]


def _keyword_titles(runtime, owner: str, query: str, source: str) -> list[str]:
    result = search(runtime.pool, runtime.embedder, owner, query, mode="keyword", limit=10)
    return [h.title for h in result.hits if h.source == source]


LEARNINGS = [
    {"key": "l1", "title": "Retry the flaky payment webhook", "content": "Use exponential backoff",
     "task_type": "dev", "failure_class": "TIMEOUT", "category": "failure_pattern", "at": "2023-05-04T10:00:00Z"},
    {"key": "l2", "title": "Pin the database driver", "content": "An upgrade broke connection pooling",
     "at": 1_600_000_000},
    {"title": "Cache warmup before the canary", "content": "Cold caches made the canary fail",
     "metadata": {"ticket": "OPS-7"}},
]


def test_jsonl_import_keeps_times_is_searchable_at_once_and_idempotent(runtime, tmp_path):
    path = _jsonl(tmp_path / "learnings.jsonl", LEARNINGS)
    report = import_file(runtime.pool, path, source="learning", owner="alice")
    assert report.written and not report.rejects
    assert (report.rows, report.valid, report.totals) == (3, 3, {"created": 3, "updated": 0, "unchanged": 0})
    with runtime.pool.connection() as conn:
        rows = dict(conn.execute("SELECT key, created_at FROM learnings WHERE owner_id = 'alice'").fetchall())
    assert rows["l1"] == datetime(2023, 5, 4, 10, tzinfo=UTC)
    assert rows["l2"] == datetime.fromtimestamp(1_600_000_000, UTC)
    derived = [k for k in rows if k.startswith("row:")]
    assert len(derived) == 1  # the keyless row got a key from its content
    assert _keyword_titles(runtime, "alice", "payment webhook", "learning") == ["Retry the flaky payment webhook"]
    assert _keyword_titles(runtime, "bob", "payment webhook", "learning") == []

    again = import_file(runtime.pool, path, source="learning", owner="alice")
    assert again.totals == {"created": 0, "updated": 0, "unchanged": 3}
    assert _count(runtime.pool, "learnings") == 3

    changed = [dict(LEARNINGS[0], title="Retry the flaky payment webhook twice"), *LEARNINGS[1:]]
    third = import_file(runtime.pool, _jsonl(tmp_path / "v2.jsonl", changed), source="learning", owner="alice")
    assert third.totals == {"created": 0, "updated": 1, "unchanged": 2}
    assert _count(runtime.pool, "learnings") == 3


def test_identical_keyless_lines_are_distinct_rows_and_stay_idempotent(runtime, tmp_path):
    event = {"type": "alert", "payload": {"service": "billing", "msg": "disk full"}, "at": "2024-01-02T03:04:05"}
    path = _jsonl(tmp_path / "events.jsonl", [event, event, dict(event, at="2024-01-03T00:00:00")])
    assert import_file(runtime.pool, path, source="event", owner="ops").totals["created"] == 3
    assert import_file(runtime.pool, path, source="event", owner="ops").totals["unchanged"] == 3
    assert _count(runtime.pool, "events", "ops") == 3


def test_later_line_with_the_same_key_updates_the_earlier_one(runtime, tmp_path):
    path = _jsonl(tmp_path / "tasks.jsonl", [
        {"key": "T-1", "title": "Ship the importer", "status": "pending"},
        {"key": " T-1 ", "title": "Ship the importer", "status": "completed"},
    ])
    report = import_file(runtime.pool, path, source="task", owner="alice")
    assert report.totals == {"created": 1, "updated": 1, "unchanged": 0}
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT status FROM tasks WHERE key = 'T-1'").fetchone()[0] == "completed"



def test_chunks_written_side_by_side_apply_every_key_in_file_order(runtime, tmp_path, monkeypatch):
    """Small chunks so a file spans many, written two at a time: a key repeated in the same, the next or a later
    chunk ends as its last line says, and the owner's keyword statistics equal a count of what is indexed."""
    from memory_pipelines.store import imports

    monkeypatch.setattr(imports, "CHUNK_ROWS", 7)
    lines = [{"key": f"k{i % 13}", "title": f"lesson {i} about queue {i % 13}", "content": f"version {i}"}
             for i in range(90)]
    report = import_file(runtime.pool, _jsonl(tmp_path / "many.jsonl", lines), source="learning", owner="alice")
    assert report.totals == {"created": 13, "updated": 77, "unchanged": 0}
    last = {line["key"]: line["content"] for line in lines}
    with runtime.pool.connection() as conn:
        stored = dict(conn.execute("SELECT key, content FROM learnings WHERE owner_id = 'alice'").fetchall())
        stats = conn.execute("SELECT n, total_len FROM keyword_stats WHERE owner_id = 'alice'"
                             " AND source = 'learning'").fetchone()
        real = conn.execute("SELECT count(*), sum(doc_len) FROM keyword_docs WHERE owner_id = 'alice'"
                            " AND source = 'learning'").fetchone()
    assert stored == last
    assert tuple(stats) == tuple(real) and real[0] == 13
    again = import_file(runtime.pool, _jsonl(tmp_path / "many.jsonl", lines), source="learning", owner="alice")
    assert again.totals == {"created": 0, "updated": 90, "unchanged": 0}  # each line rewrites its key in turn
    with runtime.pool.connection() as conn:
        assert dict(conn.execute("SELECT key, content FROM learnings WHERE owner_id = 'alice'").fetchall()) == last



def test_a_chunk_that_repeats_a_key_of_one_under_way_waits_for_it():
    """The chunking behind the side-by-side writes: no key twice in a chunk, and a chunk holding a key of one of
    the `overlap` chunks before it (which may still be written beside it) is marked to wait."""
    from memory_pipelines.store.import_checks import ImportRow
    from memory_pipelines.store.imports import _chunks

    keys = ["a", "b", "c", "d", "a", "e", "f", "g", "b", "h", "i", "j", "k", "l", "m", "c"]
    rows = [ImportRow(i + 1, "learning", "alice", {"key": k, "title": k}) for i, k in enumerate(keys)]
    chunks = [([r.item["key"] for r in chunk], waits) for chunk, waits in _chunks(rows, 4, overlap=1)]
    assert chunks == [(["a", "b", "c", "d"], False), (["a", "e", "f", "g"], True), (["b", "h", "i", "j"], False),
                      (["k", "l", "m", "c"], False)]
    wider = [waits for _chunk, waits in _chunks(rows, 4, overlap=2)]
    assert wider == [False, True, True, False]
    assert [waits for _chunk, waits in _chunks(rows, 4, overlap=0)] == [False] * 4  # one writer: nothing beside


CSV = (
    "source,owner,key,title,name,description,status,priority,progress,active,metadata,created_at\n"
    "task,alice,t1,Migrate the billing schema,,\"two steps:\nexpand, then contract\",in_progress,,,true,"
    "\"{\"\"jira\"\": \"\"B-1\"\"}\",2024-02-01T09:00:00Z\n"
    "goal,alice,g1,Halve p99 latency,,,in_progress,1,40,,,\n"
    "capability,alice,,,deploy,roll out a service,,,,,,\n"
    "goal,alice,g2,Bad priority,,,pending,high,,,,\n"
    "task,bob,t9,Someone else's,,,,,,,,\n"
)


def test_csv_with_source_and_owner_columns_types_cells_and_numbers_lines(runtime, tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text(CSV, encoding="utf-8")
    report = import_file(runtime.pool, path, owner="alice")
    # The task's quoted description spans lines 2-3: the goal is on line 4, the bad goal on line 6.
    assert [(r.line, r.field) for r in report.rejects] == [(6, "priority"), (7, "owner")]
    assert "integer" in report.rejects[0].reason and "'bob'" in report.rejects[1].reason
    assert not report.written and _count(runtime.pool, "tasks") == 0  # a bad line: nothing written

    report = import_file(runtime.pool, path, owner="alice", skip_invalid=True)
    assert report.written and len(report.rejects) == 2
    assert report.counts == {"task": {"created": 1, "updated": 0, "unchanged": 0},
                             "goal": {"created": 1, "updated": 0, "unchanged": 0},
                             "capability": {"created": 1, "updated": 0, "unchanged": 0}}
    with runtime.pool.connection() as conn:
        task = conn.execute("SELECT description, status, metadata, created_at FROM tasks").fetchone()
        goal = conn.execute("SELECT priority, progress, status FROM goals").fetchone()
    assert task == ("two steps:\nexpand, then contract", "in_progress", {"jira": "B-1"},
                    datetime(2024, 2, 1, 9, tzinfo=UTC))
    assert goal == (1, 40, "in_progress")
    again = import_file(runtime.pool, path, owner="alice", skip_invalid=True)
    assert again.totals == {"created": 0, "updated": 0, "unchanged": 3}


def test_parquet_with_typed_columns(runtime, tmp_path):
    table = pa.table({
        "key": pa.array([101, 102, 103], pa.int64()),  # a source database's integer ids
        "title": ["Rotate the TLS certificate", "Vacuum the queue table", "Rebuild the search index"],
        "task_type": ["dev", None, "data"],
        "at": pa.array([datetime(2022, 1, 1, tzinfo=UTC), datetime(2022, 6, 1, tzinfo=UTC), None],
                       pa.timestamp("us", tz="UTC")),
        "metadata": pa.array([{"team": "infra"}, None, {"team": "search"}],
                             pa.struct([("team", pa.string())])),
    })
    path = tmp_path / "learnings.parquet"
    pq.write_table(table, path)
    report = import_file(runtime.pool, path, source="learning", owner="alice")
    assert report.totals["created"] == 3 and not report.rejects
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT key, task_type, metadata, created_at FROM learnings ORDER BY key").fetchall()
    assert [r[0] for r in rows] == ["101", "102", "103"]
    assert rows[0][1:] == ("dev", {"team": "infra"}, datetime(2022, 1, 1, tzinfo=UTC))
    assert rows[1][1:3] == (None, {})


def test_bad_lines_are_reported_with_their_number_and_nothing_is_written(runtime, tmp_path):
    path = _jsonl(tmp_path / "tasks.jsonl", [
        {"title": "fine"},
        "",
        '{"title": "broken',
        {"title": "x", "task_type": "coding"},
        [1, 2],
        {"title": "   "},
        {"title": "old", "at": "1999-12-31T23:00:00Z"},
        {"title": "x", "colour": "red"},
        {"title": "fine too"},
    ])
    report = import_file(runtime.pool, path, source="task", owner="alice")
    assert [(r.line, r.field) for r in report.rejects] == [
        (3, "line"), (4, "task_type"), (5, "line"), (6, "title"), (7, "at"), (8, "colour")]
    assert "not valid JSON" in report.rejects[0].reason and "coding" in report.rejects[1].reason
    assert report.valid == 2 and not report.written and _count(runtime.pool, "tasks") == 0

    dry = import_file(runtime.pool, path, source="task", owner="alice", dry_run=True, skip_invalid=True)
    assert dry.dry_run and not dry.written and dry.valid_by_source == {"task": 2}
    assert _count(runtime.pool, "tasks") == 0

    report = import_file(runtime.pool, path, source="task", owner="alice", skip_invalid=True)
    assert report.written and report.totals["created"] == 2 and len(report.rejects) == 6
    assert _count(runtime.pool, "tasks") == 2


@pytest.mark.parametrize(("name", "content", "says"), [
    ("a.parquet", b"title,content\nhello,world\n", "not a Parquet file"),
    ("a.jsonl", b'{\n  "title": "pretty-printed JSON"\n}\n', "not JSON Lines"),
    ("a.jsonl", b'[{"title": "a JSON array"}]\n', "not JSON Lines"),
    ("a.jsonl", b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8"),
    ("a.jsonl", b"PK\x03\x04\x14\x00\x00\x00", "binary"),
    ("a.csv", b'{"title": "JSON Lines named .csv"}\n{"title": "b"}\n', "none of the columns"),
    ("a.csv", b"title,title\nx,y\n", "twice"),
    ("a.csv", "title\ncaf\xe9\n".encode("latin-1"), "not UTF-8"),
    ("a.txt", b"title\nx\n", "cannot tell the format"),
])
def test_a_file_that_is_not_its_format_is_one_clear_error(runtime, tmp_path, name, content, says):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ImportFileError, match=says):
        import_file(runtime.pool, path, source="task", owner="alice")
    assert _count(runtime.pool, "tasks") == 0


def test_owner_and_source_come_from_the_import_or_the_row(runtime, tmp_path):
    path = _jsonl(tmp_path / "rows.jsonl", [
        {"source": "task", "owner": "bob", "title": "bob's task"},
        {"source": "task", "title": "default owner's task"},
        {"title": "no source"},
        {"source": "okr", "title": "unknown source"},
    ])
    report = import_file(runtime.pool, path, default_owner="carol", skip_invalid=True)
    assert [(r.line, r.field) for r in report.rejects] == [(3, "source"), (4, "source")]
    assert _count(runtime.pool, "tasks", "bob") == 1 and _count(runtime.pool, "tasks", "carol") == 1


def test_a_conflict_only_the_database_sees_stops_the_import_at_its_line(runtime, tmp_path):
    first = _jsonl(tmp_path / "caps.jsonl", [{"name": "deploy", "description": "roll out", "key": "c1"}])
    assert import_file(runtime.pool, first, source="capability", owner="alice").totals["created"] == 1
    path = _jsonl(tmp_path / "caps2.jsonl", [
        {"name": "observe", "key": "c2"},
        {"name": "deploy", "key": "c3"},  # another key taking c1's name
    ])
    report = import_file(runtime.pool, path, source="capability", owner="alice")
    assert report.stopped and report.stopped.startswith("line 2: name")
    assert [(r.line, r.field) for r in report.rejects] == [(2, "name")]
    skipped = import_file(runtime.pool, path, source="capability", owner="alice", skip_invalid=True)
    assert skipped.stopped is None and skipped.totals == {"created": 1, "updated": 0, "unchanged": 0}


def test_memories_go_through_the_deferred_ingest_and_reimport_changes_nothing(runtime, tmp_path):
    path = _jsonl(tmp_path / "memories.jsonl", [
        {"content": "The nightly export moved to 02:00 UTC.", "content_type": "plan", "project_name": "ops",
         "at": "2023-03-01T00:00:00Z", "speaker": "Ana"},
        {"content": "Readiness probes must not call the database.", "content_type": "insight", "project_key": "web"},
        {"content": "no type", "project_name": "ops"},
        {"content": "has a key", "content_type": "plan", "project_name": "ops", "key": "m1"},
    ])
    report = import_file(runtime.pool, path, source="memory", owner="alice", embedder=runtime.embedder,
                         skip_invalid=True)
    assert [(r.line, r.field) for r in report.rejects] == [(3, "content_type"), (4, "key")]
    assert report.counts == {"memory": {"created": 2, "updated": 0, "unchanged": 0}}
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT ts, embedding_status, arbitration_status FROM memories ORDER BY ts").fetchall()
    assert rows[0] == (int(datetime(2023, 3, 1, tzinfo=UTC).timestamp()), "pending", "pending")
    hits = search(runtime.pool, runtime.embedder, "alice", "nightly export", mode="keyword", limit=5).hits
    assert [h.source for h in hits] == ["memory"]
    again = import_file(runtime.pool, path, source="memory", owner="alice", embedder=runtime.embedder,
                        skip_invalid=True)
    assert again.counts == {"memory": {"created": 0, "updated": 0, "unchanged": 2}}
    assert _count(runtime.pool, "memories") == 2


def test_reimport_counts_memories_the_arbitration_folded_as_unchanged(runtime, tmp_path):
    """A memory the arbitration folded into another (inactive, `duplicate_of`) is stored: importing its file
    again changes nothing. Before, each re-import stored it again and it was folded again (a probe: 12 created
    every time, inactive rows and arbitration records growing). A forgotten memory is created again."""
    from memory_pipelines.store.ingest import finish_deferred
    from memory_pipelines.store.removal import forget

    path = _jsonl(tmp_path / "memories.jsonl", [
        {"content": "Readiness probes must not call the database.", "content_type": "insight", "project_key": "web",
         "at": "2023-03-01T00:00:00Z"},
        {"content": "READINESS probes must NOT call the database!", "content_type": "insight", "project_key": "web",
         "at": "2023-03-01T00:00:01Z"},
    ])

    def again() -> dict:
        report = import_file(runtime.pool, path, source="memory", owner="alice", embedder=runtime.embedder)
        finish_deferred(runtime.pool, runtime.embedder, None, conflict_threshold=0.5)
        return report.counts["memory"]

    assert again() == {"created": 2, "updated": 0, "unchanged": 0}
    with runtime.pool.connection() as conn:
        folded = conn.execute("SELECT id FROM memories WHERE NOT is_active").fetchall()
    assert len(folded) == 1  # the rules fold one of them: the same terms
    stored = (_count(runtime.pool, "memories"), _count(runtime.pool, "memory_arbitrations"))
    for _ in range(2):
        assert again() == {"created": 0, "updated": 0, "unchanged": 2}
        assert (_count(runtime.pool, "memories"), _count(runtime.pool, "memory_arbitrations")) == stored
    forget(runtime.pool, "alice", "memory", folded[0][0])
    assert again() == {"created": 1, "updated": 0, "unchanged": 1}
    assert _count(runtime.pool, "memories") == 2


def test_an_event_typed_as_the_build_log_is_rejected_naming_type(runtime, tmp_path):
    """`memory_retrieval` is the build log's own event type: a caller's event of that type was stored, then left
    out of the export as a build event. It is refused at its line, naming `type`."""
    path = _jsonl(tmp_path / "events.jsonl", [{"type": "alert", "payload": {"disk": "full"}},
                                              {"type": "memory_retrieval", "payload": {"note": "mine"}}])
    report = import_file(runtime.pool, path, source="event", owner="alice")
    assert [(r.line, r.field) for r in report.rejects] == [(2, "type")] and "reserved" in report.rejects[0].reason
    assert not report.written and _count(runtime.pool, "events") == 0
