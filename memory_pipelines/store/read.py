"""agent-mem reads, every one scoped to the owner: search (snippets), get (full records), timeline,
projects and version history. Ids of another owner behave exactly like ids that do not exist."""

from __future__ import annotations

import base64
import binascii
import math
import re
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from psycopg_pool import ConnectionPool

from ..embeddings import Embedder
from ..infra.errors import NotFoundError, ValidationError, check_storable
from ..retrieval.filters import SearchFilters
from ..retrieval.query import Query, embed_query
from ..retrieval.search import search
from ..text.keywords import keyword_terms, terms
from ..vocabulary import CONTENT_TYPES, MAX_IDS, MAX_SEARCH_LIMIT, MAX_TIMELINE_LIMIT, MAX_TS
from .ingest.inputs import validate_owner
from .projects import key_for_name

SNIPPET_CHARS = 200
NEXT_ACTION = "use_ids_to_call_mem_get"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _limit(value: object, default: int, maximum: int) -> int:
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ValidationError("limit", f"must be an integer from 1 to {maximum}")
    return value


def _content_type(field: str, value: object, allow_all: bool) -> str | None:
    if value is None or (allow_all and value == "all"):
        return None
    if value not in CONTENT_TYPES:
        allowed = [*CONTENT_TYPES, "all"] if allow_all else list(CONTENT_TYPES)
        raise ValidationError(field, f"must be one of {allowed}, got {value!r}")
    return str(value)


def resolve_project(
    conn: psycopg.Connection, owner: str, project_key: str | None, project_name: str | None
) -> str | None:
    """The owner's project key for a key or a name (exact, or the key derived from it); None if unknown. Given
    both, they must name the same project (a ValidationError naming `project_name` otherwise: the caller meant
    one of two projects, and a search of the other would answer for it)."""
    if project_key is not None:
        if not isinstance(project_key, str) or not project_key.strip():
            raise ValidationError("project_key", "must be a non-empty string when given")
        row = conn.execute(
            "SELECT project_key FROM projects WHERE owner_id = %s AND project_key = %s",
            (owner, project_key.strip()),
        ).fetchone()
        if project_name is not None and resolve_project(conn, owner, None, project_name) != (row and row[0]):
            raise ValidationError("project_name", f"does not name the project of project_key {project_key.strip()!r};"
                                  " give one of the two")
        return row[0] if row else None
    if not isinstance(project_name, str) or not project_name.strip():
        raise ValidationError("project_name", "must be a non-empty string when given")
    return key_for_name(conn, owner, project_name)


# --- search ----------------------------------------------------------------------------------------------


def snippet(text: str, query_terms: list[str], limit: int = SNIPPET_CHARS) -> str:
    """At most `limit` characters of `text` (whitespace collapsed) around the first query term in it."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    lower = flat.lower()
    hits = [i for t in query_terms if (i := lower.find(t)) >= 0]
    start = 0
    if hits and min(hits) > limit // 2:
        start = min(hits) - limit // 4
        space = flat.find(" ", start, start + 20)
        start = space + 1 if space >= 0 else start
    lead = "…" if start > 0 else ""
    room = limit - len(lead) - 1
    body = flat[start : start + room]
    cut = body.rfind(" ")
    if start + room < len(flat) and cut > room // 2:
        body = body[:cut]
    tail = "…" if start + len(body) < len(flat) else ""
    return lead + body.rstrip() + tail


def _best_fragments(
    conn: psycopg.Connection,
    owner: str,
    ids: list[str],
    qvec: np.ndarray | None,
    model: str,
    qterms: list[str],
) -> dict[str, str]:
    """memory id -> text of its fragment closest to the query (by vector, else by query-term frequency)."""
    if not ids:
        return {}
    if qvec is not None:
        rows = conn.execute(
            "SELECT DISTINCT ON (f.memory_id) f.memory_id, f.content FROM fragments f"
            " WHERE f.owner_id = %(owner)s AND f.memory_id = ANY(%(ids)s)"
            " ORDER BY f.memory_id, CASE WHEN f.embedding_model = %(model)s THEN f.embedding <=> %(q)s END"
            " NULLS LAST, f.chunk_index",
            {"owner": owner, "ids": ids, "model": model, "q": qvec},
        ).fetchall()
    else:
        rows = conn.execute(
            "SELECT DISTINCT ON (s.memory_id) s.memory_id, s.content FROM ("
            " SELECT f.memory_id, f.content, f.chunk_index, coalesce(sum(k.tf), 0) AS tf FROM fragments f"
            " LEFT JOIN keywords k ON k.source = 'fragment' AND k.item_id = f.id"
            "   AND k.keyword = ANY(%(terms)s)"
            " WHERE f.owner_id = %(owner)s AND f.memory_id = ANY(%(ids)s) GROUP BY f.id) s"
            " ORDER BY s.memory_id, s.tf DESC, s.chunk_index",
            {"owner": owner, "ids": ids, "terms": qterms},
        ).fetchall()
    return dict(rows)


def search_memories(
    pool: ConnectionPool,
    embedder: Embedder,
    owner: str,
    query: str,
    *,
    project_key: str | None = None,
    project_name: str | None = None,
    scope: str = "all",
    limit: int = 20,
    exclude_session: str | None = None,
) -> dict[str, Any]:
    """Stage one of two-stage retrieval: snippets (<= 200 chars) of the owner's best-matching memories.

    Hybrid search (vectors + BM25); keyword-only with a `degraded` note when the provider is down.
    An unknown project gives no results. `exclude_session`: leave that conversation's memories out.
    """
    owner = validate_owner(owner)
    checked = Query.checked(query)
    content_type = _content_type("scope", scope, allow_all=True)
    limit = _limit(limit, 20, MAX_SEARCH_LIMIT)
    SearchFilters(exclude_session=exclude_session).validated()  # a bad value named before any work
    out: dict[str, Any] = {"results": [], "next_action": NEXT_ACTION}
    key = None
    if project_key is not None or project_name is not None:
        with pool.connection() as conn:
            key = resolve_project(conn, owner, project_key, project_name)
        if key is None:
            return out
    qvec, degraded = embed_query(embedder, query, owner)
    filters = SearchFilters(
        sources=("memory",), memory_types=(content_type,) if content_type else None, project=key,
        exclude_session=exclude_session,
    )
    result = search(
        pool,
        embedder,
        owner,
        checked,
        mode="hybrid" if qvec is not None else "keyword",
        filters=filters,
        limit=limit,
        query_vector=qvec,
    )
    degraded = degraded or result.degraded
    if degraded:
        out["degraded"] = degraded
    ids = [h.id for h in result.hits]
    qterms = sorted(set(keyword_terms(query)))  # matched against the keyword index
    words = sorted(set(terms(query, stem=False, parts=True)))  # as written, to find in the text
    with pool.connection() as conn:
        best = _best_fragments(conn, owner, ids, qvec, embedder.model_name, qterms)
        rows = conn.execute(
            "SELECT m.id, p.project_key, m.content_type, m.summary, m.tags, m.created_at FROM memories m"
            " JOIN projects p ON p.id = m.project_id WHERE m.owner_id = %s AND m.id = ANY(%s)",
            (owner, ids),
        ).fetchall()
    meta = {r[0]: r for r in rows}
    for h in result.hits:
        if h.id not in meta:
            continue
        _, key_, ctype, summary, tags, created_at = meta[h.id]
        out["results"].append(
            {
                "id": h.id,
                "project_key": key_,
                "content_type": ctype,
                "snippet": snippet(best.get(h.id, h.text), words),
                "summary": summary or "",
                "tags": tags or [],
                "score": round(float(h.score), 4),
                "created_at": _iso(created_at),
            }
        )
    return out


# --- get, versions ---------------------------------------------------------------------------------------


def _validate_ids(ids: object) -> list[str]:
    if isinstance(ids, str) or not isinstance(ids, list | tuple):
        raise ValidationError("ids", "must be a list of memory ids")
    if not ids:
        raise ValidationError("ids", "must contain at least one id")
    if len(ids) > MAX_IDS:
        raise ValidationError("ids", f"at most {MAX_IDS} ids per call, got {len(ids)}")
    if not all(isinstance(i, str) and i.strip() and len(i) <= 200 for i in ids):
        raise ValidationError("ids", "every id must be a non-empty string")
    return list(dict.fromkeys(check_storable("ids", i.strip()) for i in ids))


def get_memories(pool: ConnectionPool, owner: str, ids: list[str]) -> dict[str, Any]:
    """Stage two: full records of the owner's memories, in the order asked; others' ids are `missing`.

    `version_count` counts every version including the current one (1 for a memory never replaced).
    A deferred memory later found to duplicate another is returned with `is_active` false and
    `duplicate_of` / `merged_into` naming the memory that holds its content. `embedded_at` is null while
    the memory waits for embedding (stored without waiting, or during a provider outage).
    """
    owner = validate_owner(owner)
    wanted = _validate_ids(ids)
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT m.id, p.project_key, p.project_name, m.content_type, m.content, m.summary, m.tags, m.ts,"
            " m.speaker, m.created_at, m.updated_at, m.is_active, m.metadata,"
            " 1 + (SELECT count(*) FROM memory_versions v"
            "      WHERE v.memory_id = m.id AND v.owner_id = m.owner_id), m.session, m.embedded_at"
            " FROM memories m JOIN projects p ON p.id = m.project_id"
            " WHERE m.owner_id = %s AND m.id = ANY(%s)",
            (owner, wanted),
        ).fetchall()
    found = {r[0]: r for r in rows}
    memories = []
    for mid in wanted:
        if mid not in found:
            continue
        (
            _,
            key,
            name,
            ctype,
            content,
            summary,
            tags,
            ts,
            speaker,
            created,
            updated,
            active,
            meta,
            versions,
            session,
            embedded,
        ) = found[mid]
        record = {
            "id": mid,
            "project_key": key,
            "project_name": name,
            "content_type": ctype,
            "content": content,
            "summary": summary or "",
            "tags": tags or [],
            "ts": ts,
            "speaker": speaker,
            "session": session,
            "created_at": _iso(created),
            "updated_at": _iso(updated),
            "embedded_at": _iso(embedded),
            "version_count": int(versions),
            "is_active": active,
        }
        for link in ("duplicate_of", "merged_into"):
            if (meta or {}).get(link):
                record[link] = meta[link]
        memories.append(record)
    return {"memories": memories, "missing": [i for i in wanted if i not in found]}


def memory_versions(pool: ConnectionPool, owner: str, memory_id: str) -> list[dict[str, Any]]:
    """Earlier versions of one of the owner's memories, oldest first.

    NotFoundError for an unknown id and for another owner's.
    """
    owner = validate_owner(owner)
    if not isinstance(memory_id, str) or not memory_id.strip():
        raise ValidationError("memory_id", "must be a non-empty string")
    check_storable("memory_id", memory_id)
    with pool.connection() as conn:
        if (
            conn.execute(
                "SELECT 1 FROM memories WHERE id = %s AND owner_id = %s", (memory_id, owner)
            ).fetchone()
            is None
        ):
            raise NotFoundError(f"no memory {memory_id!r}")
        rows = conn.execute(
            "SELECT version, content_type, summary, content, tags, ts, replaced_at FROM memory_versions"
            " WHERE memory_id = %s AND owner_id = %s ORDER BY version",
            (memory_id, owner),
        ).fetchall()
    return [
        {
            "version": r[0],
            "content_type": r[1],
            "summary": r[2] or "",
            "content": r[3],
            "tags": r[4] or [],
            "ts": r[5],
            "replaced_at": _iso(r[6]),
        }
        for r in rows
    ]


# --- timeline, projects ----------------------------------------------------------------------------------


def _unix(field: str, value: object) -> int | None:
    """Whole Unix seconds of a bound: an aware datetime (rounded up: ts are whole seconds, so `ts >= 10.5` and
    `ts < 10.5` mean `ts >= 11` and `ts < 11`), or whole Unix seconds from 0 to MAX_TS."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValidationError(field, "a datetime must carry a time zone")
        return math.ceil(value.timestamp())
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, "must be whole Unix seconds or an aware datetime")
    if not 0 <= value <= MAX_TS:
        raise ValidationError(field, f"Unix seconds must be from 0 to {MAX_TS}")
    return value


# A timeline cursor is base64url (unpadded) of "<ts>:<memory id>", exactly as `_encode_cursor` writes it.
_CURSOR = re.compile(r"(0|-?[1-9][0-9]{0,18}):(mem_[0-9a-f]{20})")
_BIGINT = 2**63


def _encode_cursor(ts: int, memory_id: str) -> str:
    return base64.urlsafe_b64encode(f"{ts}:{memory_id}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[int, str]:
    """(ts, memory id) of a cursor `timeline` returned; ValidationError('cursor') for anything else (a forged
    one with a NUL, a ts beyond bigint, another spelling of the same bytes)."""
    bad = ValidationError("cursor", "is not a cursor returned by timeline; pass next_cursor back unchanged")
    if len(cursor) > 100 or not re.fullmatch(r"[A-Za-z0-9_-]+", cursor):
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad from None
    match = _CURSOR.fullmatch(raw)
    if match is None or not -_BIGINT <= int(match[1]) < _BIGINT:
        raise bad
    ts, memory_id = int(match[1]), match[2]
    if _encode_cursor(ts, memory_id) != cursor:
        raise bad
    return ts, memory_id


def timeline(
    pool: ConnectionPool,
    owner: str,
    *,
    project_key: str | None = None,
    project_name: str | None = None,
    since: int | datetime | None = None,
    until: int | datetime | None = None,
    content_type: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> dict[str, Any]:
    """The owner's active memories in time order (by `ts`, oldest first), `since` <= ts < `until`.

    Keyset-paged: pass the returned `next_cursor` to get the next page (None on the last one).
    """
    owner = validate_owner(owner)
    ctype = _content_type("content_type", content_type, allow_all=True)
    limit = _limit(limit, 50, MAX_TIMELINE_LIMIT)
    lo, hi = _unix("since", since), _unix("until", until)
    if lo is not None and hi is not None and lo > hi:
        raise ValidationError("until", "must not be before since")
    after = None
    if cursor is not None:
        if not isinstance(cursor, str) or not cursor:
            raise ValidationError("cursor", "must be a non-empty string")
        after = _decode_cursor(cursor)
    with pool.connection() as conn:
        key = None
        if project_key is not None or project_name is not None:
            key = resolve_project(conn, owner, project_key, project_name)
            if key is None:
                return {"items": [], "next_cursor": None}
        rows = conn.execute(
            "SELECT m.id, p.project_key, m.content_type, m.summary, m.tags, m.ts, m.created_at, m.updated_at"
            " FROM memories m JOIN projects p ON p.id = m.project_id"
            " WHERE m.owner_id = %(owner)s AND m.is_active"
            " AND (%(key)s::text IS NULL OR p.project_key = %(key)s)"
            " AND (%(ctype)s::text IS NULL OR m.content_type = %(ctype)s)"
            " AND (%(lo)s::bigint IS NULL OR m.ts >= %(lo)s) AND (%(hi)s::bigint IS NULL OR m.ts < %(hi)s)"
            " AND (%(ats)s::bigint IS NULL OR (m.ts, m.id) > (%(ats)s, %(aid)s))"
            " ORDER BY m.ts, m.id LIMIT %(n)s",
            {
                "owner": owner,
                "key": key,
                "ctype": ctype,
                "lo": lo,
                "hi": hi,
                "ats": after[0] if after else None,
                "aid": after[1] if after else None,
                "n": limit + 1,
            },
        ).fetchall()
    items = [
        {
            "id": r[0],
            "project_key": r[1],
            "content_type": r[2],
            "summary": r[3] or "",
            "tags": r[4] or [],
            "ts": r[5],
            "created_at": _iso(r[6]),
            "updated_at": _iso(r[7]),
        }
        for r in rows[:limit]
    ]
    more = len(rows) > limit
    return {"items": items, "next_cursor": _encode_cursor(items[-1]["ts"], items[-1]["id"]) if more else None}


def list_projects(pool: ConnectionPool, owner: str) -> list[dict[str, Any]]:
    """The owner's projects with their active memory count, most recently updated first."""
    owner = validate_owner(owner)
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT p.project_key, p.project_name, count(m.id), greatest(max(m.updated_at), p.updated_at)"
            " FROM projects p LEFT JOIN memories m"
            "   ON m.project_id = p.id AND m.is_active AND m.owner_id = p.owner_id"
            " WHERE p.owner_id = %s GROUP BY p.id ORDER BY 4 DESC, p.project_key",
            (owner,),
        ).fetchall()
    return [
        {"project_key": r[0], "project_name": r[1], "memory_count": int(r[2]), "last_updated": _iso(r[3])}
        for r in rows
    ]
