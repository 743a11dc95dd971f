"""Retrieval evaluation on a folder of `memories.jsonl` + `queries.jsonl` (docs/retrieval-quality.md).

The memories are loaded into a throwaway database on the same server (dropped afterwards), embedded
with the configured model and keyword-indexed; each query is answered within its owner by keyword,
semantic, hybrid (weighted and RRF) search and by the context builder's ranking as of `asked_at`.
Every mean comes with a 95 % bootstrap interval over queries, and the fused methods with their paired
difference to the better single channel (`eval_stats`). `save_rankings` writes each query's rankings (dataset
ids) as JSONL; `compare_runs` compares two such files query by query.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

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
from ..text.focus import focus
from ..vocabulary import CONTEXT_MODES, MAX_BUDGET, MIN_BUDGET
from .stats import (
    METRICS,
    N_RESAMPLES,
    SEED,
    paired_by_category,
    query_scores,
    summarise_scores,
)

METHODS = ("keyword", "semantic", "hybrid", "hybrid_no_lift", "hybrid_no_speaker", "hybrid_no_prior",
           "hybrid_no_dates", "hybrid_weighted", "hybrid_rrf", "context", "hybrid_matched")


class Method(NamedTuple):
    """How one search method runs: search mode, fusion, and which hybrid steps are on."""

    mode: str
    fusion: str = "evidence"
    lift: bool = False
    speakers: bool = False
    priors: bool = False
    dates: bool = False


# `hybrid` is the default hybrid search; the others are ablations of it: without the neighbour lift, without the
# named-speaker handling (retrieval/speakers.py), without the turn priors (retrieval/turns.py), without the date
# prior (retrieval/dates.py), with the
# advanced-search spec's weighted fusion and with naive reciprocal-rank fusion, both
# without the lift, the speaker handling and the priors.
SEARCH_METHODS = {
    "keyword": Method("keyword"),
    "semantic": Method("semantic"),
    "hybrid": Method("hybrid", lift=True, speakers=True, priors=True, dates=True),
    "hybrid_no_lift": Method("hybrid", speakers=True, priors=True, dates=True),
    "hybrid_no_speaker": Method("hybrid", lift=True, priors=True, dates=True),
    "hybrid_no_prior": Method("hybrid", lift=True, speakers=True, dates=True),
    "hybrid_no_dates": Method("hybrid", lift=True, speakers=True, priors=True),
    "hybrid_weighted": Method("hybrid", fusion="weighted"),
    "hybrid_rrf": Method("hybrid", fusion="rrf"),
}
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
    session: str | None = None
    """The conversation the query is part of, whose memories it leaves out (`read_dataset`'s `exclude_session`)."""


def _parse_time(value: str) -> datetime:
    ts = datetime.fromisoformat(value)
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def _field(record: dict[str, Any], path: str) -> Any:
    """The value at a dotted `path` of a JSON record (`meta.orig_time`), or None."""
    value: Any = record
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def read_dataset(
    folder: Path, asked_at: str = "asked_at", exclude_session: str | None = None
) -> tuple[list[dict[str, Any]], list[Query]]:
    """Memories and the queries that have gold evidence. `asked_at`: the query field (a dotted path) read as
    the time the question is asked, so nothing written after it is searched (`meta.orig_time` evaluates
    realmem_dev causally, as its README describes). `exclude_session`: the query field naming the conversation
    it is part of, whose memories its searches and builds leave out, as its caller would (`meta.session`)."""
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
            when = _field(q, asked_at)
            if not isinstance(when, str):
                raise ValidationError("asked_at", f"query {q.get('id')!r} in {q_path} has no time at {asked_at!r}")
            try:
                at = _parse_time(when)
            except ValueError:
                raise ValidationError(
                    "asked_at", f"query {q.get('id')!r}: {asked_at} must be an ISO time, got {when!r}"
                ) from None
            session = None
            if exclude_session is not None:
                session = _field(q, exclude_session)
                if not isinstance(session, str) or not session.strip():
                    raise ValidationError("exclude_session",
                                          f"query {q.get('id')!r} in {q_path} has no session at {exclude_session!r}")
            queries.append(Query(q["id"], q["owner"], q["query"], list(q["gold_ids"]), q.get("category", "all"), at,
                                 session))
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
    pool: ConnectionPool,
    memories: Sequence[dict[str, Any]],
    progress: Callable[[int], None] | None = None,
    sessions: bool = True,
) -> None:
    """Insert dataset memories as agent-mem memories (project = the dataset, speaker kept), in file order: with
    `sessions`, a memory's `session` makes it that conversation's next turn (indexed with the previous one)."""
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
                session=m.get("session") if sessions else None,
                summary=m["text"][:200],
                tags=[],
            )
            if progress:
                progress(1)


def rankings(
    pool: ConnectionPool, embedder: Embedder, q: Query, mode: str = "chat", budget: int = EVAL_BUDGET,
    methods: Sequence[str] = METHODS,
) -> dict[str, list[str]]:
    """Top-10 memory ids (as dataset ids) of each of `methods` for one query.

    `context` is what a context build of `mode` within `budget` tokens injects (its memory items, at most
    10); `hybrid_matched` is hybrid search cut to that many items, so the two are compared item for item.
    """
    qvec = embedder.embed_query(focus(q.query).embed_text)  # a long query by its last turns, as search does
    f = SearchFilters(sources=("memory",), as_of=q.asked_at, exclude_session=q.session)
    out: dict[str, list[str]] = {}
    for method, m in SEARCH_METHODS.items():
        if method not in methods:
            continue
        hits = search(
            pool, embedder, q.owner, q.query, mode=m.mode, filters=f, limit=10, fusion=m.fusion,
            query_vector=qvec, neighbours=m.lift, speakers=m.speakers, turn_priors=m.priors, dates=m.dates,
        ).hits
        out[method] = [h.id for h in hits]
    if "context" not in methods:
        return out
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
        exclude_session=q.session,
    )
    out["context"] = [i.id for i in ctx.items if i.source == "memory"][:10]
    if "hybrid" in out:
        out["hybrid_matched"] = out["hybrid"][: len(out["context"])]
    return out


def summarise(
    per_query: list[tuple[Query, dict[str, list[str]]]], n_resamples: int = N_RESAMPLES, seed: int = SEED
) -> dict[str, Any]:
    """recall@5, recall@10 and nDCG@10 per method, overall and per category, each with its 95 % bootstrap
    interval (`recall@10_ci: [lo, hi]`, ...); hybrid and hybrid_rrf also with `vs_best_channel`, their paired
    difference to the better of keyword and semantic (see `eval_stats.summarise_scores`)."""
    methods = [m for m in METHODS if any(m in ranks for _q, ranks in per_query)] or list(METHODS)
    scores: dict[str, dict[str, list[float]]] = {m: {k: [] for k in METRICS} for m in methods}
    for q, ranks in per_query:
        gold = [memory_id_for(g) for g in q.gold]
        for method in methods:
            for metric, value in query_scores(ranks.get(method, []), gold).items():
                scores[method][metric].append(value)
    return summarise_scores([q.category for q, _r in per_query], scores, n_resamples, seed)


def write_rankings(path: Path, per_query: list[tuple[Query, dict[str, list[str]]]], id_map: dict[str, str]) -> None:
    """One JSON line per query: id, owner, category, query, gold (dataset ids) and every method's ranking
    (dataset ids, best first). `id_map` maps stored memory ids back to dataset ids."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for q, ranks in per_query:
            row = {"id": q.id, "owner": q.owner, "category": q.category, "query": q.query, "gold": q.gold,
                   "rankings": {m: [id_map.get(i, i) for i in ranked] for m, ranked in ranks.items()}}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_rankings(path: Path | str) -> dict[str, dict[str, Any]]:
    """A file of `write_rankings`, keyed by query id."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["id"]: r for r in rows}


def compare_runs(
    a_path: Path | str, b_path: Path | str, method: str = "hybrid", metric: str = "recall@10",
    n_resamples: int = N_RESAMPLES, seed: int = SEED,
) -> dict[str, dict[str, Any]]:
    """Run B against run A (two `--save-rankings` files) for one method: per category (and overall) the mean
    of B − A over the queries both runs answered, with its paired 95 % bootstrap interval, both means and n.

    Queries are matched by id (in A's order); their gold evidence must agree.
    """
    a, b = read_rankings(a_path), read_rankings(b_path)
    ids = [i for i in a if i in b]
    if not ids:
        raise ValueError(f"{a_path} and {b_path} share no query id")
    cats, a_vals, b_vals = [], [], []
    for i in ids:
        if sorted(a[i]["gold"]) != sorted(b[i]["gold"]):
            raise ValueError(f"query {i}: the two runs have different gold evidence")
        for run in (a, b):
            if method not in run[i]["rankings"]:
                raise ValueError(f"query {i}: no ranking of method {method!r}")
        cats.append(a[i]["category"])
        a_vals.append(query_scores(a[i]["rankings"][method], a[i]["gold"])[metric])
        b_vals.append(query_scores(b[i]["rankings"][method], b[i]["gold"])[metric])
    return paired_by_category(cats, a_vals, b_vals, n_resamples, seed)


def evaluate(
    server_url: str,
    embedder: Embedder,
    folder: Path,
    bar: Callable[[int, str], Any] | None = None,
    limit: int | None = None,
    mode: str = "chat",
    budget: int = EVAL_BUDGET,
    save_rankings: Path | None = None,
    sessions: bool = True,
    methods: Sequence[str] = METHODS,
    asked_at: str = "asked_at",
    exclude_session: str | None = None,
) -> dict[str, Any]:
    """Run the whole evaluation; returns {method: {category: {metric: value, metric_ci: [lo, hi], n}}}
    (see `summarise`).

    `mode` and `budget` are those of the context builds (default: chat, 32,000 tokens, i.e. no budget cut).
    `save_rankings` is a JSONL file to write every query's rankings to (`write_rankings`). `sessions=False`
    loads the memories without their sessions (no conversation context, nothing to lift): an ablation.
    `methods`: which of METHODS to run (all by default; the dev battery runs the channels, hybrid and context).
    `asked_at`: the query field read as the time each question is asked; `exclude_session`: the query field
    naming its conversation, left out of its searches and builds (`read_dataset`).
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValidationError("methods", f"must be a non-empty subset of {list(METHODS)}, got {unknown}")
    if mode not in CONTEXT_MODES:
        raise ValidationError("mode", f"must be one of {list(CONTEXT_MODES)}")
    if not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise ValidationError("budget", f"must be an integer from {MIN_BUDGET} to {MAX_BUDGET}")
    memories, queries = read_dataset(folder, asked_at, exclude_session)
    if limit:
        queries = queries[:limit]
    with scratch_database(server_url, embedder.dimension, embedder.model_name) as url:
        pool = get_pool(url, max_size=6)
        with _progress(bar, len(memories), "loading") as step:
            load_memories(pool, memories, step, sessions)
        with _progress(bar, len(memories), f"embedding ({embedder.model_name})") as step:
            embed_source(pool, embedder, "fragment", progress=step)
        index_source(pool, "fragment")
        per_query = []
        with _progress(bar, len(queries), "queries") as step:
            for q in queries:
                per_query.append((q, rankings(pool, embedder, q, mode, budget, methods)))
                step(1)
    if save_rankings is not None:
        write_rankings(Path(save_rankings), per_query, {memory_id_for(m["id"]): m["id"] for m in memories})
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


def _ci(ci: Any) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""


def format_table(results: dict[str, Any]) -> str:
    """A plain-text table: one block per category, one row per method (recall@10 with its 95 % interval),
    then hybrid − the better single channel (recall@10) with its paired interval."""
    methods = [m for m in METHODS if m in results] + [m for m in results if m not in METHODS]
    categories = list(results[methods[0]].keys())
    lines = []
    for cat in categories:
        n = results[methods[0]][cat]["n"]
        lines.append(f"\n{cat} (n={n})")
        lines.append(f"  {'method':<15}{'recall@5':>9}  {'recall@10 [95% CI]':<22}{'nDCG@10':>8}")
        for method in methods:
            m = results[method][cat]
            r10 = f"{m['recall@10']:.3f} {_ci(m.get('recall@10_ci'))}"
            lines.append(f"  {method:<15}{m['recall@5']:>9.3f}  {r10:<22}{m['ndcg@10']:>8.3f}")
        for method in methods:
            vs = results[method][cat].get("vs_best_channel", {}).get("recall@10")
            if vs:
                lines.append(f"  {method} − best channel ({vs['best_channel']}), recall@10: "
                             f"{vs['diff']:+.3f} {_ci(vs['ci'])}")
    return "\n".join(lines)
