"""Whether a search's conversational candidates are turns of exchanges, and the neighbouring turns of the top ones.

The neighbour lift (neighbours.py) and the turn priors (turns.py) describe a conversation: two parties taking
turns, where a reply means little without the turn it answers and a question's answer is the next turn. Memories
written with a `session` are not always that. A persona list ("我叫张岩", "我有一条狗", ...) or the notes extracted
from a session are one party's statements in a row: a short one carries a whole fact, and the statement next to
it is another fact, not its answer. A memory is a turn of an exchange when no neighbouring turn in its session
(the one before, the one after) is the same party's (`neighbours.other_party`); a turn alone in its session has
nothing against it.

The priors weigh every candidate or none: demoting one part of a ranking for its shape (the one User line after a
list of Bot lines) moves that part against the rest for no reason the question gave. So a search treats its
candidates as a conversation when most of its conversational candidates are turns of exchanges
(`Exchanges.conversation`): then the top exchange turns lift their neighbours and every conversational candidate
takes the turn priors; else neither happens.

One query answers both questions for a search's candidates: each candidate's neighbouring turns (their speakers),
and for the top ones, the whole neighbouring rows the lift scores; for a question naming a speaker, also her own
nearest turns before and after each of her top turns (her previous and next statement in that session).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from ..vocabulary import SOURCES
from .neighbours import other_party


@dataclass
class Exchanges:
    """`turns`: the candidates that are turns of an exchange; `adjacent`: for each top candidate among them, its
    neighbouring rows (search._hit's row shape: id, title, body, created_at, 0.0, extra, vector)."""

    turns: set[str] = field(default_factory=set)
    adjacent: dict[str, list[tuple]] = field(default_factory=dict)
    same_speaker: dict[str, list[tuple]] = field(default_factory=dict)
    """For each top exchange turn of the named speaker, her own nearest turns before and after (same row shape)."""
    checked: int = 0
    """How many conversational candidates were looked at."""

    @property
    def conversation(self) -> bool:
        """Whether most of the conversational candidates are turns of exchanges."""
        return self.checked > 0 and 2 * len(self.turns) > self.checked


def in_exchange(speaker: str | None, neighbour_speakers: Sequence[str | None]) -> bool:
    """Whether a turn with these neighbours (none, one or two) is a turn of an exchange: none is the same party's."""
    return all(other_party(speaker, n) for n in neighbour_speakers)


def read_exchanges(
    conn: psycopg.Connection, ids: Sequence[str], top: Iterable[str], clauses: list[str], params: dict[str, Any],
    speaker: str | None = None,
) -> Exchanges:
    """The exchange turns among the memories `ids` (conversational ones; others are ignored), and the neighbouring
    rows of those among `top` that are exchange turns; with `speaker` (the one a question names), also her own
    nearest turns around each of her top exchange turns. `clauses` / `params`: the memory source's filters
    (search._where), which the neighbours obey as the hits do. One round trip."""
    if not ids:
        return Exchanges()
    top_ids = set(top)
    rows = conn.execute(_sql(clauses, speaker is not None),
                        {**params, "hit_ids": list(ids), "top_ids": list(top_ids), "speaker": speaker},
                        binary=True).fetchall()
    sides: dict[str, tuple[str | None, list[tuple[str | None, tuple]], list[tuple]]] = {}
    for hit_id, hit_speaker, hers, n_speaker, *row in rows:
        _, neighbours, owns = sides.setdefault(str(hit_id), (hit_speaker, [], []))
        if row[0] is None:  # the turn is alone in its session (within the filters)
            continue
        if hers:
            owns.append(tuple(row))
        else:
            neighbours.append((n_speaker, tuple(row)))
    out = Exchanges(checked=len(sides))
    for hit_id, (hit_speaker, neighbours, owns) in sides.items():
        if in_exchange(hit_speaker, [s for s, _ in neighbours]):
            out.turns.add(hit_id)
            if hit_id in top_ids and neighbours:
                out.adjacent[hit_id] = [row for _, row in neighbours]
            if hit_id in top_ids and owns:
                out.same_speaker[hit_id] = owns
    return out


def _sql(clauses: list[str], named: bool = False) -> str:
    """Per conversational hit, its turn before and after within the filters, and when a speaker is `named`, for
    a top turn of hers (`%(speaker)s`), her own nearest turn before and after: (hit id, hit speaker, whether the
    row is her own turn, neighbour speaker, then the neighbour's row, its text and vector only for a top hit);
    one row of NULLs for a hit without any."""
    src = SOURCES["memory"]
    title, body, extra, emb = src.title_sql, src.body_sql, src.extra_sql, src.vector_sql
    side = (
        f"(SELECT <<HERS>> AS hers, t.speaker AS n_speaker, t.id, {title} AS title, {body} AS body, t.created_at,"
        f" 0.0::float8 AS score, {extra} AS extra, {emb} AS emb FROM {src.from_sql}"
        f" WHERE {' AND '.join(clauses)} AND t.project_id = h.project_id AND t.session = h.session"
        " AND t.turn <<OP>> h.turn <<WHO>> ORDER BY t.turn <<DIR>> LIMIT 1)"
    )
    kinds = [("false", "")]  # the turns next to the hit, whoever speaks
    if named:  # and the named speaker's own nearest turns around her top turns
        kinds.append(("true", "AND h.top AND h.speaker = %(speaker)s AND t.speaker = h.speaker"))
    sides = [
        side.replace("<<OP>>", op).replace("<<DIR>>", order).replace("<<HERS>>", hers).replace("<<WHO>>", who)
        for hers, who in kinds
        for op, order in (("<", "DESC"), (">", "ASC"))
    ]
    return (
        "WITH h AS (SELECT m.id, m.speaker, m.project_id, m.session, m.turn, m.id = ANY(%(top_ids)s) AS top"
        "           FROM memories m WHERE m.owner_id = %(owner)s AND m.id = ANY(%(hit_ids)s) AND m.session IS NOT NULL)"
        " SELECT h.id, h.speaker, n.hers, n.n_speaker, n.id,"
        " CASE WHEN h.top THEN n.title END, CASE WHEN h.top THEN n.body END, n.created_at, n.score,"
        " CASE WHEN h.top THEN n.extra END, CASE WHEN h.top THEN n.emb END"
        " FROM h LEFT JOIN LATERAL (" + " UNION ALL ".join(sides) + ") n ON true"
    )
