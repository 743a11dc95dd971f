"""Ids as callers send them."""

from __future__ import annotations

import uuid


def is_uuid(value: object) -> bool:
    """Whether `value` is a UUID or a string that parses as one (the id type of tasks, learnings, builds...)."""
    if isinstance(value, uuid.UUID):
        return True
    if not isinstance(value, str):
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def canonical_uuid(value: str) -> str:
    """A UUID as stored and printed by PostgreSQL (lower case, hyphenated); any other string unchanged."""
    return str(uuid.UUID(value)) if is_uuid(value) else value
