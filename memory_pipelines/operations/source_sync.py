"""Sync items from a team's own PostgreSQL tables, incrementally, with a watermark kept in our database.

Each sync (`$MEMORY_PIPELINES_HOME/sync.yaml`, or the file MEMORY_PIPELINES_SYNC names; JSON works too) reads one
table of another database and writes its rows as one source through `write_items`:

    syncs:
      - name: crm-lessons              # names the watermark: keep it once rows were synced
        url_env: CRM_DATABASE_URL      # or url: postgresql://... (url_env keeps the password out of the file)
        table: public.lessons          # schema.table
        source: learning               # task | learning | capability | goal | event
        owner: team-alpha              # or owner_column: team
        watermark: updated_at          # a column that grows when a row is written (timestamptz, or a serial id)
        columns:                       # contract field: column of the table; `key` is required
          key: id
          title: subject
          content: body
          at: created_at

A run reads the rows whose watermark column is at or past the stored watermark (all of them the first time),
through a server-side cursor in batches, and stores the largest value it wrote. The rows are keyed, so reading a
row again changes nothing: a run reads from the watermark itself (a row stamped with it that committed after the
last run comes in), and `overlap_seconds` (default 0) re-reads that much before it, for tables whose writers commit long
after they stamp a row. A run over a range (`since` <= watermark < `until`) reads exactly those rows
again and leaves the watermark alone. A row that breaks the contract is reported (its key, field and reason) and
skipped; the others are written.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from ..infra.errors import ConfigError
from ..infra.redact import redact
from ..store.imports import ImportReport, import_rows
from ..vocabulary import WRITABLE_SOURCES, WRITE_CONTRACTS, a_source

SYNC_ENV = "MEMORY_PIPELINES_SYNC"
BATCH_ROWS = 5_000
WATERMARK_PREFIX = "sync_watermark:"


@dataclass(frozen=True)
class SyncSpec:
    """One table of another database synced as one source."""

    name: str
    url: str
    table: tuple[str, ...]
    source: str
    watermark: str
    columns: Mapping[str, str]
    owner: str | None = None
    owner_column: str | None = None
    overlap_seconds: float = 0.0


@dataclass
class SyncResult:
    """What one sync read and did; `rejects` name each bad row by its key."""

    name: str
    source: str
    rows_read: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"created": 0, "updated": 0, "unchanged": 0})
    rejects: list[dict[str, Any]] = field(default_factory=list)
    watermark_before: Any = None
    watermark_after: Any = None
    ranged: bool = False
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "rows_read": self.rows_read, **self.counts,
                "rejected": len(self.rejects), "rejects": self.rejects[:100], "ranged": self.ranged,
                "watermark_before": _shown(self.watermark_before), "watermark_after": _shown(self.watermark_after),
                "seconds": round(self.seconds, 3),
                "rows_per_second": round(self.rows_read / self.seconds, 1) if self.seconds > 0 else 0.0}


def _shown(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


# --- configuration -------------------------------------------------------------------------------------------


def config_path(home: Path) -> Path:
    return Path(os.environ[SYNC_ENV]) if os.environ.get(SYNC_ENV) else home / "sync.yaml"


def _load_text(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        return json.loads(text)
    try:
        import yaml
    except ImportError:
        raise ConfigError(f"{path} is YAML, and PyYAML is not installed. Fix: pip install pyyaml, or write it as "
                          "JSON (sync.json, with MEMORY_PIPELINES_SYNC pointing at it)") from None
    return yaml.safe_load(text)


def _spec(entry: Any, where: str) -> SyncSpec:
    def need(key: str) -> Any:
        if not isinstance(entry, Mapping) or not entry.get(key):
            raise ConfigError(f"{where}: `{key}` is required")
        return entry[key]

    name, source, watermark, table = need("name"), need("source"), need("watermark"), need("table")
    if source not in WRITABLE_SOURCES:
        raise ConfigError(f"{where}: source must be one of {list(WRITABLE_SOURCES)}, not {source!r}")
    url = entry.get("url") or (os.environ.get(entry["url_env"]) if entry.get("url_env") else None)
    if not url:
        raise ConfigError(f"{where}: give `url`, or `url_env` naming a set environment variable"
                          + (f" ({entry['url_env']} is not set)" if entry.get("url_env") else ""))
    columns = need("columns")
    fields = {s.name for s in WRITE_CONTRACTS[source]}
    if not isinstance(columns, Mapping) or "key" not in columns:
        raise ConfigError(f"{where}: `columns` must map `key` (the table's id) and the {source}'s fields to columns")
    unknown = sorted(set(columns) - fields)
    if unknown:
        raise ConfigError(f"{where}: columns.{unknown[0]} is not a field of {a_source(source)}; the fields are "
                          + ", ".join(sorted(fields)))
    if bool(entry.get("owner")) == bool(entry.get("owner_column")):
        raise ConfigError(f"{where}: give exactly one of `owner` and `owner_column`")
    return SyncSpec(name=str(name), url=str(url), table=tuple(str(table).split(".")), source=source,
                    watermark=str(watermark), columns={str(k): str(v) for k, v in columns.items()},
                    owner=entry.get("owner"), owner_column=entry.get("owner_column"),
                    overlap_seconds=float(entry.get("overlap_seconds") or 0))


def load_syncs(path: Path) -> list[SyncSpec]:
    """The syncs a config file defines ([] when there is none); ConfigError naming what is wrong."""
    if not path.is_file():
        return []
    try:
        data = _load_text(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot be read ({str(exc).splitlines()[0]})") from None
    entries = (data or {}).get("syncs") if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: must hold `syncs:`, a list of syncs")
    specs = [_spec(e, f"{path.name}: syncs[{i}]") for i, e in enumerate(entries)]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: each sync needs its own name")
    return specs


# --- watermarks (in our database's `meta` table) ---------------------------------------------------------------


def read_watermark(pool: ConnectionPool, name: str) -> Any:
    with pool.connection() as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = %s", (WATERMARK_PREFIX + name,)).fetchone()
    if row is None:
        return None
    stored = json.loads(row[0])
    if "time" in stored:
        return datetime.fromisoformat(stored["time"])
    if "date" in stored:
        return date.fromisoformat(stored["date"])
    return Decimal(stored["decimal"]) if "decimal" in stored else stored["number"]


def write_watermark(pool: ConnectionPool, name: str, value: Any) -> None:
    """Store a watermark as JSON, keeping its type: a time, a date, an integer or a numeric."""
    if isinstance(value, datetime):
        stored: dict[str, Any] = {"time": value.isoformat()}
    elif isinstance(value, date):
        stored = {"date": value.isoformat()}
    elif isinstance(value, Decimal):
        stored = {"decimal": str(value)}
    else:
        stored = {"number": value}
    with pool.connection() as conn:
        conn.execute("INSERT INTO meta (key, value) VALUES (%s, %s)"
                     " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                     (WATERMARK_PREFIX + name, json.dumps(stored)))


# --- reading and writing ----------------------------------------------------------------------------------------


def _query(spec: SyncSpec, lower: Any, upper: Any) -> tuple[sql.Composed, list[Any]]:
    fields = list(spec.columns.items())
    wanted = [sql.Identifier(col) for _f, col in fields]
    if spec.owner_column:
        wanted.append(sql.Identifier(spec.owner_column))
    wanted.append(sql.Identifier(spec.watermark))
    wm = sql.Identifier(spec.watermark)
    where, params = [sql.SQL("{} IS NOT NULL").format(wm)], []
    if lower is not None:
        where.append(sql.SQL("{} >= %s").format(wm))
        params.append(lower)
    if upper is not None:
        where.append(sql.SQL("{} < %s").format(wm))
        params.append(upper)
    query = sql.SQL("SELECT {} FROM {} WHERE {} ORDER BY {}").format(
        sql.SQL(", ").join(wanted), sql.Identifier(*spec.table), sql.SQL(" AND ").join(where), wm)
    return query, params


def _batches(spec: SyncSpec, query: sql.Composed, params: list[Any]) -> Iterator[list[tuple]]:
    try:
        with psycopg.connect(spec.url, autocommit=False) as src, src.cursor(name=f"mp_sync_{os.getpid()}") as cur:
            cur.itersize = BATCH_ROWS
            cur.execute(query, params)
            while rows := cur.fetchmany(BATCH_ROWS):
                yield rows
    except psycopg.OperationalError as exc:
        raise ConfigError(f"sync {spec.name}: cannot reach its database ({redact(str(exc).splitlines()[0])})") from None
    except psycopg.Error as exc:
        raise ConfigError(f"sync {spec.name}: reading {'.'.join(spec.table)} failed: "
                          f"{redact(str(exc).splitlines()[0])}") from None


def sync(pool: ConnectionPool, spec: SyncSpec, *, since: Any = None, until: Any = None) -> SyncResult:
    """Read what is new since the stored watermark (or exactly [since, until)) and write it; see the module."""
    started = time.perf_counter()
    ranged = since is not None or until is not None
    result = SyncResult(spec.name, spec.source, ranged=ranged)
    result.watermark_before = read_watermark(pool, spec.name)
    if ranged:
        query, params = _query(spec, since, until)
    else:
        lower = result.watermark_before
        if lower is not None and spec.overlap_seconds:
            lower = (lower - timedelta(seconds=spec.overlap_seconds) if isinstance(lower, date)
                     else lower - int(spec.overlap_seconds))
        # from the watermark itself: a row stamped with it but committed after the last run is read (rows are
        # keyed: those read again are unchanged)
        query, params = _query(spec, lower, None)
    names = list(spec.columns)
    highest = result.watermark_before
    for rows in _batches(spec, query, params):
        keys: dict[int, Any] = {}
        marks: dict[int, Any] = {}
        records: list[tuple[int, dict[str, Any]]] = []
        for row in rows:
            result.rows_read += 1
            item = {f: v for f, v in zip(names, row, strict=False) if v is not None}
            if spec.owner_column:
                item["owner"] = row[len(names)]
            keys[result.rows_read] = item.get("key")
            records.append((result.rows_read, item))
            mark = marks[result.rows_read] = row[-1]
            if highest is None or mark > highest:
                highest = mark
        report = import_rows(pool, records, ImportReport(path=spec.name, format="postgres"), source=spec.source,
                             owner=spec.owner, skip_invalid=True)
        for action, n in report.totals.items():
            result.counts[action] += n
        # a row at the stored watermark is read again each run; its reject was reported by the run that stored it
        again = set() if ranged else {line for line, mark in marks.items() if mark == result.watermark_before}
        result.rejects += [{"key": None if keys.get(r.line) is None else str(_shown(keys[r.line])),
                            "field": r.field, "reason": r.reason}
                           for r in report.rejects if r.line not in again]
    if not ranged and highest is not None and highest != result.watermark_before:
        write_watermark(pool, spec.name, highest)
    result.watermark_after = read_watermark(pool, spec.name)
    result.seconds = time.perf_counter() - started
    return result


def parse_bound(value: str | None) -> Any:
    """A range bound from run config: an integer (a serial watermark) or an ISO 8601 time (UTC without zone)."""
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"{text!r} is not an ISO 8601 time (e.g. 2025-03-01T00:00:00Z) nor an integer") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when
