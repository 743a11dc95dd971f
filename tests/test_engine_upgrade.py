"""A data folder made by the previous engine (pgserver 0.1.4: PostgreSQL 16.2, pgvector 0.6.2) meets the
current one (PostgreSQL 18, pgvector 0.8): one clear message naming the command, then `upgrade-db` moves it
by dump and restore and every row, embedding and index is there afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "memory_pipelines.surfaces.cli"]

OLD_ENGINE_WRITES = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import pgserver
    from memory_pipelines.face import Memory
    from memory_pipelines.infra.settings import Settings

    server = pgserver.get_server(Path(sys.argv[1]), cleanup_mode="stop")
    url = server.get_uri()
    mem = Memory.open(Settings(database_url=url, embedder="fake"), llm=None)
    mem.ingest("alice", content="The staging database password rotates every Monday at 09:00.",
               content_type="insight", project_name="ops")
    with mem.pool.connection() as conn:
        print(conn.execute("SHOW server_version").fetchone()[0],
              conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0])
    """
)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    return {**env, "MEMORY_PIPELINES_HOME": str(home), "MEMORY_PIPELINES_EMBEDDER": "fake"}


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], env=_env(home), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_an_old_engine_folder_gets_one_message_then_upgrade_db_moves_it():
    pytest.importorskip("pgserver", reason="the previous engine is a dev dependency")
    home = Path(tempfile.mkdtemp(prefix="mp-upgrade-"))
    home.chmod(0o755)  # as root the server runs as an unprivileged user that must reach the folder
    old = subprocess.run([sys.executable, "-c", OLD_ENGINE_WRITES, str(home / "pgdata")], env=_env(home),
                         capture_output=True, text=True, timeout=300)
    assert old.returncode == 0, old.stderr
    assert old.stdout.split()[:2] == ["16.2", "0.6.2"], old.stdout

    refused = _cli(home, "status")
    assert refused.returncode != 0
    assert "PostgreSQL 16" in refused.stderr and "memory-pipelines upgrade-db" in refused.stderr
    assert "Traceback" not in refused.stderr

    moved = _cli(home, "upgrade-db")
    assert moved.returncode == 0, moved.stderr
    assert (home / "pgdata.pg16" / "PG_VERSION").read_text().strip() == "16"

    status = _cli(home, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert '"postgres": "18.' in status.stdout and '"pgvector": "0.8.' in status.stdout

    found = _cli(home, "search", "staging password rotation", "--owner", "alice")
    assert found.returncode == 0, found.stderr
    assert "rotates every Monday" in found.stdout
    assert "rotates every Monday" not in _cli(home, "search", "staging password", "--owner", "bob").stdout

    again = _cli(home, "upgrade-db")
    assert again.returncode == 0 and "nothing to upgrade" in again.stderr
