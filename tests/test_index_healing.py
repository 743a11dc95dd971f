"""Indexes heal themselves: a bulk embedding load killed after it dropped an owner's HNSW graph leaves it
missing; `status` flags it, and the next `embed` (or `migrate`) builds it again. The same for the memories'
table-wide index."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from memory_pipelines.index.owner_indexes import missing_owner_indexes, owner_index_name
from memory_pipelines.infra.migrate import index_build_memory_mb, index_exists, missing_vector_indexes
from memory_pipelines.vocabulary import EXACT_SCAN_MAX_ROWS

CLI = [sys.executable, "-m", "memory_pipelines.surfaces.cli"]
INDEX = owner_index_name("tasks", "alice")
ROWS = EXACT_SCAN_MAX_ROWS + 2000  # alice is over the exact-scan cap: she has a graph of her own
TABLE_INDEX = "memories_avg_embedding_hnsw"


def _env(db_url: str, home, fake_openai) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMORY_PIPELINES_"))}
    return {**env, "DATABASE_URL": db_url, "MEMORY_PIPELINES_HOME": str(home),
            "OPENAI_API_KEY": "sk-test-key-0123456789", "OPENAI_BASE_URL": fake_openai.base_url,
            "OPENAI_EMBED_DIMENSIONS": "384"}


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_killed_bulk_load_leaves_the_index_missing_and_the_next_embed_restores_it(db_url, tmp_path,
                                                                                      fake_openai):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO tasks (owner_id, title, description) SELECT 'alice', 'bulk task ' || i,"
                     " 'row ' || i FROM generate_series(1, %s) AS i", (ROWS,))
    env = _env(db_url, tmp_path, fake_openai)
    first = _cli(env, "embed")  # every row embedded, then alice's graph built
    assert first.returncode == 0, first.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert index_exists(conn, INDEX)
        conn.execute("UPDATE tasks SET title = title || ' (edited)'")  # all pending again, old vectors kept
    # Two parallel loaders each take half the rows in batches of 2,048: their first batches answer after 0.5 s,
    # every later one after 30 s, time to kill the load once both first batches are in (4,096 rows).
    fake_openai.faults.extend([{"delay": 0.5}, {"delay": 0.5}, {"delay": 30.0}, {"delay": 30.0}])
    load = subprocess.Popen([*CLI, "embed"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        with psycopg.connect(db_url, autocommit=True) as conn:
            # The load drops alice's graph (every row pending), then writes its first batches.
            while index_exists(conn, INDEX) or conn.execute(
                    "SELECT count(*) FROM tasks WHERE embedded_hash = content_hash").fetchone()[0] < 4096:
                assert load.poll() is None, load.stderr.read().decode()
                assert time.monotonic() < deadline, "the bulk load never dropped the index"
                time.sleep(0.05)
        load.send_signal(signal.SIGKILL)  # midway: no finally, no exit handler
        load.wait(30)
    finally:
        if load.poll() is None:
            load.kill()
    fake_openai.faults.clear()
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert list(missing_owner_indexes(conn)) == [INDEX]
        pending = conn.execute("SELECT count(*) FROM tasks WHERE embedded_hash IS DISTINCT FROM content_hash"
                               ).fetchone()[0]
    assert 0 < pending <= ROWS - 4096  # killed midway

    status = _cli(env, "status")
    assert status.returncode == 0, status.stderr
    assert f"PROBLEM    HNSW index {INDEX} is missing: owner 'alice' holds {ROWS:,} embedded rows" in status.stdout
    assert INDEX in _cli(env, "status", "--json").stdout

    healed = _cli(env, "embed")
    assert healed.returncode == 0, healed.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert missing_owner_indexes(conn) == {} and index_exists(conn, INDEX)
        assert conn.execute("SELECT count(*) FROM tasks WHERE embedded_hash IS DISTINCT FROM content_hash"
                            ).fetchone()[0] == 0
    assert "PROBLEM" not in _cli(env, "status").stdout


def test_migrate_restores_a_missing_index_and_a_surface_start_only_warns(db_url, tmp_path, fake_openai):
    env = _env(db_url, tmp_path, fake_openai)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {TABLE_INDEX}")
    started = _cli(env, "search", "anything", "--owner", "alice")
    assert started.returncode == 0, started.stderr
    assert f"HNSW indexes missing: {TABLE_INDEX}" in started.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert missing_vector_indexes(conn) == [TABLE_INDEX]
    migrated = _cli(env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert f"restored {TABLE_INDEX}" in migrated.stdout
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert missing_vector_indexes(conn) == []


def test_the_index_build_memory_holds_the_whole_graph_within_a_quarter_of_memory():
    """512 MB for small tables; at 1M rows of 384 dimensions about 2.6 GB; never above a quarter of RAM."""
    gib = 1 << 30
    assert index_build_memory_mb(1_000, 384, 24 * gib) == 512
    assert 2_400 <= index_build_memory_mb(1_000_000, 384, 24 * gib) <= 2_800
    assert index_build_memory_mb(1_000_000, 1536, 24 * gib) > index_build_memory_mb(1_000_000, 384, 24 * gib)
    assert index_build_memory_mb(10_000_000, 384, 8 * gib) == 2048


def test_embed_with_nothing_pending_restores_the_memories_index(db_url, tmp_path, fake_openai):
    """The warning a surface logs says `embed` rebuilds a missing table-wide index: it does so even when no
    row is left to embed."""
    env = _env(db_url, tmp_path, fake_openai)
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 0  # nothing to embed
        conn.execute(f"DROP INDEX {TABLE_INDEX}")
    embedded = _cli(env, "embed")
    assert embedded.returncode == 0, embedded.stderr
    assert f"HNSW index {TABLE_INDEX} was missing" in embedded.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert missing_vector_indexes(conn) == [] and index_exists(conn, TABLE_INDEX)
