"""Token counting with a real BPE vocabulary that ships offline (`bpe-openai`, cl100k_base).

If the tokenizer cannot load, `estimate_tokens` is used instead: 1 token per CJK character plus 1
per 4 other characters. Against cl100k_base on the demo corpus its mean error is -9 % on Chinese and
+9 % on English texts (mean absolute 11 % / 13 %, tests/test_tokens.py); the spec's `len / 2.5` is
-36 % on Chinese (a budget built on it overflows) and +74 % on English.
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


def count_tokens(text: str) -> int:
    """Exact cl100k_base token count when the tokenizer is available, else the estimate."""
    if not text:
        return 0
    enc = _encoding()
    if enc is None:
        return estimate_tokens(text)
    return len(enc.encode(text))


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` that fits in `max_tokens` tokens."""
    if count_tokens(text) <= max_tokens:
        return text
    enc = _encoding()
    if enc is not None:
        return enc.decode(enc.encode(text)[:max_tokens])
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def tokenizer_name() -> str:
    """Which counter is in use."""
    return "cl100k_base" if _encoding() is not None else "estimate"
