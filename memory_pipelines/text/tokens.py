"""Token counting with a real BPE vocabulary that ships offline (`bpe-openai`, cl100k_base).

If the tokenizer cannot load, `estimate_tokens` is used instead: 1 token per CJK character plus 1
per 4 other characters. Against cl100k_base on the demo corpus its mean error is -9 % on Chinese and
+9 % on English texts (mean absolute 11 % / 13 %, tests/test_tokens.py); the spec's `len / 2.5` is
-36 % on Chinese (a budget built on it overflows) and +74 % on English.

Any text is counted: the tokenizer refuses an input of over 200 000 tokens (100 000 emoji are 300 000), so
long text is encoded in pieces of at most `PIECE_CHARS` characters, cut where cl100k's pre-tokenizer cuts
anyway (before a space that follows a non-space) when the piece has one, so the counts add up exactly.
Special-token text such as "<|endoftext|>" is ordinary text here.
"""

from __future__ import annotations

import functools
import math
import re

_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")


@functools.lru_cache(maxsize=1)
def _encoding():
    try:
        import bpe_openai

        return bpe_openai.get_encoding("cl100k_base")
    except Exception:  # pragma: no cover - only when the package is missing or broken
        return None


def estimate_tokens(text: str) -> int:
    """Tokenizer-free estimate: CJK characters count one each, other text ~4 characters a token."""
    cjk = len(_CJK.findall(text))
    other = len(text) - cjk
    return cjk + math.ceil(other / 4)


PIECE_CHARS = 40_000
"""Characters encoded at once: at most 4 UTF-8 bytes a character and at least one byte a token, so a piece is
at most 160 000 tokens, under the tokenizer's cap of 200 000 per call."""
_CUT_BEFORE = re.compile(r"(?<=\S)[^\S\r\n]")  # a space (not a line break) right after a non-space


def pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """`text` cut into pieces of at most `size` characters, each cut at the last pre-tokenizer boundary (a
    space after a non-space) in the second half of the piece when there is one, else at `size`."""
    out: list[str] = []
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = None
        for m in _CUT_BEFORE.finditer(text, start + size // 2, end):
            cut = m.start()
        end = cut if cut is not None and cut > start else end
        out.append(text[start:end])
        start = end
    out.append(text[start:])
    return out


def _encode(text: str, max_tokens: int | None = None) -> list[int]:
    """cl100k_base token ids of `text` (encoded piece by piece), stopping once `max_tokens` are reached."""
    enc = _encoding()
    ids: list[int] = []
    for piece in pieces(text):
        ids.extend(enc.encode_ordinary(piece))
        if max_tokens is not None and len(ids) > max_tokens:
            break
    return ids


def count_tokens(text: str) -> int:
    """Exact cl100k_base token count when the tokenizer is available, else the estimate."""
    if not text:
        return 0
    if _encoding() is None:
        return estimate_tokens(text)
    return len(_encode(text))


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` that fits in `max_tokens` tokens."""
    enc = _encoding()
    if enc is not None:
        ids = _encode(text, max_tokens)
        return text if len(ids) <= max_tokens else enc.decode(ids[:max_tokens])
    if count_tokens(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def fit_tokens(text: str, max_tokens: int) -> tuple[str, int]:
    """(`truncate_to_tokens(text, max_tokens)`, its token count), the text encoded once when it fits."""
    if _encoding() is not None:
        ids = _encode(text, max_tokens)
        if len(ids) <= max_tokens:
            return text, len(ids)
    line = truncate_to_tokens(text, max_tokens)
    return line, count_tokens(line)


def tokenizer_name() -> str:
    """Which counter is in use."""
    return "cl100k_base" if _encoding() is not None else "estimate"
