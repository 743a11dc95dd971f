"""Schemathesis hooks for fuzzing the HTTP API (tests/test_reliability_input.py; by hand with
`SCHEMATHESIS_HOOKS=tests.schemathesis_hooks st run ...`).

A schema cannot state some of the API's rules, so a schema-valid request breaking one of them is a documented
422, not a failure: an `owner_id` must name the key's own owner, a `cursor` must be one the API returned, a
memory's `ts` or an item's `at` may be at most one day ahead of the server clock (and an `at` given as text not
before 2000), a timeline's `until` must not be before its `since`, a `project_key` and a `project_name` given
together name the same project, no string inside an item's metadata or payload
holds NUL (PostgreSQL's JSON cannot), a key (a capability's name) appears once in a batch, and explicit feedback
names only items its build injected. Every other failure is kept.
"""

from __future__ import annotations

import schemathesis

UNSTATABLE = {"owner_id", "cursor", "confirm"}


def unstatable(response) -> bool:
    """Whether a 422 rejects a field for a rule the schema cannot state."""
    if response.status_code != 422:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    field = body.get("field") if isinstance(body, dict) else None
    item_field = field.rsplit(".", 1)[-1] if isinstance(field, str) else None
    if field in UNSTATABLE or item_field == "owner_id":  # a batch item's, `items[2].owner_id`
        return True
    detail = str(body.get("detail"))
    return ((field == "ts" and "one day from now" in detail) or (field == "until" and "before since" in detail)
            or (field == "project_name" and "does not name the project of project_key" in detail)
            or (field == "project_name" and "already names project" in detail)  # another project answers to it
            or (item_field == "at" and ("future" in detail or "2000" in detail))
            or (item_field in ("metadata", "payload") and "NUL" in detail)
            or (item_field in ("key", "name") and "once in a batch" in detail)
            or (field == "used_ids" and "inject" in detail))  # feedback names only the build's injected items


def _accepted_mutations(failure) -> tuple[str, list[str]] | None:
    """For an "accepted schema-violating request" (ST201): the part of its text naming the invalid components, and
    their `violates` lines; None for any other failure."""
    if getattr(failure, "code", None) != "ST201":
        return None
    text = f"{getattr(failure, 'message', '')}\n{failure}"
    _, _, components = text.partition("Invalid component:")
    return components, [line for line in components.splitlines() if "violates" in line]


def query_text_only(failure) -> bool:
    """Whether an accepted "schema-violating" request only changed a query parameter's JSON type or added an unknown
    query parameter: a query string is text, so `?project_name=false` is the valid string "false", not a boolean,
    and unknown query parameters are ignored, as HTTP APIs do."""
    if (found := _accepted_mutations(failure)) is None:
        return False
    components, mutations = found
    # Header mutations too: the harness sends its own Authorization header over whatever the case carries.
    return bool(mutations) and "body" not in components and all(
        line.strip().startswith(("- query:", "- header:")) or "in query" in line for line in mutations)


def ignored(failure) -> bool:
    """Whether a failure is one of the documented departures above rather than a defect."""
    return query_text_only(failure)


@schemathesis.hook
def filter_failure(context, failure, case, response) -> bool:
    return not ((failure.code == "ST202" and unstatable(response)) or ignored(failure))
