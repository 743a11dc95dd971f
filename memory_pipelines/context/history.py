"""The retrieval log read back, per owner: recent context builds with their items, scores and used marks, one
build with every scored candidate, and hit rates (used / injected, over builds that got feedback) per day.

What the web view and its JSON endpoints show. Every query is parameterised and scoped to the owner; a build
of another owner is "not found", exactly like a missing one.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ..infra.errors import NotFoundError, ValidationError
from ..infra.ids import is_uuid
from ..vocabulary import MAX_BUILDS, MAX_HISTORY_DAYS, SOURCES
from .scoring import PROFILE_SOURCES

_BUILD_COLUMNS = (
    "r.id::text, r.query, r.mode, r.token_budget, r.token_used, r.candidates_count, r.injected_count,"
    " r.config_version, r.degraded, r.randomized, r.created_at, r.feedback_at, r.exclude_session"
)
_ITEM_COLUMNS = (
    "c.retrieval_id::text, c.source, c.item_id, c.relevance, c.age_days, c.decay, c.mode_weight, c.score,"
    " c.rank, c.mmr_rank, c.tokens, c.injected, c.used, c.used_by"
)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None



def _encode_cursor(created_at: datetime, retrieval_id: str) -> str:
    raw = f"{created_at.isoformat()}|{retrieval_id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, retrieval_id = raw.split("|", 1)
        at = datetime.fromisoformat(stamp)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ValidationError("cursor", "is not a cursor returned by the build history") from exc
    if at.tzinfo is None or not is_uuid(retrieval_id):
        raise ValidationError("cursor", "is not a cursor returned by the build history")
    return at, retrieval_id


def _titles(conn: psycopg.Connection, owner: str, keys: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(source, id) → the item's current title; items deleted since the build have none."""
    out: dict[tuple[str, str], str] = {}
    for source in sorted({s for s, _ in keys}):
        spec = SOURCES.get(source)
        if spec is None or not spec.title_sql:
            continue
        ids = sorted(i for s, i in keys if s == source)
        if spec.id_type == "uuid":
            ids = [i for i in ids if is_uuid(i)]
        if not ids:
            continue
        rows = conn.execute(
            f"SELECT t.id::text, {spec.title_sql} FROM {spec.table} t"
            f" WHERE t.owner_id = %s AND t.id = ANY(%s::{spec.id_type}[])",
            (owner, ids),
        ).fetchall()
        out.update(((source, r[0]), r[1]) for r in rows)
    return out


def _item(row: tuple, titles: dict[tuple[str, str], str]) -> dict[str, Any]:
    _rid, source, item_id, relevance, age_days, decay, mode_weight, score, rank, mmr_rank, tokens, inj, used, by = row
    return {
        "source": source,
        "id": item_id,
        "title": titles.get((source, item_id)),
        "relevance": relevance,
        "age_days": age_days,
        "decay": decay,
        "mode_weight": mode_weight,
        "score": score,
        "rank": rank,
        "mmr_rank": mmr_rank,
        "tokens": tokens,
        "injected": inj,
        "used": used,
        "used_by": by,
    }


def _builds(conn: psycopg.Connection, owner: str, rows: list[tuple], all_candidates: bool) -> list[dict[str, Any]]:
    ids = [r[0] for r in rows]
    items = conn.execute(
        f"SELECT {_ITEM_COLUMNS} FROM retrieval_candidates c"
        " WHERE c.owner_id = %(owner)s AND c.retrieval_id = ANY(%(ids)s::uuid[]) AND (c.injected OR %(all)s)"
        " ORDER BY c.retrieval_id, c.mmr_rank NULLS LAST, c.rank",
        {"owner": owner, "ids": ids, "all": all_candidates},
    ).fetchall()
    titles = _titles(conn, owner, {(r[1], r[2]) for r in items})
    by_build: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
    for r in items:
        by_build[r[0]].append(_item(r, titles))
    out = []
    for rid, query, mode, budget, used, cands, injected, version, degraded, randomized, created, fb, left in rows:
        its = by_build[rid]
        out.append({
            "retrieval_id": rid,
            "query": query,
            "mode": mode,
            "token_budget": budget,
            "token_used": used,
            "candidates_count": cands,
            "injected_count": injected,
            "used_count": sum(1 for i in its if i["used"]),
            "config_version": version,
            "degraded": degraded,
            "randomized": randomized,
            "created_at": _iso(created),
            "feedback_at": _iso(fb),
            "exclude_session": left,
            "items": its,
        })
    return out


def recent_builds(
    pool: ConnectionPool, owner: str, *, limit: int = 20, cursor: str | None = None
) -> dict[str, Any]:
    """The owner's context builds, newest first, each with its injected items (block order), their score
    factors and whether feedback marked them used. Keyset-paged: pass `next_cursor` back as `cursor`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_BUILDS:
        raise ValidationError("limit", f"must be an integer from 1 to {MAX_BUILDS}")
    after = _decode_cursor(cursor) if cursor is not None else None
    with pool.connection() as conn:
        rows = conn.execute(
            f"SELECT {_BUILD_COLUMNS} FROM retrievals r WHERE r.owner_id = %(owner)s"
            " AND (%(at)s::timestamptz IS NULL OR (r.created_at, r.id) < (%(at)s, %(rid)s::uuid))"
            " ORDER BY r.created_at DESC, r.id DESC LIMIT %(n)s",
            {"owner": owner, "at": after[0] if after else None, "rid": after[1] if after else None, "n": limit + 1},
        ).fetchall()
        page = rows[:limit]
        builds = _builds(conn, owner, page, all_candidates=False) if page else []
    more = len(rows) > limit
    return {"builds": builds, "next_cursor": _encode_cursor(page[-1][10], page[-1][0]) if more else None}


def build_detail(pool: ConnectionPool, owner: str, retrieval_id: str) -> dict[str, Any]:
    """One of the owner's builds with every scored candidate (injected or not), in score order."""
    if not isinstance(retrieval_id, str) or not is_uuid(retrieval_id):
        raise NotFoundError(f"retrieval {retrieval_id} not found")
    with pool.connection() as conn:
        rows = conn.execute(
            f"SELECT {_BUILD_COLUMNS} FROM retrievals r WHERE r.owner_id = %s AND r.id = %s",
            (owner, retrieval_id),
        ).fetchall()
        if not rows:
            raise NotFoundError(f"retrieval {retrieval_id} not found")
        (build,) = _builds(conn, owner, rows, all_candidates=True)
    build["items"].sort(key=lambda i: i["rank"])
    return build


def _rate(used: int, injected: int) -> float | None:
    return round(used / injected, 4) if injected else None


def hit_rates(pool: ConnectionPool, owner: str, *, days: int = 30, today: date | None = None) -> dict[str, Any]:
    """Per UTC day of the last `days` (today included): builds, builds with feedback, items injected into and
    marked used in those (the profile's goals left out, as from a build's counts), and the hit rate used /
    injected (None on a day without feedback); the same over the whole window and per source."""
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_HISTORY_DAYS:
        raise ValidationError("days", f"must be an integer from 1 to {MAX_HISTORY_DAYS}")
    today = today or datetime.now(UTC).date()
    start = today - timedelta(days=days - 1)
    since = datetime(start.year, start.month, start.day, tzinfo=UTC)
    until = since + timedelta(days=days)
    window = {"owner": owner, "since": since, "until": until, "first": start, "end": start + timedelta(days=days),
              "profile": list(PROFILE_SOURCES)}  # goals go in first, whatever was asked, and are never marked
    with pool.connection() as conn:
        # Live rows plus the roll-up of pruned ones (operations/retention.py): each row is counted in one of the two.
        per_day = conn.execute(
            "SELECT day, sum(n)::bigint, sum(fb)::bigint FROM ("
            " SELECT (r.created_at AT TIME ZONE 'UTC')::date AS day, count(*) AS n, count(r.feedback_at) AS fb"
            " FROM retrievals r"
            " WHERE r.owner_id = %(owner)s AND r.created_at >= %(since)s AND r.created_at < %(until)s GROUP BY 1"
            " UNION ALL SELECT day, builds, with_feedback FROM retrieval_daily"
            " WHERE owner_id = %(owner)s AND day >= %(first)s AND day < %(end)s) s GROUP BY day",
            window,
        ).fetchall()
        marks = conn.execute(
            "SELECT day, source, sum(n)::bigint, sum(u)::bigint FROM ("
            " SELECT (r.created_at AT TIME ZONE 'UTC')::date AS day, c.source, count(*) AS n,"
            " count(*) FILTER (WHERE c.used) AS u"
            " FROM retrievals r JOIN retrieval_candidates c ON c.retrieval_id = r.id AND c.owner_id = r.owner_id"
            " WHERE r.owner_id = %(owner)s AND r.created_at >= %(since)s AND r.created_at < %(until)s"
            " AND r.feedback_at IS NOT NULL AND c.injected AND c.source <> ALL(%(profile)s) GROUP BY 1, 2"
            " UNION ALL SELECT day, source, injected_fb, used_injected_fb FROM retrieval_daily_items"
            " WHERE owner_id = %(owner)s AND day >= %(first)s AND day < %(end)s AND injected_fb > 0"
            " AND source <> ALL(%(profile)s)) s"
            " GROUP BY day, source",
            window,
        ).fetchall()
    counts = {d: (int(n), int(fb)) for d, n, fb in per_day}
    injected: dict[date, int] = {}
    used: dict[date, int] = {}
    by_source: dict[str, list[int]] = {}
    for d, source, n_injected, n_used in marks:
        injected[d] = injected.get(d, 0) + int(n_injected)
        used[d] = used.get(d, 0) + int(n_used)
        tally = by_source.setdefault(source, [0, 0])
        tally[0] += int(n_injected)
        tally[1] += int(n_used)
    daily = []
    for k in range(days):
        d = start + timedelta(days=k)
        n, fb = counts.get(d, (0, 0))
        i, u = injected.get(d, 0), used.get(d, 0)
        daily.append({"day": d.isoformat(), "builds": n, "with_feedback": fb, "injected": i, "used": u,
                      "hit_rate": _rate(u, i)})
    total_i, total_u = sum(injected.values()), sum(used.values())
    return {
        "days": days,
        "since": start.isoformat(),
        "until": today.isoformat(),
        "daily": daily,
        "total": {
            "builds": sum(n for n, _ in counts.values()),
            "with_feedback": sum(fb for _, fb in counts.values()),
            "injected": total_i,
            "used": total_u,
            "hit_rate": _rate(total_u, total_i),
        },
        "by_source": [
            {"source": s, "injected": i, "used": u, "hit_rate": _rate(u, i)}
            for s, (i, u) in sorted(by_source.items(), key=lambda kv: (-kv[1][0], kv[0]))
        ],
    }
