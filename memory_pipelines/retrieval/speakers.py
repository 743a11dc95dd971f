"""A question that names one of a conversation's speakers: who, not what.

"What video games does Nate play?" asks about Nate's turns. Embedded as it stands, the name pulls the query
vector towards every turn that mentions Nate, most of them the other party's ("Wow Nate, congrats!"), and
away from Nate's own turns, which rarely say his name. So when the question names exactly one speaker of the
candidates (and they have more than one), hybrid search embeds it without the name (`without_speaker`) and
runs the memory source's semantic channel on that vector (tasks, learnings and the rest have no speaker and keep
their hits from the question as written); the keyword channel keeps the question as written. After fusion and
the neighbour lift, the named speaker's turns score SPEAKER_BOOST more (× 1.15): a preference, not a filter.
It stays mild because a question can name the wrong speaker (LoCoMo's adversarial category): there the
evidence is the other party's turn, and it usually matches the rest of the question by more than that.

It lifts multi-hop recall on locomo_dev and costs a little adversarial ordering inside the top 10
(docs/retrieval-quality.md); a corpus with one speaker is unchanged by construction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from .fusion import rescored

SPEAKER_BOOST = 0.15


def _pattern(name: str) -> re.Pattern[str]:
    # A whole word, as written (names are proper nouns: "Will" is not "will"), possessive included.
    return re.compile(r"(?<!\w)" + re.escape(name) + r"(?:['’]s)?(?!\w)")


def named_speaker(query: str, speakers: Iterable[str | None]) -> str | None:
    """The one speaker among `speakers` (the candidates' speakers) that `query` names, or None: when it
    names none or several, or when the candidates have fewer than two speakers (nothing to tell apart)."""
    known = {s for s in speakers if s and s.strip()}
    if len(known) < 2:
        return None
    # A speaker prefix ("User: ...", "Caroline: ...") says who speaks a line of a dialogue, not whom it asks about.
    spoken = re.sub(r"(?m)^[ \t]*(?:" + "|".join(re.escape(s) for s in known) + r")[ \t]*[:：]", " ", query)
    named = [s for s in known if _pattern(s).search(spoken)]
    return named[0] if len(named) == 1 else None


def without_speaker(query: str, name: str) -> str:
    """`query` with the speaker's name (and its possessive) taken out; `query` itself if nothing else is left."""
    stripped = re.sub(r"\s+", " ", _pattern(name).sub(" ", query)).strip()
    stripped = re.sub(r"\s+([?.!,;:])", r"\1", stripped)
    return stripped if re.search(r"\w", stripped) else query


def boosted(ranked: Sequence[Any], name: str, boost: float = SPEAKER_BOOST) -> list[Any]:
    """`ranked` with the hits whose speaker is `name` scored × (1 + boost), re-sorted. Pure."""
    out = [rescored(h, score=h.score * (1.0 + boost)) if (h.extra or {}).get("speaker") == name else h
           for h in ranked]
    return sorted(out, key=lambda h: (-h.score, h.source, h.id))
