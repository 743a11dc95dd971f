"""Deterministic fallbacks for when no LLM is configured: extractive summaries and keyword tags."""

from __future__ import annotations

import math
from collections import Counter

from memory_pipelines.text.chunks import split_sentences
from memory_pipelines.text.keywords import has_cjk, term_counts, terms, tfidf_top_terms

_ELLIPSIS = "…"
_MIN_TERMS = 3  # sentences with fewer distinct terms score proportionally less
_KEEP_RATIO = 0.5  # sentences after the best one must score at least this fraction of it
_FULL_WIDTH_PUNCT = "。！？；，、：）」』”’"


def _collapse(text: str) -> str:
    """Whitespace runs collapsed to one space, ends stripped."""
    return " ".join(text.split())


def _joins_tight(left: str, right: str) -> bool:
    """Whether two pieces of text are joined without a space (Chinese on either side of the seam)."""
    return left[-1] in _FULL_WIDTH_PUNCT or has_cjk(left[-1]) or has_cjk(right[0])


def _join(parts: list[str]) -> str:
    out = parts[0] if parts else ""
    for part in parts[1:]:
        out += part if _joins_tight(out, part) else " " + part
    return out


def _truncate(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars` characters with a trailing ellipsis, at a space when one is near."""
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars - 1]
    space = cut.rfind(" ")
    if space > len(cut) // 2:
        cut = cut[:space]
    return cut.rstrip() + _ELLIPSIS


def _sentence_scores(sentences: list[str]) -> list[float]:
    """Cosine of each sentence's TF-IDF vector (IDF over the sentences) with the text's centroid,
    damped for sentences with fewer than 3 distinct terms (greetings, filler)."""
    counts = [term_counts(s) for s in sentences]
    df = Counter(t for c in counts for t in c)
    n = len(sentences)
    idf = {t: math.log((1 + n) / (1 + d)) + 1.0 for t, d in df.items()}
    vectors = [{t: (1 + math.log(tf)) * idf[t] for t, tf in c.items()} for c in counts]
    centroid: Counter[str] = Counter()
    for v in vectors:
        centroid.update(v)
    c_norm = math.sqrt(sum(w * w for w in centroid.values())) or 1.0
    scores = []
    for v in vectors:
        norm = math.sqrt(sum(w * w for w in v.values()))
        cosine = sum(w * centroid[t] for t, w in v.items()) / (norm * c_norm) if norm else 0.0
        scores.append(cosine * min(1.0, len(v) / _MIN_TERMS))
    return scores


def extractive_summary(text: str, max_chars: int = 200) -> str:
    """A summary of at most `max_chars` characters made of whole sentences of `text`.

    Whole text if it fits; otherwise the sentences closest to the text's TF-IDF centroid
    (ties to the earlier one; only those scoring at least half the best), added greedily while
    they fit and output in original order; if none fits, the best one truncated with an ellipsis.
    Empty only for blank input.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be positive")
    flat = _collapse(text)
    if len(flat) <= max_chars:
        return flat
    sentences = [_collapse(s) for s in split_sentences(text)]
    scores = _sentence_scores(sentences)
    ranked = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
    floor = scores[ranked[0]] * _KEEP_RATIO
    chosen: list[int] = []
    for i in ranked:
        if scores[i] < floor:
            break
        if len(_join([sentences[j] for j in sorted([*chosen, i])])) <= max_chars:
            chosen.append(i)
    if not chosen:
        return _truncate(sentences[ranked[0]], max_chars)
    return _join([sentences[j] for j in sorted(chosen)])


def _tag_weight(term: str) -> float:
    """Longer terms are more specific; a Chinese character counts as two letters; bare numbers count half."""
    length = len(term) * (2 if has_cjk(term) else 1)
    weight = math.log1p(min(length, 12))
    return weight / 2 if term.isdigit() else weight


def tags(text: str, corpus: list[str] | None = None, top_k: int = 5) -> list[str]:
    """Up to `top_k` keyword tags for `text`.

    With a `corpus`: the text's top TF-IDF terms, IDF fitted on corpus + text. Without one:
    terms ranked by ``(1 + ln tf) * ln(1 + length)`` (ties to the first occurrence).
    """
    if top_k < 1:
        return []
    if corpus:
        return [term for term, _ in tfidf_top_terms([*corpus, text], top_k, stem=False)[-1]]
    found = terms(text, stem=False)
    counts = Counter(found)
    first_seen = {t: i for i, t in reversed(list(enumerate(found)))}
    ranked = sorted(counts, key=lambda t: (-(1 + math.log(counts[t])) * _tag_weight(t), first_seen[t]))
    return ranked[:top_k]
