"""Export one owner's store as files the `import` command reads back: JSON Lines, one file per source, one item
per line in the write contract's fields (vocabulary.WRITE_CONTRACTS: `key`, `at`, `active` and the source's own),
with a `source` column so each file imports on its own.

    tasks.jsonl learnings.jsonl capabilities.jsonl goals.jsonl events.jsonl    items (import reads them)
    memories.jsonl                                  memories, but copies folded into another (import reads them)
    memory_versions.jsonl    the replaced texts of each memory, oldest first (the record; import skips them)
    scoring_configs.json     every scoring config version (shared by all owners), the active one marked
    log/                     with `include_log`: builds, candidates, the daily roll-up, the builds' events
    manifest.json            owner, time, rows per file, what was left out and why

An item without a caller's key is exported with its id as key (`id:<uuid>`), so importing the export twice
changes nothing the second time. Memories come in the order they were written (a conversation's turns in turn
order), so an import rebuilds each turn's context from the turn before it. A memory folded into another
(duplicate_of / merged_into) whose text is that one's, now or in one of its versions, is a copy and is left out
(counted in the manifest's `left_out`); one whose text differs (an arbiter found it adds nothing, by its words) is
exported as it was written, after the memory it was folded into, and the import stores it and has it judged
again: the rules fold it again, an LLM judges it anew (counted in `folded_memories_exported`). The build log's
own events (memory_retrieval) go with the log. Rows are streamed: an owner of any size fits in memory.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from .. import vocabulary
from ..infra.errors import ValidationError
from ..store.ingest import validate_owner
from ..vocabulary import EXPORTED_ID_KEY, LOG_EVENT_TYPE

FORMAT_VERSION = 1
STREAM_ROWS = 2_000
DOWNLOAD_APPLICATION = "memory-pipelines export"
"""The `application_name` of a streamed export's own connection (pg_stat_activity names it)."""

ITEM_COLUMNS: dict[str, tuple[str, dict[str, str]]] = {
    "task": ("tasks", {"title": "title", "description": "description", "task_type": "task_type",
                       "status": "status", "project": "project_key", "metadata": "metadata"}),
    "learning": ("learnings", {"title": "title", "content": "content", "task_type": "task_type",
                               "failure_class": "failure_class", "trigger_event": "trigger_event",
                               "category": "category", "metadata": "metadata"}),
    "capability": ("capabilities", {"name": "name", "description": "description"}),
    "goal": ("goals", {"title": "title", "description": "description", "status": "status",
                       "priority": "priority", "progress": "progress"}),
    "event": ("events", {"type": "type", "payload": "payload"}),
}
"""source -> (table, contract field -> column), as the write contract spells them."""
MANIFEST, VERSIONS, CONFIGS = "manifest.json", "memory_versions.jsonl", "scoring_configs.json"
RECORD_FILES = (MANIFEST, VERSIONS, CONFIGS)
"""What an export writes for the record beside its item files: never imported."""
FILES = {"task": "tasks.jsonl", "learning": "learnings.jsonl", "capability": "capabilities.jsonl",
         "goal": "goals.jsonl", "event": "events.jsonl", "memory": "memories.jsonl"}
LOG_EVENT = LOG_EVENT_TYPE  # reserved in the write contract: no caller's event has it


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _columns(conn: psycopg.Connection, table: str) -> set[str]:
    return {r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
        (table,))}


def _stream(conn: psycopg.Connection, name: str, query: str, params: tuple) -> Iterator[tuple]:
    cur = conn.cursor(name=f"export_{name}")
    try:
        cur.itersize = STREAM_ROWS
        cur.execute(query, params)
        for row in cur:  # noqa: UP028 (`yield from` would hand a close to the cursor, unguarded)
            yield row
    finally:
        with contextlib.suppress(psycopg.Error):  # a download cut short: its session may be gone already
            cur.close()


def _line(row: dict[str, Any]) -> str:
    return json.dumps({k: _plain(v) for k, v in row.items()}, ensure_ascii=False) + "\n"


def _write_lines(path: Path, rows: Iterator[dict[str, Any]]) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(_line(row))
            n += 1
    return n


def _items(conn: psycopg.Connection, owner: str, source: str) -> Iterator[dict[str, Any]]:
    table, fields = ITEM_COLUMNS[source]
    have = _columns(conn, table)
    key = "key" if "key" in have else "NULL"
    active = "is_active" if "is_active" in have else "true"
    skip = f" AND type <> '{LOG_EVENT}'" if source == "event" else ""
    cols = ", ".join(fields.values())
    query = (f"SELECT id::text, {key}, created_at, {active}, {cols} FROM {table} WHERE owner_id = %s{skip}"
             " ORDER BY created_at, id")
    for item_id, item_key, at, is_active, *values in _stream(conn, source, query, (owner,)):
        row = {"source": source, "key": item_key or f"{EXPORTED_ID_KEY}{item_id}", "at": at, "active": is_active}
        row.update({f: v for f, v in zip(fields, values, strict=True) if v is not None})
        yield row


FOLDED_COPY = (
    "EXISTS (SELECT 1 FROM memories t WHERE t.id = coalesce(m.metadata ->> 'duplicate_of',"
    " m.metadata ->> 'merged_into') AND (t.content_hash = m.content_hash OR EXISTS (SELECT 1 FROM memory_versions v"
    " WHERE v.memory_id = t.id AND v.content = m.content)))")
"""SQL, over a memory `m`: it is folded into a memory whose text, now or in one of its versions, is its own."""


def _memories(conn: psycopg.Connection, owner: str) -> Iterator[dict[str, Any]]:
    query = (
        "SELECT m.content, m.content_type, p.project_key, p.project_name, p.machine_name, p.project_path, m.ts,"
        " m.speaker, m.session FROM memories m JOIN projects p ON p.id = m.project_id"
        f" WHERE m.owner_id = %s AND (m.is_active OR NOT {FOLDED_COPY})"
        " ORDER BY m.turn IS NOT NULL, m.turn, m.created_at, m.id")
    names = ("content", "content_type", "project_key", "project_name", "machine_name", "project_path", "ts",
             "speaker", "session")
    for values in _stream(conn, "memories", query, (owner,)):
        yield {"source": "memory", **{k: v for k, v in zip(names, values, strict=True) if v is not None}}


def _versions(conn: psycopg.Connection, owner: str) -> Iterator[dict[str, Any]]:
    query = (
        "SELECT v.memory_id, p.project_key, v.version, v.content_type, v.content, v.summary, v.tags, v.ts,"
        " v.created_at, v.replaced_at FROM memory_versions v JOIN projects p ON p.id = v.project_id"
        " JOIN memories m ON m.id = v.memory_id AND m.is_active"
        " WHERE v.owner_id = %s ORDER BY v.memory_id, v.version")
    names = ("memory_id", "project_key", "version", "content_type", "content", "summary", "tags", "ts",
             "created_at", "replaced_at")
    for values in _stream(conn, "versions", query, (owner,)):
        yield dict(zip(names, values, strict=True))


def _log(conn: psycopg.Connection, owner: str, folder: Path) -> dict[str, int]:
    folder.mkdir()
    queries = {
        "retrievals.jsonl": "SELECT * FROM retrievals WHERE owner_id = %s ORDER BY created_at, id",
        "retrieval_candidates.jsonl": "SELECT c.* FROM retrieval_candidates c WHERE c.owner_id = %s"
                                      " ORDER BY c.retrieval_id, c.rank",
        "retrieval_daily.jsonl": "SELECT * FROM retrieval_daily WHERE owner_id = %s ORDER BY day, mode",
        "retrieval_daily_items.jsonl": "SELECT * FROM retrieval_daily_items WHERE owner_id = %s"
                                       " ORDER BY day, mode, source, age_bucket",
        "build_events.jsonl": f"SELECT id, type, payload, created_at FROM events WHERE owner_id = %s"
                              f" AND type = '{LOG_EVENT}' ORDER BY created_at, id",
    }
    counts = {}
    for name, query in queries.items():
        with conn.cursor(name=f"export_{name.split('.')[0]}") as cur:
            cur.itersize = STREAM_ROWS
            cur.execute(query, (owner,))
            cols = None

            def rows(cur=cur) -> Iterator[dict[str, Any]]:
                nonlocal cols
                for values in cur:
                    cols = cols or [d.name for d in cur.description]
                    yield dict(zip(cols, values, strict=True))

            counts[f"log/{name}"] = _write_lines(folder / name, rows())
    return counts


def export_lines(pool: ConnectionPool, owner: str) -> Iterator[str]:
    """Every item and memory of `owner` as JSON lines, items first, then memories in the order they were written:
    the export's item and memory files in one, which `import` reads back whole (each line names its `source`).
    One snapshot, streamed on a connection of its own (the pool's are left to the requests a slow reader would
    otherwise starve), cut when its reader takes nothing for `vocabulary.DOWNLOAD_IDLE_SECONDS`; the owner is
    checked before the first line."""
    owner = validate_owner(owner)

    def lines() -> Iterator[str]:
        # Its own connection, not the pool's: a reader that stops reading holds it as long as it likes.
        with psycopg.connect(pool.conninfo, connect_timeout=10, application_name=DOWNLOAD_APPLICATION) as conn, \
                conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true),"
                         " set_config('jit', 'off', true)", (f"{vocabulary.DOWNLOAD_IDLE_SECONDS}s",))  # as the pool's
            for source in ITEM_COLUMNS:
                yield from map(_line, _items(conn, owner, source))
            yield from map(_line, _memories(conn, owner))

    return lines()


def owner_has_rows(pool: ConnectionPool, owner: str) -> bool:
    """Whether `owner` has an item or a memory: an export of one without any is most likely a mistyped owner."""
    owner = validate_owner(owner)
    tables = [table for table, _fields in ITEM_COLUMNS.values()] + ["memories"]
    query = " OR ".join(f"EXISTS (SELECT 1 FROM {t} WHERE owner_id = %(owner)s)" for t in tables)
    with pool.connection() as conn:
        return bool(conn.execute(f"SELECT {query}", {"owner": owner}).fetchone()[0])


def _target(directory: str | Path) -> Path:
    if not isinstance(directory, str | Path) or not str(directory).strip():
        raise ValidationError("dir", "must be a folder path")
    path = Path(directory)
    try:
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise ValidationError("dir", f"{path} exists and is not an empty folder; export into a new one")
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # under a file, unwritable, read-only: the folder's fault, not a crash
        raise ValidationError("dir", f"cannot make the folder {path}: {exc.strerror or exc}") from None
    return path


def export_owner(pool: ConnectionPool, owner: str, directory: str | Path, *, include_log: bool = False
                 ) -> dict[str, Any]:
    """Write every source of `owner` into `directory` (new or empty), as described above; returns the manifest.
    One snapshot: the files agree with each other even while the owner writes."""
    owner = validate_owner(owner)
    if not isinstance(include_log, bool):
        raise ValidationError("include_log", "must be true or false")
    folder = _target(directory)
    files: dict[str, int] = {}
    with pool.connection() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        for source in ITEM_COLUMNS:
            files[FILES[source]] = _write_lines(folder / FILES[source], _items(conn, owner, source))
        files[FILES["memory"]] = _write_lines(folder / FILES["memory"], _memories(conn, owner))
        files[VERSIONS] = _write_lines(folder / VERSIONS, _versions(conn, owner))
        configs = conn.execute(
            "SELECT version, half_lives, mode_weights, params, is_active, note, fitted_on, evaluation, created_at,"
            " activated_at FROM scoring_configs ORDER BY version").fetchall()
        names = ("version", "half_lives", "mode_weights", "params", "is_active", "note", "fitted_on", "evaluation",
                 "created_at", "activated_at")
        (folder / CONFIGS).write_text(json.dumps(
            [{k: _plain(v) for k, v in zip(names, c, strict=True)} for c in configs], ensure_ascii=False, indent=1),
            encoding="utf-8")
        files[CONFIGS] = len(configs)
        if include_log:
            files.update(_log(conn, owner, folder / "log"))
        copies, folded = conn.execute(
            f"SELECT count(*) FILTER (WHERE {FOLDED_COPY}), count(*) FILTER (WHERE NOT {FOLDED_COPY})"
            " FROM memories m WHERE m.owner_id = %s AND NOT m.is_active", (owner,)).fetchone()
        left_out = {
            "folded_memories": int(copies),
            "build_events": 0 if include_log else int(conn.execute(
                "SELECT count(*) FROM events WHERE owner_id = %s AND type = %s", (owner, LOG_EVENT)).fetchone()[0]),
        }
    manifest = {"format": FORMAT_VERSION, "owner": owner, "exported_at": datetime.now(UTC).isoformat(),
                "files": files, "left_out": left_out, "folded_memories_exported": int(folded),
                "include_log": include_log}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest
