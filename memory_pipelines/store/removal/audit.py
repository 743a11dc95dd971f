"""The audit trail of removals: who removed what (source, id, rows per table) and when, never the content."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ...infra.auth import hash_key
from ...infra.errors import ValidationError
from ...vocabulary import MAX_NAME

CLI_ACTOR = "cli"
MAX_AUDIT_LIMIT = 200


def check_actor(actor: object) -> str:
    """Who removes: an API key's id, or 'cli' (an operator at the command line)."""
    if not isinstance(actor, str) or not actor.strip() or len(actor) > MAX_NAME:
        raise ValidationError("actor", f"must be a non-empty string of at most {MAX_NAME} characters")
    return actor.strip()


def key_id(pool: ConnectionPool, key: str) -> str | None:
    """The id of an active API key: who the audit trail names for a removal made with it."""
    with pool.connection() as conn:
        row = conn.execute("SELECT id::text FROM api_keys WHERE key_hash = %s AND revoked_at IS NULL",
                           (hash_key(key),)).fetchone()
    return row[0] if row else None


def write_audit(
    conn: psycopg.Connection,
    owner: str,
    actor: str,
    action: str,
    *,
    source: str | None,
    item_id: str | None,
    counts: dict[str, int],
) -> int:
    """Record one removal (in the removal's own transaction); returns the audit row's id."""
    return int(conn.execute(
        "INSERT INTO removals (owner_id, actor, action, source, item_id, counts) VALUES (%s, %s, %s, %s, %s, %s)"
        " RETURNING id",
        (owner, actor, action, source, item_id, Jsonb({t: int(n) for t, n in counts.items() if n})),
    ).fetchone()[0])


def _cursor(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    try:
        value = int(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii"))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        value = 0
    if not 0 < value < 2**63:  # an audit row's id (bigint)
        raise ValidationError("cursor", "is not a cursor returned by the audit trail; pass next_cursor back")
    return value


def audit_trail(pool: ConnectionPool, owner: str, *, limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
    """The owner's removals, newest first, a page at a time (`next_cursor` fetches the next page)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_AUDIT_LIMIT:
        raise ValidationError("limit", f"must be an integer from 1 to {MAX_AUDIT_LIMIT}")
    if cursor is not None and not isinstance(cursor, str):
        raise ValidationError("cursor", "must be a string")
    before = _cursor(cursor)
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT id, actor, action, source, item_id, counts, at FROM removals WHERE owner_id = %s"
            " AND (%s::bigint IS NULL OR id < %s) ORDER BY id DESC LIMIT %s",
            (owner, before, before, limit + 1),
        ).fetchall()
    page = rows[:limit]
    more = len(rows) > limit
    return {
        "removals": [
            {"id": r[0], "actor": r[1], "action": r[2], "source": r[3], "item_id": r[4], "counts": r[5],
             "at": r[6].isoformat()}
            for r in page
        ],
        "next_cursor": base64.urlsafe_b64encode(str(page[-1][0]).encode()).decode().rstrip("=") if more else None,
    }
