"""The write contract of items, enforced: an item (task, learning, capability, goal, event) checked field by field.

Pure: no I/O. `validate_item` checks one item against its source's contract (vocabulary.WRITE_CONTRACTS) and
normalises it; `validate_items` a batch; `parse_time` an item's time. A bad item is an `ItemError` naming the
field at fault.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..infra.errors import ValidationError, blank, check_storable
from ..vocabulary import MIN_TS, TS_FUTURE_SLACK, WRITABLE_SOURCES, WRITE_CONTRACTS, FieldSpec, a_source

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


class ItemError(ValidationError):
    """A bad item: `field` names the field, `index` its position in a batch (None for a single item)."""

    def __init__(self, field: str, message: str, index: int | None = None) -> None:
        self.index = index
        self.path = field if index is None else f"items[{index}].{field}"
        super().__init__(self.path, message)
        self.field = field


class ItemConflict(ItemError):
    """An item that is valid but collides with another stored item of the owner (a capability's name, a key taken
    by another item): HTTP 409."""



def check_source(source: object) -> str:
    """The source, if it is one items can be written to; ItemError otherwise."""
    if source not in WRITABLE_SOURCES:
        raise ItemError("source", f"must be one of {list(WRITABLE_SOURCES)}, got {source!r}")
    return str(source)


def parse_time(value: object, now: datetime | None = None) -> datetime:
    """An item's time: ISO 8601 (naive is UTC) or Unix seconds (a number or a string of one), from 2000-01-01 to
    one day after `now`; ValueError saying why otherwise."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, bool):
        raise ValueError("must be an ISO 8601 time or Unix seconds, not true or false")
    if isinstance(value, int | float):
        if not math.isfinite(value) or not MIN_TS <= value <= 32_503_680_000:
            raise ValueError("must be Unix seconds from 2000-01-01 to one day from now")
        when = datetime.fromtimestamp(value, UTC)
    elif isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError("must be an ISO 8601 time (e.g. 2025-03-01T09:30:00Z) or Unix seconds") from None
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when
    elif isinstance(value, datetime):
        when = value.replace(tzinfo=UTC) if value.tzinfo is None else value
    else:
        raise ValueError("must be an ISO 8601 time or Unix seconds")
    now = now or datetime.now(UTC)
    if when.timestamp() < MIN_TS:
        raise ValueError("must not be before 2000-01-01")
    if when.timestamp() > now.timestamp() + TS_FUTURE_SLACK:
        raise ValueError("must not be more than one day in the future")
    return when


MAX_OBJECT_DEPTH = 32  # nested objects and lists: deeper ones are refused before any encoder recurses into them


def _check_nesting(value: object) -> None:
    """Depth at most MAX_OBJECT_DEPTH and no NUL in any key or string (PostgreSQL's jsonb refuses \\u0000)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping | list | tuple):
            if depth > MAX_OBJECT_DEPTH:
                raise ValueError(f"must not nest objects and lists more than {MAX_OBJECT_DEPTH} deep")
            items = list(node.items()) if isinstance(node, Mapping) else [(None, v) for v in node]
            for key, child in items:
                if isinstance(key, str) and "\x00" in key:
                    raise ValueError("must not contain NUL (\\u0000) characters")
                stack.append((child, depth + 1))
        elif isinstance(node, str) and "\x00" in node:
            raise ValueError("must not contain NUL (\\u0000) characters")


def _object(spec: FieldSpec, value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError("must be a JSON object")
    _check_nesting(value)
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        text.encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError):
        raise ValueError("must be a JSON object of strings, numbers, booleans, nulls, lists and objects") from None
    if spec.max_chars is not None and len(text) > spec.max_chars:
        raise ValueError(f"must be at most {spec.max_chars} characters as JSON, got {len(text)}")
    return json.loads(text)


def check_not_reserved(spec: FieldSpec, value: str) -> None:
    """ValueError when `value` is one the store writes itself (an event typed as the build log's would be taken
    for one: left out of the export's events, never ranked)."""
    if value in spec.reserved:
        raise ValueError(f"{value!r} is reserved for the store's own records; use another value")


def _value(spec: FieldSpec, value: object, now: datetime | None) -> Any:
    """One field's value checked and normalised (texts stripped); ValueError saying what is wrong."""
    if spec.kind == "text":
        if not isinstance(value, str):
            raise ValueError("must be a string")
        if spec.max_chars is not None and len(value) > spec.max_chars:  # as sent: what the schema's maxLength says
            raise ValueError(f"must be at most {spec.max_chars} characters, got {len(value)}")
        value = value.strip()
        if blank(value) and (spec.required or spec.nullable):
            raise ValueError("must not be empty" if spec.required else "must not be empty (leave it out or null)")
        try:
            check_storable(spec.name, value)
        except ValidationError as exc:
            raise ValueError(exc.message) from None
        if spec.pattern and not re.fullmatch(spec.pattern, value):
            raise ValueError(f"must match {spec.pattern}, got {value[:60]!r}")
        check_not_reserved(spec, value)
        return value
    if spec.kind == "enum":
        if value not in spec.choices:
            raise ValueError(f"must be one of {list(spec.choices)}, got {str(value)[:60]!r}")
        return value
    if spec.kind == "int":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):  # the range too: 0.2 meant as 20 % says how
            raise ValueError(f"must be an integer from {spec.min} to {spec.max}, got {repr(value)[:60]}")
        if not spec.min <= value <= spec.max:  # type: ignore[operator]
            raise ValueError(f"must be from {spec.min} to {spec.max}, got {value}")
        return value
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value
    if spec.kind == "object":
        return _object(spec, value)
    if spec.kind == "time":
        return parse_time(value, now)
    raise AssertionError(f"unknown field kind {spec.kind}")


def validate_item(source: str, raw: Mapping, *, partial: bool = False, now: datetime | None = None) -> dict[str, Any]:
    """The item checked against its source's contract (vocabulary.WRITE_CONTRACTS), as {field: value}.

    Whole (`partial` False): every field of the contract, defaults filled in (`at` None: now, or the stored time
    of an item rewritten by key). Partial: the fields given only, at least one. Pure: no I/O. Raises ItemError
    naming the first bad field: one outside the contract, a missing required one, a wrong type or enum value, an
    empty title, a text over its limit, a time before 2000 or more than a day ahead."""
    source = check_source(source)
    if not isinstance(raw, Mapping):
        raise ItemError("item", f"must be a JSON object, got {type(raw).__name__}")
    specs = {s.name: s for s in WRITE_CONTRACTS[source]}
    for name in raw:
        if name not in specs:
            shown = name if isinstance(name, str) and len(name) <= 60 else repr(name)[:60]
            raise ItemError(str(shown), f"is not a field of {a_source(source)}; the fields are {', '.join(specs)}")
    if partial and not raw:
        raise ItemError("item", f"give at least one field to change: {', '.join(specs)}")
    out: dict[str, Any] = {}
    for name, spec in specs.items():
        if name not in raw or (raw[name] is None and not spec.nullable and not partial):
            if partial:
                continue
            if spec.required:
                raise ItemError(name, "is required")
            out[name] = dict(spec.default) if isinstance(spec.default, dict) else spec.default
            continue
        value = raw[name]
        if value is None:
            if not spec.nullable or (partial and spec.kind == "time"):  # a stored item always has its time
                raise ItemError(name, "must not be null")
            out[name] = None
            continue
        try:
            out[name] = _value(spec, value, now)
        except ValueError as exc:
            raise ItemError(name, str(exc)) from None
    return out


def validate_items(source: str, items: Sequence[Mapping], now: datetime | None = None) -> list[dict[str, Any]]:
    """Every item validated whole (ItemError with the index of the first bad one); keys and, for capabilities,
    names appear once in a batch."""
    source = check_source(source)
    if isinstance(items, Mapping | str | bytes) or not isinstance(items, Sequence):
        raise ItemError("items", "must be a list of items")
    now = now or datetime.now(UTC)
    out = []
    seen: dict[tuple[str, str], int] = {}
    for i, raw in enumerate(items):
        try:
            item = validate_item(source, raw, now=now)
        except ItemError as exc:
            raise ItemError(exc.field, exc.message, i) from None
        unique = [("key", item["key"])] if item["key"] is not None else []
        if source == "capability":
            unique.append(("name", item["name"]))
        for name, value in unique:
            if (name, value) in seen:
                raise ItemError(name, f"{value[:60]!r} is also items[{seen[name, value]}]'s: each {name} once "
                                      "in a batch", i)
            seen[name, value] = i
        out.append(item)
    return out
