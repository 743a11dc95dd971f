"""halfvec (16-bit) HNSW index against the float32 one: size, build time, recall@10 and latency.

pgvector 0.8 can index `embedding::halfvec(384)` (half the bytes per vector) while the table keeps float32.
Same rows (fake-embedded topic vectors, one owner: both indexes are her graph, partial on her id, as the
product builds it), same queries; recall@10 of each index is measured
against an exact float32 scan. The float32 index is the baseline. Prints one JSON object on its last line
and writes it to bench/results/halfvec_recall.json (`--out`).

    python bench/halfvec_recall.py [--rows 100000] [--queries 100]
"""

from __future__ import annotations

import argparse
import random
import time

from _common import (
    add_out_argument,
    emit,
    index_memory,
    load_tasks,
    log,
    machine,
    note,
    out_path,
    scratch,
    size_label,
    topic_vector,
)

from memory_pipelines.index.owner_indexes import owner_index_name
from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.embedded import exit_on_termination

HALF = "tasks_embedding_half_hnsw"


def top10(conn, q, expr: str, exact: bool = False) -> tuple[list[str], float]:
    with conn.transaction():
        conn.execute("SET LOCAL hnsw.ef_search = 200")
        if exact:
            conn.execute("SET LOCAL enable_indexscan = off")
        t = time.perf_counter()
        rows = conn.execute(f"SELECT id::text FROM tasks WHERE owner_id = 'owner' ORDER BY {expr} LIMIT 10",
                            {"q": q}).fetchall()
        return [r[0] for r in rows], (time.perf_counter() - t) * 1000


def index_mb(conn, name: str) -> float:
    return round(conn.execute("SELECT pg_relation_size(%s::regclass)", (name,)).fetchone()[0] / 2**20, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    add_out_argument(parser)
    args = parser.parse_args()
    rng = random.Random(21)
    with scratch() as url:
        load_tasks(url, args.rows, [("owner", args.rows)], seed=9, table="tasks")
        pool = get_pool(url)
        with pool.connection() as conn:
            conn.autocommit = True
            t = time.perf_counter()
            conn.execute(f"SET maintenance_work_mem = '{index_memory(args.rows)}'")
            conn.execute(f"CREATE INDEX {HALF} ON tasks USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)"
                         " WHERE owner_id = 'owner'")
            half_build = time.perf_counter() - t
            sizes = {"float32": index_mb(conn, owner_index_name("tasks", "owner")), "halfvec": index_mb(conn, HALF)}
            queries = [topic_vector(note(rng)[1], rng) for _ in range(args.queries)]
            full_expr = "embedding <=> %(q)s"
            half_expr = "embedding::halfvec(384) <=> %(q)s::halfvec(384)"
            stats = {"float32": ([], []), "halfvec": ([], [])}
            for q in queries:
                truth = set(top10(conn, q, full_expr, exact=True)[0])
                for name, expr in (("float32", full_expr), ("halfvec", half_expr)):
                    found, ms = top10(conn, q, expr)
                    stats[name][0].append(len(truth & set(found)) / 10)
                    stats[name][1].append(ms)
        out = {
            name: {
                "recall_at_10": round(sum(r) / len(r), 4),
                "p50_ms": round(sorted(ms)[len(ms) // 2], 2),
                "index_mb": sizes[name],
            }
            for name, (r, ms) in stats.items()
        }
        out["halfvec"]["build_seconds"] = round(half_build, 1)
        log(str(out))
    emit({
        "benchmark": "halfvec_recall",
        "rows": args.rows,
        "queries": args.queries,
        "ef_search": 200,
        **out,
        "size_ratio_float32_over_halfvec": round(sizes["float32"] / sizes["halfvec"], 2),
        "recall_delta": round(out["halfvec"]["recall_at_10"] - out["float32"]["recall_at_10"], 4),
        "machine": machine(),
    }, out_path(args.out, "halfvec_recall" + ("" if args.rows == 100_000 else f"_{size_label(args.rows)}")))


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    main()
