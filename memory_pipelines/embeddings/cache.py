"""A persistent embedding cache for evaluation runs (`memory-pipelines eval --embedding-cache DIR`).

`CachedEmbedder` wraps any `Embedder`: a text already embedded by the same model as the same kind (query or
passage) is read from `DIR/embeddings.sqlite3` instead of recomputed; new vectors are appended (the store
only grows: delete the folder to empty it). Keys are sha1(model name, kind, text), so a changed text, model or
kind simply misses. Everything else (dimension, batch size, similarity floors, `floor_for`, other attributes
such as `LANGUAGE_FLOORS`) is the wrapped embedder's.

It is for evaluation runs, which embed the same benchmark again and again; the product's write path already
skips unchanged content. Several processes may share a folder (SQLite serialises the writes).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import Embedder

FILE_NAME = "embeddings.sqlite3"


def cache_key(model_name: str, kind: str, text: str) -> str:
    """sha1 of model, kind and text (NUL-separated, so no two triples share a key by concatenation)."""
    return hashlib.sha1(f"{model_name}\0{kind}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()


class CachedEmbedder(Embedder):
    """`inner` with its vectors kept on disk under `directory`; `hits` and `misses` count texts."""

    def __init__(self, inner: Embedder, directory: str | Path) -> None:
        self.inner = inner
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / FILE_NAME
        self.hits = self.misses = 0
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, model TEXT NOT NULL, kind TEXT NOT NULL,"
            " dim INTEGER NOT NULL, vec BLOB NOT NULL)"
        )

    # --- delegated to the wrapped embedder ------------------------------------------------------------------

    @property
    def model_name(self) -> str:  # type: ignore[override]
        return self.inner.model_name

    @property
    def dimension(self) -> int:  # type: ignore[override]
        return self.inner.dimension

    @property
    def batch_size(self) -> int:  # type: ignore[override]
        return self.inner.batch_size

    @property
    def similarity_floor(self) -> float:  # type: ignore[override]
        return self.inner.similarity_floor

    def floor_for(self, query_lang: str, doc_lang: str) -> float:
        return self.inner.floor_for(query_lang, doc_lang)

    def batches(self, texts: Sequence[str]):
        return self.inner.batches(texts)

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this class lacks (LANGUAGE_FLOORS, the inner's counters, ...).
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # --- cached embedding -----------------------------------------------------------------------------------

    def embed_batch(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        return self._cached(texts, kind, lambda missing: self.inner.embed_batch(missing, kind))

    def embed(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        if not texts:
            return self.inner.embed(texts, kind)
        return self._cached(texts, kind, lambda missing: self.inner.embed(missing, kind))

    def embed_on_request(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        if not texts:
            return self.inner.embed_on_request(texts, kind)
        return self._cached(texts, kind, lambda missing: self.inner.embed_on_request(missing, kind))

    def embed_query(self, text: str, scope: str = "") -> np.ndarray:
        return self._cached([text], "query", lambda missing: self.inner.embed_query(missing[0], scope)[None, :])[0]

    def _cached(self, texts: Sequence[str], kind: str, compute: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.inner.dimension), dtype=np.float32)
        model = self.inner.model_name
        keys = [cache_key(model, kind, t) for t in texts]
        found = self._read(keys)
        missing = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in found))
        hits = sum(1 for k in keys if k in found)
        with self._lock:
            self.hits += hits
            self.misses += len(keys) - hits
        if missing:
            fresh = np.asarray(compute(missing), dtype=np.float32)
            new = {cache_key(model, kind, t): fresh[i] for i, t in enumerate(missing)}
            self._write(model, kind, new)
            found.update(new)
        return np.vstack([found[k] for k in keys]).astype(np.float32, copy=False)

    def _read(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(keys))
        with self._lock:
            for start in range(0, len(unique), 500):  # SQLite's limit on bound parameters
                chunk = unique[start : start + 500]
                rows = self._db.execute(
                    f"SELECT key, dim, vec FROM vectors WHERE key IN ({','.join('?' * len(chunk))})", chunk
                ).fetchall()
                for key, dim, blob in rows:
                    vec = np.frombuffer(blob, dtype=np.float32)
                    if vec.size == dim:  # a torn row reads as a miss
                        out[key] = vec.copy()
        return out

    def _write(self, model: str, kind: str, vectors: dict[str, np.ndarray]) -> None:
        rows = [(k, model, kind, int(v.size), np.ascontiguousarray(v, dtype=np.float32).tobytes())
                for k, v in vectors.items()]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?, ?, ?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def stored(self) -> int:
        """Vectors in the store (every model and kind)."""
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM vectors").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
