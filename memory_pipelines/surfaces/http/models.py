"""Request bodies of the HTTP API. Constraints live here so a bad request is a 422 naming the field."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

CONTENT_TYPES = ("requirement", "plan", "development", "testing", "insight")
ContentType = Literal["requirement", "plan", "development", "testing", "insight"]
Scope = Literal["all", "requirement", "plan", "development", "testing", "insight"]
ContextMode = Literal["plan", "execute", "debug", "chat"]
SearchMode = Literal["summary", "hybrid", "semantic", "keyword"]

MAX_QUERY = 2000
MAX_CONTENT = 100_000
MAX_ID = 200
MAX_IDS = 100


def storable(value: str | None) -> str | None:
    """Reject what PostgreSQL text cannot hold (NUL) and text that is not valid Unicode (lone surrogates)."""
    if value is None:
        return None
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid Unicode text") from exc
    return value


Query = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY), AfterValidator(storable)]
ItemId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID), AfterValidator(storable)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(storable)]
Path_ = Annotated[str, StringConstraints(min_length=1, max_length=1000), AfterValidator(storable)]
Content = Annotated[str, StringConstraints(min_length=1, max_length=MAX_CONTENT), AfterValidator(storable)]
OwnerField = Annotated[str | None, Field(None, max_length=200, description=(
    "Ignored when it names the key's own owner; any other value is rejected. The owner always comes "
    "from the API key."))]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=False)


class SearchRequest(_Body):
    """Seed 000 summary layer."""

    query: Query = Field(description="What to look for, any language.")
    top_k: int = Field(5, alias="topK", ge=1, le=100, description="How many matches (1-100).")
    mode: SearchMode = Field("summary", description="'summary' (= hybrid), or hybrid | semantic | keyword.")
    owner_id: OwnerField = None


class RelatedRequest(_Body):
    """Seed 000 related layer."""

    base_id: ItemId = Field(description="An id from a search match.")
    top_k: int = Field(5, alias="topK", ge=1, le=100)
    exclude_self: bool = True
    owner_id: OwnerField = None


class IngestRequest(_Body):
    """Seed 004 `POST /ingest/memory`: project_name or project_key, content_type and content."""

    content: Content = Field(description="The memory text; the server chunks, embeds, summarises, tags it.")
    content_type: ContentType = Field(description="requirement | plan | development | testing | insight")
    project_name: Name | None = None
    project_key: Name | None = Field(None, description="Stable project id across machines (default: name).")
    machine_name: Path_ | None = None
    project_path: Path_ | None = None
    ts: int | None = Field(None, ge=0, le=32_503_680_000, description="Unix seconds; default now.")
    speaker: Name | None = Field(None, description="Who said or wrote it.")
    owner_id: OwnerField = None


class ContextRequest(_Body):
    """Token-budgeted context (seed 001)."""

    query: Query
    mode: ContextMode = "execute"
    token_budget: int = Field(800, alias="tokenBudget", ge=50, le=32000)
    owner_id: OwnerField = None


class FeedbackRequest(_Body):
    """Which injected items of a context build were used."""

    retrieval_id: ItemId
    used_ids: list[ItemId] = Field(default_factory=list, max_length=500)
    owner_id: OwnerField = None
Cursor = Annotated[str, StringConstraints(min_length=1, max_length=500), AfterValidator(storable)]
