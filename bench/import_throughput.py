"""Bulk import throughput: `memory-pipelines import` against the single-item HTTP endpoint, same run, same rows.

100k synthetic learnings (title, content, task type, category, a key and an original time each) are written to a
JSON Lines file and imported with `store.imports.import_file`, what the CLI and the Dagster inbox run: every row
checked, then written through `write_items` in chunks (COPY into a staging table, one upsert, keyword-indexed in
the same transaction). When it returns the rows are stored and keyword-searchable (the bench checks a search finds
the last row). Then they are embedded with an instant provider (precomputed vectors: the pipeline's own cost,
`embed_buckets` over every bucket as the Dagster backfill runs it). Then the same file is imported again: every row
comes back unchanged.

The baseline is the same kind of rows posted one by one to `POST /api/learnings` of a real `memory-pipelines
serve` (fake embedder, its background worker on, as served) on loopback with one keep-alive client: `--http-rows`
of them (default 500), into the same database.

Reported: rows/s from the start of the import to searchable, to embedded (import + embedding), the single-item
rate and the ratio import / single-item; with `--profile`, where the import's time goes (a second, profiled import
into a fresh owner: cProfile's cumulative seconds of the main steps, profiler overhead included). Both ways in
also report the CPU seconds they took (this process, `serve`, and the embedded PostgreSQL) and the rate that
CPU allows with every core to themselves: on a shared machine the wall-clock rates depend on the other tenants.
Floors: import >= 20x the single-item rate, >= 2,000 rows/s to searchable.

    python bench/import_throughput.py [--rows 100000] [--http-rows 500] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import socket
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
from _common import cpu_seconds, log, machine, note, save_result, scratch, sentence, serve_until_stopped
from backfill_throughput import BUCKETS, InstantEmbedder

from memory_pipelines.index.vectors import count_pending, embed_buckets
from memory_pipelines.infra.auth import create_key
from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.embedded import exit_on_termination
from memory_pipelines.infra.settings import get_settings
from memory_pipelines.retrieval.search import search
from memory_pipelines.store.imports import import_file
from memory_pipelines.vocabulary import LEARNING_CATEGORIES, TASK_TYPES

OWNER, HTTP_OWNER, PROFILE_OWNER = "team-history", "team-http", "team-profile"
RESULTS = Path(__file__).parent / "results" / "import_throughput.json"
CLI = [str(Path(sys.executable).with_name("memory-pipelines"))]
FLOOR_RATIO, FLOOR_ROWS_PER_SECOND = 20.0, 2_000.0
PROFILED = ("import_rows", "prepare_row", "derive_keys", "write_items", "validate_items", "_stage", "_upsert",
            "index_items", "index_rows", "keyword_counts", "refresh_stats")


def postgres_processes() -> list[psutil.Process]:
    """The embedded PostgreSQL's processes (postmaster and backends), [] when DATABASE_URL names another."""
    if get_settings().database_url:
        return []
    needle = str(get_settings().home / "pgdata")
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "-D" in cmd and needle in cmd:
            return [p, *p.children(recursive=True)]
    return []


class CpuMeter:
    """CPU seconds of this process, the embedded PostgreSQL and `extra` processes over a `with` block."""

    def __init__(self, extra: list[psutil.Process] | None = None) -> None:
        self.extra = extra or []

    def _read(self) -> dict[str, float]:
        return {"client": cpu_seconds([psutil.Process()]), "postgres": cpu_seconds(postgres_processes()),
                "server": cpu_seconds([q for p in self.extra for q in (p, *p.children(recursive=True))])}

    def __enter__(self) -> CpuMeter:
        self.start = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._read()
        self.seconds = {k: round(end[k] - self.start[k], 2) for k in end}

    def capacity(self, rows: int) -> float:
        """Rows/s this CPU allows with every core to this work (the parts run in parallel)."""
        return round(rows * (os.cpu_count() or 1) / max(sum(self.seconds.values()), 1e-9), 1)


def learning(rng: random.Random, i: int, prefix: str) -> dict:
    """One synthetic learning as a team's export would hold it."""
    return {"key": f"{prefix}-{i}", "title": note(rng)[0], "content": f"{sentence(rng)}. {sentence(rng)}.",
            "task_type": rng.choice(TASK_TYPES), "category": rng.choice(LEARNING_CATEGORIES),
            "at": 1_640_995_200 + rng.randrange(3 * 365 * 86_400)}


def write_file(path: Path, rows: int, prefix: str, seed: int) -> Path:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for i in range(rows):
            f.write(json.dumps(learning(rng, i, prefix), ensure_ascii=False) + "\n")
    return path


def searchable(pool, embedder, owner: str, row: dict) -> bool:
    """Whether a keyword search for the row's title finds it (the last row written: all before it are too)."""
    hits = search(pool, embedder, owner, row["title"], mode="keyword", limit=20).hits
    return row["title"] in [h.title for h in hits]


def profile_import(pool, path: Path) -> dict:
    """Cumulative seconds of the import's main steps, from a profiled import into a fresh owner."""
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    import_file(pool, path, source="learning", owner=PROFILE_OWNER)
    prof.disable()
    total = time.perf_counter() - t0
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    steps: dict[str, float] = {}
    for (filename, _line, name), (_cc, _nc, _tt, cumulative, _callers) in stats.items():
        if name in PROFILED and "memory_pipelines" in filename:
            steps[name] = round(steps.get(name, 0.0) + cumulative, 2)
    waits = sum(v[3] for (f, _l, n), v in stats.items() if n == "wait" and "psycopg" in f)
    return {"seconds_profiled": round(total, 2), "steps_cumulative_seconds": steps,
            "waiting_for_postgres_seconds": round(waits, 2)}


@contextmanager
def serving(url: str, home: Path):
    """`memory-pipelines serve` on a free loopback port over the scratch database; yields (base URL, process)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "DATABASE_URL": url, "MEMORY_PIPELINES_EMBEDDER": "fake", "MEMORY_PIPELINES_HOME": str(home)}
    with (home / "serve.log").open("w") as logfile, serve_until_stopped(
            [*CLI, "serve", "--host", "127.0.0.1", "--port", str(port)], env, port, logfile) as (base, proc):
        yield base, psutil.Process(proc.pid)


def post_one_by_one(base: str, server: psutil.Process, key: str, rows: int, seed: int) -> dict:
    """POST `rows` learnings one at a time (keep-alive); the rate, the statuses and the CPU it took."""
    rng = random.Random(seed)
    items = [learning(rng, i, "http") for i in range(rows)]
    statuses: dict[int, int] = {}
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        client.post("/api/learnings", json=learning(rng, rows, "warm-up"))  # first request: connection, imports
        t0 = time.perf_counter()
        with CpuMeter([server]) as cpu:
            for item in items:
                status = client.post("/api/learnings", json=item).status_code
                statuses[status] = statuses.get(status, 0) + 1
            seconds = time.perf_counter() - t0
            time.sleep(2)  # the server's worker embeds what was posted: its CPU counts too
    if set(statuses) != {201}:
        raise RuntimeError(f"single-item posts answered {statuses}")
    return {"rows": rows, "seconds": round(seconds, 2), "rows_per_second": round(rows / seconds, 1),
            "statuses": statuses, "cpu_seconds": cpu.seconds, "rows_per_second_from_cpu": cpu.capacity(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--http-rows", type=int, default=500)
    ap.add_argument("--profile", action="store_true", help="also profile a second import (into a fresh owner)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    out: dict = {"benchmark": "import_throughput", "rows": args.rows, "machine_before": machine()}
    with tempfile.TemporaryDirectory(prefix="mp-import-bench-") as tmp, scratch(384) as url:
        tmp_path = Path(tmp)
        pool = get_pool(url)
        path = write_file(tmp_path / "learnings.jsonl", args.rows, "hist", seed=1)
        last = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
        out["file_mb"] = round(path.stat().st_size / 1e6, 1)

        log(f"importing {args.rows} learnings from {path.name} ({out['file_mb']} MB)")
        t0 = time.perf_counter()
        with CpuMeter() as import_cpu:
            report = import_file(pool, path, source="learning", owner=OWNER)
        to_searchable = time.perf_counter() - t0
        instant = InstantEmbedder(args.rows)
        found = searchable(pool, instant, OWNER, last)
        assert report.totals["created"] == args.rows and not report.rejects and found, (report.as_dict(), found)
        log(f"  stored and keyword-indexed in {to_searchable:.1f} s = {args.rows / to_searchable:.0f} rows/s")

        log("embedding them (instant provider, every bucket)")
        t1 = time.perf_counter()
        embedded = embed_buckets(pool, instant, "learning", range(BUCKETS), BUCKETS)
        embed_seconds = time.perf_counter() - t1
        with pool.connection() as conn:
            pending = count_pending(conn, "learning", instant.model_name)[0]
        assert embedded.embedded == args.rows and pending == 0, (embedded, pending)
        log(f"  embedded in {embed_seconds:.1f} s")

        log("importing the same file again")
        t2 = time.perf_counter()
        again = import_file(pool, path, source="learning", owner=OWNER)
        reimport_seconds = time.perf_counter() - t2
        assert again.totals == {"created": 0, "updated": 0, "unchanged": args.rows}, again.totals

        out["import"] = {
            "to_searchable_seconds": round(to_searchable, 2),
            "to_searchable_rows_per_second": round(args.rows / to_searchable, 1),
            "read_and_check_seconds": round(report.read_seconds, 2),
            "write_seconds": round(report.write_seconds, 2),
            "embed_seconds": round(embed_seconds, 2),
            "to_embedded_seconds": round(to_searchable + embed_seconds, 2),
            "to_embedded_rows_per_second": round(args.rows / (to_searchable + embed_seconds), 1),
            "reimport_unchanged_seconds": round(reimport_seconds, 2),
            "reimport_rows_per_second": round(args.rows / reimport_seconds, 1),
            "cpu_seconds": import_cpu.seconds,
            "to_searchable_rows_per_second_from_cpu": import_cpu.capacity(args.rows),
        }

        log(f"posting {args.http_rows} learnings one by one to POST /api/learnings of `memory-pipelines serve`")
        _kid, key = create_key(pool, HTTP_OWNER, "import-bench")
        with serving(url, tmp_path) as (base, server):
            out["single_item_http"] = post_one_by_one(base, server, key, args.http_rows, seed=2)
        log(f"  {out['single_item_http']['rows_per_second']} rows/s")

        if args.profile:
            log("profiling a second import (fresh owner)")
            out["profile"] = profile_import(pool, path)

    rate = out["import"]["to_searchable_rows_per_second"]
    single = out["single_item_http"]["rows_per_second"]
    out["ratio_import_to_single_item"] = round(rate / single, 1)
    out["ratio_from_cpu"] = round(out["import"]["to_searchable_rows_per_second_from_cpu"]
                                  / out["single_item_http"]["rows_per_second_from_cpu"], 1)
    out["floors"] = {"ratio_min": FLOOR_RATIO, "rows_per_second_min": FLOOR_ROWS_PER_SECOND,
                     "ratio_met": rate / single >= FLOOR_RATIO, "rows_per_second_met": rate >= FLOOR_ROWS_PER_SECOND}
    save_result(out, args.out)


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    main()
