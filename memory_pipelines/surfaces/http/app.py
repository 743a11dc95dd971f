"""`create_app(memory)`: the HTTP API. Endpoints validate requests, call the `Memory` face and encode the result.

The owner always comes from the API key (`Authorization: Bearer KEY`), never from the request. Library calls
block, so endpoints are plain `def` and FastAPI runs them in its threadpool.

Besides the JSON endpoints it serves, with nothing loaded from elsewhere: the API docs (`/docs` Swagger UI,
`/redoc` ReDoc; their scripts and styles ship in the `fastapi-offline` package) and the web view of memory
(`/ui/`, three static files in `surfaces/web`). Every endpoint documents its answer (`responses.py`, examples
included) and its errors (one error model).
"""


import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path as Path_
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles

from ...face import Memory
from ...infra.db import RETRY_AFTER_SECONDS
from ...infra.errors import ConfigError, NotFoundError, UserError, ValidationError
from ...store.ingest.worker import EmbedWorker
from ...vocabulary import (
    MAX_BODY_BYTES,
    MAX_BUILDS,
    MAX_HISTORY_DAYS,
    MAX_SEARCH_LIMIT,
    MAX_TIMELINE_LIMIT,
)
from .. import web
from ..encode import to_json
from . import models as m
from . import responses as r

log = logging.getLogger(__name__)

_bearer = HTTPBearer(auto_error=False, description="A key from `memory-pipelines keys create --owner O`.")

# Library field names that the API spells differently.
_FIELD_ALIASES = {"token_budget": "tokenBudget", "top_k": "topK"}



class Unauthorized(Exception):
    """No usable API key: missing, unknown or revoked."""


def _error(status: int, detail: Any, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"detail": detail, **extra}, status_code=status, headers=headers)


def _invalid(field: str, message: str, where: str = "body") -> JSONResponse:
    field = _FIELD_ALIASES.get(field, field)
    return _error(422, [{"loc": [where, field], "msg": message, "type": "value_error"}], field=field)


def _where(request: Request, field: str) -> str:
    """Where a field the library rejected came from, as FastAPI's own 422s say it: path, query or body."""
    if field in request.path_params:
        return "path"
    if field in request.query_params or request.method in ("GET", "HEAD", "DELETE"):
        return "query"
    return "body"


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _request_invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        # Only loc, msg and type: the rejected input is the caller's data and may not be JSON-encodable.
        errors = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")),
                   "type": str(e.get("type", ""))} for e in exc.errors()]
        loc = errors[0]["loc"] if errors else ["body"]
        return _error(422, errors, field=".".join(loc[1:]) or loc[0])

    @app.exception_handler(ValidationError)
    async def _lib_invalid(req: Request, exc: ValidationError) -> JSONResponse:
        return _invalid(exc.field, exc.message, _where(req, _FIELD_ALIASES.get(exc.field, exc.field)))

    @app.exception_handler(NotFoundError)
    async def _not_found(_req: Request, exc: NotFoundError) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(ConfigError)
    async def _config(_req: Request, exc: ConfigError) -> JSONResponse:
        return _error(503, str(exc))

    @app.exception_handler(UserError)
    async def _user(_req: Request, exc: UserError) -> JSONResponse:
        return _error(400, str(exc))

    @app.exception_handler(Unauthorized)
    async def _unauthorized(_req: Request, exc: Unauthorized) -> JSONResponse:
        return _error(401, str(exc))

    @app.exception_handler(psycopg.OperationalError)  # psycopg_pool's PoolTimeout is one: no connection in time
    async def _db_down(_req: Request, exc: psycopg.OperationalError) -> JSONResponse:
        log.warning("database unavailable: %s", exc)
        response = _error(503, "the database is unavailable; retry later")
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response


def _same_owner(given: str | None, owner: str) -> None:
    if given is not None and given != owner:
        raise ValidationError("owner_id", "the owner comes from the API key; omit owner_id")


class _BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes")


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is a 413, before it is read whole.

    A declared Content-Length over the limit is refused at once; a streamed (chunked) body is counted as it
    arrives and refused when it passes the limit (FastAPI re-raises an HTTPException from reading the body).
    """

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _error(413, _BodyTooLarge(self.limit).detail)(scope, receive, send)
            return
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _BodyTooLarge(self.limit)
            return message

        await self.app(scope, counted, send)


_IDS = re.compile(m.IDS_PATTERN)


def _split_ids(raw: str) -> list[str]:
    if not _IDS.fullmatch(raw):
        raise ValidationError("ids", f"give 1 to {m.MAX_IDS} memory ids from /memories/search, comma separated, "
                                     f"in printable ASCII, at most {m.MAX_ID} characters each")
    return [p.strip() for p in raw.split(",") if p.strip()]  # the pattern bounds count, length and characters


def _owner_dependency(memory: Memory) -> Callable[..., str]:
    def current_owner(
        request: Request,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> str:
        if creds is None or not creds.credentials:
            raise Unauthorized("missing API key: send `Authorization: Bearer <key>`; create one with "
                               "`memory-pipelines keys create --owner <owner>`")
        owner = memory.owner_of_key(creds.credentials)
        if owner is None:
            raise Unauthorized("unknown or revoked API key")
        _same_owner(request.query_params.get("owner_id"), owner)
        return owner

    return current_owner


def _docs_assets() -> Path_ | None:
    """The folder of Swagger UI's and ReDoc's scripts and styles from the `fastapi-offline` package."""
    try:
        from importlib.resources import files

        folder = Path_(str(files("fastapi_offline") / "static"))
    except ModuleNotFoundError:
        return None
    needed = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
    return folder if all((folder / n).is_file() for n in needed) else None


# The docs pages may load from this server only (should a bundle still name another host, the browser refuses
# it). Their HTML starts the UI with an inline script.
_DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
             "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; "
             "base-uri 'none'; frame-ancestors 'none'")


def _redoc_bundle(path: Path_) -> bytes:
    """ReDoc's standalone bundle without its one outside load: the sidebar's "API docs by Redocly" logo comes
    from a CDN; given an empty data: URL instead, the image fails at once and ReDoc leaves it out."""
    return path.read_bytes().replace(b"https://cdn.redoc.ly/redoc/logo-mini.svg", b"data:,")


def _install_docs(app: FastAPI) -> None:
    """/docs and /redoc from files this server serves itself (no CDN), under /static/docs."""
    assets = _docs_assets()
    missing = PlainTextResponse("the offline API docs need the fastapi-offline package: "
                                "pip install 'memory-pipelines[api]'; /openapi.json is served", status_code=503)
    if assets is not None:
        redoc_js = _redoc_bundle(assets / "redoc.standalone.js")

        @app.get("/static/docs/redoc.standalone.js", include_in_schema=False)
        def redoc_bundle() -> Response:  # before the mount: this one path is served patched
            return Response(redoc_js, media_type="text/javascript; charset=utf-8",
                            headers={"Cache-Control": "public, max-age=3600"})

        app.mount("/static/docs", StaticFiles(directory=assets), name="docs-static")

    def page(request: Request, render: Callable[[str], HTMLResponse]) -> HTMLResponse:
        """A docs page rendered with the request's root path, loading nothing but this server's files."""
        if assets is None:
            return missing
        out = render(request.scope.get("root_path", ""))
        out.headers["Content-Security-Policy"] = _DOCS_CSP
        return out

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        return page(request, lambda root: get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} · API docs",
            swagger_js_url=f"{root}/static/docs/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/static/docs/swagger-ui.css",
            swagger_favicon_url=f"{root}/static/docs/favicon.png",
            swagger_ui_parameters={"persistAuthorization": True, "validatorUrl": None,
                                   "displayRequestDuration": True, "tryItOutEnabled": False},
        ))

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        return page(request, lambda root: get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} · ReDoc",
            redoc_js_url=f"{root}/static/docs/redoc.standalone.js",
            redoc_favicon_url=f"{root}/static/docs/favicon.png", with_google_fonts=False,
        ))


def _install_web_view(app: FastAPI) -> None:
    """The web view of memory at /ui/ (its data comes from the JSON endpoints, with the key)."""
    app.mount("/ui/static", StaticFiles(directory=web.STATIC_DIR), name="web-static")

    @app.get("/", include_in_schema=False)
    @app.get("/ui", include_in_schema=False)
    def ui_redirect(request: Request) -> RedirectResponse:
        return RedirectResponse(f"{request.scope.get('root_path', '')}/ui/")

    @app.get("/ui/", include_in_schema=False)
    def ui() -> FileResponse:
        return FileResponse(web.INDEX_HTML, media_type="text/html", headers={
            "Content-Security-Policy": web.CONTENT_SECURITY_POLICY, "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})


_DESCRIPTION = """Long-term memory for AI agents: progressive search (summary → detail → related), the agent-mem
memory centre (ingest, search → get, timeline, projects, versions), token-budgeted context with feedback, and the
retrieval log read back (recent builds, hit rates).

**Auth.** Every endpoint but `/health` needs `Authorization: Bearer <key>` (create one with
`memory-pipelines keys create --owner NAME`; in these docs: *Authorize*). The key decides the owner: an `owner_id`
that names another owner is a `422`, and an id of another owner answers exactly like one that does not exist.

**Errors.** One shape: `{"detail": ...}`; a `422` also names the rejected `field` and changes nothing. `401`:
no usable key. `404`: no such id for this owner. `413`: a body over """ + f"{MAX_BODY_BYTES:,}" + """ bytes.
`503`: the database is unreachable (retry after the `Retry-After` seconds).

**Web view.** [`/ui/`](/ui/): recent context builds with their items and used marks, hit rates, search."""


def create_app(memory: Memory, *, wait_ingest: bool = True) -> FastAPI:
    """The API over one `Memory` (its database, embedder and chat model). `wait_ingest` is the default of an
    ingest's `wait`; memories stored without waiting are embedded by the app's `EmbedWorker` (`app.state`)."""
    worker = EmbedWorker(memory)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not wait_ingest:
            worker.notify()  # memories queued before a restart
        yield
        await asyncio.to_thread(worker.stop)

    app = FastAPI(
        lifespan=lifespan,
        title="memory_pipelines",
        version="0.1.0",
        description=_DESCRIPTION,
        docs_url=None,
        redoc_url=None,
        openapi_tags=[
            {"name": "progressive search", "description": "Summary → detail → related over tasks, learnings, "
             "capabilities and memories (the progressive-search spec)."},
            {"name": "context", "description": "The token-budgeted context block, feedback on what was used, "
             "and the retrieval log read back."},
            {"name": "memory centre", "description": "agent-mem: write memories; search (snippets) → get (full "
             "content); timeline; projects; versions."},
            {"name": "ops", "description": "Health and the key's owner."},
        ],
    )
    app.state.embed_worker = worker
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)
    _install_error_handlers(app)
    _install_docs(app)
    _install_web_view(app)
    Owner = Annotated[str, Depends(_owner_dependency(memory))]
    read = r.errors()
    write = r.errors(r.BAD_REQUEST, r.TOO_LARGE)

    # -- ops -----------------------------------------------------------------------------------------------------
    @app.get("/health", tags=["ops"], summary="Database reachable, embedding model (no auth)",
             response_model=r.Health,
             responses={503: {"model": r.Health, "description": "The database does not answer."}})
    def health() -> JSONResponse:
        """Whether the database answers, and which embedding and chat models serve. Needs no key."""
        body = memory.health()
        if body["database"] == "ok":
            return JSONResponse(body)
        return JSONResponse(body, status_code=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    @app.get("/whoami", tags=["ops"], summary="The owner of the key", response_model=r.Owner, responses=read)
    def whoami(owner: Owner) -> JSONResponse:
        """The owner whose memory this key reads and writes (every other endpoint acts for this owner)."""
        return to_json({"owner": owner})

    # -- progressive search: summary → detail → related -----------------------------------------------------
    @app.post("/api/brain/memory/search", tags=["progressive search"], summary="Summary layer",
              response_model=r.Matches, responses=write)
    def memory_search(body: m.SearchRequest, owner: Owner) -> JSONResponse:
        """Search the owner's tasks, learnings, capabilities and memories; each match is a summary (id, level,
        title, similarity, preview). Take an id to the detail or the related layer.

        `mode`: `summary` (hybrid: vectors and BM25 keywords fused, the default), `hybrid`, `semantic` or
        `keyword`. When the embedding provider fails the answer comes from keywords and says so in `degraded`."""
        _same_owner(body.owner_id, owner)
        mode = "hybrid" if body.mode == "summary" else body.mode
        return to_json(memory.summary(owner, body.query, top_k=body.top_k, mode=mode))

    @app.get("/api/brain/memory/detail/{id}", tags=["progressive search"], summary="Detail layer",
             response_model=r.Detail, responses=r.errors(r.not_found("item", "no memory with id mem_3f9c")))
    def memory_detail(id: Annotated[m.ItemId, Path(description="An id from a search match.")],  # noqa: A002
                      owner: Owner) -> JSONResponse:
        """The full record of one item: its whole text, status (tasks), metadata and creation time."""
        return to_json(memory.detail(owner, id))

    @app.post("/api/brain/memory/search-related", tags=["progressive search"], summary="Related layer",
              response_model=r.Matches,
              responses=r.errors(r.BAD_REQUEST, r.TOO_LARGE, r.not_found("item", "no memory with id mem_3f9c")))
    def memory_related(body: m.RelatedRequest, owner: Owner) -> JSONResponse:
        """The neighbours of one item (by its stored vector and its words), best first. `base_id` must be an id
        of this owner, e.g. from a summary match; otherwise 404."""
        _same_owner(body.owner_id, owner)
        return to_json(memory.related(owner, body.base_id, top_k=body.top_k, exclude_self=body.exclude_self))

    # -- context -------------------------------------------------------------------------------------------
    @app.post("/api/brain/memory/context", tags=["context"], summary="Token-budgeted memory context",
              response_model=r.Context, responses=write)
    def memory_context(body: m.ContextRequest, owner: Owner) -> JSONResponse:
        """The block to put in the agent's prompt: candidates from tasks, learnings, capabilities, memories,
        recent events and the active goals (profile), scored `relevance × timeDecay × modeWeight`, diversified
        (MMR) and cut to `tokenBudget` real cl100k tokens. The build is logged: send `retrieval_id` back with
        feedback once the agent has answered."""
        _same_owner(body.owner_id, owner)
        return to_json(memory.context(owner, body.query, mode=body.mode, token_budget=body.token_budget))

    @app.post("/api/brain/memory/feedback", tags=["context"], summary="Mark which injected items were used",
              response_model=r.Feedback,
              responses=r.errors(r.BAD_REQUEST, r.TOO_LARGE,
                                 r.not_found("context build", "retrieval 7d1e2f3a-4b5c-4d6e-8f70-819a2b3c4d5e "
                                             "not found")))
    def memory_feedback(body: m.FeedbackRequest, owner: Owner) -> JSONResponse:
        """After the agent answered: which of the build's injected items it used. Sending feedback again
        replaces the marks. The marks feed the hit rates and the tuning of mode weights. `retrieval_id` comes
        from a context answer (an unknown one is a 404)."""
        _same_owner(body.owner_id, owner)
        marked = memory.feedback(owner, body.retrieval_id, list(body.used_ids))
        return to_json({"retrieval_id": body.retrieval_id, "marked": marked})

    @app.post("/api/brain/memory/feedback/implicit", tags=["context"],
              summary="Post what the agent produced; mark the injected items it used",
              response_model=r.ImplicitFeedback,
              responses=r.errors(r.BAD_REQUEST, r.TOO_LARGE,
                                 r.not_found("context build", "retrieval 7d1e2f3a-4b5c-4d6e-8f70-819a2b3c4d5e "
                                             "not found")))
    def memory_feedback_implicit(body: m.ImplicitFeedbackRequest, owner: Owner) -> JSONResponse:
        """After the agent answered, without naming items: its final `output` (answer, summary, diff or tool
        calls as text). Each injected item it demonstrably used (semantic or lexical overlap with the output
        above the calibrated threshold) is marked used, `used_by: implicit`, with the evidence logged. Explicit
        feedback wins (after it, this changes nothing); posting again marks nothing twice."""
        _same_owner(body.owner_id, owner)
        return to_json(memory.implicit_feedback(owner, body.retrieval_id, body.output))

    @app.get("/api/brain/memory/builds", tags=["context"], summary="Recent context builds, with used marks",
             response_model=r.Builds, responses=read)
    def memory_builds(
        owner: Owner,
        limit: Annotated[int, Query(ge=1, le=MAX_BUILDS, description="Builds per page.")] = 20,
        cursor: Annotated[m.Cursor | None, Query(description="next_cursor of the previous page")] = None,
    ) -> JSONResponse:
        """The owner's context builds, newest first: query, mode, token use, and the injected items in block
        order with each factor of their score and whether feedback marked them used."""
        return to_json(memory.builds(owner, limit=limit, cursor=cursor))

    @app.get("/api/brain/memory/builds/{retrieval_id}", tags=["context"],
             summary="One context build with every scored candidate", response_model=r.Build,
             responses=r.errors(r.not_found("context build", "retrieval 7d1e2f3a-4b5c-4d6e-8f70-819a2b3c4d5e "
                                            "not found")))
    def memory_build(retrieval_id: Annotated[m.ItemId, Path(description="A build's retrieval_id.")],
                     owner: Owner) -> JSONResponse:
        """One build with all its scored candidates by rank, injected or not (`mmr_rank` null: left out by MMR
        or the budget)."""
        return to_json(memory.build(owner, retrieval_id))

    @app.get("/api/brain/memory/hit-rates", tags=["context"], summary="Hit rates per day",
             response_model=r.HitRates, responses=read)
    def memory_hit_rates(
        owner: Owner,
        days: Annotated[int, Query(ge=1, le=MAX_HISTORY_DAYS, description="UTC days back, today included.")] = 30,
    ) -> JSONResponse:
        """Per UTC day: builds, builds with feedback, items injected into those and marked used, and the hit
        rate used / injected (null on a day without feedback); the same over the window and per source."""
        return to_json(memory.hit_rates(owner, days=days))

    # -- memory centre -------------------------------------------------------------------------------------
    @app.post("/ingest/memory", tags=["memory centre"], summary="Write a memory (chunked, embedded, judged)",
              response_model=r.Ingested, responses=write)
    def ingest(body: m.IngestRequest, owner: Owner) -> JSONResponse:
        """Store one memory in a project (`project_name` or a stable `project_key`; created on first use). The
        server chunks it (500 tokens, 50 overlap), embeds, summarises and tags it, and compares it with the most
        similar older memory: CREATE, KEEP_BOTH, REPLACE (the old version is kept) or SKIP. With `wait` false
        it answers once the memory is stored (DEFERRED) and does the embedding and the comparison in the
        background; GET /memories then shows the outcome (`duplicate_of` / `merged_into` when it was one)."""
        _same_owner(body.owner_id, owner)
        done = memory.ingest(owner, wait=wait_ingest if body.wait is None else body.wait, **body.memory_fields())
        if done.deferred:
            worker.notify()
        return to_json(done)

    @app.get("/memories/search", tags=["memory centre"], summary="Stage 1: snippets and ids",
             response_model=r.FoundList, responses=read)
    def memories_search(
        owner: Owner,
        query: Annotated[m.Query, Query(description="What to look for, any language.")],
        project_key: Annotated[m.Name | None, Query(description="Only this project (by key).")] = None,
        project_name: Annotated[m.Name | None, Query(description="Only this project (by name).")] = None,
        scope: Annotated[m.Scope, Query(description="all or one content type")] = "all",
        limit: Annotated[int, Query(ge=1, le=MAX_SEARCH_LIMIT)] = 20,
    ) -> JSONResponse:
        """The owner's best-matching memories as snippets (at most 200 characters around the best passage) and
        ids; then get the full content of the relevant ones with `GET /memories?ids=...`. An unknown project
        gives no results."""
        return to_json(memory.find(owner, query, project_key=project_key, project_name=project_name,
                                   scope=scope, limit=limit))

    @app.get("/memories/timeline", tags=["memory centre"], summary="Memories in time order, paged",
             response_model=r.Timeline, responses=read)
    def memories_timeline(
        owner: Owner,
        project_key: Annotated[m.Name | None, Query()] = None,
        project_name: Annotated[m.Name | None, Query()] = None,
        since: Annotated[m.Instant | None, Query(description="ISO 8601 (UTC if no zone) or whole Unix seconds")]
        = None,
        until: Annotated[m.Instant | None, Query(description="ISO 8601 (UTC if no zone) or whole Unix seconds")]
        = None,
        content_type: Annotated[m.ContentType | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_TIMELINE_LIMIT)] = 50,
        cursor: Annotated[m.Cursor | None, Query(description="next_cursor of the previous page")] = None,
    ) -> JSONResponse:
        """Active memories by `ts`, oldest first, `since` ≤ ts < `until` (naive times are UTC). Keyset-paged:
        pass `next_cursor` back as `cursor`."""
        return to_json(memory.timeline(owner, project_key=project_key, project_name=project_name,
                                       since=since, until=until, content_type=content_type,
                                       limit=limit, cursor=cursor))

    @app.get("/memories", tags=["memory centre"], summary="Stage 2: full content by ids",
             response_model=r.MemoryList, responses=read)
    def memories_get(
        owner: Owner,
        ids: Annotated[str, m.Documented(pattern=m.IDS_PATTERN), Query(min_length=1, max_length=m.IDS_CHARS,
                                  description="Comma-separated memory ids from /memories/search")],
    ) -> JSONResponse:
        """The full records, in the order asked (up to 100 ids). Ids this owner has no memory for are listed
        under `missing`, never an error."""
        return to_json(memory.get(owner, _split_ids(ids)))

    @app.get("/memories/{memory_id}/versions", tags=["memory centre"], summary="Replaced versions",
             response_model=r.Versions,
             responses=r.errors(r.not_found("memory", "no memory 'mem_3f9c0b6a1d2e4f5a6b7c'")))
    def memories_versions(memory_id: Annotated[m.ItemId, Path(description="A memory id.")],
                          owner: Owner) -> JSONResponse:
        """The earlier versions of one memory (kept when an ingest REPLACEd it), oldest first."""
        return to_json({"memory_id": memory_id, "versions": memory.versions(owner, memory_id)})

    @app.get("/projects", tags=["memory centre"], summary="The owner's projects",
             response_model=r.Projects, responses=read)
    def projects(owner: Owner) -> JSONResponse:
        """The owner's projects with their active memory counts, most recently updated first."""
        return to_json({"projects": memory.projects(owner)})

    return app
