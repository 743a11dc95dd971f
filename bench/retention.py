"""Retention of a large retrieval log while context builds run: rows removed, time taken, and the context
build's latency during the prune against before it, in the same run.

A scratch database gets a small store for one owner (20k fake-embedded tasks, keyword-indexed) and a retrieval
log of `--builds` builds (180k: 5.4 million candidate rows, 30 a build, each with a features object and a block
line as the builder writes them, and one memory_retrieval event a build) made in SQL with generate_series,
spread over the last 120 days across 50 owners, a third with feedback. Then:

1. before: one thread builds contexts for `--seconds` seconds (the library's build_memory_context, its log
   written), the latencies kept;
2. during: the same thread keeps building while `operations.retention.prune` runs with the default ages (candidates
   30 days, builds and events 90), batches of 1,000 builds; the latencies of the builds that overlapped it kept.

Reports the rows removed per table, batches, seconds, rows per second, and p50/p95/p99 of the builds before and
during (the ratio during/before). Also checks the hit-rate history of an owner of the log over 120 days reads
the same before and after. Prints one JSON object; `--out` also writes it.

    python bench/retention.py [--builds 180000] [--seconds 60] [--out bench/results/retention.json]
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from pathlib import Path

from _common import WORDS, emit, load_tasks, log, machine, percentiles, scratch

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.context.history import hit_rates
from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.index.keywords import index_source
from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.embedded import exit_on_termination
from memory_pipelines.operations.retention import RetentionPolicy, log_status, prune
from memory_pipelines.runtime import warm_up

OWNER = "bench"
LOG_OWNERS = 50


def make_log(url: str, builds: int) -> dict:
    """`builds` builds with 30 candidates each and one event each, over the last 120 days, in SQL."""
    pool = get_pool(url)
    started = time.perf_counter()
    with pool.connection() as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute(
            "INSERT INTO retrievals (id, owner_id, query, mode, token_budget, token_used, candidates_count,"
            " injected_count, injected_sources, config_version, created_at, as_of, feedback_at)"
            " SELECT gen_random_uuid(), 'log' || (g %% %(owners)s), 'how did we fix the deploy ' || g,"
            " (ARRAY['plan','execute','debug','chat'])[1 + g %% 4], 800, 640, 30, 8,"
            " '[\"task\",\"learning\",\"memory\"]', 1, t.at, t.at,"
            " CASE WHEN g %% 3 = 0 THEN t.at + interval '2 minutes' END"
            " FROM generate_series(1, %(n)s) g,"
            " LATERAL (SELECT now() - random() * interval '120 days' + g * interval '0' AS at) t",
            {"n": builds, "owners": LOG_OWNERS},
        )
        conn.commit()
        log(f"  {builds} builds in {time.perf_counter() - started:.0f} s")
        conn.execute(
            "INSERT INTO retrieval_candidates (retrieval_id, owner_id, source, item_id, relevance, age_days, mode,"
            " decay, mode_weight, score, rank, mmr_rank, tokens, injected, used, used_by, line, features)"
            " SELECT r.id, r.owner_id, (ARRAY['task','learning','capability','memory','event'])[1 + k % 5],"
            " md5(r.id::text || k), 0.3 + k * 0.01, k * 3.5, r.mode, 0.8, 1.0, 1.0 - k * 0.02, k,"
            " CASE WHEN k <= 8 THEN k END, CASE WHEN k <= 8 THEN 60 END, k <= 8,"
            " k <= 2 AND r.feedback_at IS NOT NULL, CASE WHEN k <= 8 AND r.feedback_at IS NOT NULL THEN 'explicit' END,"
            " CASE WHEN k <= 8 THEN '- [task] deploy rollback canary: the release train waits for review ' || k END,"
            " jsonb_build_object('fused', 0.5, 'semantic', 0.6, 'keyword', 0.4, 'keyword_evidence', 0.3,"
            "   'rank_semantic', k, 'rank_keyword', k + 1, 'neighbour_gain', 0, 'same_language', true,"
            "   'source', 'task', 'age_days', k * 3.5)"
            " FROM retrievals r CROSS JOIN generate_series(1, 30) k WHERE r.owner_id LIKE 'log%'",
        )
        conn.commit()
        log(f"  candidates in {time.perf_counter() - started:.0f} s")
        conn.execute(
            "INSERT INTO events (owner_id, type, payload, created_at)"
            " SELECT owner_id, 'memory_retrieval', jsonb_build_object('retrieval_id', id, 'query', query, 'mode', mode,"
            " 'candidates_count', 30, 'injected_count', 8), created_at FROM retrievals WHERE owner_id LIKE 'log%'")
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE retrievals")
        conn.execute("VACUUM ANALYZE retrieval_candidates")
        conn.execute("VACUUM ANALYZE events")
        conn.autocommit = False
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("retrievals", "retrieval_candidates", "events")}
    log(f"  log made in {time.perf_counter() - started:.0f} s: {counts}")
    return {"seconds": round(time.perf_counter() - started, 1), **counts}


class Builder(threading.Thread):
    """Builds contexts one after the other until stopped; each latency (ms) stamped with its start."""

    def __init__(self, url: str, embedder: FakeEmbedder) -> None:
        super().__init__(daemon=True)
        self.pool, self.embedder = get_pool(url), embedder
        self.samples: list[tuple[float, float, float]] = []  # (start, end, ms)
        self.stop = threading.Event()
        self.rng = random.Random(5)

    def run(self) -> None:
        while not self.stop.is_set():
            query = " ".join(self.rng.sample(WORDS, 4))
            t0 = time.perf_counter()
            build_memory_context(self.pool, self.embedder, OWNER, query, exploration=0.0)
            t1 = time.perf_counter()
            self.samples.append((t0, t1, (t1 - t0) * 1000))

    def between(self, start: float, end: float) -> list[float]:
        """Latencies of the builds that overlapped [start, end]."""
        return [ms for t0, t1, ms in self.samples if t1 >= start and t0 <= end]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builds", type=int, default=180_000)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--pause-share", type=float, default=None,
                        help="pause after each batch, as a share of its time (default: the library's)")
    parser.add_argument("--keep", default=None, help="keep the database under this name (the load is paid once)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with scratch(keep=args.keep) as url:
        log(f"loading {args.tasks} tasks and a log of {args.builds} builds")
        embedder = load_tasks(url, args.tasks, [(OWNER, args.tasks)])
        pool = get_pool(url)
        index_source(pool, "task")
        made = make_log(url, args.builds)
        with pool.connection() as conn:
            status_before = log_status(conn)
        history_before = hit_rates(pool, "log7", days=120)

        warm_up()  # as `serve` does at start
        for word in WORDS[:20]:  # warm caches and plans: not counted
            build_memory_context(pool, embedder, OWNER, f"{word} deploy", exploration=0.0)
        builder = Builder(url, embedder)
        builder.start()
        t_before = time.perf_counter()
        time.sleep(args.seconds)
        t_prune = time.perf_counter()
        policy = RetentionPolicy() if args.pause_share is None else RetentionPolicy(pause_share=args.pause_share)
        result = prune(pool, policy)
        t_done = time.perf_counter()
        time.sleep(2)
        builder.stop.set()
        builder.join()
        before = builder.between(t_before, t_prune)
        during = builder.between(t_prune, t_done)
        with pool.connection() as conn:
            status_after = log_status(conn)
        history_after = hit_rates(pool, "log7", days=120)

    removed = result.removed
    rows = removed["retrieval_candidates"] + removed["retrievals"] + removed["events"]
    out = {
        "bench": "retention",
        "machine": machine(),
        "log": made,
        "policy": {"candidates_days": policy.candidates.days, "builds_days": policy.builds.days,
                   "events_days": policy.events.days, "batch_builds": policy.batch_builds,
                   "pause_share": policy.pause_share},
        "prune": {**result.as_dict(), "rows_per_second": round(rows / result.seconds) if result.seconds else None},
        "context_builds": {
            "before": {"builds": len(before), **percentiles(before)},
            "during": {"builds": len(during), **percentiles(during)},
        },
        "status_before": status_before,
        "status_after": status_after,
        "hit_rate_history_unchanged": history_before == history_after,
    }
    b, d = out["context_builds"]["before"], out["context_builds"]["during"]
    out["context_builds"]["p99_ratio_during_over_before"] = round(d["p99_ms"] / b["p99_ms"], 2)
    out["context_builds"]["p50_ratio_during_over_before"] = round(d["p50_ms"] / b["p50_ms"], 2)
    log(f"removed {removed} in {result.seconds:.1f} s; p99 before {b['p99_ms']} ms, during {d['p99_ms']} ms")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    emit(out)


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    main()
