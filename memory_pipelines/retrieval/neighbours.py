"""Neighbouring turns: a strong hit on one turn of a conversation lifts the turns just before and after it.

A question's evidence is often a turn that means little alone ("Yes, it was amazing!") next to the one that
matched. Memories written with a `session` are turns of it, ordered by `turn` (sql/008_conversation.sql).
After fusion, when the candidates are a conversation (exchanges.py), each of the top NEIGHBOUR_TOP hits that is
a turn of an exchange (no neighbouring turn is the same party's) lifts its previous and next turn (same owner,
project and session, within the search's filters) by NEIGHBOUR_LIFT × its own score: a turn already among the
hits gains that much; one that was not is read from the database and scored by its own vector (its semantic
channel) plus the lift. The work is bounded: at most 2 × NEIGHBOUR_TOP rows are read in full, in the one query
of exchanges.read_exchanges.

When the question names one of the speakers (speakers.py), only that speaker's neighbouring turns are lifted: on
locomo_dev 97 % of the evidence of such questions (bar the adversarial ones, which name the wrong speaker) is the
named speaker's turns, where two thirds of hybrid's top ten were. Her top turns' neighbours are then the other
party's, so each of her top turns lifts instead her own nearest turns before and after it in the session (her
previous and next statement, usually on the same topic) by SAME_SPEAKER_LIFT.

Where every memory is a whole User/AI exchange (speaker "User") and a session a day of unrelated ones, lifting
same-speaker neighbours costs recall, so `other_party` keeps them out (docs/retrieval-quality.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .fusion import rescored

NEIGHBOUR_TOP = 10
NEIGHBOUR_LIFT = 0.3
SAME_SPEAKER_LIFT = 0.15
"""A named speaker's top turn lifts her own previous and next statement in its session by this share of its score:
half the other party's, a turn farther away (docs/retrieval-quality.md, step 15)."""

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
    same_speaker: dict[str, list[Any]] | None = None,
    same_speaker_lift: float | None = None,
) -> list[Any]:
    """`ranked` (fused hits, best first) with the neighbours of its top `top` memory hits lifted.

    `adjacent` maps a memory id to its neighbouring turns (hits), lifted by `lift` × the hit's score;
    `same_speaker` to its speaker's own nearest turns, lifted by `same_speaker_lift` (SAME_SPEAKER_LIFT) × it.
    `own_score` scores a neighbour that was not among the hits. Scores come from the fused list before any lift, so
    the order of the top hits does not matter. A lifted hit carries its gain in `extra["neighbour_gain"]`. Pure: no
    I/O."""
    by_key: dict[Key, Any] = {(h.source, h.id): h for h in ranked}
    gain: dict[Key, float] = {}
    new: dict[Key, Any] = {}
    own_lift = SAME_SPEAKER_LIFT if same_speaker_lift is None else same_speaker_lift
    shares = ((adjacent, lift), (same_speaker or {}, own_lift))
    for h in [h for h in ranked if h.source == "memory"][:top]:
        for neighbours, share in shares:
            for n in neighbours.get(h.id, ()):
                key = ("memory", n.id)
                gain[key] = gain.get(key, 0.0) + share * h.score
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
