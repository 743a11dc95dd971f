"""What a query becomes before the channels read it: checked text with its language, its vector, and its
weighted keyword terms."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..embeddings import Embedder, EmbeddingError
from ..infra.errors import ValidationError, check_storable
from ..text.dictionary import expand_terms
from ..text.focus import focus
from ..text.glossary import expand
from ..text.language import language

log = logging.getLogger(__name__)

EXPANSION_WEIGHT = 0.5  # glossary translations count half as much as the query's own words
# CC-CEDICT translations (text.dictionary) weigh less than the glossary's: a word's n translations share it.
DICTIONARY_WEIGHT = 0.4


@dataclass(frozen=True)
class Query:
    """A query's text, checked once where it enters (`checked`), and its language (`text.language`)."""

    text: str
    language: str

    @classmethod
    def checked(cls, text: object) -> Query:
        """The query, or ValidationError("query") for anything but non-empty text PostgreSQL can store."""
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("query", "must be a non-empty string")
        check_storable("query", text)
        return cls(text, language(text))


FROM_KEYWORDS = "answered from keywords"
NO_KEYWORD_MATCH = "no keyword match cleared the relevance floor"


def no_keyword_match(note: str) -> str:
    """An outage note (from `embed_query`) for an answer keywords left empty: it must not claim an answer."""
    return note.removesuffix(FROM_KEYWORDS) + NO_KEYWORD_MATCH


def embed_query(embedder: Embedder, query: str, owner: str) -> tuple[np.ndarray | None, str | None]:
    """The query vector for `owner`, or (None, reason) when the provider fails. A long query (a dialogue, a long
    prompt) is embedded by its focused text: its last turns within text.focus.EMBED_BUDGET tokens."""
    try:
        return embedder.embed_query(focus(query).embed_text, owner), None
    except EmbeddingError as exc:
        log.warning("query embedding failed, degrading to keyword search: %s", exc)
        return None, f"embedding provider unavailable ({exc}); {FROM_KEYWORDS}"
    except Exception as exc:  # a provider must never break search
        log.exception("query embedding crashed")
        return None, f"embedding provider error ({type(exc).__name__}); {FROM_KEYWORDS}"


def query_terms(query: str) -> dict[str, float]:
    """The query's terms (weight 1; a long query's weighted by recency, text.focus) plus their glossary
    translations (EXPANSION_WEIGHT) and their CC-CEDICT translations (DICTIONARY_WEIGHT / n for a word's n
    translations), each times its source term's weight; a query term's own weight stands, else the highest."""
    weights = focus(query).term_weights
    groups: dict[float, list[str]] = {}  # one group, weight 1, unless the query was focused
    for term, weight in weights.items():
        groups.setdefault(weight, []).append(term)
    expanded: dict[str, float] = {}
    for weight, group in groups.items():
        for term in expand(group)[len(group):]:
            expanded[term] = max(expanded.get(term, 0.0), EXPANSION_WEIGHT * weight)
    for weight, group in groups.items():
        for term, w in expand_terms(group, DICTIONARY_WEIGHT).items():
            expanded[term] = max(expanded.get(term, 0.0), w * weight)
    for term, weight in expanded.items():
        weights.setdefault(term, weight)
    return weights
