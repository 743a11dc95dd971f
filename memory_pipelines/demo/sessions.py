"""The demo corpus's simulated agent sessions, replayed through the real code path into the retrieval log.

Each session of `demo.json` (written by scripts/build_demo_corpus.py) is one context build, as of its moment in
the six weeks before the corpus was loaded, followed by implicit feedback with what the simulated agent produced.
The build and its feedback are dated at that moment (`created_at`, `as_of`, `feedback_at`), so hit rates per day
and the tuner's time split see six weeks of use. Needs the corpus embedded and keyword-indexed first (the builds
retrieve like any other); run after `main_job`.

Deterministic and idempotent: the moment of a session derives from the corpus's load time (read back from a
stable row), and a session whose build (owner, query, as_of) is already logged with feedback is skipped; one
built but not yet fed back gets its feedback.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ..context.builder import build_memory_context
from ..context.log import record_implicit_feedback
from ..embeddings import Embedder
from ..vocabulary import DEFAULT_BUDGET, LOCK_DEMO_LOG
from .corpus import read_demo, stable_id

ANSWER_MINUTES = 4
"""Minutes between a session's build and its feedback (the agent's working time)."""


def corpus_loaded_at(conn: psycopg.Connection, corpus: dict[str, Any]) -> datetime | None:
    """The `now` the corpus was first loaded at (a goal's created_at plus its age), or None when not loaded."""
    goal = corpus["goals"][0]
    row = conn.execute("SELECT created_at FROM goals WHERE id = %s", (stable_id(goal["key"]),)).fetchone()
    if row is None:
        return None
    return row[0] + timedelta(days=float(goal.get("age_days", 0)), hours=float(goal.get("age_hours", 0)))


def _existing(conn: psycopg.Connection, owner: str, query: str, as_of: datetime) -> tuple[str, bool] | None:
    row = conn.execute(
        "SELECT id::text, feedback_at IS NOT NULL FROM retrievals WHERE owner_id = %s AND query = %s AND as_of = %s"
        " ORDER BY created_at LIMIT 1",
        (owner, query, as_of),
    ).fetchone()
    return (row[0], row[1]) if row else None


def _date_build(pool: ConnectionPool, retrieval_id: str, as_of: datetime, feedback: bool) -> None:
    """Put the build (and its memory_retrieval event, and its feedback) at the session's moment."""
    answered = as_of + timedelta(minutes=ANSWER_MINUTES)
    with pool.connection() as conn, conn.transaction():
        conn.execute("UPDATE retrievals SET created_at = %s WHERE id = %s", (as_of, retrieval_id))
        conn.execute(
            "UPDATE events SET created_at = %s WHERE type = 'memory_retrieval' AND payload->>'retrieval_id' = %s",
            (as_of, retrieval_id),
        )
        if feedback:
            conn.execute(
                "UPDATE retrievals SET feedback_at = %s, implicit_at = %s WHERE id = %s",
                (answered, answered, retrieval_id),
            )


def load_demo_sessions(
    pool: ConnectionPool,
    embedder: Embedder,
    corpus: dict[str, Any] | None = None,
    *,
    limit: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Replay the corpus's sessions (oldest first; the first `limit` only when given): build, implicit feedback.

    Returns counts: sessions, built now, fed back now, skipped (already logged), injected and used items of
    the sessions fed back now. Nothing happens (skipped_reason set) when the corpus is not loaded.
    """
    corpus = corpus or read_demo()
    sessions = sorted(corpus.get("sessions", []), key=lambda s: (-float(s["age_days"]), s["key"]))[:limit]
    out: dict[str, Any] = {"sessions": len(sessions), "built": 0, "fed_back": 0, "skipped": 0,
                           "injected": 0, "used": 0, "skipped_reason": None}
    with pool.connection() as lock:
        lock.execute("SELECT pg_advisory_lock(%s)", (LOCK_DEMO_LOG,))
        lock.commit()
        try:
            loaded_at = corpus_loaded_at(lock, corpus)
            lock.commit()
            if loaded_at is None:
                out["skipped_reason"] = "the demo corpus is not loaded"
                return out
            for n, s in enumerate(sessions, start=1):
                as_of = loaded_at - timedelta(days=float(s["age_days"]))
                with pool.connection() as conn:
                    found = _existing(conn, s["owner"], s["query"], as_of)
                if found and found[1]:
                    out["skipped"] += 1
                    continue
                if found:
                    retrieval_id = found[0]
                else:
                    built = build_memory_context(pool, embedder, s["owner"], s["query"], mode=s["mode"],
                                                 token_budget=DEFAULT_BUDGET, as_of=as_of, exploration=0.0)
                    retrieval_id = built.retrieval_id
                    _date_build(pool, retrieval_id, as_of, feedback=False)
                    out["built"] += 1
                result = record_implicit_feedback(pool, embedder, s["owner"], retrieval_id, s["output"])
                _date_build(pool, retrieval_id, as_of, feedback=True)
                out["fed_back"] += 1
                out["injected"] += len(result["items"])
                out["used"] += result["used"]
                if progress:
                    progress(n, len(sessions))
        finally:
            lock.execute("SELECT pg_advisory_unlock(%s)", (LOCK_DEMO_LOG,))
            lock.commit()
    return out
