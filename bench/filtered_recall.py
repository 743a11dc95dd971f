"""Filtered-search recall@10 against exact search at owner selectivity 100 %, 10 %, 1 % and 0.1 %.

100k fake-embedded learnings of one owner (100 %) and 100k tasks split 10 % / 1 % / 0.1 % / rest among
four owners. For each selectivity, 50 queries: the project's `search` (semantic mode: an owner over the
exact-scan cap searches her own HNSW graph, a smaller one is scanned exactly) and a plain `ORDER BY
embedding <=> q LIMIT 10` with the same owner filter on a plain pgvector table (the baseline: a copy of the
same rows under one whole-table HNSW index, pgvector defaults), both compared with an exact scan: recall@10
is the share of the exact ten found; `_ties` also counts a result within 0.001 cosine distance of the exact
tenth (ann-benchmarks' k-nn recall), since the vectors' 10th and 11th neighbours are often 0.0003 apart.
Vectors have the bundled model's geometry (`fit_geometry.py`; BENCH_GEOMETRY=isotropic for isotropic ones).
Prints one JSON object on its last line and writes it to
bench/results/filtered_recall[_<rows>].json (`--out`).

    python bench/filtered_recall.py [--rows 100000] [--queries 50]
"""

from __future__ import annotations

import argparse
import random
import time

from _common import (
    GEOMETRY,
    LOADS,
    add_out_argument,
    database_size,
    emit,
    geometry_suffix,
    index_memory,
    load_tasks,
    loaded_facts,
    log,
    machine,
    note,
    out_path,
    record_loaded,
    scratch,
    size_label,
    topic_vector,
)

from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.index.owner_indexes import existing_owner_indexes
from memory_pipelines.infra.db import connect, get_pool
from memory_pipelines.infra.embedded import exit_on_termination
from memory_pipelines.retrieval.planning import PLANS
from memory_pipelines.retrieval.search import SearchFilters, search

# ann-benchmarks' k-nn recall also counts a result no farther than the exact 10th one plus this (cosine
# distance): near-ties at rank 10 (0.1088 against 0.1091) then do not count as misses.
TIE_EPSILON = 1e-3
_NEAREST = "SELECT id::text, embedding <=> %s FROM {} WHERE owner_id = %s ORDER BY embedding <=> %s LIMIT 10"


def exact(conn, table: str, owner: str, q) -> list[tuple[str, float]]:
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        return conn.execute(_NEAREST.format(table), (q, owner, q)).fetchall()


def plain(conn, table: str, owner: str, q) -> tuple[list[tuple[str, float]], float]:
    """The baseline's ten and its milliseconds, on what a plain pgvector table has: `<table>_plain`, the same
    ids, owners and vectors under one HNSW index of the whole table (`plain_copy`), at pgvector's defaults."""
    t = time.perf_counter()
    rows = conn.execute(_NEAREST.format(f"{table}_plain"), (q, owner, q)).fetchall()
    return rows, (time.perf_counter() - t) * 1000


def plain_copy(url: str, table: str, rows: int) -> float:
    """`<table>_plain`: a copy of the table's ids, owners and vectors with one whole-table HNSW index and a btree
    on the owner, as a hand-rolled pgvector table has (the project's tables have the owners' graphs only,
    migration 012); the seconds it took."""
    t = time.perf_counter()
    with connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}_plain")
        conn.execute(f"CREATE TABLE {table}_plain AS SELECT id, owner_id, embedding FROM {table}")
        conn.execute(f"SET maintenance_work_mem = '{index_memory(rows)}'")
        conn.execute(f"CREATE INDEX ON {table}_plain USING hnsw (embedding vector_cosine_ops)")
        plain_owner_index(conn, table)
        conn.execute(f"VACUUM ANALYZE {table}_plain")
    return time.perf_counter() - t


def plain_owner_index(conn, table: str) -> bool:
    """The plain copy's btree on the owner (a small owner's rows are read by it and sorted, as on any table);
    True when it was missing and is built now."""
    if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{table}_plain_owner",)).fetchone()[0]:
        return False
    conn.execute(f"CREATE INDEX {table}_plain_owner ON {table}_plain (owner_id)")
    return True


def recalls(truth: list[tuple[str, float]], got: list[tuple[str, float]]) -> tuple[float, float]:
    """(share of the exact ten found, share of results within TIE_EPSILON of the exact tenth)."""
    wanted = max(1, min(10, len(truth)))
    ids = {i for i, _ in truth}
    kth = truth[-1][1] + TIE_EPSILON if truth else 0.0
    return len(ids & {i for i, _ in got}) / wanted, min(1.0, sum(1 for _, d in got[:10] if d <= kth) / wanted)


def measure(pool, embedder, table: str, source: str, owner: str, queries) -> dict:
    ours_r, plain_r, ours_tie, plain_tie, ours_ms, plain_ms = [], [], [], [], [], []
    for q in queries:
        with pool.connection() as conn:
            truth = exact(conn, table, owner, q)
            base, ms = plain(conn, table, owner, q)
            plain_ms.append(ms)
        t = time.perf_counter()
        hits = search(
            pool,
            embedder,
            owner,
            "q",
            mode="semantic",
            filters=SearchFilters(sources=(source,)),
            limit=10,
            query_vector=q,
        ).hits
        ours_ms.append((time.perf_counter() - t) * 1000)
        strict, tied = recalls(truth, [(h.id, 1 - h.score) for h in hits])
        ours_r.append(strict)
        ours_tie.append(tied)
        strict, tied = recalls(truth, base)
        plain_r.append(strict)
        plain_tie.append(tied)
    return {
        "recall_at_10": round(sum(ours_r) / len(ours_r), 4),
        "baseline_recall_at_10": round(sum(plain_r) / len(plain_r), 4),
        "recall_at_10_ties": round(sum(ours_tie) / len(ours_tie), 4),
        "baseline_recall_at_10_ties": round(sum(plain_tie) / len(plain_tie), 4),
        "p50_ms": round(sorted(ours_ms)[len(ours_ms) // 2], 2),
        "p90_ms": round(sorted(ours_ms)[int(len(ours_ms) * 0.9)], 2),
        "baseline_p50_ms": round(sorted(plain_ms)[len(plain_ms) // 2], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument(
        "--warmup", type=int, default=0, help="searches (other queries) at each selectivity before measuring"
    )
    parser.add_argument(
        "--keep", metavar="NAME", help="keep the loaded database as NAME_<rows> and reuse it on the next run"
    )
    add_out_argument(parser)
    args = parser.parse_args()
    n = args.rows
    out = out_path(args.out, "filtered_recall" + ("" if n == 100_000 else f"_{size_label(n)}") + geometry_suffix())
    split = [("s10", n // 10), ("s1", n // 100), ("s01", n // 1000)]
    split.append(("rest", n - sum(c for _, c in split)))
    rng = random.Random(11)
    with scratch(keep=f"{args.keep}_{n}" if args.keep else None) as url:
        loads = loaded_facts(url, "filtered_recall")
        if loads is None or "plain_copies" not in loads:  # a kept database without the plain copies: load anew
            log(f"loading {n} learnings of one owner (selectivity 100 %) and {n} tasks of four owners")
            load_tasks(url, n, [("all", n)], seed=3, table="learnings")  # and the owners' graphs
            load_tasks(url, n, split, seed=4, table="tasks")
            copies = {}
            for table in ("learnings", "tasks"):
                log(f"the baseline's plain copy of {table} (one whole-table HNSW index)")
                copies[table] = round(plain_copy(url, table, n), 1)
            with connect(url, autocommit=True) as conn:
                graphs = {t: len(existing_owner_indexes(conn, t)) for t in ("learnings", "tasks")}
            loads = {"loads": LOADS[-2:], "owner_graphs": graphs, "plain_copies": copies}
            record_loaded(url, "filtered_recall", loads)
        with connect(url, autocommit=True) as conn:  # a kept copy that lacks its owner btree gets one
            for table in ("learnings", "tasks"):
                if plain_owner_index(conn, table):
                    conn.execute(f"ANALYZE {table}_plain")
        embedder = FakeEmbedder(384)
        pool = get_pool(url)
        size = database_size(url)
        busy_before = machine()
        queries = [topic_vector(note(rng)[1], rng) for _ in range(args.queries)]
        results = {}
        for label, table, source, owner in [
            ("100%", "learnings", "learning", "all"),
            ("10%", "tasks", "task", "s10"),
            ("1%", "tasks", "task", "s1"),
            ("0.1%", "tasks", "task", "s01"),
        ]:
            warm = random.Random(7)
            for _ in range(args.warmup):
                search(pool, embedder, owner, "q", mode="semantic", filters=SearchFilters(sources=(source,)),
                       limit=10, query_vector=topic_vector(note(warm)[1], warm))
            PLANS.clear()
            results[label] = measure(pool, embedder, table, source, owner, queries)
            results[label]["plans"] = dict(PLANS)  # how each vector scan ran; exact-fallback: came back short
            log(f"{label}: {results[label]}")
    emit(
        {
            "benchmark": "filtered_recall",
            "rows": n,
            "loads": loads["loads"],
            "owner_graphs": loads["owner_graphs"],
            "plain_copies_seconds": loads["plain_copies"],
            "database_size": size,
            "machine_before": busy_before,
            "machine_after": machine(),
            "queries": args.queries,
            "warmup_searches": args.warmup,
            "selectivity": results,
            "min_recall": min(r["recall_at_10"] for r in results.values()),
            "min_baseline_recall": min(r["baseline_recall_at_10"] for r in results.values()),
            "min_recall_ties": min(r["recall_at_10_ties"] for r in results.values()),
            "tie_epsilon": TIE_EPSILON,
            "geometry": GEOMETRY,
            "recall_ratio_min": round(
                min(r["recall_at_10"] for r in results.values())
                / max(min(r["baseline_recall_at_10"] for r in results.values()), 1e-9),
                3,
            ),
        },
        out,
    )


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    main()
