"""A JSON-RPC message refused when an object names a member twice (the MCP SDK parses messages itself, keeping
the last value): a request body read once over ASGI, and each stdin line over stdio (`mcp_stdio`)."""

from __future__ import annotations

import json
from typing import Any

from ..infra.json_members import RepeatedMemberError, loads_unique


async def refusing_repeated_members(scope: Any, receive: Any, send: Any) -> Any:
    """The request's `receive`, replaying its body, or None once a 400 went out for a body whose JSON names a
    member twice: the SDK's json.loads would keep the last value silently (the HTTP API refuses the same)."""
    from starlette.responses import JSONResponse

    chunks, message = [], {"more_body": True}
    while message.get("more_body"):
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
    body = b"".join(chunks)
    answer = repeated_member_answer(body)
    if answer is not None:
        await JSONResponse(answer, status_code=400)(scope, receive, send)
        return None
    replayed = False

    async def replay() -> Any:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def repeated_member_answer(message: str | bytes) -> dict[str, Any] | None:
    """The JSON-RPC error answering a message whose JSON names a member twice (-32602 naming it, under the
    request's id), or None for any other message: one that is not JSON is left to the SDK's own parse error."""
    try:
        loads_unique(message)
    except RepeatedMemberError as exc:
        error = {"code": -32602, "message": f"invalid params: {exc}; name each member once"}
        return {"jsonrpc": "2.0", "id": _request_id(message), "error": error}
    except ValueError:  # not JSON (or nested too deep for json.loads): the SDK answers it
        pass
    return None


def unreadable_answer(message: str) -> dict[str, Any] | None:
    """The JSON-RPC error streamable HTTP answers a message the SDK cannot read (-32700 for one that is not JSON,
    -32602 for JSON that is not a JSON-RPC message; id null), or None: the SDK's stdio reader drops such a line
    without a word, and its client would wait for ever."""
    import mcp_types as types
    import pydantic
    import pydantic_core

    if not message.strip():
        return None
    try:
        raw = pydantic_core.from_json(message)
    except ValueError as exc:
        return {"jsonrpc": "2.0", "id": None, "error": {"code": types.PARSE_ERROR, "message": f"Parse error: {exc}"}}
    try:
        types.jsonrpc_message_adapter.validate_python(raw, by_name=False)
    except pydantic.ValidationError as exc:
        error = {"code": types.INVALID_PARAMS, "message": f"Validation error: {exc}"}
        return {"jsonrpc": "2.0", "id": None, "error": error}
    return None


def _request_id(body: str | bytes) -> str | int | None:
    """The request's own id when it names one once, so the client can match the error to its call (else null)."""
    pairs: list[list[tuple[str, Any]]] = []
    message = json.loads(body, object_pairs_hook=lambda p: pairs.append(p) or dict(p))
    if not isinstance(message, dict) or [name for name, _ in pairs[-1]].count("id") != 1:
        return None  # a batch, or an id named twice: no one id to answer
    ident = message.get("id")
    return ident if isinstance(ident, str | int) and not isinstance(ident, bool) else None
