"""A deterministic embedder for tests: hashed bag of words, no model, no network.

Texts that share words get similar vectors, so search behaves sensibly in tests, and the
same text always yields the same vector in every process.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from .base import Embedder, normalise

_TOKEN = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]")


def fake_tokens(text: str) -> list[str]:
    """Lower-cased English words plus Chinese character bigrams (and single characters)."""
    raw = _TOKEN.findall(text.lower())
    out: list[str] = []
    for i, tok in enumerate(raw):
        out.append(tok)
        if "\u4e00" <= tok <= "\u9fff" and i + 1 < len(raw) and "\u4e00" <= raw[i + 1] <= "\u9fff":
            out.append(tok + raw[i + 1])
    return out


def fake_vector(text: str, dimension: int) -> np.ndarray:
    """The fake embedding of one text: signed feature hashing of its tokens, normalised."""
    vec = np.zeros(dimension, dtype=np.float32)
    for tok in fake_tokens(text) or ["<empty>"]:
        digest = hashlib.blake2b(tok.encode("utf-8"), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dimension
        sign = 1.0 if digest[4] & 1 else -1.0
        vec[bucket] += sign
    return normalise(vec[None, :])[0]


class FakeEmbedder(Embedder):
    """Deterministic embedder; `fail_after` makes it raise after that many texts (for tests)."""

    def __init__(self, dimension: int = 384, batch_size: int = 256, model_name: str = "fake-hash") -> None:
        self.dimension = dimension
        self.batch_size = batch_size
        self.model_name = f"{model_name}-{dimension}"
        self.calls = 0
        self.texts_embedded = 0
        self.fail_after: int | None = None

    def embed_batch(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        from .base import EmbeddingError

        if self.fail_after is not None and self.texts_embedded + len(texts) > self.fail_after:
            raise EmbeddingError("fake provider failure (fail_after reached)")
        self.calls += 1
        self.texts_embedded += len(texts)
        return np.vstack([fake_vector(t, self.dimension) for t in texts])
