"""The rows a memory write touches: the memory, its fragments (with their keyword-index rows), its replaced
versions and the arbitration log. Shared by the live write (`write`) and the deferred one (`deferred`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from ...embeddings import Embedder, EmbeddingError, normalise
from ...index.keywords import index_rows
from ...index.vectors import model_text
from ...vocabulary import INDEXED, LOCK_PROJECT
from ..arbitration import Decision, Neighbour, clean_text
from ..memories import content_hash, fragment_id, fragment_rows
from .inputs import MemoryInput

log = logging.getLogger(__name__)

CANDIDATES = 3


@dataclass
class NewContent:
    """A memory ready to write: its input, and what was computed from it before the write transaction."""

    memory: MemoryInput
    summary: str
    tags: list[str]
    summary_by: str
    chunks: list[str]
    texts: list[str]  # the indexed texts the vectors were made from
    vectors: np.ndarray | None  # fragment vectors, None when pending
    context: str | None = None  # the session's previous turn when it was written (sql/008)


# --- indexed text and vectors ----------------------------------------------------------------------------


def texts_for(
    conn: psycopg.Connection,
    chunks: Sequence[str],
    speaker: str | None,
    project_name: str,
    content_type: str,
    created_at: datetime,
    context: str | None = None,
) -> list[str]:
    """The indexed texts of a memory's fragments, before they exist: one query of the database's one
    definition (`mp_fragment_text`, sql/005 and 008), the text the backfill and the keyword index read.
    One text per chunk, then, for a memory with a `context`, the context fragment's (`fragment_rows`)."""
    rows = fragment_rows(chunks, context)
    texts = conn.execute(
        "SELECT mp_fragment_text(%s::text, u.c, %s::text, %s::text, %s::timestamptz,"
        " CASE WHEN u.ctx THEN %s::text END)"
        " FROM unnest(%s::text[], %s::bool[]) WITH ORDINALITY AS u(c, ctx, i) ORDER BY u.i",
        (speaker, project_name, content_type, created_at, context, [r[1] for r in rows], [r[2] for r in rows]),
    ).fetchall()
    return [r[0] for r in texts]


def memory_vector(vectors: np.ndarray) -> np.ndarray:
    """The memory-level vector: normalised mean of its own fragments' vectors (pass those only: the context
    fragment's, last when present, is not part of it)."""
    return normalise(np.asarray(vectors, dtype=np.float32).mean(axis=0, keepdims=True))[0]


def embed_texts(embedder: Embedder, texts: list[str]) -> tuple[np.ndarray | None, str | None]:
    """(vectors, None) or (None, reason) when the provider fails; the model reads each text as `model_text`. On a
    write's path (it waits, or holds the project lock): within the provider's short budget."""
    try:
        return embedder.embed_on_request([model_text(t) for t in texts], kind="passage"), None
    except EmbeddingError as exc:
        log.warning("embedding failed, memory stored pending: %s", exc)
        return None, str(exc)
    except Exception as exc:  # a provider bug must not lose the write either
        log.exception("embedding crashed, memory stored pending")
        return None, f"{type(exc).__name__}: {exc}"


# --- rows -----------------------------------------------------------------------------------------------


def lock_project(conn: psycopg.Connection, project_id: str) -> None:
    """Serialise conflict detection + write per project until the transaction ends."""
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_PROJECT, project_id))


def find_candidates(
    conn: psycopg.Connection,
    owner: str,
    project_id: str,
    vector: np.ndarray,
    model: str,
    threshold: float,
    *,
    exclude: str | None = None,
    limit: int = CANDIDATES,
) -> list[Neighbour]:
    """Active, settled memories of this project at or above `threshold` cosine similarity, best first.

    An exact scan over the project's rows (a materialised CTE keeps the HNSW index, which filters
    after its candidate list, from dropping matches of small projects).
    """
    rows = conn.execute(
        "WITH c AS MATERIALIZED (SELECT m.id, coalesce(m.summary, '') AS summary, m.content, m.content_type,"
        "   1 - (m.avg_embedding <=> %(v)s) AS sim FROM memories m"
        "   WHERE m.owner_id = %(owner)s AND m.project_id = %(project)s AND m.is_active"
        "   AND m.arbitration_status = 'done' AND m.avg_embedding IS NOT NULL"
        "   AND m.embedding_model = %(model)s"
        "   AND m.id IS DISTINCT FROM %(exclude)s)"
        " SELECT id, summary, content, content_type, sim FROM c WHERE sim >= %(threshold)s"
        " ORDER BY sim DESC, id LIMIT %(limit)s",
        {
            "v": vector,
            "owner": owner,
            "project": project_id,
            "model": model,
            "exclude": exclude,
            "threshold": threshold,
            "limit": limit,
        },
    ).fetchall()
    return [Neighbour(r[0], r[1], r[2], r[3], float(r[4])) for r in rows]


def log_arbitration(
    conn: psycopg.Connection,
    owner: str,
    project_id: str,
    action: str,
    *,
    candidate_id: str | None,
    new_memory_id: str | None,
    similarity: float | None,
    old_summary: str | None,
    new_summary: str | None,
    model: str | None,
    reason: str | None,
) -> None:
    conn.execute(
        "INSERT INTO memory_arbitrations (owner_id, project_id, candidate_memory_id, new_memory_id, action,"
        " similarity, old_summary, new_summary, model, reason)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            owner,
            project_id,
            candidate_id,
            new_memory_id,
            action,
            similarity,
            old_summary,
            new_summary,
            model,
            clean_text(reason) if reason else reason,  # may quote a provider's error text
        ),
    )


def log_decision(
    conn: psycopg.Connection, owner: str, project_id: str, d: Decision, new_id: str | None, new_summary: str
) -> None:
    c = d.candidate
    log_arbitration(
        conn,
        owner,
        project_id,
        d.action,
        candidate_id=c.id if c else None,
        new_memory_id=new_id,
        similarity=c.similarity if c else None,
        old_summary=c.summary if c else None,
        new_summary=new_summary,
        model=d.model,
        reason=d.reason,
    )


def drop_fragments(conn: psycopg.Connection, memory_id: str) -> None:
    """Delete a memory's fragments and their keyword-index rows."""
    conn.execute(
        "DELETE FROM keyword_docs WHERE source = 'fragment' AND item_id IN"
        " (SELECT id FROM fragments WHERE memory_id = %s)",
        (memory_id,),
    )
    conn.execute("DELETE FROM fragments WHERE memory_id = %s", (memory_id,))


def write_fragments(
    conn: psycopg.Connection,
    memory_id: str,
    owner: str,
    chunks: Sequence[str],
    texts: Sequence[str],
    vectors: np.ndarray | None,
    model: str,
    created_at: datetime,
    context: str | None = None,
) -> None:
    """Insert the fragments (with their vectors when given) and keyword-index them.

    `texts` are the texts the vectors were made from, one per fragment (`fragment_rows`: the chunks, then
    the context fragment when the memory has a context): `embedded_hash` is their md5, so a fragment whose
    indexed text is another one by now (its `content_hash`, set by the trigger) stays pending."""
    rows = fragment_rows(chunks, context)
    with conn.cursor() as cur:
        if vectors is None:
            cur.executemany(
                "INSERT INTO fragments (id, memory_id, owner_id, chunk_index, content, ts, with_context)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(fragment_id(memory_id, ctx, i), memory_id, owner, i, c, created_at, ctx) for i, c, ctx in rows],
            )
        else:
            cur.executemany(
                "INSERT INTO fragments (id, memory_id, owner_id, chunk_index, content, ts, with_context, embedding,"
                " embedding_model, embedded_hash, embedded_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, md5(%s), now())",
                [
                    (fragment_id(memory_id, ctx, i), memory_id, owner, i, c, created_at, ctx, v, model, text)
                    for (i, c, ctx), v, text in zip(rows, vectors, texts, strict=True)
                ],
            )
    source = INDEXED["fragment"]
    rows = conn.execute(
        f"SELECT t.id, t.owner_id, {source.text_sql}, t.content_hash FROM {source.from_sql}"
        " WHERE t.memory_id = %s ORDER BY t.chunk_index",
        (memory_id,),
    ).fetchall()
    index_rows(conn, "fragment", rows)


def insert_new(
    conn: psycopg.Connection, memory_id: str, project_id: str, new: NewContent, model: str, created_at: datetime
) -> None:
    """Insert a new memory row and its fragments (pending when `new` has no vectors)."""
    m = new.memory
    pending = new.vectors is None
    conn.execute(
        "INSERT INTO memories (id, owner_id, project_id, content_type, content, content_hash, ts, speaker,"
        " metadata, summary, tags, chunk_count, embedding_status, arbitration_status, created_at, updated_at,"
        " avg_embedding, embedding_model, embedded_hash, embedded_at, session, turn, context)"
        " VALUES (%(id)s, %(owner)s, %(project)s, %(type)s,"
        " %(content)s, %(hash)s, %(ts)s, %(speaker)s, %(meta)s, %(summary)s, %(tags)s, %(chunks)s,"
        " %(status)s, %(status)s, %(created)s, now(), %(vec)s, %(model)s,"
        " CASE WHEN %(pending)s THEN NULL ELSE %(hash)s END,"
        " CASE WHEN %(pending)s THEN NULL ELSE now() END,"
        " %(session)s, CASE WHEN %(session)s::text IS NULL THEN NULL ELSE nextval('memory_turns') END,"
        " %(context)s)",
        {
            "id": memory_id,
            "owner": m.owner,
            "project": project_id,
            "type": m.content_type,
            "content": m.content,
            "hash": content_hash(m.content),
            "ts": m.ts,
            "speaker": m.speaker,
            "meta": Jsonb({"summary_by": new.summary_by}),
            "summary": new.summary,
            "tags": Jsonb(new.tags),
            "chunks": len(new.chunks),
            "status": "pending" if pending else "done",
            "created": created_at,
            "vec": None if pending else memory_vector(new.vectors[: len(new.chunks)]),
            "model": None if pending else model,
            "pending": pending,
            "session": m.session,
            "context": new.context,
        },
    )
    write_fragments(conn, memory_id, m.owner, new.chunks, new.texts, new.vectors, model, created_at, new.context)


def replace_memory(
    conn: psycopg.Connection, embedder: Embedder, old_id: str, project_name: str, new: NewContent
) -> int:
    """Copy the old row into memory_versions and overwrite it with `new`; returns the version stored.
    `project_name` is the stored one (the name in the indexed texts)."""
    m = new.memory
    version = conn.execute(
        "SELECT coalesce(max(version), 0) + 1 FROM memory_versions WHERE memory_id = %s", (old_id,)
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO memory_versions (memory_id, owner_id, project_id, version, content_type, content,"
        " content_hash, ts, summary, tags, chunk_count, avg_embedding, created_at)"
        " SELECT id, owner_id, project_id, %s,"
        " content_type, content, content_hash, ts, summary, tags, chunk_count, avg_embedding, updated_at"
        " FROM memories WHERE id = %s",
        (version, old_id),
    )
    # The replaced memory keeps its date and its place in its conversation (session, turn, context).
    created_at, context = conn.execute(
        "SELECT created_at, context FROM memories WHERE id = %s", (old_id,)
    ).fetchone()
    texts = texts_for(conn, new.chunks, m.speaker, project_name, m.content_type, created_at, context)
    vectors, embedded = new.vectors, new.texts
    if texts != new.texts and vectors is not None:  # the old row's date or context differs: embed what it indexes
        fresh = embed_texts(embedder, texts)[0]
        if fresh is not None:
            vectors, embedded = fresh, texts
        elif len(texts) != len(new.texts):
            # Else the new content's vectors, pending again for the backfill (their texts are not the indexed
            # ones); a context fragment only one side has borrows the first chunk's vector, pending likewise.
            n = len(new.chunks)
            vectors = np.vstack([vectors[:n], vectors[:1]])[: len(texts)]
            embedded = [*new.texts[:n], new.texts[0]][: len(texts)]
    conn.execute(
        "UPDATE memories SET content = %(content)s, content_type = %(type)s, content_hash = %(hash)s,"
        " ts = %(ts)s, speaker = %(speaker)s, summary = %(summary)s, tags = %(tags)s,"
        " chunk_count = %(chunks)s,"
        " metadata = metadata || %(meta)s, updated_at = now(), avg_embedding = %(vec)s,"
        " embedding_model = %(model)s, embedding_status = 'done', embedded_hash = %(hash)s,"
        " embedded_at = now(), arbitration_status = 'done'"
        " WHERE id = %(id)s",
        {
            "id": old_id,
            "content": m.content,
            "type": m.content_type,
            "hash": content_hash(m.content),
            "ts": m.ts,
            "speaker": m.speaker,
            "summary": new.summary,
            "tags": Jsonb(new.tags),
            "chunks": len(new.chunks),
            "meta": Jsonb({"summary_by": new.summary_by}),
            "vec": memory_vector(vectors[: len(new.chunks)]),
            "model": embedder.model_name,
        },
    )
    drop_fragments(conn, old_id)
    write_fragments(conn, old_id, m.owner, new.chunks, embedded, vectors, embedder.model_name, created_at, context)
    return int(version)
