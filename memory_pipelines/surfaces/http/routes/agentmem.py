"""The agent-mem memory centre: write a memory; search (snippets) → get (full content); timeline; versions;
projects."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse

from ....infra.errors import ValidationError
from ....vocabulary import MAX_SEARCH_LIMIT, MAX_TIMELINE_LIMIT
from ...encode import to_json
from .. import models as m
from .. import responses as r
from ..deps import MemoryDep, Owner, same_owner
from ..errors import BAD_REQUEST, READ, TOO_LARGE, WRITE, StrictJsonRoute, errors, not_found

router = APIRouter(tags=["memory centre"], route_class=StrictJsonRoute)

_IDS = re.compile(m.IDS_PATTERN)


def _split_ids(raw: str) -> list[str]:
    if len(raw) > m.IDS_CHARS or not _IDS.fullmatch(raw):
        raise ValidationError("ids", f"give 1 to {m.MAX_IDS} memory ids from /memories/search, comma separated, "
                                     f"in printable ASCII, at most {m.MAX_ID} characters each and "
                                     f"{m.IDS_CHARS} in all")
    return [p.strip() for p in raw.split(",") if p.strip()]  # the pattern bounds count, length and characters


@router.post("/ingest/memory", summary="Write a memory (chunked, embedded, judged)", response_model=r.Ingested,
             responses=WRITE)
def ingest(body: m.IngestRequest, owner: Owner, memory: MemoryDep, request: Request) -> JSONResponse:
    """Store one memory in a project (`project_name` or a stable `project_key`; created on first use). The
    server chunks it (500 tokens, 50 overlap), embeds, summarises and tags it, and compares it with the most
    similar older memory: CREATE, KEEP_BOTH, REPLACE (the old version is kept) or SKIP. With `wait` false
    it answers once the memory is stored (DEFERRED) and does the embedding and the comparison in the
    background; GET /memories then shows the outcome (`duplicate_of` / `merged_into` when it was one)."""
    same_owner(body.owner_id, owner)
    state = request.app.state
    done = memory.ingest(owner, wait=state.wait_ingest if body.wait is None else body.wait, **body.memory_fields())
    if done.deferred:
        state.embed_worker.notify()
    return to_json(done)


@router.get("/memories/search", summary="Stage 1: snippets and ids", response_model=r.FoundList, responses=READ)
def memories_search(
    owner: Owner,
    memory: MemoryDep,
    query: Annotated[m.Query, Query(description="What to look for, any language.")],
    project_key: Annotated[m.Name | None, Query(description="Only this project (by key).")] = None,
    project_name: Annotated[m.Name | None, Query(description="Only this project (by name).")] = None,
    scope: Annotated[m.Scope, Query(description="all or one content type")] = "all",
    limit: Annotated[int, Query(ge=1, le=MAX_SEARCH_LIMIT)] = 20,
    exclude_session: Annotated[m.Name | None, Query(description="Leave out the memories of this conversation.")]
    = None,
) -> JSONResponse:
    """The owner's best-matching memories as snippets (at most 200 characters around the best passage) and
    ids; then get the full content of the relevant ones with `GET /memories?ids=...`. An unknown project
    gives no results."""
    return to_json(memory.find(owner, query, project_key=project_key, project_name=project_name,
                               scope=scope, limit=limit, exclude_session=exclude_session))


@router.get("/memories/timeline", summary="Memories in time order, paged", response_model=r.Timeline,
            responses=READ)
def memories_timeline(
    owner: Owner,
    memory: MemoryDep,
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


@router.get("/memories", summary="Stage 2: full content by ids", response_model=r.MemoryList, responses=READ)
def memories_get(
    owner: Owner,
    memory: MemoryDep,
    # maxLength only documented: _split_ids refuses a long list with the count it allows, not a character count
    ids: Annotated[str, m.Documented(pattern=m.IDS_PATTERN, maxLength=m.IDS_CHARS),
                   Query(min_length=1, description="Comma-separated memory ids from /memories/search")],
) -> JSONResponse:
    """The full records, in the order asked (up to 100 ids). Ids this owner has no memory for are listed
    under `missing`, never an error."""
    return to_json(memory.get(owner, _split_ids(ids)))


@router.get("/memories/{memory_id}/versions", summary="Replaced versions", response_model=r.Versions,
            responses=errors(not_found("memory", "no memory 'mem_3f9c0b6a1d2e4f5a6b7c'")))
def memories_versions(memory_id: Annotated[m.ItemId, Path(description="A memory id.")],
                      owner: Owner, memory: MemoryDep) -> JSONResponse:
    """The earlier versions of one memory (kept when an ingest REPLACEd it), oldest first."""
    return to_json({"memory_id": memory_id, "versions": memory.versions(owner, memory_id)})


@router.get("/projects", summary="The owner's projects", response_model=r.Projects, responses=READ)
def projects(owner: Owner, memory: MemoryDep) -> JSONResponse:
    """The owner's projects with their active memory counts, most recently updated first."""
    return to_json({"projects": memory.projects(owner)})


@router.patch("/projects/{project_key:path}", summary="Rename a project", response_model=r.ProjectRenamed,
              responses=errors(BAD_REQUEST, TOO_LARGE, not_found("project", "no project 'web-app'")))
def rename_project(project_key: Annotated[m.Name, Path(description="A project key from GET /projects.")],
                   body: m.ProjectRename, owner: Owner, memory: MemoryDep) -> JSONResponse:
    """Give one of your projects a new name. Its key stays, so writes and filters by the key are unchanged; a
    write giving only the new name files there too. Search, timeline and export show the new name at once; the
    model reads it in each memory's text, so the next refresh (`memory-pipelines embed`, or the pipelines)
    embeds and indexes its memories again (until then they are found with the old vectors and terms). A name
    that is another of your projects' name, or the key it derives, is a 422 naming `project_name`, and nothing
    changes."""
    same_owner(body.owner_id, owner)
    return to_json(memory.rename_project(owner, project_key, body.project_name))
