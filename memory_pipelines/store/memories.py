"""Writing memory rows and their fragments (embeddings are filled by the backfill or by ingest)."""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime

import psycopg
from psycopg.types.json import Jsonb

from ..text.chunks import chunk_text
from ..text.summary import extractive_summary
from ..text.summary import tags as extract_tags


def new_memory_id() -> str:
    """A fresh memory id (`mem_` + 20 hex characters)."""
    return "mem_" + uuid.uuid4().hex[:20]


def content_hash(content: str) -> str:
    """sha-256 of the content, for tracking only (not used to decide conflicts)."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def write_fragments(
    conn: psycopg.Connection, memory_id: str, owner_id: str, chunks: list[str], ts: datetime
) -> None:
    """Replace the fragments of a memory with these chunks (embeddings pending)."""
    conn.execute("DELETE FROM fragments WHERE memory_id = %s", (memory_id,))
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO fragments (id, memory_id, owner_id, chunk_index, content, ts) VALUES (%s, %s, %s, %s, %s, %s)",
            [(f"{memory_id}_{i:03d}", memory_id, owner_id, i, chunk, ts) for i, chunk in enumerate(chunks)],
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
) -> bool:
    """Insert one memory and its fragments unless the id exists; True when inserted."""
    chunks = chunk_text(content)
    row = conn.execute(
        "INSERT INTO memories (id, owner_id, project_id, content_type, content, content_hash, ts, speaker,"
        " metadata, summary, tags, chunk_count, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (id) DO NOTHING RETURNING id",
        (
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
        ),
    ).fetchone()
    if row is None:
        return False
    write_fragments(conn, memory_id, owner_id, chunks, created_at)
    return True
