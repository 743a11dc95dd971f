"""Neighbouring turns: a strong hit on one turn of a conversation lifts the turns just before and after it.

A question's evidence is often a turn that means little alone ("Yes, it was amazing!") next to the one that
matched. Memories written with a `session` are turns of it, ordered by `turn` (sql/008_conversation.sql).
After fusion, each of the top NEIGHBOUR_TOP hits lifts its previous and next turn (same owner, project and
session, within the search's filters, and another party's: `other_party`) by NEIGHBOUR_LIFT × its own
score: a turn already among the hits gains that much; one that was not is read from the database and scored
by its own vector (its semantic channel) plus the lift. The work is bounded: at most 2 × NEIGHBOUR_TOP rows
are read, in one query.

Where every memory is a whole User/AI exchange (speaker "User") and a session a day of unrelated ones, lifting
same-speaker neighbours costs recall, so `other_party` keeps them out (docs/retrieval-quality.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from ..vocabulary import SOURCES
from .fusion import rescored

NEIGHBOUR_TOP = 10
NEIGHBOUR_LIFT = 0.3

Key = tuple[str, str]


def other_party(speaker: str | None, neighbour_speaker: str | None) -> bool:
    """Whether a neighbouring turn is the other side of the exchange: not the same known speaker.

    A reply means little without the turn it answers, and the other way round; two consecutive turns of one
    speaker are separate statements (or, as in MemoryBank, each memory is already a whole exchange), so they
    neither carry each other's context nor lift each other. An unknown speaker counts as another party.
    """
    return speaker is None or neighbour_speaker is None or speaker != neighbour_speaker


def lifted(
    ranked: Sequence[Any],
    adjacent: dict[str, list[Any]],
    own_score: Callable[[Any], float],
    *,
    top: int = NEIGHBOUR_TOP,
    lift: float = NEIGHBOUR_LIFT,
) -> list[Any]:
    """`ranked` (fused hits, best first) with the neighbours of its top `top` memory hits lifted.

    `adjacent` maps a memory id to its neighbouring turns (hits); `own_score` scores a neighbour that was not
    among the hits. Scores come from the fused list before any lift, so the order of the top hits does not
    matter. A lifted hit carries its gain in `extra["neighbour_gain"]`. Pure: no I/O.
    """
    by_key: dict[Key, Any] = {(h.source, h.id): h for h in ranked}
    gain: dict[Key, float] = {}
    new: dict[Key, Any] = {}
    for h in [h for h in ranked if h.source == "memory"][:top]:
        for n in adjacent.get(h.id, ()):
            key = ("memory", n.id)
            gain[key] = gain.get(key, 0.0) + lift * h.score
            if key not in by_key:
                new.setdefault(key, n)
    if not gain:
        return list(ranked)
    out = []
    for key, h in by_key.items():
        out.append(rescored(h, score=h.score + gain[key], extra={**h.extra, "neighbour_gain": gain[key]})
                   if key in gain else h)
    for key, n in new.items():
        out.append(rescored(n, score=own_score(n) + gain[key], extra={**n.extra, "neighbour_gain": gain[key]}))
    return sorted(out, key=lambda h: (-h.score, h.source, h.id))


def neighbour_rows(
    conn: psycopg.Connection, ids: Sequence[str], clauses: list[str], params: dict[str, Any]
) -> list[tuple]:
    """(hit id, id, title, body, created_at, 0.0, extra, vector) of the turn before and after each of `ids`.

    `clauses` and `params` are the memory source's filters (filters.where_clauses): the neighbours obey the same
    owner, project, type and time filters as the hits.
    """
    src = SOURCES["memory"]
    title, body, extra, emb = src.title_sql, src.body_sql, src.extra_sql, src.vector_sql
    where = " AND ".join(clauses)
    side = (
        f"(SELECT t.id, {title}, {body}, t.created_at, 0.0::float8, {extra}, {emb} FROM {src.from_sql}"
        f" WHERE {where} AND t.project_id = h.project_id AND t.session = h.session AND t.turn <<OP>> h.turn"
        " ORDER BY t.turn <<DIR>> LIMIT 1)"
    )
    sql = (
        "WITH h AS (SELECT m.id, m.project_id, m.session, m.turn FROM memories m"
        "           WHERE m.owner_id = %(owner)s AND m.id = ANY(%(hit_ids)s) AND m.session IS NOT NULL)"
        " SELECT h.id, n.* FROM h CROSS JOIN LATERAL ("
        + side.replace("<<OP>>", "<").replace("<<DIR>>", "DESC")
        + " UNION ALL "
        + side.replace("<<OP>>", ">").replace("<<DIR>>", "ASC")
        + ") n"
    )
    return conn.execute(sql, {**params, "hit_ids": list(ids)}, binary=True).fetchall()
