"""Greedy maximal marginal relevance (λ = 0.7) across sources, with a hard near-duplicate cut.

Similarity between two items is the cosine of their embeddings when both have one (of the same
dimension), else the Jaccard similarity of their terms. Scores are divided by the best score first so
λ weighs like against like. An item whose Jaccard similarity to an already chosen one is ≥ `max_jaccard`
is never chosen, which is what the context-builder spec asks of the top results (pairwise Jaccard < 0.8).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..text.keywords import jaccard_sets, term_set


class Selectable(Protocol):
    score: float
    text: str
    embedding: np.ndarray | None


def jaccard_matrix(candidates: Sequence[Selectable]) -> np.ndarray:
    """Pairwise Jaccard similarity of the candidates' terms."""
    n = len(candidates)
    sets = [term_set(c.text) for c in candidates]
    out = np.eye(n)
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = jaccard_sets(sets[i], sets[j], candidates[i].text, candidates[j].text)
    return out


def similarity_matrix(candidates: Sequence[Selectable], jac: np.ndarray) -> np.ndarray:
    """Pairwise similarity: cosine where both items have a non-zero embedding of the same size, else Jaccard."""
    sim = jac.copy()
    by_dim: dict[int, list[int]] = {}
    for i, c in enumerate(candidates):
        if c.embedding is not None and c.embedding.ndim == 1 and np.any(c.embedding):
            by_dim.setdefault(c.embedding.shape[0], []).append(i)
    for idx in by_dim.values():
        emb = np.stack([np.asarray(candidates[i].embedding, dtype=np.float64) for i in idx])
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        sim[np.ix_(idx, idx)] = emb @ emb.T
    return sim


def mmr_select(
    candidates: Sequence[Selectable], k: int, lam: float = 0.7, max_jaccard: float = 0.8
) -> list[int]:
    """Indices of up to k candidates in MMR order."""
    if not candidates or k <= 0:
        return []
    jac = jaccard_matrix(candidates)
    sim = similarity_matrix(candidates, jac)
    scores = np.array([c.score for c in candidates], dtype=np.float64)
    top = scores.max() or 1.0
    rel = scores / top
    remaining = np.ones(len(candidates), dtype=bool)
    max_sim = np.zeros(len(candidates))
    chosen: list[int] = []
    while remaining.any() and len(chosen) < k:
        value = np.where(remaining, lam * rel - (1 - lam) * max_sim, -np.inf)
        best = int(np.argmax(value))
        remaining[best] = False
        if chosen and jac[best, chosen].max() >= max_jaccard:
            continue
        chosen.append(best)
        max_sim = np.maximum(max_sim, sim[:, best])
    return chosen
