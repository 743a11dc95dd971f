"""The learnings spec: relevant learnings for a task / failure / event, instead of the most recent ones.

Phase 1 (`relevance_score`, in SQL and in Python for tests): task type match 10, failure class match 8
(the learning's failure_class, or its content naming the class), trigger event match 6, category
`failure_pattern` 4, freshness 3 (≤ 7 days) / 2 (≤ 30 days) / 1; highest total first.
Phase 2 (the context-builder spec): when the context has a description and learnings carry current-model embeddings,
vector similarity plus a keyword boost (the phase-1 score scaled into [0, BOOST_WEIGHT]); if the
embedding provider fails it falls back to phase 1. `get_recent_learnings` (newest first) is the spec's fallback.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg_pool import ConnectionPool

from ..embeddings import Embedder, EmbeddingError
from ..infra.errors import ValidationError
from ..vocabulary import MAX_LABEL, SNAKE_PATTERN, TASK_TYPES

WEIGHTS = {"task_type": 10, "failure_class": 8, "event_type": 6, "failure_pattern": 4}
FRESHNESS = ((7, 3), (30, 2))  # (max age in days, points); older gets 1
MAX_SCORE = sum(WEIGHTS.values()) + 3
BOOST_WEIGHT = 0.5


@dataclass(frozen=True)
class LearningQuery:
    """What the caller knows: the learnings spec's context plus an optional free-text description."""

    task_type: str | None = None
    failure_class: str | None = None
    event_type: str | None = None
    description: str | None = None


@dataclass
class ScoredLearning:
    id: str
    title: str
    content: str
    task_type: str | None
    failure_class: str | None
    trigger_event: str | None
    category: str | None
    created_at: datetime
    score: float
    breakdown: dict[str, float] = field(default_factory=dict)


TASK_CONTEXT_FIELDS = ("task_type", "failure_class", "event_type")


def task_query(task: Mapping[str, Any] | None, field_prefix: str = "") -> LearningQuery:
    """The task context of a relevance query or a context build ({task_type, failure_class, event_type}, each
    optional) checked: task_type one of the task types, event_type lower_snake, failure_class a label (compared
    in upper case). ValidationError names the field (after `field_prefix`, e.g. "task.")."""
    if task is None:
        return LearningQuery()
    if not isinstance(task, Mapping):
        raise ValidationError(field_prefix.rstrip(".") or "task",
                              "must be an object of " + ", ".join(TASK_CONTEXT_FIELDS))
    for name in task:
        if name not in TASK_CONTEXT_FIELDS:
            raise ValidationError(f"{field_prefix}{name}", "is not a field of a task context; the fields are "
                                  + ", ".join(TASK_CONTEXT_FIELDS))
    values = {name: task.get(name) for name in TASK_CONTEXT_FIELDS}
    for name, value in values.items():
        if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > MAX_LABEL
                                  or "\x00" in value):
            raise ValidationError(f"{field_prefix}{name}", f"must be a non-empty string of at most {MAX_LABEL} "
                                  "characters")
    if values["task_type"] is not None and values["task_type"] not in TASK_TYPES:
        raise ValidationError(f"{field_prefix}task_type", f"must be one of {list(TASK_TYPES)}")
    if values["event_type"] is not None and not re.fullmatch(SNAKE_PATTERN, values["event_type"]):
        raise ValidationError(f"{field_prefix}event_type", f"must match {SNAKE_PATTERN}")
    return LearningQuery(**values)


def matches_task(learning: ScoredLearning) -> bool:
    """Whether a scored learning matched the task itself (type, failure class or event), not only by its
    category and freshness, which every learning has."""
    return any(learning.breakdown.get(k) for k in ("task_type", "failure_class", "event_type"))


def freshness_points(age_days: float) -> int:
    """3 within 7 days, 2 within 30 days, else 1."""
    for limit, points in FRESHNESS:
        if age_days <= limit:
            return points
    return 1


def relevance_score(learning: dict[str, Any], q: LearningQuery, age_days: float) -> dict[str, float]:
    """The learnings spec's score of one learning, by dimension (pure; the SQL below computes the same)."""
    fc = (q.failure_class or "").upper()
    parts = {
        "task_type": WEIGHTS["task_type"] if q.task_type and learning.get("task_type") == q.task_type else 0,
        "failure_class": WEIGHTS["failure_class"]
        if fc and (learning.get("failure_class") == fc or fc in (learning.get("content") or "").upper())
        else 0,
        "event_type": WEIGHTS["event_type"] if q.event_type and learning.get("trigger_event") == q.event_type else 0,
        "failure_pattern": WEIGHTS["failure_pattern"] if learning.get("category") == "failure_pattern" else 0,
        "freshness": freshness_points(age_days),
    }
    parts["total"] = sum(parts.values())
    return parts


_SCORE_SQL = """
SELECT id::text, title, content, task_type, failure_class, trigger_event, category, created_at,
       s.task_pts, s.fc_pts, s.ev_pts, s.fp_pts, s.fresh_pts,
       s.task_pts + s.fc_pts + s.ev_pts + s.fp_pts + s.fresh_pts AS total
FROM learnings l, LATERAL (SELECT
    CASE WHEN %(task_type)s::text IS NOT NULL AND l.task_type = %(task_type)s THEN 10 ELSE 0 END AS task_pts,
    CASE WHEN %(fc)s::text IS NOT NULL AND (l.failure_class = %(fc)s
              OR strpos(upper(l.content), %(fc)s) > 0) THEN 8 ELSE 0 END AS fc_pts,
    CASE WHEN %(event)s::text IS NOT NULL AND l.trigger_event = %(event)s THEN 6 ELSE 0 END AS ev_pts,
    CASE WHEN l.category = 'failure_pattern' THEN 4 ELSE 0 END AS fp_pts,
    CASE WHEN l.created_at >= %(now)s - interval '7 days' THEN 3
         WHEN l.created_at >= %(now)s - interval '30 days' THEN 2 ELSE 1 END AS fresh_pts) s
WHERE l.owner_id = %(owner)s AND l.is_active AND l.created_at <= %(now)s
"""


def _row(r: tuple, score: float, breakdown: dict[str, float]) -> ScoredLearning:
    return ScoredLearning(
        id=r[0],
        title=r[1],
        content=r[2],
        task_type=r[3],
        failure_class=r[4],
        trigger_event=r[5],
        category=r[6],
        created_at=r[7],
        score=score,
        breakdown=breakdown,
    )


def _validate(q: LearningQuery, limit: int) -> None:
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ValidationError("limit", "must be an integer from 1 to 100")
    for name in ("task_type", "failure_class", "event_type", "description"):
        value = getattr(q, name)
        if value is not None and (not isinstance(value, str) or len(value) > 2000 or "\x00" in value):
            raise ValidationError(name, "must be a string of at most 2000 characters")


def _score_params(owner: str, q: LearningQuery, now: datetime | None) -> dict[str, Any]:
    """The parameters of _SCORE_SQL."""
    return {
        "owner": owner,
        "task_type": q.task_type,
        "fc": (q.failure_class or "").upper() or None,
        "event": q.event_type,
        "now": now or datetime.now().astimezone(),
    }


def structured_learnings(
    pool: ConnectionPool, owner: str, q: LearningQuery, limit: int = 10, now: datetime | None = None
) -> list[ScoredLearning]:
    """Phase 1: the learnings spec's weighted score, computed in SQL, best first (newest first on ties)."""
    _validate(q, limit)
    params = {**_score_params(owner, q, now), "limit": limit}
    with pool.connection() as conn:
        rows = conn.execute(_SCORE_SQL + " ORDER BY total DESC, created_at DESC LIMIT %(limit)s", params).fetchall()
    keys = ("task_type", "failure_class", "event_type", "failure_pattern", "freshness")
    return [_row(r, float(r[13]), dict(zip(keys, map(float, r[8:13]), strict=True))) for r in rows]


def search_relevant_learnings(
    pool: ConnectionPool,
    owner: str,
    q: LearningQuery,
    limit: int = 10,
    embedder: Embedder | None = None,
    now: datetime | None = None,
) -> list[ScoredLearning]:
    """The most relevant learnings: phase 2 (vector + keyword boost) when possible, else phase 1."""
    _validate(q, limit)
    text = " ".join(p for p in (q.description, q.task_type, q.failure_class, q.event_type) if p)
    if embedder is None or not q.description:
        return structured_learnings(pool, owner, q, limit, now)
    try:
        qvec = embedder.embed_query(text, owner)
    except EmbeddingError:
        return structured_learnings(pool, owner, q, limit, now)
    params = {
        **_score_params(owner, q, now),
        "q": qvec,
        "model": embedder.model_name,
        "depth": limit * 3,
    }
    sql = (
        _SCORE_SQL.replace("SELECT id::text", "SELECT 1 - (l.embedding <=> %(q)s) AS sim, id::text", 1)
        + " AND l.embedding IS NOT NULL AND l.embedding_model = %(model)s"
        " ORDER BY l.embedding <=> %(q)s LIMIT %(depth)s"
    )
    with pool.connection() as conn:
        rows = conn.execute(sql, params).fetchall()
    if not rows:
        return structured_learnings(pool, owner, q, limit, now)
    out = []
    for r in rows:
        sim, rest = float(r[0]), r[1:]
        boost = BOOST_WEIGHT * float(rest[13]) / MAX_SCORE
        out.append(_row(rest, sim + boost, {"vector": sim, "keyword_boost": boost}))
    out.sort(key=lambda x: x.score, reverse=True)
    return out[:limit]


def get_recent_learnings(pool: ConnectionPool, owner: str, limit: int = 20) -> list[ScoredLearning]:
    """The original behaviour, kept as a fallback: the newest learnings."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT id::text, title, content, task_type, failure_class, trigger_event, category, created_at"
            " FROM learnings WHERE owner_id = %s AND is_active ORDER BY created_at DESC LIMIT %s",
            (owner, limit),
        ).fetchall()
    return [_row(r, 0.0, {}) for r in rows]
