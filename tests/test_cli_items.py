"""`memory-pipelines import / write / update / learnings-relevant` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memory_pipelines.surfaces.cli import main


@pytest.fixture
def cli_env(db_url, monkeypatch, tmp_path):
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake", "MEMORY_PIPELINES_HOME": str(tmp_path),
           "MEMORY_PIPELINES_OWNER": "carol"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def _rows(pool, table: str) -> list[tuple]:
    with pool.connection() as conn:
        return conn.execute(f"SELECT owner_id, key, title FROM {table} ORDER BY key").fetchall()


def _file(tmp_path: Path, lines: list) -> Path:
    path = tmp_path / "learnings.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def test_import_reports_bad_lines_and_writes_only_with_skip_invalid(cli_env, pool, tmp_path, capsys):
    path = _file(tmp_path, [{"key": "a", "title": "Keep retries idempotent"},
                            {"key": "b", "title": "x", "category": "gossip"},
                            "not json",
                            {"key": "c", "title": "Alert on queue depth, not on CPU"}])
    assert main(["import", str(path), "--source", "learning", "--owner", "alice"]) == 1
    out = capsys.readouterr()
    assert "learnings.jsonl:2: category:" in out.err and "learnings.jsonl:3: line: is not valid JSON" in out.err
    assert "nothing written" in out.out and _rows(pool, "learnings") == []

    assert main(["import", str(path), "--source", "learning", "--owner", "alice", "--dry-run"]) == 1  # as the import
    assert "learning: 2 valid" in capsys.readouterr().out and _rows(pool, "learnings") == []
    assert main(["import", str(path), "--source", "learning", "--owner", "alice", "--dry-run", "--skip-invalid"]) == 0
    capsys.readouterr()

    assert main(["import", str(path), "--source", "learning", "--owner", "alice", "--skip-invalid"]) == 0
    out = capsys.readouterr()
    assert "learnings.jsonl:2: category:" in out.err and "learning: 2 created, 0 updated, 0 unchanged" in out.out
    assert _rows(pool, "learnings") == [("alice", "a", "Keep retries idempotent"),
                                        ("alice", "c", "Alert on queue depth, not on CPU")]

    assert main(["import", str(path), "--source", "learning", "--owner", "alice", "--skip-invalid", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["totals"] == {"created": 0, "updated": 0, "unchanged": 2}
    assert [r["line"] for r in report["rejects"]] == [2, 3]


def test_import_without_owner_uses_the_configured_one(cli_env, pool, tmp_path, capsys):
    path = _file(tmp_path, [{"key": "a", "title": "Feature flags expire"}])
    assert main(["import", str(path), "--source", "learning"]) == 0
    assert _rows(pool, "learnings") == [("carol", "a", "Feature flags expire")]



def test_import_owner_cell_padded_is_that_owner_with_owner_as_without_it(cli_env, pool, tmp_path, capsys):
    """A padded owner cell is stripped before --owner sees it; a cell of another owner is rejected naming both."""
    table = tmp_path / "learnings.csv"
    table.write_text("owner,key,title\n alice ,a,Feature flags expire\n", encoding="utf-8")
    lines = _file(tmp_path, [{"owner": " alice ", "key": "b", "title": "Keep retries idempotent"}])
    for path in (table, lines):
        assert main(["import", str(path), "--source", "learning", "--owner", "alice"]) == 0, capsys.readouterr()
    assert _rows(pool, "learnings") == [("alice", "a", "Feature flags expire"),
                                        ("alice", "b", "Keep retries idempotent")]
    capsys.readouterr()

    other = _file(tmp_path, [{"owner": " bob ", "key": "c", "title": "Alert on queue depth"}])
    assert main(["import", str(other), "--source", "learning", "--owner", "alice"]) == 1
    assert "learnings.jsonl:1: owner: is 'bob', but the import's owner is 'alice'" in capsys.readouterr().err
    assert [key for _o, key, _t in _rows(pool, "learnings")] == ["a", "b"]

@pytest.mark.slow
def test_a_bad_file_is_one_clear_line_without_a_traceback(cli_env, tmp_path):
    path = tmp_path / "tasks.parquet"
    path.write_text("title\nnot parquet\n")
    proc = subprocess.run([sys.executable, "-m", "memory_pipelines.surfaces.cli", "import", str(path), "--source",
                           "task"], capture_output=True, text=True, env={**os.environ, **cli_env}, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "tasks.parquet: is not a Parquet file" in lines[0]


def _import_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memory_pipelines.surfaces.cli", "import", *args],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=120)


def test_a_folder_and_a_utf16_file_say_what_they_are(cli_env, tmp_path):
    folder = tmp_path / "exported"
    folder.mkdir()
    proc = _import_cli(cli_env, str(folder), "--source", "task")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "not an export folder" in proc.stderr and "suffix" not in proc.stderr, proc.stderr
    for name, encoding in (("bom.jsonl", "utf-16"), ("plain.jsonl", "utf-16-le"), ("table.csv", "utf-16")):
        path = tmp_path / name
        text = '{"title": "wide text"}\n' if name.endswith("jsonl") else "title\nwide text\n"
        path.write_bytes(text.encode(encoding))
        proc = _import_cli(cli_env, str(path), "--source", "task", "--dry-run")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "looks like UTF-16" in proc.stderr and "convert it to UTF-8" in proc.stderr, proc.stderr
        assert "binary" not in proc.stderr


def test_a_json_lines_row_error_does_not_speak_of_cells(cli_env, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps({"type": "alert", "payload": "not an object"}) + "\n", encoding="utf-8")
    proc = _import_cli(cli_env, str(path), "--source", "event", "--dry-run")
    assert proc.returncode == 1 and "events.jsonl:1: payload: must be a JSON object" in proc.stderr, proc.stderr
    assert "cell" not in proc.stderr
    table = tmp_path / "events.csv"
    table.write_text("type,payload\nalert,not an object\n", encoding="utf-8")
    proc = _import_cli(cli_env, str(table), "--source", "event", "--dry-run")
    assert proc.returncode == 1 and "(JSON text in the cell)" in proc.stderr, proc.stderr


def test_write_update_and_relevant_learnings(cli_env, pool, tmp_path, capsys, monkeypatch):
    item = {"title": "Drain the node before the kernel upgrade", "task_type": "dev", "failure_class": "OOM",
            "key": "drain"}
    assert main(["write", "learning", "--owner", "alice", "--json", json.dumps(item)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["action"] == "created" and first["key"] == "drain"

    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps([{"title": "Ship the CLI", "key": "t1"}, {"title": "Ship the MCP tools"}]))
    assert main(["write", "task", "--owner", "alice", "--file", str(batch)]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == {"created": 2, "updated": 0, "unchanged": 0}

    assert main(["update", "task", "t1", "--owner", "alice", "--json", '{"status": "completed"}']) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "updated"
    with pool.connection() as conn:
        assert conn.execute("SELECT status FROM tasks WHERE key = 't1'").fetchone()[0] == "completed"

    assert main(["learnings-relevant", "--owner", "alice", "--task-type", "dev", "--failure-class", "OOM",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["learnings"][0]["id"] == first["id"]
    assert main(["learnings-relevant", "--owner", "bob", "--task-type", "dev", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"learnings": []}

    # Bad input: one line naming the field, nothing written.
    assert main(["write", "goal", "--owner", "alice", "--json", '{"title": "Faster", "progress": 120}']) == 2
    assert "progress" in capsys.readouterr().err
    assert main(["write", "event", "--owner", "alice", "--json", "{not json"]) == 2
    assert "--json: is not valid JSON" in capsys.readouterr().err
    assert main(["update", "task", "t1", "--owner", "bob", "--json", '{"status": "failed"}']) == 2
    assert "no task 't1'" in capsys.readouterr().err
    assert main(["write", "task", "--owner", "alice", "--json", json.dumps([{"title": "a"}, {"title": ""}])]) == 2
    assert "items[1].title" in capsys.readouterr().err
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM goals").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 2


def test_a_json_object_naming_a_member_twice_is_refused_naming_it(cli_env, pool, capsys):
    """`write` kept the last of a repeated member (json.loads does), so '{"title": "a", "title": "b"}' wrote a task
    titled "b" with rc 0, where HTTP refuses such a body (422 at the repeated member). Now it is refused, naming
    the member, and nothing is written; `update` likewise."""
    assert main(["write", "task", "--owner", "alice", "--json", '{"title": "Ship it", "title": "Ship the CLI"}']) == 2
    assert "'title' twice" in capsys.readouterr().err
    assert main(["write", "task", "--owner", "alice", "--json",
                 '[{"title": "a"}, {"title": "b", "metadata": {"x": 1, "x": 2}}]']) == 2
    assert "'x' twice" in capsys.readouterr().err
    assert main(["write", "task", "--owner", "alice", "--json", '{"title": "Ship it", "key": "t1"}']) == 0
    capsys.readouterr()
    assert main(["update", "task", "t1", "--owner", "alice", "--json",
                 '{"status": "completed", "status": "failed"}']) == 2
    assert "'status' twice" in capsys.readouterr().err
    with pool.connection() as conn:
        assert conn.execute("SELECT title, status FROM tasks").fetchall() == [("Ship it", "pending")]


def test_an_import_line_naming_a_member_twice_is_rejected_naming_it(cli_env, pool, tmp_path, capsys):
    """A JSON Lines row naming a member twice was imported with the last value (json.loads keeps it silently):
    '{"key": "a", "title": "Old", "title": "New"}' stored "New" with no word. Now the line is rejected naming
    the member, like any bad row; the other rows go in with --skip-invalid."""
    path = _file(tmp_path, ['{"key": "a", "title": "Keep retries idempotent", "title": "Keep retries safe"}',
                            '{"key": "b", "title": "Alert on queue depth", "metadata": {"x": 1, "x": 2}}',
                            {"key": "c", "title": "Alert on queue depth, not on CPU"}])
    assert main(["import", str(path), "--source", "learning", "--owner", "alice"]) == 1
    err = capsys.readouterr().err
    assert "learnings.jsonl:1: title: is named twice" in err and "learnings.jsonl:2: x: is named twice" in err
    assert _rows(pool, "learnings") == []
    assert main(["import", str(path), "--source", "learning", "--owner", "alice", "--skip-invalid"]) == 0
    assert _rows(pool, "learnings") == [("alice", "c", "Alert on queue depth, not on CPU")]


def test_json_nested_deeper_than_the_parser_reads_is_bad_input_not_a_traceback(cli_env, pool, tmp_path, capsys):
    """5,000 levels of nesting ran json.loads out of recursion: `write` and `import` died with a traceback (exit 1)
    where 40 levels are refused naming the field. Now it is bad JSON like any other: exit 2 naming --json, and the
    import line rejected by its number."""
    deep = '{"title": "deep", "metadata": ' + '{"a": ' * 5000 + "1" + "}" * 5001
    assert main(["write", "task", "--owner", "alice", "--json", deep]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --json: is not valid JSON (nested too deep to read") and "Traceback" not in err
    path = _file(tmp_path, [{"key": "a", "title": "Keep retries idempotent"}, deep])
    assert main(["import", str(path), "--source", "learning", "--owner", "alice"]) == 1
    err = capsys.readouterr().err
    assert "learnings.jsonl:2: line: is not valid JSON (nested too deep to read" in err, err
    assert _rows(pool, "learnings") == [] and _rows(pool, "tasks") == []


def _cut_while_locked(pool, table: str, argv: list[str]) -> int:
    """Run the command while `table` is locked, terminate its backend once it waits on the lock (a database that
    fails mid-command), and return its exit code."""
    holder = pool.getconn()
    try:
        holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # the command waits here ...
        with ThreadPoolExecutor(1) as ex:
            running = ex.submit(main, argv)
            deadline = time.monotonic() + 30
            killed = 0
            while not killed and time.monotonic() < deadline:
                with pool.connection() as conn:  # ... and its backend is terminated
                    killed = conn.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND pid <> pg_backend_pid() AND pid <> %s", (holder.info.backend_pid,)).fetchone()[0]
                time.sleep(0.05)
            assert killed
            holder.rollback()
            return running.result(30)
    finally:
        pool.putconn(holder)


def test_a_command_whose_database_connection_dies_says_so_in_one_line(cli_env, pool, tmp_path, capsys):
    """A database failing mid-command (a restart, a terminated backend) printed psycopg's traceback from every
    command but import; now one line says the database failed and that acknowledged writes are kept, exit 1."""
    assert main(["write", "task", "--json", '{"title": "Ship the export"}']) == 0
    capsys.readouterr()
    assert _cut_while_locked(pool, "tasks", ["export", "--owner", "carol", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error: the database failed" in err, err


def test_an_import_whose_database_fails_before_any_row_is_written_says_nothing_was(cli_env, pool, tmp_path, capsys):
    """It printed "written in 2.8 s" and "the rows counted above are written" with no row counted or written."""
    path = _file(tmp_path, [{"key": f"k{i}", "title": f"lesson {i}"} for i in range(3)])
    assert _cut_while_locked(pool, "learnings", ["import", str(path), "--source", "learning", "--owner", "alice"]) == 1
    out = capsys.readouterr().out
    assert "stopped: the database failed" in out and "nothing was written" in out, out
    assert "written in" not in out and "counted above" not in out, out
    assert _rows(pool, "learnings") == []


def test_an_empty_batch_is_refused_naming_items(cli_env, pool, capsys):
    """`write task --json '[]'` exited 0 having written nothing, where HTTP answers an empty batch with a 422."""
    assert main(["write", "task", "--json", "[]"]) == 2
    assert "items: must hold 1 to" in capsys.readouterr().err


def test_embed_skips_a_row_a_write_holds_instead_of_waiting_on_it(cli_env, pool, capsys):
    """The embedding UPDATE locked its batch's rows in the join's order and waited on one a write held: a batch
    write locking the same rows in key order deadlocked with it (a 503 over HTTP, the worker's pass lost). It
    now skips a held row, left pending for the next pass."""
    assert main(["write", "learning", "--json", '[{"key": "L-1", "title": "Pool sizes"}, {"key": "L-2",'
                 ' "title": "Retry with jitter"}]']) == 0
    with ThreadPoolExecutor(1) as ex, pool.connection() as holder:  # the lock goes first on a failure
        holder.execute("SELECT 1 FROM learnings WHERE key = 'L-2' FOR UPDATE")  # a write of L-2, not committed
        assert ex.submit(main, ["embed"]).result(20) == 0
        with pool.connection() as conn:
            embedded = dict(conn.execute("SELECT key, embedding IS NOT NULL FROM learnings").fetchall())
        assert embedded == {"L-1": True, "L-2": False}
    assert main(["embed"]) == 0
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM learnings WHERE embedding IS NULL").fetchone()[0] == 0


def test_a_search_without_matches_says_so_and_names_the_owner(cli_env, capsys):
    """It printed nothing at all, so a search as the wrong owner (or in a new home) read as a no-op."""
    assert main(["write", "learning", "--owner", "alice", "--json", json.dumps(
        {"key": "pm-42", "title": "Gateway 502s come from the connection pool"})]) == 0
    capsys.readouterr()
    assert main(["search", "gateway"]) == 0  # MEMORY_PIPELINES_OWNER: carol, who has nothing
    assert capsys.readouterr().out == "no matches for 'gateway' in the memory of owner 'carol'\n"
    assert main(["search", "gateway", "--owner", "alice", "--mode", "keyword"]) == 0
    out = capsys.readouterr().out
    assert "Gateway 502s come from the connection pool" in out and "no matches" not in out


def test_status_counts_the_rows_a_keyword_refresh_has_still_to_index(cli_env, pool, capsys):
    """operations.md: a re-indexing migration (011, 016) marks every keyword entry pending and `status` counts
    them; it counted only embeddings, so nothing told that `embed` was still due."""
    assert main(["write", "learning", "--owner", "alice", "--json", json.dumps(
        {"key": "pm-42", "title": "Gateway 502s come from the connection pool"})]) == 0
    with pool.connection() as conn:  # what migration 016 does
        conn.execute("UPDATE keyword_docs SET content_hash = 'pre-parts:' || content_hash")
    capsys.readouterr()
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["embedded_sources"]["learnings"]["keywords_pending"] == 1
    assert main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("table "))
    assert header.split()[-2:] == ["keywords", "pending"]
    assert next(line for line in lines if line.startswith("learnings ")).split()[-1] == "1"
    assert main(["embed"]) == 0
    capsys.readouterr()
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["embedded_sources"]["learnings"]["keywords_pending"] == 0


def test_write_memory_ingests_each_turn_or_refuses_the_batch_naming_the_bad_one(cli_env, pool, capsys):
    """`write` took tasks, learnings, capabilities, goals and events but not memories, which came in from the
    command line only through `import`. Now `write memory` ingests one memory or a conversation's turns in
    order, found by the next search; a bad turn is named by its place and none of the batch is stored."""
    turns = [{"content": "We picked pgvector because PostgreSQL already runs here.", "content_type": "insight",
              "project_name": "agent-mem", "speaker": "Li", "session": "s1", "at": "2026-11-01T10:00:00Z"},
             {"content": "Then the HNSW index goes in after the bulk load.", "content_type": "plan",
              "project_name": "agent-mem", "speaker": "Ana", "session": "s1"}]
    bad = [turns[0], {**turns[1], "content_type": "musing"}]
    assert main(["write", "memory", "--owner", "alice", "--json", json.dumps(bad)]) == 2
    assert "items[1].content_type: must be one of" in capsys.readouterr().err
    assert main(["write", "memory", "--owner", "alice", "--json", json.dumps({**turns[0], "mood": "calm"})]) == 2
    assert "error: mood: is not a field of a memory; the fields are content," in capsys.readouterr().err
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 0

    assert main(["write", "memory", "--owner", "alice", "--json", json.dumps(turns)]) == 0
    written = json.loads(capsys.readouterr().out)
    assert [w["status"] for w in written] == ["created", "created"]
    with pool.connection() as conn:
        rows = conn.execute("SELECT id, owner_id, speaker, session, context, created_at FROM memories ORDER BY turn"
                            ).fetchall()
    assert [r[0] for r in rows] == [w["id"] for w in written]  # in the order given: the turn sequence says so
    assert [(r[1], r[2], r[3]) for r in rows] == [("alice", "Li", "s1"), ("alice", "Ana", "s1")]
    assert rows[0][4] is None and rows[1][4].startswith("Li: We picked pgvector")  # Ana's turn answers Li's
    assert rows[0][5].isoformat() == "2026-11-01T10:00:00+00:00"  # `at`, as an import row gives a memory's time

    assert main(["search", "HNSW index after the bulk load", "--owner", "alice"]) == 0
    assert written[1]["id"] in capsys.readouterr().out
    assert main(["search", "HNSW index after the bulk load", "--owner", "bob"]) == 0
    assert written[1]["id"] not in capsys.readouterr().out


def test_embed_checks_imported_memories_against_older_ones(cli_env, pool, tmp_path, capsys):
    """An imported memory is stored at once and judged in the background, but `embed` only embedded it: the import
    said the check would follow with `embed`, yet the copy stayed active until a server's worker ran. `embed` now
    settles the deferred check too, and says what it decided."""
    assert main(["write", "memory", "--owner", "alice", "--json", json.dumps(
        {"content": "Deploys go out on Tuesdays after the freeze.", "content_type": "plan",
         "project_name": "ops"})]) == 0
    path = tmp_path / "memories.jsonl"
    path.write_text(json.dumps({"source": "memory", "content": "Deploys go out on Tuesdays after the freeze",
                                "content_type": "plan", "project_name": "ops"}) + "\n", encoding="utf-8")
    assert main(["import", str(path), "--owner", "alice"]) == 0
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM memories WHERE is_active").fetchone()[0] == 2
    capsys.readouterr()
    assert main(["embed"]) == 0
    assert "memories checked against older ones: 1 (1 SKIP); 0 still waiting" in capsys.readouterr().out
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM memories WHERE is_active").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM memories WHERE arbitration_status = 'pending'").fetchone()[0] == 0
