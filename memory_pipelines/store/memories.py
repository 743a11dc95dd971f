"""Writing memory rows and their fragments (embeddings are filled by the backfill or by ingest)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import datetime

import psycopg
from psycopg.types.json import Jsonb

from ..retrieval.neighbours import other_party
from ..text.chunks import chunk_text
from ..text.summary import extractive_summary
from ..text.summary import tags as extract_tags


def new_memory_id() -> str:
    """A fresh memory id (`mem_` + 20 hex characters)."""
    return "mem_" + uuid.uuid4().hex[:20]


def content_hash(content: str) -> str:
    """sha-256 of the content, for tracking only (not used to decide conflicts)."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


CONTEXT_CHARS = 300  # how much of the previous turn a conversational memory is indexed with


def previous_turn(
    conn: psycopg.Connection, owner_id: str, project_id: str, session: str, speaker: str | None = None
) -> str | None:
    """The session's latest active turn as "speaker: words" (cut to CONTEXT_CHARS): the context a new turn of
    `speaker` is indexed with (sql/008); None when there is none or it is the same known speaker's
    (retrieval.neighbours.other_party: a reply needs what it answers, a second statement does not)."""
    row = conn.execute(
        "SELECT speaker, content FROM memories WHERE owner_id = %s AND project_id = %s AND session = %s"
        " AND is_active ORDER BY turn DESC LIMIT 1",
        (owner_id, project_id, session),
    ).fetchone()
    if row is None or not other_party(speaker, row[0]):
        return None
    speaker, content = row
    return (f"{speaker}: " if speaker else "") + " ".join(content.split())[:CONTEXT_CHARS]


def fragment_rows(chunks: Sequence[str], context: str | None) -> list[tuple[int, str, bool]]:
    """(chunk_index, content, with_context) of a memory's fragments: its chunks, then, when it has a context
    (the previous turn of its session), one more fragment holding its first chunk, indexed with that context
    (sql/008_conversation.sql)."""
    rows = [(i, chunk, False) for i, chunk in enumerate(chunks)]
    if context and chunks:
        rows.append((len(chunks), chunks[0], True))
    return rows


def fragment_id(memory_id: str, with_context: bool, index: int) -> str:
    return f"{memory_id}_ctx" if with_context else f"{memory_id}_{index:03d}"


def write_fragments(
    conn: psycopg.Connection,
    memory_id: str,
    owner_id: str,
    chunks: list[str],
    ts: datetime,
    context: str | None = None,
) -> None:
    """Replace the fragments of a memory with these chunks, and its context fragment (embeddings pending)."""
    conn.execute("DELETE FROM fragments WHERE memory_id = %s", (memory_id,))
    rows = fragment_rows(chunks, context)
    with conn.cursor() as cur:
        if context:
            cur.executemany(
                "INSERT INTO fragments (id, memory_id, owner_id, chunk_index, content, ts, with_context)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(fragment_id(memory_id, ctx, i), memory_id, owner_id, i, c, ts, ctx) for i, c, ctx in rows],
            )
        else:  # the columns of every schema version (tests build old ones)
            cur.executemany(
                "INSERT INTO fragments (id, memory_id, owner_id, chunk_index, content, ts)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                [(fragment_id(memory_id, False, i), memory_id, owner_id, i, c, ts) for i, c, _ctx in rows],
            )


def insert_memory(
    conn: psycopg.Connection,
    *,
    memory_id: str,
    owner_id: str,
    project_id: str,
    content_type: str,
    content: str,
    created_at: datetime,
    speaker: str | None = None,
    metadata: dict | None = None,
    summary: str | None = None,
    tags: list[str] | None = None,
    session: str | None = None,
) -> bool:
    """Insert one memory and its fragments unless the id exists; True when inserted. A memory of a `session`
    is its next turn, indexed with the previous one."""
    chunks = chunk_text(content)
    columns = ("id, owner_id, project_id, content_type, content, content_hash, ts, speaker, metadata, summary, tags,"
               " chunk_count, created_at, updated_at")
    values = [
        memory_id,
        owner_id,
        project_id,
        content_type,
        content,
        content_hash(content),
        int(created_at.timestamp()),
        speaker,
        Jsonb(metadata or {}),
        summary if summary is not None else extractive_summary(content),
        Jsonb(tags if tags is not None else extract_tags(content)),
        len(chunks),
        created_at,
        created_at,
    ]
    turn, context = "", None
    if session is not None:  # the conversation columns (sql/008) only when used
        context = previous_turn(conn, owner_id, project_id, session, speaker)
        columns += ", session, context, turn"
        values += [session, context]
        turn = ", nextval('memory_turns')"
    row = conn.execute(
        f"INSERT INTO memories ({columns}) VALUES ({', '.join(['%s'] * len(values))}{turn})"
        " ON CONFLICT (id) DO NOTHING RETURNING id",
        values,
    ).fetchone()
    if row is None:
        return False
    write_fragments(conn, memory_id, owner_id, chunks, created_at, context)
    return True
