"""Token-bounded chunking that prefers paragraph ends, then sentence ends (English and Chinese).

The text is cut once into units (sentences with their trailing whitespace; a sentence longer
than a chunk is cut further at word / CJK-character boundaries). Each unit's tokens are counted
once; chunks are packed greedily from units, checked once with an exact count, and consecutive
chunks share about `overlap_tokens` tokens (whole trailing sentences when they fit, else the
tail of the last sentence from a word boundary). Chunks are stripped slices of the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory_pipelines.text.tokens import count_tokens

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff"
# A sentence ends after . ! ? followed by whitespace, after Chinese 。！？； or ! ? right after a CJK
# character (no space needed), or at a newline; closing quotes/brackets and trailing whitespace stay
# with the sentence.
_CLOSERS = r"\"'”’)\]」』）"
_SENTENCE_END = re.compile(
    rf"[.!?]+[{_CLOSERS}]*\s+|[。！？；]+[{_CLOSERS}]*\s*|(?<=[{_CJK}])[!?]+[{_CLOSERS}]*\s*|\n\s*"
)
# Pieces of an over-long sentence: a CJK character, a word, or a whitespace run.
_PIECE = re.compile(rf"[{_CJK}]|[^\s{_CJK}]+|\s+")
# Where a tail of a sentence may start: a word start, or at/after a CJK character.
_CUT = re.compile(rf"(?<=\s)\S|[{_CJK}]|(?<=[{_CJK}])\S")
_CHAR = re.compile(r"\S\s*|\s+")  # a character with the whitespace after it
_PIECE_CHARS = 24  # pieces of an over-long sentence are grouped up to this many characters

CHAR, WORD, SENTENCE, PARAGRAPH = 0, 1, 2, 3


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    tokens: int
    strength: int  # how good a cut point the unit's end is


def split_sentences(text: str) -> list[str]:
    """Sentences of `text` (English . ! ?, Chinese 。！？；, and newlines end a sentence), stripped."""
    return [s for start, end, _ in _sentence_spans(text) if (s := text[start:end].strip())]


def _sentence_spans(text: str) -> list[tuple[int, int, int]]:
    """(start, end, strength) of each sentence, trailing whitespace included; spans tile `text`."""
    spans: list[tuple[int, int, int]] = []
    pos = 0
    for m in _SENTENCE_END.finditer(text):
        strength = PARAGRAPH if m.group().count("\n") >= 2 else SENTENCE
        spans.append((pos, m.end(), strength))
        pos = m.end()
    if pos < len(text):
        spans.append((pos, len(text), PARAGRAPH))
    return spans


def _piece_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Word/CJK-character pieces of text[start:end], grouped up to `_PIECE_CHARS` characters each.

    Whitespace stays with the preceding piece; a word longer than `_PIECE_CHARS` is cut inside.
    """
    groups: list[tuple[int, int]] = []
    g_start = start
    for m in _PIECE.finditer(text, start, end):
        a, b = m.span()
        if m.group().isspace():
            continue
        if b - g_start > _PIECE_CHARS and a > g_start:
            groups.append((g_start, a))
            g_start = a
        while b - g_start > _PIECE_CHARS:
            groups.append((g_start, g_start + _PIECE_CHARS))
            g_start += _PIECE_CHARS
    if g_start < end:
        groups.append((g_start, end))
    return groups


def _span_tokens(span: str) -> int:
    """Tokens `span` adds in context: a trailing space merges into the next word; a newline does not."""
    body = span.rstrip()
    return count_tokens(body) + (1 if "\n" in span[len(body) :] else 0)


def _split_long(text: str, start: int, end: int, strength: int, limit: int) -> list[_Unit]:
    """Units for an over-long sentence: grouped pieces, and single characters if a piece still exceeds."""
    units: list[_Unit] = []
    for a, b in _piece_spans(text, start, end):
        n = _span_tokens(text[a:b])
        if n <= limit:
            units.append(_Unit(a, b, n, WORD))
        else:
            chars = _CHAR.finditer(text, a, b)
            units.extend(_Unit(c.start(), c.end(), _span_tokens(c.group()), CHAR) for c in chars)
    last = units[-1]
    units[-1] = _Unit(last.start, last.end, last.tokens, strength)
    return units


def _units(text: str, limit: int) -> list[_Unit]:
    units: list[_Unit] = []
    for start, end, strength in _sentence_spans(text):
        n = _span_tokens(text[start:end])
        if n <= limit:
            units.append(_Unit(start, end, n, strength))
        else:
            units.extend(_split_long(text, start, end, strength, limit))
    return units


def _choose_end(units: list[_Unit], first: int, lead_tokens: int, limit: int) -> int:
    """Index of the last unit of a chunk starting at `first`: the last fitting paragraph end past half
    the budget, else the last such sentence end, else as many units as fit (at least one)."""
    total = lead_tokens
    last = first
    candidates: list[tuple[int, int]] = []  # (strength, index) of ends at or past half the budget
    for j in range(first, len(units)):
        total += units[j].tokens
        if total > limit and j > first:
            break
        last = j
        if total * 2 >= limit:
            candidates.append((units[j].strength, j))
    if last == len(units) - 1 or not candidates:
        return last
    for wanted in (PARAGRAPH, SENTENCE):
        ends = [j for strength, j in candidates if strength >= wanted]
        if ends:
            return ends[-1]
    return last


def _tail_start(text: str, unit: _Unit, budget: int) -> tuple[int, int] | None:
    """Start (a word/CJK-character boundary) and tokens of the longest tail of `unit` within `budget`."""
    cuts = [m.start() for m in _CUT.finditer(text, unit.start, unit.end) if m.start() > unit.start]
    best: tuple[int, int] | None = None
    lo, hi = 0, len(cuts) - 1
    while lo <= hi:  # the tail's tokens shrink as the cut moves right
        mid = (lo + hi) // 2
        n = count_tokens(text[cuts[mid] : unit.end].strip())
        if n <= budget:
            best, hi = (cuts[mid], n), mid - 1
        else:
            lo = mid + 1
    return best


def _next_lead(text: str, units: list[_Unit], first: int, end: int, budget: int) -> tuple[int, int] | None:
    """Where the next chunk starts (inside the current one) and the overlap's token count."""
    if budget <= 0:
        return None
    total, start = 0, None
    for k in range(end, first, -1):  # whole trailing units, never the whole chunk
        if total + units[k].tokens > budget:
            break
        total += units[k].tokens
        start = k
    if start is not None:
        return units[start].start, total
    return _tail_start(text, units[end], budget)


def _fit(text: str, units: list[_Unit], first: int, end: int, start: int, limit: int) -> tuple[int, int]:
    """Check the chunk text[start:units[end].end] with an exact count; while it is over `limit`
    (unit counts are not exactly additive) give back trailing units, then the overlap."""
    while count_tokens(text[start : units[end].end].strip()) > limit:
        if end > first:
            end -= 1
        elif start != units[first].start:
            start = units[first].start
        else:
            break  # a single character over the limit
    return start, end


def _strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    """(start, end) moved inwards past whitespace."""
    seg = text[start:end]
    return start + len(seg) - len(seg.lstrip()), end - len(seg) + len(seg.rstrip())


def chunk_spans(text: str, chunk_tokens: int = 500, overlap_tokens: int = 50) -> list[tuple[int, int]]:
    """(start, end) offsets into `text` of the chunks `chunk_text` returns."""
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be positive")
    if not 0 <= overlap_tokens < chunk_tokens:
        raise ValueError("overlap_tokens must be in [0, chunk_tokens)")
    lo, hi = _strip_span(text, 0, len(text))
    if lo >= hi:
        return []
    body = text[lo:hi]
    if count_tokens(body) <= chunk_tokens:
        return [(lo, hi)]
    units = _units(body, chunk_tokens)
    spans: list[tuple[int, int]] = []
    first, lead = 0, None  # lead: (start offset, tokens) of the overlap carried into this chunk
    while first < len(units):
        end = _choose_end(units, first, lead[1] if lead else 0, chunk_tokens)
        start, end = _fit(body, units, first, end, lead[0] if lead else units[first].start, chunk_tokens)
        a, b = _strip_span(body, start, units[end].end)
        spans.append((lo + a, lo + b))
        if end == len(units) - 1:
            break
        budget = min(overlap_tokens, chunk_tokens - units[end + 1].tokens)
        lead = _next_lead(body, units, first, end, budget)
        first = end + 1
    return spans


def chunk_text(text: str, chunk_tokens: int = 500, overlap_tokens: int = 50) -> list[str]:
    """Split `text` into chunks of at most `chunk_tokens` tokens overlapping by about `overlap_tokens`.

    Text that fits is returned as one stripped chunk; empty text gives no chunks. Chunks are
    stripped slices of `text`. A single character over `chunk_tokens` is the only way a chunk
    can exceed it.
    """
    return [text[a:b] for a, b in chunk_spans(text, chunk_tokens, overlap_tokens)]
