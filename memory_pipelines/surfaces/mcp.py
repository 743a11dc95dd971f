"""The MCP surface: the memory-centre spec's `mem.*` tools, plus `mem.context`, on the `mcp` SDK 2.x (`MCPServer`).

Tools validate and shape arguments (with the types and limits of `schema`, as HTTP does) and call the library.
An argument a tool does not take is a tool error, as an unknown field is a 422 over HTTP. The owner is never an
argument (an `owner_id` naming another owner is refused, as over HTTP): `owner_resolver` gets the request's
HTTP headers (None over stdio) and returns the owner, or raises `PermissionError`.
Over stdio the owner comes from configuration (MEMORY_PIPELINES_OWNER); over streamable HTTP from the
`Authorization: Bearer <key>` of each request, checked twice: by `BearerKeyMiddleware` before the MCP app
(401 for a missing, unknown or revoked key) and again when a tool runs.
"""

from __future__ import annotations

import inspect
import logging
import types
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import psycopg
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from pydantic import Field
from pydantic import ValidationError as PydanticError

from ..face import Memory
from ..infra.db import RETRY_AFTER_SECONDS
from ..infra.errors import NotFoundError, UserError, ValidationError
from ..infra.ids import canonical_uuid
from ..store.ingest.inputs import FIELDS as MEMORY_FIELDS
from ..vocabulary import (
    CONTENT_TYPES_TEXT,
    DEFAULT_BUDGET,
    MAX_BUDGET,
    MAX_CONTENT,
    MAX_ID,
    MAX_IDS,
    MAX_NAME,
    MAX_OUTPUT,
    MAX_PATH,
    MAX_QUERY,
    MAX_SEARCH_LIMIT,
    MAX_TIMELINE_LIMIT,
    MIN_BUDGET,
    WRITABLE_SOURCES,
    ContentType,
    ContextMode,
    Scope,
)
from .encode import jsonable
from .json_body import refusing_repeated_members
from .mcp_errors import arguments_text, invalid_text
from .mcp_items import GIVEN, add_item_tools
from .schema import Instant, Output, Text, Ts, int_between

log = logging.getLogger(__name__)

OwnerResolver = Callable[[Mapping[str, str] | None], str]


INSTRUCTIONS = (
    "Long-term memory shared by all your sessions and machines. To recall, ALWAYS search first and get "
    "second: mem.search returns short snippets with ids; then call mem.get with the ids you need for the "
    "full content. Answer from the full content. Save durable facts, decisions and lessons with "
    "mem.ingest_memory. For one ready-to-use context block within a token budget, call mem.context; when "
    "you are done, post what you produced with mem.implicit_feedback (its retrieval_id and your output). "
    "Record what you do and learn as you work: a lesson with mem.record_learning, a task with mem.record_task "
    "and its status with mem.update_task, an event with mem.record_event; before a task, mem.relevant_learnings. "
    "The owner is fixed by the server (configuration or your API key); never pass owner_id. "
    + CONTENT_TYPES_TEXT
)


QueryArg = Annotated[str, Field(min_length=1, max_length=MAX_QUERY, description="What to look for."), Text]
ProjectKeyArg = Annotated[str | None, Field(max_length=MAX_NAME, description="Only this project."), Text]
SessionArg = Annotated[str | None, Field(max_length=MAX_NAME, description="The conversation to leave out."), Text]
ProjectNameArg = Annotated[str | None, Field(max_length=MAX_NAME, description="Project, by name."), Text]
OptName = Annotated[str | None, Field(max_length=MAX_NAME), Text]
Forgettable = Literal["memory", "task", "learning", "capability", "goal", "event"]
RetrievalIdArg = Annotated[str, Field(min_length=1, max_length=MAX_ID, description="retrieval_id of a mem.context "
                                                                                "answer."), Text]


def config_owner(owner: str) -> OwnerResolver:
    """The resolver for stdio: one owner from configuration."""
    return lambda _headers: owner


def bearer_key(headers: Mapping[str, str] | None) -> str | None:
    """The key of an `Authorization: Bearer <key>` header, if any."""
    value = (headers or {}).get("authorization") or ""
    scheme, _, key = value.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        return None
    return key


def key_owner(memory: Memory) -> OwnerResolver:
    """The resolver for HTTP: the owner of the request's bearer key."""

    def resolve(headers: Mapping[str, str] | None) -> str:
        owner = memory.owner_of_key(bearer_key(headers))
        if owner is None:
            raise PermissionError("missing, unknown or revoked API key: send `Authorization: Bearer <key>`")
        return owner

    return resolve


_RECORDED = ("task", "learning", "event")


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run a library call; expected failures become tool errors that say what to change."""
    try:
        return jsonable(fn(*args, **kwargs))
    except ValidationError as exc:
        raise ToolError(invalid_text(exc.field, exc.message)) from None
    except NotFoundError as exc:
        if str(exc).startswith("retrieval "):
            hint = "Use the retrieval_id mem.context returned (for your own builds)."
        elif source := next((s for s in WRITABLE_SOURCES if str(exc).startswith(f"no {s} ")), None):
            # mem.search returns memories only; no tool records a goal or a capability (HTTP and the CLI do)
            made = f"mem.record_{source}" if source in _RECORDED else f"POST /api/{source}s (or the CLI)"
            hint = f"Use the id or key {made} returned, or an id from mem.context (for your own items)."
        elif str(exc).startswith("no item "):  # mem.detail opens any source, not only what mem.search returns
            hint = "Use an id from mem.search, mem.context or a mem.record_* call (for your own items)."
        else:
            hint = "Use ids returned by mem.search (for your own memories)."
        raise ToolError(f"{exc}. {hint}") from None
    except UserError as exc:
        raise ToolError(str(exc)) from None
    except psycopg.OperationalError:  # down or restarting; psycopg_pool's PoolTimeout is one too
        raise ToolError(f"the database is unavailable; retry in {RETRY_AFTER_SECONDS} seconds.") from None


OWNER_ID_REFUSED = ("invalid `owner_id`: the owner comes from the server (its configuration, or your API key), "
                    "never from an argument. Omit owner_id and call again.")


SearchLimit = int_between(1, MAX_SEARCH_LIMIT, "How many matches.")
TimelineLimit = int_between(1, MAX_TIMELINE_LIMIT, "Page size.")
TokenBudget = int_between(MIN_BUDGET, MAX_BUDGET, "Token budget of the block.")


def _takes_text(annotation: Any) -> bool:
    """Whether an argument of this type may be a string (text, a time, an enum of strings), optional or not."""
    if get_origin(annotation) is Annotated:
        return _takes_text(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_takes_text(kind) for kind in get_args(annotation))
    return annotation is str or (get_origin(annotation) is Literal and all(isinstance(c, str)
                                                                           for c in get_args(annotation)))


class _TextAsSent(FuncMetadata):
    """The SDK's argument handling, but a string for an argument that takes text stays the string sent. The SDK
    parses a string holding JSON text (for clients that send lists and objects as strings) unless the argument is
    typed plain `str`: an optional text of "null" was dropped (a key "null" made a new task each time, a project
    filter "null" searched every project) and a lesson's content '{"retries": 3}' was refused as not a string."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        parsed = super().pre_parse_json(data)
        fields = self.arg_model.model_fields
        return {k: data[k] if k in fields and _takes_text(fields[k].annotation) else v for k, v in parsed.items()}


class _Server(MCPServer):
    """An MCPServer whose tools refuse arguments they do not take (the SDK would drop them silently)."""

    def __init__(self, *args: Any, owner_resolver: OwnerResolver, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owner_resolver = owner_resolver
        self.parameters: dict[str, frozenset[str]] = {}  # tool name -> the arguments it takes

    def add_parameters(self, name: str, fn: Callable[..., Any]) -> None:
        self.parameters[name] = frozenset(p for p in inspect.signature(fn).parameters if p != "ctx")

    def keep_text_as_sent(self, name: str) -> None:
        """Give the registered tool `name` text arguments as sent (`_TextAsSent`)."""
        registered = self._tool_manager.get_tool(name)
        registered.fn_metadata = _TextAsSent(**dict(registered.fn_metadata))

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        takes = self.parameters.get(name)
        if takes is not None:
            if "owner_id" in arguments and not self._own(arguments["owner_id"], context):
                raise ToolError(OWNER_ID_REFUSED)
            unknown = sorted(set(arguments) - takes - {"owner_id"})
            if unknown:
                raise ToolError(f"unknown argument(s) {', '.join(map(repr, unknown))[:300]}: {name} takes "
                                f"{', '.join(sorted(takes)) or 'none'}. Remove them and call again.")
        token = GIVEN.set(frozenset(arguments))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:  # arguments of a wrong type or out of range: the field, not pydantic's report
            if isinstance(exc.__cause__, PydanticError) and not isinstance(exc, UnexpectedToolError):
                raise ToolError(f"Error executing tool {name}: {arguments_text(exc.__cause__)}") from exc.__cause__
            raise
        finally:
            GIVEN.reset(token)

    def _own(self, given: Any, context: Context | None) -> bool:
        """Whether `given` names the caller's own owner (tolerated, as over HTTP)."""
        try:
            headers = context.headers if context is not None else None
            return isinstance(given, str) and given == self.owner_resolver(headers)
        except Exception:  # no owner to compare with: the tool itself reports that
            return False


def build_server(memory: Memory, owner_resolver: OwnerResolver) -> MCPServer:
    """An MCP server with the `mem.*` tools over one `Memory`."""
    server = _Server("memory-pipelines", instructions=INSTRUCTIONS, version="0.1.0",
                     owner_resolver=owner_resolver)

    def tool(*, name: str, description: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            server.add_parameters(name, fn)
            registered = server.tool(name=name, description=description)(fn)
            server.keep_text_as_sent(name)
            return registered

        return register

    def owner_of(ctx: Context) -> str:
        try:
            return owner_resolver(ctx.headers)
        except PermissionError as exc:
            raise ToolError(str(exc)) from None

    @tool(
        name="mem.ingest_memory",
        description=(
            "Save one memory (a fact, decision, plan, result or lesson worth keeping across sessions). Give "
            "the content, its content_type and project_name (or project_key). The server chunks, embeds, "
            "summarises and tags it and checks for an older memory on the same topic. " + CONTENT_TYPES_TEXT
            + " Returns status: 'created' (new id), 'updated' (an older memory on the same topic was "
            "replaced; its old version is kept) or 'skipped' (already known; id of the existing memory)."
        ),
    )
    def ingest_tool(
        ctx: Context,
        content: Annotated[str, Field(min_length=1, max_length=MAX_CONTENT,
                                      description="The memory text, any language, Markdown welcome."), Text],
        content_type: Annotated[ContentType, Field(description="One of the five content types.")],
        project_name: Annotated[str | None, Field(max_length=MAX_NAME, description=(
            "Human project name, e.g. 'agent-mem'. Required unless project_key is given.")), Text] = None,
        project_key: Annotated[str | None, Field(max_length=MAX_NAME, description=(
            "Stable project id across machines; default derived from project_name.")), Text] = None,
        machine_name: Annotated[str | None, Field(max_length=MAX_PATH, description="Where it was written."),
                                Text] = None,
        project_path: Annotated[str | None, Field(max_length=MAX_PATH, description="Local path (source only)."),
                                Text] = None,
        ts: Annotated[Ts | None, Field(description="Unix seconds, from 2000-01-01 to one day from now; "
                                       "default now.")] = None,
        speaker: Annotated[OptName, Field(description="Who said or wrote it.")] = None,
        session: Annotated[OptName, Field(description="The conversation it is a turn of: indexed with the turn "
                                          "before it; search lifts its neighbouring turns.")] = None,
    ) -> dict[str, Any]:
        fields = {k: v for k, v in locals().items() if k in MEMORY_FIELDS}  # the arguments above, named as stored
        owner = owner_of(ctx)
        return _call(lambda: memory.ingest(owner, **fields).as_dict())

    @tool(
        name="mem.search",
        description=(
            "STEP 1 of recall: search long-term memory. Returns matches with id, snippet (at most 200 "
            "characters), content_type, project and score - NOT the full content. Then call mem.get with the "
            "ids you need. query: what you are looking for, any language (Chinese and English find each "
            "other). project_key / project_name: only that project (omit to search all projects). scope: "
            "'all' or one content type (requirement | plan | development | testing | insight). limit: 1-100. "
            "exclude_session: the conversation you are in; its memories are left out."
        ),
    )
    def search_tool(
        ctx: Context,
        query: QueryArg,
        project_key: ProjectKeyArg = None,
        project_name: ProjectNameArg = None,
        scope: Annotated[Scope, Field(description="'all' or one content type.")] = "all",
        limit: SearchLimit = 20,
        exclude_session: SessionArg = None,
    ) -> dict[str, Any]:
        owner = owner_of(ctx)
        return _call(memory.find, owner, query, project_key=project_key, project_name=project_name,
                     scope=scope, limit=limit, exclude_session=exclude_session)

    @tool(
        name="mem.get",
        description=(
            "STEP 2 of recall: the full content of memories by id. ids: the ids from mem.search (1-100). Ids "
            "that do not exist (or are not yours) are reported as not found."
        ),
    )
    def get_tool(
        ctx: Context,
        ids: Annotated[list[Annotated[str, Field(min_length=1, max_length=MAX_ID), Text]],
                       Field(min_length=1, max_length=MAX_IDS, description="Memory ids from mem.search.")],
    ) -> dict[str, Any]:
        owner = owner_of(ctx)
        return _call(memory.get, owner, ids)

    @tool(
        name="mem.timeline",
        description=(
            "Memories in time order (oldest first), a page at a time: what happened in a project and "
            "when. project_key or project_name: one project (omit for all). since / until: ISO 8601 times "
            "(UTC if no zone) or whole Unix seconds. content_type: one of the five types. limit: 1-200. "
            "cursor: the next_cursor of the previous page."
        ),
    )
    def timeline_tool(
        ctx: Context,
        project_key: ProjectKeyArg = None,
        project_name: ProjectNameArg = None,
        since: Annotated[Instant | None, Field(description="Only memories at or after this time.")] = None,
        until: Annotated[Instant | None, Field(description="Only memories before this time.")] = None,
        content_type: Annotated[ContentType | None, Field(description="Only this content type.")] = None,
        limit: TimelineLimit = 50,
        cursor: Annotated[str | None, Field(max_length=500, description="next_cursor of the previous page."),
                          Text] = None,
    ) -> dict[str, Any]:
        owner = owner_of(ctx)
        return _call(memory.timeline, owner, project_key=project_key, project_name=project_name,
                     since=since, until=until, content_type=content_type, limit=limit,
                     cursor=cursor)

    @tool(
        name="mem.list_projects",
        description="Your projects (project_key, project_name, machine, path, memory count, last update).",
    )
    def list_projects_tool(ctx: Context) -> dict[str, Any]:
        owner = owner_of(ctx)
        return _call(lambda: {"projects": memory.projects(owner)})

    @tool(
        name="mem.context",
        description=(
            "One ready-to-use memory context block for a task, within token_budget tokens: relevant tasks, "
            "learnings, capabilities and memories, recent events and active goals, scored and de-duplicated. "
            "query: the task or question. mode: plan | execute | debug | chat (what the context is for). "
            f"token_budget: {MIN_BUDGET}-{MAX_BUDGET} (default {DEFAULT_BUDGET}). Returns block (the text to "
            "use), items (what was included and why; mem.detail opens any of their ids) and retrieval_id. "
            "exclude_session: the conversation you are in (the session its turns were written with): its "
            "memories are left out, as you hold them already."
        ),
    )
    def context_tool(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY, description="The task or question."),
                         Text],
        mode: Annotated[ContextMode, Field(description="What it is for.")]
        = "execute",
        token_budget: TokenBudget = DEFAULT_BUDGET,
        exclude_session: SessionArg = None,
    ) -> dict[str, Any]:
        owner = owner_of(ctx)
        return _call(lambda: memory.context(owner, query, mode=mode, token_budget=token_budget,
                                            exclude_session=exclude_session).as_dict())

    @tool(
        name="mem.detail",
        description=(
            "The full record of one of your items by id: a task, learning, capability, memory, event or goal, e.g. "
            "an id from mem.context's items or mem.search. Returns id, level (the item's source; okr for a goal), "
            "title, description (the full text), status, metadata and created_at. An id that is not yours, or "
            "unknown, is 'not found'."
        ),
    )
    def detail_tool(
        ctx: Context,
        id: Annotated[str, Field(min_length=1, max_length=MAX_ID, description="The item's id."),  # noqa: A002
                      Text],
    ) -> dict[str, Any]:
        owner = owner_of(ctx)
        return _call(memory.detail, owner, id)

    @tool(
        name="mem.feedback",
        description=(
            "After answering with a mem.context block: which of its items you used. retrieval_id: from "
            "mem.context. used_ids: ids of the items you used (its other items are marked unused). Replaces any "
            "earlier marks of that build, implicit ones included. Returns how many items are marked used."
        ),
    )
    def feedback_tool(
        ctx: Context,
        retrieval_id: RetrievalIdArg,
        used_ids: Annotated[list[Annotated[str, Field(min_length=1, max_length=MAX_ID), Text]],
                            Field(max_length=500, description="Ids of the items you used.")],
    ) -> dict[str, Any]:
        owner = owner_of(ctx)
        return _call(lambda: {"retrieval_id": canonical_uuid(retrieval_id),
                              "marked": memory.feedback(owner, retrieval_id, used_ids)})

    @tool(
        name="mem.implicit_feedback",
        description=(
            "After answering with a mem.context block, when you do not name items: post what you finally "
            "produced (answer, summary, diff or tool calls, as text; at most "
            f"{MAX_OUTPUT:,} characters) with the build's retrieval_id. The items you demonstrably used "
            "(semantic or lexical overlap above a calibrated threshold) are marked used, with the evidence. "
            "Explicit feedback (mem.feedback) wins; posting twice marks nothing twice."
        ),
    )
    def implicit_feedback_tool(
        ctx: Context,
        retrieval_id: RetrievalIdArg,
        output: Annotated[Output, Field(description="What you produced, as text.")],
    ) -> dict[str, Any]:
        owner = owner_of(ctx)
        return _call(memory.implicit_feedback, owner, retrieval_id, output)

    add_item_tools(server, memory, tool, owner_of, _call)
    @tool(
        name="mem.forget",
        description=(
            "Forget one of your items for good: a memory (with its versions), task, learning, capability, goal "
            "or event. source: which kind. id: its id (from mem.search, mem.get or mem.context), or the key you "
            "wrote it with. Afterwards no search, get, timeline or context returns any of it. An id that is not "
            "yours, unknown or already forgotten is 'not found' and nothing is removed. Returns the rows removed per "
            "table; its retrieval_candidates counts retrieval-log rows scrubbed of the item (kept), not removed."
        ),
    )
    def forget_tool(
        ctx: Context,
        source: Annotated[Forgettable, Field(description="The kind of item.")],
        id: Annotated[str, Field(min_length=1, max_length=MAX_ID, description="The item's id or key."),  # noqa: A002
                      Text],
    ) -> dict[str, Any]:
        owner = owner_of(ctx)
        key = bearer_key(ctx.headers)
        actor = (memory.key_id(key) if key else None) or "mcp"
        return _call(memory.forget, owner, source, id, actor=actor)

    return server


class BearerKeyMiddleware:
    """ASGI middleware: HTTP requests without a valid (known, unrevoked) bearer key get 401."""

    def __init__(self, app: Any, memory: Memory) -> None:
        self.app = app
        self.memory = memory

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        import anyio.to_thread
        from starlette.datastructures import Headers
        from starlette.responses import JSONResponse

        key = bearer_key(Headers(scope=scope))
        try:
            owner = await anyio.to_thread.run_sync(self.memory.owner_of_key, key)
        except psycopg.OperationalError:
            response = JSONResponse({"error": "the database is unavailable; retry later"}, status_code=503,
                                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            await response(scope, receive, send)
            return
        if owner is None:
            response = JSONResponse(
                {"error": "missing, unknown or revoked API key: send `Authorization: Bearer <key>` "
                          "(create one with `memory-pipelines keys create --owner <owner>`)"},
                status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        if scope.get("method") == "POST":
            receive = await refusing_repeated_members(scope, receive, send)
            if receive is None:
                return
        await self.app(scope, receive, send)


def build_http_app(memory: Memory, host: str = "127.0.0.1", path: str = "/mcp") -> Any:
    """The streamable-HTTP ASGI app (MCP endpoint at `path`), behind bearer-key authentication."""
    server = build_server(memory, key_owner(memory))
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    return BearerKeyMiddleware(app, memory)


def run_stdio(memory: Memory, owner: str) -> None:
    """Serve over stdin/stdout for one configured owner (a line naming a member twice refused, as over HTTP)."""
    import anyio

    from .mcp_stdio import serve_stdio

    anyio.run(serve_stdio, build_server(memory, config_owner(owner)))


def run_http(memory: Memory, host: str = "127.0.0.1", port: int = 8001) -> None:
    """Serve streamable HTTP at http://host:port/mcp."""
    import uvicorn

    uvicorn.run(build_http_app(memory, host=host), host=host, port=port, log_level="info", timeout_keep_alive=75,
                timeout_graceful_shutdown=memory.settings.stop_wait)  # both as `serve` (cli/online.py)
