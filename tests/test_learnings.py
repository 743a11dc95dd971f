"""The learnings spec: the weighted relevance of learnings, its fallback, and relevance beating recency."""

from __future__ import annotations

import math

import pytest

from memory_pipelines.demo.corpus import load_demo
from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.index.vectors import embed_source
from memory_pipelines.infra.errors import ValidationError
from memory_pipelines.retrieval.learnings import (
    LearningQuery,
    freshness_points,
    get_recent_learnings,
    relevance_score,
    search_relevant_learnings,
    structured_learnings,
)
from tests.factories import add_learning


def test_weights_are_the_seed_table():
    q = LearningQuery(task_type="dev", failure_class="RATE_LIMIT", event_type="systemic_failure")
    full = {
        "task_type": "dev",
        "failure_class": "RATE_LIMIT",
        "trigger_event": "systemic_failure",
        "category": "failure_pattern",
        "content": "",
    }
    assert relevance_score(full, q, age_days=1)["total"] == 10 + 8 + 6 + 4 + 3
    assert relevance_score({"content": "hit a rate_limit again"}, q, age_days=20)["total"] == 8 + 2
    assert relevance_score({}, q, age_days=400)["total"] == 1
    assert [freshness_points(d) for d in (0, 7, 8, 30, 31)] == [3, 3, 2, 2, 1]


def test_sql_score_equals_the_pure_score(pool):
    with pool.connection() as conn:
        add_learning(
            conn,
            "alice",
            "a",
            "RATE_LIMIT hit",
            task_type="dev",
            failure_class="RATE_LIMIT",
            trigger_event="systemic_failure",
            category="failure_pattern",
            days=2,
        )
        add_learning(conn, "alice", "b", "nothing to see", task_type="qa", days=12)
        add_learning(conn, "alice", "c", "old but matching task", task_type="dev", days=200)
    q = LearningQuery(task_type="dev", failure_class="rate_limit", event_type="systemic_failure")
    got = structured_learnings(pool, "alice", q)
    assert [(r.title, r.score) for r in got] == [("a", 31.0), ("c", 11.0), ("b", 2.0)]
    assert got[0].breakdown == {
        "task_type": 10,
        "failure_class": 8,
        "event_type": 6,
        "failure_pattern": 4,
        "freshness": 3,
    }
    assert structured_learnings(pool, "bob", q) == []
    with pytest.raises(ValidationError):
        structured_learnings(pool, "alice", q, limit=0)


def _ndcg5(ranked, gains: dict[str, int]) -> float:
    dcg = sum(gains.get(r.id, 0) / math.log2(i + 2) for i, r in enumerate(ranked[:5]))
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(gains.values(), reverse=True)[:5]))
    return dcg / ideal if ideal else 0.0


def test_relevance_beats_recency_on_the_labelled_demo_corpus(pool):
    """Graded labels per (task type, failure class) context: 2 when a learning matches both, 1 when it matches
    one of them, 0 otherwise; nDCG@5 of the learnings spec's ordering against the newest-first ordering."""
    load_demo(pool)
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT id::text, task_type, failure_class FROM learnings WHERE owner_id = 'team-alpha'"
        ).fetchall()
    contexts = sorted({(tt, fc) for _, tt, fc in rows if fc})
    recent = get_recent_learnings(pool, "team-alpha", limit=5)
    relevance, recency = [], []
    for task_type, failure_class in contexts:
        gains = {i: (tt == task_type) + (fc == failure_class) for i, tt, fc in rows}
        ranked = structured_learnings(pool, "team-alpha", LearningQuery(task_type, failure_class), limit=5)
        relevance.append(_ndcg5(ranked, gains))
        recency.append(_ndcg5(recent, gains))
    mean_rel, mean_rec = sum(relevance) / len(relevance), sum(recency) / len(recency)
    assert len(contexts) >= 8
    print(f"nDCG@5 relevance {mean_rel:.3f} vs recency {mean_rec:.3f} over {len(contexts)} contexts")
    assert mean_rel >= 0.9 and mean_rel > 2 * mean_rec, (mean_rel, mean_rec)


def test_phase_two_uses_vectors_and_falls_back_when_the_provider_fails(pool, fake_embedder):
    with pool.connection() as conn:
        target = add_learning(
            conn,
            "alice",
            "oauth token refresh race",
            "two workers refresh the oauth token",
            task_type="dev",
            failure_class="AUTH",
            days=60,
        )
        add_learning(
            conn,
            "alice",
            "disk full on build runner",
            "clean docker layers",
            task_type="dev",
            category="failure_pattern",
            days=1,
        )
    embed_source(pool, fake_embedder, "learning")
    q = LearningQuery(task_type="dev", description="oauth token refresh race between workers")
    ranked = search_relevant_learnings(pool, "alice", q, embedder=fake_embedder)
    assert ranked[0].id == target and "vector" in ranked[0].breakdown
    broken = FakeEmbedder(384)
    broken.fail_after = 0
    fallback = search_relevant_learnings(pool, "alice", q, embedder=broken)
    assert fallback and "freshness" in fallback[0].breakdown
