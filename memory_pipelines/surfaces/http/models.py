"""Request bodies of the HTTP API. Constraints live here so a bad request is a 422 naming the field."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints

from ...vocabulary import (
    DEFAULT_BUDGET,
    MAX_BUDGET,
    MAX_ID,
    MAX_IDS,
    MAX_LABEL,
    MAX_TOP_K,
    MIN_BUDGET,
    SNAKE_PATTERN,
    TASK_TYPES,
    ContentType,
    ContextMode,
    Scope,
)
from ..schema import Content, Cursor, Documented, Instant, Int, ItemId, Name, Output, Query, Ts, storable
from ..schema import PathText as Path_

SearchMode = Literal["summary", "hybrid", "semantic", "keyword"]
__all__ = ["ContentType", "ContextMode", "Scope", "Content", "Cursor", "Documented", "Instant", "ItemId", "Name",
           "Query", "Path_", "storable", "MAX_ID", "MAX_IDS"]

# `GET /memories?ids=`: what a URL can carry through any server (uvicorn's h11 takes 16 KiB of request head,
# httptools 64 KiB): 100 memory ids (`mem_` + 20 hex) with their commas, printable ASCII (at most 3 bytes each
# once percent-encoded), an id at most MAX_ID characters, the first one not blank.
IDS_CHARS = MAX_IDS * 25
IDS_PATTERN = rf"^[!-+\--~][ -+\--~]{{0,{MAX_ID - 1}}}(,[ -+\--~]{{0,{MAX_ID}}}){{0,{MAX_IDS - 1}}}$"

OwnerField = Annotated[str | None, Field(None, max_length=200, description=(
    "Ignored when it names the key's own owner; any other value is rejected. The owner always comes "
    "from the API key."))]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=False)


def _examples(*examples: dict, **schema: object) -> ConfigDict:
    """Request examples for the docs; each succeeds as written (none names `owner_id`: the key decides it).
    `schema`: more keywords of the body's JSON schema."""
    return ConfigDict(json_schema_extra={"examples": list(examples), **schema})


class SearchRequest(_Body):
    """Progressive search, summary layer."""

    model_config = _examples({"query": "用户登录验证 login cookie", "topK": 5, "mode": "summary"})

    query: Query = Field(description="What to look for, any language.")
    top_k: Int = Field(5, alias="topK", ge=1, le=MAX_TOP_K, description="How many matches (1-100).")
    mode: SearchMode = Field("summary", description="'summary' (= hybrid), or hybrid | semantic | keyword.")
    exclude_session: Name | None = Field(None, description="Leave out the memories of this conversation (the "
                                         "`session` they were written with).")
    owner_id: OwnerField = None


class RelatedRequest(_Body):
    """Progressive search, related layer."""

    model_config = _examples({"base_id": "mem_3f9c0b6a1d2e4f5a6b7c", "topK": 5, "exclude_self": True})

    base_id: ItemId = Field(description="An id from a search match (or any id of this owner).")
    top_k: Int = Field(5, alias="topK", ge=1, le=MAX_TOP_K, description="How many neighbours (1-100).")
    exclude_self: StrictBool = Field(True, description="Leave the base item itself out of the matches.")
    owner_id: OwnerField = None


class IngestRequest(_Body):
    """Memory centre `POST /ingest/memory`: project_name or project_key, content_type and content."""

    model_config = _examples(
        {"project_name": "agent-mem", "content_type": "development", "speaker": "李雷",
         "content": "我们选择 pgvector 存储向量，因为 PostgreSQL 已经在用，运维成本低，支持 HNSW 索引。"},
        {"project_name": "web-app", "content_type": "requirement",
         "content": "The login page keeps the session cookie for 30 days across subdomains."},
        # project_name or project_key (the library says which is missing: a 422 naming project_name)
        anyOf=[{"required": [name], "properties": {name: {"type": "string"}}}
               for name in ("project_name", "project_key")],
    )

    content: Content = Field(description="The memory text; the server chunks, embeds, summarises, tags it.")
    content_type: ContentType = Field(description="requirement | plan | development | testing | insight")
    project_name: Name | None = None
    project_key: Name | None = Field(None, description="Stable project id across machines (default: name).")
    machine_name: Path_ | None = None
    project_path: Path_ | None = None
    ts: Ts | None = Field(None, description="Unix seconds, from 2000-01-01 to one day from now; default now.")
    speaker: Name | None = Field(None, description="Who said or wrote it.")
    session: Name | None = Field(None, description="The conversation it is a turn of: indexed with the turn before "
                                 "it, and search lifts the neighbouring turns of a strong hit.")
    wait: StrictBool | None = Field(None, description="true: answer after embedding and the duplicate check (the "
                                    "action says what was done); false: answer once stored (action DEFERRED; keyword "
                                    "search finds it at once), embedded and judged in the background within seconds. "
                                    "Default: the server's (`serve --ingest`, background unless set).")
    owner_id: OwnerField = None

    def memory_fields(self) -> dict[str, object]:
        """The fields of the memory itself (`MemoryInput`'s), for `Memory.ingest`."""
        return self.model_dump(exclude={"wait", "owner_id"})


class TaskContext(_Body):
    """The task at hand: the learnings matching it join the context's candidates and rank higher (the learnings
    spec's score: task type 10, failure class 8, event type 6)."""

    task_type: Literal[TASK_TYPES] | None = Field(None, description="The kind of work.")  # type: ignore[valid-type]
    failure_class: Name | None = Field(None, description="The failure being worked on, e.g. GATEWAY_TIMEOUT.")
    event_type: Annotated[str, StringConstraints(min_length=1, max_length=MAX_LABEL, pattern=SNAKE_PATTERN)] | None \
        = Field(None, description="The event that started it, e.g. task_failed.")


class ProjectRename(_Body):
    """`PATCH /projects/{project_key}`: the project's new name (its key stays)."""

    model_config = _examples({"project_name": "Agent memory"})

    project_name: Name = Field(description="The new name; not another of your projects' name or key.")
    owner_id: OwnerField = None


class ContextRequest(_Body):
    """Token-budgeted context (the context-builder spec)."""

    model_config = _examples({"query": "fix the login cookie bug", "mode": "debug", "tokenBudget": 800},
                             {"query": "the deploy fails with 502s", "mode": "debug",
                              "task": {"task_type": "dev", "failure_class": "GATEWAY_TIMEOUT",
                                       "event_type": "task_failed"}},
                             {"query": "and the hotel we picked?", "mode": "chat",
                              "exclude_session": "trip-planning-2026-01-20"})

    query: Query = Field(description="The task or question the agent is working on, any language.")
    mode: ContextMode = Field("execute", description="plan | execute | debug | chat: weighs the sources "
                              "(debug favours learnings and recent events; chat has no profile).")
    token_budget: Int = Field(DEFAULT_BUDGET, alias="tokenBudget", ge=MIN_BUDGET, le=MAX_BUDGET,
                              description="cl100k tokens the block may use, the profile included.")
    task: TaskContext | None = Field(None, description="The task at hand, to rank the learnings that match it.")
    exclude_session: Name | None = Field(None, description=(
        "The conversation the query is part of (the `session` its turns were written with): its memories are "
        "left out, as the agent holds them already."))
    owner_id: OwnerField = None


class FeedbackRequest(_Body):
    """Which injected items of a context build were used."""

    model_config = _examples({"retrieval_id": "7d1e2f3a-4b5c-4d6e-8f70-819a2b3c4d5e",
                              "used_ids": ["mem_3f9c0b6a1d2e4f5a6b7c"]})

    retrieval_id: ItemId = Field(description="`retrieval_id` of a context answer.")
    used_ids: list[ItemId] = Field(max_length=500, description=(
        "Ids of the build's injected items the agent used (`[]`: none); its other injected items are marked "
        "unused. An id the build did not inject is a 422 and marks nothing."))
    owner_id: OwnerField = None


class ImplicitFeedbackRequest(_Body):
    """What the agent finally produced for one context build."""

    model_config = _examples({"retrieval_id": "7d1e2f3a-4b5c-4d6e-8f70-819a2b3c4d5e",
                              "output": "The 401s come from the expired token: refresh it before the call "
                                        "and retry once, as we did for Stripe."})

    retrieval_id: ItemId = Field(description="`retrieval_id` of a context answer.")
    output: Output = Field(description=(
        "The agent's final answer, summary, diff or tool calls, as text (at most the limit in characters)."))
    owner_id: OwnerField = None
