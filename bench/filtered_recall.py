"""Filtered-search recall@10 against exact search at owner selectivity 100 %, 10 %, 1 % and 0.1 %.

100k fake-embedded tasks. For each selectivity, 50 queries: the project's `search` (semantic mode) and a
plain `ORDER BY embedding <=> q LIMIT 10` with the same owner filter (the baseline, pgvector defaults),
both compared with an exact scan. Prints one JSON object on its last line.

    python bench/filtered_recall.py [--rows 100000] [--queries 50]
"""

from __future__ import annotations

import argparse
import random
import time

from _common import emit, load_tasks, log, scratch, sentence

from memory_pipelines.db import get_pool
from memory_pipelines.search import SearchFilters, search


def exact(conn, owner: str, q) -> list[str]:
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        rows = conn.execute(
            "SELECT id::text FROM tasks WHERE owner_id = %s ORDER BY embedding <=> %s LIMIT 10", (owner, q)
        ).fetchall()
    return [r[0] for r in rows]


def plain(conn, owner: str, q) -> list[str]:
    rows = conn.execute(
        "SELECT id::text FROM tasks WHERE owner_id = %s ORDER BY embedding <=> %s LIMIT 10", (owner, q)
    ).fetchall()
    return [r[0] for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    n = args.rows
    split = [("s10", n // 10), ("s1", n // 100), ("s01", n // 1000)]
    split.append(("rest", n - sum(c for _, c in split)))
    rng = random.Random(11)
    with scratch() as url:
        log(f"loading {n} rows")
        embedder = load_tasks(url, n, [("all", n)])
        pool = get_pool(url)
        results = {}
        queries = [embedder.embed_query(sentence(rng)) for _ in range(args.queries)]
        for label, owner, reassign in [
            ("100%", "all", False),
            ("10%", "s10", True),
            ("1%", "s1", False),
            ("0.1%", "s01", False),
        ]:
            if reassign:
                with pool.connection() as conn:
                    ids = [r[0] for r in conn.execute("SELECT id FROM tasks ORDER BY random()").fetchall()]
                    start = 0
                    for o, count in split:
                        conn.execute(
                            "UPDATE tasks SET owner_id = %s WHERE id = ANY(%s)",
                            (o, ids[start : start + count]),
                        )
                        start += count
                    conn.execute("ANALYZE tasks")
            ours_r, plain_r, ours_ms, plain_ms = [], [], [], []
            for q in queries:
                with pool.connection() as conn:
                    truth = set(exact(conn, owner, q))
                    t = time.perf_counter()
                    base = plain(conn, owner, q)
                    plain_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                hits = search(
                    pool,
                    embedder,
                    owner,
                    "q",
                    mode="semantic",
                    filters=SearchFilters(sources=("task",)),
                    limit=10,
                    query_vector=q,
                ).hits
                ours_ms.append((time.perf_counter() - t) * 1000)
                ours_r.append(len(truth & {h.id for h in hits}) / max(1, min(10, len(truth))))
                plain_r.append(len(truth & set(base)) / max(1, min(10, len(truth))))
            results[label] = {
                "recall_at_10": round(sum(ours_r) / len(ours_r), 4),
                "baseline_recall_at_10": round(sum(plain_r) / len(plain_r), 4),
                "p50_ms": round(sorted(ours_ms)[len(ours_ms) // 2], 2),
                "baseline_p50_ms": round(sorted(plain_ms)[len(plain_ms) // 2], 2),
            }
            log(f"{label}: {results[label]}")
    emit(
        {
            "benchmark": "filtered_recall",
            "rows": n,
            "queries": args.queries,
            "selectivity": results,
            "min_recall": min(r["recall_at_10"] for r in results.values()),
            "min_baseline_recall": min(r["baseline_recall_at_10"] for r in results.values()),
        }
    )


if __name__ == "__main__":
    main()
