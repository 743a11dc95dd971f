"""Input types every surface validates with (HTTP bodies and queries, MCP tool arguments).

Limits come from `vocabulary`, so HTTP, MCP and the library agree; a bad value is rejected before any
library call, naming the field.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, StringConstraints

from ..infra.errors import ValidationError, check_storable
from ..vocabulary import MAX_CONTENT, MAX_ID, MAX_NAME, MAX_PATH, MAX_QUERY


def storable(value: str | None) -> str | None:
    """Reject what PostgreSQL text cannot hold (NUL) and text that is not valid Unicode (lone surrogates)."""
    if value is None:
        return None
    try:
        return check_storable("value", value)
    except ValidationError as exc:
        raise ValueError(exc.message) from None


Text = AfterValidator(storable)
Query = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY), Text]
ItemId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID), Text]
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME), Text]
PathText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PATH), Text]
Content = Annotated[str, StringConstraints(min_length=1, max_length=MAX_CONTENT), Text]
Cursor = Annotated[str, StringConstraints(min_length=1, max_length=500), Text]
