"""The MCP tools over items: what an agent records during its work (a learning, a task and its status, an event).

Their arguments are the write contract's fields (vocabulary.WRITE_CONTRACTS), so a tool's input schema is the
contract's and an argument outside it is refused.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from ..face import Memory
from ..vocabulary import (
    MAX_ID,
    MAX_ITEM_KEY,
    MAX_SEARCH_LIMIT,
    SNAKE_PATTERN,
    TASK_STATUSES,
    TASK_TYPES,
    WRITE_CONTRACTS,
)
from .schema import Text, int_between

ITEM_TOOLS_TEXT = (
    " Give a `key` (your own stable id) to update the same item later; `at` is when it happened (default now). "
    "It is keyword-searchable at once and embedded in the background; mem.context finds it."
)


CLEARABLE = tuple(s.name for s in WRITE_CONTRACTS["task"] if s.nullable and s.kind != "time")
"""The task fields a null clears in mem.update_task: the nullable ones but the time (a stored item keeps one)."""

GIVEN: ContextVar[frozenset[str]] = ContextVar("mcp_given_arguments", default=frozenset())
"""The argument names of the tool call at hand, as the client sent them (the server sets it)."""


def _field_annotation(spec: Any, optional: bool) -> Any:
    """The MCP argument type of one field of the write contract (vocabulary.FieldSpec): its kind, enum, range and
    limits, with its doc as the description. The library checks it again (patterns, times, object sizes)."""
    described = Field(description=spec.doc or None)
    if spec.kind == "text" and (spec.required or spec.nullable):  # a blank one is refused, as by the library
        base: Any = Annotated[str, Field(min_length=1, max_length=spec.max_chars, pattern=spec.pattern), Text]
    elif spec.kind == "text":
        base = Annotated[str, Field(max_length=spec.max_chars, pattern=spec.pattern)]
    elif spec.kind == "enum":
        base = Literal[spec.choices]  # type: ignore[valid-type]
    elif spec.kind == "int":
        base = int_between(spec.min, spec.max)
    elif spec.kind == "object":
        base = dict[str, Any]
    elif spec.kind == "bool":
        base = StrictBool  # "false", "yes" and 0 are refused, as over HTTP
    else:  # time: ISO 8601 text or Unix seconds, parsed by the library (strict: true is not second 1)
        base = StrictStr | StrictInt | StrictFloat
    return Annotated[base | None, described] if optional else Annotated[base, described]


def _contract_tool(fn: Callable[..., Any], name: str, source: str, *, partial: bool, skip: tuple[str, ...] = (),
                   first: tuple[inspect.Parameter, ...] = ()) -> Callable[..., Any]:
    """`fn(ctx, **fields)` given the signature of `source`'s write contract (every field optional when `partial`),
    so the tool's input schema is the contract's and an argument outside it is refused."""
    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context), *first]
    for spec in WRITE_CONTRACTS[source]:
        if spec.name in skip:
            continue
        optional = partial or not spec.required
        params.append(inspect.Parameter(spec.name, inspect.Parameter.KEYWORD_ONLY,
                                        annotation=_field_annotation(spec, optional),
                                        default=None if optional else inspect.Parameter.empty))
    fn.__signature__ = inspect.Signature(params, return_annotation=dict[str, Any])  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in params} | {"return": dict[str, Any]}
    fn.__name__ = name
    return fn


def add_item_tools(server: MCPServer, memory: Memory, tool: Callable[..., Any], owner_of: Callable[[Context], str],
                   call: Callable[..., dict[str, Any]]) -> None:
    """mem.record_learning, mem.record_task, mem.update_task, mem.record_event and mem.relevant_learnings; their
    arguments are the write contract's fields (vocabulary.WRITE_CONTRACTS). A null argument is left out of a record
    and clears the field in an update. `call` runs a library call and turns its expected failures into tool
    errors."""

    def given(fields: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in fields.items() if v is not None}

    def recorder(source: str) -> Callable[..., Any]:
        def record(ctx: Context, **fields: Any) -> dict[str, Any]:
            owner = owner_of(ctx)
            return call(memory.write, owner, source, given(fields))

        return _contract_tool(record, f"record_{source}", source, partial=False, skip=("active",))

    tool(name="mem.record_learning", description=(
        "Record a lesson learned while working: what went wrong or what worked, so later sessions (yours and your "
        "team's) avoid or repeat it. title: the lesson in one line; content: the details. task_type, "
        "failure_class (UPPER_SNAKE, e.g. TIMEOUT), trigger_event (e.g. task_failed) and category (failure_pattern "
        "| best_practice | optimization | insight) make it found by mem.relevant_learnings." + ITEM_TOOLS_TEXT
        + " Returns id, key and action (created, updated or unchanged)."))(recorder("learning"))

    tool(name="mem.record_task", description=(
        "Record a task you are doing or did: title, description, task_type, status (" + " | ".join(TASK_STATUSES)
        + "), project. Change its status later with mem.update_task." + ITEM_TOOLS_TEXT
        + " Returns id, key and action."))(recorder("task"))

    tool(name="mem.record_event", description=(
        "Record an event: type (lower_snake, e.g. task_failed, alert) and payload (a JSON object of what happened)."
        " Recent events of types task_failed, task_completed, alert, layer2_health and escalation enter "
        "mem.context." + ITEM_TOOLS_TEXT + " Returns id, key and action."))(recorder("event"))

    ref_param = inspect.Parameter(
        "ref", inspect.Parameter.KEYWORD_ONLY,
        annotation=Annotated[str, Field(min_length=1, max_length=max(MAX_ITEM_KEY, MAX_ID),
                                        description="The task's id or your key of it."), Text])

    def update_task(ctx: Context, ref: str, **changes: Any) -> dict[str, Any]:
        owner = owner_of(ctx)
        named = GIVEN.get()  # a null the caller sent clears the field, as a PATCH does; an omitted one is None too
        try:
            return call(memory.update, owner, "task", ref,
                        {k: v for k, v in changes.items() if v is not None or k in named})
        except ToolError as exc:
            if str(exc).startswith("no task"):
                raise ToolError(f"no task {ref!r} of yours: use the id or key mem.record_task returned") from None
            raise

    tool(name="mem.update_task", description=(
        "Change some fields of one of your tasks, found by id or key: most often its status (" + " | ".join(
            TASK_STATUSES) + "); active=false removes it from search and context. Only the fields you give "
        "change. A changed title or description is embedded again. Returns id, key and action (updated or "
        "unchanged). A null clears " + ", ".join(CLEARABLE) + " (as over HTTP); a null for another field is "
        "refused."))(
        _contract_tool(update_task, "update_task", "task", partial=True, first=(ref_param,)))

    def relevant_learnings(ctx: Context, **query: Any) -> dict[str, Any]:
        owner = owner_of(ctx)
        return call(lambda: {"learnings": memory.relevant_learnings(owner, **query)})

    def arg(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)

    params = [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context),
        arg("task_type", Annotated[Literal[TASK_TYPES] | None,  # type: ignore[valid-type]
                                   Field(description="The kind of work at hand.")]),
        arg("failure_class", Annotated[str | None, Field(max_length=200, description="The failure met, e.g. "
                                                         "TIMEOUT."), Text]),
        arg("event_type", Annotated[str | None, Field(max_length=200, pattern=SNAKE_PATTERN, description=(
            "The event that started it, e.g. task_failed."))]),
        arg("limit", int_between(1, MAX_SEARCH_LIMIT, "How many learnings."), 10),
    ]
    relevant_learnings.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        params, return_annotation=dict[str, Any])
    relevant_learnings.__annotations__ = {p.name: p.annotation for p in params} | {"return": dict[str, Any]}
    tool(name="mem.relevant_learnings", description=(
        "The learnings most relevant to the task at hand, best first: same task_type (10), failure_class (8), "
        "trigger event_type (6), failure patterns (4), then freshness. Call it before a task or after a failure. "
        "Returns learnings with their score and its parts."))(relevant_learnings)
