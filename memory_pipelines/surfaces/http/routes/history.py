"""The retrieval log read back: recent context builds, one build with every candidate, hit rates."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse

from ....vocabulary import MAX_BUILDS, MAX_HISTORY_DAYS
from ...encode import to_json
from .. import models as m
from .. import responses as r
from ..deps import MemoryDep, Owner
from ..errors import READ, StrictJsonRoute, errors
from .feedback import NO_BUILD

router = APIRouter(tags=["context"], route_class=StrictJsonRoute)


@router.get("/api/brain/memory/builds", summary="Recent context builds, with used marks", response_model=r.Builds,
            responses=READ)
def memory_builds(
    owner: Owner,
    memory: MemoryDep,
    limit: Annotated[int, Query(ge=1, le=MAX_BUILDS, description="Builds per page.")] = 20,
    cursor: Annotated[m.Cursor | None, Query(description="next_cursor of the previous page")] = None,
) -> JSONResponse:
    """The owner's context builds, newest first: query, mode, token use, and the injected items in block
    order with each factor of their score and whether feedback marked them used."""
    return to_json(memory.builds(owner, limit=limit, cursor=cursor))


@router.get("/api/brain/memory/builds/{retrieval_id}", summary="One context build with every scored candidate",
            response_model=r.Build, responses=errors(NO_BUILD))
def memory_build(retrieval_id: Annotated[m.ItemId, Path(description="A build's retrieval_id.")],
                 owner: Owner, memory: MemoryDep) -> JSONResponse:
    """One build with all its scored candidates by rank, injected or not (`mmr_rank` null: left out by MMR
    or the budget)."""
    return to_json(memory.build(owner, retrieval_id))


@router.get("/api/brain/memory/hit-rates", summary="Hit rates per day", response_model=r.HitRates, responses=READ)
def memory_hit_rates(
    owner: Owner,
    memory: MemoryDep,
    days: Annotated[int, Query(ge=1, le=MAX_HISTORY_DAYS, description="UTC days back, today included.")] = 30,
) -> JSONResponse:
    """Per UTC day: builds, builds with feedback, items injected into those and marked used, and the hit
    rate used / injected (null on a day without feedback); the same over the window and per source."""
    return to_json(memory.hit_rates(owner, days=days))
