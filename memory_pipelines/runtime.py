"""What every surface opens at start: settings, database (migrated), pool and embedder."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field

from psycopg_pool import ConnectionPool

from .embeddings import Embedder, make_embedder
from .infra.db import get_pool
from .infra.embedded import database_url
from .infra.migrate import migrate
from .infra.settings import Settings, get_settings


@dataclass
class Runtime:
    """A migrated database, its pool and the configured embedder."""

    settings: Settings
    url: str
    pool: ConnectionPool
    embedder: Embedder
    applied: list[str] = field(default_factory=list)


def open_runtime(settings: Settings | None = None, embedder: Embedder | None = None) -> Runtime:
    """Start or join the database, apply migrations, open the pool."""
    settings = settings or get_settings()
    embedder = embedder or make_embedder(settings)
    url = database_url(settings)
    applied = migrate(url, embedder.dimension, embedder.model_name)
    return Runtime(settings=settings, url=url, pool=get_pool(url), embedder=embedder, applied=applied)


FULL_COLLECTION_THRESHOLD = 1000
"""Generation-1 collections between two full ones in a server (Python's default: 10). A context build makes no
reference cycles, yet each full collection traverses the caches the builds fill (word terms, term sets, query
focus) and pauses the build it lands on; with 1,000, full collections come a hundred times less often."""


def warm_up() -> None:
    """For long-running servers: load the Chinese segmenter, the CC-CEDICT maps and the tokenizer now rather
    than on the first request, then `gc.freeze()` what is loaded. Full (generation 2) collections otherwise
    traverse these large static tables, a pause that sets the p99 of context builds. Full collections then come
    a hundred times less often (`FULL_COLLECTION_THRESHOLD`)."""
    from .text.dictionary import maps
    from .text.keywords import terms
    from .text.tokens import count_tokens

    terms("预热分词器 warm up")
    maps()  # the CC-CEDICT keyword expansions (parsed once per machine and version, then read from a cache)
    count_tokens("warm up")
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_THRESHOLD)
