"""The three retrievals of a context build: semantic memory, recent events, and the OKR profile."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from psycopg_pool import ConnectionPool

from ..embeddings import Embedder
from ..infra.db import reading
from ..retrieval.filters import SearchFilters
from ..retrieval.hits import Hit
from ..retrieval.learnings import (
    BOOST_WEIGHT,
    MAX_SCORE,
    LearningQuery,
    ScoredLearning,
    matches_task,
    structured_learnings,
)
from ..retrieval.query import Query
from ..retrieval.search import search
from ..retrieval.semantic import calibrated_similarity
from ..vocabulary import EVENT_WINDOW_HOURS, SEARCH_SOURCES
from .features import candidate_features
from .scoring import ScoringConfig


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
    semantic: float | None = None
    """The semantic channel's calibrated score (0 = the model's floor for unrelated texts), None if not found."""
    keyword: float | None = None
    """The keyword channel's calibrated score, None if not found."""
    keyword_evidence: float | None = None
    """The keyword match against the corpus's strongest possible one-term match (`hits.Hit.keyword_evidence`)."""
    features: dict[str, Any] | None = None
    """What a learned ranker sees (`features.candidate_features`), logged with the candidate."""


def _candidates(hits: list[Hit], embedder: Embedder, qlang: str) -> list[Candidate]:
    """Search hits as candidates, with both channels on the calibrated scale (for the relevance floor)."""
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
            semantic=None if h.semantic is None else calibrated_similarity(embedder, qlang, h.text, h.semantic),
            keyword=h.keyword,
            keyword_evidence=h.keyword_evidence,
        )
        for h in hits
    ]


def _search(
    pool: ConnectionPool,
    embedder: Embedder,
    owner: str,
    query: Query,
    qvec: np.ndarray | None,
    filters: SearchFilters,
    limit: int,
) -> list[Candidate]:
    """Hybrid search (keywords only without a vector), as candidates."""
    result = search(
        pool,
        embedder,
        owner,
        query,
        mode="hybrid" if qvec is not None else "keyword",
        filters=filters,
        limit=limit,
        query_vector=qvec,
    )
    return _candidates(result.hits, embedder, query.language)


def semantic_candidates(
    pool: ConnectionPool,
    embedder: Embedder,
    owner: str,
    query: Query,
    qvec: np.ndarray | None,
    as_of: datetime | None,
    depth: int = 20,
    exclude_session: str | None = None,
) -> list[Candidate]:
    """Hybrid search over tasks, learnings, capabilities and memories (keywords only without a vector);
    `exclude_session`: leave that conversation's memories out."""
    filters = SearchFilters(sources=SEARCH_SOURCES, as_of=as_of, exclude_session=exclude_session)
    return _search(pool, embedder, owner, query, qvec, filters, depth)


def event_candidates(
    pool: ConnectionPool,
    embedder: Embedder,
    owner: str,
    query: Query,
    qvec: np.ndarray | None,
    mode: str,
    now: datetime,
    limit: int = 10,
) -> list[Candidate]:
    """Recent events of the spec's types (24 h, 72 h in debug), ranked by the same hybrid search as the
    other sources: the window is a filter (and decay a recency prior), not a relevance. An event not
    embedded yet competes by its keyword channel."""
    hours = EVENT_WINDOW_HOURS.get(mode, EVENT_WINDOW_HOURS["default"])
    filters = SearchFilters(sources=("event",), time_range_days=hours / 24, as_of=now)
    return _search(pool, embedder, owner, query, qvec, filters, limit)


def task_learnings(
    pool: ConnectionPool, owner: str, task: LearningQuery, now: datetime, depth: int = 20
) -> dict[str, ScoredLearning]:
    """The owner's learnings that match the task context (its type, failure class or trigger event), by the
    learnings spec's score (retrieval/learnings.py), best first, as of `now`."""
    scored = structured_learnings(pool, owner, task, limit=depth, now=now)
    return {s.id: s for s in scored if matches_task(s)}


def with_task_learnings(candidates: list[Candidate], matched: dict[str, ScoredLearning]) -> list[Candidate]:
    """The candidates plus the task-matched learnings search did not bring (the task match is their evidence;
    relevance 0 until `boost_task_learnings`)."""
    found = {c.id for c in candidates if c.source == "learning"}
    added = [
        Candidate(source="learning", id=s.id, title=s.title, text=f"{s.title}\n{s.content}", created_at=s.created_at,
                  relevance=0.0, extra={"task_type": s.task_type, "failure_class": s.failure_class,
                                        "trigger_event": s.trigger_event, "category": s.category})
        for s in matched.values() if s.id not in found
    ]
    return candidates + added


def boost_task_learnings(candidates: list[Candidate], matched: dict[str, ScoredLearning]) -> None:
    """Add the learnings spec's score, scaled into [0, BOOST_WEIGHT] (as its phase 2 does), to the relevance of
    each task-matched learning, and score it again (after `score_all`: a ranker's relevance is boosted alike)."""
    for c in candidates:
        s = matched.get(c.id) if c.source == "learning" else None
        if s is not None:
            c.relevance += BOOST_WEIGHT * s.score / MAX_SCORE
            c.score = c.relevance * c.decay * c.mode_weight


@dataclass
class Profile:
    snippet: str
    goals: list[Candidate]


def load_profile(pool: ConnectionPool, owner: str, mode: str, limit: int = 3) -> Profile:
    """Active goals (in progress or pending) by priority then progress; none in chat mode."""
    if mode == "chat":
        return Profile("", [])
    with reading(pool) as conn:
        rows = conn.execute(
            "SELECT id::text, title, status, progress, created_at FROM goals"
            " WHERE owner_id = %s AND is_active AND status IN ('in_progress', 'pending')"
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


def add_features(candidates: list[Candidate], query_language: str, now: datetime) -> None:
    """Attach each candidate's features (`features.candidate_features`; ranks within this retrieval)."""
    for c, f in zip(candidates, candidate_features(candidates, query_language, now), strict=True):
        c.features = f


def score_all(candidates: list[Candidate], config: ScoringConfig, mode: str, now: datetime) -> None:
    """Fill age, decay, mode weight and score of every candidate (in place). With a ranker in `config` the
    relevance becomes its probability (from the candidate's features); decay and weight multiply it as ever."""
    for c in candidates:
        c.relevance = config.relevance(c.source, c.relevance, c.features)
        c.age_days = (now - c.created_at).total_seconds() / 86400 if c.created_at else None
        c.decay = config.decay(c.source, c.age_days)
        c.mode_weight = config.weight(c.source, mode)
        c.score = c.relevance * c.decay * c.mode_weight
