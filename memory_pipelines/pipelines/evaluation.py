"""Retrieval evaluation on a folder of `memories.jsonl` + `queries.jsonl` (docs/architecture.md, "Benchmarks").

The memories are loaded into a throwaway database on the same server (dropped afterwards), embedded
with the configured model and keyword-indexed; each query is answered within its owner by keyword,
semantic, hybrid (weighted and RRF) search and by the context builder's ranking as of `asked_at`.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from psycopg.conninfo import make_conninfo
from psycopg_pool import ConnectionPool

from ..context.builder import build_memory_context
from ..embeddings import Embedder
from ..index.keywords import index_source
from ..index.vectors import embed_source
from ..infra.db import close_pool, connect, get_pool
from ..infra.errors import ValidationError
from ..infra.migrate import migrate
from ..retrieval.search import SearchFilters, search
from ..store.memories import insert_memory
from ..store.projects import ensure_project
from ..vocabulary import CONTEXT_MODES, MAX_BUDGET, MIN_BUDGET

METHODS = ("keyword", "semantic", "hybrid", "hybrid_rrf", "context", "hybrid_matched")
KS = (5, 10)
EVAL_BUDGET = MAX_BUDGET  # no budget cut unless asked


@dataclass
class Query:
    id: str
    owner: str
    query: str
    gold: list[str]
    category: str
    asked_at: datetime


def _parse_time(value: str) -> datetime:
    ts = datetime.fromisoformat(value)
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def read_dataset(folder: Path) -> tuple[list[dict[str, Any]], list[Query]]:
    """Memories and the queries that have gold evidence."""
    mem_path, q_path = folder / "memories.jsonl", folder / "queries.jsonl"
    for path in (mem_path, q_path):
        if not path.is_file():
            raise ValidationError(
                "DIR", f"{path} is missing; the folder needs memories.jsonl and queries.jsonl"
            )
    memories = [
        json.loads(line) for line in mem_path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    queries = []
    for line in q_path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        if q.get("gold_ids"):
            queries.append(
                Query(
                    q["id"],
                    q["owner"],
                    q["query"],
                    list(q["gold_ids"]),
                    q.get("category", "all"),
                    _parse_time(q["asked_at"]),
                )
            )
    return memories, queries


def memory_id_for(eval_id: str) -> str:
    """The stored memory id of a dataset memory id (stable)."""
    return "mem_" + hashlib.sha1(eval_id.encode()).hexdigest()[:20]


@contextmanager
def scratch_database(server_url: str, dimension: int, model: str) -> Iterator[str]:
    """A new, migrated database on the same server, dropped on exit."""
    name = f"mp_eval_{uuid.uuid4().hex[:10]}"
    with connect(server_url, vector=False, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo(server_url, dbname=name)
    try:
        migrate(url, dimension, model)
        yield url
    finally:
        close_pool(url)
        with connect(server_url, vector=False, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def load_memories(
    pool: ConnectionPool, memories: Sequence[dict[str, Any]], progress: Callable[[int], None] | None = None
) -> None:
    """Insert dataset memories as agent-mem memories (project = the dataset, speaker kept)."""
    with pool.connection() as conn, conn.transaction():
        projects: dict[str, str] = {}
        for m in memories:
            owner = m["owner"]
            if owner not in projects:
                projects[owner] = ensure_project(conn, owner, "dataset", "dataset")
            insert_memory(
                conn,
                memory_id=memory_id_for(m["id"]),
                owner_id=owner,
                project_id=projects[owner],
                content_type="insight",
                content=m["text"],
                created_at=_parse_time(m["created_at"]),
                speaker=m.get("speaker"),
                metadata={"eval_id": m["id"], "session": m.get("session")},
                summary=m["text"][:200],
                tags=[],
            )
            if progress:
                progress(1)


def recall_at(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """|gold ∩ top-k| / |gold|."""
    return len(set(ranked[:k]) & set(gold)) / len(set(gold))


def ndcg_at(ranked: Sequence[str], gold: Sequence[str], k: int = 10) -> float:
    """Binary-relevance nDCG@k."""
    gold_set = set(gold)
    dcg = sum(1 / math.log2(i + 2) for i, item in enumerate(ranked[:k]) if item in gold_set)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold_set), k)))
    return dcg / ideal if ideal else 0.0


def rankings(
    pool: ConnectionPool, embedder: Embedder, q: Query, mode: str = "chat", budget: int = EVAL_BUDGET
) -> dict[str, list[str]]:
    """Top-10 memory ids (as dataset ids) of every method for one query.

    `context` is what a context build of `mode` within `budget` tokens injects (its memory items, at most
    10); `hybrid_matched` is hybrid search cut to that many items, so the two are compared item for item.
    """
    qvec = embedder.embed_query(q.query)
    f = SearchFilters(sources=("memory",), as_of=q.asked_at)
    out: dict[str, list[str]] = {}
    for method, search_mode, fusion in (
        ("keyword", "keyword", "weighted"),
        ("semantic", "semantic", "weighted"),
        ("hybrid", "hybrid", "weighted"),
        ("hybrid_rrf", "hybrid", "rrf"),
    ):
        hits = search(
            pool, embedder, q.owner, q.query, mode=search_mode, filters=f, limit=10, fusion=fusion,
            query_vector=qvec,
        ).hits
        out[method] = [h.id for h in hits]
    ctx = build_memory_context(
        pool,
        embedder,
        q.owner,
        q.query,
        mode=mode,
        token_budget=budget,
        as_of=q.asked_at,
        query_vector=qvec,
        log_build=False,
    )
    out["context"] = [i.id for i in ctx.items if i.source == "memory"][:10]
    out["hybrid_matched"] = out["hybrid"][: len(out["context"])]
    return out


def summarise(per_query: list[tuple[Query, dict[str, list[str]]]]) -> dict[str, Any]:
    """recall@5, recall@10 and nDCG@10 per method, overall and per category."""
    sums: dict[str, dict[str, dict[str, float]]] = {
        m: defaultdict(lambda: defaultdict(float)) for m in METHODS
    }
    counts: dict[str, int] = defaultdict(int)
    for q, ranks in per_query:
        gold = [memory_id_for(g) for g in q.gold]
        for method, ranked in ranks.items():
            for cat in ("overall", q.category):
                s = sums[method][cat]
                s["recall@5"] += recall_at(ranked, gold, 5)
                s["recall@10"] += recall_at(ranked, gold, 10)
                s["ndcg@10"] += ndcg_at(ranked, gold, 10)
        counts["overall"] += 1
        counts[q.category] += 1
    return {
        method: {
            cat: {metric: round(v / counts[cat], 4) for metric, v in metrics.items()} | {"n": counts[cat]}
            for cat, metrics in by_cat.items()
        }
        for method, by_cat in sums.items()
    }


def evaluate(
    server_url: str,
    embedder: Embedder,
    folder: Path,
    bar: Callable[[int, str], Any] | None = None,
    limit: int | None = None,
    mode: str = "chat",
    budget: int = EVAL_BUDGET,
) -> dict[str, Any]:
    """Run the whole evaluation; returns {method: {category: {metric: value, n}}}.

    `mode` and `budget` are those of the context builds (default: chat, 32,000 tokens, i.e. no budget cut).
    """
    if mode not in CONTEXT_MODES:
        raise ValidationError("mode", f"must be one of {list(CONTEXT_MODES)}")
    if not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise ValidationError("budget", f"must be an integer from {MIN_BUDGET} to {MAX_BUDGET}")
    memories, queries = read_dataset(folder)
    if limit:
        queries = queries[:limit]
    with scratch_database(server_url, embedder.dimension, embedder.model_name) as url:
        pool = get_pool(url, max_size=6)
        with _progress(bar, len(memories), "loading") as step:
            load_memories(pool, memories, step)
        with _progress(bar, len(memories), f"embedding ({embedder.model_name})") as step:
            embed_source(pool, embedder, "fragment", progress=step)
        index_source(pool, "fragment")
        per_query = []
        with _progress(bar, len(queries), "queries") as step:
            for q in queries:
                per_query.append((q, rankings(pool, embedder, q, mode, budget)))
                step(1)
        return summarise(per_query)


@contextmanager
def _progress(
    bar: Callable[[int, str], Any] | None, total: int, desc: str
) -> Iterator[Callable[[int], None]]:
    if bar is None:
        yield lambda n: None
        return
    with bar(total, desc) as b:
        yield b.update


def format_table(results: dict[str, Any]) -> str:
    """A plain-text table: one block per category, one row per method."""
    categories = list(next(iter(results.values())).keys())
    lines = []
    for cat in categories:
        n = results[METHODS[0]][cat]["n"]
        lines.append(f"\n{cat} (n={n})")
        lines.append(f"  {'method':<12}{'recall@5':>10}{'recall@10':>11}{'nDCG@10':>10}")
        for method in METHODS:
            m = results[method][cat]
            lines.append(f"  {method:<12}{m['recall@5']:>10.3f}{m['recall@10']:>11.3f}{m['ndcg@10']:>10.3f}")
    return "\n".join(lines)
