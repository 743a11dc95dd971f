"""Per-owner HNSW graphs: a partial index (`WHERE owner_id = '…'`) for every owner who holds more embedded rows
of a table than an exact scan reads cheaply. They are the only vector indexes of the owner-scoped tables.

Every vector search is scoped to one owner (DESIGN: no path reads another owner's rows). An owner at or under
EXACT_SCAN_MAX_ROWS is scanned exactly, which is exact and cheap (~2 µs a row). An owner above it searches a
graph of her own rows alone, an unfiltered search with better recall at a shorter candidate list than a
filtered search of a whole-table graph (bench/filtered_recall.py, docs/performance.md; pgvector's README
advises the same for filters on a few values). Owners' rows are disjoint, so these graphs hold at most as many
rows as the table, and a table of many small owners carries no graph at all: no write pays an insert into a
graph that no search reads.

The planner takes the partial index when the query's `owner_id = value` implies its predicate, which needs a
custom plan (the pool forces them). `sync_owner_indexes` builds the missing ones (CONCURRENTLY: writes go on)
and drops those of owners who no longer qualify; every embedding load ends with it, and the `vector_indexes`
asset and `migrate` run it. An owner over the cap whose graph is not built yet is scanned exactly meanwhile
(right answers, slower), and `status` names her missing index as a problem.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from ..infra.migrate import index_build_memory_mb
from ..vocabulary import EXACT_SCAN_MAX_ROWS, INDEXED, LOCK_INDEX, VECTOR_COLUMNS

log = logging.getLogger(__name__)


def owner_index_name(table: str, owner: str) -> str:
    """The partial index of `owner` on `table` (a digest of the owner id: any string, any length)."""
    return f"{table}_owner_hnsw_{hashlib.sha256(owner.encode()).hexdigest()[:16]}"


def owner_index_tables() -> list[tuple[str, str]]:
    """(table, vector column) of every searched table whose rows carry their owner."""
    return [(s.table, s.vector_column) for s in INDEXED.values()]


def wanted_owners(conn: psycopg.Connection, table: str, column: str) -> dict[str, int]:
    """Owners of `table` who qualify for their own index (over the exact-scan cap), with their embedded rows."""
    rows = conn.execute(
        sql.SQL("SELECT owner_id, count(*) FROM {t} WHERE {c} IS NOT NULL GROUP BY owner_id HAVING count(*) > %s")
        .format(t=sql.Identifier(table), c=sql.Identifier(column)),
        (EXACT_SCAN_MAX_ROWS,),
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


def missing_owner_indexes(conn: psycopg.Connection) -> dict[str, tuple[str, str, int]]:
    """The owner indexes that should exist and do not: name -> (table, owner, embedded rows). (An invalid one,
    left by an interrupted build, exists: `existing_owner_indexes` tells.) One aggregate a table."""
    missing = {}
    for table, column in owner_index_tables():
        existing = existing_owner_indexes(conn, table)
        for owner, n in wanted_owners(conn, table, column).items():
            name = owner_index_name(table, owner)
            if name not in existing:
                missing[name] = (table, owner, n)
    return missing


@dataclass
class OwnerIndexSync:
    """What `sync_owner_indexes` did."""

    built: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    kept: int = 0
    busy: list[str] = field(default_factory=list)  # tables left alone: a bulk load of theirs is in progress


def sync_owner_indexes(
    conn: psycopg.Connection, dimension: int, tables: list[str] | None = None, owners: list[str] | None = None
) -> OwnerIndexSync:
    """Build the owner indexes that qualify and are missing (or invalid); drop those that no longer qualify; on
    every owner-scoped table, or on `tables`. With `owners`, only theirs are looked at and built (a few indexed
    lookups and capped counts instead of counting every owner's rows; none is dropped). A table a bulk load is
    writing (it holds the table's loader lock, shared) is left alone: that load syncs it when done. CREATE INDEX
    CONCURRENTLY runs outside a transaction: an open one of `conn` is committed first, and `conn` is in
    autocommit mode meanwhile."""
    restore = not conn.autocommit
    if restore:
        conn.commit()
        conn.autocommit = True
    try:
        done = OwnerIndexSync()
        for table, column in owner_index_tables():
            if tables is None or table in tables:
                _sync_table(conn, table, column, dimension, done, owners)
        return done
    finally:
        if restore:
            conn.autocommit = False


def loader_lock_key(table: str) -> tuple[int, int]:
    """(LOCK_INDEX, n) of `table`'s vector column: bulk loaders hold it shared, index builders exclusively."""
    return LOCK_INDEX, next(i for i, (t, _c, _x) in enumerate(VECTOR_COLUMNS) if t == table)


def _sync_table(
    conn: psycopg.Connection, table: str, column: str, dimension: int, done: OwnerIndexSync, owners: list[str] | None
) -> None:
    key = loader_lock_key(table)
    if not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()[0]:
        done.busy.append(table)
        return
    try:
        _sync_locked(conn, table, column, dimension, done, owners)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", key)


def _owners_over_cap(conn: psycopg.Connection, table: str, column: str, owners: list[str],
                     existing: dict[str, bool]) -> dict[str, int]:
    """Of `owners`, those without a valid index of their own who hold over the cap: each counted by her own
    rows, up to one past the cap (and wholly when past it)."""
    found = {}
    for owner in owners:
        if existing.get(owner_index_name(table, owner)):
            continue
        n = conn.execute(
            sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {t} WHERE owner_id = %s AND {c} IS NOT NULL LIMIT %s) s")
            .format(t=sql.Identifier(table), c=sql.Identifier(column)), (owner, EXACT_SCAN_MAX_ROWS + 1),
        ).fetchone()[0]
        if n > EXACT_SCAN_MAX_ROWS:  # her graph is built next: its memory is sized by her whole count
            found[owner] = int(conn.execute(
                sql.SQL("SELECT count(*) FROM {t} WHERE owner_id = %s AND {c} IS NOT NULL")
                .format(t=sql.Identifier(table), c=sql.Identifier(column)), (owner,)).fetchone()[0])
    return found


def _named(table: str, owners: dict[str, int]) -> dict[str, tuple[str, int]]:
    """index name -> (owner, embedded rows)."""
    return {owner_index_name(table, owner): (owner, n) for owner, n in owners.items()}


def _sync_locked(
    conn: psycopg.Connection, table: str, column: str, dimension: int, done: OwnerIndexSync, owners: list[str] | None
) -> None:
    existing = existing_owner_indexes(conn, table)
    if owners is None:  # every owner: drop invalid indexes and those of owners who no longer qualify
        wanted = _named(table, wanted_owners(conn, table, column))
        stale = [name for name, valid in existing.items() if not valid or name not in wanted]
    else:  # only these owners (a valid index of theirs is kept uncounted); nobody else's index is touched
        wanted = _named(table, _owners_over_cap(conn, table, column, owners, existing))
        mine = {owner_index_name(table, o) for o in owners}
        stale = [name for name in mine if existing.get(name) is False]
        done.kept += sum(1 for name in mine if existing.get(name))
    for name in stale:
        conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))
        existing.pop(name)
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


def drop_owner_indexes(conn: psycopg.Connection, table: str) -> list[str]:
    """Drop every owner index on `table` (a bulk load defers them: each would slow every row it writes)."""
    names = list(existing_owner_indexes(conn, table))
    for name in names:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
    return names
