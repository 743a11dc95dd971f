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


EMBEDDED_CONFIG_FILE = "memory_pipelines.conf"


def embedded_config(total_memory: int | None = None) -> dict[str, str]:
    """Settings of the embedded server: shared_buffers an eighth of the machine's memory, from 128 MB up
    to 1 GB (PostgreSQL's 128 MB default holds little of a 100k-row vector index and its keyword postings;
    the rest is read through the OS cache page by page), and JIT off (compiling a plan costs more than it
    saves on queries of a few milliseconds)."""
    if total_memory is None:
        import psutil

        total_memory = psutil.virtual_memory().total
    mb = max(128, min(1024, total_memory // (8 << 20)))
    return {"shared_buffers": f"{mb}MB", "jit": "off"}


def write_embedded_config(pgdata: Path) -> bool:
    """Write our settings to `pgdata/memory_pipelines.conf`, included from postgresql.conf (so ALTER SYSTEM
    still overrides them). True when a file changed: a restart is needed for shared_buffers."""
    conf = pgdata / "postgresql.conf"
    if not conf.exists():
        return False
    changed = False
    include = f"include_if_exists = '{EMBEDDED_CONFIG_FILE}'"
    text = conf.read_text()
    if include not in text:
        conf.write_text(f"{text}\n# memory_pipelines: settings of the embedded server\n{include}\n")
        changed = True
    ours = pgdata / EMBEDDED_CONFIG_FILE
    body = "".join(f"{name} = '{value}'\n" for name, value in embedded_config().items())
    if not ours.exists() or ours.read_text() != body:
        ours.write_text(body)
        ours.chmod(0o644)
        changed = True
    return changed


def _shared_buffers_mb(server) -> int:
    with psycopg.connect(server.get_uri(), autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'")
        return int(row.fetchone()[0])


def start_embedded_server(pgdata: Path, attempts: int = 3):
    """Start (or join) a pgserver in `pgdata` with our settings, retrying transient start-up failures.

    As root, pgserver creates a system user for the server on first start; several processes doing
    so at once can collide on /etc/passwd's lock, which a retry resolves. pgserver runs initdb itself, so
    on the very first start the settings are written afterwards and the server restarted to apply them,
    unless another process already uses it (then the next start applies them).
    """
    server = _get_server(pgdata, attempts)
    if write_embedded_config(pgdata):
        wanted = int(embedded_config()["shared_buffers"].removesuffix("MB"))
        if _shared_buffers_mb(server) != wanted:
            server.cleanup()  # stops the server only if this process is its last user
            server = _get_server(pgdata, attempts)
    return server


def _get_server(pgdata: Path, attempts: int):
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
    conn.execute("SET jit = off")  # also on a server of one's own: JIT compiles for longer than these queries run
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
