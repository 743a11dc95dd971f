"""Connections to the database (DATABASE_URL or the embedded server, infra/embedded.py): one-off connections and
a shared psycopg pool per URL, with pgvector's types registered.

Pools check a connection before handing it out and retry connecting at least every second, so the first request
after an outage succeeds; while a supervisor (infra/embedded.supervise) knows the server is down, they fail at once.
"""

from __future__ import annotations

import json
import logging
import select
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg.adapt import Loader
from psycopg.pq import Format
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from .errors import ConfigError
from .redact import check_url, redact, url_password

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 1.5
"""Serving processes (`supervise`): the longest a request waits for a pooled connection before its 503."""
RETRY_AFTER_SECONDS = 2
"""What a 503 for an unavailable database tells clients to wait (the supervisor looks every second)."""
RECONNECT_DELAY_MAX = 1.0
"""A pool retries a lost connection at least this often (psycopg_pool doubles its delay up to minutes)."""

_lock = threading.Lock()  # _pools
_pools: dict[str, ConnectionPool] = {}


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
    check_url(url)
    try:
        conn = psycopg.connect(url, autocommit=autocommit, connect_timeout=10)
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        reason = redact(reason, url_password(url))
        raise ConfigError(
            f"cannot connect to the database at {describe_url(url)}: {reason}. "
            "Fix: check DATABASE_URL (host, port, user, password), or unset it to use the embedded server."
        ) from exc
    if vector:
        register_types(conn)
    return conn


class _VectorArrayLoader(Loader):
    """A binary `vector` straight into a float32 array (a uint16 dimension, a spare uint16, big-endian float32s):
    what pgvector's loader gives through a `Vector` and `to_numpy`, without the intermediate object."""

    format = Format.BINARY

    def load(self, data: Any) -> np.ndarray:
        return np.frombuffer(data, dtype=">f4", count=int.from_bytes(data[:2], "big"), offset=4).astype(np.float32)


_decode_json = json.JSONDecoder().decode


def _load_json(data: bytes) -> Any:
    """JSON from the server, always UTF-8: decoded as such, without `json.loads`' guess at the encoding."""
    return _decode_json(data.decode())


def register_types(conn: psycopg.Connection) -> None:
    """pgvector's types on `conn`, binary vectors read as float32 arrays (`_VectorArrayLoader`); json and jsonb
    read by `_load_json`."""
    register_vector(conn)
    info = conn.adapters.types.get("vector")
    if info is not None:
        conn.adapters.register_loader(info.oid, _VectorArrayLoader)
    set_json_loads(_load_json, conn)


def _configure(conn: psycopg.Connection) -> None:
    """pgvector types, and a plan per execution: psycopg prepares a statement run five times, and a
    generic plan cannot see how many rows an owner holds (a sequential scan for one that holds none)."""
    register_types(conn)
    conn.execute("SET plan_cache_mode = force_custom_plan")
    conn.execute("SET jit = off")  # also on a server of one's own: JIT compiles for longer than these queries run
    # The store's pages are in memory or on SSD, where a random read costs about a sequential one; at the default
    # 4.0 the planner scanned all of an owner's memories to find one week's (docs/retrieval-quality.md, latency).
    conn.execute("SET random_page_cost = 1.1")
    conn.commit()


def _check(conn: psycopg.Connection) -> None:
    """The check before a pooled connection is lent: psycopg_pool's round trip (an empty query, which raises on
    a connection the server has dropped, so the pool replaces it) only when the connection shows a sign of
    trouble: not idle, or data waiting on its socket. A server that stops or restarts, or ends the session,
    says so and closes the socket, which then reads as ready. A healthy idle connection has nothing to read,
    and lending it costs no round trip (a context build borrows several)."""
    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    if idle and not conn.closed and not select.select([conn.fileno()], [], [], 0)[0]:
        return
    ConnectionPool.check_connection(conn)


class _Backoff(AttemptWithBackoff):
    """psycopg_pool's reconnection backoff (1 s, doubling up to its reconnect_timeout), capped at
    RECONNECT_DELAY_MAX: after an outage of a minute the pool would otherwise wait another half minute."""

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_DELAY_MAX)


class Pool(ConnectionPool):
    """A ConnectionPool that fails at once while its server is known to be down (`unavailable`, set by a
    supervisor), and retries lost connections at least every RECONNECT_DELAY_MAX seconds."""

    unavailable: str | None = None

    def getconn(self, timeout: float | None = None) -> psycopg.Connection:
        if self.unavailable is not None:
            raise PoolTimeout(self.unavailable)
        return super().getconn(timeout)

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        super()._add_connection(attempt or _Backoff(timeout=self.reconnect_timeout), growing)


POOL_MAX_SIZE = 12
"""Connections a process's pool may open: one context build uses up to 11 at once (four vector scans, the
events' two channels, three keyword sources of a many-term query, the named-speaker re-run and the profile).
Idle connections are closed after psycopg_pool's `max_idle` (10 min)."""


def get_pool(url: str, *, min_size: int = 1, max_size: int = POOL_MAX_SIZE) -> ConnectionPool:
    """A shared pool per URL; pgvector registered on every connection (the schema must be migrated).

    Each connection is checked before it is handed out (`_check`): one broken by a restart of the server is
    replaced, not given to the caller."""
    with _lock:
        pool = _pools.get(url)
        if pool is None or pool.closed:
            check_url(url)
            pool = Pool(
                url,
                min_size=min_size,
                max_size=max_size,
                configure=_configure,
                check=_check,
                kwargs={"connect_timeout": 10},
                open=False,
                name="memory_pipelines",
            )
            try:
                pool.open(wait=True, timeout=15)
            except Exception as exc:
                raise ConfigError(
                    f"cannot open a connection pool to {describe_url(url)}: {redact(str(exc), url_password(url))}. "
                    "Fix: check DATABASE_URL."
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


def close_pools_to(hosts: set[str]) -> None:
    """Close this process's pools whose URL names one of `hosts` (for a local server: its socket folders)."""
    for url in list(_pools):
        try:
            host = psycopg.conninfo.conninfo_to_dict(url).get("host")
        except psycopg.ProgrammingError:
            continue
        if host in hosts:
            close_pool(url)


@contextmanager
def transaction(pool: ConnectionPool) -> Iterator[psycopg.Connection]:
    """A pooled connection inside one transaction (committed on success, rolled back on error)."""
    with pool.connection() as conn, conn.transaction():
        yield conn


@contextmanager
def reading(pool: ConnectionPool) -> Iterator[psycopg.Connection]:
    """A pooled connection in autocommit mode, for reads that are one statement each: without the BEGIN and
    COMMIT round trips a pooled connection otherwise pays. It goes back to the pool as it came (or closed,
    hence replaced, should the flag not be restorable)."""
    with pool.connection() as conn:
        conn.autocommit = True
        try:
            yield conn
        finally:
            try:
                conn.autocommit = False
            except psycopg.Error:
                conn.close()


REACHABLE_TIMEOUT = 2
"""`server_reachable`'s connect_timeout (libpq's least), in seconds."""

PROBE_WAIT = 2.0
"""How long `probe` waits for the server's answer before it reports it not answering."""
_probes: dict[int, threading.Thread] = {}  # a probe still waiting on its pool's server, by id(pool)
_probes_lock = threading.Lock()


def probe(pool: ConnectionPool, wait: float = PROBE_WAIT) -> str:
    """"ok", or why the database cannot serve: unreachable, or not answering within `wait` seconds. A server
    that is frozen (stopped, stuck in I/O) takes the connection and never answers; the round trip runs in a
    thread so a health check still answers, and while that thread waits the next checks say so at once."""
    outcome: list[str] = []

    def ask() -> None:
        try:
            with pool.connection(timeout=min(5.0, pool.timeout)) as conn:  # 1.5 s in servers
                conn.execute("SELECT 1")
            outcome.append("ok")
        except Exception as exc:  # a probe reports, never raises
            outcome.append(f"unreachable ({type(exc).__name__})")

    with _probes_lock:
        waiting = _probes.get(id(pool))
        if waiting is not None and waiting.is_alive():
            return f"not answering (a check has waited over {wait:g} s)"
        thread = _probes[id(pool)] = threading.Thread(target=ask, name="db-probe", daemon=True)
        thread.start()
    thread.join(wait)
    return outcome[0] if outcome else f"not answering within {wait:g} s"


def server_reachable(url: str, timeout: int = REACHABLE_TIMEOUT) -> bool:
    """Whether the server at `url` takes a connection: one direct attempt, outside any pool, closed at once."""
    try:
        psycopg.connect(url, connect_timeout=timeout).close()
    except psycopg.OperationalError:
        return False
    return True


class FailFast:
    """A pool as a long job's writers see it: `connection()` as the pool's, except that a wait for a connection
    that outlasts `probe_after` seconds asks the server directly (`server_reachable`) and, when it does not
    answer, raises PoolTimeout at once instead of waiting out the pool's timeout (30 s). The pool itself, its
    timeout and its other users are untouched."""

    def __init__(self, pool: ConnectionPool, probe_after: float = 1.0) -> None:
        self.pool, self.probe_after = pool, probe_after

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)

    def getconn(self, timeout: float | None = None) -> psycopg.Connection:
        deadline = time.monotonic() + (self.pool.timeout if timeout is None else timeout)
        while True:
            try:
                return self.pool.getconn(max(0.0, min(self.probe_after, deadline - time.monotonic())))
            except PoolTimeout:
                if time.monotonic() >= deadline:
                    raise
                if not server_reachable(self.pool.conninfo):
                    raise PoolTimeout(f"the server at {describe_url(self.pool.conninfo)} does not answer") from None

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection]:
        conn = self.getconn(timeout)
        try:
            with conn:  # commit, or roll back on error, as the pool's own `connection()`
                yield conn
        finally:
            self.pool.putconn(conn)


_versions: dict[tuple, tuple[int, ...]] = {}


def server_key(conn: psycopg.Connection) -> tuple[str, int, str]:
    """Which database `conn` reaches (host, port, name): the key of what a process remembers per database."""
    return conn.info.host, conn.info.port, conn.info.dbname


def pgvector_version(conn: psycopg.Connection) -> tuple[int, ...]:
    """The installed pgvector version as a tuple, e.g. (0, 6, 2); asked once per database and process."""
    key = server_key(conn)
    if key not in _versions:
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        if row is None:
            return ()
        _versions[key] = tuple(int(p) for p in row[0].split(".") if p.isdigit())
    return _versions[key]
