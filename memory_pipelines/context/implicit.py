"""Implicit feedback, the pure part: did the agent's output demonstrably use an injected item?

Two overlap measures between the output and the block line the agent was shown:

- semantic: the cosine between the item's embedding and the best-matching chunk of the output (long outputs
  are chunked, so one paragraph that paraphrases the item counts), calibrated like search's semantic channel:
  (cos - floor) / (1 - floor) with the model's floor for the two languages (`Embedder.floor_for`);
- lexical: the share of the item's distinctive terms found in the output. Terms come from `text.keywords`
  (jieba for Chinese); distinctive means not in the query (every injected item shares the query's words, and so
  does any answer to it); the output's terms are expanded through the bilingual glossary, so a Chinese answer
  that says 令牌 matches an item that says token.

The decision is one number against one constant: evidence = max(semantic, lexical) ≥ IMPLICIT_THRESHOLD. How
the constant was measured is in docs/tuning.md ("Implicit feedback threshold") and `scripts/calibrate_implicit.py`.
No I/O here: log.record_implicit_feedback reads the build, embeds and writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..text.chunks import chunk_text
from ..text.glossary import expand
from ..text.keywords import has_cjk, terms

IMPLICIT_THRESHOLD = 0.7
"""An injected item counts as used when max(semantic, lexical) reaches this. Measured with the bundled model on
the demo corpus's 300 simulated sessions (2 262 injected items with evidence, 296 really used): chosen on the
even sessions as the best F1 with precision ≥ 0.8; on the odd (held-out) ones precision 0.80, recall 0.60
(scripts/calibrate_implicit.py; docs/tuning.md)."""
MIN_DISTINCTIVE = 4
"""The lexical share divides by at least this many terms: an item with two distinctive words is not 'used'
because an answer happens to say one of them."""
OUTPUT_CHUNK_TOKENS, OUTPUT_CHUNK_OVERLAP = 200, 40
"""Chunks of a long output, each compared with the item (about the length of a block line or two)."""
MAX_MATCHED_TERMS = 20
"""Matched terms kept in the evidence."""

_LINE_HEAD = re.compile(r"^-\s*\[[^\]]*\]\s*")


def item_text(line: str) -> str:
    """The words of a block line without its `- [source · date]` head."""
    return _LINE_HEAD.sub("", line or "", count=1).strip()


def language(text: str) -> str:
    """'zh' for text with CJK characters, else 'en' (the language pairs the embedder's floors are for)."""
    return "zh" if has_cjk(text) else "en"


def output_chunks(output: str) -> list[str]:
    """The output cut into chunks of about OUTPUT_CHUNK_TOKENS tokens (one chunk when short)."""
    return chunk_text(output, OUTPUT_CHUNK_TOKENS, OUTPUT_CHUNK_OVERLAP) or [output.strip()]


def output_terms(output: str) -> frozenset[str]:
    """The output's terms plus their glossary translations (Chinese ↔ English)."""
    return frozenset(expand(terms(output)))


def distinctive_terms(text: str, query: str) -> list[str]:
    """The item's terms that the query does not contain, in order, deduplicated."""
    asked = set(expand(terms(query)))
    return [t for t in dict.fromkeys(terms(text)) if t not in asked]


def lexical_overlap(distinctive: list[str], out_terms: frozenset[str]) -> tuple[float, list[str]]:
    """(share of the distinctive terms found in the output, the matched terms)."""
    matched = [t for t in distinctive if t in out_terms]
    return len(matched) / max(len(distinctive), MIN_DISTINCTIVE), matched


def semantic_overlap(item_vec: np.ndarray, chunk_vecs: np.ndarray, floors: list[float]) -> tuple[float, float]:
    """(calibrated score of the best chunk, its raw cosine); vectors are unit length, `floors` per chunk."""
    if chunk_vecs.size == 0:
        return 0.0, 0.0
    cos = chunk_vecs @ item_vec
    cal = [max(0.0, (float(c) - f) / (1.0 - f)) if f < 1 else float(c) for c, f in zip(cos, floors, strict=True)]
    best = int(np.argmax(cal))
    return min(1.0, cal[best]), float(cos[best])


@dataclass(frozen=True)
class Evidence:
    """Why an item was (or was not) marked used."""

    semantic: float | None  # None: not measured (the embedding provider failed), unlike a measured 0
    cosine: float | None
    lexical: float
    matched_terms: list[str]
    distinctive_terms: int
    threshold: float = IMPLICIT_THRESHOLD

    @property
    def score(self) -> float:
        return max(self.semantic or 0.0, self.lexical)

    @property
    def used(self) -> bool:
        return decide(self.semantic, self.lexical, self.threshold)

    def as_dict(self) -> dict[str, Any]:
        return {
            "semantic": _rounded(self.semantic),
            "cosine": _rounded(self.cosine),
            "lexical": round(self.lexical, 4),
            "matched_terms": self.matched_terms[:MAX_MATCHED_TERMS],
            "distinctive_terms": self.distinctive_terms,
            "score": round(self.score, 4),
            "threshold": self.threshold,
            "used": self.used,
        }


def _rounded(value: float | None) -> float | None:
    """A measure as stored: 4 decimals, None (not measured) kept."""
    return None if value is None else round(value, 4)


def decide(semantic: float | None, lexical: float, threshold: float = IMPLICIT_THRESHOLD) -> bool:
    """The decision: the stronger of the two channels reaches the threshold (an unmeasured one does not)."""
    return max(semantic or 0.0, lexical) >= threshold


def evidence(
    text: str,
    query: str,
    out_terms: frozenset[str],
    item_vec: np.ndarray | None,
    chunk_vecs: np.ndarray | None,
    floors: list[float],
    threshold: float = IMPLICIT_THRESHOLD,
) -> Evidence:
    """Both measures for one item (its words `text`) against one output (its terms, chunk vectors, floors);
    without vectors (the embedder failed) the semantic measures are None, not 0."""
    distinct = distinctive_terms(text, query)
    lex, matched = lexical_overlap(distinct, out_terms)
    measured = item_vec is not None and chunk_vecs is not None
    sem, cos = semantic_overlap(item_vec, chunk_vecs, floors) if measured else (None, None)
    return Evidence(semantic=sem, cosine=cos, lexical=lex, matched_terms=matched,
                    distinctive_terms=len(distinct), threshold=threshold)
