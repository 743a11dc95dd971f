"""JSON objects that name a member twice, refused: json.loads keeps the last value silently, so a caller's
`{"title": "Old", "title": "New"}` would store one of two titles without a word. Every surface that parses a
caller's JSON (HTTP bodies, the CLI's --json, import files) refuses it, naming the member."""

from __future__ import annotations

import json
from typing import Any


class RepeatedMemberError(ValueError):
    """An object names `member` twice."""

    def __init__(self, member: str) -> None:
        super().__init__(f"an object names the member {member!r} twice")
        self.member = member


def unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook`: the object, unless it names a member twice (RepeatedMemberError naming the first)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for name, _value in pairs:
            if name in seen:
                raise RepeatedMemberError(name)
            seen.add(name)
    return obj


def loads_unique(text: str | bytes) -> Any:
    """json.loads, refusing an object that names a member twice (RepeatedMemberError); a document nested deeper
    than the parser's recursion allows, or bytes that are not UTF-8, is a json.JSONDecodeError like any bad JSON."""
    try:
        return json.loads(text, object_pairs_hook=unique_members)
    except RecursionError:
        raise json.JSONDecodeError("nested too deep to read", "", 0) from None
    except UnicodeDecodeError as exc:
        raise json.JSONDecodeError(f"not UTF-8 text (byte {exc.start})", "", 0) from None
