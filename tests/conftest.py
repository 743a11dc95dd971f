"""Fixtures: a real PostgreSQL (embedded pgserver, or DATABASE_URL), a fresh database per test cloned
from a migrated template, the fake OpenAI server, and embedders."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.infra.db import close_pools, get_pool
from memory_pipelines.infra.embedded import start_embedded_server
from memory_pipelines.infra.migrate import migrate
from memory_pipelines.infra.settings import Settings
from memory_pipelines.runtime import Runtime

# Fixture modules: `fake_openai` (the local OpenAI-compatible server).
pytest_plugins = ["tests.fake_openai"]

warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
DIM = 384


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM (a CI timeout, `timeout`, a killed job) stops the run like Ctrl-C, so the session's fixtures tear
    down and the embedded test server stops instead of outliving the run."""
    signal.signal(signal.SIGTERM, _interrupted)


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """Admin URL of the test server: DATABASE_URL when set, else an embedded server in a temp folder.

    The folder is made outside pytest's basetemp: that one is private to root (0700), and as root
    pgserver runs PostgreSQL as an unprivileged user that must reach its data folder.
    """
    if os.environ.get("DATABASE_URL"):
        yield os.environ["DATABASE_URL"]
        return
    home = Path(tempfile.mkdtemp(prefix="mp-test-pg-"))
    home.chmod(0o755)
    server = start_embedded_server(home / "pgdata")
    _skip_durability(server.get_uri())
    yield server.get_uri()
    close_pools()
    server.cleanup()
    shutil.rmtree(home, ignore_errors=True)


def _skip_durability(url: str) -> None:
    """The throw-away test cluster never waits for the disk: every test creates and drops a database, and
    with fsync that cycle took twice as long (0.64 s against 0.29 s, measured on 2 busy cores)."""
    with _admin(url) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {setting} = off")
        conn.execute("SELECT pg_reload_conf()")


def _admin(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


@pytest.fixture(scope="session")
def template_db(server_url: str) -> Iterator[str]:
    """A database migrated once (384 d), cloned for every test."""
    name = f"mp_template_{uuid.uuid4().hex[:8]}"
    with _admin(server_url) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    migrate(make_conninfo(server_url, dbname=name), DIM, FakeEmbedder(DIM).model_name)
    yield name
    with _admin(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _database(server_url: str, prefix: str, template: str | None = None) -> Iterator[str]:
    """A new database (a copy of `template`, else empty) for one test, dropped after it; yields its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with _admin(server_url) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    yield make_conninfo(server_url, dbname=name)
    close_pools()
    with _admin(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db_url(server_url: str, template_db: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    yield from _database(server_url, "mp_test", template_db)


@pytest.fixture
def empty_db_url(server_url: str) -> Iterator[str]:
    """A fresh database with no schema at all (for migration tests)."""
    yield from _database(server_url, "mp_empty")


@pytest.fixture
def pool(db_url: str):
    return get_pool(db_url, max_size=4)


@pytest.fixture
def fake_embedder() -> FakeEmbedder:
    return FakeEmbedder(DIM)


@pytest.fixture
def runtime(db_url: str, pool, fake_embedder: FakeEmbedder) -> Runtime:
    settings = Settings(database_url=db_url, embedder="fake")
    return Runtime(settings=settings, url=db_url, pool=pool, embedder=fake_embedder)


@pytest.fixture
def app(runtime: Runtime):
    """The HTTP app over the test's runtime (no LLM)."""
    from memory_pipelines import Memory
    from memory_pipelines.surfaces.http import create_app

    return create_app(Memory(runtime, llm=None))


@pytest.fixture
def live(app) -> Iterator[str]:
    """The HTTP app served by uvicorn on loopback; its base URL."""
    from tests.test_api import LiveServer

    with LiveServer(app) as srv:
        yield srv.url


@pytest.fixture(scope="session")
def local_embedder():
    from memory_pipelines.embeddings.local import LocalE5Embedder

    return LocalE5Embedder()
