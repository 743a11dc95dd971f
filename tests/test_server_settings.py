"""Start-up settings: the embedded server's (larger shared buffers, JIT off), pooled sessions', and the
warm-up of long-running servers."""

from __future__ import annotations

import contextlib
import gc
import os
import time

import numpy as np
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from memory_pipelines.infra.db import get_pool, reading
from memory_pipelines.infra.embedded import EMBEDDED_CONFIG_FILE, embedded_config, write_embedded_config
from memory_pipelines.runtime import FULL_COLLECTION_THRESHOLD, warm_up
from memory_pipelines.text import keywords

GIB = 1 << 30


def test_shared_buffers_are_a_quarter_of_memory_between_128_mb_and_8_gb():
    assert embedded_config(256 << 20)["shared_buffers"] == "128MB"
    assert embedded_config(4 * GIB)["shared_buffers"] == "1024MB"
    assert embedded_config(24 * GIB)["shared_buffers"] == "6144MB"
    assert embedded_config(64 * GIB)["shared_buffers"] == "8192MB"
    assert embedded_config(GIB)["jit"] == "off"


def test_config_is_included_once_and_rewritten_only_when_it_changes(tmp_path):
    assert write_embedded_config(tmp_path) is False  # no cluster yet: pgserver's initdb comes first
    conf = tmp_path / "postgresql.conf"
    conf.write_text("max_connections = 100\n")
    assert write_embedded_config(tmp_path) is True
    assert write_embedded_config(tmp_path) is False
    assert conf.read_text().count(EMBEDDED_CONFIG_FILE) == 1
    assert "shared_buffers = '" in (tmp_path / EMBEDDED_CONFIG_FILE).read_text()


@pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")), reason="settings of the embedded server only")
def test_the_embedded_test_server_runs_with_them(server_url):
    """conftest starts it with start_embedded_server: a fresh cluster, restarted once to apply them."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        mb = conn.execute("SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'")
        assert f"{mb.fetchone()[0]}MB" == embedded_config()["shared_buffers"]
        assert conn.execute("SHOW jit").fetchone()[0] == "off"


def test_pooled_sessions_plan_every_execution_and_skip_jit(pool):
    """get_pool configures every connection (the pool fixture comes from it), random_page_cost included (its effect on
    plans at 100k rows is measured by bench/context_latency.py, not here)."""
    with pool.connection() as conn:
        assert conn.execute("SHOW plan_cache_mode").fetchone()[0] == "force_custom_plan"
        assert conn.execute("SHOW jit").fetchone()[0] == "off"
        assert float(conn.execute("SHOW random_page_cost").fetchone()[0]) == 1.1


def test_pooled_sessions_read_vectors_as_float32_arrays_and_json_as_utf8(pool):
    """Binary vectors come back as float32 arrays of the stored values (any dimension, the NULL as None), text
    ones as pgvector's `Vector`; json and jsonb keep non-ASCII text."""
    from pgvector import Vector

    with pool.connection() as conn:
        row = conn.execute(
            "SELECT '[1, 2.5, -3e-5]'::vector, NULL::vector, '[0.25]'::vector, '{\"a\": \"é字\", \"b\": [1]}'::jsonb,"
            " '{\"c\": null}'::json",
            binary=True,
        ).fetchone()
        text_row = conn.execute("SELECT '[1, 2]'::vector, '{\"a\": \"é\"}'::jsonb").fetchone()
    assert isinstance(row[0], np.ndarray) and row[0].dtype == np.float32
    assert row[0].tolist() == np.array([1, 2.5, -3e-5], dtype=np.float32).tolist()
    assert row[1] is None and row[2].tolist() == [0.25]
    assert row[3] == {"a": "é字", "b": [1]} and row[4] == {"c": None}
    assert isinstance(text_row[0], Vector) and text_row[0].to_list() == [1.0, 2.0]
    assert text_row[1] == {"a": "é"}


def test_a_reading_connection_runs_without_a_transaction_and_goes_back_as_it_came(pool):
    """`reading` lends a pooled connection in autocommit mode (no transaction around its statement) and
    restores the flag, also after a failed statement, so the next borrower's writes are transactional again."""
    with reading(pool) as conn:
        assert conn.autocommit
        conn.execute("SELECT 1")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # no BEGIN was sent
    with pytest.raises(psycopg.errors.DivisionByZero), reading(pool) as conn:
        conn.execute("SELECT 1 / 0")
    with contextlib.ExitStack() as stack:  # every connection the pool holds, at once
        for conn in [stack.enter_context(pool.connection()) for _ in range(pool.max_size)]:
            assert not conn.autocommit
            conn.execute("SELECT 1")
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS


def test_warm_up_loads_the_segmenter_and_freezes_what_is_loaded():
    gc.unfreeze()
    before = gc.get_threshold()
    try:
        warm_up()
        assert keywords._jieba_module is not None
        assert gc.get_freeze_count() > 10_000  # the segmenter's tables among them
        assert gc.get_threshold() == (*before[:2], FULL_COLLECTION_THRESHOLD)  # full collections far apart
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_pooled_connection_the_server_ended_is_replaced_not_lent(db_url):
    """Lending an idle connection costs no round trip, yet one whose session the server ended (a restart, a
    terminated backend) is noticed by its socket and replaced: the caller gets a working connection."""
    pool = get_pool(make_conninfo(db_url, application_name="lend-check"), min_size=1, max_size=1)
    with pool.connection() as conn:
        pid = conn.info.backend_pid
        assert conn.execute("SELECT 1").fetchone() == (1,)
    with psycopg.connect(db_url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        for _ in range(100):  # until the backend is gone
            if not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                break
            time.sleep(0.05)
    with pool.connection() as conn:
        assert conn.info.backend_pid != pid
        assert conn.execute("SELECT 2").fetchone() == (2,)
