"""Input types every surface validates with (HTTP bodies and queries, MCP tool arguments, CLI options).

Limits come from `vocabulary`, so HTTP, MCP, the CLI and the library agree; a bad value is rejected before
any library call, naming the field.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, StringConstraints, TypeAdapter, WithJsonSchema
from pydantic import ValidationError as PydanticError

from ..infra.errors import INVISIBLE, ValidationError, blank, check_printable, check_storable
from ..vocabulary import MAX_CONTENT, MAX_ID, MAX_NAME, MAX_OUTPUT, MAX_PATH, MAX_QUERY, MAX_TS, MIN_TS


def storable(value: str | None) -> str | None:
    """Reject what PostgreSQL text cannot hold (NUL) and text that is not valid Unicode (lone surrogates)."""
    if value is None:
        return None
    try:
        return check_storable("value", value)
    except ValidationError as exc:
        raise ValueError(exc.message) from None


def not_blank(value: str | None) -> str | None:
    """Storable text with something in it besides whitespace (the library strips what it is given)."""
    value = storable(value)
    if value is not None and blank(value):
        raise ValueError("must not be blank")
    return value


def owner_id(value: str) -> str:
    """An owner as reads match it, exactly: not blank, no whitespace around it, no control character."""
    value = not_blank(value) or ""
    if value != value.strip():  # ' alice ' would read nobody's rows and answer empty
        raise ValueError("must not start or end with whitespace (owners are matched exactly)")
    try:
        return check_printable("owner", value)
    except ValidationError as exc:
        raise ValueError(exc.message) from None


# What `not_blank` accepts, for the JSON schema (documentation: the validator decides, with a clearer message):
# no NUL, and one character that is neither whitespace by Python's `str.strip` (which counts \x1c-\x1f and \x85)
# nor INVISIBLE.
_BLANK = r"\t\n\u000b\u000c\r\u001c-\u001f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
TEXT_PATTERN = rf"^[^\u0000]*[^\u0000{_BLANK}{INVISIBLE}][^\u0000]*$"


class Documented:
    """Annotation metadata adding keywords to a type's JSON schema, and nothing to its validation."""

    def __init__(self, **keywords: Any) -> None:
        self.keywords = keywords

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        return {**handler(core_schema), **self.keywords}


Text = AfterValidator(not_blank)
_TextSchema = Documented(pattern=TEXT_PATTERN)
Query = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY), Text, _TextSchema]
ItemId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID), Text, _TextSchema]
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME), Text, _TextSchema]
Owner = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME), AfterValidator(owner_id), _TextSchema]
PathText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PATH), Text, _TextSchema]
Content = Annotated[str, StringConstraints(min_length=1, max_length=MAX_CONTENT), Text, _TextSchema]
Output = Annotated[str, StringConstraints(min_length=1, max_length=MAX_OUTPUT), Text, _TextSchema]
"""What an agent produced (answer, summary, diff, tool calls as text), posted as implicit feedback."""
Cursor = Annotated[str, StringConstraints(min_length=1, max_length=500), Text, _TextSchema]
def json_number(value: Any) -> Any:
    """Only a JSON number is a number: pydantic would read true / false as 1 / 0 and "50" as 50, which the
    library, the CLI and a batch refuse."""
    if isinstance(value, bool):
        raise ValueError("must be an integer, not true or false")
    if isinstance(value, str):
        raise ValueError("must be an integer, not a string")
    return value


Int = Annotated[int, BeforeValidator(json_number)]
"""An integer in a request body: a JSON number, never a boolean or a string."""


def int_between(low: int, high: int, description: str | None = None) -> Any:
    """`Int` within [low, high] as a type (a tool argument). The bounds go before the validator: after it, pydantic
    writes them into the JSON schema as ge / le instead of minimum / maximum."""
    return Annotated[int, Field(ge=low, le=high, description=description), BeforeValidator(json_number)]


Ts = Annotated[int, Field(ge=MIN_TS, le=MAX_TS), BeforeValidator(json_number)]
"""A memory's own time in Unix seconds: the range the library accepts (it also refuses more than a day ahead)."""

# -- instants: ISO 8601 times or whole Unix seconds -------------------------------------------------------------

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def _instant(value: Any) -> Any:
    """Unix seconds (a number, or a string of one, as query parameters are) must be whole and from 0 to
    MAX_TS; they become an aware UTC datetime. Anything else is left to the ISO 8601 parser."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        value = float(value) if any(c in value for c in ".eE") else int(value)
    if isinstance(value, bool):
        raise ValueError("must be an ISO 8601 time or whole Unix seconds")
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            raise ValueError("Unix seconds must be a whole number (or give an ISO 8601 time)")
        value = int(value)
    if isinstance(value, int):
        if not 0 <= value <= MAX_TS:
            raise ValueError(f"Unix seconds must be from 0 to {MAX_TS} (or give an ISO 8601 time)")
        return datetime.fromtimestamp(value, UTC)
    return value


def _aware(value: datetime) -> datetime:
    """Naive times are read as UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


Instant = Annotated[
    datetime,
    BeforeValidator(_instant),
    AfterValidator(_aware),
    WithJsonSchema({"anyOf": [{"type": "string", "format": "date-time"},
                              {"type": "integer", "minimum": 0, "maximum": MAX_TS}],
                    "description": "An ISO 8601 time (UTC when it has no zone) or whole Unix seconds."}),
]
"""A point in time for a filter (since, until): ISO 8601 (naive is UTC) or whole Unix seconds, never a fraction."""

# -- checking one value outside a model (the CLI) ---------------------------------------------------------------

def our_words(msg: object) -> str:
    """A pydantic error message without the "Value error, " pydantic puts before our validators' own words."""
    return str(msg).removeprefix("Value error, ")


@functools.cache
def _adapter(kind: Any) -> TypeAdapter:
    return TypeAdapter(kind)


def check(field: str, kind: Any, value: Any) -> Any:
    """`value` validated as `kind` (e.g. `Name`, `Query`); ValidationError naming `field` otherwise."""
    try:
        return _adapter(kind).validate_python(value)
    except PydanticError as exc:
        first = exc.errors()[0]
        limit = (first.get("ctx") or {}).get("max_length")
        if first.get("type") == "string_too_long" and limit is not None:  # the library's words, not pydantic's
            message = f"must be at most {limit} characters, got {len(value)}"
        else:
            message = our_words(first.get("msg", "is invalid"))
        raise ValidationError(field, message) from None
