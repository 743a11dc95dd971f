"""What a search returns: hits with the parts of their score, read from rows of the searched tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from ..embeddings.base import to_array
from ..vocabulary import SOURCES


@dataclass
class Hit:
    """One search result; `score` is the final (fused) score, the others its parts."""

    source: str
    id: str
    title: str
    preview: str
    score: float
    created_at: datetime | None = None
    semantic: float | None = None
    keyword: float | None = None
    keyword_evidence: float | None = None
    """The keyword match as a share of what one query term found in a single document would score in this
    corpus (BM25 / ln(1 + (N − 0.5) / 1.5), N the owner's documents): comparable across corpus sizes, where
    BM25 itself is not (in a corpus of two, no match reaches 1). The relevance floor reads it."""
    text: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    embedding: np.ndarray | None = None


@dataclass
class SearchResult:
    hits: list[Hit]
    mode: str
    degraded: str | None = None


def hit_from_row(
    source: str, row: tuple, *, semantic: float | None = None, keyword: float | None = None,
    keyword_evidence: float | None = None,
) -> Hit:
    """A hit from (id, title, body, created_at, score, extra, vector), as the channels' queries select them."""
    item_id, title, body, created_at, score, extra, emb = row
    text = body if SOURCES[source].chunked else f"{title}\n{body}"
    return Hit(
        source=source,
        id=str(item_id),
        title=title or "",
        preview=(body or "")[:200],
        score=float(score),
        created_at=created_at,
        semantic=semantic,
        keyword=keyword,
        keyword_evidence=keyword_evidence,
        text=text,
        extra=extra or {},
        embedding=to_array(emb),
    )
