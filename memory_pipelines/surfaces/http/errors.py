"""The API's one error shape: its models and documented answers (for the OpenAPI document), the handlers that
turn library and request errors into it, the body-size limit, and the JSON bodies that name a member twice.

Every error answer is `{"detail": ...}`; a 422 also names the rejected `field`, as the request spells it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import psycopg
from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from ...infra.db import RETRY_AFTER_SECONDS
from ...infra.errors import ConfigError, NotFoundError, UserError, ValidationError
from ...infra.json_members import RepeatedMemberError, loads_unique
from ...vocabulary import MAX_BODY_BYTES
from ..schema import our_words

log = logging.getLogger(__name__)

# Library field names that the API spells differently.
FIELD_ALIASES = {"token_budget": "tokenBudget", "top_k": "topK"}


class Unauthorized(Exception):
    """No usable API key: missing, unknown or revoked."""


# -- models ------------------------------------------------------------------------------------------------------

class ErrorItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    loc: list[str] = Field(description="Where the bad value is: `body`, `query` or `path`, then the field name.")
    msg: str = Field(description="What is wrong with it.")
    type: str = Field(description="A machine-readable kind, e.g. `value_error`, `missing`, `literal_error`.")


class Error(BaseModel):
    """Every error answer: `detail` says what went wrong; a 422 also names the offending `field`."""

    model_config = ConfigDict(extra="forbid",
                              json_schema_extra={"examples": [{"detail": "unknown or revoked API key"}]})

    detail: str | list[ErrorItem] = Field(description="A message (400, 401, 404, 413, 503), or the list of "
                                          "problems with the request (422).")
    field: str | None = Field(None, description="422 only: the request field that was rejected.")


class ValidationProblem(BaseModel):
    """A request the API rejected before doing anything: nothing was read or written."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "detail": [{"loc": ["body", "content_type"], "msg": "Input should be 'requirement', 'plan', "
                    "'development', 'testing' or 'insight'", "type": "literal_error"}],
        "field": "content_type",
    }]})

    detail: list[ErrorItem]
    field: str = Field(description="The offending field, as the request spells it (e.g. `topK`, `ids`).")


# -- documented error answers -------------------------------------------------------------------------------------

def _documented(description: str, example: str) -> dict[str, Any]:
    return {"model": Error, "description": description,
            "content": {"application/json": {"example": {"detail": example}}}}


UNAUTHORIZED = {401: _documented("Missing, unknown or revoked API key (`Authorization: Bearer <key>`).",
                                 "unknown or revoked API key")}
INVALID = {422: {"model": ValidationProblem, "description": "Bad input; `field` names it. Nothing changed."}}
UNAVAILABLE = {503: _documented("The database is unreachable (retry later), or the server is misconfigured.",
                                "the database is unavailable; retry later")}
BAD_REQUEST = {400: _documented("A request the library refused for a reason other than one field.",
                                "the request cannot be served")}
BUSY = {429: _documented("As many of these as the server runs at once are running (retry after the `Retry-After` "
                         "seconds).", "4 exports are downloading already; retry later")}
TOO_LARGE = {413: _documented(f"The request body is larger than {MAX_BODY_BYTES} bytes.",
                              f"the request body is larger than {MAX_BODY_BYTES} bytes")}


def not_found(what: str, example: str) -> dict[int, dict[str, Any]]:
    return {404: _documented(f"No {what} of this owner (one of another owner answers exactly the same).", example)}


def errors(*groups: dict[int, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    """The documented error answers of an endpoint: 401, 422 and 503 always, plus the given ones (a given 422 says
    more than the generic one)."""
    out: dict[int | str, dict[str, Any]] = {}
    for group in (UNAUTHORIZED, INVALID, UNAVAILABLE, *groups):
        out.update(group)
    return dict(sorted(out.items(), key=lambda kv: str(kv[0])))


READ = errors()
"""A GET's error answers."""

WRITE = errors(BAD_REQUEST, TOO_LARGE)
"""A POST's error answers."""


def json_errors(responses: dict[int | str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    """`responses` with each model named as JSON content: what a route whose own answer is not JSON (a stream)
    documents, since FastAPI would file the models under the route's media type."""
    out: dict[int | str, dict[str, Any]] = {}
    for code, spec in responses.items():
        spec = dict(spec)
        model = spec.pop("model", None)
        if model is not None:
            content = {k: dict(v) for k, v in spec.get("content", {}).items()}
            content.setdefault("application/json", {})["schema"] = {"$ref": f"#/components/schemas/{model.__name__}"}
            spec["content"] = content
        out[code] = spec
    return out


# -- handlers ------------------------------------------------------------------------------------------------------

def error(status: int, detail: Any, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"detail": detail, **extra}, status_code=status, headers=headers)


def _invalid(field: str, message: str, where: str = "body") -> JSONResponse:
    field = FIELD_ALIASES.get(field, field)
    return error(422, [{"loc": [where, field], "msg": message, "type": "value_error"}], field=field)


def _where(request: Request, field: str) -> str:
    """Where a field the library rejected came from, as FastAPI's own 422s say it: path, query or body."""
    if field in request.path_params:
        return "path"
    if field in request.query_params or request.method in ("GET", "HEAD", "DELETE"):
        return "query"
    return "body"


_STATUS: dict[type[Exception], int] = {NotFoundError: 404, ConfigError: 503, UserError: 400, Unauthorized: 401}
"""The answer to a library error (the most specific class decides: a ValidationError is a UserError)."""


def _answer(status: int) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handle(_req: Request, exc: Exception) -> JSONResponse:
        return error(status, str(exc))

    return handle


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed(request: Request) -> list[str]:
    """Every method some route takes on this path. Starlette names only the first route whose path matches:
    `/api/learnings/batch` (POST) answered an OPTIONS with `Allow: DELETE`, from `/api/learnings/{ref}`."""
    routes = request.app.router.routes
    return [m for m in _METHODS
            if any(r.matches({**request.scope, "method": m})[0] is Match.FULL for r in routes)]


def spelled(loc: Sequence[str | int]) -> str:
    """A 422's `field` from its `loc`, as the library names a batch item's field: `items[1].metadata.k` (the
    place, `body`/`query`/`path`, left out but when it is all there is)."""
    parts = list(loc[1:]) or list(loc[:1])
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _unparsed(e: dict[str, Any]) -> dict[str, Any]:
    """A body that is not JSON names the body, not the character offset FastAPI puts where a field would be."""
    why = (e.get("ctx") or {}).get("error")
    return {"loc": ["body"], "msg": f"is not valid JSON{f' ({why})' if why else ''}", "type": "json_invalid"}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _request_invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        # Only loc, msg and type: the rejected input is the caller's data and may not be JSON-encodable.
        # our validators' words as the API's other checks answer them, without pydantic's prefix
        errors = [_unparsed(e) if e.get("type") == "json_invalid" else
                  {"loc": [str(p) for p in e.get("loc", ())],
                   "msg": our_words(e.get("msg", "")),
                   "type": str(e.get("type", ""))} for e in exc.errors()]
        raw = exc.errors()
        loc = raw[0].get("loc", ("body",)) if raw and raw[0].get("type") != "json_invalid" else (
            errors[0]["loc"] if errors else ["body"])  # list positions stay ints: `items[1].type`
        return error(422, errors, field=spelled(loc))

    @app.exception_handler(RepeatedMember)
    async def _repeated(_req: Request, exc: RepeatedMember) -> JSONResponse:
        return error(422, exc.detail, field=spelled(exc.loc))

    @app.exception_handler(ValidationError)
    async def _lib_invalid(req: Request, exc: ValidationError) -> JSONResponse:
        return _invalid(exc.field, exc.message, _where(req, FIELD_ALIASES.get(exc.field, exc.field)))

    for kind, status in _STATUS.items():
        app.add_exception_handler(kind, _answer(status))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(req: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(_allowed(req))}
        return await http_exception_handler(req, exc)  # FastAPI's own answer otherwise

    @app.exception_handler(psycopg.OperationalError)  # psycopg_pool's PoolTimeout is one: no connection in time
    async def _db_down(_req: Request, exc: psycopg.OperationalError) -> JSONResponse:
        log.warning("database unavailable: %s", exc)
        response = error(503, "the database is unavailable; retry later")
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response


# -- body size -------------------------------------------------------------------------------------------------------

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
            await error(413, _BodyTooLarge(self.limit).detail)(scope, receive, send)
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


# -- repeated members ------------------------------------------------------------------------------------------------

class _Marked(dict):
    """An object that names `member` twice, as the second parse of a refused body returns it."""

    member: str


def _marked(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` of the second parse: an object naming a member twice comes back marked with it."""
    seen: set[str] = set()
    for name, _value in pairs:
        if name in seen:
            marked = _Marked(pairs)
            marked.member = name
            return marked
        seen.add(name)
    return dict(pairs)


def _repeated_at(value: Any) -> list[str | int]:
    """The path to the first member named twice, in document order (without a recursion: a body may nest deep);
    list positions as ints."""
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _Marked):
            return [*path, node.member]
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        stack.extend(reversed([([*path, k], v) for k, v in children]))
    raise AssertionError("no repeated member")  # only called when the first parse found one


class RepeatedMember(HTTPException):
    """A JSON body naming a member twice: a 422 at its place (an HTTPException, which FastAPI lets out of reading
    the body; any other error there is its generic 400)."""

    def __init__(self, loc: list[str | int]) -> None:
        self.loc = loc
        message = f"{loc[-1]!r} is named twice in one object; send each member once"
        super().__init__(422, [{"loc": [str(p) for p in loc], "msg": message, "type": "json_invalid"}])


class _StrictJsonRequest(Request):
    async def json(self) -> Any:
        """The body parsed once, as Starlette does, but refused when an object names a member twice."""
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = loads_unique(body)
            except RepeatedMemberError:  # parsed a second time only when refused, to say where
                raise RepeatedMember(["body", *_repeated_at(json.loads(body, object_pairs_hook=_marked))]) from None
        return self._json


class StrictJsonRoute(APIRoute):
    """The route class of every router: its body is parsed by `_StrictJsonRequest` (FastAPI's own place to change
    how a request is read: a middleware would have to parse each body a second time)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes = _query_names(self.dependant) | {"owner_id"}

        async def strict(request: Request) -> Response:
            if request.method not in _READS:  # a guessed `dry_run` on a change would change for real
                for name in request.query_params:
                    if name not in takes:
                        given = ", ".join(sorted(takes - {"owner_id"})) or "none"
                        raise ValidationError(name, f"is not a parameter of {request.method} {self.path} (it takes"
                                                    f" {given}): nothing was changed")
            return await handler(_StrictJsonRequest(request.scope, request.receive))

        return strict


_READS = frozenset({"GET", "HEAD", "OPTIONS"})


def _query_names(dependant: Any) -> set[str]:
    """The query parameters a route reads, its dependencies' included."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names
