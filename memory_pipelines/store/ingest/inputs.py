"""What one memory write carries, checked once: `MemoryInput.parse` turns the raw fields every surface passes
(HTTP body, MCP tool arguments, `Memory.ingest` keywords) into a `MemoryInput`, or raises a ValidationError
naming the first bad field. Nothing is read or written before it succeeds."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields

from ...infra.errors import ValidationError, blank, check_printable, check_storable
from ...vocabulary import CONTENT_TYPES, MAX_CONTENT, MAX_NAME, MAX_PATH, MIN_TS, TS_FUTURE_SLACK
from ..projects import project_key_from_name


def _opt_str(name: str, value: object, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or blank(value):
        raise ValidationError(name, "must be a non-empty string when given")
    if len(value.strip()) > limit:
        raise ValidationError(name, f"must be at most {limit} characters")
    return check_storable(name, value.strip())


def validate_owner(owner: object) -> str:
    """The owner id, stripped; ValidationError('owner') when empty, too long or holding a control character (an
    id nobody could type again, and that logs and terminals would render as something else)."""
    value = _opt_str("owner", owner, MAX_NAME)
    if value is None:
        raise ValidationError("owner", "is required")
    return check_printable("owner", value)


def _content(value: object) -> str:
    if not isinstance(value, str) or blank(value):
        raise ValidationError("content", "must be a non-empty string")
    if len(value) > MAX_CONTENT:
        raise ValidationError("content", f"must be at most {MAX_CONTENT} characters, got {len(value)}")
    return check_storable("content", value)


def _ts(value: object) -> int:
    """The memory's own time: Unix seconds from 2000-01-01 to one day ahead; now when absent."""
    now = time.time()
    if value is None:
        return int(now)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError("ts", "must be an integer (Unix seconds)")
    if not MIN_TS <= value <= now + TS_FUTURE_SLACK:
        raise ValidationError("ts", "must be Unix seconds between 2000-01-01 and one day from now")
    return int(value)


@dataclass(frozen=True)
class MemoryInput:
    """One memory to write. Build it with `parse` from raw input; the plain constructor takes values already
    checked (a stored row)."""

    owner: str
    content: str
    content_type: str
    project_key: str
    """Stable across machines; derived from the name when not given."""
    project_name: str
    ts: int
    """The memory's own time (Unix seconds): a new memory's `created_at` is set to it."""
    machine_name: str | None = None
    project_path: str | None = None
    speaker: str | None = None
    session: str | None = None
    """The conversation the memory is a turn of."""

    @classmethod
    def parse(cls, owner: object, /, **given: object) -> MemoryInput:
        """The checked input from raw fields (the names above; absent ones are None; `project_name` or
        `project_key` is required). ValidationError names the first bad field; TypeError an unknown name."""
        unknown = sorted(set(given) - FIELDS)
        if unknown:
            raise TypeError(f"not a memory field: {', '.join(unknown)}")
        get = given.get
        owner_id = validate_owner(owner)
        content = _content(get("content"))
        if get("content_type") not in CONTENT_TYPES:
            raise ValidationError(
                "content_type", f"must be one of {list(CONTENT_TYPES)}, got {get('content_type')!r}"
            )
        name = _opt_str("project_name", get("project_name"), MAX_NAME)
        key = _opt_str("project_key", get("project_key"), MAX_NAME)
        if name is None and key is None:
            raise ValidationError("project_name", "project_name or project_key is required")
        key = key or project_key_from_name(name or "")
        if len(key) > MAX_NAME:
            raise ValidationError("project_key", f"must be at most {MAX_NAME} characters")
        return cls(
            owner=owner_id,
            content=content,
            content_type=str(get("content_type")),
            project_key=key,
            project_name=name or key,
            ts=_ts(get("ts")),
            machine_name=_opt_str("machine_name", get("machine_name"), MAX_PATH),
            project_path=_opt_str("project_path", get("project_path"), MAX_PATH),
            speaker=_opt_str("speaker", get("speaker"), MAX_NAME),
            session=_opt_str("session", get("session"), MAX_NAME),
        )


FIELDS = frozenset(f.name for f in fields(MemoryInput)) - {"owner"}
"""The names `MemoryInput.parse` takes besides the owner."""
