"""Greedy maximal marginal relevance (λ = 0.7) across sources, with a hard near-duplicate cut.

Similarity between two items is the cosine of their embeddings when both have one, else the Jaccard
similarity of their terms. Scores are divided by the best score first so λ weighs like against like.
An item whose Jaccard similarity to an already chosen one is ≥ `max_jaccard` is never chosen, which
is what seed 001 asks of the top results (pairwise Jaccard < 0.8).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..text.keywords import jaccard_sets, term_set


class Candidate(Protocol):
    score: float
    text: str
    embedding: np.ndarray | None


def similarity(a: Candidate, b: Candidate, ta: frozenset[str], tb: frozenset[str]) -> float:
    """Cosine of embeddings when both exist, else Jaccard of terms (ta, tb: their term sets)."""
    if a.embedding is not None and b.embedding is not None and a.embedding.shape == b.embedding.shape:
        na, nb = float(np.linalg.norm(a.embedding)), float(np.linalg.norm(b.embedding))
        if na > 0 and nb > 0:
            return float(np.dot(a.embedding, b.embedding) / (na * nb))
    return jaccard_sets(ta, tb, a.text, b.text)


def mmr_select(
    candidates: Sequence[Candidate], k: int, lam: float = 0.7, max_jaccard: float = 0.8
) -> list[int]:
    """Indices of up to k candidates in MMR order."""
    if not candidates or k <= 0:
        return []
    sets = [term_set(c.text) for c in candidates]
    top = max(c.score for c in candidates) or 1.0
    rel = [c.score / top for c in candidates]
    remaining = list(range(len(candidates)))
    chosen: list[int] = []
    max_sim = [0.0] * len(candidates)
    while remaining and len(chosen) < k:
        best, best_value = None, -np.inf
        for i in remaining:
            value = lam * rel[i] - (1 - lam) * max_sim[i]
            if value > best_value:
                best, best_value = i, value
        remaining.remove(best)
        b = candidates[best]
        if any(jaccard_sets(sets[best], sets[j], b.text, candidates[j].text) >= max_jaccard for j in chosen):
            continue
        chosen.append(best)
        for i in remaining:
            max_sim[i] = max(max_sim[i], similarity(candidates[i], b, sets[i], sets[best]))
    return chosen
