"""Library results → JSON (numpy scalars, datetimes, UUIDs, non-finite floats)."""

from __future__ import annotations

import math
import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import Any


def jsonable(obj: Any) -> Any:
    """A JSON-encodable copy of a library result."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, int | str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, datetime | date):
        return obj.isoformat()
    if isinstance(obj, uuid.UUID):
        return str(obj)
    if isinstance(obj, Decimal):
        return jsonable(float(obj))
    if hasattr(obj, "as_dict"):
        return jsonable(obj.as_dict())
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return jsonable(obj.tolist())
    return str(obj)


def to_json(obj: Any, status_code: int = 200) -> Any:
    """A JSONResponse of `jsonable(obj)`."""
    from fastapi.responses import JSONResponse

    return JSONResponse(jsonable(obj), status_code=status_code)
