"""Formatting the context block within a token budget: the profile first, then items by MMR order.

The block is counted with the real tokenizer as a whole, so it is never over budget. An item that
does not fit is skipped and smaller ones after it may still fit (the seed stops at the first overflow).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..text.tokens import count_tokens, truncate_to_tokens

HEADER = "## 相关历史上下文 (relevant memory)"
MAX_ITEM_TOKENS = 160


@dataclass
class Fitted:
    block: str
    tokens: int
    included: list[int]
    profile_included: bool


def fit_to_budget(profile: str, lines: Sequence[str], budget: int) -> Fitted:
    """The block with the profile (truncated if it alone exceeds the budget) and as many lines as fit."""
    parts: list[str] = []
    profile_included = False
    if profile:
        snippet = profile.strip()
        if count_tokens(snippet) > budget:
            snippet = truncate_to_tokens(snippet, budget)
        if snippet:
            parts.append(snippet)
            profile_included = True
    included: list[int] = []
    header_added = False
    for i, line in enumerate(lines):
        line = truncate_to_tokens(line, MAX_ITEM_TOKENS)
        trial = [*parts, *([] if header_added else ["", HEADER]), line]
        if count_tokens("\n".join(trial)) <= budget:
            parts = trial
            header_added = True
            included.append(i)
    block = "\n".join(parts)
    return Fitted(
        block=block, tokens=count_tokens(block), included=included, profile_included=profile_included
    )
