"""The three retrievals of a context build: semantic memory, recent events, and the OKR profile."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from psycopg_pool import ConnectionPool

from ..embeddings import Embedder
from ..retrieval.search import SearchFilters, search
from ..text.keywords import terms
from ..vocabulary import EVENT_TYPES, EVENT_WINDOW_HOURS, SEARCH_SOURCES
from .scoring import ScoringConfig

EVENT_BASE_RELEVANCE = 0.5  # the context-builder spec; a query-term overlap adds up to another 0.5


@dataclass
class Candidate:
    """One scored item competing for a place in the block."""

    source: str
    id: str
    title: str
    text: str
    created_at: datetime | None
    relevance: float
    embedding: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    age_days: float | None = None
    decay: float = 1.0
    mode_weight: float = 1.0
    score: float = 0.0


def semantic_candidates(
    pool: ConnectionPool,
    embedder: Embedder,
    owner: str,
    query: str,
    qvec: np.ndarray | None,
    as_of: datetime | None,
    depth: int = 20,
) -> list[Candidate]:
    """Hybrid search over tasks, learnings, capabilities and memories (keywords only without a vector)."""
    result = search(
        pool,
        embedder,
        owner,
        query,
        mode="hybrid" if qvec is not None else "keyword",
        filters=SearchFilters(sources=SEARCH_SOURCES, as_of=as_of),
        limit=depth,
        query_vector=qvec,
    )
    return [
        Candidate(
            source=h.source,
            id=h.id,
            title=h.title,
            text=h.text,
            created_at=h.created_at,
            relevance=float(h.score),
            embedding=h.embedding,
            extra=h.extra,
        )
        for h in result.hits
    ]


def _event_text(event_type: str, payload: dict[str, Any]) -> str:
    """`[type] value | value | …`: the payload's values without its keys (keys like "error" would make
    every event look relevant to every query about errors), cut to 200 characters as in the context-builder spec."""
    values = [str(v) for v in payload.values() if v not in (None, "", [], {})] if isinstance(payload, dict) else []
    return f"[{event_type}] {' | '.join(values)[:200]}"


def event_candidates(
    pool: ConnectionPool, owner: str, query: str, mode: str, now: datetime, limit: int = 10
) -> list[Candidate]:
    """Recent events of the spec's types: 24 h (72 h in debug), newest first, window as a parameter."""
    hours = EVENT_WINDOW_HOURS.get(mode, EVENT_WINDOW_HOURS["default"])
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT id::text, type, payload, created_at FROM events"
            " WHERE owner_id = %(owner)s AND type = ANY(%(types)s)"
            " AND created_at > %(since)s AND created_at <= %(now)s ORDER BY created_at DESC LIMIT %(limit)s",
            {
                "owner": owner,
                "types": list(EVENT_TYPES),
                "since": now - timedelta(hours=hours),
                "now": now,
                "limit": limit,
            },
        ).fetchall()
    qterms = set(terms(query))
    out = []
    for item_id, event_type, payload, created_at in rows:
        text = _event_text(event_type, payload)
        overlap = len(qterms & set(terms(text))) / len(qterms) if qterms else 0.0
        out.append(
            Candidate(
                source="event",
                id=item_id,
                title=f"[{event_type}]",
                text=text,
                created_at=created_at,
                relevance=EVENT_BASE_RELEVANCE * (1 + overlap),
            )
        )
    return out


@dataclass
class Profile:
    snippet: str
    goals: list[Candidate]


def load_profile(pool: ConnectionPool, owner: str, mode: str, limit: int = 3) -> Profile:
    """Active goals (in progress or pending) by priority then progress; none in chat mode."""
    if mode == "chat":
        return Profile("", [])
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT id::text, title, status, progress, created_at FROM goals"
            " WHERE owner_id = %s AND status IN ('in_progress', 'pending')"
            " ORDER BY priority ASC, progress DESC LIMIT %s",
            (owner, limit),
        ).fetchall()
    if not rows:
        return Profile("", [])
    lines = ["## 当前 OKR 焦点 (current OKRs)"]
    goals = []
    for item_id, title, status, progress, created_at in rows:
        line = f"- {title} ({status}, {progress}%)"
        lines.append(line)
        goals.append(
            Candidate(source="okr", id=item_id, title=title, text=line, created_at=created_at, relevance=1.0)
        )
    return Profile("\n".join(lines), goals)


def score_all(candidates: list[Candidate], config: ScoringConfig, mode: str, now: datetime) -> None:
    """Fill age, decay, mode weight and score of every candidate (in place)."""
    for c in candidates:
        c.age_days = (now - c.created_at).total_seconds() / 86400 if c.created_at else None
        c.decay = config.decay(c.source, c.age_days)
        c.mode_weight = config.weight(c.source, mode)
        c.score = c.relevance * c.decay * c.mode_weight
