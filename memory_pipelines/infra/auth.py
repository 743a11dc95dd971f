"""API keys: `mp_` + 32 random bytes (URL-safe base64). Only the key's sha-256 is stored, with a short
prefix for listing; the key itself is returned once, by `create_key`.

Lookup is by hash, so the database never compares the secret itself and timing reveals nothing
about it. Revocation takes effect on the next request (nothing is cached).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import datetime
from typing import Any

from psycopg_pool import ConnectionPool

from ..vocabulary import MAX_KEY_CHARS, MAX_NAME
from .errors import ValidationError, check_printable

KEY_PREFIX = "mp_"
PREFIX_CHARS = 11  # "mp_" + 8 characters (48 random bits) shown in listings
LAST_USED_RESOLUTION = "60 seconds"  # last_used_at is written at most this often per key


def hash_key(key: str) -> str:
    """sha-256 hex digest of the key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def create_key(pool: ConnectionPool, owner: str, name: str | None = None) -> tuple[str, str]:
    """(key id, key) for a new key of `owner`. Store the key now: it cannot be shown again."""
    if not isinstance(owner, str) or not owner.strip() or len(owner.strip()) > MAX_NAME:
        raise ValidationError("owner", f"must be a non-empty string of at most {MAX_NAME} characters")
    check_printable("owner", owner)
    if name is not None and (not isinstance(name, str) or len(name) > MAX_NAME):
        raise ValidationError("name", f"must be a string of at most {MAX_NAME} characters")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with pool.connection() as conn:
        row = conn.execute(
            "INSERT INTO api_keys (owner_id, key_hash, prefix, name) VALUES (%s, %s, %s, %s)"
            " RETURNING id::text",
            (owner.strip(), hash_key(key), key[:PREFIX_CHARS], name or None),
        ).fetchone()
    return row[0], key


def resolve_key(pool: ConnectionPool, key: str) -> str | None:
    """The owner of an active key, or None (unknown, malformed or revoked). Records when it was last used."""
    if not isinstance(key, str) or not key.startswith(KEY_PREFIX) or len(key) > MAX_KEY_CHARS or not key.isascii():
        return None
    with pool.connection() as conn:
        row = conn.execute(
            "WITH k AS (SELECT id, owner_id, last_used_at FROM api_keys"
            "   WHERE key_hash = %s AND revoked_at IS NULL),"
            " touched AS (UPDATE api_keys a SET last_used_at = now() FROM k WHERE a.id = k.id"
            f"   AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '{LAST_USED_RESOLUTION}'))"
            " SELECT owner_id FROM k",
            (hash_key(key),),
        ).fetchone()
    return row[0] if row else None


def list_keys(pool: ConnectionPool, owner: str | None = None) -> list[dict[str, Any]]:
    """Keys (all, or one owner's), newest first; never the key or its hash."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT id::text, owner_id, prefix, name, created_at, last_used_at, revoked_at FROM api_keys"
            " WHERE %(owner)s::text IS NULL OR owner_id = %(owner)s ORDER BY created_at DESC, id",
            {"owner": owner},
        ).fetchall()
    return [
        {
            "id": r[0],
            "owner": r[1],
            "prefix": r[2],
            "name": r[3],
            "created_at": _iso(r[4]),
            "last_used_at": _iso(r[5]),
            "revoked_at": _iso(r[6]),
            "active": r[6] is None,
        }
        for r in rows
    ]


def revoke_key(pool: ConnectionPool, key_id_or_prefix: str) -> bool:
    """Revoke a key by its id or its listed prefix; True when an active key was revoked.

    A prefix that matches more than one active key is refused (ValidationError): use the id.
    """
    if not isinstance(key_id_or_prefix, str) or not key_id_or_prefix.strip():
        raise ValidationError("key", "give a key id or prefix")
    ref = key_id_or_prefix.strip()
    try:
        key_id: str | None = str(uuid.UUID(ref))
    except ValueError:
        key_id = None
    with pool.connection() as conn:
        if key_id is not None:
            cur = conn.execute(
                "UPDATE api_keys SET revoked_at = now() WHERE id = %s AND revoked_at IS NULL", (key_id,)
            )
            return cur.rowcount == 1
        if not ref.startswith(KEY_PREFIX) or len(ref) < PREFIX_CHARS:
            raise ValidationError(
                "key", f"a prefix is the first {PREFIX_CHARS} characters shown by the key list"
            )
        matches = conn.execute(
            "SELECT id FROM api_keys WHERE prefix = %s AND revoked_at IS NULL", (ref[:PREFIX_CHARS],)
        ).fetchall()
        if len(matches) > 1:
            raise ValidationError(
                "key", f"prefix {ref[:PREFIX_CHARS]} matches {len(matches)} keys; revoke by id"
            )
        if not matches:
            return False
        conn.execute("UPDATE api_keys SET revoked_at = now() WHERE id = %s", (matches[0][0],))
        return True
