"""Search over tasks, learnings, capabilities and memories: semantic, keyword (BM25) and hybrid.

Every query is scoped to one owner, and every filter (sources, memory types, project, time range,
as-of time) is applied inside the SQL, before the limit. Vector search chooses its plan by how many
rows the filters leave: an exact scan when few, the owner's own HNSW graph when many (with a candidate
list widened for the filters beyond the owner, and pgvector 0.8's iterative scan).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
from psycopg_pool import ConnectionPool

from ..embeddings import Embedder, EmbeddingError
from ..embeddings.base import to_array
from ..index.owner_indexes import has_owner_index
from ..infra.db import pgvector_version, reading, server_key
from ..infra.errors import ValidationError, check_storable
from ..text.dictionary import expand_terms
from ..text.focus import focus
from ..text.glossary import expand
from ..text.keywords import has_cjk, jaccard
from ..vocabulary import CONTENT_TYPES, EXACT_SCAN_MAX_ROWS, RANKED_SOURCES, SEARCH_MODES, SEARCH_SOURCES, SOURCES
from .exchanges import Exchanges, read_exchanges
from .fusion import FUSIONS, SEMANTIC_WEIGHT, rescored
from .neighbours import NEIGHBOUR_TOP, lifted
from .speakers import boosted, named_speaker, without_speaker
from .turns import weighed

log = logging.getLogger(__name__)

PLANS: Counter[str] = Counter()
"""Vector scans of this process by plan (exact, hnsw-owner, exact-unindexed, empty, exact-fallback): the benches
report how often an index scan came back short and was answered exactly."""

# Hybrid search reads this many candidates per channel and source; and how each channel's score maps to
# [0, 1] before fusion. Chosen on the LoCoMo dev folder (README, "Retrieval quality: what each step did").
HYBRID_MIN_DEPTH, HYBRID_MAX_DEPTH = 50, 200
KEYWORD_SATURATION = 10.0
# HNSW candidate list (ef_search) for an unfiltered search: pgvector's default (40) found 95 % of the exact
# top 10 at 100k rows; 200 found 99.2 %. A larger graph needs more for the same recall (1M rows: 0.97 at 200,
# 0.993 at 400), so the floor doubles for every tenfold of the table above 100k rows. A filter passing a
# fraction s of the rows divides what the list yields by s, so the list is divided by s too, up to
# pgvector's maximum.
HNSW_MIN_EF, HNSW_MAX_EF = 200, 1000
HNSW_EF_BASE_ROWS = 100_000
# A list that is itself the answer (semantic search: its top k are shown as they come) must hold the exact top
# k, and a larger graph needs a longer list for that than the doubling above gives: a whole owner's top 10 at
# 1M rows was found 0.980 / 0.989 / 0.994 at ef_search 400 / 700 / 1,000 (bench/filtered_recall.py, 100
# queries). Its floor grows as rows ** 0.7 instead: 200 at 100k, 1,000 at 1M. Deep lists that fusion re-ranks
# (hybrid search, the context build) keep the doubling, which their measured quality needs no more than.
HNSW_ANSWER_EF_EXPONENT = 0.7
# Candidates read per wanted result, before the division by selectivity: the deep lists of hybrid search (60
# memories, 180 fragments) need no more than twice their length. 4 made the 1M context build's fragment scan
# 720 wide for the same top 10 (bench/context_latency.py at 1M: that scan's p50 24 → 18 ms with 2).
HNSW_EF_PER_RESULT = 2
BM25_K1, BM25_B = 1.2, 0.75


@dataclass(frozen=True)
class SearchFilters:
    """Filters applied inside every query. `memory_types` keeps only memories of those content types."""

    sources: tuple[str, ...] = SEARCH_SOURCES
    memory_types: tuple[str, ...] | None = None
    project: str | None = None
    time_range_days: float | None = None
    as_of: datetime | None = None

    def validated(self) -> SearchFilters:
        bad = [s for s in self.sources if s not in RANKED_SOURCES]
        if bad or not self.sources:
            raise ValidationError(
                "sources", f"must be a non-empty subset of {list(RANKED_SOURCES)}, got {bad}"
            )
        if self.memory_types is not None:
            wrong = [t for t in self.memory_types if t not in CONTENT_TYPES]
            if wrong or not self.memory_types:
                raise ValidationError("memory_types", f"must be a non-empty subset of {list(CONTENT_TYPES)}")
        if self.time_range_days is not None and not self.time_range_days > 0:
            raise ValidationError("time_range_days", "must be a positive number of days")
        sources = self.sources
        if self.memory_types is not None:
            chunked = tuple(s for s in SEARCH_SOURCES if SOURCES[s].chunked)  # content types are theirs
            sources = tuple(s for s in sources if s in chunked) or chunked
        return replace(self, sources=sources)


@dataclass
class Hit:
    """One search result; `score` is the final (fused) score, the others its parts."""

    source: str
    id: str
    title: str
    preview: str
    score: float
    created_at: datetime | None = None
    semantic: float | None = None
    keyword: float | None = None
    keyword_evidence: float | None = None
    """The keyword match as a share of what one query term found in a single document would score in this
    corpus (BM25 / ln(1 + (N − 0.5) / 1.5), N the owner's documents): comparable across corpus sizes, where
    BM25 itself is not (in a corpus of two, no match reaches 1). The relevance floor reads it."""
    text: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    embedding: np.ndarray | None = None


@dataclass
class SearchResult:
    hits: list[Hit]
    mode: str
    degraded: str | None = None


def _where(source: str, owner: str, f: SearchFilters, params: dict) -> list[str]:
    """WHERE clauses (with their parameters added to `params`) for one source."""
    params["owner"] = owner
    src = SOURCES[source]
    clauses = ["t.owner_id = %(owner)s", src.active_sql]
    if f.project is not None:
        params["project"] = f.project
        clauses.append(f"{src.project_sql} = %(project)s" if src.project_sql else "false")
    if f.memory_types is not None and src.chunked:
        params["memory_types"] = list(f.memory_types)
        clauses.append("t.content_type = ANY(%(memory_types)s)")
    if f.as_of is not None:
        params["as_of"] = f.as_of
        clauses.append("t.created_at <= %(as_of)s")
    if f.time_range_days is not None:
        params["since"] = (f.as_of or datetime.now(UTC)) - timedelta(days=f.time_range_days)
        clauses.append("t.created_at >= %(since)s")
    return clauses


def _from(source: str) -> str:
    return SOURCES[source].from_sql


def _count_capped(conn: psycopg.Connection, table: str, clauses: list[str], params: dict, cap: int) -> int:
    """min(rows matching, cap + 1): stops reading once the answer is known to be over the cap."""
    sql = f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {' AND '.join(clauses)} LIMIT {int(cap) + 1}) s"
    return int(conn.execute(sql, params).fetchone()[0])


class _Memo:
    """Values remembered per key for a while (one process, all threads); bounded: once it holds
    MAX_ENTRIES, the expired ones are forgotten."""

    MAX_ENTRIES = 10_000

    def __init__(self) -> None:
        self.entries: dict[tuple[Any, ...], tuple[Any, float]] = {}

    def get(self, key: tuple[Any, ...]) -> Any:
        value, until = self.entries.get(key, (None, 0.0))
        return value if until > time.monotonic() else None

    def put(self, key: tuple[Any, ...], value: Any, seconds: float) -> None:
        now = time.monotonic()
        if len(self.entries) >= self.MAX_ENTRIES:
            for stale in [k for k, (_, until) in list(self.entries.items()) if until <= now]:  # a copy: threads add
                self.entries.pop(stale, None)
        self.entries[key] = (value, now + seconds)

    def clear(self) -> None:
        self.entries.clear()


# What chooses a search's plan is remembered for a while, so every search of an owner does not repeat it: her
# row count (an index read of up to cap + 1 entries, 1.5-3 ms), and for an unfiltered index scan its
# candidate list (the planner's estimate and the table's size). An owner over the exact-scan cap is taken to
# stay over it OVER_CAP_SECONDS: should she shrink below it meanwhile, the index scan comes back short and is
# answered exactly. One under it, with rows, UNDER_CAP_SECONDS: should she grow past it meanwhile, her scans
# stay exact (slower, never wrong). An owner without rows is counted every time, so her first write is found
# at once. Whether an owner has a keyword index for a source is remembered the same way, once she has.
OVER_CAP_SECONDS = 60.0
UNDER_CAP_SECONDS = 10.0
_counts = _Memo()
_index_lists = _Memo()
_indexed = _Memo()
_owner_indexes = _Memo()


def _has_owner_index(conn: psycopg.Connection, table: str, owner: str) -> bool:
    """`has_owner_index`, remembered OVER_CAP_SECONDS: an index built or dropped meanwhile is seen that much
    later (either way the answer is right; only the candidate list is sized for the other graph)."""
    key = (*server_key(conn), table, owner)
    known = _owner_indexes.get(key)
    if known is None:
        known = has_owner_index(conn, table, owner)
        _owner_indexes.put(key, known, OVER_CAP_SECONDS)
    return known


def _owner_rows_capped(conn: psycopg.Connection, table: str, counted: str | None, params: dict, cap: int) -> int:
    """`_count_capped` of the owner's rows in `table` (those passing `counted` too, if given), remembered while
    it is not 0 (see `_Memo` above)."""
    key = (*server_key(conn), table, counted, params["owner"], cap)
    rows = _counts.get(key)
    if rows is None:
        rows = _count_capped(conn, f"{table} t", ["t.owner_id = %(owner)s", counted or "true"], params, cap)
        if rows:
            _counts.put(key, rows, OVER_CAP_SECONDS if rows > cap else UNDER_CAP_SECONDS)
    return rows


def _has_extra_filters(f: SearchFilters) -> bool:
    """Filters beyond the owner that can make the set much smaller than the owner's rows."""
    return any(x is not None for x in (f.project, f.memory_types, f.time_range_days, f.as_of))


def _estimate_rows(conn: psycopg.Connection, table: str, clauses: list[str], params: dict) -> float:
    """The planner's estimate of how many rows match (from the table's statistics; no rows are read)."""
    plan = conn.execute(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {table} WHERE {' AND '.join(clauses)}", params)
    return float(plan.fetchone()[0][0]["Plan"]["Plan Rows"])


def hnsw_ef(k: int, selectivity: float, table_rows: float, *, answer: bool = False) -> int:
    """ef_search for `k` results from an HNSW graph of `table_rows` rows under a filter passing `selectivity`
    of them: the unfiltered list (the size-scaled floor, or HNSW_EF_PER_RESULT per result) divided by the
    selectivity, within pgvector's maximum. `answer`: the list is the answer itself, not a pool that fusion
    re-ranks, and gets the steeper floor (HNSW_ANSWER_EF_EXPONENT)."""
    growth = max(1.0, table_rows / HNSW_EF_BASE_ROWS)
    floor = HNSW_MIN_EF * (growth**HNSW_ANSWER_EF_EXPONENT if answer else 2 ** math.log10(growth))
    unfiltered = max(floor, HNSW_EF_PER_RESULT * k)
    return int(min(HNSW_MAX_EF, unfiltered / max(selectivity, 1e-9)))


def _plan_vector_scan(
    conn: psycopg.Connection, source: str, clauses: list[str], params: dict, k: int, f: SearchFilters,
    answer: bool = False,
) -> str:
    """Choose an exact scan or the owner's own HNSW graph for this filtered set; set the knobs for it
    (transaction-local).

    The owner's rows are counted first (an index-only count, stopped at the cap); only when extra
    filters are present is the filtered set counted. Up to EXACT_SCAN_MAX_ROWS rows an exact scan is
    cheap and exact. Above it the owner searches her own graph (index/owner_indexes.py), its candidate list
    growing with 1 / the share of her rows the filters pass (the planner's estimate, never below the cap,
    which the count has shown is exceeded). Should the estimate be too high and the index scan come back
    short, the caller re-runs the query as an exact scan (`_semantic_source`). An owner over the cap whose
    graph is not built yet is scanned exactly ("exact-unindexed"): right, and slower, until it is.
    """
    src = SOURCES[source]
    table = "fragments" if src.chunked else src.table
    cap = EXACT_SCAN_MAX_ROWS
    filtered = _owner_rows_capped(conn, table, src.active_sql if src.active_counted else None, params, cap)
    joined = (
        f"fragments f JOIN {_from(source)} ON t.id = f.memory_id" if src.chunked else _from(source)
    )
    filters_beyond_owner = _has_extra_filters(f)
    if filtered > cap and filters_beyond_owner:
        filtered = _count_capped(conn, joined, clauses, params, cap)
    if filtered == 0:
        return "empty"
    if filtered <= cap:
        conn.execute("SET LOCAL enable_indexscan = off")
        return "exact"
    if not _has_owner_index(conn, table, params["owner"]):
        _warn_unindexed(table, params["owner"])
        conn.execute("SET LOCAL enable_indexscan = off")
        return "exact-unindexed"
    key = (*server_key(conn), table, params["owner"], cap, k, answer)
    ef = None if filters_beyond_owner else _index_lists.get(key)
    if ef is None:
        estimate = max(float(cap + 1), _estimate_rows(conn, joined, clauses, params))
        rows = estimate  # her own graph: her rows, of which the filters pass some
        if filters_beyond_owner:
            rows = max(estimate, _estimate_rows(conn, f"{table} t", ["t.owner_id = %(owner)s"], params))
        ef = hnsw_ef(k, min(1.0, estimate / max(rows, 1.0)), rows, answer=answer)
        if not filters_beyond_owner:
            _index_lists.put(key, ef, OVER_CAP_SECONDS)
    settings = "set_config('hnsw.ef_search', %s, true)"
    if pgvector_version(conn) >= (0, 8):  # a filter on her graph can still leave the list short
        settings += ", set_config('hnsw.iterative_scan', 'relaxed_order', true)"
    conn.execute(f"SELECT {settings}", (str(ef),))  # one round trip for both (transaction-local, as SET LOCAL)
    return f"hnsw-owner(ef={ef})"


_unindexed_warned: set[tuple[str, str]] = set()


def _warn_unindexed(table: str, owner: str) -> None:
    """Say once per process that an owner over the cap has no graph of her own yet."""
    if (table, owner) not in _unindexed_warned:
        _unindexed_warned.add((table, owner))
        log.warning("owner %r holds over %s embedded rows of %s and has no HNSW index of her own yet: her vector "
                    "searches scan exactly until `embed`, `migrate` or the vector_indexes asset builds it",
                    owner, EXACT_SCAN_MAX_ROWS, table)


def _semantic_source(
    conn: psycopg.Connection, source: str, owner: str, qvec: np.ndarray, model: str, f: SearchFilters, k: int,
    answer: bool = False,
) -> list[Hit]:
    params: dict[str, Any] = {"q": qvec, "model": model, "k": k}
    clauses = _where(source, owner, f, params)
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
            f" t.embedding FROM {_from(source)} WHERE {' AND '.join(vclauses)}"
            " ORDER BY t.embedding <=> %(q)s LIMIT %(k)s"
        )
    with conn.transaction():
        plan = _plan_vector_scan(conn, source, vclauses, params, wanted, f, answer)
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
    return [_hit(source, r[:7], semantic=float(r[4])) for r in rows]


def _hit(
    source: str, row: tuple, *, semantic: float | None = None, keyword: float | None = None,
    keyword_evidence: float | None = None,
) -> Hit:
    item_id, title, body, created_at, score, extra, emb = row
    text = body if SOURCES[source].chunked else f"{title}\n{body}"
    return Hit(
        source=source,
        id=str(item_id),
        title=title or "",
        preview=(body or "")[:200],
        score=float(score),
        created_at=created_at,
        semantic=semantic,
        keyword=keyword,
        keyword_evidence=keyword_evidence,
        text=text,
        extra=extra or {},
        embedding=to_array(emb),
    )


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


def _keyword_indexed(conn: psycopg.Connection, source: str, owner: str) -> bool:
    """Whether the owner has anything keyword-indexed for `source` (remembered once she has)."""
    params = {"owner": owner, "ksource": SOURCES[source].indexed_as}
    key = (*server_key(conn), owner, params["ksource"])
    if _indexed.get(key):
        return True
    if not conn.execute(_INDEXED, params).fetchone()[0]:
        return False
    _indexed.put(key, True, OVER_CAP_SECONDS)
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
    clauses = _where(source, owner, f, params)
    params["ksource"] = SOURCES[source].indexed_as
    if _has_extra_filters(f):
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
        f" FROM scored s JOIN {_from(source)} ON t.id = s.item_id ORDER BY s.bm25 DESC, s.item_id"
    )
    rows = conn.execute(sql, params, binary=True).fetchall()
    hits = [_hit(source, r[:7], keyword=float(r[4]), keyword_evidence=float(r[4]) / max(r[8], 1e-9)) for r in rows]
    return hits, int(rows[0][7]) if rows else 0


def _jaccard_source(
    conn: psycopg.Connection, source: str, owner: str, query: str, f: SearchFilters, k: int, scan: int = 500
) -> list[Hit]:
    """Last-resort fallback when neither vectors nor the keyword table answer: Jaccard over recent rows."""
    params: dict[str, Any] = {"scan": scan}
    clauses = _where(source, owner, f, params)
    src = SOURCES[source]
    title, body, extra, emb = src.title_sql, src.body_sql, src.extra_sql, src.vector_sql
    rows = conn.execute(
        f"SELECT t.id::text, {title}, {body}, t.created_at, 0.0, {extra}, {emb} FROM {_from(source)}"
        f" WHERE {' AND '.join(clauses)} ORDER BY t.created_at DESC LIMIT %(scan)s",
        params,
        binary=True,
    ).fetchall()
    hits = [_hit(source, r) for r in rows]
    for h in hits:
        h.keyword = jaccard(query, h.text)
        h.score = h.keyword
    hits = [h for h in hits if h.score > 0]
    hits.sort(key=lambda h: h.score, reverse=True)
    return hits[:k]


def _validate(query: str, mode: str, limit: int, min_score: float | None) -> None:
    if not isinstance(query, str) or not query.strip():
        raise ValidationError("query", "must be a non-empty string")
    check_storable("query", query)
    if mode not in SEARCH_MODES:
        raise ValidationError("mode", f"must be one of {list(SEARCH_MODES)}")
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ValidationError("limit", "must be an integer from 1 to 100")
    if min_score is not None and not 0 <= min_score <= 1:
        raise ValidationError("min_score", "must be between 0 and 1")


def embed_query(embedder: Embedder, query: str) -> tuple[np.ndarray | None, str | None]:
    """The query vector, or (None, reason) when the provider fails. A long query (a dialogue, a long prompt) is
    embedded by its focused text: its last turns within text.focus.EMBED_BUDGET tokens."""
    try:
        return embedder.embed_query(focus(query).embed_text), None
    except EmbeddingError as exc:
        log.warning("query embedding failed, degrading to keyword search: %s", exc)
        return None, f"embedding provider unavailable ({exc}); answered from keywords"
    except Exception as exc:  # a provider must never break search
        log.exception("query embedding crashed")
        return None, f"embedding provider error ({type(exc).__name__}); answered from keywords"


def semantic_hits(
    conn: psycopg.Connection, owner: str, qvec: np.ndarray, model: str, f: SearchFilters, k: int,
    answer: bool = False,
) -> list[Hit]:
    """Top-k per source by cosine similarity, merged and sorted (`answer`: see `hnsw_ef`)."""
    hits = [h for s in f.sources for h in _semantic_source(conn, s, owner, qvec, model, f, k, answer)]
    return sorted(hits, key=lambda h: h.score, reverse=True)


_vector_scans = ThreadPoolExecutor(max_workers=8, thread_name_prefix="vector-scan")


def _pooled_source(
    pool: ConnectionPool, source: str, owner: str, qvec: np.ndarray, model: str, f: SearchFilters, k: int,
    answer: bool = False,
) -> list[Hit]:
    with pool.connection() as conn:
        return _semantic_source(conn, source, owner, qvec, model, f, k, answer)


def _semantic_channel(
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


EXPANSION_WEIGHT = 0.5  # glossary translations count half as much as the query's own words
# CC-CEDICT translations (text.dictionary) weigh less than the glossary's: a word's n translations share it.
DICTIONARY_WEIGHT = 0.4


def query_terms(query: str) -> dict[str, float]:
    """The query's terms (weight 1; a long query's weighted by recency, text.focus) plus their glossary
    translations (EXPANSION_WEIGHT) and their CC-CEDICT translations (DICTIONARY_WEIGHT / n for a word's n
    translations), each times its source term's weight; a query term's own weight stands, else the highest."""
    weights = focus(query).term_weights
    groups: dict[float, list[str]] = {}  # one group, weight 1, unless the query was focused
    for term, weight in weights.items():
        groups.setdefault(weight, []).append(term)
    expanded: dict[str, float] = {}
    for weight, group in groups.items():
        for term in expand(group)[len(group):]:
            expanded[term] = max(expanded.get(term, 0.0), EXPANSION_WEIGHT * weight)
    for weight, group in groups.items():
        for term, w in expand_terms(group, DICTIONARY_WEIGHT).items():
            expanded[term] = max(expanded.get(term, 0.0), w * weight)
    for term, weight in expanded.items():
        weights.setdefault(term, weight)
    return weights


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
    `generic_plans` (in a transaction), their queries run under a generic plan (`_keyword_channel`). Only after
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


# From this many query terms (translations included) the keyword channel reads its sources at once. A typical
# question brings 11–27 (10th to 90th percentile of the context bench's, 14 mean); a dialogue 43–86. A/B at 1M
# (blocks of 25 alternating, 300 builds each) on one-turn questions of 26 terms or more: mean 72.1 → 67.9 ms,
# p90 121.6 → 103.4; on every query, all at once against one connection: mean 77.5 → 75.8 (100k: 68.3 → 67.0),
# so the threshold only spares the pool two connections per build where they buy nothing.
KEYWORD_FANOUT_TERMS = 24
_channels = ThreadPoolExecutor(max_workers=4, thread_name_prefix="keyword-channel")
_keyword_scans = ThreadPoolExecutor(max_workers=8, thread_name_prefix="keyword-scan")


def _keyword_channel(pool: ConnectionPool, owner: str, query: str, f: SearchFilters, k: int) -> list[Hit]:
    """`keyword_hits` on a pooled connection, the BM25 queries under a generic plan. Every step of their plans
    is an index lookup by owner, source and term, bounded per term or by the documents ranked, so the plan does
    not depend on how many rows an owner holds: made once per statement and connection, it saves the planning
    of their CTEs (0.5–1.5 ms a query, 3–4 ms a context build). Other queries keep a plan per execution
    (infra/db._configure): a vector scan's plan must follow the owner's rows and `enable_indexscan`.

    A query bringing many terms (`KEYWORD_FANOUT_TERMS`: a dialogue, a long prompt, a question whose words
    have several translations) makes every source's query long, and its sources one after the other outlast
    the semantic channel beside them: they run at once, each on its own pooled connection, so the channel takes
    about its slowest source. The same hits either way; the Jaccard fallback, as ever, only when no source has
    a BM25 hit."""
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
    """`_bm25_hits` on a pooled connection, under a generic plan (`_keyword_channel`)."""
    with pool.connection() as conn, conn.transaction():
        return _bm25_hits(conn, owner, qterms, f, k, generic_plans=True)


# The speakers seen among an owner's memory candidates, by pool and owner: a question naming one of them starts
# its re-run without the name (`_without_named_speaker`) beside the channels instead of after them.
SPEAKERS_SEEN_SECONDS, SPEAKERS_SEEN_MAX = 600.0, 64
_speakers_seen = _Memo()


@dataclass
class _EarlyRerun:
    """The memory source's semantic channel on the question without `speaker`'s name, started early."""

    speaker: str
    future: Future[tuple[np.ndarray, list[Hit]] | None]


def _start_rerun(
    pool: ConnectionPool, embedder: Embedder, owner: str, query: str, f: SearchFilters, depth: int
) -> _EarlyRerun | None:
    """When the question names one of the speakers seen among this owner's earlier candidates, the re-run
    without the name, started now on its own thread; used only if the candidates of this search name the same
    speaker (`_without_named_speaker`), so the hits are those of the re-run after the channels."""
    if "memory" not in f.sources:
        return None
    speaker = named_speaker(query, _speakers_seen.get((pool.conninfo, owner)) or ())
    stripped = without_speaker(query, speaker) if speaker else query
    if speaker is None or stripped == query:
        return None
    return _EarlyRerun(speaker, _channels.submit(_memories_without_name, pool, embedder, owner, stripped, f, depth))


def _memories_without_name(
    pool: ConnectionPool, embedder: Embedder, owner: str, stripped: str, f: SearchFilters, depth: int
) -> tuple[np.ndarray, list[Hit]] | None:
    """(vector, hits) of the memory source's semantic channel on `stripped`; None when embedding it fails."""
    try:
        memory_qvec = embedder.embed_query(focus(stripped).embed_text)
    except EmbeddingError:  # a provider outage must not break search: keep the question's own vector
        log.warning("embedding the question without the speaker's name failed", exc_info=True)
        return None
    memories = _semantic_channel(pool, owner, memory_qvec, embedder.model_name, replace(f, sources=("memory",)), depth)
    return memory_qvec, memories


def _remember_speakers(pool: ConnectionPool, owner: str, speakers: set[str | None]) -> None:
    """Add this search's candidate speakers to the owner's (started afresh past SPEAKERS_SEEN_MAX names)."""
    key = (pool.conninfo, owner)
    named = {s for s in speakers if s and s.strip()}
    seen = set(_speakers_seen.get(key) or ()) | named
    _speakers_seen.put(key, frozenset(seen if len(seen) <= SPEAKERS_SEEN_MAX else named), SPEAKERS_SEEN_SECONDS)


def _without_named_speaker(
    pool: ConnectionPool, embedder: Embedder, owner: str, query: str, f: SearchFilters, depth: int,
    qvec: np.ndarray, sem: list[Hit], kw: list[Hit], early: _EarlyRerun | None = None,
) -> tuple[str | None, np.ndarray, list[Hit]]:
    """(named speaker, memory query vector, semantic hits): when the question names one of the candidates'
    speakers, the semantic channel of the memory source (the one with speakers) again on the question embedded
    without the name (retrieval/speakers.py); the other sources keep their hits from the question as written.
    Else, or when that embedding fails, the question's own vector and the channel as it ran. `early`: that
    re-run, if `_start_rerun` began it for this speaker."""
    candidates = {h.extra.get("speaker") for h in sem + kw if h.source == "memory"}
    _remember_speakers(pool, owner, candidates)
    speaker = named_speaker(query, candidates)
    stripped = without_speaker(query, speaker) if speaker else query
    if stripped == query:  # also when no memory was a candidate: only memories have speakers
        return speaker, qvec, sem
    if early is not None and early.speaker == speaker:
        rerun = early.future.result()
    else:
        rerun = _memories_without_name(pool, embedder, owner, stripped, f, depth)
    if rerun is None:
        return speaker, qvec, sem
    memory_qvec, memories = rerun
    others = [h for h in sem if h.source != "memory"]
    return speaker, memory_qvec, sorted(others + memories, key=lambda h: h.score, reverse=True)


def search(
    pool: ConnectionPool,
    embedder: Embedder,
    owner: str,
    query: str,
    *,
    mode: str = "hybrid",
    filters: SearchFilters | None = None,
    limit: int = 10,
    min_score: float | None = None,
    fusion: str = "evidence",
    query_vector: np.ndarray | None = None,
    neighbours: bool = True,
    speakers: bool = True,
    turn_priors: bool = True,
) -> SearchResult:
    """Search one owner's memory. Never raises on a provider outage: the result says it degraded.

    Hybrid search fuses the channels (`fusion`, retrieval/fusion.py) and, with `neighbours`, lifts the
    neighbouring turns of its top conversational hits (retrieval/neighbours.py). With `speakers`, a question
    that names one of the candidates' speakers is embedded without the name and prefers that speaker's turns
    (retrieval/speakers.py). With `turn_priors`, conversational turns that ask or say little score lower
    (retrieval/turns.py)."""
    _validate(query, mode, limit, min_score)
    if fusion not in FUSIONS:
        raise ValidationError("fusion", f"must be one of {sorted(FUSIONS)}")
    f = (filters or SearchFilters()).validated()
    degraded = None
    qvec = query_vector
    if mode != "keyword" and qvec is None:
        qvec, degraded = embed_query(embedder, query)
    depth = min(HYBRID_MAX_DEPTH, max(HYBRID_MIN_DEPTH, limit * 3)) if mode == "hybrid" else limit
    want_sem, want_kw = qvec is not None, mode != "semantic" or qvec is None
    kw_future = _channels.submit(_keyword_channel, pool, owner, query, f, depth) if want_sem and want_kw else None
    by_speaker = mode == "hybrid" and speakers and want_sem  # a named speaker's turns: `_without_named_speaker`
    early = _start_rerun(pool, embedder, owner, query, f, depth) if by_speaker else None
    sem = _semantic_channel(pool, owner, qvec, embedder.model_name, f, depth, mode == "semantic") if want_sem else []
    if kw_future is not None:
        kw = kw_future.result()  # the keyword channel ran on its own connection, beside the semantic one
    else:
        kw = _keyword_channel(pool, owner, query, f, depth) if want_kw else []
    speaker, memory_qvec = None, qvec
    if by_speaker:
        speaker, memory_qvec, sem = _without_named_speaker(
            pool, embedder, owner, query, f, depth, qvec, sem, kw, early
        )
    if mode == "semantic" and qvec is not None:
        ranked = sem  # raw cosine similarity, as the progressive-search and advanced-search specs report it
    elif mode == "keyword" or qvec is None:
        ranked = calibrate_keyword(kw)
    else:
        if fusion == "evidence":
            sem = sem + _vector_scored(sem, kw, qvec, memory_qvec)
        ranked = FUSIONS[fusion](calibrate_semantic(sem, embedder, query), calibrate_keyword(kw))
        exchanges = _read_exchanges(pool, owner, f, ranked) if neighbours or turn_priors else Exchanges()
        if neighbours and exchanges.conversation:
            ranked = _lift_neighbours(embedder, query, memory_qvec, ranked, exchanges)
        if turn_priors:
            ranked = weighed(ranked, exchanges.conversation)
        if speaker:
            ranked = boosted(ranked, speaker)
    if min_score is not None:
        ranked = [h for h in ranked if h.score >= min_score]
    return SearchResult(
        hits=ranked[:limit],
        mode=mode if qvec is not None or mode == "keyword" else "keyword",
        degraded=degraded,
    )


def _vector_scored(sem: list[Hit], kw: list[Hit], qvec: np.ndarray, memory_qvec: np.ndarray) -> list[Hit]:
    """The keyword hits the semantic channel did not return, scored by their own vector (cosine similarity)
    against the vector their source was searched with: so fusion sees both channels' view of every candidate."""
    seen = {(h.source, h.id) for h in sem}
    out = []
    for h in kw:
        if (h.source, h.id) not in seen and h.embedding is not None:
            similarity = float(np.dot(h.embedding, memory_qvec if h.source == "memory" else qvec))
            out.append(rescored(h, score=similarity, semantic=similarity, keyword=None, keyword_evidence=None))
    return out


def _read_exchanges(pool: ConnectionPool, owner: str, f: SearchFilters, ranked: list[Hit]) -> Exchanges:
    """The exchange turns among the conversational memory hits, and the neighbouring turns of the top ones
    (retrieval/exchanges.py): one query, none when no hit is a conversation turn."""
    ids = [h.id for h in ranked if h.source == "memory" and h.extra.get("session")]
    if "memory" not in f.sources or not ids:
        return Exchanges()
    top = [h.id for h in ranked if h.source == "memory"][:NEIGHBOUR_TOP]
    params: dict[str, Any] = {}
    clauses = _where("memory", owner, f, params)
    with reading(pool) as conn:
        return read_exchanges(conn, ids, top, clauses, params)


def _lift_neighbours(
    embedder: Embedder, query: str, qvec: np.ndarray, ranked: list[Hit], exchanges: Exchanges
) -> list[Hit]:
    """Fused hits with the neighbouring turns of the top exchange turns lifted (retrieval/neighbours.py)."""
    if not exchanges.adjacent:
        return ranked
    adjacent: dict[str, list[Hit]] = {}
    for hit_id, rows in exchanges.adjacent.items():
        for row in rows:
            hit = _hit("memory", row)
            if hit.embedding is not None:
                hit.semantic = float(np.dot(hit.embedding, qvec))
            adjacent.setdefault(hit_id, []).append(hit)
    qlang = language(query)

    def own_score(h: Hit) -> float:
        if h.semantic is None:
            return 0.0
        return SEMANTIC_WEIGHT * calibrated_similarity(embedder, qlang, h.text, h.semantic)

    return lifted(ranked, adjacent, own_score)


def language(text: str) -> str:
    """"zh" for text with CJK characters, else "en" (the two languages the floors are measured for)."""
    return "zh" if has_cjk(text) else "en"


def calibrate_semantic(hits: list[Hit], embedder: Embedder, query: str) -> list[Hit]:
    """Map cosine similarity onto [0, 1] for fusion: (sim - floor) / (1 - floor), floored at 0.

    The floor is what the model gives unrelated texts of the query's and the item's languages
    (`Embedder.floor_for`), so scores are comparable across queries, languages and models.
    """
    qlang = language(query)
    return [rescored(h, score=calibrated_similarity(embedder, qlang, h.text, h.score)) for h in hits]


def calibrated_similarity(embedder: Embedder, query_lang: str, text: str, similarity: float) -> float:
    """One cosine similarity on the calibrated scale: 0 at the model's floor for the language pair."""
    floor = embedder.floor_for(query_lang, language(text))
    return max(0.0, (similarity - floor) / (1.0 - floor)) if floor < 1 else similarity


def calibrate_keyword(hits: list[Hit]) -> list[Hit]:
    """Map BM25 onto [0, 1) by saturation, bm25 / (bm25 + KEYWORD_SATURATION); Jaccard is already in [0, 1]."""
    out = []
    for h in hits:
        cal = h.score if h.extra.get("matched_by") == "jaccard" else h.score / (h.score + KEYWORD_SATURATION)
        out.append(rescored(h, score=cal, keyword=cal))
    return sorted(out, key=lambda h: h.score, reverse=True)
