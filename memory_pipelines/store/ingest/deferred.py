"""Deferred work of the write path: memories stored without waiting, or while the embedding provider was down.

`finish_deferred` embeds their fragments (the backfill), sets the memory vectors, then runs the same
conflict detection and arbitration a live ingest runs, with the LLM's summary for those stored without waiting.
Offline: the Dagster `memory_vectors` asset calls it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ...embeddings import Embedder
from ...embeddings.base import to_array
from ...index.vectors import StopFn, embed_source, finish_memories
from ...infra.db import transaction
from ...infra.llm import ChatLLM, LLMError, LLMUnreachable
from ...infra.openai_client import Budget
from ..arbitration import EXTRACTIVE, EXTRACTIVE_PENDING, arbitrate, summarise
from .inputs import MemoryInput
from .rows import NewContent, drop_fragments, find_candidates, lock_project, log_decision, replace_memory, texts_for
from .write import conflict_threshold_for


class _AskedOncePerPass:
    """The chat model for one pass over deferred memories: once it could not be reached, the pass asks it no more.
    Each ask waited out its whole budget, so a model that hangs held the pass (and the embedding of the writes
    that came meanwhile) for minutes per memory; the memories left get the extractive summary and the rules,
    as in an outage."""

    def __init__(self, llm: ChatLLM) -> None:
        self.llm, self.model = llm, llm.model
        self.down: str | None = None

    def complete_json(self, system: str, user: str, budget: Budget | None = None) -> dict[str, Any]:
        if self.down is not None:
            raise LLMError(f"not asked again in this pass ({self.down})")
        try:
            return self.llm.complete_json(system, user, budget)
        except LLMUnreachable as exc:
            self.down = str(exc)
            raise

    def attempt_timeout(self, budget: Budget | None = None) -> float:
        return self.llm.attempt_timeout(budget)


def _pending_ids(pool: ConnectionPool, model: str) -> list[str]:
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT id FROM memories WHERE arbitration_status = 'pending' AND is_active"
            " AND embedding_status = 'done' AND embedding_model = %s ORDER BY created_at, id",
            (model,),
        ).fetchall()
    return [r[0] for r in rows]


def _settle_one(
    pool: ConnectionPool, embedder: Embedder, llm: ChatLLM | None, memory_id: str, threshold: float | None
) -> dict[str, Any] | None:
    """Conflict detection + arbitration for one deferred memory, like a live ingest."""
    model = embedder.model_name
    with pool.connection() as conn:
        head = conn.execute(
            "SELECT project_id::text, content, coalesce(metadata->>'summary_by', %s) FROM memories WHERE id = %s",
            (EXTRACTIVE, memory_id),
        ).fetchone()
    if head is None:
        return None
    # A memory stored without waiting has the extractive summary; the LLM's comes here, outside the lock.
    better = summarise(llm, head[1]) if head[2] == EXTRACTIVE_PENDING else None
    with transaction(pool) as conn:
        lock_project(conn, head[0])
        row = conn.execute(
            "SELECT m.owner_id, m.project_id::text, p.project_key, p.project_name, m.content, m.content_type, m.ts,"
            " m.speaker, coalesce(m.summary, ''), m.tags,"
            " coalesce(m.metadata->>'summary_by', 'extractive'), m.avg_embedding, m.created_at, m.context"
            " FROM memories m JOIN projects p ON p.id = m.project_id WHERE m.id = %s AND m.is_active"
            " AND m.arbitration_status = 'pending' AND m.embedding_status = 'done' FOR UPDATE OF m",
            (memory_id,),
        ).fetchone()
        if row is None:  # settled by another worker meanwhile
            return None
        owner, project_id, key, project_name, content, ctype, ts, speaker, summary, tags, by, vec, own_date, ctx = row
        if better is not None and by == EXTRACTIVE_PENDING and content == head[1]:
            summary, tags, by = better
            conn.execute(
                "UPDATE memories SET summary = %s, tags = %s, metadata = metadata || %s WHERE id = %s",
                (summary, Jsonb(tags), Jsonb({"summary_by": by}), memory_id),
            )
        limit = threshold if threshold is not None else conflict_threshold_for(model)
        candidates = find_candidates(conn, owner, project_id, to_array(vec), model, limit, exclude=memory_id)
        d = arbitrate(llm, summary, content, ctype, candidates)
        c = d.candidate
        if d.action in ("SKIP", "REPLACE") and c is not None:
            if d.action == "REPLACE":
                frags = conn.execute(
                    "SELECT content, embedding, with_context FROM fragments WHERE memory_id = %s"
                    " ORDER BY with_context, chunk_index",
                    (memory_id,),
                ).fetchall()
                chunks = [f[0] for f in frags if not f[2]]
                stored = MemoryInput(owner, content, ctype, key, project_name, int(ts), speaker=speaker)
                new = NewContent(
                    stored,
                    summary,
                    list(tags or []),
                    by,
                    chunks,
                    texts_for(conn, chunks, speaker, project_name, ctype, own_date, ctx),
                    np.vstack([to_array(f[1]) for f in frags]),
                )
                replace_memory(conn, embedder, c.id, project_name, new)
            drop_fragments(conn, memory_id)
            conn.execute(
                "UPDATE memories SET is_active = false, arbitration_status = 'done', updated_at = now(),"
                " metadata = metadata || %s WHERE id = %s",
                (Jsonb({"merged_into" if d.action == "REPLACE" else "duplicate_of": c.id}), memory_id),
            )
        else:
            conn.execute("UPDATE memories SET arbitration_status = 'done' WHERE id = %s", (memory_id,))
        log_decision(conn, owner, project_id, d, memory_id, summary)
    return {
        "id": memory_id,
        "action": d.action,
        "candidate_id": c.id if c else None,
        "similarity": c.similarity if c else None,
    }


def finish_deferred(
    pool: ConnectionPool,
    embedder: Embedder,
    llm: ChatLLM | None,
    *,
    conflict_threshold: float | None = None,
    live: bool = False,
    stop: StopFn | None = None,
) -> dict[str, Any]:
    """Embed pending fragments, then arbitrate every memory whose arbitration was deferred.

    A deferred memory that duplicates an existing one is deactivated (SKIP, `duplicate_of` in its
    metadata) or folded into it (REPLACE: the old text becomes a version, `merged_into` in metadata).
    Memories whose fragments still cannot be embedded stay pending for the next run. `live` (a server's
    background pass): the owners' graphs are never dropped for the load (searches keep them), and only the
    owners it wrote are looked at afterwards (`embed_buckets`). `stop`, asked between batches and memories, ends
    the pass early: what is left stays pending for the next one.
    """
    backfill = embed_source(pool, embedder, "fragment", defer_index=False if live else None, live=live, stop=stop)
    with pool.connection() as conn:
        finish_memories(conn, embedder.model_name)
    asked = _AskedOncePerPass(llm) if llm is not None else None
    outcomes = [
        o
        for mid in _pending_ids(pool, embedder.model_name)
        if not (stop is not None and stop())
        and (o := _settle_one(pool, embedder, asked, mid, conflict_threshold)) is not None  # type: ignore[arg-type]
    ]
    with pool.connection() as conn:
        still = conn.execute(
            "SELECT count(*) FROM memories WHERE arbitration_status = 'pending' AND is_active"
        ).fetchone()[0]
    return {
        "embedded_fragments": backfill.embedded,
        "failed_fragments": backfill.failed,
        "arbitrated": len(outcomes),
        "actions": dict(Counter(o["action"] for o in outcomes)),
        "outcomes": outcomes,
        "still_pending": int(still),
        "errors": backfill.errors[:5],
    }
