"""The embedding model interface every provider implements."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator, Sequence

import numpy as np


class EmbeddingError(RuntimeError):
    """The provider could not embed (outage, timeout, exhausted retries)."""


class EmbeddingAuthError(EmbeddingError):
    """The provider rejected our credentials (401/403); retrying cannot help."""


class Embedder(ABC):
    """Turns texts into L2-normalised float32 vectors.

    `kind` is "query" for search queries and "passage" for stored items; models such as
    e5 embed the two differently, others ignore it.
    """

    model_name: str
    dimension: int
    batch_size: int = 64
    # The cosine similarity this model gives unrelated texts; hybrid search maps similarities above it
    # onto [0, 1] so the semantic and keyword channels are comparable (see retrieval/semantic.calibrate_semantic).
    similarity_floor: float = 0.0

    def floor_for(self, query_lang: str, doc_lang: str) -> float:
        """The floor for one language pair ("zh" / "en"); models with a language bias override this."""
        return self.similarity_floor

    @abstractmethod
    def embed_batch(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        """Embed one batch (len(texts) <= batch_size) and return an (n, dimension) array."""

    def embed(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        """Embed any number of texts, batch by batch."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = [self.embed_batch(chunk, kind) for chunk in self.batches(texts)]
        return np.vstack(parts)

    def embed_on_request(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        """`embed` for a caller that waits, or a lock held meanwhile: a remote provider answers within a short
        budget or raises EmbeddingError (the caller degrades; the background worker retries patiently)."""
        return self.embed(texts, kind)

    def embed_query(self, text: str, scope: str = "") -> np.ndarray:
        """Embed one search query; `scope` (the asking owner) partitions any cache of query vectors."""
        return self.embed_batch([text], kind="query")[0]

    def batches(self, texts: Sequence[str]) -> Iterator[Sequence[str]]:
        """Split texts into batches this provider accepts in one call."""
        for start in range(0, len(texts), self.batch_size):
            yield texts[start : start + self.batch_size]


class QueryCache:
    """A bounded, thread-safe LRU map of (scope, query text) to its vector (agents repeat queries; a model is
    deterministic). Keyed by the asking owner too: a hit is much faster, so a shared entry would tell one owner
    what another asked. Vectors are stored read-only and handed out as copies."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self.hits = self.misses = 0
        self._items: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str, scope: str = "") -> np.ndarray | None:
        with self._lock:
            vector = self._items.get((scope, text))
            if vector is None:
                self.misses += 1
                return None
            self._items.move_to_end((scope, text))
            self.hits += 1
        return vector.copy()

    def put(self, text: str, vector: np.ndarray, scope: str = "") -> None:
        stored = np.array(vector, dtype=np.float32)
        stored.setflags(write=False)
        with self._lock:
            self._items[(scope, text)] = stored
            self._items.move_to_end((scope, text))
            while len(self._items) > self.size:
                self._items.popitem(last=False)


def normalise(matrix: np.ndarray) -> np.ndarray:
    """Return rows scaled to unit length (zero rows stay zero)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def to_array(value: object) -> np.ndarray | None:
    """A database vector (pgvector `Vector`, list or array) as float32 numpy, or None."""
    if value is None:
        return None
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)
