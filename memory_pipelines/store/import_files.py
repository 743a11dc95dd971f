"""Reading an import file: JSON Lines, CSV or Parquet rows with their line numbers, parse failures as Rejects.

JSON Lines and CSV are read line by line (the standard library's `json` and `csv`), which is what can tell
which line failed; Parquet through pyarrow, in record batches. A file that is not what it claims is one
`ImportFileError` and nothing is read on.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from ..infra.errors import UserError
from ..infra.json_members import RepeatedMemberError, loads_unique
from ..vocabulary import WRITE_CONTRACTS

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
"""File suffix -> format."""
MEMORY_FIELDS: tuple[str, ...] = ("content", "content_type", "project_name", "project_key", "machine_name",
                                  "project_path", "ts", "speaker", "session")
"""The fields of a memory row (Memory.ingest's); `at` or `created_at` may stand for `ts`."""
ROW_COLUMNS = ("source", "owner", "created_at")
"""Columns that are not contract fields: where a row goes, and `at`'s other name."""

csv.field_size_limit(max(csv.field_size_limit(), 16 * 1024 * 1024))  # a long cell is a field over its limit


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



def file_format(path: Path, given: str | None = None) -> str:
    """The format named, or the one of the file's suffix; ImportFileError for a folder or a suffix it does not
    know."""
    if path.is_dir():
        raise ImportFileError(f"{path}: is a directory; import one file of it at a time (an export's folder "
                              "whole: `memory-pipelines import DIR`, `Memory.import_path`)")
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


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _looks_utf16(head: bytes) -> bool:
    """A UTF-16 byte-order mark, or every other byte NUL (ASCII text in UTF-16 without a mark)."""
    if head.startswith(_UTF16_BOMS):
        return True
    sample = head[:512]
    return len(sample) >= 4 and (sample[1::2].count(0) == len(sample[1::2]) or
                                 sample[0::2].count(0) == len(sample[0::2]))


def _nul_error(path: Path, where: str, head: bytes) -> ImportFileError:
    """NUL bytes: UTF-16 text (said so, with the fix) or a binary file."""
    if _looks_utf16(head):
        return ImportFileError(f"{path.name}: {where} looks like UTF-16 text: convert it to UTF-8 (e.g. "
                               f"`iconv -f UTF-16 -t UTF-8 {path.name}`) and import that")
    return ImportFileError(f"{path.name}: {where} holds a NUL byte: a binary file, not text")


def _decoded(path: Path, lineno: int, raw: bytes) -> str:
    if b"\x00" in raw:
        raise _nul_error(path, f"line {lineno}", raw)
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
            twice = None
            try:
                value = loads_unique(text)
                problem = None if isinstance(value, dict) else f"must be a JSON object, got {type(value).__name__}"
            except RepeatedMemberError as exc:
                value, problem, twice = None, None, exc.member
            except json.JSONDecodeError as exc:
                problem = f"is not valid JSON ({exc.msg} at column {exc.colno})"
            if problem and first:
                raise ImportFileError(f"{path.name}: line {lineno} {problem}: not JSON Lines (one JSON object "
                                      "per line)")
            first = False
            if problem:
                yield lineno, Reject(lineno, "line", problem)
            elif twice is not None:
                yield lineno, Reject(lineno, twice, "is named twice in the row; name each member once")
            else:
                yield lineno, value


def read_csv(path: Path) -> Iterator[tuple[int, dict[str, str] | Reject]]:
    """(line number where the record starts, {column: cell}) per record; empty cells are left out. A record with
    more or fewer cells than the header is a Reject."""
    with path.open("rb") as probe:
        head = probe.read(1 << 16)
    if b"\x00" in head:
        if _looks_utf16(head):
            raise _nul_error(path, "the file", head)
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
