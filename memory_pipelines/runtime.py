"""What every surface opens at start: settings, database (migrated), pool and embedder."""

from __future__ import annotations

from dataclasses import dataclass, field

from psycopg_pool import ConnectionPool

from .db import database_url, get_pool
from .embeddings import Embedder, make_embedder
from .migrate import migrate
from .settings import Settings, get_settings


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
