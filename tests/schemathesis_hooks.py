"""Schemathesis hooks for fuzzing the HTTP API (tests/test_reliability_input.py; by hand with
`SCHEMATHESIS_HOOKS=tests.schemathesis_hooks st run ...`).

A schema cannot state four of the API's rules, so a schema-valid request breaking one of them is a documented
422, not a failure: an `owner_id` must name the key's own owner, a `cursor` must be one the API returned, a
memory's `ts` may be at most one day ahead of the server clock, and a timeline's `until` must not be before its
`since`. Every other failure is kept.
"""

from __future__ import annotations

import schemathesis

UNSTATABLE = {"owner_id", "cursor"}


def unstatable(response) -> bool:
    """Whether a 422 rejects a field for a rule the schema cannot state."""
    if response.status_code != 422:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    field = body.get("field") if isinstance(body, dict) else None
    if field in UNSTATABLE:
        return True
    detail = str(body.get("detail"))
    return (field == "ts" and "one day from now" in detail) or (field == "until" and "before since" in detail)


def query_text_only(failure) -> bool:
    """Whether an accepted "schema-violating" request only changed a query parameter's JSON type: a query string is
    text, so `?project_name=false` is the valid string "false", not a boolean (an optional string parameter's
    null / boolean mutations serialise to valid text)."""
    if failure.code != "ST201":
        return False
    _, _, components = str(failure.message).partition("Invalid component:")
    header, *rest = components.splitlines() or [""]
    bullets = [line.strip() for line in rest if line.strip().startswith("- ")]
    if not bullets:  # one mutation: "parameter `x` in query - violates `type` ..."
        return "query" in header and "violates `type`" in header
    # several: a header naming where ("parameters `x`, `y` in query", or nothing), one bullet per mutation
    return all("violates `type`" in b and ("query" in b or "in query" in header) for b in bullets)


@schemathesis.hook
def filter_failure(context, failure, case, response) -> bool:
    return not ((failure.code == "ST202" and unstatable(response)) or query_text_only(failure))
