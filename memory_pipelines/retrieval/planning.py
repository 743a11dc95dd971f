"""How a vector scan is planned: an exact scan when the filters leave few rows, else the owner's own HNSW graph
with a candidate list (ef_search) sized for the graph and the filters.

What chooses a plan is remembered for a while, so every search of an owner does not repeat it: her row count
(an index read of up to cap + 1 entries), and for an unfiltered index scan its candidate list. An owner over the
exact-scan cap is taken to stay over it OVER_CAP_SECONDS: should she shrink below it meanwhile, the index scan
comes back short and is answered exactly. One under it, with rows, UNDER_CAP_SECONDS: should she grow past it
meanwhile, her scans stay exact (slower, never wrong). An owner without rows is counted every time, so her first
write is found at once.
"""

from __future__ import annotations

import logging
import math
from collections import Counter

import psycopg

from ..index.owner_indexes import has_owner_index
from ..infra.db import pgvector_version, server_key
from ..vocabulary import EXACT_SCAN_MAX_ROWS, SOURCES
from .filters import SearchFilters, has_extra_filters
from .memo import Memo

log = logging.getLogger(__name__)

PLANS: Counter[str] = Counter()
"""Vector scans of this process by plan (exact, hnsw-owner, exact-unindexed, empty, exact-fallback): the benches
report how often an index scan came back short and was answered exactly."""

# ef_search for ten results from a graph of up to HNSW_EF_BASE_ROWS rows, doubled for every tenfold of the table
# beyond (a larger graph needs a longer list for the same recall), divided by the share of rows a filter passes,
# up to pgvector's maximum.
HNSW_MIN_EF, HNSW_MAX_EF = 200, 1000
HNSW_EF_BASE_ROWS = 100_000
# A list that is itself the answer (semantic search shows its top k as they come) must hold the exact top k and
# grows faster, as rows ** HNSW_ANSWER_EF_EXPONENT; deep lists that fusion re-ranks keep the doubling.
HNSW_ANSWER_EF_EXPONENT = 0.7
# Candidates read per wanted result, before the division by selectivity: fusion's deep lists need no more.
HNSW_EF_PER_RESULT = 2

OVER_CAP_SECONDS = 60.0
UNDER_CAP_SECONDS = 10.0
_counts = Memo()
_index_lists = Memo()
_owner_indexes = Memo()


def _count_capped(conn: psycopg.Connection, table: str, clauses: list[str], params: dict, cap: int) -> int:
    """min(rows matching, cap + 1): stops reading once the answer is known to be over the cap."""
    sql = f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {' AND '.join(clauses)} LIMIT {int(cap) + 1}) s"
    return int(conn.execute(sql, params).fetchone()[0])


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
    it is not 0 (see the module docstring)."""
    key = (*server_key(conn), table, counted, params["owner"], cap)
    rows = _counts.get(key)
    if rows is None:
        rows = _count_capped(conn, f"{table} t", ["t.owner_id = %(owner)s", counted or "true"], params, cap)
        if rows:
            _counts.put(key, rows, OVER_CAP_SECONDS if rows > cap else UNDER_CAP_SECONDS)
    return rows


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


def plan_vector_scan(
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
    short, the caller re-runs the query as an exact scan (`semantic._semantic_source`). An owner over the cap
    whose graph is not built yet is scanned exactly ("exact-unindexed"): right, and slower, until it is.
    """
    src = SOURCES[source]
    table = "fragments" if src.chunked else src.table
    cap = EXACT_SCAN_MAX_ROWS
    filtered = _owner_rows_capped(conn, table, src.active_sql if src.active_counted else None, params, cap)
    joined = f"fragments f JOIN {src.from_sql} ON t.id = f.memory_id" if src.chunked else src.from_sql
    filters_beyond_owner = has_extra_filters(f)
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
