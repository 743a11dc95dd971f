"""`create_app(memory)`: the HTTP API. Endpoints validate requests, call the `Memory` face and encode the result.

The owner always comes from the API key (`Authorization: Bearer KEY`), never from the request. Library calls
block, so endpoints are plain `def` and FastAPI runs them in its threadpool.
"""


import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ...face import Memory
from ...infra.errors import ConfigError, NotFoundError, UserError, ValidationError
from ...vocabulary import MAX_SEARCH_LIMIT, MAX_TIMELINE_LIMIT
from ..encode import to_json
from . import models as m

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


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _request_invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        # Only loc, msg and type: the rejected input is the caller's data and may not be JSON-encodable.
        errors = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")),
                   "type": str(e.get("type", ""))} for e in exc.errors()]
        loc = errors[0]["loc"] if errors else ["body"]
        return _error(422, errors, field=".".join(loc[1:]) or loc[0])

    @app.exception_handler(ValidationError)
    async def _lib_invalid(_req: Request, exc: ValidationError) -> JSONResponse:
        return _invalid(exc.field, exc.message)

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

    @app.exception_handler(psycopg.OperationalError)
    async def _db_down(_req: Request, exc: psycopg.OperationalError) -> JSONResponse:
        log.warning("database unavailable: %s", exc)
        return _error(503, "the database is unavailable; retry later")


def _same_owner(given: str | None, owner: str) -> None:
    if given is not None and given != owner:
        raise ValidationError("owner_id", "the owner comes from the API key; omit owner_id")


def _utc(value: datetime | None) -> datetime | None:
    """Naive times are read as UTC."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _split_ids(raw: str) -> list[str]:
    ids = list(dict.fromkeys(p.strip() for p in raw.split(",") if p.strip()))
    if not ids:
        raise ValidationError("ids", "give one or more memory ids, comma separated (from /memories/search)")
    if len(ids) > m.MAX_IDS:
        raise ValidationError("ids", f"at most {m.MAX_IDS} ids per request")
    for i in ids:
        if len(i) > m.MAX_ID:
            raise ValidationError("ids", f"an id is at most {m.MAX_ID} characters")
        try:
            m.storable(i)
        except ValueError as exc:
            raise ValidationError("ids", str(exc)) from None
    return ids


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


def create_app(memory: Memory) -> FastAPI:
    """The API over one `Memory` (its database, embedder and chat model)."""
    app = FastAPI(
        title="memory_pipelines",
        version="0.1.0",
        description="Long-term memory for AI agents: progressive search (summary → detail → related), the "
        "agent-mem memory centre (ingest, search → get, timeline, projects, versions) and token-budgeted "
        "context. Every endpoint but /health needs `Authorization: Bearer <key>`; the key decides the owner.",
    )
    _install_error_handlers(app)
    Owner = Annotated[str, Depends(_owner_dependency(memory))]

    # -- health --------------------------------------------------------------------------------------------
    @app.get("/health", tags=["ops"], summary="Database reachable, embedding model (no auth)")
    def health() -> JSONResponse:
        body = memory.health()
        return JSONResponse(body, status_code=200 if body["database"] == "ok" else 503)

    # -- progressive search: summary → detail → related -----------------------------------------------------
    @app.post("/api/brain/memory/search", tags=["progressive search"], summary="Summary layer")
    def memory_search(body: m.SearchRequest, owner: Owner) -> JSONResponse:
        _same_owner(body.owner_id, owner)
        mode = "hybrid" if body.mode == "summary" else body.mode
        return to_json(memory.summary(owner, body.query, top_k=body.top_k, mode=mode))

    @app.get("/api/brain/memory/detail/{id}", tags=["progressive search"], summary="Detail layer")
    def memory_detail(id: Annotated[m.ItemId, Path(description="An id from a search match.")],  # noqa: A002
                      owner: Owner) -> JSONResponse:
        return to_json(memory.detail(owner, id))

    @app.post("/api/brain/memory/search-related", tags=["progressive search"], summary="Related layer")
    def memory_related(body: m.RelatedRequest, owner: Owner) -> JSONResponse:
        _same_owner(body.owner_id, owner)
        return to_json(memory.related(owner, body.base_id, top_k=body.top_k, exclude_self=body.exclude_self))

    # -- context -------------------------------------------------------------------------------------------
    @app.post("/api/brain/memory/context", tags=["context"], summary="Token-budgeted memory context")
    def memory_context(body: m.ContextRequest, owner: Owner) -> JSONResponse:
        _same_owner(body.owner_id, owner)
        return to_json(memory.context(owner, body.query, mode=body.mode, token_budget=body.token_budget))

    @app.post("/api/brain/memory/feedback", tags=["context"], summary="Mark which injected items were used")
    def memory_feedback(body: m.FeedbackRequest, owner: Owner) -> JSONResponse:
        _same_owner(body.owner_id, owner)
        marked = memory.feedback(owner, body.retrieval_id, list(body.used_ids))
        return to_json({"retrieval_id": body.retrieval_id, "marked": marked})

    # -- memory centre -------------------------------------------------------------------------------------
    @app.post("/ingest/memory", tags=["memory centre"], summary="Write a memory (chunked, embedded, judged)")
    def ingest(body: m.IngestRequest, owner: Owner) -> JSONResponse:
        _same_owner(body.owner_id, owner)
        return to_json(memory.ingest(
            owner, content=body.content, content_type=body.content_type, project_name=body.project_name,
            project_key=body.project_key, machine_name=body.machine_name, project_path=body.project_path,
            ts=body.ts, speaker=body.speaker,
        ))

    @app.get("/memories/search", tags=["memory centre"], summary="Stage 1: snippets and ids")
    def memories_search(
        owner: Owner,
        query: Annotated[m.Query, Query(description="What to look for, any language.")],
        project_key: Annotated[m.Name | None, Query()] = None,
        project_name: Annotated[m.Name | None, Query()] = None,
        scope: Annotated[m.Scope, Query(description="all or one content type")] = "all",
        limit: Annotated[int, Query(ge=1, le=MAX_SEARCH_LIMIT)] = 20,
    ) -> JSONResponse:
        return to_json(memory.find(owner, query, project_key=project_key, project_name=project_name,
                                   scope=scope, limit=limit))

    @app.get("/memories/timeline", tags=["memory centre"], summary="Memories in time order, paged")
    def memories_timeline(
        owner: Owner,
        project_key: Annotated[m.Name | None, Query()] = None,
        project_name: Annotated[m.Name | None, Query()] = None,
        since: Annotated[datetime | None, Query(description="ISO 8601 or Unix seconds")] = None,
        until: Annotated[datetime | None, Query(description="ISO 8601 or Unix seconds")] = None,
        content_type: Annotated[m.ContentType | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_TIMELINE_LIMIT)] = 50,
        cursor: Annotated[m.Cursor | None, Query(description="next_cursor of the previous page")] = None,
    ) -> JSONResponse:
        return to_json(memory.timeline(owner, project_key=project_key, project_name=project_name,
                                       since=_utc(since), until=_utc(until), content_type=content_type,
                                       limit=limit, cursor=cursor))

    @app.get("/memories", tags=["memory centre"], summary="Stage 2: full content by ids")
    def memories_get(
        owner: Owner,
        ids: Annotated[str, Query(min_length=1, max_length=m.MAX_IDS * (m.MAX_ID + 1),
                                  description="Comma-separated memory ids from /memories/search")],
    ) -> JSONResponse:
        return to_json(memory.get(owner, _split_ids(ids)))

    @app.get("/memories/{memory_id}/versions", tags=["memory centre"], summary="Replaced versions")
    def memories_versions(memory_id: Annotated[m.ItemId, Path()], owner: Owner) -> JSONResponse:
        return to_json({"memory_id": memory_id, "versions": memory.versions(owner, memory_id)})

    @app.get("/projects", tags=["memory centre"], summary="The owner's projects")
    def projects(owner: Owner) -> JSONResponse:
        return to_json({"projects": memory.projects(owner)})

    return app
