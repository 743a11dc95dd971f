"""Database access: the embedded PostgreSQL (pgserver) or DATABASE_URL, and a psycopg pool.

The embedded server lives in `<MEMORY_PIPELINES_HOME>/pgdata`. pgserver keeps a list of the processes
using it, so the CLI, the Dagster UI and the API can share one server; it stops when the last one exits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool

from .errors import ConfigError
from .settings import Settings

log = logging.getLogger(__name__)

_lock = threading.Lock()
_servers: dict[str, object] = {}
_pools: dict[str, ConnectionPool] = {}


def embedded_url(settings: Settings) -> str:
    """Start (or join) the embedded server under settings.home and return its URL."""
    pgdata = settings.home / "pgdata"
    key = str(pgdata)
    with _lock:
        server = _servers.get(key)
        if server is None:
            settings.home.mkdir(parents=True, exist_ok=True)
            server = start_embedded_server(pgdata)
            _servers[key] = server
    return server.get_uri()  # type: ignore[attr-defined]


def start_embedded_server(pgdata: Path, attempts: int = 3):
    """Start (or join) a pgserver in `pgdata`, retrying transient start-up failures.

    As root, pgserver creates a system user for the server on first start; several processes doing
    so at once can collide on /etc/passwd's lock, which a retry resolves.
    """
    import pgserver

    for attempt in range(1, attempts + 1):
        try:
            return pgserver.get_server(pgdata, cleanup_mode="stop")
        except Exception as exc:
            if attempt == attempts:
                raise ConfigError(
                    f"the embedded PostgreSQL could not start in {pgdata}: {exc}. "
                    "Fix: check the folder is writable, or set DATABASE_URL to a PostgreSQL with pgvector."
                ) from exc
            log.warning("embedded PostgreSQL did not start (attempt %s): %s; retrying", attempt, exc)
            time.sleep(1.0 * attempt)
    raise AssertionError("unreachable")


def database_url(settings: Settings) -> str:
    """DATABASE_URL when set, else the embedded server's URL."""
    return settings.database_url or embedded_url(settings)


def describe_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparseable DATABASE_URL>"
    host = info.get("host") or "localhost"
    return f"{info.get('user', '')}@{host}:{info.get('port', 5432)}/{info.get('dbname', '')}"


def connect(url: str, *, vector: bool = True, autocommit: bool = False) -> psycopg.Connection:
    """One connection, with pgvector types registered when the extension exists."""
    try:
        conn = psycopg.connect(url, autocommit=autocommit, connect_timeout=10)
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"cannot connect to the database at {describe_url(url)}: {reason}. "
            "Fix: check DATABASE_URL (host, port, user, password), or unset it to use the embedded server."
        ) from exc
    if vector:
        register_vector(conn)
    return conn


def _configure(conn: psycopg.Connection) -> None:
    """pgvector types, and a plan per execution: psycopg prepares a statement run five times, and a
    generic plan cannot see how many rows an owner holds (a sequential scan for one that holds none)."""
    register_vector(conn)
    conn.execute("SET plan_cache_mode = force_custom_plan")
    conn.commit()


def get_pool(url: str, *, min_size: int = 1, max_size: int = 8) -> ConnectionPool:
    """A shared pool per URL; pgvector registered on every connection (the schema must be migrated)."""
    with _lock:
        pool = _pools.get(url)
        if pool is None or pool.closed:
            pool = ConnectionPool(
                url,
                min_size=min_size,
                max_size=max_size,
                configure=_configure,
                kwargs={"connect_timeout": 10},
                open=False,
                name="memory_pipelines",
            )
            try:
                pool.open(wait=True, timeout=15)
            except Exception as exc:
                raise ConfigError(
                    f"cannot open a connection pool to {describe_url(url)}: {exc}. Fix: check DATABASE_URL."
                ) from exc
            _pools[url] = pool
    return pool


def close_pool(url: str) -> None:
    """Close this process's pool for one URL, if open."""
    with _lock:
        pool = _pools.pop(url, None)
    if pool is not None:
        pool.close()


def close_pools() -> None:
    """Close every pool this process opened."""
    with _lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()


@contextmanager
def transaction(pool: ConnectionPool) -> Iterator[psycopg.Connection]:
    """A pooled connection inside one transaction (committed on success, rolled back on error)."""
    with pool.connection() as conn, conn.transaction():
        yield conn


_versions: dict[tuple, tuple[int, ...]] = {}


def pgvector_version(conn: psycopg.Connection) -> tuple[int, ...]:
    """The installed pgvector version as a tuple, e.g. (0, 6, 2); asked once per database and process."""
    key = (conn.info.host, conn.info.port, conn.info.dbname)
    if key not in _versions:
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        if row is None:
            return ()
        _versions[key] = tuple(int(p) for p in row[0].split(".") if p.isdigit())
    return _versions[key]
