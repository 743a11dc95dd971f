"""Request bodies of the HTTP API. Constraints live here so a bad request is a 422 naming the field."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...vocabulary import (
    DEFAULT_BUDGET,
    MAX_BUDGET,
    MAX_ID,
    MAX_IDS,
    MAX_TOP_K,
    MAX_TS,
    MIN_BUDGET,
    ContentType,
    ContextMode,
    Scope,
)
from ..schema import Content, Cursor, ItemId, Name, Query, storable
from ..schema import PathText as Path_

SearchMode = Literal["summary", "hybrid", "semantic", "keyword"]
__all__ = ["ContentType", "ContextMode", "Scope", "Content", "Cursor", "ItemId", "Name", "Query", "Path_",
           "storable", "MAX_ID", "MAX_IDS"]

OwnerField = Annotated[str | None, Field(None, max_length=200, description=(
    "Ignored when it names the key's own owner; any other value is rejected. The owner always comes "
    "from the API key."))]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=False)


class SearchRequest(_Body):
    """Progressive search, summary layer."""

    query: Query = Field(description="What to look for, any language.")
    top_k: int = Field(5, alias="topK", ge=1, le=MAX_TOP_K, description="How many matches (1-100).")
    mode: SearchMode = Field("summary", description="'summary' (= hybrid), or hybrid | semantic | keyword.")
    owner_id: OwnerField = None


class RelatedRequest(_Body):
    """Progressive search, related layer."""

    base_id: ItemId = Field(description="An id from a search match.")
    top_k: int = Field(5, alias="topK", ge=1, le=MAX_TOP_K)
    exclude_self: bool = True
    owner_id: OwnerField = None


class IngestRequest(_Body):
    """Memory centre `POST /ingest/memory`: project_name or project_key, content_type and content."""

    content: Content = Field(description="The memory text; the server chunks, embeds, summarises, tags it.")
    content_type: ContentType = Field(description="requirement | plan | development | testing | insight")
    project_name: Name | None = None
    project_key: Name | None = Field(None, description="Stable project id across machines (default: name).")
    machine_name: Path_ | None = None
    project_path: Path_ | None = None
    ts: int | None = Field(None, ge=0, le=MAX_TS, description="Unix seconds; default now.")
    speaker: Name | None = Field(None, description="Who said or wrote it.")
    owner_id: OwnerField = None


class ContextRequest(_Body):
    """Token-budgeted context (the context-builder spec)."""

    query: Query
    mode: ContextMode = "execute"
    token_budget: int = Field(DEFAULT_BUDGET, alias="tokenBudget", ge=MIN_BUDGET, le=MAX_BUDGET)
    owner_id: OwnerField = None


class FeedbackRequest(_Body):
    """Which injected items of a context build were used."""

    retrieval_id: ItemId
    used_ids: list[ItemId] = Field(default_factory=list, max_length=500)
    owner_id: OwnerField = None
