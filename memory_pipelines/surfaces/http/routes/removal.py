"""Ways out: forget an item of any source, drop a project, erase the key's owner, read the audit trail, export.

Every removal is scoped to the key's owner: an id of another owner is a 404 exactly like an unknown one (and
one already forgotten), and nothing is removed. The audit trail names the key that removed (its id), never the
removed content. An erase removes the key's own owner only, and only with `confirm` repeating the owner id.
The export streams the key's owner's items and memories as JSON Lines, which `import` reads back.
"""

# No `from __future__ import annotations`: the per-source routes' parameter types are built in a loop, and FastAPI
# reads them from the function's own annotations.
import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Generator, Iterator
from itertools import chain, islice
from typing import Annotated, Any

import psycopg
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.background import BackgroundTask
from starlette.types import Message, Receive, Scope, Send

from .... import vocabulary
from ....store.removal.audit import MAX_AUDIT_LIMIT
from ....vocabulary import a_source
from ...encode import to_json
from .. import models as m
from ..deps import MemoryDep, Owner
from ..errors import BUSY, READ, StrictJsonRoute, error, errors, json_errors, not_found

router = APIRouter(tags=["ways out"], route_class=StrictJsonRoute)
log = logging.getLogger(__name__)

EXPORT_CHUNK_LINES = 1_000
EXPORT_DOWNLOADS = 4
"""Downloads of an export at once in this process, each on a database connection of its own."""
EXPORT_BUSY_RETRY_SECONDS = 30
_downloads = threading.BoundedSemaphore(EXPORT_DOWNLOADS)

ITEM_PATHS = {"task": "tasks", "learning": "learnings", "capability": "capabilities", "goal": "goals",
              "event": "events"}
_ID = "5b0e6f2c-3c1d-4d1e-9a8f-2b7c6d5e4f30"
_MEM = "mem_3f9c0b6a1d2e4f5a6b7c"
_WHEN = "2026-01-20T09:12:25.120000+00:00"


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


Counts = dict[str, int]


class Forgotten(_Out):
    """What a forget removed: rows per table (the item, its keyword entries, fragments, versions, arbitration
    records; `retrieval_candidates` counts log rows scrubbed of it, kept, not deleted; `contexts_rewritten` later
    conversation turns indexed with it)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"source": "memory", "id": _MEM, "removed": {"memories": 1, "fragments": 2, "keyword_docs": 2,
                                                      "memory_versions": 1, "memory_arbitrations": 2},
         "audit_id": 42}]})

    source: str
    id: str
    removed: Counts
    audit_id: int


class ProjectDropped(_Out):
    """What dropping a project removed, per table (`retrieval_candidates`: log rows scrubbed, kept, not deleted)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"project_key": "web-app", "removed": {"projects": 1, "memories": 12, "fragments": 15,
                                               "keyword_docs": 15, "memory_arbitrations": 12}, "audit_id": 43}]})

    project_key: str
    removed: Counts
    audit_id: int


class Erased(_Out):
    """What an erase removed per table, or with `dry_run` what it would remove (then nothing was)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"owner": "alice", "dry_run": False, "counts": {"tasks": 120, "api_keys": 2, "retrievals": 300},
         "indexes": [], "swept": {}, "audit_id": 44},
        {"owner": "alice", "dry_run": True, "counts": {"tasks": 120, "api_keys": 2, "retrievals": 300},
         "indexes": [], "swept": {}, "audit_id": None}]})

    owner: str
    dry_run: bool = Field(description="true: a count of what would go; nothing was removed.")
    counts: Counts = Field(description="Rows removed (or that would be) per table.")
    indexes: list[str] = Field(description="The owner's own vector graphs dropped (or that would be).")
    swept: Counts = Field(description="Keyword statistics a concurrent refresh wrote back, deleted after the erase.")
    audit_id: int | None = Field(description="The audit row recording the erase; null for a dry run and for an erase"
                                           " that found nothing of the owner (nothing is recorded then).")


class Removal(_Out):
    id: int
    actor: str = Field(description="Who removed: an API key's id, 'cli' (an operator) or 'mcp' (stdio).")
    action: str = Field(description="forget, drop_project or erase.")
    source: str | None = Field(description="The item's source, 'project' for a project, null for an erase.")
    item_id: str | None = Field(description="The item's id, or the project key; null for an erase.")
    counts: Counts = Field(description="Rows removed per table (never the removed content).")
    at: str


class Removals(_Out):
    """The owner's removals, newest first."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"removals": [{"id": 42, "actor": "9b8c7d6e-5f4a-4b3c-8d2e-1f0a9b8c7d6e", "action": "forget",
                       "source": "memory", "item_id": _MEM, "counts": {"memories": 1, "fragments": 2}, "at": _WHEN}],
         "next_cursor": None}]})

    removals: list[Removal]
    next_cursor: str | None


def actor(request: Request, memory: MemoryDep) -> str:
    """The id of the request's key (resolved already by `Owner`): who the audit trail names."""
    _, _, key = (request.headers.get("authorization") or "").partition(" ")
    return memory.key_id(key.strip()) or "api"


def _forget_route(source: str, plural: str) -> None:
    @router.delete(f"/api/{plural}/{{ref:path}}", summary=f"Forget {a_source(source)}", response_model=Forgotten,
                   responses=errors(not_found(source, f"no {source} '{_ID}'")), name=f"forget_{source}")
    def forget_item(ref: Annotated[m.ItemId, Path(description=f"The {source}'s id or your key of it.")],
                    owner: Owner, memory: MemoryDep, request: Request) -> JSONResponse:
        return to_json(memory.forget(owner, source, ref, actor=actor(request, memory)))

    forget_item.__doc__ = (f"Forget one of your {plural} (by id, or by the key you wrote it with) with its keyword "
                           "entries; the retrieval log keeps its counts without it. A 404 for an unknown id, "
                           "another owner's, or one already forgotten: nothing is removed.")


for _source, _plural in ITEM_PATHS.items():
    _forget_route(_source, _plural)


@router.delete("/memories/{memory_id}", summary="Forget a memory", response_model=Forgotten,
               responses=errors(not_found("memory", f"no memory '{_MEM}'")))
def forget_memory(memory_id: Annotated[m.ItemId, Path(description="A memory id.")], owner: Owner,
                  memory: MemoryDep, request: Request) -> JSONResponse:
    """Forget one memory with its fragments, replaced versions and arbitration records, and the memories folded
    into it (duplicate_of / merged_into); a later turn of its conversation gets the context it would have had.
    Search, get, timeline, versions and the build history no longer show any of it."""
    return to_json(memory.forget(owner, "memory", memory_id, actor=actor(request, memory)))


@router.delete("/projects/{project_key:path}", summary="Drop a project with its memories",
               response_model=ProjectDropped, responses=errors(not_found("project", "no project 'web-app'")))
def drop_project(project_key: Annotated[m.Name, Path(description="A project key from GET /projects.")],
                 owner: Owner, memory: MemoryDep, request: Request) -> JSONResponse:
    """Drop one of your projects with all its memories (and theirs, as a forget removes them). Tasks naming the
    project key are another source and stay."""
    return to_json(memory.drop_project(owner, project_key, actor=actor(request, memory)))


@router.delete("/api/owner", summary="Erase everything of the key's owner", response_model=Erased,
               responses=READ)
def erase_owner(
    owner: Owner,
    memory: MemoryDep,
    request: Request,
    confirm: Annotated[m.Name | None, Query(description="The owner id again (GET /whoami): required unless dry_run."
                                            )] = None,
    dry_run: Annotated[bool, Query(description="Count what would go; remove nothing.")] = False,
) -> JSONResponse:
    """Remove every row of the key's owner in every table, her API keys included (this key stops working),
    in one transaction; the answer counts what went per table. Without `confirm` equal to the owner id it is a
    422 naming `confirm` and nothing is removed; `dry_run=true` counts what would go. The trail keeps one row:
    the record of the erase (counts only)."""
    out: dict[str, Any] = memory.erase(owner, confirm=confirm, dry_run=dry_run, actor=actor(request, memory))
    return to_json(out)


class ExportedRow(BaseModel):
    """One line of an export: an item (`source` task, learning, capability, goal or event, with its `key`, `at`,
    `active` and the write contract's fields) or a memory (`source` memory, with its content, type, project, `ts`,
    speaker and session)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [
        {"source": "task", "key": "t-1", "at": _WHEN, "active": True, "title": "Fix the login", "description": "",
         "status": "pending", "metadata": {}},
        {"source": "memory", "content": "The login page keeps the session cookie for 30 days.",
         "content_type": "requirement", "project_key": "web-app", "project_name": "web-app", "ts": 1768900345}]})

    source: str


def _chunks(lines: Iterator[str], size: int = EXPORT_CHUNK_LINES) -> Iterator[str]:
    """Lines joined `size` at a time: each chunk a sync iterator yields costs a hop to the event loop."""
    while chunk := "".join(islice(lines, size)):
        yield chunk


class DownloadStalled(Exception):
    """A download's client took nothing for the idle limit: the connection is closed, HTTP's last chunk unsent."""


class NdjsonResponse(StreamingResponse):
    """JSON Lines, streamed. A client that has not taken a chunk (`EXPORT_CHUNK_LINES`) within
    `vocabulary.DOWNLOAD_IDLE_SECONDS` is cut off (the server closes the connection without HTTP's last chunk, so
    the client sees the file incomplete) and its background task still runs: a socket held open but never read
    does not keep a download's place."""

    media_type = "application/x-ndjson"

    async def stream_response(self, send: Send) -> None:
        limit = vocabulary.DOWNLOAD_IDLE_SECONDS

        async def within_limit(message: Message) -> None:
            try:  # the server's send waits while the client's buffers are full
                await asyncio.wait_for(send(message), limit)
            except TimeoutError:
                log.warning("an export download's client took nothing for %s s: cut off", limit)
                raise DownloadStalled(f"the client took nothing for {limit} s") from None

        await super().stream_response(within_limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except DownloadStalled:  # returning with the response unfinished: the server closes the connection
            if self.background is not None:
                await self.background()


@router.get("/api/owner/export", summary="Export everything of the key's owner as JSON Lines",
            response_class=NdjsonResponse, responses={**json_errors(errors(BUSY)), 200: {
                "description": "One `ExportedRow` a line: the items, then the memories in the order they were "
                "written. `memory-pipelines import FILE --owner O` reads it back.",
                "content": {NdjsonResponse.media_type: {"schema": ExportedRow.model_json_schema()}}}})
def export_everything(owner: Owner, memory: MemoryDep) -> Response:
    """Everything the key's owner wrote, streamed in one snapshot (writes during the download are not in it), as
    the CLI's `export` writes it but in one file: every task, learning, capability, goal and event, then every
    memory. Not in it: the retrieval log, the memories' replaced versions, copies folded into another memory, and
    the scoring config (shared by every owner). A server streams a few downloads at once, each on a database
    connection of its own (a download the client stops reading is cut after five idle minutes); beyond them, a 429
    with Retry-After."""
    if not _downloads.acquire(blocking=False):
        busy = error(429, f"{EXPORT_DOWNLOADS} exports are downloading already; retry later")
        busy.headers["Retry-After"] = str(EXPORT_BUSY_RETRY_SECONDS)
        return busy
    lines = _holding_a_download(lambda: memory.export_lines(owner))
    first = next(lines, "")  # the snapshot opens here: a database down is a 503, not a 200 cut short
    return NdjsonResponse(_chunks(chain([first], lines)), background=BackgroundTask(_end_download, lines),
                          headers={"Content-Disposition": 'attachment; filename="export.jsonl"'})


def _holding_a_download(open_lines: Callable[[], Iterator[str]]) -> Generator[str, None, None]:
    """The lines `open_lines` gives, the download's place given back when they end or fail (opening them included),
    or are closed (`_end_download`)."""
    try:
        yield from open_lines()
    finally:
        _downloads.release()


def _end_download(lines: Generator[str, None, None]) -> None:
    """Run once the response is over, sent whole or its client gone: a download the client left is closed here, its
    connection with it, rather than whenever the garbage collector gets to it."""
    with contextlib.suppress(psycopg.Error):  # a session the server already ended (the idle limit) has nothing to close
        lines.close()


@router.get("/api/removals", summary="The audit trail of removals", response_model=Removals, responses=READ)
def removals(
    owner: Owner,
    memory: MemoryDep,
    limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_LIMIT, description="Removals per page.")] = 50,
    cursor: Annotated[m.Cursor | None, Query(description="next_cursor of the previous page")] = None,
) -> JSONResponse:
    """Every removal of the key's owner, newest first: who (the key's id, or 'cli'), what (source, id, rows per
    table) and when; never the removed content."""
    return to_json(memory.removals(owner, limit=limit, cursor=cursor))
