"""Context-build latency (p50 / p95 / p99) at 10k and 100k memories, query embedding excluded.

Synthetic fake-embedded tasks and learnings (half each) for one owner plus goals and recent events;
keyword index built and vacuumed (the steady state). The project's `build_memory_context` (hybrid
retrieval over four sources, events, profile, MMR, the token budget, the retrieval log written) runs
against the approach written in the context-builder spec, measured in the same run on the same data and the same
pool: sequential vector search of tasks (top 20) and learnings (top 10) at pgvector's default ef_search,
events, goals, Jaccard dedup and the len/2.5 budget, no keyword channel and no log. The baseline does far
less work (and finds less: see bench/filtered_recall.py and the eval table), so the ratio says what the
project's retrieval costs over it. The median time of the project's steps is reported too. Query embedding
with the local model is measured apart. Prints one JSON object.

    python bench/context_latency.py [--sizes 10000 100000] [--builds 200]
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
from _common import (
    LOADS,
    database_size,
    emit,
    load_tasks,
    log,
    machine,
    note,
    percentiles,
    scratch,
    sentence,
    topic_vector,
)
from psycopg.types.json import Jsonb

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.index.keywords import index_source
from memory_pipelines.infra.db import get_pool
from memory_pipelines.runtime import warm_up
from memory_pipelines.text.keywords import jaccard


def seed_build(pool, owner: str, qvec, budget: int = 800) -> str:
    """The context-builder spec's buildMemoryContext, phase 1–2, as the baseline."""
    with pool.connection() as conn:
        tasks = conn.execute(
            "SELECT title, description, created_at, 1 - (embedding <=> %s) FROM tasks"
            " WHERE owner_id = %s ORDER BY embedding <=> %s LIMIT 20",
            (qvec, owner, qvec),
        ).fetchall()
        learnings = conn.execute(
            "SELECT title, content, created_at, 1 - (embedding <=> %s) FROM learnings"
            " WHERE owner_id = %s ORDER BY embedding <=> %s LIMIT 10",
            (qvec, owner, qvec),
        ).fetchall()
        events = conn.execute(
            "SELECT type, payload::text FROM events WHERE owner_id = %s"
            " AND created_at > now() - interval '24 hours' ORDER BY created_at DESC LIMIT 10",
            (owner,),
        ).fetchall()
        goals = conn.execute(
            "SELECT title, status, progress FROM goals WHERE owner_id = %s AND status IN"
            " ('in_progress', 'pending') ORDER BY priority, progress DESC LIMIT 3",
            (owner,),
        ).fetchall()
    items = [(f"{t} {d}", s) for t, d, _c, s in tasks + learnings] + [(f"[{t}] {p[:200]}", 0.5) for t, p in events]
    items.sort(key=lambda x: -x[1])
    kept: list[str] = []
    for text, _score in items:
        if not any(jaccard(text, k) > 0.8 for k in kept):
            kept.append(text)
    block = "\n".join(f"- {g[0]} ({g[1]}, {g[2]}%)" for g in goals)
    used = len(block) / 2.5
    for text in kept:
        if used + len(text) / 2.5 > budget:
            break
        block += "\n" + text
        used += len(text) / 2.5
    return block


def run_size(n: int, builds: int) -> dict:
    rng = random.Random(5)
    with scratch() as url:
        log(f"[{n}] loading")
        embedder = load_tasks(url, n // 2, [("owner", n // 2)], seed=1, table="tasks")
        load_tasks(url, n - n // 2, [("owner", n - n // 2)], seed=2, table="learnings")
        pool = get_pool(url)
        with pool.connection() as conn:
            for i in range(3):
                conn.execute(
                    "INSERT INTO goals (owner_id, title, status, priority) VALUES ('owner', %s, 'in_progress', %s)",
                    (f"goal {i}: {sentence(rng)}", i),
                )
            for _ in range(30):
                conn.execute(
                    "INSERT INTO events (owner_id, type, payload, created_at) VALUES ('owner',"
                    " 'task_failed', %s, now() - make_interval(secs => %s))",
                    (Jsonb({"error": sentence(rng)}), rng.random() * 30 * 3600),
                )
            conn.execute("ANALYZE")
        log(f"[{n}] keyword index")
        t = time.perf_counter()
        index_source(pool, "task", weights=False)  # BM25 reads tf and df; the TF-IDF weights are for tags
        index_source(pool, "learning", weights=False)
        keyword_seconds = time.perf_counter() - t
        with pool.connection() as conn:  # the steady state: autovacuum has seen the 1M+ keyword rows
            conn.autocommit = True
            conn.execute("VACUUM ANALYZE keywords, keyword_docs, keyword_stats, keyword_df")
            conn.autocommit = False
        notes = [note(rng) for _ in range(builds)]
        queries = [text for text, _ in notes]
        vectors = [topic_vector(topic, rng) for _, topic in notes]
        warm_up()  # as `serve` and `mcp` do at start
        for q, v in zip(queries[:10], vectors[:10], strict=True):  # warm-up
            build_memory_context(pool, embedder, "owner", q, query_vector=v)
            seed_build(pool, "owner", v)
        ours, base, parts = [], [], []
        log(f"[{n}] {builds} builds each")
        for q, v in zip(queries, vectors, strict=True):
            t = time.perf_counter()
            result = build_memory_context(pool, embedder, "owner", q, query_vector=v)
            ours.append((time.perf_counter() - t) * 1000)
            parts.append(result.timings_ms)
            t = time.perf_counter()
            seed_build(pool, "owner", v)
            base.append((time.perf_counter() - t) * 1000)
        ours_p, base_p = percentiles(ours), percentiles(base)
        steps = ("retrieve", "score_mmr_budget", "log")
        return {
            "loads": LOADS[-2:],
            "keyword_index_seconds": round(keyword_seconds, 1),
            "database_size": database_size(url),
            "machine": machine(),
            "project": ours_p,
            "project_steps_p50_ms": {k: round(float(np.median([p[k] for p in parts])), 2) for k in steps},
            "seed_baseline": base_p,
            "p99_ratio_baseline_over_project": round(base_p["p99_ms"] / ours_p["p99_ms"], 3),
        }


def query_embedding_ms(samples: int = 50) -> dict:
    from memory_pipelines.embeddings.local import LocalE5Embedder

    emb = LocalE5Embedder()
    rng = random.Random(3)
    emb.embed_query("warm up")
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        emb.embed_query(sentence(rng))
        times.append((time.perf_counter() - t) * 1000)
    return percentiles(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--builds", type=int, default=200)
    args = parser.parse_args()
    sizes = {str(n): run_size(n, args.builds) for n in args.sizes}
    for n, r in sizes.items():
        log(f"{n}: {r}")
    emit(
        {
            "benchmark": "context_latency",
            "builds_per_size": args.builds,
            "sizes": sizes,
            "query_embedding_local_model": query_embedding_ms(),
            "floor_p99_ms": 100,
            "max_p99_ms": max(r["project"]["p99_ms"] for r in sizes.values()),
        }
    )


if __name__ == "__main__":
    main()
