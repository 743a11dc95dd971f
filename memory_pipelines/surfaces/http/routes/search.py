"""Progressive search: summary → detail → related, over tasks, learnings, capabilities and memories; detail and
related also open the events and goals a context build names."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from ...encode import to_json
from .. import models as m
from .. import responses as r
from ..deps import MemoryDep, Owner, same_owner
from ..errors import BAD_REQUEST, TOO_LARGE, WRITE, StrictJsonRoute, errors, not_found

router = APIRouter(tags=["progressive search"], route_class=StrictJsonRoute)

_NO_ITEM = not_found("item", "no item with id mem_3f9c")


@router.post("/api/brain/memory/search", summary="Summary layer", response_model=r.Matches, responses=WRITE)
def memory_search(body: m.SearchRequest, owner: Owner, memory: MemoryDep) -> JSONResponse:
    """Search the owner's tasks, learnings, capabilities and memories; each match is a summary (id, level,
    title, similarity, preview). Take an id to the detail or the related layer.

    `mode`: `summary` (hybrid: vectors and BM25 keywords fused, the default), `hybrid`, `semantic` or
    `keyword`. When the embedding provider fails the answer comes from keywords and says so in `degraded`."""
    same_owner(body.owner_id, owner)
    mode = "hybrid" if body.mode == "summary" else body.mode
    return to_json(memory.summary(owner, body.query, top_k=body.top_k, mode=mode,
                                  exclude_session=body.exclude_session))


@router.get("/api/brain/memory/detail/{id}", summary="Detail layer", response_model=r.Detail,
            responses=errors(_NO_ITEM))
def memory_detail(id: Annotated[m.ItemId, Path(description="An id from a search match or a context.")],  # noqa: A002
                  owner: Owner, memory: MemoryDep) -> JSONResponse:
    """The full record of one item: its whole text, status (tasks, goals), metadata and creation time. Any id a
    search or a context build hands out opens here: tasks, learnings, capabilities, memories, and a build's events
    and profile goals (level `okr`)."""
    return to_json(memory.detail(owner, id))


@router.post("/api/brain/memory/search-related", summary="Related layer", response_model=r.Matches,
             responses=errors(BAD_REQUEST, TOO_LARGE, _NO_ITEM))
def memory_related(body: m.RelatedRequest, owner: Owner, memory: MemoryDep) -> JSONResponse:
    """The neighbours of one item (by its stored vector and its words), best first. `base_id` must be an id
    of this owner, e.g. from a summary match; otherwise 404."""
    same_owner(body.owner_id, owner)
    return to_json(memory.related(owner, body.base_id, top_k=body.top_k, exclude_self=body.exclude_self))
