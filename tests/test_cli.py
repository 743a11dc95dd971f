"""The CLI as a user runs it: help text, and one clear line (no traceback) for expected failures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def run_cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`memory-pipelines ARGS` in a subprocess with `env` over this process's environment."""
    return subprocess.run([sys.executable, "-m", "memory_pipelines.surfaces.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=timeout)


def test_help_explains_each_command():
    out = run_cli(["--help"]).stdout
    for name in ("run", "migrate", "status", "embed", "search"):
        assert name in out
    assert "embedded PostgreSQL" in out


def test_unreachable_database_is_one_clear_line():
    proc = run_cli(
        ["status"],
        {"DATABASE_URL": "postgresql://nobody:pw@127.0.0.1:1/nothing", "MEMORY_PIPELINES_EMBEDDER": "fake"},
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert "cannot connect" in lines[0] and "DATABASE_URL" in lines[0] and "127.0.0.1" in lines[0]


def test_unknown_provider_is_one_clear_line():
    proc = run_cli(["status"], {"MEMORY_PIPELINES_EMBEDDER": "bogus"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "MEMORY_PIPELINES_EMBEDDER" in proc.stderr and "local, openai or fake" in proc.stderr


def test_bad_ingest_mode_for_serve_is_one_clear_line():
    proc = run_cli(["serve", "--port", "1"], {"MEMORY_PIPELINES_INGEST": "later"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "MEMORY_PIPELINES_INGEST" in proc.stderr and "'later'" in proc.stderr


def test_status_against_a_database(db_url):
    proc = run_cli(["status", "--json"], {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"})
    assert proc.returncode == 0, proc.stderr
    assert '"pgvector"' in proc.stdout and '"tasks"' in proc.stdout


@pytest.mark.slow
def test_rejected_openai_key_is_one_clear_line(db_url, fake_openai):
    import psycopg

    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO tasks (owner_id, title) VALUES ('alice', 'needs an embedding')")
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "openai", "OPENAI_API_KEY": "bad-key",
           "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_EMBED_DIMENSIONS": "384"}
    proc = run_cli(["embed"], env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "OPENAI_API_KEY" in proc.stderr
    assert len([p for p in fake_openai.requests if p[0].endswith("/embeddings")]) == 1  # no retries on 401


@pytest.mark.slow
def test_provider_outage_during_embed_leaves_rows_pending_and_exits_1(db_url, fake_openai):
    import psycopg

    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO tasks (owner_id, title) VALUES ('alice', 'needs an embedding')")
    fake_openai.faults.extend([{"status": 500}] * 10)
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "openai", "OPENAI_API_KEY": "test",
           "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_EMBED_DIMENSIONS": "384", "OPENAI_MAX_RETRIES": "0"}
    proc = run_cli(["embed"], env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "could not be embedded and stay pending" in proc.stderr
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM tasks WHERE embedding IS NULL").fetchone()[0] == 1


@pytest.mark.slow
def test_a_new_embedded_database_is_announced_once_on_stderr():
    folder = Path(tempfile.mkdtemp(prefix="mp-test-cli-home-"))
    folder.chmod(0o755)  # as root the server runs as an unprivileged user that must reach the folder
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "MEMORY_PIPELINES_HOME", "DAGSTER_HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["MEMORY_PIPELINES_EMBEDDER"] = "fake"
    notice = (f"memory-pipelines: no database at {folder.resolve() / '.memory_pipelines'}; creating a new one "
              "(set MEMORY_PIPELINES_HOME to use another)")
    try:
        runs = [subprocess.run([sys.executable, "-m", "memory_pipelines.surfaces.cli", "status", "--json"],
                               capture_output=True, text=True, env=env, cwd=folder, timeout=300) for _ in range(2)]
        for run in runs:
            assert run.returncode == 0, run.stderr
        first, second = runs
        assert notice in first.stderr.splitlines(), first.stderr
        assert "no database" not in second.stderr, second.stderr  # the second run joins the folder the first made
        assert json.loads(first.stdout).keys() == json.loads(second.stdout).keys()  # stdout is the command's alone
        assert "no database" not in first.stdout
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_embed_says_what_it_did(db_url):
    """`embed` ran silently (two bars of 0 rows on stderr): one line now counts what it embedded and indexed."""
    import psycopg

    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO tasks (owner_id, title) VALUES ('alice', 'needs an embedding')")
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    first = run_cli(["embed"], env)
    assert first.returncode == 0, first.stderr
    assert "embedded 1 rows (0 failed, 0 pending); keywords of 1 rows indexed, 0 removed" in first.stdout
    full = run_cli(["embed", "--full-keywords"], env)
    assert "embedded 0 rows" in full.stdout and "keywords of 1 rows re-indexed (all)" in full.stdout, full.stdout
    status = run_cli(["status"], env).stdout.splitlines()
    # events are counted twice, live embedded ones and every row (the build log's too): the labels tell which
    assert [line.split()[0] for line in status if line.startswith("events")] == ["events", "events"]
    assert any(line.startswith("events (all rows)") for line in status), status


@pytest.mark.parametrize(("name", "raw"), [("MEMORY_PIPELINES_FAKE_DIM", "abc"), ("OPENAI_TIMEOUT", "soon"),
                                           ("OPENAI_MAX_RETRIES", "-1"), ("OPENAI_EMBED_DIMENSIONS", "0")])
def test_a_numeric_setting_that_is_no_number_is_one_clear_line(name, raw, monkeypatch, tmp_path, capsys):
    from memory_pipelines.surfaces.cli import main

    monkeypatch.setenv("MEMORY_PIPELINES_HOME", str(tmp_path))
    monkeypatch.setenv("MEMORY_PIPELINES_EMBEDDER", "fake")
    monkeypatch.setenv(name, raw)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {name}={raw!r} is not ") and "Fix: set it to e.g." in err, err
    assert not (tmp_path / "pgdata").exists()  # refused before any database starts


def test_runs_embedding_bar_closes_once_every_row_holds_its_vector(runtime, fake_embedder, capfd):
    """Left open, the bar of `run` redrew 100 % for the rest of the job (85 s in the docs' audit), which looked
    hung; it now closes once every row is embedded and says the run goes on."""
    import time

    from memory_pipelines.index.vectors import embed_all
    from memory_pipelines.surfaces.cli.run import EmbeddingProgress
    from tests.factories import add_task

    with runtime.pool.connection() as conn:
        add_task(conn, "alice", "Fix the gateway 502s")
    progress = EmbeddingProgress(runtime, interval=0.05)
    with progress:
        time.sleep(0.5)
        assert progress._thread.is_alive(), "the bar closed with a row still pending"
        embed_all(runtime.pool, fake_embedder)
        progress._thread.join(10)
        assert not progress._thread.is_alive(), "the bar stayed open with every row embedded"
    assert "every row embedded; the run goes on" in capfd.readouterr().err
