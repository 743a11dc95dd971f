"""Bulk import of items (tasks, learnings, capabilities, goals, events) and memories from a file.

`import_file` reads JSON Lines, CSV or Parquet, checks every row against the write contract, and only then
writes: items through `write_items` in chunks (upserted by key, keyword-indexed at once, embedded later by the
worker or the backfill), memories through the memory ingest with deferred embedding (`wait=False`).

Rows. A row's source is its `source` column or the import's `source`; its owner is its `owner` column or the
import's `owner` (a row naming another owner than the import's is rejected) or else `default_owner`. Its time
is `at` (or `created_at`; `ts` for memories), kept as the item's own date. Other columns are the source's
contract fields (vocabulary.WRITE_CONTRACTS; memories: MEMORY_FIELDS). Empty cells and nulls are absent.

Idempotent. A row with a `key` upserts the owner's item of that key; a task, learning, goal or event without
one gets a key derived from its content (`row:` + a digest, and `.2`, `.3` for repeats of the same content in
the file), a capability is found by its name, a memory is recognised by its content in its project. So
importing the same file again changes nothing: every row comes back `unchanged`.

Bad lines and bad files. A row that breaks the contract, a line that is not JSON, a CSV record with more or
fewer cells than the header: a `Reject` with its line number (Parquet: its row number), the field and why.
With any reject nothing is written unless `skip_invalid` (then the good rows are, and every reject is still
reported). A file that is not what it claims is one `ImportFileError` and nothing is read on: not UTF-8 text,
a NUL byte, a JSON Lines file whose first line is not a JSON object, a CSV header with an empty or repeated
name or no known column, a Parquet file pyarrow cannot open.

JSON Lines and CSV are read line by line (the standard library's `json` and `csv`), which is what can tell
which line failed; Parquet through pyarrow, in record batches. The validated rows are held in memory until
they are written (about the size of the file, a few times over).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool

from ..infra.errors import UserError, ValidationError
from ..infra.llm import ChatLLM
from ..vocabulary import WRITABLE_SOURCES, WRITE_CONTRACTS
from .ingest import MemoryInput, ingest_memory, validate_owner
from .items import ItemError, parse_time, validate_item, write_items
from .memories import content_hash
from .projects import project_key_from_name

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
"""File suffix -> format."""
IMPORT_SOURCES: tuple[str, ...] = (*WRITABLE_SOURCES, "memory")
MEMORY_FIELDS: tuple[str, ...] = ("content", "content_type", "project_name", "project_key", "machine_name",
                                  "project_path", "ts", "speaker", "session")
"""The fields of a memory row (Memory.ingest's); `at` or `created_at` may stand for `ts`."""
ROW_COLUMNS = ("source", "owner", "created_at")
"""Columns that are not contract fields: where a row goes, and `at`'s other name."""
CHUNK_ROWS = 5_000
"""Items per `write_items` call: each is one transaction."""
MEMORY_CHUNK_ROWS = 200
"""Memories looked up at once for the unchanged ones (each new one is then its own ingest)."""
DERIVED_KEY_PREFIX = "row:"
KEYED_BY_CONTENT = ("task", "learning", "goal", "event")
"""Sources whose rows without a key get one derived from their content (a capability's name is its key)."""

csv.field_size_limit(max(csv.field_size_limit(), 16 * 1024 * 1024))  # a long cell is a field over its limit

_INT = re.compile(r"[+-]?\d+")
_TRUE, _FALSE = {"true", "t", "yes", "y", "1"}, {"false", "f", "no", "n", "0"}


class ImportFileError(UserError):
    """The file as a whole cannot be read as the format it claims; nothing of it is imported."""


@dataclass(frozen=True)
class Reject:
    """A line (CSV, JSON Lines) or row (Parquet) that is not imported, the field at fault and why."""

    line: int
    field: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "field": self.field, "reason": self.reason}


@dataclass
class ImportReport:
    """What one import read, rejected and did. `counts`: source -> created / updated / unchanged."""

    path: str
    format: str
    rows: int = 0
    valid: int = 0
    valid_by_source: dict[str, int] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    rejects: list[Reject] = field(default_factory=list)
    written: bool = False
    dry_run: bool = False
    stopped: str | None = None
    read_seconds: float = 0.0
    write_seconds: float = 0.0

    def add(self, source: str, action: str, n: int = 1) -> None:
        per = self.counts.setdefault(source, {"created": 0, "updated": 0, "unchanged": 0})
        per[action] += n

    @property
    def totals(self) -> dict[str, int]:
        out = {"created": 0, "updated": 0, "unchanged": 0}
        for per in self.counts.values():
            for action, n in per.items():
                out[action] += n
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "rows": self.rows, "valid": self.valid,
                "valid_by_source": self.valid_by_source, "rejected": len(self.rejects), "written": self.written,
                "dry_run": self.dry_run,
                "stopped": self.stopped, "totals": self.totals, "counts": self.counts,
                "rejects": [r.as_dict() for r in self.rejects],
                "read_seconds": round(self.read_seconds, 3), "write_seconds": round(self.write_seconds, 3)}


@dataclass
class _Row:
    line: int
    source: str
    owner: str
    item: dict[str, Any]  # what write_items takes, or a memory's fields
    checked: dict[str, Any] | None = None  # the item as validate_item returned it (not for memories)


# --- reading -------------------------------------------------------------------------------------------------


def file_format(path: Path, given: str | None = None) -> str:
    """The format named, or the one of the file's suffix; ImportFileError for a suffix it does not know."""
    if given:
        if given not in set(FORMATS.values()):
            raise ImportFileError(f"format {given!r} is not one of jsonl, csv, parquet")
        return given
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ImportFileError(f"{path.name}: cannot tell the format from its suffix {path.suffix!r}. Fix: name it "
                              f"{', '.join(FORMATS)}, or give the format (jsonl, csv, parquet)")
    return fmt


def _known_columns() -> set[str]:
    names = {"key", "at", *ROW_COLUMNS, *MEMORY_FIELDS}
    for specs in WRITE_CONTRACTS.values():
        names.update(s.name for s in specs)
    return names


def _check_columns(path: Path, columns: list[str], what: str) -> None:
    """A header must name each column once, and at least one of them must be a field of some source."""
    blank = [i + 1 for i, c in enumerate(columns) if not c]
    if blank:
        raise ImportFileError(f"{path.name}: column {blank[0]} of the {what} has no name")
    twice = sorted(c for c, n in Counter(columns).items() if n > 1)
    if twice:
        raise ImportFileError(f"{path.name}: the {what} names column {twice[0]!r} twice")
    if columns and not set(columns) & _known_columns():
        shown = ", ".join(repr(c[:40]) for c in columns[:5])
        raise ImportFileError(f"{path.name}: none of the columns ({shown}) is a field of any source; is it really "
                              f"{'CSV with a header row' if what == 'header' else 'a table of items'}?")


def _decoded(path: Path, lineno: int, raw: bytes) -> str:
    if b"\x00" in raw:
        raise ImportFileError(f"{path.name}: line {lineno} holds a NUL byte: a binary file, not text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportFileError(f"{path.name}: line {lineno} is not UTF-8 text (byte {exc.start + 1}): "
                              "is it the format it claims?") from None


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any] | Reject]]:
    """(line number, object) per non-blank line; a line that is not a JSON object is a Reject, unless it is the
    first one: then the file is not JSON Lines (an ImportFileError)."""
    first = True
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            text = _decoded(path, lineno, raw).strip()
            if lineno == 1:
                text = text.removeprefix("\ufeff")
            if not text:
                continue
            try:
                value = json.loads(text)
                problem = None if isinstance(value, dict) else f"must be a JSON object, got {type(value).__name__}"
            except json.JSONDecodeError as exc:
                problem = f"is not valid JSON ({exc.msg} at column {exc.colno})"
            if problem and first:
                raise ImportFileError(f"{path.name}: line {lineno} {problem}: not JSON Lines (one JSON object "
                                      "per line)")
            first = False
            yield lineno, Reject(lineno, "line", problem) if problem else value


def read_csv(path: Path) -> Iterator[tuple[int, dict[str, str] | Reject]]:
    """(line number where the record starts, {column: cell}) per record; empty cells are left out. A record with
    more or fewer cells than the header is a Reject."""
    with path.open("rb") as probe:
        head = probe.read(1 << 16)
    if b"\x00" in head:
        raise ImportFileError(f"{path.name}: holds NUL bytes: a binary file, not CSV")
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                return
            columns = [c.strip() for c in header]
            _check_columns(path, columns, "header")
            start = reader.line_num + 1
            for cells in reader:
                line, start = start, reader.line_num + 1
                if not cells or cells == [""]:
                    continue
                if len(cells) != len(columns):
                    yield line, Reject(line, "line", f"has {len(cells)} cells, the header {len(columns)}")
                    continue
                yield line, {c: v for c, v in zip(columns, cells, strict=True) if v != ""}
    except UnicodeDecodeError as exc:
        raise ImportFileError(f"{path.name}: is not UTF-8 text (byte {exc.start + 1}): is it CSV?") from None
    except csv.Error as exc:
        raise ImportFileError(f"{path.name}: is not readable CSV: {exc}") from None


def _plain(value: Any) -> Any:
    """A Parquet cell as the contract reads it: None for nulls and NaN, dates as ISO text, maps as dicts."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, date) and not isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return dict(value)  # a Parquet map column
    return value


def read_parquet(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number from 1, {column: value}) per row; nulls are left out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise ImportFileError(f"{path.name}: is not a Parquet file ({str(exc).splitlines()[0][:200]})") from None
    _check_columns(path, list(table.schema_arrow.names), "schema")
    row = 0
    try:
        for batch in table.iter_batches(batch_size=10_000):
            for record in batch.to_pylist():
                row += 1
                yield row, {k: v for k, v in ((k, _plain(v)) for k, v in record.items()) if v is not None}
    except pa.ArrowException as exc:
        raise ImportFileError(f"{path.name}: row {row + 1} cannot be read ({str(exc).splitlines()[0][:200]})") from None


def read_rows(path: Path, fmt: str) -> Iterator[tuple[int, dict[str, Any] | Reject]]:
    """The file's rows with their line (row) numbers, parse failures as Rejects."""
    return {"jsonl": read_jsonl, "csv": read_csv, "parquet": read_parquet}[fmt](path)


# --- one row -------------------------------------------------------------------------------------------------


def _from_text(kind: str, name: str, value: str) -> Any:
    """A CSV cell as the contract's kind: integers, booleans and JSON objects are spelled as text there."""
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
            raise ItemError(name, "must be a JSON object (JSON text in the cell)") from None
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
            raw[name] = _from_text(kind, name, value)
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
    if row_owner is not None and owner is not None and row_owner != owner:
        raise ItemError("owner", f"is {str(row_owner)[:40]!r}, but the import is {owner!r}'s")
    who = row_owner if row_owner is not None else (owner or default_owner)
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
                            " (a memory has no key: a re-import finds it by its content)")
    return raw


def prepare_row(raw: Mapping[str, Any], *, source: str | None, owner: str | None, default_owner: str | None,
                now: datetime, cells_are_text: bool = False) -> _Row:
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
        return _Row(0, src, who, raw)
    return _Row(0, src, who, raw, validate_item(src, raw, now=now))


def _content_digest(checked: Mapping[str, Any]) -> str:
    text = json.dumps(checked, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _derive_keys(rows: list[_Row]) -> None:
    """Give every keyless task, learning, goal and event a key from its content; repeats get .2, .3, ..."""
    seen: Counter[tuple[str, str, str]] = Counter()
    for row in rows:
        if row.source in KEYED_BY_CONTENT and row.item.get("key") is None and row.checked is not None:
            digest = _content_digest(row.checked)
            seen[row.owner, row.source, digest] += 1
            n = seen[row.owner, row.source, digest]
            row.item["key"] = f"{DERIVED_KEY_PREFIX}{digest}" + (f".{n}" if n > 1 else "")


# --- writing -------------------------------------------------------------------------------------------------


def _chunks(rows: list[_Row], size: int) -> Iterator[list[_Row]]:
    """Runs of at most `size` rows in which no key (nor a capability's name) repeats: a later row with the same
    key starts the next chunk, so it updates what the earlier one wrote."""
    chunk: list[_Row] = []
    names: set[tuple[str, Any]] = set()
    for row in rows:
        key = row.item.get("key")
        key = key.strip() if isinstance(key, str) else key  # as validate_item leaves it
        marks = {("key", key)} if key is not None else set()
        if row.source == "capability":
            marks.add(("name", str(row.item.get("name", "")).strip()))
        if len(chunk) >= size or marks & names:
            yield chunk
            chunk, names = [], set()
        chunk.append(row)
        names |= marks
    if chunk:
        yield chunk


def _write_item_rows(pool: ConnectionPool, owner: str, source: str, rows: list[_Row], report: ImportReport,
                     skip_invalid: bool, progress: Callable[[int], None]) -> bool:
    """Write one owner's rows of one source chunk by chunk; False when a row failed at write time (a conflict
    only the database sees) and the import stops there."""
    for chunk in _chunks(rows, CHUNK_ROWS):
        while chunk:
            try:
                result = write_items(pool, owner, source, [r.item for r in chunk])
            except ItemError as exc:
                if exc.index is None:
                    raise
                bad = chunk[exc.index]
                report.rejects.append(Reject(bad.line, exc.field, exc.message))
                if not skip_invalid:
                    report.stopped = f"line {bad.line}: {exc.field}: {exc.message}"
                    return False
                chunk = chunk[: exc.index] + chunk[exc.index + 1:]
                report.valid -= 1
                report.valid_by_source[source] -= 1
                continue
            for action, n in result.counts.items():
                report.add(source, action, n)
            progress(len(chunk))
            break
    return True


def _stored_memories(pool: ConnectionPool, owner: str, hashes: list[str]) -> set[tuple[str, str]]:
    """(project_key, content hash) of the owner's active memories with one of these contents."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT p.project_key, m.content_hash FROM memories m JOIN projects p ON p.id = m.project_id"
            " WHERE m.owner_id = %s AND m.is_active AND m.content_hash = ANY(%s)", (owner, hashes)
        ).fetchall()
    return {(k, h) for k, h in rows}


def _project_key(fields: Mapping[str, Any]) -> str:
    """The project key the ingest files a memory under (its own, or one made from the project's name)."""
    return str(fields.get("project_key") or "").strip() or project_key_from_name(str(fields.get("project_name")))


def _write_memory_rows(pool: ConnectionPool, embedder: Any, llm: ChatLLM | None, owner: str, rows: list[_Row],
                       report: ImportReport, progress: Callable[[int], None]) -> None:
    """Each memory not stored yet (same content in the same project) through the ingest, embedding deferred."""
    for start in range(0, len(rows), MEMORY_CHUNK_ROWS):
        chunk = rows[start:start + MEMORY_CHUNK_ROWS]
        marks = [(_project_key(r.item), content_hash(r.item["content"])) for r in chunk]
        stored = _stored_memories(pool, owner, [h for _k, h in marks])
        for row, mark in zip(chunk, marks, strict=True):
            if mark in stored:
                report.add("memory", "unchanged")
                continue
            f = row.item
            ingest_memory(pool, embedder, llm, owner, content=f["content"], content_type=f["content_type"],
                          project_name=f.get("project_name"), project_key=f.get("project_key"),
                          machine_name=f.get("machine_name"), project_path=f.get("project_path"), ts=f.get("ts"),
                          speaker=f.get("speaker"), session=f.get("session"), wait=False)
            stored.add(mark)
            report.add("memory", "created")
        progress(len(chunk))


def import_rows(
    pool: ConnectionPool | None,
    rows: Iterable[tuple[int, Mapping[str, Any] | Reject]],
    report: ImportReport,
    *,
    embedder: Any = None,
    llm: ChatLLM | None = None,
    source: str | None = None,
    owner: str | None = None,
    default_owner: str | None = None,
    dry_run: bool = False,
    skip_invalid: bool = False,
    cells_are_text: bool = False,
    bar: Callable[[int, str], Any] | None = None,
) -> ImportReport:
    """Check every (line, row), then write the good ones unless a row was rejected (and not `skip_invalid`) or
    `dry_run`; fills and returns `report`. `pool` may be None for a dry run; `embedder` is needed for memory
    rows only."""
    if source is not None and source not in IMPORT_SOURCES:
        raise ValidationError("source", f"must be one of {list(IMPORT_SOURCES)}, got {source!r}")
    if owner is not None:
        owner = validate_owner(owner)
    started = time.perf_counter()
    now = datetime.now(UTC)
    good: list[_Row] = []
    for line, raw in rows:
        report.rows += 1
        if isinstance(raw, Reject):
            report.rejects.append(raw)
            continue
        try:
            row = prepare_row(raw, source=source, owner=owner, default_owner=default_owner, now=now,
                              cells_are_text=cells_are_text)
        except ValidationError as exc:
            report.rejects.append(Reject(line, getattr(exc, "field", "?"), exc.message))
            continue
        row.line = line
        good.append(row)
    _derive_keys(good)
    report.valid = len(good)
    report.dry_run = dry_run
    report.read_seconds = time.perf_counter() - started
    for row in good:
        report.valid_by_source[row.source] = report.valid_by_source.get(row.source, 0) + 1
    if dry_run or (report.rejects and not skip_invalid):
        return report
    if pool is None:
        raise UserError("an import that writes needs the database pool")
    if any(r.source == "memory" for r in good) and embedder is None:
        raise UserError("memory rows need the embedder (its model decides the conflict threshold): pass embedder")
    started = time.perf_counter()
    groups: dict[tuple[str, str], list[_Row]] = {}
    for row in good:
        groups.setdefault((row.owner, row.source), []).append(row)
    with _progress(bar, len(good), f"importing {Path(report.path).name}") as progress:
        for (who, src), group in groups.items():
            if src == "memory":
                _write_memory_rows(pool, embedder, llm, who, group, report, progress)
            elif not _write_item_rows(pool, who, src, group, report, skip_invalid, progress):
                break
    report.written = True
    report.write_seconds = time.perf_counter() - started
    return report


class _progress:
    """A progress callback over an optional bar factory (`bar(total, desc)` -> an object with update/close)."""

    def __init__(self, bar: Callable[[int, str], Any] | None, total: int, desc: str) -> None:
        self._bar = bar(total, desc) if bar is not None else None

    def __enter__(self) -> Callable[[int], None]:
        return self._bar.update if self._bar is not None else (lambda _n: None)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def import_file(
    pool: ConnectionPool | None,
    path: str | Path,
    *,
    embedder: Any = None,
    llm: ChatLLM | None = None,
    source: str | None = None,
    owner: str | None = None,
    default_owner: str | None = None,
    fmt: str | None = None,
    dry_run: bool = False,
    skip_invalid: bool = False,
    bar: Callable[[int, str], Any] | None = None,
) -> ImportReport:
    """Import one JSON Lines, CSV or Parquet file; see the module docstring. ImportFileError when the file is
    not what it claims (or missing); the report lists every rejected line."""
    path = Path(path)
    fmt = file_format(path, fmt)
    if not path.is_file():
        raise ImportFileError(f"{path}: no such file")
    report = ImportReport(path=str(path), format=fmt)
    return import_rows(pool, read_rows(path, fmt), report, embedder=embedder, llm=llm, source=source, owner=owner,
                       default_owner=default_owner, dry_run=dry_run, skip_invalid=skip_invalid,
                       cells_are_text=fmt == "csv", bar=bar)
