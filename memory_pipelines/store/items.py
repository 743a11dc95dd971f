"""Writing tasks, learnings, capabilities, goals and events: validate against the write contract, upsert, index.

`write_items` validates every item first (nothing is written when one is bad), then in one transaction copies
them into a temporary table and upserts them with one INSERT ... ON CONFLICT per group: by the caller's `key`
(unique per owner and source), a capability without a key by its name, anything else as a new row. A rewrite
whose fields are all as stored changes nothing (action `unchanged`), so its embedding stays current. The rows
written are keyword-indexed before the transaction commits (searchable by keyword at once); their embedding is
left pending for the background worker (`embed_pending_items`) or the backfill. An item's `at` is its
`created_at`: the date in its indexed text, in time filters and in decay.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ..index.keywords import Totals, index_rows, refresh_stats
from ..infra.errors import NotFoundError, check_storable
from ..infra.ids import is_uuid
from ..retrieval.learnings import structured_learnings, task_query
from ..text.keywords import keyword_counts
from ..vocabulary import (
    EXPORTED_ID_KEY,
    INDEXED,
    LOCK_KEYWORD_STATS,
    MAX_ITEM_KEY,
    WRITE_CONTRACTS,
    WRITE_TABLES,
    FieldSpec,
)
from .ingest import validate_owner
from .item_contract import ItemConflict, ItemError, check_source, parse_time, validate_item, validate_items

__all__ = ["ItemConflict", "ItemError", "WriteResult", "index_items", "parse_time", "relevant_learnings",
           "update_item", "validate_item", "validate_items", "write_items"]

STATS_REFRESH_SHARE = 0.5
"""An owner's stored BM25 statistics are rewritten in full once she gained this share of her documents since."""

WRITE_ATTEMPTS = 3
"""Tries of a write that a deadlock with a concurrent one rolled back (two batches naming the same rows in
another order)."""

INDEX_BATCH = 2_000
"""Rows keyword-indexed at a time by a large write (their terms counted while the batch before is stored)."""

_SQL_TYPES = {"text": "text", "enum": "text", "int": "int4", "object": "jsonb", "bool": "bool",
              "time": "timestamptz"}


@dataclass
class WriteResult:
    """What one write did, item by item (in the order given), and the counts of each action."""

    source: str
    results: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"created": 0, "updated": 0, "unchanged": 0})

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "results": self.results, "counts": dict(self.counts)}


# --- writing ---------------------------------------------------------------------------------------------------


def _specs(source: str) -> list[FieldSpec]:
    """The contract's fields but `key`, stored in the column of the same meaning."""
    return [s for s in WRITE_CONTRACTS[source] if s.name != "key"]


def _stage(conn: psycopg.Connection, source: str, items: list[dict[str, Any]], ids: list[uuid.UUID]) -> str:
    """COPY the items into a temporary table (emptied at commit); its name."""
    specs = _specs(source)
    stage = f"items_stage_{source}"
    columns = ", ".join(f"{s.db_column} {_SQL_TYPES[s.kind]}" for s in specs)
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {stage} (i int4, id uuid, key text, {columns})"
                 " ON COMMIT DELETE ROWS")
    names = ", ".join(s.db_column for s in specs)
    with conn.cursor() as cur, cur.copy(f"COPY {stage} (i, id, key, {names}) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "uuid", "text", *(_SQL_TYPES[s.kind] for s in specs)])
        for i, (item, item_id) in enumerate(zip(items, ids, strict=True)):
            copy.write_row((i, item_id, item["key"], *(item[s.name] for s in specs)))
    return stage


def _upsert(
    conn: psycopg.Connection, source: str, owner: str, stage: str, where: str, conflict: str | None,
    order: str = "s.i",
) -> list[tuple[str, str | None, str | None, bool]]:
    """INSERT the staged rows passing `where`, in `order`; on a `conflict` update the row when a field differs.
    Rows that may conflict go in the order of their conflict's key, so concurrent writes of the same rows lock
    them in the same order. Returns (id, key, name, created) of each row inserted or updated (unchanged ones are
    not returned)."""
    cols = [s.db_column for s in _specs(source) if s.name != "at"]
    if not conflict:
        return _insert(conn, source, owner, stage, where, order, cols, None)
    # Items without `at` are upserted apart and keep the row's time: read beforehand, it missed a concurrent
    # write's row, and the conflict took the time of now as a change (`updated`, re-indexed, re-embedded).
    return [*_insert(conn, source, owner, stage, f"{where} AND s.created_at IS NOT NULL", order, cols,
                     (conflict, [*cols, "created_at"])),
            *_insert(conn, source, owner, stage, f"{where} AND s.created_at IS NULL", order, cols, (conflict, cols))]


def _insert(
    conn: psycopg.Connection, source: str, owner: str, stage: str, where: str, order: str, cols: list[str],
    on_conflict: tuple[str, list[str]] | None,
) -> list[tuple[str, str | None, str | None, bool]]:
    """One INSERT of the staged rows passing `where` (dated now when without `at`); `on_conflict`: the conflict
    and the columns a conflicting row takes when one of them differs."""
    table = WRITE_TABLES[source]
    values = ", ".join(f"s.{c}" for c in cols)
    sql = (f"INSERT INTO {table} AS t (id, owner_id, key, {', '.join(cols)}, created_at, updated_at)"
           f" SELECT s.id, %(owner)s, s.key, {values}, coalesce(s.created_at, now()), now() FROM {stage} s"
           f" WHERE {where} ORDER BY {order}")
    if on_conflict:
        conflict, changed = on_conflict
        sql += (f" ON CONFLICT {conflict} DO UPDATE SET "
                + ", ".join(f"{c} = EXCLUDED.{c}" for c in changed) + ", updated_at = now()"
                + f" WHERE ({', '.join('t.' + c for c in changed)}) IS DISTINCT FROM"
                  f" ({', '.join('EXCLUDED.' + c for c in changed)})")
    natural = "t.name" if source == "capability" else "NULL::text"
    sql += f" RETURNING t.id::text, t.key, {natural}, (t.xmax = 0)"
    return conn.execute(sql, {"owner": owner}).fetchall()


def _check_capability_names(
    conn: psycopg.Connection, owner: str, items: list[dict[str, Any]]
) -> None:
    """A capability's name is unique per owner: a keyed item may not take the name of another row."""
    keyed = {it["name"]: (i, it["key"]) for i, it in enumerate(items) if it["key"] is not None}
    if not keyed:
        return
    rows = conn.execute("SELECT name, key FROM capabilities WHERE owner_id = %s AND name = ANY(%s)",
                        (owner, list(keyed))).fetchall()
    for name, key in rows:
        i, wanted = keyed[name]
        if key != wanted:
            raise ItemConflict("name", f"another capability of this owner is named {name[:60]!r}"
                                       + (f" (key {key[:60]!r})" if key else " (without a key)"), i)


def _results(
    conn: psycopg.Connection, source: str, owner: str, items: list[dict[str, Any]], staged_ids: list[uuid.UUID],
    written: list[tuple[str, str | None, str | None, bool]],
) -> WriteResult:
    """Each item's id, key and action: from the rows the upserts returned (by key, a keyless capability by name,
    any other keyless item by the id staged for it); an item they did not return was unchanged, its id read by key
    (or name). The key is the stored row's: a keyless capability may have rewritten a keyed one."""
    table = WRITE_TABLES[source]
    by_key = {k: (i, c, k) for i, k, _n, c in written if k is not None}
    # by name whatever the row's key: a keyless write may update the keyed row holding that name
    by_name = {n: (i, c, k) for i, k, n, c in written if n is not None}
    by_id = {i: (i, c, k) for i, k, _n, c in written}
    missing_keys = [it["key"] for it in items if it["key"] is not None and it["key"] not in by_key]
    unchanged_keys = {k: (i, k) for k, i in conn.execute(
        f"SELECT key, id::text FROM {table} WHERE owner_id = %s AND key = ANY(%s)", (owner, missing_keys)
    )} if missing_keys else {}
    names = [it["name"] for it in items if source == "capability" and it["key"] is None and it["name"] not in by_name]
    unchanged_names = {n: (i, k) for n, i, k in conn.execute(
        "SELECT name, id::text, key FROM capabilities WHERE owner_id = %s AND name = ANY(%s)", (owner, names)
    )} if names else {}
    result = WriteResult(source=source)
    for index, (item, staged) in enumerate(zip(items, staged_ids, strict=True)):
        if item["key"] is not None:
            hit, unchanged = by_key.get(item["key"]), unchanged_keys.get(item["key"])
        elif source == "capability":
            hit, unchanged = by_name.get(item["name"]), unchanged_names.get(item["name"])
        else:
            hit, unchanged = by_id.get(str(staged)), None
        if hit:
            item_id, action, key = hit[0], "created" if hit[1] else "updated", hit[2]
        else:
            (item_id, key), action = unchanged or (None, item["key"]), "unchanged"
        result.results.append({"index": index, "id": item_id, "key": key, "action": action})
        result.counts[action] += 1
    return result


def write_items(pool: ConnectionPool, owner: str, source: str, items: Sequence[Mapping]) -> WriteResult:
    """Validate every item, then upsert them all in one transaction and keyword-index the rows written.

    An item with a `key` updates the owner's row of that key (another owner's rows are never read or
    touched), one without creates a row (a capability without a key: the owner's row of that name). Returns
    {index, id, key, action} per item, action created, updated or unchanged, and the counts."""
    owner = validate_owner(owner)
    source = check_source(source)
    valid = validate_items(source, items)
    if not valid:
        return WriteResult(source=source)
    for _ in range(WRITE_ATTEMPTS - 1):
        try:
            return _write_valid(pool, owner, source, valid)
        # a deadlock with a concurrent write, or a name it took first (the check now sees it): nothing was kept
        except (psycopg.errors.TransactionRollback, psycopg.errors.UniqueViolation):
            continue
    try:
        return _write_valid(pool, owner, source, valid)
    except psycopg.errors.UniqueViolation as e:
        raise _conflict(source, e) from None


def _conflict(source: str, e: psycopg.errors.UniqueViolation) -> ItemConflict:
    """The 409 a unique constraint's violation means: a concurrent write took this key or capability name."""
    constraint = e.diag.constraint_name or ""
    field = "name" if constraint.endswith("_name_key") else "key"
    return ItemConflict(field, f"another {source} of this owner took this {field} meanwhile")


def _write_valid(pool: ConnectionPool, owner: str, source: str, valid: list[dict[str, Any]]) -> WriteResult:
    """Upsert validated items and keyword-index them, in one transaction."""
    staged_ids = [uuid.uuid4() for _ in valid]
    with pool.connection() as conn, conn.transaction():
        _adopt_exported_keys(conn, source, owner, valid)
        if source == "capability":
            _check_capability_names(conn, owner, valid)
        stage = _stage(conn, source, valid, staged_ids)
        written = _upsert(conn, source, owner, stage, "s.key IS NOT NULL", "(owner_id, key) WHERE key IS NOT NULL",
                          "s.key")
        if source == "capability":  # the name is unique per owner: a capability without a key is found by it
            written += _upsert(conn, source, owner, stage, "s.key IS NULL", "(owner_id, name)", "s.name")
        else:
            written += _upsert(conn, source, owner, stage, "s.key IS NULL", None)
        result = _results(conn, source, owner, valid, staged_ids, written)
        changed = [r["id"] for r in result.results if r["action"] != "unchanged"]
        if source in INDEXED and changed:
            index_items(conn, source, owner, changed)
    return result


def _adopt_exported_keys(conn: psycopg.Connection, source: str, owner: str, items: list[dict[str, Any]]) -> None:
    """An export names an item written without a key `id:<its id>`: importing it back into the same owner finds
    that item (it takes the key), so the import changes nothing and the next export still names it once."""
    named = [it["key"].removeprefix(EXPORTED_ID_KEY) for it in items
             if it["key"] and it["key"].startswith(EXPORTED_ID_KEY)]
    ids = [i for i in named if is_uuid(i)]
    if ids:
        conn.execute(f"UPDATE {WRITE_TABLES[source]} SET key = %s || id::text"
                     " WHERE owner_id = %s AND key IS NULL AND id = ANY(%s::uuid[])", (EXPORTED_ID_KEY, owner, ids))


def _counts(rows: list[tuple]) -> list[Counter[str]]:
    return [keyword_counts(r[2]) for r in rows]


def _index_pipelined(conn: psycopg.Connection, source: str, rows: list[tuple], totals: Totals) -> None:
    """`index_rows` batch by batch, each batch's terms counted in a thread while the one before is written: the
    counting (Python) and the server's storing of postings overlap instead of taking turns."""
    batches = [rows[i:i + INDEX_BATCH] for i in range(0, len(rows), INDEX_BATCH)]
    if len(batches) <= 1:
        if rows:
            index_rows(conn, source, rows, totals)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="item-terms") as counter:
        ahead = counter.submit(_counts, batches[0])
        for i, batch in enumerate(batches):
            counts = ahead.result()
            if i + 1 < len(batches):
                ahead = counter.submit(_counts, batches[i + 1])
            index_rows(conn, source, batch, totals, counts)


def index_items(conn: psycopg.Connection, source: str, owner: str, ids: list[str]) -> int:
    """Keyword-index the given rows of one owner whose indexed text changed since they were indexed, and drop the
    index entries of those no longer live; keep the owner's stored BM25 statistics current. Returns rows indexed.

    Writers of one owner index side by side (a shared lock, which a removal takes exclusively); each then adds
    what it changed to her statistics under a short exclusive lock held until its commit."""
    indexed = INDEXED[source]
    lock = f"{source}:{owner}"
    conn.execute("SELECT pg_advisory_xact_lock_shared(%s, hashtext(%s))", (LOCK_KEYWORD_STATS, lock))
    before = _stored_totals(conn, source, owner)
    totals = {owner: list(before)}
    rows = conn.execute(
        f"SELECT t.id::text, t.owner_id, {indexed.text_sql}, t.content_hash FROM {indexed.from_sql}"
        " LEFT JOIN keyword_docs kd ON kd.source = %(s)s AND kd.item_id = t.id::text"
        f" WHERE t.owner_id = %(owner)s AND t.id = ANY(%(ids)s::uuid[]) AND {indexed.active_sql}"
        " AND kd.content_hash IS DISTINCT FROM t.content_hash",
        {"s": source, "owner": owner, "ids": ids},
    ).fetchall()
    _index_pipelined(conn, source, rows, totals)
    removed = conn.execute(
        f"DELETE FROM keyword_docs kd USING {indexed.from_sql} WHERE kd.source = %(s)s"
        " AND kd.item_id = ANY(%(ids)s) AND t.id::text = kd.item_id AND t.owner_id = %(owner)s"
        f" AND NOT ({indexed.active_sql}) RETURNING kd.doc_len",
        {"s": source, "owner": owner, "ids": ids},
    ).fetchall()
    grown_len = totals[owner][0] - before[0] - sum(r[0] for r in removed)
    grown = totals[owner][1] - before[1] - len(removed)
    if not rows and not removed:
        return 0
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_KEYWORD_STATS, f"{lock}:stats"))
    kept = conn.execute(
        "UPDATE keyword_stats SET n = n + %s, total_len = total_len + %s, added = added + %s"
        " WHERE owner_id = %s AND source = %s RETURNING n, added",
        (grown, int(grown_len), max(grown, 0), owner, source),
    ).fetchone()
    # Counted in full for a new owner, when she grew by half since, or when a keyword pass rewrote them meanwhile.
    if kept is None or kept[1] > STATS_REFRESH_SHARE * max(kept[0] - kept[1], 0):
        refresh_stats(conn, source, [owner])
    return len(rows)


def _stored_totals(conn: psycopg.Connection, source: str, owner: str) -> tuple[float, int]:
    """(total length, documents) of the owner's indexed documents: her stored statistics, else counted."""
    row = conn.execute(
        "SELECT total_len, n FROM keyword_stats WHERE owner_id = %s AND source = %s", (owner, source)
    ).fetchone() or conn.execute(
        "SELECT coalesce(sum(doc_len), 0), count(*) FROM keyword_docs WHERE owner_id = %s AND source = %s",
        (owner, source),
    ).fetchone()
    return float(row[0]), int(row[1])


# --- updating one item -----------------------------------------------------------------------------------------


def _find(conn: psycopg.Connection, table: str, owner: str, ref: str) -> tuple[str, str | None] | None:
    """(id, key) of the owner's row whose id or key is `ref` (the id first), or None."""
    row = conn.execute(
        f"SELECT id::text, key FROM {table} WHERE owner_id = %s AND (id = %s OR key = %s)"
        " ORDER BY (id = %s) DESC LIMIT 1 FOR UPDATE",
        (owner, ref if is_uuid(ref) else None, ref, ref if is_uuid(ref) else None),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def _ref(ref: object) -> str:
    if not isinstance(ref, str) or not ref.strip():
        raise ItemError("ref", "must be an item's id or key")
    ref = ref.strip()
    if len(ref) > MAX_ITEM_KEY:  # a key, or an id (36 characters)
        raise ItemError("ref", f"must be at most {MAX_ITEM_KEY} characters")
    check_storable("ref", ref)
    return ref


def update_item(pool: ConnectionPool, owner: str, source: str, ref: str, changes: Mapping) -> dict[str, Any]:
    """Change some fields of one of the owner's items, found by id or key (a task's status, a goal's progress,
    `active: false` to deactivate it). An id or key of another owner is not found, exactly like an unknown one.
    Returns {id, key, action}: updated, or unchanged when every field given was already so."""
    owner = validate_owner(owner)
    source = check_source(source)
    ref = _ref(ref)
    fields = validate_item(source, changes, partial=True)
    try:
        return _update(pool, owner, source, ref, fields)
    except psycopg.errors.UniqueViolation as e:  # a concurrent write took the key or name between check and write
        raise _conflict(source, e) from None


def _update(pool: ConnectionPool, owner: str, source: str, ref: str, fields: dict[str, Any]) -> dict[str, Any]:
    """`update_item`'s checked change in one transaction."""
    specs = {s.name: s for s in WRITE_CONTRACTS[source]}
    table = WRITE_TABLES[source]
    cols = [specs[name].db_column for name in fields]
    values = [Jsonb(v) if specs[n].kind == "object" else v for n, v in fields.items()]
    with pool.connection() as conn, conn.transaction():
        found = _find(conn, table, owner, ref)
        if found is None:
            raise NotFoundError(f"no {source} {ref!r}")
        item_id = found[0]
        if "key" in fields and fields["key"] is not None:
            taken = conn.execute(f"SELECT 1 FROM {table} WHERE owner_id = %s AND key = %s AND id <> %s",
                                 (owner, fields["key"], item_id)).fetchone()
            if taken:
                raise ItemConflict("key", f"{fields['key'][:60]!r} is already another {source}'s key")
        if source == "capability" and "name" in fields:
            taken = conn.execute("SELECT 1 FROM capabilities WHERE owner_id = %s AND name = %s AND id <> %s",
                                 (owner, fields["name"], item_id)).fetchone()
            if taken:
                raise ItemConflict("name", f"another capability of this owner is named {fields['name'][:60]!r}")
        assignments = ", ".join(f"{c} = %s" for c in cols)
        placeholders = ", ".join(["%s"] * len(cols))
        row = conn.execute(
            f"UPDATE {table} SET {assignments}, updated_at = now() WHERE id = %s AND owner_id = %s"
            f" AND ({', '.join(cols)}, NULL) IS DISTINCT FROM ({placeholders}, NULL) RETURNING key",
            (*values, item_id, owner, *values),
        ).fetchone()
        if row is None:
            return {"id": item_id, "key": found[1], "action": "unchanged"}
        if source in INDEXED:
            index_items(conn, source, owner, [item_id])
    return {"id": item_id, "key": row[0], "action": "updated"}


# --- learnings relevance ---------------------------------------------------------------------------------------


def relevant_learnings(
    pool: ConnectionPool,
    owner: str,
    *,
    task_type: str | None = None,
    failure_class: str | None = None,
    event_type: str | None = None,
    limit: int = 10,
) -> list[dict[str, Any]]:
    """The owner's learnings most relevant to a task (the learnings spec: task type 10, failure class 8, trigger
    event 6, category failure_pattern 4, freshness 3 / 2 / 1), best first, with each part of the score."""
    owner = validate_owner(owner)
    query = task_query({"task_type": task_type, "failure_class": failure_class, "event_type": event_type})
    return [
        {"id": s.id, "title": s.title, "content": s.content, "task_type": s.task_type,
         "failure_class": s.failure_class, "trigger_event": s.trigger_event, "category": s.category,
         "created_at": s.created_at, "score": s.score, "breakdown": s.breakdown}
        for s in structured_learnings(pool, owner, query, limit)
    ]
