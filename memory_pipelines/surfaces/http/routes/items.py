"""The HTTP resources of tasks, learnings, capabilities, goals and events: write one, write a batch, update one.

Request bodies are generated from the write contract (vocabulary.WRITE_CONTRACTS), so the documented fields, enums
and limits are the ones the library checks. A batch is checked item by item by the library (`store/items.py`):
a bad item is a 422 naming `items[i].field`, and nothing of the batch is written; more than MAX_BATCH items is a
422 naming `items` (the schema's `maxItems`, checked with the body). Written items are keyword-searchable when the
answer comes back and embedded by the server's background worker.

    router(memory, Owner)  one APIRouter with every source's routes and POST /api/learnings/relevant
"""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path
from fastapi.responses import JSONResponse
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    WithJsonSchema,
    create_model,
)

from ....face import Memory
from ....infra.errors import ValidationError
from ....store.items import ItemConflict, ItemError
from ....vocabulary import (
    ITEM_TIME_TEXT,
    MAX_BATCH,
    MAX_ITEM_KEY,
    MAX_LABEL,
    MAX_TS,
    MIN_TS,
    SNAKE_PATTERN,
    TASK_TYPES,
    WRITE_CONTRACTS,
    WRITE_TABLES,
    FieldSpec,
    a_source,
)
from ...encode import jsonable, to_json
from ...schema import TEXT_PATTERN, Documented, Int, Text, json_number, storable
from .. import errors as e
from ..deps import same_owner
from ..models import OwnerField

PLURAL = {"task": "tasks", "learning": "learnings", "capability": "capabilities", "goal": "goals", "event": "events"}
"""The resource of each source: /api/<plural>."""

_NO_NUL = r"^[^\u0000]*$"
_ID = "5b0e6f2c-3c1d-4d1e-9a8f-2b7c6d5e4f30"

EXAMPLES: dict[str, dict[str, Any]] = {
    "task": {"key": "JIRA-1432", "title": "Rotate the staging TLS certificates", "description": "They expire on "
             "the 30th; use the new ACME account.", "task_type": "dev", "status": "in_progress", "project": "infra",
             "at": "2026-01-20T09:12:25Z"},
    "learning": {"key": "pm-2026-01-20", "title": "Gateway 502s come from the connection pool, not the upstream",
                 "content": "Raise the pool to 50 and set a 2 s acquire timeout; the upstream was healthy.",
                 "task_type": "dev", "failure_class": "GATEWAY_TIMEOUT", "trigger_event": "task_failed",
                 "category": "failure_pattern"},
    "capability": {"key": "translate-de", "name": "Translate manuals into German",
                   "description": "Technical documents, glossary kept in docs/glossary.md."},
    "goal": {"key": "okr-q1-latency", "title": "p99 context build under 100 ms at 1M rows", "status": "in_progress",
             "priority": 1, "progress": 60},
    "event": {"key": "deploy-8812", "type": "task_failed", "payload": {"task": "deploy web", "error": "502 from "
              "the gateway"}, "at": 1768900345},
}
"""Request examples per source (each succeeds as written)."""

CHANGE_EXAMPLES: dict[str, dict[str, Any]] = {
    "task": {"status": "completed"},
    "learning": {"category": "best_practice"},
    "capability": {"description": "Technical documents and UI strings."},
    "goal": {"progress": 80},
    "event": {"active": False},
}


# -- request bodies from the contract ----------------------------------------------------------------------------

def _item_time(nullable: bool) -> Any:
    """An item's own time as sent: one type, not a union, so a bad value is an error of the field itself (`at`,
    not `at.str`); the library parses it and checks its range (ItemError naming `at`)."""
    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError("must be an ISO 8601 time or Unix seconds")
        return value

    kinds = [{"type": "string", "format": "date-time"}, {"type": "number", "minimum": MIN_TS, "maximum": MAX_TS}]
    schema = {"anyOf": kinds + ([{"type": "null"}] if nullable else []), "description": ITEM_TIME_TEXT}
    return Annotated[Any, BeforeValidator(check), WithJsonSchema(schema)]


def _annotation(spec: FieldSpec, partial: bool = False) -> Any:
    """The pydantic type of one contract field. Null is taken by nullable fields (but not as a change's time: a
    stored item always has one) and, in a whole item, by optional fields, where it means their default."""
    takes_null = spec.nullable and spec.kind != "time" if partial else spec.nullable or not spec.required
    if spec.kind == "time":
        return _item_time(takes_null)
    if spec.kind == "text":
        if spec.required or spec.nullable:  # not blank
            kind: Any = Annotated[str, StringConstraints(min_length=1, max_length=spec.max_chars,
                                                         pattern=spec.pattern),
                                  Text, Documented(pattern=spec.pattern or TEXT_PATTERN)]
        else:
            kind = Annotated[str, StringConstraints(max_length=spec.max_chars), AfterValidator(storable),
                             Documented(pattern=_NO_NUL)]
        if spec.reserved:  # documented only: the library refuses it (a 422 naming the field, nothing written)
            kind = Annotated[kind, Documented(**{"not": {"enum": list(spec.reserved)}})]
    elif spec.kind == "enum":
        kind = Literal[spec.choices]  # type: ignore[valid-type]
    elif spec.kind == "int":
        # the bounds before the validator: pydantic then states them as minimum / maximum, nullable or not
        kind = Annotated[int, Field(ge=spec.min, le=spec.max), BeforeValidator(json_number)]
    elif spec.kind == "bool":
        kind = StrictBool
    elif spec.kind == "object":
        kind = dict[str, Any]
    else:
        raise AssertionError(spec.kind)
    return kind | None if takes_null else kind


def _description(spec: FieldSpec) -> str:
    limit = f" At most {spec.max_chars} characters{' as JSON' if spec.kind == 'object' else ''}." \
        if spec.max_chars and spec.kind in ("text", "object") else ""
    return spec.doc + limit


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def item_model(source: str, *, partial: bool = False) -> type[BaseModel]:
    """The request body of one item of `source` (partial: every field optional, none defaulted)."""
    fields: dict[str, Any] = {}
    for spec in WRITE_CONTRACTS[source]:
        if partial or not spec.required:
            default = None if partial or spec.nullable or isinstance(spec.default, dict) else spec.default
            info = Field(default, description=_description(spec))
        else:
            info = Field(description=_description(spec))
        fields[spec.name] = (_annotation(spec, partial), info)
    fields["owner_id"] = (OwnerField, None)
    name = source.capitalize() + ("Changes" if partial else "Item")
    example = CHANGE_EXAMPLES[source] if partial else EXAMPLES[source]
    doc = (f"Fields of {a_source(source)} to change; the others stay as they are." if partial else
           f"One {source}: with a `key`, writing it again updates the {source} of that key. An optional field left "
           "out or null takes its default.")
    extra = {"minProperties": 1} if partial else {}
    return _with_examples(create_model(name, __base__=_Body, __doc__=doc, **fields), [example], **extra)


def _with_examples(model: type[BaseModel], examples: list[dict[str, Any]], **schema: Any) -> type[BaseModel]:
    model.model_config["json_schema_extra"] = {"examples": examples, **schema}
    model.model_rebuild(force=True)
    return model


ITEM_MODELS: dict[str, type[BaseModel]] = {s: item_model(s) for s in WRITE_CONTRACTS}
CHANGE_MODELS: dict[str, type[BaseModel]] = {s: item_model(s, partial=True) for s in WRITE_CONTRACTS}


def _batch_model(source: str) -> type[BaseModel]:
    item = ITEM_MODELS[source].__name__
    items_schema = {"type": "array", "minItems": 1, "maxItems": MAX_BATCH,
                    "items": {"$ref": f"#/components/schemas/{item}"},
                    "description": f"1 to {MAX_BATCH} {PLURAL[source]} (more: 422), written all or none."}
    model = create_model(
        f"{source.capitalize()}Batch", __base__=_Body,
        __doc__=f"A batch of {PLURAL[source]}, checked item by item: a bad one is a 422 naming `items[i].field`.",
        # the length is checked with the body (a 422 naming `items`, the limit and the count); each item by the library
        items=(Annotated[list[Any], Field(min_length=1, max_length=MAX_BATCH), WithJsonSchema(items_schema)], ...),
        owner_id=(OwnerField, None),
    )
    second = {**EXAMPLES[source], "key": EXAMPLES[source]["key"] + "-b"}
    if source == "capability":  # a capability's name is unique per owner
        second["name"] = "Translate manuals into French"
    return _with_examples(model, [{"items": [EXAMPLES[source], second]}])


BATCH_MODELS: dict[str, type[BaseModel]] = {s: _batch_model(s) for s in WRITE_CONTRACTS}


class RelevantLearningsRequest(_Body):
    """The task at hand; learnings are scored by how much of it they match (the learnings spec)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"task_type": "dev", "failure_class": "GATEWAY_TIMEOUT", "event_type": "task_failed", "limit": 5}]})

    task_type: Literal[TASK_TYPES] | None = Field(None, description="The kind of work (10 points).")  # type: ignore
    failure_class: Annotated[str, StringConstraints(min_length=1, max_length=MAX_LABEL), Text,
                             Documented(pattern=TEXT_PATTERN)] | None = Field(
        None, description="The failure, e.g. GATEWAY_TIMEOUT (8 points: the learning's class, or its content "
        "naming it; compared in upper case).")
    event_type: Annotated[str, StringConstraints(min_length=1, max_length=MAX_LABEL, pattern=SNAKE_PATTERN)] | None \
        = Field(None, description="The event that started it, e.g. task_failed (6 points).")
    limit: Int = Field(10, ge=1, le=100, description="How many learnings (1-100).")


# -- responses --------------------------------------------------------------------------------------------------

class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ItemWritten(_Out):
    """What a write or an update did to one item."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"id": _ID, "key": "JIRA-1432", "action": "created"}, {"id": _ID, "key": None, "action": "unchanged"}]})

    id: str = Field(description="The item's id (also usable as `ref` of an update).")
    key: str | None = Field(description="Your key of it, if it has one.")
    action: Literal["created", "updated", "unchanged"] = Field(description="`unchanged`: every field was already "
                                                                           "as sent (nothing is re-embedded).")


class BatchResult(_Out):
    index: int = Field(description="The item's position in `items`.")
    id: str
    key: str | None
    action: Literal["created", "updated", "unchanged"]


class Counts(_Out):
    created: int
    updated: int
    unchanged: int


class BatchWritten(_Out):
    """What a batch write did, item by item in the order sent."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"source": "learning", "results": [{"index": 0, "id": _ID, "key": "pm-2026-01-20", "action": "created"}],
         "counts": {"created": 1, "updated": 0, "unchanged": 0}}]})

    source: Literal[tuple(WRITE_CONTRACTS)]  # type: ignore[valid-type]
    results: list[BatchResult]
    counts: Counts


class ScoredLearning(_Out):
    id: str
    title: str
    content: str
    task_type: str | None
    failure_class: str | None
    trigger_event: str | None
    category: str | None
    created_at: str = Field(description="ISO 8601.")
    score: float = Field(description="The sum of the parts in `breakdown`.")
    breakdown: dict[str, float] = Field(description="Points per dimension: task_type, failure_class, event_type, "
                                        "failure_pattern, freshness.")


class RelevantLearnings(_Out):
    """The owner's learnings, most relevant to the task first."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"learnings": [{
        "id": _ID, "title": "Gateway 502s come from the connection pool, not the upstream",
        "content": "Raise the pool to 50 and set a 2 s acquire timeout.", "task_type": "dev",
        "failure_class": "GATEWAY_TIMEOUT", "trigger_event": "task_failed", "category": "failure_pattern",
        "created_at": "2026-01-20T09:12:25+00:00", "score": 31.0,
        "breakdown": {"task_type": 10.0, "failure_class": 8.0, "event_type": 6.0, "failure_pattern": 4.0,
                      "freshness": 3.0}}]}]})

    learnings: list[ScoredLearning]


# -- routes ------------------------------------------------------------------------------------------------------

def _invalid(exc: ItemError) -> JSONResponse:
    """A 422 (409 for a collision with another stored item) naming the item's field as the request spells it:
    `title`, or `items[3].title` in a batch."""
    if exc.index is None:
        loc, field = ["body", exc.field], exc.field
    elif exc.field == "item":
        loc, field = ["body", "items", str(exc.index)], f"items[{exc.index}]"
    else:
        loc, field = ["body", "items", str(exc.index), exc.field], exc.path
    if isinstance(exc, ItemConflict):
        return JSONResponse({"detail": f"{field}: {exc.message}", "field": field}, status_code=409)
    return JSONResponse({"detail": [{"loc": loc, "msg": exc.message, "type": "value_error"}], "field": field},
                        status_code=422)


_BATCH_INVALID = {422: {"model": e.ValidationProblem, "description": "Bad input; nothing was written. `field` is "
                        f"`items[i].field` for a bad item, `items` for no items or more than {MAX_BATCH}.",
                        "content": {"application/json": {"example": {"detail": [{
                            "loc": ["body", "items"], "type": "too_long",
                            "msg": f"List should have at most {MAX_BATCH} items after validation, not 1200"}],
                            "field": "items"}}}}}
_CONFLICT = {409: {"model": e.Error, "description": "The item collides with another of this owner's (a capability's "
                   "name, a key another item has). Nothing was written.",
                   "content": {"application/json": {"example": {
                       "detail": "name: another capability of this owner is named 'Translate manuals into German' "
                                 "(key 'translate-de')", "field": "name"}}}}}
Ref = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ITEM_KEY), Text, Documented(pattern=TEXT_PATTERN),
                Path(description="The item's id, or your key of it.")]


def _own_items(items: list[Any], owner: str) -> list[Any]:
    """A batch's items less an `owner_id` naming the key's own owner (each item's schema is the single write's);
    any other owner is a 422 naming it (`items[i].owner_id`)."""
    out = []
    for i, item in enumerate(items):
        if isinstance(item, dict) and "owner_id" in item:
            item = dict(item)
            try:
                same_owner(item.pop("owner_id"), owner)
            except ValidationError as exc:  # the same rule, named at its item
                raise ItemError("owner_id", exc.message, i) from None
        out.append(item)
    return out


def source_router(memory: Memory, owner_type: Any, source: str) -> APIRouter:
    """POST /api/<plural>, POST /api/<plural>/batch and PATCH /api/<plural>/{ref} of one source."""
    plural = PLURAL[source]
    tag = "items"
    api = APIRouter(prefix=f"/api/{plural}", tags=[tag], route_class=e.StrictJsonRoute)
    Item, Changes, Batch = ITEM_MODELS[source], CHANGE_MODELS[source], BATCH_MODELS[source]
    fields = ", ".join(s.name for s in WRITE_CONTRACTS[source])
    searchable = ("keyword-searchable at once and embedded in the background within seconds"
                  if source != "goal" else "shown in the context's profile while pending or in progress")

    def write(body: Annotated[Item, Body()], owner: owner_type) -> JSONResponse:  # type: ignore[valid-type]
        same_owner(body.owner_id, owner)
        try:
            done = memory.write(owner, source, body.model_dump(exclude_unset=True, exclude={"owner_id"}))
        except ItemError as exc:
            return _invalid(exc)
        return to_json(done, status_code=201)

    write.__doc__ = (f"Store one {source} ({fields}); {searchable}. With a `key` (your stable id of it), writing "
                     f"the same key again updates that {source} in place (`updated`, or `unchanged` when every "
                     f"field is as stored: nothing is re-embedded). `at` is when it happened (default now).")
    conflict = _CONFLICT if source == "capability" else {}
    api.add_api_route("", write, methods=["POST"], status_code=201, summary=f"Write one {source}",
                      response_model=ItemWritten,
                      responses={201: {"description": f"The {source} was stored."},
                                 **e.errors(e.BAD_REQUEST, e.TOO_LARGE, conflict)})

    def write_batch(body: Annotated[Batch, Body()], owner: owner_type) -> JSONResponse:  # type: ignore[valid-type]
        same_owner(body.owner_id, owner)
        try:
            done = memory.write_many(owner, source, _own_items(body.items, owner))
        except ItemError as exc:
            return _invalid(exc)
        return to_json(done)

    write_batch.__doc__ = (f"Store up to {MAX_BATCH} {plural} in one transaction, each as `POST /api/{plural}` "
                           f"would: all of them, or, when one is bad, none (a 422 naming `items[i].field`). Each "
                           f"item's result in the order sent, and the counts. More than {MAX_BATCH} items is a 422 "
                           "naming `items`.")
    api.add_api_route("/batch", write_batch, methods=["POST"], summary=f"Write a batch of {plural}",
                      response_model=BatchWritten,
                      responses=e.errors(e.BAD_REQUEST, e.TOO_LARGE, _BATCH_INVALID, conflict))

    def update(ref: Ref, body: Annotated[Changes, Body()], owner: owner_type) -> JSONResponse:  # type: ignore
        same_owner(body.owner_id, owner)
        try:
            done = memory.update(owner, source, ref, body.model_dump(exclude_unset=True, exclude={"owner_id"}))
        except ItemError as exc:
            return _invalid(exc)
        return to_json(done)

    update.__doc__ = (f"Change some fields of one {source}, found by its id or your key: "
                      + {"task": "its `status` as the work moves, ", "goal": "its `progress`, ",
                         "learning": "", "capability": "", "event": ""}[source]
                      + "`active: false` to take it out of search and context (`true` brings it back). A "
                      "changed indexed text is re-embedded in the background. An id or key of another owner is a "
                      "404, exactly like an unknown one.")
    # `:path`: a key may hold a slash ("JIRA/7"), which the server decodes from %2F before routing
    api.add_api_route("/{ref:path}", update, methods=["PATCH"], summary=f"Update one {source}",
                      response_model=ItemWritten, responses=e.errors(e.BAD_REQUEST, e.TOO_LARGE, _CONFLICT,
                                         e.not_found(source, f"no {source} 'JIRA-1432'")))
    return api


def router(memory: Memory, owner_type: Any) -> APIRouter:
    """Every item source's routes, and the learnings relevance search. `owner_type`: the app's
    `Annotated[str, Depends(...)]` that resolves the API key to its owner."""
    api = APIRouter(route_class=e.StrictJsonRoute)
    for source in WRITE_TABLES:
        api.include_router(source_router(memory, owner_type, source))

    @api.post("/api/learnings/relevant", tags=["items"], summary="Learnings relevant to a task",
              response_model=RelevantLearnings, responses=e.errors(e.BAD_REQUEST, e.TOO_LARGE))
    def relevant(body: RelevantLearningsRequest, owner: owner_type) -> JSONResponse:  # type: ignore[valid-type]
        """The owner's learnings scored by the learnings spec: task type 10, failure class 8 (its class, or its
        content naming it), trigger event 6, category `failure_pattern` 4, freshness 3 (7 days) / 2 (30 days) / 1;
        best first, newest first on ties, with each part of the score. A context request can carry the same task
        (`task`) so its learning candidates rank this way too."""
        found = memory.relevant_learnings(owner, task_type=body.task_type, failure_class=body.failure_class,
                                          event_type=body.event_type, limit=body.limit)
        return to_json({"learnings": jsonable(found)})

    return api


__all__ = ["router", "source_router", "ITEM_MODELS", "CHANGE_MODELS", "BATCH_MODELS", "RelevantLearningsRequest"]
