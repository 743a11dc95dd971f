"""Fusing semantic and keyword result lists (pure functions over hits with `source`, `id`, `score`).

`evidence` (the default) scores every candidate on both channels: 0.6 × semantic + 0.4 × keyword, where the
semantic score of an item only the keyword channel found is computed from its vector (search fills it in), and
an item the keyword channel did not return scores 0 there. A channel with nothing to say for a query (no query
term in the owner's corpus, in any language) adds nothing to anyone, and no item is penalised for being found by
one channel only. An item with no vector yet (stored without waiting, not embedded) has no semantic evidence
either way, so it is scored on the keyword channel alone (its keyword score, both weights).
`weighted` is the advanced-search spec's rule: 0.6 × semantic + 0.4 × keyword when both found the item, × 0.7 of its
one score when only one did. Its single-source penalty lets an item the keyword channel missed lose to items with a
stray keyword match, which pulls fusion below the semantic channel across languages.
`rrf` is reciprocal-rank fusion (k = 60), which ignores score scales. All inputs are calibrated onto [0, 1]
(`semantic.calibrate_semantic`, `keyword.calibrate_keyword`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SEMANTIC_WEIGHT, KEYWORD_WEIGHT, SINGLE_SOURCE_FACTOR = 0.6, 0.4, 0.7
RRF_K = 60


def rescored(hit: Any, **changes: Any) -> Any:
    """A shallow copy of `hit` with some fields changed. Fusion copies hundreds of hits per query, so
    this copies the instance dict directly (dataclasses.replace re-runs __init__; copy.copy goes
    through the pickle protocol, ~10× slower)."""
    new = object.__new__(type(hit))
    new.__dict__.update(hit.__dict__)
    new.__dict__.update(changes)
    return new


def _key(hit: Any) -> tuple[str, str]:
    return hit.source, hit.id


def weighted_fusion(semantic: list[Any], keyword: list[Any]) -> list[Any]:
    """The advanced-search spec's weighted fusion; both inputs carry scores in [0, 1]."""
    sem = {_key(h): h for h in semantic}
    kw = {_key(h): h for h in keyword}
    out = []
    for key in sem.keys() | kw.keys():
        s, k = sem.get(key), kw.get(key)
        if s is not None and k is not None:
            score = SEMANTIC_WEIGHT * s.score + KEYWORD_WEIGHT * k.score
            out.append(rescored(s, score=score, keyword=k.score, keyword_evidence=k.keyword_evidence))
        elif s is not None:
            out.append(rescored(s, score=s.score * SINGLE_SOURCE_FACTOR))
        else:
            out.append(rescored(k, score=k.score * SINGLE_SOURCE_FACTOR))
    return sorted(out, key=lambda h: (-h.score, h.source, h.id))


def evidence_fusion(semantic: list[Any], keyword: list[Any]) -> list[Any]:
    """Every candidate on both channels (see the module docstring). `semantic` holds every candidate the
    semantic channel can score (its own hits and the keyword hits' vectors), calibrated."""
    sem = {_key(h): h for h in semantic}
    kw = {_key(h): h for h in keyword}
    out = []
    for key in sem.keys() | kw.keys():
        s, k = sem.get(key), kw.get(key)
        if s is None and k.embedding is None:
            score = k.score  # not embedded yet: no semantic evidence for or against it
        else:
            score = SEMANTIC_WEIGHT * (s.score if s is not None else 0.0) + KEYWORD_WEIGHT * (k.score if k else 0.0)
        base = s if s is not None else k
        out.append(rescored(base, score=score, keyword=k.score if k else None,
                            keyword_evidence=k.keyword_evidence if k else None))
    return sorted(out, key=lambda h: (-h.score, h.source, h.id))


def rrf_fusion(semantic: list[Any], keyword: list[Any], k: int = RRF_K) -> list[Any]:
    """Reciprocal-rank fusion: sum of 1 / (k + rank) over the lists an item appears in."""
    scores: dict[tuple[str, str], float] = {}
    first: dict[tuple[str, str], Any] = {}
    for hits in (semantic, keyword):
        for rank, h in enumerate(sorted(hits, key=lambda x: -x.score), start=1):
            scores[_key(h)] = scores.get(_key(h), 0.0) + 1.0 / (k + rank)
            first.setdefault(_key(h), h)
    kw = {_key(h): h for h in keyword}
    out = [rescored(first[key], score=score, keyword=kw[key].score if key in kw else None,
                    keyword_evidence=kw[key].keyword_evidence if key in kw else None)
           for key, score in scores.items()]
    return sorted(out, key=lambda h: (-h.score, h.source, h.id))


FUSIONS: dict[str, Callable[[list[Any], list[Any]], list[Any]]] = {
    "evidence": evidence_fusion,
    "weighted": weighted_fusion,
    "rrf": rrf_fusion,
}
