"""How the MCP tools word bad input: one line naming the field, what it must be, and what to do. The library's
checks (`ValidationError`) and the tools' argument types (pydantic, checked by the SDK before a tool runs) answer
alike; the SDK would answer the latter with pydantic's raw report (model name, input value, a link)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError as PydanticError

from .schema import our_words

_SHOULD = re.compile(r"^\w+ should ")
"""pydantic's "Input should be a valid string", "String should have at most 200 characters", …"""


def invalid_text(field: str, message: str) -> str:
    return f"invalid `{field}`: {message}. Change `{field}` and call again."


def _field(loc: tuple[Any, ...]) -> str:
    """The argument an error is about, with the index of a list item (`ids[0]`); not pydantic's union tags."""
    return str(loc[0]) + "".join(f"[{part}]" for part in loc[1:] if isinstance(part, int)) if loc else "arguments"


def _expected(msg: str) -> str:
    msg = our_words(msg)
    if msg == "Field required":
        return "is required"
    return _SHOULD.sub("must ", msg)


def arguments_text(exc: PydanticError) -> str:
    """The first argument `exc` refuses, in the style of `invalid_text` (a union's alternatives joined by "or")."""
    errors = exc.errors(include_url=False, include_input=False)
    field = _field(tuple(errors[0]["loc"]))
    expected = list(dict.fromkeys(_expected(str(e["msg"])) for e in errors if _field(tuple(e["loc"])) == field))
    if len(expected) > 1 and all(m.startswith("must be ") for m in expected):  # "must be a string or a number"
        expected = ["must be " + " or ".join(m.removeprefix("must be ") for m in expected)]
    return invalid_text(field, " or ".join(expected))
