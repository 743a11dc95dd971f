"""One import row routed to its source and owner, typed, checked against its contract; keys derived from content.

A task, learning, goal or event without a key gets one derived from its content (`row:` + a digest, and `.2`,
`.3` for repeats of the same content in the file), so importing the same file again changes nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..vocabulary import WRITABLE_SOURCES, WRITE_CONTRACTS
from .import_files import MEMORY_FIELDS
from .ingest import MemoryInput, validate_owner
from .items import ItemError, parse_time, validate_item

IMPORT_SOURCES: tuple[str, ...] = (*WRITABLE_SOURCES, "memory")
DERIVED_KEY_PREFIX = "row:"
KEYED_BY_CONTENT = ("task", "learning", "goal", "event")
"""Sources whose rows without a key get one derived from their content (a capability's name is its key)."""

_INT = re.compile(r"[+-]?\d+")
_TRUE, _FALSE = {"true", "t", "yes", "y", "1"}, {"false", "f", "no", "n", "0"}

@dataclass
class ImportRow:
    line: int
    source: str
    owner: str
    item: dict[str, Any]  # what write_items takes, or a memory's fields
    checked: dict[str, Any] | None = None  # the item as validate_item returned it (not for memories)


def _from_text(kind: str, name: str, value: str, *, in_cell: bool = True) -> Any:
    """A CSV cell (`in_cell`), or a string where a JSON Lines or Parquet row needs an object, as the contract's
    kind: integers, booleans and JSON objects are spelled as text there."""
    text = value.strip()
    if kind == "int":
        if not _INT.fullmatch(text):
            raise ItemError(name, f"must be an integer, got {value[:40]!r}")
        return int(text)
    if kind == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ItemError(name, f"must be true or false, got {value[:40]!r}")
    if kind == "object":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            # "the cell" is CSV's word; a JSON Lines row gave a string where an object goes
            where = " (JSON text in the cell)" if in_cell else ", or a string of JSON text holding one"
            raise ItemError(name, f"must be a JSON object{where}, got {value[:40]!r}") from None
    return value


@functools.cache
def _kinds(source: str) -> dict[str, str]:
    return {s.name: s.kind for s in WRITE_CONTRACTS[source]}


def _coerce(source: str, raw: dict[str, Any], cells_are_text: bool) -> dict[str, Any]:
    """Typed values for the fields a file format can only spell as text (CSV: all; Parquet: JSON objects)."""
    if source == "memory":
        if cells_are_text and isinstance(raw.get("ts"), str):
            raw["ts"] = _from_text("int", "ts", raw["ts"])
        return raw
    if isinstance(raw.get("key"), int) and not isinstance(raw["key"], bool):
        raw["key"] = str(raw["key"])  # a database's integer id is a fine key
    kinds = _kinds(source)
    for name, value in raw.items():
        kind = kinds.get(name)
        if kind is None or not isinstance(value, str):
            continue
        if cells_are_text or kind == "object":
            raw[name] = _from_text(kind, name, value, in_cell=cells_are_text)
    return raw


def _route(raw: dict[str, Any], source: str | None, owner: str | None, default_owner: str | None) -> tuple[str, str]:
    """The row's (source, owner), taken out of `raw`."""
    row_source = raw.pop("source", None)
    if row_source is not None and source is not None and row_source != source:
        raise ItemError("source", f"is {str(row_source)[:40]!r}, but the import is of {source!r}")
    src = row_source if row_source is not None else source
    if src is None:
        raise ItemError("source", "is missing: give the row a source column, or the import its source")
    if src not in IMPORT_SOURCES:
        raise ItemError("source", f"must be one of {list(IMPORT_SOURCES)}, got {str(src)[:40]!r}")
    row_owner = raw.pop("owner", None)
    if row_owner is not None:
        row_owner = validate_owner(row_owner)  # stripped as it is stored, so " alice " is alice with --owner too
        if owner is not None and row_owner != validate_owner(owner):
            raise ItemError("owner", f"is {row_owner[:40]!r}, but the import's owner is {owner!r}")
        return src, row_owner
    who = owner or default_owner
    if who is None:
        raise ItemError("owner", "is missing: give the row an owner column, or the import its owner")
    return src, validate_owner(who)


def _memory_fields(raw: dict[str, Any], now: datetime) -> dict[str, Any]:
    for alias in ("at", "created_at"):
        if alias in raw:
            if "ts" in raw:
                raise ItemError(alias, "and ts both give the memory's time: keep one")
            try:
                raw["ts"] = int(parse_time(raw.pop(alias), now).timestamp())
            except ValueError as exc:
                raise ItemError(alias, str(exc)) from None
    for name in raw:
        if name not in MEMORY_FIELDS:
            raise ItemError(str(name)[:60], f"is not a field of a memory; the fields are {', '.join(MEMORY_FIELDS)}"
                            " and at (its time, instead of ts; a memory has no key: a re-import finds it by its"
                            " content)")
    return raw


def prepare_row(raw: Mapping[str, Any], *, source: str | None, owner: str | None, default_owner: str | None,
                now: datetime, cells_are_text: bool = False) -> ImportRow:
    """A row routed, typed and checked against its contract (line 0: the caller sets it). ItemError (or the
    memory ingest's ValidationError) names the field at fault."""
    raw = dict(raw)
    src, who = _route(raw, source, owner, default_owner)
    if "created_at" in raw and src != "memory":
        if "at" in raw:
            raise ItemError("created_at", "and at both give the item's time: keep one")
        raw["at"] = raw.pop("created_at")
    raw = _coerce(src, raw, cells_are_text)
    if src == "memory":
        raw = _memory_fields(raw, now)
        MemoryInput.parse(who, **raw)
        return ImportRow(0, src, who, raw)
    return ImportRow(0, src, who, raw, validate_item(src, raw, now=now))


def _content_digest(checked: Mapping[str, Any]) -> str:
    text = json.dumps(checked, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def derive_keys(rows: list[ImportRow]) -> None:
    """Give every keyless task, learning, goal and event a key from its content; repeats get .2, .3, ..."""
    seen: Counter[tuple[str, str, str]] = Counter()
    for row in rows:
        if row.source in KEYED_BY_CONTENT and row.item.get("key") is None and row.checked is not None:
            digest = _content_digest(row.checked)
            seen[row.owner, row.source, digest] += 1
            n = seen[row.owner, row.source, digest]
            row.item["key"] = f"{DERIVED_KEY_PREFIX}{digest}" + (f".{n}" if n > 1 else "")
