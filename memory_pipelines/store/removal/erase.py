"""Erase an owner: every row of hers in every table, her API keys included, in one transaction.

The tables are read from the catalog (every table of the schema with an `owner_id` column), so a table added
later is erased without a change here; tests/test_removal_erase.py fails for a table that holds an owner's rows
without that column. Tables that reference others are emptied first; derived tables (keyword statistics, the
retrieval log's roll-up) after the rows they derive from; her audit trail last, but for the records of earlier
erases, which stay (a second erase, after a re-import, must not wipe the first's record). The trail then gains
the record of this erase (counts only); an erase that found nothing records nothing.
Her vector graphs (index/owner_indexes.py) are dropped once the rows are gone.

A write of the owner committing while the erase runs (each DELETE sees what is committed when it starts) could
leave part of itself: its postings, say, when it committed after the postings' DELETE and before its memory's.
So the DELETEs run again, in the same transaction, until a round finds nothing (`MAX_ROUNDS`).

A keyword refresh running meanwhile may write her statistics back from what it read before the erase; a sweep
waits for such writers to finish and deletes what they wrote (the next refresh would drop it as well).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from ...index.owner_indexes import existing_owner_indexes, loader_lock_key, owner_index_name, owner_index_tables
from ...infra.db import transaction
from ...infra.errors import UserError, ValidationError
from ..ingest import validate_owner
from .audit import CLI_ACTOR, check_actor, write_audit

GLOBAL_TABLES = frozenset({"meta", "schema_migrations", "scoring_configs"})
"""Tables without an owner: configuration shared by all owners, never an owner's data."""
DERIVED_TABLES = ("keyword_stats", "keyword_df", "retrieval_daily", "retrieval_daily_items")
"""Written from other tables' rows: emptied after them."""
AUDIT_TABLE = "removals"
TRIGGER_REFERENCES = (("keywords", "keyword_docs"),)
"""(child, parent) pairs tied by a trigger instead of a foreign key (a document's deletion deletes its postings):
the child is emptied first, so each row is counted by the table it was in."""
SWEEP_LOCK_TIMEOUT = "30s"
MAX_ROUNDS = 20
"""Rounds of DELETEs before an erase gives up on an owner whose writes never stop (rolled back: nothing erased)."""


def owner_tables(conn: psycopg.Connection) -> list[str]:
    """Every table of the current schema with an `owner_id` column but the audit trail, in erase order: a table
    before the tables it references, derived tables after the rest."""
    tables = sorted(r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " JOIN pg_attribute a ON a.attrelid = c.oid"
        " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
        " AND a.attname = 'owner_id' AND NOT a.attisdropped"))
    refs = conn.execute(
        "SELECT f.relname, t.relname FROM pg_constraint k JOIN pg_class f ON f.oid = k.conrelid"
        " JOIN pg_class t ON t.oid = k.confrelid WHERE k.contype = 'f' AND k.conrelid <> k.confrelid").fetchall()
    referenced_by: dict[str, set[str]] = {t: set() for t in tables}
    for child, parent in [*refs, *TRIGGER_REFERENCES]:
        if child in referenced_by and parent in referenced_by:
            referenced_by[parent].add(child)
    ordered: list[str] = []
    while len(ordered) < len(tables):  # children first (the foreign keys form no cycle)
        ready = [t for t in tables if t not in ordered and referenced_by[t] <= set(ordered)]
        if not ready:
            raise RuntimeError(f"foreign keys between {sorted(set(tables) - set(ordered))} form a cycle")
        ordered.extend(ready)
    last = [t for t in DERIVED_TABLES if t in ordered]
    return [t for t in ordered if t not in last and t != AUDIT_TABLE] + last


def owner_graphs(conn: psycopg.Connection, owner: str) -> list[tuple[str, str]]:
    """(table, index) of the owner's own vector graphs that exist."""
    found = []
    for table, _column in owner_index_tables():
        name = owner_index_name(table, owner)
        if name in existing_owner_indexes(conn, table):
            found.append((table, name))
    return found


_ERASED_TRAIL = sql.SQL("{} WHERE owner_id = %s AND action <> 'erase'").format(sql.Identifier(AUDIT_TABLE))
"""Her audit rows an erase removes: all but the records of earlier erases."""


def count_owner_rows(conn: psycopg.Connection, owner: str) -> dict[str, int]:
    """Rows of `owner` an erase removes, per table (every table with an owner), in erase order."""
    counts = {
        t: int(conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE owner_id = %s").format(sql.Identifier(t)),
                            (owner,)).fetchone()[0])
        for t in owner_tables(conn)
    }
    counts[AUDIT_TABLE] = int(conn.execute(sql.SQL("SELECT count(*) FROM ") + _ERASED_TRAIL, (owner,)).fetchone()[0])
    return counts


def check_confirm(owner: str, confirm: object) -> None:
    if confirm != owner:
        raise ValidationError("confirm", "an erase removes every row of the owner for good: repeat the owner id"
                                         " to confirm it (or ask for a dry run)")


def erase_owner(
    pool: ConnectionPool, owner: str, *, confirm: str | None = None, dry_run: bool = False, actor: str = CLI_ACTOR
) -> dict[str, Any]:
    """Remove every row of `owner`; `confirm` must repeat the owner id. `dry_run` counts what would go (per
    table, and her vector graphs) and removes nothing. Returns `counts` (rows removed, or that would be, per
    table), `indexes` (her graphs dropped, or that would be), `swept` and the audit row's id (None: dry run)."""
    owner = validate_owner(owner)
    actor = check_actor(actor)
    if not isinstance(dry_run, bool):
        raise ValidationError("dry_run", "must be true or false")
    if dry_run:
        with pool.connection() as conn:
            counts = count_owner_rows(conn, owner)
            graphs = [name for _t, name in owner_graphs(conn, owner)]
        return {"owner": owner, "dry_run": True, "counts": _nonzero(counts), "indexes": graphs, "swept": {},
                "audit_id": None}
    check_confirm(owner, confirm)
    with transaction(pool) as conn:
        counts = _delete_rounds(conn, owner)
        audit = write_audit(conn, owner, actor, "erase", source=None, item_id=None,
                            counts=counts) if any(counts.values()) else None
    swept = _sweep(pool, owner)
    return {"owner": owner, "dry_run": False, "counts": _nonzero(counts), "indexes": _drop_graphs(pool, owner),
            "swept": _nonzero(swept), "audit_id": audit}


def _delete_rounds(conn: psycopg.Connection, owner: str) -> dict[str, int]:
    """Delete every row of `owner`, table by table, until a whole round deletes nothing; rows removed per table."""
    deletes = {t: sql.SQL("DELETE FROM {} WHERE owner_id = %s").format(sql.Identifier(t)) for t in owner_tables(conn)}
    deletes[AUDIT_TABLE] = sql.SQL("DELETE FROM ") + _ERASED_TRAIL
    counts = dict.fromkeys(deletes, 0)
    for _ in range(MAX_ROUNDS):
        removed = 0
        for t, statement in deletes.items():
            n = conn.execute(statement, (owner,)).rowcount
            counts[t] += n
            removed += n
        if not removed:
            return counts
    raise UserError(f"{owner!r} is still being written after {MAX_ROUNDS} rounds of the erase; nothing was "
                        "erased. Stop her writes (revoke her API keys) and erase again")


def _nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {t: n for t, n in counts.items() if n}


def _sweep(pool: ConnectionPool, owner: str) -> dict[str, int]:
    """Delete keyword statistics a concurrent refresh wrote back for the erased owner: the SHARE lock waits for
    every transaction writing them to end (it holds no row lock meanwhile, so it cannot deadlock)."""
    try:
        with transaction(pool) as conn:
            conn.execute(f"SET LOCAL lock_timeout = '{SWEEP_LOCK_TIMEOUT}'")
            conn.execute("LOCK TABLE keyword_stats, keyword_df IN SHARE MODE")
            return {t: conn.execute(sql.SQL("DELETE FROM {} WHERE owner_id = %s").format(sql.Identifier(t)),
                                    (owner,)).rowcount
                    for t in ("keyword_stats", "keyword_df")}
    except psycopg.errors.LockNotAvailable:  # a refresh still running: the next one drops what it wrote
        return {}


def _drop_graphs(pool: ConnectionPool, owner: str) -> list[str]:
    """Drop the owner's vector graphs (CONCURRENTLY: searches go on), each under its table's loader lock like
    `sync_owner_indexes`; one a bulk load holds is left to that load's sync."""
    dropped = []
    with pool.connection() as conn:
        conn.autocommit = True
        try:
            for table, name in owner_graphs(conn, owner):
                key = loader_lock_key(table)
                if not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()[0]:
                    continue
                try:
                    conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))
                    dropped.append(name)
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", key)
        finally:
            conn.autocommit = False
    return dropped
