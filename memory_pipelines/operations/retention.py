"""Retention: the retrieval log's candidates and builds and the events, pruned past configurable ages, in small
batches, with the hit rates rolled up per day first.

Every context build logs a row and a row per scored candidate (about 30): at 13 builds/s, 34 million candidate
rows a day. A prune batch takes up to `batch_builds` builds (about 30 candidate rows each), locks them (skipping
builds a feedback request holds), deletes their rows and adds their counts to the daily roll-up
(`retrieval_daily`, `retrieval_daily_items`, sql/014) in the same short transaction: every logged row is counted
exactly once, live or rolled up, so the hit-rate history (context/history.py) and the tuner's report read the
same numbers before and after a prune. A batch waits at most LOCK_TIMEOUT for a row lock (then retries later):
it never holds up a feedback request, and deadlock detection never has to pick a victim among them.

Defaults (the ways-out page of the docs says why): candidates 30 days, builds 90 days, events 90 days. Batches
commit without waiting for the WAL flush and pause as long as they ran (`pause_share`).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ..infra.db import transaction
from ..infra.errors import ValidationError
from ..store.removal.unindex import unindex

log = logging.getLogger(__name__)

ENV = {
    "candidates": "MEMORY_PIPELINES_RETAIN_CANDIDATES",
    "builds": "MEMORY_PIPELINES_RETAIN_BUILDS",
    "events": "MEMORY_PIPELINES_RETAIN_EVENTS",
}
DEFAULT_AGES = {"candidates": timedelta(days=30), "builds": timedelta(days=90), "events": timedelta(days=90)}
BATCH_BUILDS = 1_000
"""Builds per prune transaction: about 30,000 candidate rows."""
BATCH_EVENTS = 20_000
PAUSE_SHARE = 1.0
LOCK_TIMEOUT = "200ms"
RETRIES = 20
"""A batch that met a lock is tried again this many times (after a growing pause), then left to the next run."""

AGE_EDGES = (0.0, 1.0, 7.0, 30.0, 90.0, 365.0)
AGE_LABELS = ("<1d", "1-7d", "7-30d", "30-90d", "90-365d", ">365d")
NO_AGE = "n/a"
"""The tuner's report buckets (tuning/report.py; a test keeps them equal)."""

MAX_AGE = timedelta(days=36_500)
"""A retention age longer than this (a century) is a typo, not a policy."""
MIN_AGE = timedelta(days=1)
"""The shortest age the settings, `memory-pipelines prune` and the Dagster config take: an events age under a
day would remove the events a context build reads (its last 24 h), and 0 empties the whole log of every owner."""
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_age(field: str, value: object) -> timedelta:
    """A retention age: a timedelta, a number of days, or text such as '30d', '12h', '90m', '3600s', '2w' (a bare
    number is days). ValidationError naming `field` for a negative one or anything that is not a duration."""
    if isinstance(value, timedelta):
        age = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or abs(value) > MAX_AGE.days:
            raise ValidationError(field, f"must be a duration of at most {MAX_AGE.days} days, got {value!r}")
        age = timedelta(days=float(value))
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match[1]) * _UNITS[match[2] or "d"]
        if seconds > MAX_AGE.total_seconds():
            raise ValidationError(field, f"must be a duration of at most {MAX_AGE.days} days, got {value!r}")
        age = timedelta(seconds=seconds)
    elif isinstance(value, str) and value.strip().startswith("-"):
        raise ValidationError(field, f"must not be negative, got {value!r}")
    else:
        raise ValidationError(field, f"must be a duration such as 30d, 12h, 90m or 3600s (a bare number is days),"
                                     f" got {value!r}")
    if age < timedelta(0):
        raise ValidationError(field, f"must not be negative, got {value!r}")
    if age > MAX_AGE:
        raise ValidationError(field, f"must be a duration of at most {MAX_AGE.days} days, got {value!r}")
    return age


def parse_setting_age(field: str, value: object) -> timedelta:
    """A retention age as an operator gives it (a setting, a CLI option, the Dagster config): `parse_age`, and at
    least MIN_AGE; ValidationError naming `field` otherwise."""
    age = parse_age(field, value)
    if age < MIN_AGE:
        raise ValidationError(field, f"must be at least 1 day (1d, 24h), got {value!r}: a shorter age removes "
                                     "what is still in use (events a context build reads, builds whose feedback is"
                                     " still to come), and 0 the whole log of every owner")
    return age


@dataclass(frozen=True)
class RetentionPolicy:
    """How long each part of the log is kept, and the prune's batch sizes."""

    candidates: timedelta = DEFAULT_AGES["candidates"]
    builds: timedelta = DEFAULT_AGES["builds"]
    events: timedelta = DEFAULT_AGES["events"]
    batch_builds: int = BATCH_BUILDS
    batch_events: int = BATCH_EVENTS
    pause_share: float = PAUSE_SHARE
    """After each batch, a pause of this share of the batch's own time: the prune takes at most 1 / (1 + share)
    of a core and of the disk's writes, whatever the machine."""

    def __post_init__(self) -> None:
        for name in ("batch_builds", "batch_events"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(name, f"must be a positive integer, got {value!r}")
        share = self.pause_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 100:
            raise ValidationError("pause_share", f"must be a number from 0 to 100, got {share!r}")
        for name in ("candidates", "builds", "events"):
            parse_age(name, getattr(self, name))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> RetentionPolicy:
        """Ages from MEMORY_PIPELINES_RETAIN_{CANDIDATES,BUILDS,EVENTS} (else the defaults), then `overrides`
        (candidates=, builds=, events=: anything `parse_age` reads, at least MIN_AGE; None keeps the value)."""
        import os

        env = os.environ if env is None else env
        for name in overrides:  # a misnamed age (older_than) would otherwise prune at the default ones
            if name not in DEFAULT_AGES:
                raise ValidationError(name, f"is not a retention part: give {', '.join(DEFAULT_AGES)}")
        ages = {}
        for part, default in DEFAULT_AGES.items():
            raw = overrides.get(part)
            if raw is None and env.get(ENV[part]):
                raw, name = env[ENV[part]], ENV[part]
            else:
                name = part
            ages[part] = default if raw is None else parse_setting_age(name, raw)
        return cls(**ages)

    def cutoffs(self, now: datetime) -> dict[str, datetime]:
        return {"candidates": now - self.candidates, "builds": now - self.builds, "events": now - self.events}


@dataclass
class PruneResult:
    """What one prune removed (rows per table), in how many batches and seconds."""

    removed: dict[str, int] = field(default_factory=lambda: {"retrieval_candidates": 0, "retrievals": 0,
                                                              "events": 0, "keyword_docs": 0})
    batches: int = 0
    retried: int = 0
    seconds: float = 0.0
    cutoffs: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    """Counted what a prune would remove; removed nothing."""

    def as_dict(self) -> dict[str, Any]:
        return {"removed": self.removed, "batches": self.batches, "retried": self.retried,
                "seconds": round(self.seconds, 3), "cutoffs": self.cutoffs, "dry_run": self.dry_run}


def _age_bucket_sql(column: str) -> str:
    whens = " ".join(f"WHEN {column} < {hi} THEN '{label}'" for hi, label in zip(AGE_EDGES[1:], AGE_LABELS,
                                                                               strict=False))
    return f"CASE WHEN {column} IS NULL THEN '{NO_AGE}' {whens} ELSE '{AGE_LABELS[-1]}' END"


_ROLL_UP_CANDIDATES = (
    "WITH b AS (SELECT id, (created_at AT TIME ZONE 'UTC')::date AS day, feedback_at IS NOT NULL AS fb"
    "           FROM retrievals WHERE id = ANY(%(ids)s)),"
    " gone AS (DELETE FROM retrieval_candidates c USING b WHERE c.retrieval_id = b.id"
    f"         RETURNING c.owner_id, b.day, c.mode, c.source, {_age_bucket_sql('c.age_days')} AS age_bucket,"
    "          c.injected, c.used, b.fb),"
    " added AS (INSERT INTO retrieval_daily_items AS d (owner_id, day, mode, source, age_bucket, candidates,"
    "           injected, candidates_fb, injected_fb, used_fb, used_injected_fb)"
    "   SELECT owner_id, day, mode, source, age_bucket, count(*), count(*) FILTER (WHERE injected),"
    "          count(*) FILTER (WHERE fb), count(*) FILTER (WHERE fb AND injected),"
    "          count(*) FILTER (WHERE fb AND used), count(*) FILTER (WHERE fb AND used AND injected)"
    "   FROM gone GROUP BY 1, 2, 3, 4, 5"
    "   ON CONFLICT (owner_id, day, mode, source, age_bucket) DO UPDATE SET"
    "     candidates = d.candidates + excluded.candidates, injected = d.injected + excluded.injected,"
    "     candidates_fb = d.candidates_fb + excluded.candidates_fb, injected_fb = d.injected_fb + excluded.injected_fb,"
    "     used_fb = d.used_fb + excluded.used_fb, used_injected_fb = d.used_injected_fb + excluded.used_injected_fb"
    "   RETURNING 1)"
    " SELECT (SELECT count(*) FROM gone)"
)

_ROLL_UP_BUILDS = (
    "WITH gone AS (DELETE FROM retrievals WHERE id = ANY(%(ids)s) RETURNING owner_id,"
    "              (created_at AT TIME ZONE 'UTC')::date AS day, mode, feedback_at IS NOT NULL AS fb),"
    " added AS (INSERT INTO retrieval_daily AS d (owner_id, day, mode, builds, with_feedback)"
    "   SELECT owner_id, day, mode, count(*), count(*) FILTER (WHERE fb) FROM gone GROUP BY 1, 2, 3"
    "   ON CONFLICT (owner_id, day, mode) DO UPDATE SET builds = d.builds + excluded.builds,"
    "     with_feedback = d.with_feedback + excluded.with_feedback RETURNING 1)"
    " SELECT (SELECT count(*) FROM gone)"
)


def _lock_builds(conn: psycopg.Connection, before: datetime, limit: int, *, kept_only: bool) -> list[str]:
    """The oldest builds created before `before` (only those whose candidates are kept, when `kept_only`),
    locked; builds a feedback request holds are skipped (the next batch or run takes them)."""
    kept = " AND candidates_pruned_at IS NULL" if kept_only else ""
    return [r[0] for r in conn.execute(
        f"SELECT id FROM retrievals WHERE created_at < %s{kept} ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED",
        (before, limit))]


def _candidates_batch(conn: psycopg.Connection, before: datetime, limit: int, removed: dict[str, int]) -> int:
    ids = _lock_builds(conn, before, limit, kept_only=True)
    if ids:
        removed["retrieval_candidates"] += conn.execute(_ROLL_UP_CANDIDATES, {"ids": ids}).fetchone()[0]
        conn.execute("UPDATE retrievals SET candidates_pruned_at = now() WHERE id = ANY(%s)", (ids,))
    return len(ids)


def _builds_batch(conn: psycopg.Connection, before: datetime, limit: int, removed: dict[str, int]) -> int:
    ids = _lock_builds(conn, before, limit, kept_only=False)
    if ids:  # candidates a shorter build age left (or a run stopped between the two) are rolled up first
        removed["retrieval_candidates"] += conn.execute(_ROLL_UP_CANDIDATES, {"ids": ids}).fetchone()[0]
        removed["retrievals"] += conn.execute(_ROLL_UP_BUILDS, {"ids": ids}).fetchone()[0]
    return len(ids)


def _events_batch(conn: psycopg.Connection, before: datetime, limit: int, removed: dict[str, int]) -> int:
    rows = conn.execute(
        "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE created_at < %s ORDER BY created_at LIMIT %s"
        " FOR UPDATE SKIP LOCKED) RETURNING id::text, owner_id",
        (before, limit),
    ).fetchall()
    by_owner: dict[str, list[str]] = {}
    for event_id, owner in rows:
        by_owner.setdefault(owner, []).append(event_id)
    for owner in sorted(by_owner):  # one order for every batch: no two lock each other's owners in turn
        removed["keyword_docs"] += unindex(conn, "event", owner, by_owner[owner])
    removed["events"] += len(rows)
    return len(rows)


Batch = Callable[[psycopg.Connection, datetime, int, dict[str, int]], int]


def _run(pool: ConnectionPool, batch: Batch, before: datetime, limit: int, pause_share: float, result: PruneResult,
         progress: Callable[[PruneResult], None] | None) -> None:
    """Run `batch` in its own short transaction until it finds nothing; a lock it met is retried after a pause."""
    failures = 0
    while True:
        removed = dict.fromkeys(result.removed, 0)
        started = time.perf_counter()
        try:
            with transaction(pool) as conn:
                conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                # A crash loses the batch's deletes and its roll-up together (one transaction): no flush to wait for.
                conn.execute("SET LOCAL synchronous_commit = off")
                found = batch(conn, before, limit, removed)
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            failures += 1
            result.retried += 1
            if failures > RETRIES:
                log.warning("retention: a batch met locks %s times; the rest is left to the next run", failures)
                return
            time.sleep(min(0.05 * failures, 1.0))
            continue
        failures = 0
        if not found:
            return
        result.batches += 1
        for table, n in removed.items():
            result.removed[table] += n
        if progress:
            progress(result)
        time.sleep(pause_share * (time.perf_counter() - started))


def prune(
    pool: ConnectionPool,
    policy: RetentionPolicy | None = None,
    *,
    now: datetime | None = None,
    progress: Callable[[PruneResult], None] | None = None,
) -> PruneResult:
    """Prune the retrieval log's candidates, then its builds, then the events, past the policy's ages (each
    rolled up into the daily tables as it goes); returns the rows removed per table."""
    policy = policy or RetentionPolicy.from_env()
    now = now or datetime.now(UTC)
    cutoffs = policy.cutoffs(now)
    result = PruneResult(cutoffs={k: v.isoformat() for k, v in cutoffs.items()})
    started = time.perf_counter()
    for batch, part, size in ((_candidates_batch, "candidates", policy.batch_builds),
                              (_builds_batch, "builds", policy.batch_builds),
                              (_events_batch, "events", policy.batch_events)):
        _run(pool, batch, cutoffs[part], size, policy.pause_share, result, progress)
    result.seconds = time.perf_counter() - started
    return result


_WOULD_PRUNE = (
    "SELECT (SELECT count(*) FROM retrieval_candidates c JOIN retrievals r ON r.id = c.retrieval_id"
    "        WHERE r.created_at < greatest(%(candidates)s, %(builds)s)),"
    " (SELECT count(*) FROM retrievals WHERE created_at < %(builds)s),"
    " (SELECT count(*) FROM events WHERE created_at < %(events)s),"
    " (SELECT count(*) FROM keyword_docs d JOIN events e ON d.source = 'event' AND d.item_id = e.id::text"
    "        WHERE e.created_at < %(events)s)"
)


def would_prune(pool: ConnectionPool, policy: RetentionPolicy | None = None, *,
                now: datetime | None = None) -> PruneResult:
    """What `prune` would remove now, per table (a dry run: one read, nothing removed)."""
    policy = policy or RetentionPolicy.from_env()
    cutoffs = policy.cutoffs(now or datetime.now(UTC))
    started = time.perf_counter()
    with pool.connection() as conn:
        counts = conn.execute(_WOULD_PRUNE, cutoffs).fetchone()
    result = PruneResult(cutoffs={k: v.isoformat() for k, v in cutoffs.items()}, dry_run=True)
    result.removed = dict(zip(result.removed, (int(n) for n in counts), strict=True))
    result.seconds = time.perf_counter() - started
    return result


def _rows(conn: psycopg.Connection, table: str) -> tuple[int, bool]:
    """(rows, exact): the planner's estimate for a large table (counting 100M rows takes minutes), else a count."""
    estimate = conn.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", (table,)).fetchone()[0]
    if estimate is not None and estimate > 1_000_000:
        return int(estimate), False
    return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]), True


def log_status(conn: psycopg.Connection) -> dict[str, Any]:
    """The log's size and the oldest row kept: per table its rows (estimated past a million), bytes on disk
    and oldest row's time; the days and rows of the roll-up."""
    oldest = {
        "retrievals": "SELECT min(created_at) FROM retrievals",
        "retrieval_candidates": "SELECT min(created_at) FROM retrievals WHERE candidates_pruned_at IS NULL",
        "events": "SELECT min(created_at) FROM events",
    }
    out: dict[str, Any] = {}
    for table, query in oldest.items():
        rows, exact = _rows(conn, table)
        first = conn.execute(query).fetchone()[0]
        out[table] = {"rows": rows, "exact": exact, "oldest": first.isoformat() if first else None,
                      "bytes": int(conn.execute("SELECT pg_total_relation_size(%s::regclass)", (table,)).fetchone()[0])}
    days, first_day = conn.execute("SELECT count(DISTINCT day), min(day) FROM retrieval_daily_items").fetchone()
    out["rolled_up"] = {"days": int(days), "first_day": first_day.isoformat() if first_day else None}
    return out


def format_log_status(info: Mapping[str, Any]) -> list[str]:
    """Lines for `memory-pipelines status`."""
    lines = []
    for table in ("retrieval_candidates", "retrievals", "events"):
        t = info[table]
        size = f"{t['rows']:,}" if t["exact"] else f"~{t['rows']:,}"
        lines.append(f"log {table:<21}{size:>12} rows {t['bytes'] / 1e6:>9.1f} MB  oldest {t['oldest'] or '-'}")
    r = info["rolled_up"]
    lines.append(f"log rolled up           {r['days']:>12} days  from {r['first_day'] or '-'}")
    return lines


def rolled_up_counts(
    conn: psycopg.Connection, *, since: datetime | None = None, owners: list[str] | None = None
) -> list[tuple[str, str, str, int, int, int, int]]:
    """The roll-up per (source, mode, age bucket) over days from `since` (all when None), for `owners` (all when
    None): candidates, injected, used and used-among-injected in builds with feedback (what the tuner's report
    counts of the live log)."""
    return [tuple(r) for r in conn.execute(
        "SELECT source, mode, age_bucket, sum(candidates_fb)::bigint, sum(injected_fb)::bigint, sum(used_fb)::bigint,"
        " sum(used_injected_fb)::bigint FROM retrieval_daily_items"
        " WHERE (%(since)s::timestamptz IS NULL OR day >= (%(since)s::timestamptz AT TIME ZONE 'UTC')::date)"
        " AND (%(owners)s::text[] IS NULL OR owner_id = ANY(%(owners)s)) AND candidates_fb > 0"
        " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        {"since": since, "owners": owners},
    )]
