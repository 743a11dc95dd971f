"""build_memory_context (the context-builder spec): retrieve in parallel, score, MMR, fit the budget, log the build."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from psycopg_pool import ConnectionPool

from ..embeddings import Embedder
from ..infra.errors import ValidationError
from ..retrieval.filters import SearchFilters
from ..retrieval.learnings import task_query
from ..retrieval.query import Query, embed_query, no_keyword_match
from ..vocabulary import CONTEXT_MODES, DEFAULT_BUDGET, MAX_BUDGET, MIN_BUDGET
from .budget import fit_to_budget
from .config import active_config
from .exploration import exploration_order, explore_rate, should_explore
from .log import write_log
from .mmr import mmr_select
from .retrieve import (
    Candidate,
    add_features,
    boost_task_learnings,
    event_candidates,
    load_profile,
    score_all,
    semantic_candidates,
    task_learnings,
    with_task_learnings,
)
from .scoring import apply_floor

log = logging.getLogger(__name__)

MMR_LAMBDA = 0.7
_executor = ThreadPoolExecutor(max_workers=6, thread_name_prefix="context")


@dataclass
class ContextItem:
    """An injected item and each factor of its score."""

    source: str
    id: str
    title: str
    relevance: float
    age_days: float | None
    decay: float
    mode_weight: float
    score: float
    tokens: int
    line: str

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class ContextResult:
    block: str
    items: list[ContextItem]
    token_used: int
    token_budget: int
    retrieval_id: str | None
    mode: str
    candidates_count: int
    config_version: int
    degraded: str | None = None
    profile: str = ""
    timings_ms: dict[str, float] = field(default_factory=dict)
    floored: int = 0
    """Candidates the relevance floor removed (not counted in candidates_count)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "block": self.block,
            "items": [i.as_dict() for i in self.items],
            "token_used": self.token_used,
            "token_budget": self.token_budget,
            "retrieval_id": self.retrieval_id,
            "mode": self.mode,
            "candidates_count": self.candidates_count,
            "config_version": self.config_version,
            "degraded": self.degraded,
            "floored": self.floored,
            "timings_ms": self.timings_ms,
        }


def format_line(c: Candidate) -> str:
    """One item of the block: source, date, title and a short body."""
    date = c.created_at.strftime("%Y-%m-%d") if c.created_at else "-"
    body = " ".join(c.text.split())
    if body.startswith(c.title):
        body = body[len(c.title) :].strip()
    head = f"- [{c.source} · {date}] {c.title}"
    return f"{head}: {body[:240]}" if body else head


def _validate(query: str, mode: str, budget: int) -> Query:
    """The checked query (search takes it as checked); ValidationError naming the field otherwise."""
    checked = Query.checked(query)
    if mode not in CONTEXT_MODES:
        raise ValidationError("mode", f"must be one of {list(CONTEXT_MODES)}")
    if not isinstance(budget, int) or isinstance(budget, bool) or not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise ValidationError("token_budget", f"must be an integer from {MIN_BUDGET} to {MAX_BUDGET}")
    return checked


def build_memory_context(
    pool: ConnectionPool,
    embedder: Embedder,
    owner: str,
    query: str,
    mode: str = "execute",
    token_budget: int = DEFAULT_BUDGET,
    *,
    as_of: datetime | None = None,
    query_vector: np.ndarray | None = None,
    log_build: bool = True,
    depth: int = 20,
    exploration: float | None = None,
    task: Mapping[str, Any] | None = None,
    exclude_session: str | None = None,
) -> ContextResult:
    """The context block for `query` within `token_budget` tokens, for one owner.

    Never raises on a provider outage: it answers from keywords and says so in `degraded` and the log (or, when no
    keyword match cleared the relevance floor, says that).
    `as_of` evaluates as of a past moment (only rows created by then; decay measured from then).
    `exploration` is the share of builds injected in random order (default MEMORY_PIPELINES_EXPLORE_RATE,
    off when unset); such builds are logged as randomized for unbiased offline evaluation.
    `task` ({task_type, failure_class, event_type}): the learnings matching it join the candidates and rank by the
    learnings spec's score too.
    `exclude_session`: the conversation the query is part of; its memories are left out (the agent holds its turns).
    """
    checked = _validate(query, mode, token_budget)
    # refused before any work, naming the field; stripped once for the search and the log
    exclude_session = SearchFilters(exclude_session=exclude_session).validated().exclude_session
    task_q = task_query(task, "task.") if task is not None else None
    t0 = time.perf_counter()
    now = as_of or datetime.now(UTC)
    degraded = None
    qvec = query_vector
    if qvec is None:
        qvec, degraded = embed_query(embedder, query, owner)
    t_embed = time.perf_counter()
    config = active_config(pool)
    semantic = _executor.submit(semantic_candidates, pool, embedder, owner, checked, qvec, as_of, depth,
                                exclude_session)
    events = _executor.submit(event_candidates, pool, embedder, owner, checked, qvec, mode, now)
    profile = _executor.submit(load_profile, pool, owner, mode)
    matched = _executor.submit(task_learnings, pool, owner, task_q, now, depth) if task_q else None
    qlang = checked.language
    retrieved = semantic.result(), events.result()
    for group in retrieved:  # channel ranks are within each retrieval, before the floor
        add_features(group, qlang, now)
    candidates, floored = apply_floor(retrieved[0] + retrieved[1], config)
    task_matched = matched.result() if matched else {}
    if task_matched:
        kept = len(candidates)
        candidates = with_task_learnings(candidates, task_matched)
        add_features(candidates[kept:], qlang, now)
    prof = profile.result()
    add_features(prof.goals, qlang, now)
    t_retrieve = time.perf_counter()
    if floored:
        log.info("context build (%s): the relevance floor removed %d of %d candidates",
                 mode, floored, floored + len(candidates))
    if degraded and not candidates:  # keywords alone reached nothing: the note must not claim they answered
        degraded = no_keyword_match(degraded)

    score_all(candidates, config, mode, now)
    boost_task_learnings(candidates, task_matched)
    score_all(prof.goals, config, mode, now)
    ranked = sorted(candidates, key=lambda c: c.score, reverse=True)
    order = mmr_select(ranked, k=len(ranked), lam=MMR_LAMBDA)
    rate = explore_rate() if exploration is None else exploration
    randomized = should_explore(rate)
    if randomized:  # an exploration build: labels free of position bias for the offline tuner
        order = exploration_order(len(ranked))
    chosen = [ranked[i] for i in order]
    lines = [format_line(c) for c in chosen]
    # MMR chooses what enters within the budget; the block lists it by score, so diversity never buries an item
    # below others that search, decay and the mode weights ranked under it (an exploration build keeps its order).
    fitted = fit_to_budget(prof.snippet, lines, token_budget, rank=None if randomized else order)
    items = [
        ContextItem(
            source=c.source,
            id=c.id,
            title=c.title,
            relevance=c.relevance,
            age_days=c.age_days,
            decay=c.decay,
            mode_weight=c.mode_weight,
            score=c.score,
            tokens=fitted.line_tokens[i],
            line=fitted.lines[i],
        )
        for i, c in ((i, chosen[i]) for i in fitted.included)
    ]
    injected = {(it.source, it.id): (rank, it.tokens) for rank, it in enumerate(items, start=1)}
    shown_goals = set(fitted.profile.splitlines())
    for g in prof.goals:
        if g.text in shown_goals:  # a small budget shows only the first goals
            injected[(g.source, g.id)] = (0, None)
    t_score = time.perf_counter()
    retrieval_id = None
    if log_build:
        with pool.connection() as conn, conn.transaction():
            retrieval_id = write_log(
                conn,
                owner=owner,
                query=query,
                mode=mode,
                budget=token_budget,
                tokens_used=fitted.tokens,
                config_version=config.version,
                degraded=degraded,
                as_of=now,
                ranked=[*prof.goals, *ranked],
                injected=injected,
                injected_sources=[it.source for it in items],
                randomized=randomized,
                lines={(it.source, it.id): it.line for it in items},
                exclude_session=exclude_session,
            )
    t_end = time.perf_counter()
    return ContextResult(
        block=fitted.block,
        items=items,
        token_used=fitted.tokens,
        token_budget=token_budget,
        retrieval_id=retrieval_id,
        mode=mode,
        candidates_count=len(candidates),
        config_version=config.version,
        degraded=degraded,
        profile=prof.snippet if fitted.profile_included else "",
        floored=floored,
        timings_ms={
            "embed": (t_embed - t0) * 1000,
            "retrieve": (t_retrieve - t_embed) * 1000,
            "score_mmr_budget": (t_score - t_retrieve) * 1000,
            "log": (t_end - t_score) * 1000,
            "total_excluding_embed": (t_end - t_embed) * 1000,
        },
    )
