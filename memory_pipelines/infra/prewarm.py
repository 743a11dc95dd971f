"""Warm the embedded server when a long-running process starts: its most used files into the OS page cache, then
its vector indexes into PostgreSQL's buffers.

After the machine restarts, or its page cache has gone to other files, every page a context build reads comes
from disk, one random read at a time, and the first few hundred builds read the HNSW graphs whole; read front to
back, the same files come in at the disk's sequential speed (docs/performance.md has the cold-start figures).
So `serve` and `mcp` read them at start, in a thread: the vector indexes first, then the relations whose pages
PostgreSQL most often had to fetch from outside its buffers (its statistics' `blks_read`, per page held; TOAST
tables included), as long as they fit in PREWARM_MEMORY_SHARE of the memory available.
Fetches, not buffer hits: a table hit a million times on a few pages (the keyword table at 1M) needs those few
pages, not its 3 GB. Pages already cached are not read again (`pagecache.residency`). Then `walk_graphs`
searches each vector index so its pages sit in PostgreSQL's buffers too: the first builds then run as fast as
in the steady state.

Only for the embedded server, whose files are on this machine: a server behind DATABASE_URL warms itself
(`pg_prewarm`'s autoprewarm, offered by managed services too). The embedded build has no `pg_prewarm`.
"""

from __future__ import annotations

import logging
import mmap
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg
from psycopg import sql

from ..vocabulary import LOCK_PREWARM
from .pagecache import missing_ranges, residency

log = logging.getLogger(__name__)

PREWARM_MEMORY_SHARE = 0.5
"""At most this share of the memory available at start is read: the cache is the machine's, not only ours."""
READ_CHUNK_BYTES = 8 << 20


def default_budget() -> int:
    """Bytes `prewarm` may read: PREWARM_MEMORY_SHARE of the memory available now."""
    return int(psutil.virtual_memory().available * PREWARM_MEMORY_SHARE)

# Every table and index of the schema, with the TOAST table and TOAST index of each table (long texts live there,
# and the memories' TOAST table is fetched more than their own heap).
RELATIONS_SQL = """
WITH tables AS (
    SELECT c.oid, c.reltoastrelid, s.toast_blks_read, s.tidx_blks_read FROM pg_class c
    JOIN pg_statio_user_tables s ON s.relid = c.oid
    WHERE c.relnamespace = current_schema()::regnamespace
), rels AS (
    SELECT c.oid, coalesce(t.heap_blks_read, i.idx_blks_read, 0) AS blocks_read FROM pg_class c
    LEFT JOIN pg_statio_user_tables t ON t.relid = c.oid
    LEFT JOIN pg_statio_user_indexes i ON i.indexrelid = c.oid
    WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'i', 'm')
    UNION ALL
    SELECT reltoastrelid, coalesce(toast_blks_read, 0) FROM tables WHERE reltoastrelid <> 0
    UNION ALL
    SELECT x.indexrelid, coalesce(t.tidx_blks_read, 0) FROM tables t JOIN pg_index x ON x.indrelid = t.reltoastrelid
)
SELECT r.oid::regclass::text, pg_relation_filepath(r.oid), pg_relation_size(r.oid),
       coalesce(am.amname = 'hnsw', false), r.blocks_read
FROM rels r
JOIN pg_class c ON c.oid = r.oid
LEFT JOIN pg_am am ON am.oid = c.relam AND c.relkind = 'i'
WHERE pg_relation_size(r.oid) > 0
"""


@dataclass(frozen=True)
class Relation:
    """A table or index: its file (relative to the data folder), its size, and how many pages PostgreSQL read
    into its buffers since the statistics were reset."""

    name: str
    path: str
    size: int
    vector_index: bool
    blocks_read: int


@dataclass(frozen=True)
class Prewarmed:
    relations: list[str]
    bytes_read: int
    bytes_cached: int  # found in the page cache already, so not read again
    seconds: float
    graphs_walked: int = 0  # vector indexes searched into PostgreSQL's buffers (`walk_graphs`)
    walk_seconds: float = 0.0


def prewarm_order(relations: list[Relation], budget: int) -> list[Relation]:
    """What to read, in order: vector indexes first, then by pages read per page held, skipping any that would
    overrun `budget` bytes. Relations never read are left out, unless the statistics are empty (a crash
    discards them): then every vector index first, then the rest smallest first."""
    if any(r.blocks_read for r in relations):
        wanted = [r for r in relations if r.blocks_read]
        wanted.sort(key=lambda r: (not r.vector_index, -r.blocks_read / max(r.size, 1), r.name))
    else:
        wanted = sorted(relations, key=lambda r: (not r.vector_index, r.size, r.name))
    chosen, left = [], budget
    for rel in wanted:
        if rel.size <= left:
            chosen.append(rel)
            left -= rel.size
    return chosen


def used_relations(conn: psycopg.Connection) -> list[Relation]:
    return [Relation(*row) for row in conn.execute(RELATIONS_SQL).fetchall()]


def segments(pgdata: Path, rel: Relation) -> Iterator[Path]:
    """The files of `rel` that exist (PostgreSQL splits a relation into 1 GB files: f, f.1, f.2, ...)."""
    segment = 0
    while (path := pgdata / (rel.path if segment == 0 else f"{rel.path}.{segment}")).exists():
        yield path
        segment += 1


def read_relation(pgdata: Path, rel: Relation, buffer: bytearray) -> tuple[int, int]:
    """Read the pages of `rel`'s files that are not in the page cache already (`pagecache.residency`; where the
    system cannot say, whole files): copying gigabytes already cached costs seconds of CPU. Returns (bytes read,
    bytes found cached)."""
    read = cached = 0
    for path in segments(pgdata, rel):
        try:
            size = path.stat().st_size
            pages = residency(path)
            ranges = [(0, size)] if pages is None else [
                (first * mmap.PAGESIZE, count * mmap.PAGESIZE) for first, count in missing_ranges(pages)
            ]
            with path.open("rb", buffering=0) as f:
                for offset, length in ranges:
                    f.seek(offset)
                    view, left = memoryview(buffer), length
                    while left > 0 and (n := f.readinto(view[: min(left, len(buffer))])):
                        read, left = read + n, left - n
            cached += max(0, size - sum(length for _, length in ranges))
        except FileNotFoundError:  # dropped or rewritten meanwhile
            continue
    return read, cached


def cache_warmth(conn: psycopg.Connection, pgdata: Path) -> dict[str, float] | None:
    """How much of what `prewarm` would read is in the page cache now (`status` reports it); None where the
    system cannot say."""
    chosen = prewarm_order(used_relations(conn), default_budget())
    total = resident = 0
    for rel in chosen:
        for path in segments(pgdata, rel):
            try:
                pages = residency(path)
            except FileNotFoundError:
                continue
            if pages is None:
                return None
            total, resident = total + len(pages), resident + pages.count(1)
    return {"relations": len(chosen), "megabytes": round(total * mmap.PAGESIZE / 1e6, 1),
            "resident_share": round(resident / total, 3) if total else 1.0}


# Filling PostgreSQL's buffers: the page cache spares the disk, but each page still costs a buffer miss the first
# time a build reads it, and the first builds after a start read the graphs whole. A search reads its graph's
# upper layers and a path of pages through the base layer; about one search per PAGES_PER_WALK pages, each from a
# row of the table itself, reads most of a graph in seconds. Only
# graphs that fit in WALK_BUFFER_SHARE of shared_buffers, since each walked page takes a buffer.
PAGES_PER_WALK, MAX_WALKS, WALK_EF = 800, 400, 400
WALK_BUFFER_SHARE = 0.5
_OPERATORS = {"vector_cosine_ops": "<=>", "vector_l2_ops": "<->", "vector_ip_ops": "<#>", "vector_l1_ops": "<+>"}
_GRAPH_SQL = """
SELECT n.nspname::text, t.relname::text, a.attname::text, o.opcname::text, ic.reltuples, t.relpages,
       pg_get_expr(i.indpred, i.indrelid)
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
JOIN pg_opclass o ON o.oid = i.indclass[0]
JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE i.indexrelid = %s::regclass AND i.indexprs IS NULL
"""


def walks_for(size: int) -> int:
    """How many searches walk a graph of `size` bytes into the buffers."""
    return min(MAX_WALKS, -(-size // (8192 * PAGES_PER_WALK)))


def sample_percent(walks: int, rows: float, pages: int) -> float:
    """TABLESAMPLE SYSTEM's percentage for `walks` rows of a table of `rows` rows on `pages` pages: three times
    the rows wanted, and at least 8 pages, since SYSTEM samples whole pages (0.1 % of a 656-page table is
    often none of them)."""
    return min(100.0, 100.0 * max(3.0 * walks / max(rows, 1.0), 8.0 / max(pages, 1)))


def walk_graphs(conn: psycopg.Connection, graphs: list[Relation]) -> int:
    """Search each of `graphs` (vector indexes on a column: whole-table or partial, such as an owner's graph;
    expression ones are left) with `walks_for` of its own rows' vectors, results discarded, so its pages sit
    in PostgreSQL's buffers; within WALK_BUFFER_SHARE of them. Returns how many graphs were walked."""
    buffers = conn.execute("SELECT setting::bigint * 8192 FROM pg_settings WHERE name = 'shared_buffers'")
    left, walked = int(buffers.fetchone()[0] * WALK_BUFFER_SHARE), 0
    for graph in graphs:
        row = conn.execute(_GRAPH_SQL, (graph.name,)).fetchone()
        if row is None or row[3] not in _OPERATORS or graph.size > left:
            continue
        schema, table, column, opclass, rows, pages, predicate = row
        walks = walks_for(graph.size)
        # a partial graph (an owner's) is walked from its own rows, with its predicate (the catalog's text of it)
        # in the search so the planner takes it; `rows` is the index's, so the sample holds enough of them
        where = sql.SQL(predicate or "true")
        query = sql.SQL(
            "SELECT count(*) FROM (SELECT {col} AS v FROM {table} TABLESAMPLE SYSTEM (%s) WHERE {col} IS NOT NULL"
            " AND {where} LIMIT %s) s"
            " CROSS JOIN LATERAL (SELECT 1 FROM {table} t WHERE {where} ORDER BY t.{col} {op} s.v LIMIT 1) x"
        ).format(col=sql.Identifier(column), table=sql.Identifier(schema, table), op=sql.SQL(_OPERATORS[opclass]),
                 where=where)
        with conn.transaction():
            # a small table's search may be planned as a scan (of the table or another index) and a sort,
            # which leaves the graph unread: only the graph's ordered scan is left to the planner
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true), set_config('enable_seqscan', 'off', true),"
                         " set_config('enable_sort', 'off', true)", (str(WALK_EF),))
            conn.execute(query, (sample_percent(walks, rows, pages), walks))
        left -= graph.size
        walked += 1
    return walked


def prewarm(
    conn: psycopg.Connection, pgdata: Path, budget: int | None = None, *, walk: bool = True,
    announce: Callable[[list[Relation]], None] | None = None,
) -> Prewarmed | None:
    """Read the relations `prewarm_order` picks into the page cache, then (`walk`) search their vector indexes
    into PostgreSQL's buffers (`walk_graphs`); None when another process is at it. `conn` is in autocommit
    (the lock is the session's). `announce` hears the relations before they are read."""
    if not conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_PREWARM,)).fetchone()[0]:
        return None
    try:
        chosen = prewarm_order(used_relations(conn), default_budget() if budget is None else budget)
        if announce is not None:
            announce(chosen)
        started, read, cached, buffer = time.perf_counter(), 0, 0, bytearray(READ_CHUNK_BYTES)
        for rel in chosen:
            got = read_relation(pgdata, rel, buffer)
            read, cached = read + got[0], cached + got[1]
            log.debug("prewarmed %s (%.0f MB)", rel.name, rel.size / 1e6)
        seconds, started = time.perf_counter() - started, time.perf_counter()
        walked = walk_graphs(conn, [r for r in chosen if r.vector_index]) if walk else 0
        return Prewarmed([r.name for r in chosen], read, cached, seconds, walked, time.perf_counter() - started)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_PREWARM,))


def start_prewarm(url: str, pgdata: Path) -> threading.Thread:
    """`prewarm` in a daemon thread on its own connection; logs what it read, or why it could not."""

    def starting(chosen: list[Relation]) -> None:
        print(f"prewarming {len(chosen)} relations of the embedded database "
              f"({sum(r.size for r in chosen) / 1e6:.0f} MB) in the background", file=sys.stderr)

    def run() -> None:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
                result = prewarm(conn, pgdata, announce=starting)
        except (OSError, psycopg.Error) as exc:
            log.warning("prewarm of the embedded database skipped: %s", exc)
            return
        if result is None:
            log.info("prewarm: another process is reading the database's files")
        else:  # beside the start-up banner: how long the first requests may have read from disk
            print(f"prewarmed {len(result.relations)} relations of the embedded database into the page cache: "
                  f"{result.bytes_read / 1e6:.0f} MB read in {result.seconds:.1f} s, "
                  f"{result.bytes_cached / 1e6:.0f} MB there already; {result.graphs_walked} vector indexes "
                  f"walked into PostgreSQL's buffers in {result.walk_seconds:.1f} s", file=sys.stderr)

    thread = threading.Thread(target=run, name="prewarm", daemon=True)
    thread.start()
    return thread
