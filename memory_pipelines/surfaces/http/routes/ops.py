"""Health (no key) and the key's owner."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ....infra.db import RETRY_AFTER_SECONDS
from ...encode import to_json
from .. import responses as r
from ..deps import MemoryDep, Owner
from ..errors import READ, StrictJsonRoute

router = APIRouter(tags=["ops"], route_class=StrictJsonRoute)


@router.get("/health", summary="Database reachable, embedding model (no auth)", response_model=r.Health,
            responses={503: {"model": r.Health, "description": "The database does not answer."}})
def health(memory: MemoryDep) -> JSONResponse:
    """Whether the database answers, and which embedding and chat models serve. Needs no key."""
    body = memory.health()
    if body["database"] == "ok":
        return JSONResponse(body)
    return JSONResponse(body, status_code=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


@router.get("/whoami", summary="The owner of the key", response_model=r.Owner, responses=READ)
def whoami(owner: Owner) -> JSONResponse:
    """The owner whose memory this key reads and writes (every other endpoint acts for this owner)."""
    return to_json({"owner": owner})
