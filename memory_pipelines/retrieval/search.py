"""Search over tasks, learnings, capabilities and memories: semantic, keyword (BM25) and hybrid.

Every query is scoped to one owner, and every filter (sources, memory types, project, time range, as-of time)
is applied inside the SQL, before the limit. This module runs a search: it checks the request, runs the
semantic channel (`semantic`, its scans planned by `planning`) beside the keyword channel (`keyword`), fuses
them (`fusion`) and applies the conversational steps (neighbouring turns, named speakers, turn priors).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
from psycopg_pool import ConnectionPool

from ..embeddings import Embedder, EmbeddingError
from ..infra.db import reading
from ..infra.errors import ValidationError
from ..text.focus import focus
from ..text.times import Span
from ..vocabulary import SEARCH_MODES, SOURCES
from .dates import asked_spans, asks_only_when, dated, span_filters
from .exchanges import Exchanges, read_exchanges
from .filters import SearchFilters, where_clauses
from .fusion import FUSIONS, SEMANTIC_WEIGHT
from .hits import Hit, SearchResult, hit_from_row
from .keyword import calibrate_keyword, keyword_channel
from .memo import Memo
from .neighbours import NEIGHBOUR_TOP, lifted
from .query import Query, embed_query
from .semantic import calibrate_semantic, calibrated_similarity, semantic_channel, vector_scored
from .speakers import boosted, named_speaker, without_speaker
from .turns import weighed

__all__ = ["Hit", "Query", "SearchFilters", "SearchResult", "search"]

log = logging.getLogger(__name__)

# Hybrid search reads this many candidates per channel and source (chosen on the LoCoMo dev set).
HYBRID_MIN_DEPTH, HYBRID_MAX_DEPTH = 50, 200

_channels = ThreadPoolExecutor(max_workers=4, thread_name_prefix="keyword-channel")


def _validate(mode: str, limit: int, min_score: float | None, fusion: str) -> None:
    if mode not in SEARCH_MODES:
        raise ValidationError("mode", f"must be one of {list(SEARCH_MODES)}")
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ValidationError("limit", "must be an integer from 1 to 100")
    if min_score is not None and not 0 <= min_score <= 1:
        raise ValidationError("min_score", "must be between 0 and 1")
    if fusion not in FUSIONS:
        raise ValidationError("fusion", f"must be one of {sorted(FUSIONS)}")


def search(
    pool: ConnectionPool,
    embedder: Embedder,
    owner: str,
    query: str | Query,
    *,
    mode: str = "hybrid",
    filters: SearchFilters | None = None,
    limit: int = 10,
    min_score: float | None = None,
    fusion: str = "evidence",
    query_vector: np.ndarray | None = None,
    neighbours: bool = True,
    speakers: bool = True,
    turn_priors: bool = True,
    dates: bool = True,
) -> SearchResult:
    """Search one owner's memory. Never raises on a provider outage: the result says it degraded.

    `query` is checked here unless it comes as a `Query` its caller checked already. Hybrid search fuses the
    channels (`fusion`, retrieval/fusion.py) and, with `neighbours`, lifts the neighbouring turns of its top
    conversational hits (retrieval/neighbours.py). With `speakers`, a question that names one of the
    candidates' speakers is embedded without the name and prefers that speaker's turns (retrieval/speakers.py).
    With `turn_priors`, conversational turns that ask or say little score lower (retrieval/turns.py). With
    `dates`, a short question naming a time prefers what was written, or tells of, that time, and reads the
    memories of a narrow named time on their own (retrieval/dates.py)."""
    q = query if isinstance(query, Query) else Query.checked(query)
    _validate(mode, limit, min_score, fusion)
    f = (filters or SearchFilters()).validated()
    text = q.text
    degraded = None
    qvec = query_vector
    if mode != "keyword" and qvec is None:
        qvec, degraded = embed_query(embedder, text, owner)
    depth = min(HYBRID_MAX_DEPTH, max(HYBRID_MIN_DEPTH, limit * 3)) if mode == "hybrid" else limit
    want_sem, want_kw = qvec is not None, mode != "semantic" or qvec is None
    kw_future = _channels.submit(keyword_channel, pool, owner, text, f, depth) if want_sem and want_kw else None
    by_speaker = mode == "hybrid" and speakers and want_sem  # a named speaker's turns: `_without_named_speaker`
    early = _start_rerun(pool, embedder, owner, text, f, depth) if by_speaker else None
    sem = semantic_channel(pool, owner, qvec, embedder.model_name, f, depth, mode == "semantic") if want_sem else []
    if kw_future is not None:
        kw = kw_future.result()  # the keyword channel ran on its own connection, beside the semantic one
    else:
        kw = keyword_channel(pool, owner, text, f, depth) if want_kw else []
    speaker, memory_qvec = None, qvec
    if by_speaker:
        speaker, memory_qvec, sem = _without_named_speaker(
            pool, embedder, owner, text, f, depth, qvec, sem, kw, early
        )
    now = f.as_of or datetime.now(UTC)
    asked = asked_spans(text, focus(text).long, now) if dates and mode == "hybrid" and want_sem else []
    if asked and "memory" in f.sources:
        sem = _added(sem, _memories_in_spans(pool, embedder.model_name, owner, memory_qvec, f, asked, now, depth))
    if mode == "semantic" and qvec is not None:
        ranked = sem  # raw cosine similarity, as the progressive-search and advanced-search specs report it
    elif mode == "keyword" or qvec is None:
        ranked = calibrate_keyword(kw)
    else:
        if fusion == "evidence":
            sem = sem + vector_scored(sem, kw, qvec, memory_qvec)
        ranked = FUSIONS[fusion](calibrate_semantic(sem, embedder, q.language), calibrate_keyword(kw))
        exchanges = _read_exchanges(pool, owner, f, ranked, speaker) if neighbours or turn_priors else Exchanges()
        if neighbours and exchanges.conversation:
            ranked = _lift_neighbours(embedder, q.language, memory_qvec, ranked, exchanges, speaker)
        if turn_priors:
            ranked = weighed(ranked, exchanges.conversation)
        if speaker:
            ranked = boosted(ranked, speaker)
        if asked:
            ranked = dated(ranked, asked, first=asks_only_when(text, now))
    if min_score is not None:
        ranked = [h for h in ranked if h.score >= min_score]
    return SearchResult(
        hits=ranked[:limit],
        mode=mode if qvec is not None or mode == "keyword" else "keyword",
        degraded=degraded,
    )


SPAN_READ_MAX_ROWS = 1_000
"""A span a question names is read on its own while it holds at most this many of the owner's memories: their
exact scan costs a few milliseconds; a broader span's scan cost up to 50 ms at 100k memories (docs, step 7)."""


def _memories_in_spans(
    pool: ConnectionPool, model: str, owner: str, qvec: np.ndarray, f: SearchFilters, asked: list[Span],
    now: datetime, depth: int,
) -> list[Hit]:
    """The memory source's semantic channel within each span the question names that holds few memories: one of
    that time which the whole history's candidates pushed out still competes, and the date prior prefers it.
    Memories only (what happened when) and the semantic channel only: the keyword channel and the other sources
    read the same way added little and doubled the cost (docs/retrieval-quality.md, step 7)."""
    out: list[Hit] = []
    for g in span_filters(replace(f, sources=("memory",)), asked, now):
        params: dict[str, Any] = {}
        clauses = where_clauses("memory", owner, g, params)
        with reading(pool) as conn:
            held = conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM {SOURCES['memory'].from_sql} WHERE {' AND '.join(clauses)}"
                f" LIMIT {SPAN_READ_MAX_ROWS + 1}) s", params,
            ).fetchone()[0]
        if 0 < held <= SPAN_READ_MAX_ROWS:
            out += semantic_channel(pool, owner, qvec, model, g, depth)
    return out


def _added(hits: list[Hit], more: list[Hit]) -> list[Hit]:
    """`hits`, then the hits of `more` it does not hold."""
    held = {(h.source, h.id) for h in hits}
    return hits + [h for h in more if (h.source, h.id) not in held]


def _read_exchanges(
    pool: ConnectionPool, owner: str, f: SearchFilters, ranked: list[Hit], speaker: str | None = None
) -> Exchanges:
    """The exchange turns among the conversational memory hits, and the neighbouring turns of the top ones (and
    the named `speaker`'s own nearest turns around hers) (retrieval/exchanges.py): one query, none when no hit is
    a conversation turn."""
    ids = [h.id for h in ranked if h.source == "memory" and h.extra.get("session")]
    if "memory" not in f.sources or not ids:
        return Exchanges()
    top = [h.id for h in ranked if h.source == "memory"][:NEIGHBOUR_TOP]
    params: dict[str, Any] = {}
    clauses = where_clauses("memory", owner, f, params)
    with reading(pool) as conn:
        return read_exchanges(conn, ids, top, clauses, params, speaker)


def _lift_neighbours(
    embedder: Embedder, query_lang: str, qvec: np.ndarray, ranked: list[Hit], exchanges: Exchanges,
    speaker: str | None = None,
) -> list[Hit]:
    """Fused hits with the neighbouring turns of the top exchange turns lifted (retrieval/neighbours.py); only
    `speaker`'s turns when the question names one, and then her own nearest turns around her top ones too."""
    if not exchanges.adjacent and not exchanges.same_speaker:
        return ranked

    def hits(rows_of: dict[str, list[tuple]]) -> dict[str, list[Hit]]:
        out: dict[str, list[Hit]] = {}
        for hit_id, rows in rows_of.items():
            for row in rows:
                hit = hit_from_row("memory", row)
                if speaker and hit.extra.get("speaker") != speaker:
                    continue  # a question naming a speaker is about her turns: the lift reaches hers only
                if hit.embedding is not None:
                    hit.semantic = float(np.dot(hit.embedding, qvec))
                out.setdefault(hit_id, []).append(hit)
        return out

    def own_score(h: Hit) -> float:
        if h.semantic is None:
            return 0.0
        return SEMANTIC_WEIGHT * calibrated_similarity(embedder, query_lang, h.text, h.semantic)

    return lifted(ranked, hits(exchanges.adjacent), own_score, same_speaker=hits(exchanges.same_speaker))


# --- a question naming a speaker: the memory source searched again without the name ---------------------------

# The speakers seen among an owner's memory candidates, by pool and owner: a question naming one of them starts
# its re-run without the name (`_without_named_speaker`) beside the channels instead of after them.
SPEAKERS_SEEN_SECONDS, SPEAKERS_SEEN_MAX = 600.0, 64
_speakers_seen = Memo()


@dataclass
class _EarlyRerun:
    """The memory source's semantic channel on the question without `speaker`'s name, started early."""

    speaker: str
    future: Future[tuple[np.ndarray, list[Hit]] | None]


def _start_rerun(
    pool: ConnectionPool, embedder: Embedder, owner: str, query: str, f: SearchFilters, depth: int
) -> _EarlyRerun | None:
    """When the question names one of the speakers seen among this owner's earlier candidates, the re-run
    without the name, started now on its own thread; used only if the candidates of this search name the same
    speaker (`_without_named_speaker`), so the hits are those of the re-run after the channels."""
    if "memory" not in f.sources:
        return None
    speaker = named_speaker(query, _speakers_seen.get((pool.conninfo, owner)) or ())
    stripped = without_speaker(query, speaker) if speaker else query
    if speaker is None or stripped == query:
        return None
    return _EarlyRerun(speaker, _channels.submit(_memories_without_name, pool, embedder, owner, stripped, f, depth))


def _memories_without_name(
    pool: ConnectionPool, embedder: Embedder, owner: str, stripped: str, f: SearchFilters, depth: int
) -> tuple[np.ndarray, list[Hit]] | None:
    """(vector, hits) of the memory source's semantic channel on `stripped`; None when embedding it fails."""
    try:
        memory_qvec = embedder.embed_query(focus(stripped).embed_text, owner)
    except EmbeddingError:  # a provider outage must not break search: keep the question's own vector
        log.warning("embedding the question without the speaker's name failed", exc_info=True)
        return None
    memories = semantic_channel(pool, owner, memory_qvec, embedder.model_name, replace(f, sources=("memory",)), depth)
    return memory_qvec, memories


def _remember_speakers(pool: ConnectionPool, owner: str, speakers: set[str | None]) -> None:
    """Add this search's candidate speakers to the owner's (started afresh past SPEAKERS_SEEN_MAX names)."""
    key = (pool.conninfo, owner)
    named = {s for s in speakers if s and s.strip()}
    seen = set(_speakers_seen.get(key) or ()) | named
    _speakers_seen.put(key, frozenset(seen if len(seen) <= SPEAKERS_SEEN_MAX else named), SPEAKERS_SEEN_SECONDS)


def _without_named_speaker(
    pool: ConnectionPool, embedder: Embedder, owner: str, query: str, f: SearchFilters, depth: int,
    qvec: np.ndarray, sem: list[Hit], kw: list[Hit], early: _EarlyRerun | None = None,
) -> tuple[str | None, np.ndarray, list[Hit]]:
    """(named speaker, memory query vector, semantic hits): when the question names one of the candidates'
    speakers, the semantic channel of the memory source (the one with speakers) again on the question embedded
    without the name (retrieval/speakers.py); the other sources keep their hits from the question as written.
    Else, or when that embedding fails, the question's own vector and the channel as it ran. `early`: that
    re-run, if `_start_rerun` began it for this speaker."""
    candidates = {h.extra.get("speaker") for h in sem + kw if h.source == "memory"}
    _remember_speakers(pool, owner, candidates)
    speaker = named_speaker(query, candidates)
    stripped = without_speaker(query, speaker) if speaker else query
    if stripped == query:  # also when no memory was a candidate: only memories have speakers
        return speaker, qvec, sem
    if early is not None and early.speaker == speaker:
        rerun = early.future.result()
    else:
        rerun = _memories_without_name(pool, embedder, owner, stripped, f, depth)
    if rerun is None:
        return speaker, qvec, sem
    memory_qvec, memories = rerun
    others = [h for h in sem if h.source != "memory"]
    return speaker, memory_qvec, sorted(others + memories, key=lambda h: h.score, reverse=True)
