"""The retrieval log: one row per build, one per scored candidate, the spec's memory_retrieval event,
and feedback on which injected items were used."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ..infra.errors import NotFoundError, ValidationError
from ..infra.ids import is_uuid
from .retrieve import Candidate


def write_log(
    conn: psycopg.Connection,
    *,
    owner: str,
    query: str,
    mode: str,
    budget: int,
    tokens_used: int,
    config_version: int,
    degraded: str | None,
    as_of,
    ranked: Sequence[Candidate],
    injected: dict[tuple[str, str], tuple[int, int | None]],
    injected_sources: list[str],
    randomized: bool = False,
) -> str:
    """Insert the build, its candidates and the memory_retrieval event; returns the retrieval id.

    `ranked` holds every scored candidate (profile goals included, logged with source okr);
    `injected` maps (source, id) to (position in the block, tokens); the counts of the event follow
    the seed: candidates and injected items exclude the profile.
    """
    sources = injected_sources
    candidates_count = sum(1 for c in ranked if c.source != "okr")
    injected_count = len(sources)
    row = conn.execute(
        "INSERT INTO retrievals (owner_id, query, mode, token_budget, token_used, candidates_count,"
        " injected_count, injected_sources, config_version, degraded, randomized, as_of)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id::text",
        (
            owner,
            query,
            mode,
            budget,
            tokens_used,
            candidates_count,
            injected_count,
            Jsonb(sources),
            config_version,
            degraded,
            randomized,
            as_of,
        ),
    ).fetchone()
    retrieval_id = row[0]
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY retrieval_candidates (retrieval_id, owner_id, source, item_id, relevance, age_days, mode, decay,"
            " mode_weight, score, rank, mmr_rank, tokens, injected) FROM STDIN"
        ) as copy,
    ):
        seen = set()
        for rank, c in enumerate(ranked, start=1):
            if (c.source, c.id) in seen:
                continue
            seen.add((c.source, c.id))
            mmr_rank, tokens = injected.get((c.source, c.id), (None, None))
            copy.write_row(
                (
                    retrieval_id,
                    owner,
                    c.source,
                    c.id,
                    c.relevance,
                    c.age_days,
                    mode,
                    c.decay,
                    c.mode_weight,
                    c.score,
                    rank,
                    mmr_rank,
                    tokens,
                    (c.source, c.id) in injected,
                )
            )
    conn.execute(
        "INSERT INTO events (owner_id, type, payload) VALUES (%s, 'memory_retrieval', %s)",
        (
            owner,
            Jsonb(
                {
                    "retrieval_id": retrieval_id,
                    "query": query[:200],
                    "mode": mode,
                    "candidates_count": candidates_count,
                    "injected_count": injected_count,
                    "injected_sources": sources,
                    "token_used": tokens_used,
                    "token_budget": budget,
                    "degraded": degraded,
                }
            ),
        ),
    )
    return retrieval_id


def record_feedback(pool: ConnectionPool, owner: str, retrieval_id: str, used_ids: Sequence[str]) -> int:
    """Mark which injected items of one build were used; returns how many were marked.

    The build must belong to `owner` (another owner's build is reported as not found).
    """
    if not isinstance(used_ids, list | tuple) or not all(isinstance(i, str) for i in used_ids):
        raise ValidationError("used_ids", "must be a list of item ids (strings)")
    if not is_uuid(retrieval_id):
        raise NotFoundError(f"retrieval {retrieval_id} not found")
    with pool.connection() as conn, conn.transaction():
        found = conn.execute(
            "SELECT 1 FROM retrievals WHERE id = %s AND owner_id = %s", (retrieval_id, owner)
        ).fetchone()
        if not found:
            raise NotFoundError(f"retrieval {retrieval_id} not found")
        conn.execute(
            "UPDATE retrieval_candidates SET used = (item_id = ANY(%s))"
            " WHERE retrieval_id = %s AND owner_id = %s AND injected",
            (list(used_ids), retrieval_id, owner),
        )
        marked = conn.execute(
            "SELECT count(*) FROM retrieval_candidates WHERE retrieval_id = %s AND used", (retrieval_id,)
        ).fetchone()[0]
        conn.execute("UPDATE retrievals SET feedback_at = now() WHERE id = %s", (retrieval_id,))
    return int(marked)


