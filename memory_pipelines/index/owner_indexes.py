"""Per-owner HNSW indexes: a partial index (`WHERE owner_id = '…'`) for every owner who holds more rows of a
table than an exact scan reads cheaply, but at most half of it.

Such an owner's search in the table's whole graph is a filtered one: at 1M rows, an owner holding 10 % of them
found 0.980 of her exact top 10 with pgvector's longest candidate list (1,000), in 23 ms. In a graph of her own
rows alone the same search is unfiltered: 0.994 at `ef_search` 200 in 5 ms, 0.998 at 400 in 9 ms
(bench/filtered_recall.py). pgvector's README advises the same for filters on a few values. Owners under the
exact-scan cap are scanned exactly; an owner holding more than half of a table searches its graph nearly
unfiltered. Owners' rows are disjoint, so these indexes hold at most as many rows as the table itself.

The planner takes the partial index when the query's `owner_id = value` implies its predicate, which needs a
custom plan (the pool forces them). `sync_owner_indexes` builds the missing ones (CONCURRENTLY: writes go on)
and drops those of owners who no longer qualify; the `vector_indexes` asset and `migrate` run it.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from ..infra.migrate import index_build_memory_mb
from ..vocabulary import EXACT_SCAN_MAX_ROWS, INDEXED

log = logging.getLogger(__name__)

OWNER_INDEX_MAX_SHARE = 0.5
"""Above this share of a table an owner's filtered search in the table's graph loses little."""


def owner_index_name(table: str, owner: str) -> str:
    """The partial index of `owner` on `table` (a digest of the owner id: any string, any length)."""
    return f"{table}_owner_hnsw_{hashlib.sha256(owner.encode()).hexdigest()[:16]}"


def owner_index_tables() -> list[tuple[str, str]]:
    """(table, vector column) of every searched table whose rows carry their owner."""
    return [(s.table, s.vector_column) for s in INDEXED.values()]


def wanted_owners(conn: psycopg.Connection, table: str, column: str) -> dict[str, int]:
    """Owners of `table` who qualify for their own index, with their embedded rows."""
    rows = conn.execute(
        sql.SQL(
            "WITH o AS (SELECT owner_id, count(*) AS n FROM {t} WHERE {c} IS NOT NULL GROUP BY owner_id)"
            " SELECT owner_id, n FROM o WHERE n > %s AND n <= %s * (SELECT sum(n) FROM o)"
        ).format(t=sql.Identifier(table), c=sql.Identifier(column)),
        (EXACT_SCAN_MAX_ROWS, OWNER_INDEX_MAX_SHARE),
    ).fetchall()
    return {owner: int(n) for owner, n in rows}


def has_owner_index(conn: psycopg.Connection, table: str, owner: str) -> bool:
    """Whether `owner` has a valid index of her own on `table`."""
    return bool(conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid"
        " WHERE c.relname = %s AND i.indisvalid)", (owner_index_name(table, owner),)
    ).fetchone()[0])


def existing_owner_indexes(conn: psycopg.Connection, table: str) -> dict[str, bool]:
    """The owner indexes on `table`, by name, and whether each is valid (a killed CONCURRENTLY build is not)."""
    rows = conn.execute(
        "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = %s::regclass AND c.relname LIKE %s",
        (table, f"{table}\\_owner\\_hnsw\\_%"),
    ).fetchall()
    return {name: bool(valid) for name, valid in rows}


@dataclass
class OwnerIndexSync:
    """What `sync_owner_indexes` did."""

    built: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    kept: int = 0


def sync_owner_indexes(conn: psycopg.Connection, dimension: int) -> OwnerIndexSync:
    """Build the owner indexes that qualify and are missing (or invalid); drop those that no longer qualify.
    CREATE INDEX CONCURRENTLY runs outside a transaction: an open one of `conn` is committed first, and `conn`
    is in autocommit mode meanwhile."""
    restore = not conn.autocommit
    if restore:
        conn.commit()
        conn.autocommit = True
    try:
        return _sync(conn, dimension)
    finally:
        if restore:
            conn.autocommit = False


def _sync(conn: psycopg.Connection, dimension: int) -> OwnerIndexSync:
    done = OwnerIndexSync()
    for table, column in owner_index_tables():
        wanted = {owner_index_name(table, owner): (owner, n) for owner, n in wanted_owners(conn, table, column).items()}
        existing = existing_owner_indexes(conn, table)
        for name, valid in existing.items():
            if name not in wanted or not valid:
                conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))
                if name not in wanted:
                    done.dropped.append(name)
        for name, (owner, rows) in wanted.items():
            if existing.get(name):
                done.kept += 1
                continue
            conn.execute(f"SET maintenance_work_mem = '{index_build_memory_mb(rows, dimension)}MB'")
            try:
                conn.execute(
                    sql.SQL(
                        "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {t} USING hnsw ({c} vector_cosine_ops)"
                        " WHERE owner_id = {owner}"
                    ).format(name=sql.Identifier(name), t=sql.Identifier(table), c=sql.Identifier(column),
                             owner=sql.Literal(owner))
                )
            finally:
                conn.execute("RESET maintenance_work_mem")
            log.info("built %s: the HNSW index of owner %r's %s rows of %s", name, owner, rows, table)
            done.built.append(name)
    return done


def drop_owner_indexes(conn: psycopg.Connection, table: str) -> list[str]:
    """Drop every owner index on `table` (a bulk load that defers the table's index defers these too)."""
    names = list(existing_owner_indexes(conn, table))
    for name in names:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
    return names
