"""The ways in of the Dagster code location: the inbox sensor and import, and the source-database sync."""

from __future__ import annotations

import json
import os
import time
import warnings
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg
import psycopg
import pytest

from assets.definitions import defs
from assets.embeddings import embedding_assets, memory_vectors, vector_indexes
from assets.ingest import inbox_files, inbox_import, inbox_sensor, index_after_ingest, source_sync
from assets.keywords import keyword_assets
from assets.materialize import RANGE_TAGS
from assets.resources import MemoryResource
from memory_pipelines.index.vectors import count_pending
from memory_pipelines.operations.source_sync import read_watermark

warnings.filterwarnings("ignore", category=dg.BetaWarning)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


@pytest.fixture
def resource(db_url, tmp_path) -> MemoryResource:
    return MemoryResource(database_url=db_url, embedder="fake", home=str(tmp_path))


def _drop(inbox: Path, relpath: str, lines: list) -> Path:
    path = inbox / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    old = time.time() - 60  # settled: not being copied in any more
    os.utime(path, (old, old))
    return path


def _tick(instance, resource, cursor=None):
    ctx = dg.build_sensor_context(instance=instance, resources={"memory": resource}, cursor=cursor)
    return inbox_sensor(ctx)


def _meta(result: dg.ExecuteInProcessResult, key: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events()
               if e.materialization.asset_key.to_user_string() == key]
    return {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}


def _import(instance, resource, partition: str) -> dg.ExecuteInProcessResult:
    instance.add_dynamic_partitions(inbox_files.name, [partition])
    return dg.materialize([inbox_import], partition_key=partition, resources={"memory": resource},
                          instance=instance, run_config=QUIET, raise_on_error=False)


@pytest.mark.slow
def test_a_file_dropped_into_the_inbox_is_imported_once(resource, tmp_path, pool):
    instance = dg.DagsterInstance.ephemeral()
    inbox = tmp_path / "inbox"
    _drop(inbox, "alice/learnings.jsonl", [
        {"key": "k1", "title": "Shard the hot table by tenant", "at": "2024-03-01T12:00:00Z"},
        {"key": "k2", "title": "Never retry a non-idempotent POST", "task_type": "dev"},
    ])
    _drop(inbox, "bob/notes.txt", ["not importable: ignored"])
    first = _tick(instance, resource)
    [request] = first.run_requests
    assert request.partition_key == "alice/learnings.jsonl" and request.run_key.startswith("alice/learnings.jsonl:")
    assert first.dynamic_partitions_requests[0].partition_keys == ["alice/learnings.jsonl"]
    second = _tick(instance, resource, first.cursor)
    assert not second.run_requests  # evaluated again while the run is queued: no second run
    assert _tick(instance, resource).run_requests[0].run_key == request.run_key  # the daemon's dedup key

    result = _import(instance, resource, request.partition_key)
    assert result.success
    meta = _meta(result, "inbox_import")
    assert (meta["rows_read"], meta["rows_created"], meta["rows_rejected"]) == (2, 2, 0)
    assert meta["seconds"] >= 0 and meta["owner"] == "alice" and meta["source"] == "learning"
    assert (inbox / "done" / "alice" / "learnings.jsonl").is_file()
    assert not (inbox / "alice" / "learnings.jsonl").exists()
    with pool.connection() as conn:
        rows = conn.execute("SELECT owner_id, key, created_at FROM learnings ORDER BY key").fetchall()
    assert rows[0] == ("alice", "k1", datetime(2024, 3, 1, 12, tzinfo=UTC)) and len(rows) == 2
    assert not _tick(instance, resource, second.cursor).run_requests  # moved away: nothing more to do

    # The indexing run the success triggers embeds what the import left pending.
    [run] = instance.get_runs()
    ctx = dg.build_run_status_sensor_context(sensor_name="index_after_ingest", dagster_instance=instance,
                                             dagster_run=run, dagster_event=result.get_run_success_event())
    follow = index_after_ingest(ctx)
    assert follow.tags["dagster/asset_partition_range_end"] == RANGE_TAGS["dagster/asset_partition_range_end"]
    indexing = dg.materialize([*embedding_assets.values(), memory_vectors, vector_indexes, *keyword_assets.values()],
                              resources={"memory": resource}, instance=instance, tags=follow.tags, run_config=QUIET)
    assert indexing.success
    ctx = dg.build_run_status_sensor_context(sensor_name="index_after_ingest", dagster_instance=instance,
                                             dagster_run=instance.get_run_by_id(indexing.run_id),
                                             dagster_event=indexing.get_run_success_event())
    # a run that imported nothing follows with nothing, and says nothing: Dagster ends a tick at a run the sensor
    # answers, so a SkipReason for each unrelated run (a backfill's many) held the next import's indexing a tick each
    assert index_after_ingest(ctx) is None
    with pool.connection() as conn:
        assert count_pending(conn, "learning", resource.runtime.embedder.model_name)[0] == 0


def test_a_file_with_bad_lines_goes_to_rejected_with_its_reasons(resource, tmp_path, pool):
    instance = dg.DagsterInstance.ephemeral()
    inbox = tmp_path / "inbox"
    _drop(inbox, "tasks.jsonl", [{"owner": "carol", "title": "fine"}, {"owner": "carol", "title": "x",
                                                                        "status": "done"}])
    _drop(inbox, "events.parquet", ["this is not parquet"])
    first_keys = {r.partition_key: r.run_key for r in _tick(instance, resource).run_requests}
    assert set(first_keys) == {"tasks.jsonl", "events.parquet"}

    bad_lines = _import(instance, resource, "tasks.jsonl")
    assert not bad_lines.success
    [failure] = [e for e in bad_lines.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "1 rows rejected" in failure.event_specific_data.error.message
    # named as the command line's import names them: file:line: field: reason
    assert "tasks.jsonl:2: status: must be one of" in (inbox / "rejected" / "tasks.jsonl.rejects.txt").read_text()
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0

    bad_file = _import(instance, resource, "events.parquet")
    assert not bad_file.success
    assert "not a Parquet file" in (inbox / "rejected" / "events.parquet.rejects.txt").read_text()
    assert not [f for f in inbox.iterdir() if f.is_file()]

    # The refused file moved back in unchanged (same name, size and mtime) is a new run; fixed, its import clears
    # the old reasons.
    os.replace(inbox / "rejected" / "tasks.jsonl", inbox / "tasks.jsonl")
    [again] = _tick(instance, resource).run_requests
    assert again.partition_key == "tasks.jsonl" and again.run_key != first_keys["tasks.jsonl"]
    _drop(inbox, "tasks.jsonl", [{"owner": "carol", "title": "fine"}, {"owner": "carol", "title": "x",
                                                                      "status": "completed"}])
    assert _import(instance, resource, "tasks.jsonl").success
    assert not (inbox / "rejected" / "tasks.jsonl.rejects.txt").exists()
    # refused again, then a new file of that name imports: the refused one still waits in rejected/ with its reasons
    _drop(inbox, "tasks.jsonl", [{"owner": "carol", "title": "  "}])
    assert not _import(instance, resource, "tasks.jsonl").success
    _drop(inbox, "tasks.jsonl", [{"owner": "carol", "title": "another"}])
    assert _import(instance, resource, "tasks.jsonl").success
    assert (inbox / "rejected" / "tasks.jsonl").is_file()
    assert "title: must not be empty" in (inbox / "rejected" / "tasks.jsonl.rejects.txt").read_text()


def test_a_file_whose_name_no_partition_can_hold_goes_to_rejected_with_the_reason(resource, tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    inbox = tmp_path / "inbox"
    for name in ("hank/learnings [v2].jsonl", "hank/learnings,v3.jsonl", "tab\there.jsonl"):
        _drop(inbox, name, [{"key": "B1", "title": "an odd name"}])
    _drop(inbox, "hank/learnings.jsonl", [{"key": "A1", "title": "a plain name"}])
    fresh = _drop(inbox, "hank/fresh[1].jsonl", [{"key": "F1", "title": "still being copied"}])
    os.utime(fresh)  # just written: it may still be being copied in, so it waits like any other file

    result = _tick(instance, resource)
    assert [r.partition_key for r in result.run_requests] == ["hank/learnings.jsonl"]
    rejected = inbox / "rejected"
    for name, shown in (("hank/learnings [v2].jsonl", "'[' ']'"), ("hank/learnings,v3.jsonl", "','"),
                        ("tab\there.jsonl", "'\\t'")):
        assert (rejected / name).is_file() and not (inbox / name).exists()
        reason = (rejected / f"{name}.rejects.txt").read_text()
        assert "the file name cannot be used" in reason and f"holds {shown}" in reason, reason
        assert "rename it" in reason
    assert fresh.is_file()
    assert [r.partition_key for r in _tick(instance, resource, result.cursor).run_requests] == []



def test_a_file_of_a_format_no_import_reads_goes_to_rejected_with_the_reason(resource, tmp_path):
    """`tasks.json` (a JSON array) or `notes.txt` waited in the inbox forever: no run, no warning, the sensor said
    'no new file'. Such a settled file goes to rejected/ with the formats the import reads; partial, hidden and
    still-copying files are left to wait."""
    instance = dg.DagsterInstance.ephemeral()
    inbox = tmp_path / "inbox"
    for name in ("tasks.json", "hank/notes.txt", "README"):
        _drop(inbox, name, [{"title": "a file the import cannot read"}])
    for name in ("tasks.jsonl.part", "hank/learnings.csv.tmp", ".hidden.json", "hank/~lock.json"):
        _drop(inbox, name, ["partial"])
    fresh = _drop(inbox, "fresh.json", [{"title": "still being copied"}])
    os.utime(fresh)

    result = _tick(instance, resource)
    assert result.run_requests == []
    rejected = inbox / "rejected"
    for name in ("tasks.json", "hank/notes.txt", "README"):
        assert (rejected / name).is_file() and not (inbox / name).exists(), name
        reason = (rejected / f"{name}.rejects.txt").read_text()
        assert "not a format the import reads" in reason and ".jsonl" in reason and ".parquet" in reason, reason
    for name in ("tasks.jsonl.part", "hank/learnings.csv.tmp", ".hidden.json", "hank/~lock.json", "fresh.json"):
        assert (inbox / name).is_file(), name



def test_a_file_in_a_folder_inside_an_owner_folder_goes_to_rejected_with_the_reason(resource, tmp_path):
    """inbox/hank/2024/tasks.jsonl waited forever: no run, no warning (only the top and an owner's folder are
    read). It goes to rejected/ saying where to put it; a hidden folder's files still wait."""
    instance = dg.DagsterInstance.ephemeral()
    inbox = tmp_path / "inbox"
    _drop(inbox, "hank/2024/tasks.jsonl", [{"title": "one folder too deep"}])
    _drop(inbox, "hank/.sync/tasks.jsonl", [{"title": "a tool's own folder"}])
    _drop(inbox, "hank/tasks.jsonl", [{"title": "in place"}])

    result = _tick(instance, resource)
    assert [r.partition_key for r in result.run_requests] == ["hank/tasks.jsonl"]
    rejected = inbox / "rejected" / "hank/2024/tasks.jsonl"
    assert rejected.is_file() and not (inbox / "hank/2024/tasks.jsonl").exists()
    reason = (rejected.parent / "tasks.jsonl.rejects.txt").read_text()
    assert "in a folder inside an owner's folder" in reason and "inbox/hank/" in reason, reason
    assert (inbox / "hank/.sync/tasks.jsonl").is_file()


def test_an_exports_record_files_are_set_aside_and_its_item_files_imported(resource, tmp_path):
    """An export's folder copied into inbox/hank/: its item files are imported as hank's; the manifest, the
    replaced versions and the scoring configs are not (memory_versions.jsonl read as memories would have rejected
    every line), and go to rejected/ saying what they are and what carries them over."""
    instance = dg.DagsterInstance.ephemeral()
    inbox = tmp_path / "inbox"
    _drop(inbox, "hank/tasks.jsonl", [{"source": "task", "key": "t-1", "title": "exported task"}])
    _drop(inbox, "hank/memory_versions.jsonl", [{"memory_id": "mem_1", "version": 1, "content": "old text"}])
    _drop(inbox, "hank/manifest.json", ['{"format": 1, "owner": "hank", "files": {}}'])
    _drop(inbox, "hank/scoring_configs.json", ["[]"])

    result = _tick(instance, resource)
    assert [r.partition_key for r in result.run_requests] == ["hank/tasks.jsonl"]
    for name in ("memory_versions.jsonl", "manifest.json", "scoring_configs.json"):
        moved = inbox / "rejected" / "hank" / name
        assert moved.is_file() and not (inbox / "hank" / name).exists(), name
        reason = (moved.parent / f"{name}.rejects.txt").read_text()
        assert "an export's record" in reason and "scoring restore" in reason, reason


def test_an_export_folder_dropped_in_whole_is_not_imported_as_the_folders_name(resource, tmp_path):
    """`memory-pipelines export --owner ivy backup-1128` dropped into the inbox as it is: its item files would have
    become the owner "backup-1128"'s. They go to rejected/ saying whose export it is and where to put them; the
    manifest follows once they are gone. An export in its owner's own folder imports as before."""
    instance = dg.DagsterInstance.ephemeral()
    inbox = tmp_path / "inbox"
    _drop(inbox, "backup-1128/tasks.jsonl", [{"source": "task", "key": "t-1", "title": "exported task"}])
    _drop(inbox, "backup-1128/manifest.json", ['{"format": 1, "owner": "ivy", "files": {}}'])
    _drop(inbox, "ivy/learnings.jsonl", [{"source": "learning", "key": "l-1", "title": "a lesson"}])
    _drop(inbox, "ivy/manifest.json", ['{"format": 1, "owner": "ivy", "files": {}}'])

    result = _tick(instance, resource)
    assert [r.partition_key for r in result.run_requests] == ["ivy/learnings.jsonl"]
    moved = inbox / "rejected" / "backup-1128" / "tasks.jsonl"
    assert moved.is_file() and not (inbox / "backup-1128" / "tasks.jsonl").exists()
    reason = (moved.parent / "tasks.jsonl.rejects.txt").read_text()
    assert "an export of owner 'ivy'" in reason and "inbox/ivy/" in reason and "manifest.json" in reason, reason
    assert (inbox / "backup-1128" / "manifest.json").is_file()  # it told the tasks apart: it goes last

    result = _tick(instance, resource, cursor=result.cursor)
    assert not result.run_requests
    assert (inbox / "rejected" / "backup-1128" / "manifest.json").is_file()
    assert not (inbox / "backup-1128" / "manifest.json").exists()


@pytest.fixture
def team_db(empty_db_url) -> str:
    """A team's own database (a second one on the test server) with a table of lessons."""
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE lessons (id serial PRIMARY KEY, subject text NOT NULL, body text, kind text,"
                     " team text NOT NULL, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL)")
    return empty_db_url


T0 = datetime(2024, 6, 1, tzinfo=UTC)


def _lesson(url: str, subject: str, hours: float, kind: str = "dev", team: str = "alpha") -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO lessons (subject, body, kind, team, created_at, updated_at)"
                     " VALUES (%s, %s, %s, %s, %s, %s)",
                     (subject, f"details of {subject}", kind, team, T0, T0 + timedelta(hours=hours)))


def _sync(resource, **config) -> dict:
    result = dg.materialize([source_sync], resources={"memory": resource},
                            run_config={**QUIET, "ops": {"source_sync": {"config": config}}})
    return _meta(result, "source_sync")


def test_source_database_sync_is_incremental_and_a_range_rerun_is_exact(resource, team_db, tmp_path, pool, monkeypatch):
    monkeypatch.setenv("TEAM_DB_URL", team_db)
    (tmp_path / "sync.yaml").write_text(
        "syncs:\n"
        "  - name: team-lessons\n"
        "    url_env: TEAM_DB_URL\n"
        "    table: public.lessons\n"
        "    source: learning\n"
        "    owner_column: team\n"
        "    watermark: updated_at\n"
        "    columns: {key: id, title: subject, content: body, task_type: kind, at: created_at}\n")
    for i, hours in enumerate((1, 2, 3)):
        _lesson(team_db, f"lesson {i}", hours)
    _lesson(team_db, "a bad kind", 4, kind="coding")
    meta = _sync(resource)
    [run] = meta["per_sync"]
    assert (meta["rows_read"], meta["rows_created"], meta["rows_rejected"]) == (4, 3, 1)
    assert run["rejects"] == [{"key": "4", "field": "task_type", "reason": run["rejects"][0]["reason"]}]
    assert read_watermark(pool, "team-lessons") == T0 + timedelta(hours=4)

    _lesson(team_db, "lesson new", 5, team="beta")
    with psycopg.connect(team_db, autocommit=True) as conn:
        conn.execute("UPDATE lessons SET subject = 'lesson 0, revised', updated_at = %s WHERE id = 1",
                     (T0 + timedelta(hours=6),))
    meta = _sync(resource)
    # the new row, the revised one, and the rejected row at the old watermark read again (rejected again)
    assert (meta["rows_read"], meta["rows_created"], meta["rows_updated"], meta["rows_unchanged"]) == (3, 1, 1, 0)
    assert meta["rows_rejected"] == 0  # reported once, by the run that stored the watermark
    again = _sync(resource)  # nothing new: only the row at the watermark is read again, unchanged
    assert (again["rows_read"], again["rows_unchanged"]) == (1, 1)
    # a row stamped with the watermark but committed after the run that stored it: a strict `>` never read it
    _lesson(team_db, "stamped at the watermark, committed late", 6)
    late = _sync(resource)
    assert (late["rows_read"], late["rows_created"], late["rows_unchanged"]) == (2, 1, 1)
    with pool.connection() as conn:
        rows = conn.execute("SELECT owner_id, key, title, created_at FROM learnings ORDER BY key").fetchall()
    assert rows == [("alpha", "1", "lesson 0, revised", T0), ("alpha", "2", "lesson 1", T0),
                    ("alpha", "3", "lesson 2", T0), ("beta", "5", "lesson new", T0),
                    ("alpha", "6", "stamped at the watermark, committed late", T0)]

    ranged = _sync(resource, since=(T0 + timedelta(hours=2)).isoformat(), until=(T0 + timedelta(hours=4)).isoformat())
    assert (ranged["rows_read"], ranged["rows_unchanged"], ranged["ranged"]) == (2, 2, True)  # rows 2 and 3 exactly
    assert read_watermark(pool, "team-lessons") == T0 + timedelta(hours=6)  # a range run leaves it


def test_a_bad_sync_config_names_what_is_wrong(resource, tmp_path):
    (tmp_path / "sync.yaml").write_text("syncs:\n  - name: x\n    url: postgresql://h/db\n    table: t\n"
                                        "    source: learning\n    owner: a\n    watermark: w\n"
                                        "    columns: {key: id, headline: h}\n")
    result = dg.materialize([source_sync], resources={"memory": resource}, run_config=QUIET, raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "columns.headline is not a field of a learning" in failure.event_specific_data.error.message


def test_ingest_assets_stay_out_of_main_job():
    main = defs.resolve_job_def("main_job")
    assert not {"inbox_import", "source_sync"} & set(main.graph.node_dict)
    assert defs.resolve_job_def("inbox_import_job").partitions_def == inbox_files


def test_a_watermark_keeps_its_type_a_date_and_a_numeric_included(pool):
    """A `date` (or numeric) watermark column wrote its rows, then failed to store the watermark ("Object of type
    date is not JSON serializable"): every later run read everything again and failed the same way."""
    from decimal import Decimal

    from memory_pipelines.operations.source_sync import write_watermark

    for value in (date(2026, 12, 7), Decimal("12.50"), 42, datetime(2026, 12, 7, 9, 30, tzinfo=UTC)):
        write_watermark(pool, "typed", value)
        back = read_watermark(pool, "typed")
        assert back == value and type(back) is type(value)
