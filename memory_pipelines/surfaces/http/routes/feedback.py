"""Feedback on a context build: which injected items the agent used, named or read from its output."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ....infra.ids import canonical_uuid
from ...encode import to_json
from .. import models as m
from .. import responses as r
from ..deps import MemoryDep, Owner, same_owner
from ..errors import BAD_REQUEST, TOO_LARGE, StrictJsonRoute, errors, not_found

router = APIRouter(tags=["context"], route_class=StrictJsonRoute)

NO_BUILD = not_found("context build", "retrieval 7d1e2f3a-4b5c-4d6e-8f70-819a2b3c4d5e not found")


@router.post("/api/brain/memory/feedback", summary="Mark which injected items were used",
             response_model=r.Feedback, responses=errors(BAD_REQUEST, TOO_LARGE, NO_BUILD))
def memory_feedback(body: m.FeedbackRequest, owner: Owner, memory: MemoryDep) -> JSONResponse:
    """After the agent answered: which of the build's injected items it used. Sending feedback again
    replaces the marks. The marks feed the hit rates and the tuning of mode weights. `retrieval_id` comes
    from a context answer (an unknown one is a 404)."""
    same_owner(body.owner_id, owner)
    marked = memory.feedback(owner, body.retrieval_id, list(body.used_ids))
    return to_json({"retrieval_id": canonical_uuid(body.retrieval_id), "marked": marked})


@router.post("/api/brain/memory/feedback/implicit",
             summary="Post what the agent produced; mark the injected items it used",
             response_model=r.ImplicitFeedback, responses=errors(BAD_REQUEST, TOO_LARGE, NO_BUILD))
def memory_feedback_implicit(body: m.ImplicitFeedbackRequest, owner: Owner, memory: MemoryDep) -> JSONResponse:
    """After the agent answered, without naming items: its final `output` (answer, summary, diff or tool
    calls as text). Each injected item it demonstrably used (semantic or lexical overlap with the output
    above the calibrated threshold) is marked used, `used_by: implicit`, with the evidence logged. Explicit
    feedback wins (after it, this changes nothing); posting again marks nothing twice."""
    same_owner(body.owner_id, owner)
    return to_json(memory.implicit_feedback(owner, body.retrieval_id, body.output))
