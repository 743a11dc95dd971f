"""The ways out at the command line, as an operator runs them (subprocesses against a real database): forget,
drop-project, erase (dry run, refusal without --yes), removals, export, prune, and the log in `status`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memory_pipelines.infra.auth import create_key
from memory_pipelines.store.projects import ensure_project
from memory_pipelines.surfaces.cli import main
from tests.factories import add_task
from tests.removal_world import aged_log, owner_rows, settle, table_counts, write_owner


def _cli(db_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    return subprocess.run([sys.executable, "-m", "memory_pipelines.surfaces.cli", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def _ok(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _refused(proc: subprocess.CompletedProcess, field: str) -> str:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"error: {field}:" in proc.stderr, proc.stderr
    return proc.stderr


def test_forget_drop_erase_and_the_trail_at_the_command_line(db_url, pool, fake_embedder, fake_openai, tmp_path):
    alice = write_owner(pool, fake_embedder, fake_openai, "alice", common=3)
    write_owner(pool, fake_embedder, fake_openai, "bob", common=3)
    settle(pool, fake_embedder)
    create_key(pool, "bob")
    task = alice.ids["task"]["t1"]
    out = _ok(_cli(db_url, "forget", "task", task, "--owner", "alice", "--json"))
    assert out["id"] == task and out["removed"]["tasks"] == 1
    again = _cli(db_url, "forget", "task", task, "--owner", "alice")
    assert again.returncode == 2 and f"no task '{task}'" in again.stderr and "Traceback" not in again.stderr
    foreign = _cli(db_url, "forget", "memory", alice.ids["memory"]["m1"], "--owner", "bob")
    assert foreign.returncode == 2 and "no memory" in foreign.stderr
    assert "fragment" in _cli(db_url, "forget", "fragment", "x", "--owner", "alice").stderr  # argparse choices
    dropped = _ok(_cli(db_url, "drop-project", "web-app", "--owner", "alice", "--json"))
    assert dropped["removed"]["projects"] == 1

    before = table_counts(pool)
    _refused(_cli(db_url, "erase", "--owner", "bob"), "--yes")
    # erase takes no default owner: the message must not offer one
    assert "default owner" not in _refused(_cli(db_url, "erase", "--owner", "", "--yes"), "--owner")
    dry = _ok(_cli(db_url, "erase", "--owner", "bob", "--dry-run", "--json"))
    assert dry["dry_run"] and dry["counts"]["api_keys"] == 1
    assert table_counts(pool) == before
    erased = _ok(_cli(db_url, "erase", "--owner", "bob", "--yes", "--json"))
    assert erased["counts"] == dry["counts"]
    assert {t: n for t, n in owner_rows(pool, "bob").items() if n} == {"removals": 1}
    trail = _cli(db_url, "removals", "--owner", "alice")
    assert trail.returncode == 0 and trail.stdout.count("by cli") == 2 and "drop_project" in trail.stdout
    assert _ok(_cli(db_url, "removals", "--owner", "bob", "--json"))["removals"][0]["action"] == "erase"


def test_export_prune_and_status_at_the_command_line(db_url, pool, fake_embedder, fake_openai, tmp_path):
    aged_log(pool, fake_embedder, fake_openai, "alice", log_days=40, alert_days=100)
    with pool.connection() as conn:
        add_task(conn, "alice", "kept task")
    manifest = _ok(_cli(db_url, "export", str(tmp_path / "out"), "--owner", "alice", "--with-log", "--json"))
    assert manifest["files"]["tasks.jsonl"] == 3 + 3 + 1 and (tmp_path / "out" / "log" / "retrievals.jsonl").exists()
    _refused(_cli(db_url, "export", str(tmp_path / "out"), "--owner", "alice"), "dir")

    status = _ok(_cli(db_url, "status", "--json"))
    assert status["log"]["retrieval_candidates"]["rows"] > 0 and status["log"]["rolled_up"]["days"] == 0
    for bad, field in ((["--older-than=-5d"], "--older-than"), (["--events", "soon"], "--events"),
                       (["--candidates", "3 weeks"], "--candidates")):
        _refused(_cli(db_url, "prune", *bad), field)
    pruned = _ok(_cli(db_url, "prune", "--older-than", "30d", "--json"))
    assert pruned["removed"]["retrievals"] == 2 and pruned["removed"]["events"] == 1
    text = _cli(db_url, "status")
    assert text.returncode == 0 and "log retrieval_candidates" in text.stdout and "rolled up" in text.stdout
    assert _ok(_cli(db_url, "status", "--json"))["log"]["rolled_up"]["days"] >= 1


def test_prune_refuses_an_age_under_a_day_and_a_dry_run_counts_what_would_go(db_url, pool, fake_embedder,
                                                                             fake_openai):
    aged_log(pool, fake_embedder, fake_openai, "alice", log_days=40, alert_days=100)
    before = table_counts(pool)
    for args, field in ((["--older-than", "0"], "--older-than"), (["--events", "12h"], "--events"),
                        (["--candidates", "3600s"], "--candidates")):
        assert "at least 1 day" in _refused(_cli(db_url, "prune", *args), field)
    env_zero = subprocess.run(
        [sys.executable, "-m", "memory_pipelines.surfaces.cli", "prune"], capture_output=True, text=True,
        env={**os.environ, "DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake",
             "MEMORY_PIPELINES_RETAIN_EVENTS": "0"}, timeout=300)
    _refused(env_zero, "MEMORY_PIPELINES_RETAIN_EVENTS")
    assert table_counts(pool) == before

    dry = _ok(_cli(db_url, "prune", "--older-than", "30d", "--dry-run", "--json"))
    assert dry["dry_run"] and table_counts(pool) == before
    text = _cli(db_url, "prune", "--older-than", "30d", "--dry-run")
    assert text.returncode == 0 and text.stdout.startswith("would prune ") and "nothing removed" in text.stdout
    pruned = _ok(_cli(db_url, "prune", "--older-than", "30d", "--json"))
    assert not pruned["dry_run"] and pruned["removed"] == dry["removed"]
    assert dry["removed"]["retrievals"] == 2 and dry["removed"]["events"] == 1
    assert dry["removed"]["retrieval_candidates"] > 0


def test_export_of_an_owner_without_rows_is_refused_unless_allowed(db_url, pool, tmp_path):
    with pool.connection() as conn:
        add_task(conn, "alice", "a task")
    assert "has no item and no memory" in _refused(
        _cli(db_url, "export", str(tmp_path / "typo"), "--owner", "alcie"), "--owner")
    assert not (tmp_path / "typo").exists()  # nothing written: the right owner can go to that folder next
    empty = _ok(_cli(db_url, "export", str(tmp_path / "typo"), "--owner", "alcie", "--allow-empty", "--json"))
    assert empty["files"]["tasks.jsonl"] == 0
    assert _ok(_cli(db_url, "export", str(tmp_path / "alice"), "--owner", "alice", "--json"))["files"][
        "tasks.jsonl"] == 1


def test_an_export_into_a_folder_that_cannot_be_made_is_refused_naming_dir(db_url, pool, tmp_path):
    """A path under a file (or unwritable) ended in a FileNotFoundError / NotADirectoryError traceback, exit 1."""
    with pool.connection() as conn:
        add_task(conn, "alice", "a task")
    (tmp_path / "afile").write_text("x")
    message = _refused(_cli(db_url, "export", str(tmp_path / "afile" / "out"), "--owner", "alice"), "dir")
    assert "cannot make the folder" in message


@pytest.fixture
def cli_db(db_url, monkeypatch) -> str:
    """The CLI run in process (`main`) against the test database."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("MEMORY_PIPELINES_EMBEDDER", "fake")
    return db_url


def test_removals_of_an_owner_without_any_says_so_and_its_json_stays_an_empty_list(cli_db, pool, capsys):
    """It printed nothing at all: no line told an empty trail from a command that did nothing."""
    with pool.connection() as conn:
        task = add_task(conn, "bob", "bob's task")
    assert main(["removals", "--owner", "alice"]) == 0
    assert capsys.readouterr().out == "no removals for alice\n"
    assert main(["removals", "--owner", "alice", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"removals": [], "next_cursor": None}
    assert main(["forget", "task", task, "--owner", "bob"]) == 0
    capsys.readouterr()
    assert main(["removals", "--owner", "bob"]) == 0
    trail = capsys.readouterr().out
    assert "no removals" not in trail and trail.count("by cli") == 1


def test_removals_page_with_the_cursor_the_previous_page_printed(cli_db, pool, capsys):
    """`removals --json` printed a `next_cursor` that no option took: past 200 removals the trail ended."""
    with pool.connection() as conn:
        tasks = [add_task(conn, "bob", f"task {i}") for i in range(3)]
    for task in tasks:
        assert main(["forget", "task", task, "--owner", "bob"]) == 0
    capsys.readouterr()
    assert main(["removals", "--owner", "bob", "--limit", "2"]) == 0
    first = capsys.readouterr().out.splitlines()
    assert len(first) == 3 and first[-1].startswith("older removals: --cursor ")
    cursor = first[-1].removeprefix("older removals: --cursor ")
    assert main(["removals", "--owner", "bob", "--limit", "2", "--cursor", cursor, "--json"]) == 0
    rest = json.loads(capsys.readouterr().out)
    assert len(rest["removals"]) == 1 and rest["next_cursor"] is None
    seen = {line.split()[3] for line in first[:2]} | {rest["removals"][0]["item_id"]}
    assert seen == set(tasks)


def test_drop_project_given_a_project_name_names_that_projects_key_and_removes_nothing(cli_db, pool, capsys):
    """The name answered only "no project 'X'", though the owner's project of that name was one key away."""
    with pool.connection() as conn:
        for owner in ("alice", "bob"):
            ensure_project(conn, owner, "agent-mem", "Agent Memory")
        ensure_project(conn, "bob", "bob-web", "Web App")
    before = table_counts(pool)
    assert main(["drop-project", "Agent Memory", "--owner", "alice"]) == 2
    assert capsys.readouterr().err == ("error: no project 'Agent Memory' (key); the project named 'Agent Memory' "
                                       "has key 'agent-mem'\n")
    assert main(["drop-project", "Web App", "--owner", "alice"]) == 2  # bob's name: nothing of him shows
    assert capsys.readouterr().err == "error: no project 'Web App'\n"
    assert table_counts(pool) == before
