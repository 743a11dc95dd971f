"""The semantic channel: each source's nearest rows to the query vector (cosine), planned by `planning`, and
the calibration of cosine similarity onto the scale fusion reads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import psycopg
from psycopg_pool import ConnectionPool

from ..embeddings import Embedder
from ..text.language import language
from ..vocabulary import SOURCES
from .filters import SearchFilters, where_clauses
from .fusion import rescored
from .hits import Hit, hit_from_row
from .planning import PLANS, plan_vector_scan


def _semantic_source(
    conn: psycopg.Connection, source: str, owner: str, qvec: np.ndarray, model: str, f: SearchFilters, k: int,
    answer: bool = False,
) -> list[Hit]:
    params: dict[str, Any] = {"q": qvec, "model": model, "k": k}
    clauses = where_clauses(source, owner, f, params)
    src = SOURCES[source]
    title, body, extra = src.title_sql, src.body_sql, src.extra_sql
    if src.chunked:
        # f.owner_id as well as t.owner_id: the planner can then use the owner's own fragment index
        vclauses = [*clauses, "f.owner_id = %(owner)s", "f.embedding IS NOT NULL", "f.embedding_model = %(model)s"]
        wanted = k * 3  # fragments read, rolled up to their memories
        sql = (
            "WITH frag AS (SELECT f.memory_id, f.embedding <=> %(q)s AS dist FROM fragments f"
            " JOIN memories t ON t.id = f.memory_id JOIN projects p ON p.id = t.project_id"
            f" WHERE {' AND '.join(vclauses)} ORDER BY f.embedding <=> %(q)s LIMIT %(k)s * 3),"
            " best AS (SELECT memory_id, min(dist) AS dist FROM frag GROUP BY memory_id)"
            f" SELECT t.id, {title}, {body}, t.created_at, 1 - best.dist, {extra}, t.avg_embedding,"
            " (SELECT count(*) FROM frag)"
            " FROM best JOIN memories t ON t.id = best.memory_id JOIN projects p ON p.id = t.project_id"
            " ORDER BY best.dist, best.memory_id LIMIT %(k)s"
        )
    else:
        vclauses = [*clauses, "t.embedding IS NOT NULL", "t.embedding_model = %(model)s"]
        wanted = k
        sql = (
            f"SELECT t.id::text, {title}, {body}, t.created_at, 1 - (t.embedding <=> %(q)s), {extra},"
            f" t.embedding FROM {src.from_sql} WHERE {' AND '.join(vclauses)}"
            " ORDER BY t.embedding <=> %(q)s LIMIT %(k)s"
        )
    with conn.transaction():
        plan = plan_vector_scan(conn, source, vclauses, params, wanted, f, answer)
        if plan == "empty":
            return []
        rows = conn.execute(sql, params, binary=True).fetchall()
        found = rows[0][-1] if src.chunked and rows else len(rows)
        PLANS[plan.split("(")[0]] += 1
        if plan.startswith("hnsw") and found < wanted:
            # The index scan came back short: fewer candidates passed the filters than the estimate
            # promised. Rare (stale statistics); answer exactly rather than return too few.
            PLANS["exact-fallback"] += 1
            conn.execute("SET LOCAL enable_indexscan = off")
            rows = conn.execute(sql, params, binary=True).fetchall()
    return [hit_from_row(source, r[:7], semantic=float(r[4])) for r in rows]


def semantic_hits(
    conn: psycopg.Connection, owner: str, qvec: np.ndarray, model: str, f: SearchFilters, k: int,
    answer: bool = False,
) -> list[Hit]:
    """Top-k per source by cosine similarity, merged and sorted (`answer`: see `planning.hnsw_ef`)."""
    hits = [h for s in f.sources for h in _semantic_source(conn, s, owner, qvec, model, f, k, answer)]
    return sorted(hits, key=lambda h: h.score, reverse=True)


_vector_scans = ThreadPoolExecutor(max_workers=8, thread_name_prefix="vector-scan")


def _pooled_source(
    pool: ConnectionPool, source: str, owner: str, qvec: np.ndarray, model: str, f: SearchFilters, k: int,
    answer: bool = False,
) -> list[Hit]:
    with pool.connection() as conn:
        return _semantic_source(conn, source, owner, qvec, model, f, k, answer)


def semantic_channel(
    pool: ConnectionPool, owner: str, qvec: np.ndarray, model: str, f: SearchFilters, k: int,
    answer: bool = False,
) -> list[Hit]:
    """`semantic_hits` with each source's index scan on its own pooled connection, all at once: the scans
    wait on their round trips and on each other's locks apart, so the channel takes about its slowest scan,
    not their sum."""
    if len(f.sources) == 1:
        with pool.connection() as conn:
            return semantic_hits(conn, owner, qvec, model, f, k, answer)
    scans = [_vector_scans.submit(_pooled_source, pool, s, owner, qvec, model, f, k, answer) for s in f.sources]
    hits = [h for scan in scans for h in scan.result()]
    return sorted(hits, key=lambda h: h.score, reverse=True)


def vector_scored(sem: list[Hit], kw: list[Hit], qvec: np.ndarray, memory_qvec: np.ndarray) -> list[Hit]:
    """The keyword hits the semantic channel did not return, scored by their own vector (cosine similarity)
    against the vector their source was searched with: so fusion sees both channels' view of every candidate."""
    seen = {(h.source, h.id) for h in sem}
    out = []
    for h in kw:
        if (h.source, h.id) not in seen and h.embedding is not None:
            similarity = float(np.dot(h.embedding, memory_qvec if h.source == "memory" else qvec))
            out.append(rescored(h, score=similarity, semantic=similarity, keyword=None, keyword_evidence=None))
    return out


def calibrate_semantic(hits: list[Hit], embedder: Embedder, query_lang: str) -> list[Hit]:
    """Map cosine similarity onto [0, 1] for fusion: (sim - floor) / (1 - floor), floored at 0.

    The floor is what the model gives unrelated texts of the query's language (`query_lang`) and the item's
    (`Embedder.floor_for`), so scores are comparable across queries, languages and models.
    """
    return [rescored(h, score=calibrated_similarity(embedder, query_lang, h.text, h.score)) for h in hits]


def calibrated_similarity(embedder: Embedder, query_lang: str, text: str, similarity: float) -> float:
    """One cosine similarity on the calibrated scale: 0 at the model's floor for the language pair."""
    floor = embedder.floor_for(query_lang, language(text))
    return max(0.0, (similarity - floor) / (1.0 - floor)) if floor < 1 else similarity
