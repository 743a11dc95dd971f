"""Bulk import of items (tasks, learnings, capabilities, goals, events) and memories from a file.

`import_file` reads JSON Lines, CSV or Parquet, checks every row against the write contract, and only then
writes: items through `write_items` in chunks (upserted by key, keyword-indexed at once, embedded later by the
worker or the backfill), memories through the memory ingest with deferred embedding (`wait=False`).

Rows. A row's source is its `source` column or the import's `source`; its owner is its `owner` column, stripped,
or the import's `owner` (a row naming another owner than the import's, once stripped, is rejected) or else
`default_owner`. Its time is `at` (or `created_at`; `ts` for memories), kept as the item's own date. Other columns
are the source's contract fields (vocabulary.WRITE_CONTRACTS; memories: MEMORY_FIELDS). Empty cells and nulls are
absent.

Idempotent. A row with a `key` upserts the owner's item of that key; a task, learning, goal or event without
one gets a key derived from its content (`row:` + a digest, and `.2`, `.3` for repeats of the same content in
the file), a capability is found by its name, a memory is recognised by its content in its project (active, or folded
into another by the arbitration; a forgotten one is written again). So
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

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import psycopg
from psycopg_pool import ConnectionPool

from ..infra.db import FailFast
from ..infra.errors import UserError, ValidationError, database_failed
from ..infra.llm import ChatLLM
from .import_checks import IMPORT_SOURCES, ImportRow, derive_keys, prepare_row
from .import_files import FORMATS, ImportFileError, Reject, file_format, read_rows
from .ingest import ingest_memory, validate_owner
from .items import ItemError, write_items
from .memories import content_hash
from .projects import project_key_from_name

__all__ = ["FORMATS", "IMPORT_SOURCES", "ImportFileError", "ImportInterrupted", "ImportReport", "Reject",
           "file_format", "import_file", "import_rows", "prepare_row", "read_rows"]

CHUNK_ROWS = 5_000
"""Items per `write_items` call: each is one transaction."""
IMPORT_WRITERS = 2
"""Chunks written at once, each on its own connection: the server stores one while the next is prepared."""
MEMORY_CHUNK_ROWS = 200
"""Memories looked up at once for the unchanged ones (each new one is then its own ingest)."""

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


# --- writing -------------------------------------------------------------------------------------------------


def _chunks(rows: list[ImportRow], size: int, overlap: int) -> Iterator[tuple[list[ImportRow], bool]]:
    """Runs of at most `size` rows in which no key (nor a capability's name) repeats, each with whether it must wait
    for every run before it: when it repeats a key of one of the `overlap` runs before it (which may be under way
    beside it), it updates what they wrote. A repeat within a run starts the next run."""
    chunk: list[ImportRow] = []
    names: set[tuple[str, Any]] = set()
    recent: deque[set[tuple[str, Any]]] = deque(maxlen=overlap)
    waits = False
    for row in rows:
        key = row.item.get("key")
        key = key.strip() if isinstance(key, str) else key  # as validate_item leaves it
        marks = {("key", key)} if key is not None else set()
        if row.source == "capability":
            marks.add(("name", str(row.item.get("name", "")).strip()))
        if len(chunk) >= size or marks & names:
            yield chunk, waits
            recent.append(names)
            chunk, names, waits = [], set(), False
        waits = waits or any(marks & earlier for earlier in recent)
        chunk.append(row)
        names |= marks
    if chunk:
        yield chunk, waits


class ImportInterrupted(Exception):
    """The database failed in the middle of an import's writes (a restart, a lost connection): `report` counts
    the rows committed before it (each chunk is one transaction) and says so in `stopped`. The cause is the
    database's error. Importing the file again writes the rest, the rows counted coming back unchanged."""

    def __init__(self, report: ImportReport) -> None:
        super().__init__(f"{report.path}: import stopped: {report.stopped}")
        self.report = report


def _write_item_rows(pool: ConnectionPool, owner: str, source: str, rows: list[ImportRow], report: ImportReport,
                     skip_invalid: bool, progress: Callable[[int], None]) -> bool:
    """Write one owner's rows of one source, IMPORT_WRITERS chunks at a time (a run that repeats a key after
    the ones before it are written); False when a row failed at write time (a conflict only the database sees)
    and the import stops there (chunks already under way are still written and counted)."""
    ok = True
    failed: psycopg.OperationalError | None = None
    with ThreadPoolExecutor(max_workers=IMPORT_WRITERS, thread_name_prefix="import-write") as writers:
        running: list[tuple[Future, list[ImportRow]]] = []

        def settle(until: int) -> None:
            nonlocal ok, failed
            while len(running) > until:
                future, chunk = running.pop(0)
                try:
                    result = future.result()
                except psycopg.OperationalError as exc:  # the database went away: what committed stays
                    report.stopped = report.stopped or database_failed(exc)
                    failed = failed or exc
                    ok = False
                    continue
                except ItemError as exc:
                    if exc.index is None:
                        raise
                    bad = chunk[exc.index]
                    report.rejects.append(Reject(bad.line, exc.field, exc.message))
                    report.valid -= 1
                    report.valid_by_source[source] -= 1
                    if not skip_invalid:
                        report.stopped = report.stopped or f"line {bad.line}: {exc.field}: {exc.message}"
                        ok = False
                        continue
                    chunk = chunk[: exc.index] + chunk[exc.index + 1:]
                    if chunk:  # again, before anything after it
                        running.insert(0, (writers.submit(write_items, pool, owner, source,
                                                          [r.item for r in chunk]), chunk))
                    continue
                for action, n in result.counts.items():
                    report.add(source, action, n)
                progress(len(chunk))

        for chunk, waits in _chunks(rows, CHUNK_ROWS, IMPORT_WRITERS - 1):
            settle(0 if waits else IMPORT_WRITERS - 1)
            if not ok:
                break
            running.append((writers.submit(write_items, pool, owner, source, [r.item for r in chunk]), chunk))
        settle(0)
    if failed is not None:
        raise ImportInterrupted(report) from failed
    return ok


def _stored_memories(pool: ConnectionPool, owner: str, hashes: list[str]) -> set[tuple[str, str]]:
    """(project_key, content hash) of the owner's stored memories with one of these contents, active or folded
    into another by the arbitration (a forgotten memory is deleted, so it is written again)."""
    with pool.connection() as conn:
        rows = conn.execute(  # folded ones too: else each re-import stores them again and they fold again
            "SELECT p.project_key, m.content_hash FROM memories m JOIN projects p ON p.id = m.project_id"
            " WHERE m.owner_id = %s AND m.content_hash = ANY(%s)", (owner, hashes)
        ).fetchall()
    return {(k, h) for k, h in rows}


def _project_key(fields: Mapping[str, Any]) -> str:
    """The project key the ingest files a memory under (its own, or one made from the project's name)."""
    return str(fields.get("project_key") or "").strip() or project_key_from_name(str(fields.get("project_name")))


def _write_memory_rows(pool: ConnectionPool, embedder: Any, llm: ChatLLM | None, owner: str, rows: list[ImportRow],
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
    good: list[ImportRow] = []
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
    derive_keys(good)
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
    groups: dict[tuple[str, str], list[ImportRow]] = {}
    for row in good:
        groups.setdefault((row.owner, row.source), []).append(row)
    report.written = True  # from the first chunk on: an interrupted import has written what it counts
    # A server that dies mid-import stops it within seconds, not after the pool's 30 s wait for a connection.
    pool = cast(ConnectionPool, FailFast(pool))
    try:
        with _progress(bar, len(good), f"importing {Path(report.path).name}") as progress:
            for (who, src), group in groups.items():
                if src == "memory":
                    try:
                        _write_memory_rows(pool, embedder, llm, who, group, report, progress)
                    except psycopg.OperationalError as exc:  # the memories counted are stored
                        report.stopped = database_failed(exc)
                        raise ImportInterrupted(report) from exc
                elif not _write_item_rows(pool, who, src, group, report, skip_invalid, progress):
                    break
    finally:
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
