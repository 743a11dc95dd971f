"""The token-budgeted context block."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ...encode import to_json
from .. import models as m
from .. import responses as r
from ..deps import MemoryDep, Owner, same_owner
from ..errors import WRITE, StrictJsonRoute

router = APIRouter(tags=["context"], route_class=StrictJsonRoute)


@router.post("/api/brain/memory/context", summary="Token-budgeted memory context", response_model=r.Context,
             responses=WRITE)
def memory_context(body: m.ContextRequest, owner: Owner, memory: MemoryDep) -> JSONResponse:
    """The block to put in the agent's prompt: candidates from tasks, learnings, capabilities, memories,
    recent events and the active goals (profile), scored `relevance × timeDecay × modeWeight`, diversified
    (MMR) and cut to `tokenBudget` real cl100k tokens. The build is logged: send `retrieval_id` back with
    feedback once the agent has answered. `exclude_session` leaves out the memories written with that session:
    the conversation the query is part of, whose turns the agent holds already."""
    same_owner(body.owner_id, owner)
    return to_json(memory.context(owner, body.query, mode=body.mode, token_budget=body.token_budget,
                                  task=body.task.model_dump(exclude_none=True) if body.task else None,
                                  exclude_session=body.exclude_session))
