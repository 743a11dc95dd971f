"""The Dagster instance `memory-pipelines run` and `make dagster` share: runs launched by one are seen by
the other, and `run` reads back what its runs reported.

DAGSTER_HOME when set (it wins), else `$MEMORY_PIPELINES_HOME/dagster`. A `dagster.yaml` is written there
when missing: SQLite storage in that folder, or, with DATABASE_URL set, Dagster's run, event-log and
schedule storage in that PostgreSQL (dagster-postgres; its tables are named `runs`, `event_logs`, ...,
none of ours). The file names the database through `MEMORY_PIPELINES_DAGSTER_STORAGE_URL`, which
`instance_env` derives from DATABASE_URL unless set: dagster-postgres needs a SQLAlchemy URL with the
psycopg2 driver (`postgresql+psycopg2://`), which psycopg 3, the library's driver, does not read. A file
we wrote is rewritten when the storage it should name changed (DATABASE_URL set or unset, folder moved);
remove its first line to keep edits of your own.

`python -m memory_pipelines.operations.dagster_home` prints the folder (creating it);
`python -m memory_pipelines.operations.dagster_home CMD ARGS...` runs CMD in the shared instance's
environment (the Makefile's `dagster` target: `... dagster_home dagster dev -w workspace.yaml`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlencode

from ..infra.errors import ConfigError
from ..infra.settings import Settings, get_settings

STORAGE_URL_ENV = "MEMORY_PIPELINES_DAGSTER_STORAGE_URL"
MARKER = ("# Written by memory-pipelines (memory_pipelines/operations/dagster_home.py); delete this line to keep "
          "your edits.\n")
OLD_MARKERS = ("# Written by memory-pipelines (pipelines/dagster_home.py); delete this line to keep your edits.\n",)
"""First lines earlier releases wrote: such a file is still ours, so it follows the settings too."""


def dagster_home(settings: Settings | None = None) -> Path:
    """DAGSTER_HOME when set, else `<MEMORY_PIPELINES_HOME>/dagster` (absolute)."""
    explicit = os.environ.get("DAGSTER_HOME")
    if explicit:
        return Path(explicit).expanduser().resolve()
    return (settings or get_settings()).home / "dagster"


def storage_url(url: str) -> str:
    """DATABASE_URL as the URL Dagster's postgres storage accepts: SQLAlchemy's, with the psycopg2 driver
    dagster-postgres is written for (`postgresql+psycopg2://`; SQLAlchemy 2.1 would otherwise pick psycopg 3).

    DATABASE_URL may be any string psycopg takes: a `postgresql://` or `postgres://` URL, or `key=value`."""
    from psycopg.conninfo import conninfo_to_dict

    scheme = "postgresql+psycopg2://"
    if url.startswith("postgresql+"):
        return url
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return scheme + url.removeprefix(prefix)
    try:
        info = {k: str(v) for k, v in conninfo_to_dict(url).items()}
    except Exception as exc:
        raise ConfigError(f"DATABASE_URL is not a PostgreSQL connection string ({exc}). "
                          "Fix: set it to postgresql://user:password@host:port/dbname.") from exc
    user, password = info.pop("user", ""), info.pop("password", "")
    host, port, dbname = info.pop("host", ""), info.pop("port", ""), info.pop("dbname", "")
    if host.startswith("/"):  # a socket folder goes in the query string
        info["host"], host = host, ""
    auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "") + ("@" if user else "")
    netloc = auth + host + (f":{port}" if port and host else "")
    if port and not host:
        info["port"] = port
    query = "?" + urlencode(info) if info else ""
    return f"{scheme}{netloc}/{quote(dbname, safe='')}{query}"


def instance_yaml(home: Path, settings: Settings) -> str:
    """The dagster.yaml of the shared instance: SQLite in `home`, or PostgreSQL when DATABASE_URL (or the
    storage URL itself) is set."""
    if settings.database_url or os.environ.get(STORAGE_URL_ENV):
        storage = f"storage:\n  postgres:\n    postgres_url:\n      env: {STORAGE_URL_ENV}\n"
    else:
        storage = f"storage:\n  sqlite:\n    base_dir: {json.dumps(str(home))}\n"  # JSON is YAML
    # runs at once: a sensor's burst of backfill runs (each loading the model) no longer floods a laptop's cores
    runs = max(2, os.cpu_count() or 2)
    return (
        MARKER
        + "# The Dagster instance shared by `memory-pipelines run` and `make dagster`.\n"
        + storage
        + f"concurrency:\n  runs:\n    max_concurrent_runs: {runs}\n"
    )


def ensure_instance(settings: Settings | None = None) -> Path:
    """Create the instance folder and its dagster.yaml when missing (or ours and outdated); returns it."""
    settings = settings or get_settings()
    home = dagster_home(settings)
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    wanted = instance_yaml(home, settings)
    if not config.exists() or (config.read_text().startswith((MARKER, *OLD_MARKERS)) and config.read_text() != wanted):
        config.write_text(wanted)
    return home


def instance_env(settings: Settings | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (the process environment by default) with DAGSTER_HOME set to the shared instance, the
    memory home made absolute, and the URL of Dagster's postgres storage derived from DATABASE_URL."""
    settings = settings or get_settings()
    env = dict(os.environ if base is None else base)
    env["DAGSTER_HOME"] = str(ensure_instance(settings))
    env["MEMORY_PIPELINES_HOME"] = str(settings.home)
    if settings.database_url:
        env["DATABASE_URL"] = settings.database_url
        env.setdefault(STORAGE_URL_ENV, storage_url(settings.database_url))
        init_postgres_storage(env, settings.database_url)
    return env


def init_postgres_storage(env: dict[str, str], database_url: str) -> None:
    """Create Dagster's postgres storage tables now, one process at a time (pg_advisory_lock(LOCK_DAGSTER)).

    Processes started together on a database that has none yet (two runs of a backfill, two machines) would
    otherwise race in dagster-postgres's own `create_all` and one fail with `type "snapshots" already
    exists`. Once the tables exist, opening the instance only checks them."""
    from dagster import DagsterInstance

    from ..infra.db import connect
    from ..vocabulary import LOCK_DAGSTER

    with connect(database_url, vector=False, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_DAGSTER,))
        try:
            with instance_environ(env):
                DagsterInstance.get().dispose()
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_DAGSTER,))


@contextlib.contextmanager
def instance_environ(env: dict[str, str]) -> Iterator[None]:
    """This process's DAGSTER_HOME and storage URL set from `env` (as the launched runs see them), for
    `DagsterInstance.get()`; restored on exit."""
    saved = {k: os.environ.get(k) for k in ("DAGSTER_HOME", STORAGE_URL_ENV)}
    try:
        os.environ.update({k: env[k] for k in saved if k in env})
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = instance_env()
    if not argv:
        print(env["DAGSTER_HOME"])
        return 0
    # A shell's background job (`make dagster &`, nohup) starts with SIGINT ignored, which exec keeps, and dagster
    # dev answers SIGTERM with SIGINT's handler: it would ignore both and never stop the runs and database it holds.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvpe(argv[0], argv, env)  # replaces this process


if __name__ == "__main__":
    sys.exit(main())
