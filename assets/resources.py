"""The one resource every asset, check, sensor and op uses: the memory database and its embedder."""


import dataclasses
import threading

import dagster as dg
from psycopg_pool import ConnectionPool
from pydantic import PrivateAttr

from memory_pipelines.embeddings import Embedder, make_embedder
from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.embedded import database_url
from memory_pipelines.infra.llm import ChatLLM
from memory_pipelines.infra.settings import Settings
from memory_pipelines.runtime import Runtime, open_runtime

_lock = threading.Lock()
_embedders: dict[tuple, Embedder] = {}  # real models are loaded once per process, not once per step


class MemoryResource(dg.ConfigurableResource):
    """Database (migrated on first use), connection pool and embedding provider.

    Every field left unset comes from the environment (DATABASE_URL, MEMORY_PIPELINES_*, OPENAI_*), so
    `MemoryResource()` runs on the embedded defaults. The runtime opens lazily on first use, which keeps
    sensor ticks cheap: they only need `pool()`, never the model.
    """

    database_url: str | None = None
    """PostgreSQL URL; unset: DATABASE_URL, else the embedded server under MEMORY_PIPELINES_HOME."""
    home: str | None = None
    """Folder of the embedded server (MEMORY_PIPELINES_HOME)."""
    embedder: str | None = None
    """local | openai | fake; unset: MEMORY_PIPELINES_EMBEDDER, else openai with a key, else local."""
    batch_size: int | None = None
    """Rows per database batch (COPY + one UPDATE); unset: the provider's batch size, at least 16."""

    _runtime: Runtime | None = PrivateAttr(default=None)

    def settings(self) -> Settings:
        """Environment settings with this resource's fields applied on top."""
        base = Settings.from_env()  # the fake provider's dimension too (MEMORY_PIPELINES_FAKE_DIM)
        overrides: dict = {}
        if self.database_url:
            overrides["database_url"] = self.database_url
        if self.home:
            from pathlib import Path

            overrides["home"] = Path(self.home).resolve()
        if self.embedder:
            overrides["embedder"] = self.embedder
        return dataclasses.replace(base, **overrides)

    def _make_embedder(self, settings: Settings) -> Embedder:
        """The provider; a fake one is made per resource (tests and drills subclass this to break it)."""
        if settings.embedder == "fake":
            return make_embedder(settings)
        key = (settings.embedder, settings.openai_base_url, settings.openai_embed_model,
               settings.openai_embed_dimensions)
        with _lock:
            if key not in _embedders:
                _embedders[key] = make_embedder(settings)
            return _embedders[key]

    @property
    def runtime(self) -> Runtime:
        """The opened runtime: database started or joined, migrations applied, pool, embedder."""
        if self._runtime is None:
            settings = self.settings()
            self._runtime = open_runtime(settings, self._make_embedder(settings))
        return self._runtime

    def pool(self) -> ConnectionPool:
        """A pool on the (already migrated) database, without loading the embedder: for sensors."""
        if self._runtime is not None:
            return self._runtime.pool
        return get_pool(database_url(self.settings()))

    def llm(self) -> ChatLLM | None:
        """The chat model for summaries and arbitration, or None (deterministic fallbacks)."""
        return ChatLLM.from_settings(self.runtime.settings)


RESOURCES: dict[str, dg.ConfigurableResource] = {"memory": MemoryResource()}
"""The resources every domain's `Definitions` binds: one object, so `Definitions.merge` accepts them."""
