"""The keyword channel: BM25 over the keyword table (sql/004), the query's terms weighted and translated
(`query.query_terms`), every filter joined in before the limit; Jaccard over recent rows when the table holds
nothing for the query."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ..infra.db import server_key
from ..text.keywords import jaccard
from ..vocabulary import SOURCES
from .filters import SearchFilters, has_extra_filters, where_clauses
from .fusion import rescored
from .hits import Hit, hit_from_row
from .memo import Memo
from .query import query_terms

BM25_K1, BM25_B = 1.2, 0.75
KEYWORD_SATURATION = 10.0  # BM25 maps onto [0, 1) as bm25 / (bm25 + this) before fusion

# BM25 of each document that holds a query term, from each term's weight `w.qidf` (query weight × idf).
# Exact: every posting, scored with the current average length. Pruned: the best postings of each term by
# stored impact (an index scan), which bounds the work for common terms; used when no filter beyond the
# owner could leave the best postings all filtered out.
KEYWORD_POSTINGS_PER_TERM = 200
# The pruned path ranks documents before checking them against their table (active, owner): it reads this
# many per wanted result (fragments for memories, several of which may roll up to one memory), and re-runs
# unbounded in the rare case that too few of them pass.
KEYWORD_OVERFETCH, KEYWORD_OVERFETCH_FRAGMENTS = 2, 4
_EXACT_DOC = (
    "SELECT k.item_id, sum(w.qidf * k.tf * (%(k1)s + 1)"
    " / (k.tf + %(k1)s * (1 - %(b)s + %(b)s * d.doc_len / stats.avglen))) AS bm25"
    " FROM keywords k JOIN w ON w.keyword = k.keyword"
    " JOIN keyword_docs d ON d.source = k.source AND d.item_id = k.item_id CROSS JOIN stats"
    " WHERE k.owner_id = %(owner)s AND k.source = %(ksource)s GROUP BY k.item_id"
)
_PRUNED_DOC = (
    "SELECT p.item_id, sum(w.qidf * p.impact) AS bm25 FROM w"
    " CROSS JOIN LATERAL (SELECT k.item_id, k.impact FROM keywords k WHERE k.owner_id = %(owner)s"
    "   AND k.source = %(ksource)s AND k.keyword = w.keyword ORDER BY k.impact DESC LIMIT %(per_term)s) p"
    " GROUP BY p.item_id"
)
# Statistics: the stored ones (sql/004_keyword_stats.sql) when the owner has them, else counted live; a
# term's df likewise (only common terms are stored). n is at least df, should the stored n be older.
_BM25_STATS = (
    " stats AS MATERIALIZED (SELECT"
    "   coalesce(s.n::float, (SELECT count(*)::float FROM keyword_docs"
    "            WHERE owner_id = %(owner)s AND source = %(ksource)s)) AS n,"
    "   coalesce(greatest(s.total_len::float / greatest(s.n, 1), 1), (SELECT greatest(avg(doc_len), 1)::float"
    "            FROM keyword_docs WHERE owner_id = %(owner)s AND source = %(ksource)s)) AS avglen"
    "   FROM (SELECT 1) one LEFT JOIN keyword_stats s ON s.owner_id = %(owner)s AND s.source = %(ksource)s),"
    " df AS MATERIALIZED (SELECT q.keyword, q.qw, coalesce("
    "          (SELECT x.df::float FROM keyword_df x WHERE x.owner_id = %(owner)s AND x.source = %(ksource)s"
    "           AND x.keyword = q.keyword),"
    "          (SELECT count(*)::float FROM keywords k WHERE k.owner_id = %(owner)s AND k.source = %(ksource)s"
    "           AND k.keyword = q.keyword)) AS df FROM q),"
    " w AS MATERIALIZED (SELECT df.keyword,"
    "       df.qw * ln(1 + (greatest(stats.n, df.df) - df.df + 0.5) / (df.df + 0.5)) AS qidf"
    "       FROM df CROSS JOIN stats WHERE df.df > 0),"
)


# Whether the owner has anything indexed for the source: the stored statistics first (a key lookup), the
# documents only for an owner whose statistics were never refreshed.
_INDEXED = (
    "SELECT EXISTS (SELECT 1 FROM keyword_stats WHERE owner_id = %(owner)s AND source = %(ksource)s)"
    " OR EXISTS (SELECT 1 FROM keyword_docs WHERE owner_id = %(owner)s AND source = %(ksource)s)"
)
# An owner's keyword index, once seen, is remembered this long; one without is asked every time, so her first
# write is found at once.
INDEXED_SECONDS = 60.0
_indexed = Memo()


def _keyword_indexed(conn: psycopg.Connection, source: str, owner: str) -> bool:
    """Whether the owner has anything keyword-indexed for `source` (remembered once she has)."""
    params = {"owner": owner, "ksource": SOURCES[source].indexed_as}
    key = (*server_key(conn), owner, params["ksource"])
    if _indexed.get(key):
        return True
    if not conn.execute(_INDEXED, params).fetchone()[0]:
        return False
    _indexed.put(key, True, INDEXED_SECONDS)
    return True


def _keyword_source(
    conn: psycopg.Connection, source: str, owner: str, qterms: dict[str, float], f: SearchFilters, k: int
) -> list[Hit]:
    """BM25 over the keyword table (query terms weighted), filters joined in before the limit; for a source
    the owner has keyword-indexed (`_keyword_indexed`).

    Memories are scored by their best fragment, so a long memory does not win by length alone.
    """
    if not qterms:
        return []
    params: dict[str, Any] = {
        "terms": list(qterms),
        "weights": list(qterms.values()),
        "k": k,
        "k1": BM25_K1,
        "b": BM25_B,
        "per_term": max(KEYWORD_POSTINGS_PER_TERM, 4 * k),
        "over": (KEYWORD_OVERFETCH_FRAGMENTS if SOURCES[source].chunked else KEYWORD_OVERFETCH) * k,
    }
    clauses = where_clauses(source, owner, f, params)
    params["ksource"] = SOURCES[source].indexed_as
    if has_extra_filters(f):
        return _keyword_query(conn, source, clauses, params, _EXACT_DOC)[0]
    top = _PRUNED_DOC + " ORDER BY bm25 DESC, item_id LIMIT %(over)s"  # ties by id: the same cut every run
    hits, ranked = _keyword_query(conn, source, clauses, params, top)
    if len(hits) < k and (not hits or ranked >= params["over"]):
        hits = _keyword_query(conn, source, clauses, params, _PRUNED_DOC)[0]  # too few of the best passed
    return hits


def _keyword_query(
    conn: psycopg.Connection, source: str, clauses: list[str], params: dict[str, Any], doc_sql: str
) -> tuple[list[Hit], int]:
    """The hits, and how many ranked documents were checked against the filters to find them."""
    src = SOURCES[source]
    if src.chunked:
        item = "f.memory_id"
        join = f"JOIN fragments f ON f.id = doc.item_id JOIN {src.from_sql} ON t.id = f.memory_id"
    else:
        item = "t.id"
        join = f"JOIN {src.from_sql} ON t.id = doc.item_id::{src.id_type}"
    title, body, extra, emb = src.title_sql, src.body_sql, src.extra_sql, src.vector_sql
    sql = (
        "WITH q AS (SELECT * FROM unnest(%(terms)s::text[], %(weights)s::float8[]) AS q(keyword, qw)),"
        f" {_BM25_STATS}"
        f" doc AS ({doc_sql}),"
        f" scored AS (SELECT {item} AS item_id, max(doc.bm25) AS bm25 FROM doc {join}"
        f"            WHERE {' AND '.join(clauses)} GROUP BY {item} ORDER BY bm25 DESC, {item} LIMIT %(k)s)"
        f" SELECT t.id::text, {title}, {body}, t.created_at, s.bm25, {extra}, {emb}, (SELECT count(*) FROM doc),"
        " (SELECT ln(1 + (greatest(n, 1) - 0.5) / 1.5) FROM stats)"
        f" FROM scored s JOIN {src.from_sql} ON t.id = s.item_id ORDER BY s.bm25 DESC, s.item_id"
    )
    rows = conn.execute(sql, params, binary=True).fetchall()
    hits = [
        hit_from_row(source, r[:7], keyword=float(r[4]), keyword_evidence=float(r[4]) / max(r[8], 1e-9))
        for r in rows
    ]
    return hits, int(rows[0][7]) if rows else 0


def _jaccard_source(
    conn: psycopg.Connection, source: str, owner: str, query: str, f: SearchFilters, k: int, scan: int = 500
) -> list[Hit]:
    """Last-resort fallback when neither vectors nor the keyword table answer: Jaccard over recent rows."""
    params: dict[str, Any] = {"scan": scan}
    clauses = where_clauses(source, owner, f, params)
    src = SOURCES[source]
    title, body, extra, emb = src.title_sql, src.body_sql, src.extra_sql, src.vector_sql
    rows = conn.execute(
        f"SELECT t.id::text, {title}, {body}, t.created_at, 0.0, {extra}, {emb} FROM {src.from_sql}"
        f" WHERE {' AND '.join(clauses)} ORDER BY t.created_at DESC LIMIT %(scan)s",
        params,
        binary=True,
    ).fetchall()
    hits = [hit_from_row(source, r) for r in rows]
    for h in hits:
        h.keyword = jaccard(query, h.text)
        h.score = h.keyword
    hits = [h for h in hits if h.score > 0]
    hits.sort(key=lambda h: h.score, reverse=True)
    return hits[:k]


def keyword_hits(
    conn: psycopg.Connection, owner: str, query: str, f: SearchFilters, k: int, *, generic_plans: bool = False,
    qterms: dict[str, float] | None = None,
) -> list[Hit]:
    """Top-k per source by BM25 (Jaccard over recent rows if the keyword table has nothing). With
    `generic_plans` (`conn` idle), the BM25 queries run in a transaction of their own under a generic plan.
    `qterms`: the query's `query_terms`, when the caller has them already."""
    qterms = query_terms(query) if qterms is None else qterms
    with conn.transaction() if generic_plans else contextlib.nullcontext():
        hits = _bm25_hits(conn, owner, qterms, f, k, generic_plans=generic_plans)
    hits = hits or _jaccard_hits(conn, owner, query, f, k)
    return sorted(hits, key=lambda h: h.score, reverse=True)


def _bm25_hits(
    conn: psycopg.Connection, owner: str, qterms: dict[str, float], f: SearchFilters, k: int, *,
    generic_plans: bool = False,
) -> list[Hit]:
    """BM25 hits for the query terms `qterms` in the sources the owner has keyword-indexed; with
    `generic_plans` (in a transaction), their queries run under a generic plan (`keyword_channel`). Only after
    the checks of which sources are indexed: a generic plan of that check cannot tell an owner with no
    documents, and scans the table to find none."""
    sources = [s for s in f.sources if qterms and _keyword_indexed(conn, s, owner)]
    if generic_plans and sources:
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    return [h for s in sources for h in _keyword_source(conn, s, owner, qterms, f, k)]


def _jaccard_hits(conn: psycopg.Connection, owner: str, query: str, f: SearchFilters, k: int) -> list[Hit]:
    hits = [h for s in f.sources for h in _jaccard_source(conn, s, owner, query, f, k)]
    for h in hits:
        h.extra["matched_by"] = "jaccard"
    return hits


# From this many query terms (translations included: a dialogue, a long prompt, a question whose words have
# several translations) the keyword channel reads its sources at once; below it the extra connections buy nothing.
KEYWORD_FANOUT_TERMS = 24
_keyword_scans = ThreadPoolExecutor(max_workers=8, thread_name_prefix="keyword-scan")


def keyword_channel(pool: ConnectionPool, owner: str, query: str, f: SearchFilters, k: int) -> list[Hit]:
    """`keyword_hits` on a pooled connection, the BM25 queries under a generic plan. Every step of their plans
    is an index lookup by owner, source and term, bounded per term or by the documents ranked, so the plan does
    not depend on how many rows an owner holds: made once per statement and connection, it saves the planning
    of their CTEs. Other queries keep a plan per execution (infra/db._configure): a vector scan's plan must
    follow the owner's rows and `enable_indexscan`.

    A query bringing many terms (`KEYWORD_FANOUT_TERMS`) makes every source's query long, and its sources one
    after the other outlast the semantic channel beside them: they run at once, each on its own pooled
    connection, so the channel takes about its slowest source. The same hits either way; the Jaccard fallback,
    as ever, only when no source has a BM25 hit."""
    qterms = query_terms(query)
    if len(f.sources) > 1 and len(qterms) >= KEYWORD_FANOUT_TERMS:
        scans = [_keyword_scans.submit(_pooled_bm25, pool, owner, qterms, replace(f, sources=(s,)), k)
                 for s in f.sources]
        hits = [h for scan in scans for h in scan.result()]
        if not hits:
            with pool.connection() as conn:
                hits = _jaccard_hits(conn, owner, query, f, k)
        return sorted(hits, key=lambda h: h.score, reverse=True)
    with pool.connection() as conn:
        return keyword_hits(conn, owner, query, f, k, generic_plans=True, qterms=qterms)


def _pooled_bm25(pool: ConnectionPool, owner: str, qterms: dict[str, float], f: SearchFilters, k: int) -> list[Hit]:
    """`_bm25_hits` on a pooled connection, under a generic plan (`keyword_channel`)."""
    with pool.connection() as conn, conn.transaction():
        return _bm25_hits(conn, owner, qterms, f, k, generic_plans=True)


def calibrate_keyword(hits: list[Hit]) -> list[Hit]:
    """Map BM25 onto [0, 1) by saturation, bm25 / (bm25 + KEYWORD_SATURATION); Jaccard is already in [0, 1]."""
    out = []
    for h in hits:
        cal = h.score if h.extra.get("matched_by") == "jaccard" else h.score / (h.score + KEYWORD_SATURATION)
        out.append(rescored(h, score=cal, keyword=cal))
    return sorted(out, key=lambda h: h.score, reverse=True)
