"""Formatting the context block within a token budget: the profile first, then items by MMR order.

Each line is tokenised once and lines are added while the running total fits; the finished block is
then counted as a whole with the real tokenizer and trailing items are dropped should it be over (BPE
counts are very nearly additive across newlines), so the block is never over budget. An item that does
not fit is skipped and smaller ones after it may still fit (the spec's builder stops at the first overflow).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..text.tokens import count_tokens, fit_tokens

HEADER = "## 相关历史上下文 (relevant memory)"
MAX_ITEM_TOKENS = 160


@dataclass
class Fitted:
    block: str
    tokens: int
    included: list[int]
    profile_included: bool
    profile: str = ""  # the profile as written into the block: its heading and the goal lines that fit
    lines: dict[int, str] = field(default_factory=dict)  # included index -> the line as written
    line_tokens: dict[int, int] = field(default_factory=dict)


def _join(profile: str, lines: list[str]) -> str:
    parts = [profile] if profile else []
    if lines:
        parts += ["", HEADER, *lines] if profile else [HEADER, *lines]
    return "\n".join(parts)


def _whole_lines_within(profile: str, budget: int) -> str:
    """The profile's heading and as many of its goal lines as fit in `budget`, each whole ("recall >= 0." cut
    from "recall >= 0.8" says something else); none when not even one goal fits."""
    if not profile or count_tokens(profile) <= budget:
        return profile
    lines = profile.splitlines()
    for n in range(len(lines) - 1, 1, -1):
        head = "\n".join(lines[:n])
        if count_tokens(head) <= budget:
            return head
    return ""


def fit_to_budget(profile: str, lines: Sequence[str], budget: int, rank: Sequence[int] | None = None) -> Fitted:
    """The block with the profile (its whole lines that fit, if it alone exceeds the budget) and as many lines as
    fit, chosen in the order given; with `rank` (each line's place in the block, lowest first), the chosen lines
    are written in that order instead."""
    snippet = _whole_lines_within(profile.strip(), budget)
    used = count_tokens(snippet)
    header_cost = count_tokens(("\n\n" if snippet else "") + HEADER)
    kept: list[tuple[int, str, int]] = []  # (index, line, its tokens)
    for i, raw in enumerate(lines):
        line, tokens = fit_tokens(raw, MAX_ITEM_TOKENS)
        cost = tokens + 1 + (0 if kept else header_cost)  # + the newline before it
        if used + cost <= budget:
            kept.append((i, line, tokens))
            used += cost
    if rank is not None:
        kept.sort(key=lambda k: rank[k[0]])
    block = _join(snippet, [line for _, line, _ in kept])
    total = count_tokens(block)
    while kept and total > budget:  # the additive count was short by a merge across a boundary
        kept.pop()
        block = _join(snippet, [line for _, line, _ in kept])
        total = count_tokens(block)
    return Fitted(
        block=block,
        tokens=total,
        included=[i for i, _, _ in kept],
        profile_included=bool(snippet),
        profile=snippet,
        lines={i: line for i, line, _ in kept},
        line_tokens={i: n for i, _, n in kept},
    )
