"""What one conversational turn can tell: a prior on turns that ask, or say little.

A question's evidence is a statement ("I signed up for a pottery class yesterday"), yet two kinds of turns
match questions better than statements do. A turn that ends by asking ("What made you paint it?") shares a
question's words and shape, while what it asks about is in the answer, which the neighbour lift reaches
anyway. A short turn ("Wow, that's amazing!") carries little, and a small embedding model ranks short texts
close to many queries. So after fusion and the lift, a conversational turn (a memory with a `session`) that
ends with a question scores × QUESTION_FACTOR, and one under FULL_TOKENS tokens scores × (tokens /
FULL_TOKENS) ** SHORT_EXPONENT. Other memories, and the other sources, are left as they are.

On locomo_dev, turns that end with a question are a third of the top candidates but a tenth of the evidence,
and very short turns are almost never evidence (docs/retrieval-quality.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..text.focus import is_dialogue
from ..text.tokens import estimate_tokens
from .fusion import rescored

QUESTION_FACTOR = 0.7
FULL_TOKENS = 50  # about 200 characters of English, 50 of Chinese
SHORT_EXPONENT = 0.3


def spoken(text: str) -> str:
    """The turn's words without trailing attachment notes ("[shares a photo of ...]")."""
    text = text.strip()
    while text.endswith("]") and (start := text.rfind("[")) >= 0:
        text = text[:start].rstrip()
    return text


def asks(words: str) -> bool:
    """Whether spoken words (`spoken`) end by asking (``?`` or ``？``, before closing quotes or brackets)."""
    return words.rstrip("\"'”’)").endswith(("?", "？"))


def turn_prior(text: str) -> float:
    """The factor a conversational turn's score is multiplied by (1.0 for a long statement). A memory that holds a
    whole exchange ("User: ...\nAI: ...?") is not asking: its last line is only the reply's."""
    words = spoken(text)
    factor = QUESTION_FACTOR if asks(words) and not is_dialogue(words) else 1.0
    if len(words) < 4 * FULL_TOKENS:  # else it is FULL_TOKENS tokens at least (4 characters a token at most)
        tokens = estimate_tokens(words)
        if tokens < FULL_TOKENS:
            factor *= (max(tokens, 1) / FULL_TOKENS) ** SHORT_EXPONENT
    return factor


def weighed(ranked: Sequence[Any], conversation: bool = True) -> list[Any]:
    """`ranked` with every conversational turn's score times its `turn_prior`, re-sorted. Pure.

    `conversation`: whether the candidates are turns of exchanges (retrieval/exchanges.py); when not, only the
    memories that hold a whole exchange themselves ("User: ...\nAI: ...") take the prior."""
    out = []
    for h in ranked:
        extra = h.extra or {}
        if h.source == "memory" and extra.get("session") and (conversation or is_dialogue(spoken(h.text or ""))):
            prior = turn_prior(h.text or "")
            if prior != 1.0:
                h = rescored(h, score=h.score * prior, extra={**h.extra, "turn_prior": round(prior, 4)})
        out.append(h)
    return sorted(out, key=lambda h: (-h.score, h.source, h.id))
