"""The language of a text, as the similarity floors and the ranker's features tell them apart."""

from __future__ import annotations

from .keywords import has_cjk


def language(text: str) -> str:
    """"zh" for text with CJK characters, else "en" (the two languages the floors are measured for)."""
    return "zh" if has_cjk(text) else "en"
