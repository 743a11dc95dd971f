"""OpenAI (or any OpenAI-compatible server) embeddings through the official `openai` client.

The client is the one the chat model uses too (`infra.openai_client`: retries 429, 5xx, timeouts and connection
errors with backoff). Requests are bounded by input count and total tokens, and single inputs are truncated to
the model's 8191-token limit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..infra.openai_client import ON_REQUEST, QUERY, Budget, OpenAIClient
from ..infra.retry import RetriesExhausted, describe_error, status_code
from ..text.tokens import count_tokens, truncate_to_tokens
from .base import Embedder, EmbeddingAuthError, EmbeddingError, normalise

if TYPE_CHECKING:
    from ..infra.settings import Settings

KNOWN_DIMENSIONS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
MAX_INPUT_TOKENS = 8191
_PROBE_TEXT = "dimension probe"


class OpenAIEmbedder(Embedder):
    """Embeddings from the OpenAI API. `kind` is ignored: OpenAI embeds queries and passages alike."""

    similarity_floor = 0.2  # text-embedding-3 puts unrelated texts near 0.0-0.2 (not measured here)

    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        model: str = "text-embedding-3-small",
        dimensions: int | None = None,
        timeout: float = 30.0,
        max_retries: int = 5,
        max_inputs: int = 2048,
        max_tokens_per_request: int = 250_000,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = OpenAIClient(api_key, base_url, user="the OpenAI embedder", timeout=timeout,
                                   max_retries=max_retries, backoff_base=backoff_base, backoff_max=backoff_max,
                                   sleep=sleep)
        self.base_url = self.client.base_url
        self.model_name = model
        self.dimensions = dimensions
        self.batch_size = max_inputs
        self.max_tokens_per_request = max_tokens_per_request
        self._dimension: int | None = dimensions or KNOWN_DIMENSIONS.get(model)
        self._probe_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIEmbedder:
        """Build from `Settings` (OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_EMBED_MODEL, ...)."""
        return cls(
            api_key=settings.openai_api_key or "",
            base_url=settings.openai_base_url,
            model=settings.openai_embed_model,
            dimensions=settings.openai_embed_dimensions,
            timeout=settings.openai_timeout,
            max_retries=settings.openai_max_retries,
        )

    @property
    def dimension(self) -> int:  # type: ignore[override]
        """Vector length: `dimensions`, the known size of the model, or probed once from the API."""
        if self._dimension is None:
            with self._probe_lock:
                if self._dimension is None:
                    self._dimension = self._request([_PROBE_TEXT]).shape[1]
        return self._dimension

    def batches(self, texts: Sequence[str]) -> Iterator[Sequence[str]]:
        """Batches of at most `batch_size` inputs and `max_tokens_per_request` tokens (inputs fitted)."""
        batch: list[str] = []
        tokens = 0
        for text in texts:
            text = fit_input(text)
            size = max(1, count_tokens(text))
            if batch and (len(batch) >= self.batch_size or tokens + size > self.max_tokens_per_request):
                yield batch
                batch, tokens = [], 0
            batch.append(text)
            tokens += size
        if batch:
            yield batch

    def embed_query(self, text: str, scope: str = "") -> np.ndarray:
        """A query is on a request's path: a short deadline, then search degrades to keywords (with the whole
        retry budget, a hanging provider held a search for minutes)."""
        return self._embedded([text], QUERY)[0]

    def embed_on_request(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        """Within `ON_REQUEST`'s budget per batch; then EmbeddingError, and the caller degrades."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.vstack([self._embedded(batch, ON_REQUEST) for batch in self.batches(texts)])

    def embed_batch(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        """Embed one batch; returns L2-normalised float32 rows in input order."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self._embedded(texts)

    def _embedded(self, texts: Sequence[str], budget: Budget | None = None) -> np.ndarray:
        matrix = self._request([fit_input(t) for t in texts], budget)
        self._check_dimension(matrix.shape[1])
        return normalise(matrix)

    def _check_dimension(self, got: int) -> None:
        if self._dimension is None:
            self._dimension = got
        elif got != self._dimension:
            raise EmbeddingError(
                f"{self.base_url} returned {got}-dimensional vectors for {self.model_name}, "
                f"expected {self._dimension}. Fix: set OPENAI_EMBED_DIMENSIONS to the size the model returns."
            )

    def _request(self, inputs: list[str], budget: Budget | None = None) -> np.ndarray:
        """One embeddings call (with retries, within `budget` when given), rows sorted by the response's
        `index`."""
        kwargs: dict[str, Any] = {"model": self.model_name, "input": inputs}
        if self.dimensions:
            kwargs["dimensions"] = self.dimensions
        try:
            response = self.client.call(lambda api: api.embeddings.create(**kwargs), budget)
        except Exception as exc:
            raise self._translate(exc) from exc
        rows = sorted(response.data, key=lambda item: item.index)
        if len(rows) != len(inputs):
            raise EmbeddingError(f"{self.base_url} returned {len(rows)} embeddings for {len(inputs)} inputs")
        matrix = np.asarray([row.embedding for row in rows], dtype=np.float32)
        self._check_values(matrix)
        return matrix

    def _check_values(self, matrix: np.ndarray) -> None:
        """A vector that is not finite or all zeros is a failed call (kept pending, retried), not a row to store:
        PostgreSQL refuses NaN, and a zero vector would be marked embedded and never match anything."""
        bad = ~np.isfinite(matrix).all(axis=1) | ~matrix.any(axis=1) if matrix.size else np.zeros(0, dtype=bool)
        if bad.any():
            kind = "not finite" if not np.isfinite(matrix[bad]).all() else "all zeros"
            raise EmbeddingError(f"{self.base_url} returned {int(bad.sum())} of {len(matrix)} {self.model_name} "
                                 f"vectors {kind}. Fix: check the embedding service (its model or its load).")

    def _translate(self, exc: Exception) -> EmbeddingError:
        """Map a client or retry failure to an EmbeddingError with cause and fix."""
        if isinstance(exc, RetriesExhausted):
            return EmbeddingError(
                f"OpenAI embeddings failed after {exc.attempts} attempts at {self.base_url} "
                f"(last: {describe_error(exc.last_error)}). Fix: retry later or check OPENAI_BASE_URL."
            )
        status = status_code(exc)
        if status in (401, 403):
            return EmbeddingAuthError(
                f"the OpenAI API key was rejected by {self.base_url} (HTTP {status}). "
                "Fix: check OPENAI_API_KEY (or unset it to use the local model)."
            )
        detail = self.client.redact(getattr(exc, "message", None) or str(exc))
        return EmbeddingError(
            f"OpenAI embeddings request to {self.base_url} failed ({describe_error(exc)}): {detail}"
        )


def fit_input(text: str) -> str:
    """Make a text acceptable as one input: non-empty and at most MAX_INPUT_TOKENS tokens."""
    if not text:
        return " "
    if len(text.encode("utf-8")) <= MAX_INPUT_TOKENS:  # a token is at least one byte
        return text
    return truncate_to_tokens(text, MAX_INPUT_TOKENS)
