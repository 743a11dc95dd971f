"""Forget one item of any source, or drop a project with its memories: afterwards no read returns it or any part
of it, and the keyword statistics are those of a store that never held it.

Each removal is one transaction, ending with its audit row. An unknown id, another owner's and one already
forgotten are the same "not found", and nothing is removed.

What goes with an item: its keyword document and postings (`unindex`, statistics kept exact) and its rows in
the retrieval log (`scrub_log`: the build keeps its counts, not the item). With a memory: its fragments, its
replaced versions, its arbitration records (one that judged another surviving memory against it only loses its
id and summary), the inactive memories folded into it (`duplicate_of` / `merged_into`: copies of its content),
and the context later turns of its conversation were indexed with (each gets the context it would have had:
the turn before the forgotten one; its context fragment becomes pending for the backfill and the keyword pass).

Races: a memory is forgotten under its project's advisory lock (what ingest and the deferred arbitration take),
its rows locked before anything is deleted; the keyword indexer locks the rows it indexes (FOR KEY SHARE), so
it either finishes first (and its postings are deleted here) or finds the row gone; the embedding backfill only
updates rows, so a deleted row stays deleted; a context build's log locks the items it logs (FOR KEY SHARE, skipping
rows a removal holds), so it either commits first (and is scrubbed here) or logs the item as gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ...infra.db import transaction
from ...infra.errors import NotFoundError, ValidationError, check_storable
from ...infra.ids import is_uuid
from ...retrieval.neighbours import other_party
from ...vocabulary import MAX_ID
from ..ingest import validate_owner
from ..ingest.rows import lock_project
from ..memories import CONTEXT_CHARS, fragment_id
from ..projects import key_hint
from .audit import CLI_ACTOR, check_actor, write_audit
from .unindex import scrub_log, unindex


@dataclass(frozen=True)
class _Plain:
    """A source stored as one row per item."""

    table: str
    keyword_source: str | None  # its keyword-index source (None: not keyword-indexed)


PLAIN: dict[str, _Plain] = {
    "task": _Plain("tasks", "task"),
    "learning": _Plain("learnings", "learning"),
    "capability": _Plain("capabilities", "capability"),
    "goal": _Plain("goals", None),
    "event": _Plain("events", "event"),
}
FORGETTABLE: tuple[str, ...] = (*PLAIN, "memory")

Counts = dict[str, int]


def check_source(source: object) -> str:
    if source not in FORGETTABLE:
        raise ValidationError("source", f"must be one of {list(FORGETTABLE)}, got {source!r}")
    return str(source)


def check_ref(ref: object, field: str = "id") -> str:
    """An item's id (or its caller's key): a non-empty string of at most MAX_ID characters."""
    if not isinstance(ref, str) or not ref.strip():
        raise ValidationError(field, "must be a non-empty string")
    if len(ref) > MAX_ID:
        raise ValidationError(field, f"must be at most {MAX_ID} characters")
    return check_storable(field, ref.strip())


def _has_key(conn: psycopg.Connection, table: str) -> bool:
    """Whether `table` has a caller's `key` column (items written with one can be named by it)."""
    return bool(conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'key'"
        " AND NOT attisdropped)", (table,)).fetchone()[0])


def _find(conn: psycopg.Connection, table: str, owner: str, ref: str, *, lock: bool) -> tuple | None:
    """(id, project_id or None) of the owner's row named by id or key, locked FOR UPDATE when `lock`."""
    project = "project_id::text" if table == "memories" else "NULL"
    suffix = " FOR UPDATE" if lock else ""
    if table == "memories" or is_uuid(ref):
        row = conn.execute(
            f"SELECT id::text, {project} FROM {table} WHERE owner_id = %s AND id = %s{suffix}", (owner, ref)
        ).fetchone()
        if row is not None:
            return row
    if _has_key(conn, table):
        return conn.execute(
            f"SELECT id::text, {project} FROM {table} WHERE owner_id = %s AND key = %s{suffix}", (owner, ref)
        ).fetchone()
    return None


def forget(pool: ConnectionPool, owner: str, source: str, ref: str, *, actor: str = CLI_ACTOR) -> dict[str, Any]:
    """Forget the owner's item of `source` named by `ref` (its id, or its key); returns the rows removed per
    table. NotFoundError for an unknown id, another owner's, or one already forgotten."""
    owner = validate_owner(owner)
    source = check_source(source)
    ref = check_ref(ref)
    actor = check_actor(actor)
    with transaction(pool) as conn:
        if source == "memory":
            item_id, counts = _forget_memory(conn, owner, ref)
        else:
            item_id, counts = _forget_plain(conn, owner, source, ref)
        audit = write_audit(conn, owner, actor, "forget", source=source, item_id=item_id, counts=counts)
    return {"source": source, "id": item_id, "removed": _nonzero(counts), "audit_id": audit}


def _nonzero(counts: Counts) -> Counts:
    return {t: n for t, n in counts.items() if n}


def _not_found(source: str, ref: str) -> NotFoundError:
    return NotFoundError(f"no {source} {ref!r}")


def _forget_plain(conn: psycopg.Connection, owner: str, source: str, ref: str) -> tuple[str, Counts]:
    spec = PLAIN[source]
    found = _find(conn, spec.table, owner, ref, lock=True)
    if found is None:
        raise _not_found(source, ref)
    item_id = found[0]
    counts: Counts = {}
    counts[spec.table] = conn.execute(
        f"DELETE FROM {spec.table} WHERE owner_id = %s AND id = %s::uuid", (owner, item_id)
    ).rowcount
    if spec.keyword_source:
        counts["keyword_docs"] = unindex(conn, spec.keyword_source, owner, [item_id])
    counts["retrieval_candidates"] = scrub_log(conn, owner, [item_id])
    return item_id, counts


def _forget_memory(conn: psycopg.Connection, owner: str, ref: str) -> tuple[str, Counts]:
    head = _find(conn, "memories", owner, ref, lock=False)
    if head is None:
        raise _not_found("memory", ref)
    memory_id, project_id = head
    lock_project(conn, project_id)  # as ingest and the deferred arbitration do, before any memory row
    ids = _with_folded(conn, owner, memory_id)
    if memory_id not in ids:  # forgotten meanwhile
        raise _not_found("memory", ref)
    counts = _recontext(conn, owner, ids)
    counts = _add(counts, _delete_memories(conn, owner, ids))
    return memory_id, counts


def _with_folded(conn: psycopg.Connection, owner: str, memory_id: str) -> list[str]:
    """The memory and the inactive memories folded into it (transitively), each locked; [] when it is gone."""
    rows = conn.execute(
        "WITH RECURSIVE f(id) AS (SELECT %(id)s::text UNION"
        " SELECT m.id FROM memories m JOIN f"
        "   ON coalesce(m.metadata ->> 'merged_into', m.metadata ->> 'duplicate_of') = f.id"
        "   WHERE m.owner_id = %(o)s AND NOT m.is_active)"
        " SELECT m.id FROM memories m WHERE m.owner_id = %(o)s AND m.id IN (SELECT id FROM f)"
        " ORDER BY m.id FOR UPDATE OF m",
        {"id": memory_id, "o": owner},
    ).fetchall()
    return [r[0] for r in rows]


def _add(a: Counts, b: Counts) -> Counts:
    return {t: a.get(t, 0) + b.get(t, 0) for t in {**a, **b}}


def _delete_memories(conn: psycopg.Connection, owner: str, ids: Sequence[str]) -> Counts:
    """Delete locked memories with everything of theirs (fragments and their postings, versions, arbitrations,
    log rows)."""
    params = {"o": owner, "ids": list(ids)}
    fragments = [r[0] for r in conn.execute(
        "DELETE FROM fragments WHERE owner_id = %(o)s AND memory_id = ANY(%(ids)s) RETURNING id", params)]
    counts: Counts = {"fragments": len(fragments), "keyword_docs": unindex(conn, "fragment", owner, fragments)}
    counts["memory_versions"] = conn.execute(
        "DELETE FROM memory_versions WHERE owner_id = %(o)s AND memory_id = ANY(%(ids)s)", params).rowcount
    # Its own records (created, replaced, deferred; a duplicate skipped against it) go; one that judged another
    # surviving memory against it keeps that memory's record, without this one's id and summary.
    counts["memory_arbitrations"] = conn.execute(
        "DELETE FROM memory_arbitrations WHERE owner_id = %(o)s AND (new_memory_id = ANY(%(ids)s)"
        " OR (candidate_memory_id = ANY(%(ids)s) AND new_memory_id IS NULL))", params).rowcount
    counts["memory_arbitrations"] += conn.execute(
        "UPDATE memory_arbitrations SET candidate_memory_id = NULL, old_summary = NULL"
        " WHERE owner_id = %(o)s AND candidate_memory_id = ANY(%(ids)s)", params).rowcount
    counts["memories"] = conn.execute(
        "DELETE FROM memories WHERE owner_id = %(o)s AND id = ANY(%(ids)s)", params).rowcount
    counts["retrieval_candidates"] = scrub_log(conn, owner, ids)
    return counts


def turn_text(speaker: str | None, content: str) -> str:
    """A turn as the next one's context holds it (`memories.previous_turn`)."""
    return (f"{speaker}: " if speaker else "") + " ".join(content.split())[:CONTEXT_CHARS]


def _recontext(conn: psycopg.Connection, owner: str, ids: Sequence[str]) -> Counts:
    """Give each later turn indexed with a forgotten memory (or one of its versions) as its context the context
    it would have had without it; returns what was rewritten."""
    gone = conn.execute(
        "SELECT m.id, m.project_id, m.session, m.turn, m.speaker, array_append(array_agg(v.content)"
        " FILTER (WHERE v.content IS NOT NULL), m.content) FROM memories m"
        " LEFT JOIN memory_versions v ON v.memory_id = m.id AND v.owner_id = m.owner_id"
        " WHERE m.owner_id = %s AND m.id = ANY(%s) AND m.session IS NOT NULL AND m.turn IS NOT NULL"
        " GROUP BY m.id",
        (owner, list(ids)),
    ).fetchall()
    counts: Counts = {}
    for _mid, project_id, session, turn, speaker, contents in gone:
        texts = sorted({turn_text(speaker, c) for c in contents})
        later = conn.execute(
            "SELECT id, speaker, turn FROM memories WHERE owner_id = %s AND project_id = %s AND session = %s"
            " AND turn > %s AND context = ANY(%s) AND NOT id = ANY(%s) ORDER BY id FOR UPDATE",
            (owner, project_id, session, turn, texts, list(ids)),
        ).fetchall()
        for later_id, later_speaker, later_turn in later:
            counts = _add(counts, _set_context(conn, owner, project_id, session, ids, later_id, later_speaker,
                                               later_turn))
    return counts


def _set_context(
    conn: psycopg.Connection, owner: str, project_id: str, session: str, gone: Sequence[str], memory_id: str,
    speaker: str | None, turn: int,
) -> Counts:
    before = conn.execute(
        "SELECT speaker, content FROM memories WHERE owner_id = %s AND project_id = %s AND session = %s"
        " AND is_active AND turn < %s AND NOT id = ANY(%s) ORDER BY turn DESC LIMIT 1",
        (owner, project_id, session, turn, list(gone)),
    ).fetchone()
    context = turn_text(*before) if before is not None and other_party(speaker, before[0]) else None
    ctx = fragment_id(memory_id, True, 0)
    counts = {"keyword_docs": unindex(conn, "fragment", owner, [ctx]), "contexts_rewritten": 1}
    if context is None:
        counts["fragments"] = conn.execute("DELETE FROM fragments WHERE id = %s", (ctx,)).rowcount
    conn.execute("UPDATE memories SET context = %s WHERE id = %s", (context, memory_id))
    # Its text is another one now (the trigger rehashed it): pending for the backfill and the keyword pass.
    conn.execute(
        "UPDATE fragments SET embedding = NULL, embedding_model = NULL, embedded_hash = NULL, embedded_at = NULL"
        " WHERE id = %s",
        (ctx,),
    )
    return counts


def drop_project(pool: ConnectionPool, owner: str, project_key: str, *, actor: str = CLI_ACTOR) -> dict[str, Any]:
    """Drop the owner's project with all its memories (and theirs: see `forget`); returns rows removed per table.
    Tasks naming the project key are another source and stay. NotFoundError for an unknown project."""
    owner = validate_owner(owner)
    key = check_ref(project_key, "project_key")
    actor = check_actor(actor)
    with transaction(pool) as conn:
        row = conn.execute(
            "SELECT id::text FROM projects WHERE owner_id = %s AND project_key = %s FOR UPDATE", (owner, key)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no project {key!r}{key_hint(conn, owner, key)}")
        project_id = row[0]
        lock_project(conn, project_id)
        ids = [r[0] for r in conn.execute(
            "SELECT id FROM memories WHERE owner_id = %s AND project_id = %s ORDER BY id FOR UPDATE",
            (owner, project_id))]
        counts = _delete_memories(conn, owner, ids)
        counts["memory_arbitrations"] += conn.execute(  # records of ingests that left no memory (SKIP)
            "DELETE FROM memory_arbitrations WHERE owner_id = %s AND project_id = %s", (owner, project_id)).rowcount
        counts["projects"] = conn.execute("DELETE FROM projects WHERE id = %s", (project_id,)).rowcount
        audit = write_audit(conn, owner, actor, "drop_project", source="project", item_id=key, counts=counts)
    return {"project_key": key, "removed": _nonzero(counts), "audit_id": audit}
