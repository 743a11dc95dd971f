"""Progressive disclosure (the progressive-search spec): summary search → detail by id → related to a base id.

All three are scoped to the owner; an id of another owner is "not found", exactly like a missing one. Detail and
related open every id a search or a context build hands out: tasks, learnings, capabilities, memories, and a
build's events and profile goals (`vocabulary.DETAIL_SOURCES`).
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

from ..embeddings import Embedder
from ..embeddings.base import to_array
from ..infra.errors import NotFoundError, ValidationError, check_storable
from ..infra.ids import is_uuid
from ..vocabulary import DETAIL_SOURCES, MAX_TOP_K, SOURCES
from .search import SearchFilters, SearchResult, search


def _find(pool: ConnectionPool, owner: str, item_id: str) -> tuple[str, tuple]:
    """The source of one of the owner's items and its `detail_sql` row; NotFoundError otherwise."""
    if not isinstance(item_id, str) or not item_id:
        raise ValidationError("id", "must be a non-empty string")
    check_storable("id", item_id)
    id_type = "uuid" if is_uuid(item_id) else "text"
    sources = [s for s in DETAIL_SOURCES if SOURCES[s].id_type == id_type]
    with pool.connection() as conn:
        for source in sources:
            row = conn.execute(SOURCES[source].detail_sql, (item_id, owner)).fetchone()
            if row:
                return source, row
    raise NotFoundError(f"no item with id {item_id}")  # the same words for another owner's id: nothing leaks


def detail(pool: ConnectionPool, owner: str, item_id: str) -> dict[str, Any]:
    """The full record (the progressive-search spec: detail layer)."""
    source, (rid, title, body, status, metadata, created_at, _emb, active) = _find(pool, owner, item_id)
    return {
        "id": rid,
        "level": source,
        "title": title,
        "description": body,
        "status": status,
        "metadata": metadata or {},
        "created_at": created_at.isoformat() if created_at else None,
        "active": bool(active),
    }


def _matches(result: SearchResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "matches": [
            {
                "id": h.id,
                "level": h.source,
                "title": h.title,
                "similarity": round(h.score, 4),
                "preview": h.preview,
            }
            for h in result.hits
        ]
    }
    if result.degraded:
        out["degraded"] = result.degraded
    return out


def summary_search(
    pool: ConnectionPool,
    embedder: Embedder,
    owner: str,
    query: str,
    top_k: int = 5,
    mode: str = "hybrid",
    filters: SearchFilters | None = None,
) -> dict[str, Any]:
    """Summary layer: id, level (source), title, similarity, preview."""
    return _matches(search(pool, embedder, owner, query, mode=mode, limit=top_k, filters=filters))


def related(
    pool: ConnectionPool,
    embedder: Embedder,
    owner: str,
    base_id: str,
    top_k: int = 5,
    exclude_self: bool = True,
) -> dict[str, Any]:
    """Related layer: the neighbours of an item of this owner, by its stored vector and its words (a goal,
    never embedded, or an item not embedded yet, by its words embedded now). Neighbours are of the searched
    sources (`SearchFilters`' default), whatever the base item's source."""
    if not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise ValidationError("topK", f"must be an integer from 1 to {MAX_TOP_K}")
    _source, (rid, title, body, _status, _meta, _created, emb, _active) = _find(pool, owner, base_id)
    query = f"{title}\n{body or ''}"[:1000]
    qvec = to_array(emb)
    result = search(pool, embedder, owner, query, mode="hybrid", limit=min(100, top_k + 1), query_vector=qvec)
    if exclude_self:
        result.hits = [h for h in result.hits if h.id != rid]
    result.hits = result.hits[:top_k]
    return _matches(result)
