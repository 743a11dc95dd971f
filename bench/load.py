"""Sustained load over loopback HTTP against a real `memory-pipelines serve`, on the demo data.

The bench gives the server its own MEMORY_PIPELINES_HOME in a temp folder (embedded PostgreSQL), loads and
embeds the demo corpus with `memory-pipelines run`, creates an API key with `memory-pipelines keys create`,
starts `memory-pipelines serve` and drives it with a mix of context builds (POST /api/brain/memory/context),
searches (POST /api/brain/memory/search and GET /memories/search, half each) and ingests (POST /ingest/memory),
70/20/10 by default. Queries are bilingual, drawn from one owner's demo items (titles, goals, memories), each
made distinct by a few words of another item; a share (`--repeat`, 0.3) repeats one of the last 200 queries,
as agents do.

1. Baseline, in the same run: one closed-loop client (throughput, p50/p99), and one client doing only
   context builds (builds/s and latency).
2. Saturation: closed loop with 2, 4, 8, ... clients until throughput stops rising (< 5 % over the best);
   also builds only at the saturating client count. Reports requests/s and builds/s. `serve` answers ingests
   before embedding them (`--ingest background`), so after each step the bench waits until the memories it
   queued are embedded; a step's sustained rate counts that time too, and saturation is the best sustained rate.
3. Open loop at 50 % and 80 % of the mix's saturation: Poisson arrivals (or `--arrivals fixed`) over
   `--connections` (50) connections, latency from each request's scheduled arrival (no coordinated
   omission), `--duration` seconds each (300). Errors (any non-2xx or exception), lost writes (every
   acknowledged ingest id read back with GET /memories?ids=), the server's RSS growth after warm-up.
4. CPU per context build by phase, in process with the library: query embedding, retrieval (SQL, with the
   PostgreSQL backends' CPU), scoring + MMR + budget, the log write, JSON encoding; and the HTTP layer as the
   server's CPU per HTTP build minus the in-process CPU.

The server is stopped with SIGTERM; the bench checks that no PostgreSQL of its home is left. The load
generator runs on the same machine (its CPU per request is reported). Prints one JSON object and writes it to
bench/results/load.json (`--out`), with a plot of latency against offered load beside it.

    python bench/load.py [--duration 300] [--step-duration 30] [--mix 70/20/10] [--home DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from _common import cpu_seconds, emit, log, out_path, pyplot, save_plot, serve_until_stopped

from memory_pipelines.demo.corpus import read_demo
from memory_pipelines.infra.embedded import exit_on_termination
from memory_pipelines.vocabulary import CONTENT_TYPES, CONTEXT_MODES

OWNER = "team-alpha"
CLI = [str(Path(sys.executable).with_name("memory-pipelines"))]
CONTEXT, SEARCH, FIND, INGEST, WHOAMI = "context", "search", "find", "ingest", "whoami"


# -- the server --------------------------------------------------------------------------------------------------
def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["MEMORY_PIPELINES_HOME"] = str(home)
    env.pop("MEMORY_PIPELINES_EMBEDDER", None)  # the local model, as in production without a key
    return env


def prepare(home: Path) -> str:
    """Load and embed the demo corpus (unless the home has it) and return a new API key of OWNER."""
    if not (home / "pgdata").exists():
        log(f"loading the demo corpus into {home} (memory-pipelines run; a few minutes)")
        t = time.perf_counter()
        with open(home.parent / "run.log", "w") as out:
            subprocess.run([*CLI, "run"], env=_env(home), stdout=out, stderr=subprocess.STDOUT, check=True)
        log(f"  done in {time.perf_counter() - t:.0f} s")
    done = subprocess.run([*CLI, "keys", "create", "--owner", OWNER, "--name", "load-bench"], env=_env(home),
                          capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def postgres_of(home: Path) -> list[psutil.Process]:
    """The embedded PostgreSQL of this home (postmaster and backends)."""
    needle = str(home / "pgdata")
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "-D" in cmd and needle in cmd:
            try:
                return [p, *p.children(recursive=True)]
            except psutil.Error:
                return [p]
    return []


@contextmanager
def serving(home: Path, port: int, ingest: str = "background"):
    """`memory-pipelines serve` on loopback, stopped with SIGTERM; yields (base URL, Popen)."""
    with open(home.parent / "serve.log", "a") as logfile, serve_until_stopped(
            [*CLI, "serve", "--host", "127.0.0.1", "--port", str(port), "--ingest", ingest], _env(home), port,
            logfile) as served:
        yield served


# -- the workload ------------------------------------------------------------------------------------------------
@dataclass
class Request:
    kind: str
    method: str
    path: str
    body: dict | None = None
    params: dict | None = None


def _pieces(text: str) -> list[str]:
    """Words of English text, 2-character runs of Chinese."""
    out = []
    for token in re.findall(r"[A-Za-z][\w.-]+|[\u4e00-\u9fff]+", text):
        if re.match(r"[\u4e00-\u9fff]", token):
            out += [token[i : i + 2] for i in range(0, len(token) - 1, 2)]
        else:
            out.append(token)
    return out


class Workload:
    """Requests of the mix, with bilingual queries from OWNER's demo items."""

    def __init__(self, mix: tuple[int, int, int], repeat: float, seed: int = 11, run_tag: str = "") -> None:
        corpus = read_demo()
        mine = [i for section in ("tasks", "learnings", "goals", "memories") for i in corpus[section]
                if i["owner"] == OWNER]
        self.heads = [(i.get("title") or i.get("content", ""))[:80] for i in mine]
        self.words = [w for i in mine for w in _pieces(i.get("description") or i.get("content") or "")]
        self.bodies = [i.get("content") or i.get("description") or "" for i in mine]
        self.bodies = [b for b in self.bodies if len(b) > 40]
        self.rng = random.Random(seed)
        self.recent: deque[str] = deque(maxlen=200)
        self.repeat = repeat
        self.kinds = [CONTEXT, SEARCH, INGEST]
        self.weights = list(mix)
        self.tag = run_tag or f"{int(time.time())}"
        self.ingests = 0

    def query(self) -> str:
        if self.recent and self.rng.random() < self.repeat:
            return self.rng.choice(self.recent)
        q = f"{self.rng.choice(self.heads)} {' '.join(self.rng.sample(self.words, self.rng.randint(1, 3)))}"
        self.recent.append(q)
        return q

    def next(self, kinds: list[str] | None = None) -> Request:
        kind = self.rng.choices(kinds or self.kinds, weights=None if kinds else self.weights)[0]
        if kind == WHOAMI:  # the HTTP layer and the key check alone
            return Request(WHOAMI, "GET", "/whoami")
        if kind == CONTEXT:
            return Request(CONTEXT, "POST", "/api/brain/memory/context",
                           {"query": self.query(), "mode": self.rng.choice(CONTEXT_MODES)})
        if kind == SEARCH:
            if self.rng.random() < 0.5:
                return Request(SEARCH, "POST", "/api/brain/memory/search", {"query": self.query(), "topK": 10})
            return Request(FIND, "GET", "/memories/search", params={"query": self.query(), "limit": 10})
        self.ingests += 1
        a, b = self.rng.sample(self.bodies, 2)
        content = f"{a} {b[: self.rng.randint(40, 200)]} (load run {self.tag}, note {self.ingests})"
        return Request(INGEST, "POST", "/ingest/memory",
                       {"project_name": f"load-bench-{self.rng.randint(1, 5)}",
                        "content_type": self.rng.choice(CONTENT_TYPES), "content": content})


# -- running it --------------------------------------------------------------------------------------------------
@dataclass
class Recorder:
    """Latencies (ms) by kind, errors, acknowledged ingest ids and the server's own timings of builds."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)
    written: list[str] = field(default_factory=list)
    build_timings: list[dict] = field(default_factory=list)
    done_at: list[float] = field(default_factory=list)
    queued: dict[str, float] = field(default_factory=dict)  # DEFERRED ingests: id -> wall time of the answer

    def all_ms(self) -> list[float]:
        return [v for vs in self.latencies.values() for v in vs]


async def execute(client: httpx.AsyncClient, req: Request, rec: Recorder, start: float) -> None:
    """One request; latency from `start` (the scheduled arrival in open loop)."""
    loop = asyncio.get_running_loop()
    try:
        r = await client.request(req.method, req.path, json=req.body, params=req.params)
        if not 200 <= r.status_code < 300:
            rec.errors[f"{req.kind} {r.status_code}"] += 1
            return
        data = r.json()
    except Exception as exc:  # noqa: BLE001 - every failure counts as an error
        rec.errors[f"{req.kind} {type(exc).__name__}"] += 1
        return
    now = loop.time()
    rec.latencies.setdefault(req.kind, []).append((now - start) * 1000)
    rec.done_at.append(now)
    if req.kind == INGEST:
        rec.written.append(data["id"])
        if data.get("deferred"):
            rec.queued[data["id"]] = time.time()
    elif req.kind == CONTEXT:
        rec.build_timings.append(data.get("timings_ms") or {})


def _client(base: str, key: str, connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, limits=limits,
                             timeout=httpx.Timeout(120.0))


async def _closed(base: str, key: str, work: Workload, clients: int, seconds: float,
                  kinds: list[str] | None) -> Recorder:
    rec = Recorder()
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds

    async def client_loop(client: httpx.AsyncClient) -> None:
        while loop.time() < end:
            await execute(client, work.next(kinds), rec, loop.time())

    async with _client(base, key, clients) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    return rec


async def _open(base: str, key: str, work: Workload, rate: float, seconds: float, connections: int,
                poisson: bool, seed: int) -> Recorder:
    rec = Recorder()
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    queue: asyncio.Queue = asyncio.Queue()

    async def worker(client: httpx.AsyncClient) -> None:
        while (item := await queue.get()) is not None:
            await execute(client, item[1], rec, item[0])

    async with _client(base, key, connections) as client:
        workers = [asyncio.create_task(worker(client)) for _ in range(connections)]
        t0 = loop.time() + 0.05
        t = t0
        while t < t0 + seconds:
            if (delay := t - loop.time()) > 0:
                await asyncio.sleep(delay)
            queue.put_nowait((t, work.next()))
            t += rng.expovariate(rate) if poisson else 1 / rate
        for _ in workers:
            queue.put_nowait(None)
        _, pending = await asyncio.wait(workers, timeout=120)
        for task in pending:
            task.cancel()
        if pending:
            rec.errors["unfinished after 120 s drain"] += queue.qsize()
    return rec


class Monitor:
    """Samples the server's RSS every second, and CPU seconds of the server, PostgreSQL and this process."""

    def __init__(self, server_pid: int, home: Path) -> None:
        self.server = psutil.Process(server_pid)
        self.home = home
        self.me = psutil.Process()
        self.rss: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def cpu(self) -> dict[str, float]:
        return {"server": cpu_seconds([self.server]), "postgres": cpu_seconds(postgres_of(self.home)),
                "load_generator": cpu_seconds([self.me])}

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.rss.append((time.monotonic(), self.server.memory_info().rss))
            except psutil.Error:
                return

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def percentiles(ms: list[float]) -> dict[str, float]:
    if not ms:
        return {"n": 0}
    q = np.percentile(ms, [50, 90, 99])
    return {"n": len(ms), "p50_ms": round(float(q[0]), 1), "p90_ms": round(float(q[1]), 1),
            "p99_ms": round(float(q[2]), 1), "max_ms": round(max(ms), 1)}


def summarise(rec: Recorder, seconds: float, cpu0: dict, cpu1: dict) -> dict[str, Any]:
    done = len(rec.all_ms())
    cpu = {k: cpu1[k] - cpu0[k] for k in cpu0}
    timings = {k: round(float(np.median([t[k] for t in rec.build_timings if k in t])), 1)
               for k in ("embed", "retrieve", "score_mmr_budget", "log") if rec.build_timings}
    return {
        "seconds": round(seconds, 1),
        "requests_per_s": round(done / seconds, 2),
        "builds_per_s": round(len(rec.latencies.get(CONTEXT, [])) / seconds, 2),
        "all": percentiles(rec.all_ms()),
        "by_kind": {k: percentiles(v) for k, v in sorted(rec.latencies.items())},
        "errors": sum(rec.errors.values()),
        "error_kinds": dict(rec.errors),
        "server_build_timings_p50_ms": timings,
        "cpu_ms_per_request": {k: round(v * 1000 / max(done, 1), 1) for k, v in cpu.items()},
        "cpu_cores_busy": {k: round(v / seconds, 2) for k, v in cpu.items()},
        # What the server and its PostgreSQL could do with every core to themselves (the machine may be shared).
        "capacity_per_s_from_cpu": round((os.cpu_count() or 1) * max(done, 1) / max(cpu["server"] + cpu["postgres"],
                                                                                  1e-9), 1),
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),  # the whole machine: other work shows here
    }


def closed(base: str, key: str, work: Workload, mon: Monitor, clients: int, seconds: float,
           kinds: list[str] | None = None) -> dict[str, Any]:
    cpu0, t = mon.cpu(), time.monotonic()
    rec = asyncio.run(_closed(base, key, work, clients, seconds, kinds))
    out = {"clients": clients, **summarise(rec, time.monotonic() - t, cpu0, mon.cpu())}
    out["_written"] = rec.written
    out["_queued"] = rec.queued
    return out


def embedding_lag(base: str, key: str, queued: dict[str, float], timeout: float = 300) -> dict[str, Any]:
    """For ingests answered before embedding: seconds from the answer to `embedded_at`, how many still waited
    when the run ended, and how long the bench waited for the queue to drain (at most `timeout`)."""
    lag: dict[str, float] = {}
    waiting_at_end, t0 = None, time.monotonic()
    with _api(base, key) as client:
        while True:
            for m in read_back(client, [i for i in queued if i not in lag])[0]:
                if m.get("embedded_at"):
                    lag[m["id"]] = max(datetime.fromisoformat(m["embedded_at"]).timestamp() - queued[m["id"]], 0.0)
            left = len(queued) - len(lag)
            waiting_at_end = left if waiting_at_end is None else waiting_at_end
            if not left or time.monotonic() - t0 > timeout:
                break
            time.sleep(0.5)
    waited = round(time.monotonic() - t0, 1)
    values = sorted(lag.values())
    pct = (lambda q: round(float(np.percentile(values, q)), 2)) if values else (lambda q: None)
    return {"queued": len(queued), "embedded": len(lag), "waiting_when_the_run_ended": waiting_at_end,
            "waited_s": waited, "drained_after_s": waited if len(lag) == len(queued) else None,
            "lag_s": {"p50": pct(50), "p99": pct(99), "max": round(values[-1], 2) if values else None}}


def open_loop(base: str, key: str, work: Workload, mon: Monitor, rate: float, seconds: float,
              connections: int, poisson: bool, warmup: float) -> dict[str, Any]:
    cpu0, t = mon.cpu(), time.monotonic()
    first = len(mon.rss)
    rec = asyncio.run(_open(base, key, work, rate, seconds, connections, poisson, seed=int(rate * 1000)))
    elapsed = time.monotonic() - t
    out = {"offered_per_s": round(rate, 2), "connections": connections,
           "arrivals": "poisson" if poisson else "fixed", **summarise(rec, elapsed, cpu0, mon.cpu())}
    samples = [(s - t, rss) for s, rss in mon.rss[first:]]
    warm = [rss for s, rss in samples if s >= warmup]
    if warm:
        out["rss_mb"] = {"after_warmup": round(warm[0] / 2**20, 1), "last": round(warm[-1] / 2**20, 1),
                         "max": round(max(warm) / 2**20, 1)}
        out["rss_growth_after_warmup"] = round(warm[-1] / warm[0] - 1, 4)
    out["_written"] = rec.written
    out["_queued"] = rec.queued
    return out



def read_back(client: httpx.Client, ids: list[str]) -> tuple[list[dict], list[str]]:
    """The records of `ids` over the API (GET /memories?ids=, 100 at a time), and the ids it did not find."""
    records: list[dict] = []
    missing: list[str] = []
    for i in range(0, len(ids), 100):
        r = client.get("/memories", params={"ids": ",".join(ids[i : i + 100])})
        r.raise_for_status()
        records.extend(r.json()["memories"])
        missing.extend(r.json()["missing"])
    return records, missing


def _api(base: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def lost_writes(base: str, key: str, ids: list[str]) -> dict[str, int]:
    """Every acknowledged ingest id read back over the API."""
    unique = list(dict.fromkeys(ids))
    with _api(base, key) as client:
        missing = read_back(client, unique)[1]
    return {"acknowledged": len(ids), "distinct_ids": len(unique), "lost": len(missing)}


# -- CPU per phase, in process ------------------------------------------------------------------------------------
def cpu_breakdown(home: Path, queries: list[str], http_build: dict[str, Any], whoami: dict[str, Any]
                  ) -> dict[str, Any]:
    """Per context build: wall and CPU of each phase in this process, with the library, after the HTTP runs."""
    os.environ["MEMORY_PIPELINES_HOME"] = str(home)
    for k in ("DATABASE_URL", "OPENAI_API_KEY", "MEMORY_PIPELINES_EMBEDDER"):
        os.environ.pop(k, None)
    from memory_pipelines.context.builder import build_memory_context
    from memory_pipelines.face import Memory
    from memory_pipelines.runtime import warm_up
    from memory_pipelines.surfaces.encode import jsonable

    memory = Memory.open()
    warm_up()
    pool, embedder = memory.pool, memory.embedder
    pg = lambda: sum(p.cpu_times().user + p.cpu_times().system for p in postgres_of(home))  # noqa: E731
    for q in queries[:10]:
        build_memory_context(pool, embedder, OWNER, q, query_vector=embedder.embed_query(q + " warm"))
    n = len(queries)
    # Query embedding alone (unique texts: no cache can answer).
    wall, cpu = time.perf_counter(), time.process_time()
    vectors = [embedder.embed_query(f"{q} #{i}") for i, q in enumerate(queries)]
    embed = {"wall_ms": (time.perf_counter() - wall) * 1000 / n, "cpu_ms": (time.process_time() - cpu) * 1000 / n}
    # The build with that vector: retrieval, scoring, log (wall from the build's timings), CPU here and in PG.
    results, pg0, cpu, wall = [], pg(), time.process_time(), time.perf_counter()
    for q, v in zip(queries, vectors, strict=True):
        results.append(build_memory_context(pool, embedder, OWNER, q, query_vector=v))
    build_cpu = (time.process_time() - cpu) * 1000 / n
    build_wall = (time.perf_counter() - wall) * 1000 / n
    pg_cpu = (pg() - pg0) * 1000 / n
    cpu, wall = time.process_time(), time.perf_counter()
    for res in results:
        json.dumps(jsonable(res), ensure_ascii=False)
    encode = {"wall_ms": (time.perf_counter() - wall) * 1000 / n, "cpu_ms": (time.process_time() - cpu) * 1000 / n}
    med = {k: float(np.median([r.timings_ms[k] for r in results])) for k in ("retrieve", "score_mmr_budget", "log")}
    in_process_cpu = embed["cpu_ms"] + build_cpu + encode["cpu_ms"]
    from memory_pipelines.infra.db import close_pools
    from memory_pipelines.infra.embedded import leave_embedded

    close_pools()
    leave_embedded()  # the server's process is then the last one out: its SIGTERM stops PostgreSQL
    r1 = lambda d: {k: round(v, 1) for k, v in d.items()}  # noqa: E731
    return {
        "builds": n,
        "phases": {
            "query_embedding": r1(embed),
            "retrieval_sql": {"wall_ms_p50": round(med["retrieve"], 1)},
            "scoring_mmr_budget": {"wall_ms_p50": round(med["score_mmr_budget"], 1)},
            "log_write": {"wall_ms_p50": round(med["log"], 1)},
            "json_encoding": r1(encode),
        },
        "build_without_embedding": {"wall_ms": round(build_wall, 1), "cpu_ms_python": round(build_cpu, 1),
                                    "cpu_ms_postgres": round(pg_cpu, 1)},
        "in_process_cpu_ms": round(in_process_cpu, 1),
        "http_server_cpu_ms_per_build": http_build["cpu_ms_per_request"]["server"],
        "http_layer_cpu_ms": round(http_build["cpu_ms_per_request"]["server"] - in_process_cpu, 1),
        "http_auth_only_get_whoami_cpu_ms": whoami["cpu_ms_per_request"],
        "http_postgres_cpu_ms_per_build": http_build["cpu_ms_per_request"]["postgres"],
    }


# -- plot -----------------------------------------------------------------------------------------------------------
def plot(result: dict, path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    steps = result["closed_loop"]["steps"]
    for q, style in (("p50_ms", "o-"), ("p99_ms", "s-")):
        ax.plot([s["requests_per_s"] for s in steps], [s["all"][q] for s in steps], style,
                label=f"closed loop {q[:3]} (1, 2, 4… clients)", alpha=0.7)
        runs = result["open_loop"]
        ax.plot([r["offered_per_s"] for r in runs], [r["all"][q] for r in runs], style, color="black"
                if q == "p99_ms" else "grey", label=f"open loop {q[:3]} (50 %, 80 % of saturation)")
    sat = result["closed_loop"]["saturation"]
    ax.axvline(sat.get("sustained_requests_per_s", sat["requests_per_s"]), ls=":", color="red",
               label="saturation (sustained: with the background embedding of its ingests)")
    ax.set_xlabel("throughput / offered load (requests/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.set_title(f"memory-pipelines serve, mix {result['mix']}, 2 cores, local model")
    save_plot(fig, ax, path)
    return True


# -- main -------------------------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=300, help="seconds of each open-loop run (300)")
    parser.add_argument("--step-duration", type=float, default=30, help="seconds of each closed-loop step (30)")
    parser.add_argument("--mix", default="70/20/10", help="context/search/ingest percentages (70/20/10)")
    parser.add_argument("--repeat", type=float, default=0.3, help="share of queries repeating a recent one")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--arrivals", choices=["poisson", "fixed"], default="poisson")
    parser.add_argument("--loads", type=float, nargs="+", default=[0.5, 0.8], help="shares of saturation")
    parser.add_argument("--max-clients", type=int, default=32)
    parser.add_argument("--breakdown-builds", type=int, default=100)
    parser.add_argument("--home", type=Path, help="reuse this MEMORY_PIPELINES_HOME (demo loaded if empty)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--ingest", choices=["background", "wait"], default="background",
                        help="serve's ingest mode (`serve --ingest`; background, its default)")
    parser.add_argument("--out", help="write the JSON here, the plot beside it (default bench/results/load.json; "
                        "'-': print only)")
    parser.add_argument("--cli", help="command that runs memory-pipelines (default: the venv's), e.g. to "
                        "serve an earlier version for a before/after comparison")
    args = parser.parse_args()
    if args.cli:
        CLI[:] = shlex.split(args.cli)
    mix = tuple(int(x) for x in args.mix.split("/"))
    tmp = None
    if args.home is None:
        tmp = tempfile.mkdtemp(prefix="mp-load-")
        args.home = Path(tmp) / "home"
    args.home.mkdir(parents=True, exist_ok=True)
    args.home = args.home.resolve()
    load_before = os.getloadavg()
    key = prepare(args.home)
    work = Workload(mix, args.repeat)
    written: list[str] = []
    result: dict[str, Any] = {"benchmark": "load", "mix": args.mix, "ingest": args.ingest, "repeat_share": args.repeat,
                              "cores": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before]}

    with serving(args.home, args.port, args.ingest) as (base, proc), Monitor(proc.pid, args.home) as mon:

        def keep(step: dict) -> dict:
            """Record a step's writes; wait until the memories it queued are embedded (each step measures its
            own work, not the background embedding of the step before), reporting how long they waited."""
            written.extend(step.pop("_written"))
            drain = 0.0
            if queued := step.pop("_queued", None):
                step["background_embedding"] = embedding_lag(base, key, queued)
                drain = step["background_embedding"]["waited_s"]
            # What the step sustained: its requests over its time plus the time its queued embeddings took after it.
            step["sustained_requests_per_s"] = round(step["requests_per_s"] * step["seconds"]
                                                     / (step["seconds"] + drain), 2)
            return step

        log("warm-up: 20 s, 2 clients")
        keep(closed(base, key, work, mon, 2, 20))
        # 1. Baseline: one client, builds only (the first look's figure) and the mix.
        builds_1 = keep(closed(base, key, work, mon, 1, args.step_duration, [CONTEXT]))
        log(f"1 client, builds only: {builds_1['builds_per_s']} builds/s, {builds_1['all']}")
        whoami = keep(closed(base, key, work, mon, 1, min(10.0, args.step_duration), [WHOAMI]))
        log(f"1 client, GET /whoami: {whoami['requests_per_s']} req/s, CPU {whoami['cpu_ms_per_request']}")
        steps = [keep(closed(base, key, work, mon, 1, args.step_duration))]
        log(f"1 client, mix: {steps[0]['requests_per_s']} req/s, {steps[0]['all']}")
        # 2. Saturation: double the clients until throughput stops rising.
        clients = 2
        while clients <= args.max_clients:
            steps.append(keep(closed(base, key, work, mon, clients, args.step_duration)))
            log(f"{clients} clients: {steps[-1]['requests_per_s']} req/s ({steps[-1]['sustained_requests_per_s']} "
                f"sustained), {steps[-1]['builds_per_s']} builds/s, "
                f"{steps[-1]['all']}, errors {steps[-1]['errors']}")
            best = max(steps[:-1], key=lambda s: s["sustained_requests_per_s"])
            if steps[-1]["sustained_requests_per_s"] < 1.05 * best["sustained_requests_per_s"]:
                break
            clients *= 2
        sat = max(steps, key=lambda s: s["sustained_requests_per_s"])
        builds_sat = keep(closed(base, key, work, mon, sat["clients"], args.step_duration, [CONTEXT]))
        log(f"{sat['clients']} clients, builds only: {builds_sat['builds_per_s']} builds/s, {builds_sat['all']}")
        result["baseline_single_client"] = {"mix": steps[0], "builds_only": builds_1}
        result["closed_loop"] = {
            "steps": steps,
            "saturation": {"clients": sat["clients"], "requests_per_s": sat["requests_per_s"],
                           "sustained_requests_per_s": sat["sustained_requests_per_s"],
                           "builds_per_s": sat["builds_per_s"], "builds_only": builds_sat},
        }
        # 3. Open loop at shares of the saturation throughput.
        runs = []
        for share in args.loads:
            rate = share * sat["sustained_requests_per_s"]
            log(f"open loop at {share:.0%} of saturation: {rate:.1f} req/s for {args.duration:.0f} s")
            run = open_loop(base, key, work, mon, rate, args.duration, args.connections,
                            args.arrivals == "poisson", warmup=min(30.0, args.duration / 4))
            run["share_of_saturation"] = share
            run["lost_writes"] = lost_writes(base, key, run["_written"])
            keep(run)
            log(f"  {run['requests_per_s']} req/s, {run['all']}, errors {run['errors']}, "
                f"lost {run['lost_writes']['lost']}, RSS growth {run.get('rss_growth_after_warmup')}, "
                f"background embedding {run.get('background_embedding')}")
            runs.append(run)
        result["open_loop"] = runs
        result["lost_writes_all_runs"] = lost_writes(base, key, written)
        # 4. CPU per phase, in process, with the server idle but up (the database stays running).
        if args.breakdown_builds:
            log("CPU breakdown, in process")
            queries = [work.query() for _ in range(args.breakdown_builds)]
            result["cpu_breakdown_per_build"] = cpu_breakdown(args.home, queries, builds_1, whoami)
    for _ in range(60):  # PostgreSQL stops once its last registrant (serve) has left
        if not (left := postgres_of(args.home)):
            break
        time.sleep(0.5)
    result["postgres_left_running"] = len(left)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result["floors"] = {
        "errors": sum(s["errors"] for s in [*steps, builds_1, whoami, builds_sat, *runs]),
        "lost_writes": result["lost_writes_all_runs"]["lost"],
        "max_rss_growth_after_warmup": max((r.get("rss_growth_after_warmup", 0) for r in runs), default=None),
        "p99_ms_at_50pct": next((r["all"].get("p99_ms") for r in runs if r["share_of_saturation"] == 0.5), None),
        "saturation_builds_per_s_builds_only": builds_sat["builds_per_s"],
        "floor": "0 errors, 0 lost writes, RSS growth <= 10 %, p99 <= 250 ms at 50 %, >= 25 builds/s",
    }
    if left:
        log(f"WARNING: {len(left)} PostgreSQL processes of {args.home} are still running")
    out = out_path(args.out, "load")
    if out is not None:
        out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        if plot(result, out.with_suffix(".png")):
            log(f"plot: {out.with_suffix('.png')}")
    emit(result)


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    main()
