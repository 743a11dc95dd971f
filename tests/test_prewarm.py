"""Prewarm (infra/prewarm.py): which relations are read, in which order, and that they land in the page cache."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

from memory_pipelines.infra.embedded import leave_embedded, start_embedded_server
from memory_pipelines.infra.pagecache import missing_ranges, residency
from memory_pipelines.infra.prewarm import Relation, cache_warmth, prewarm, prewarm_order, sample_percent, walks_for
from memory_pipelines.vocabulary import LOCK_PREWARM


def _rel(name: str, size: int, vector: bool = False, used: int = 0) -> Relation:
    return Relation(name, f"base/1/{name}", size, vector, used)


def _order(relations: list[Relation], budget: int) -> list[str]:
    return [r.name for r in prewarm_order(relations, budget)]


def test_vector_indexes_come_first_then_the_most_read_per_page_held_within_the_budget():
    rels = [_rel("big_heap", 1000, used=500), _rel("hot_pkey", 100, used=400), _rel("graph", 600, True, used=10),
            _rel("unused_graph", 600, True), _rel("cold_heap", 50)]
    assert _order(rels, 10_000) == ["graph", "hot_pkey", "big_heap"]
    assert _order(rels, 1_699) == ["graph", "hot_pkey"]  # big_heap would overrun the budget
    assert _order(rels, 650) == ["graph"]
    assert _order([*rels, _rel("small", 40, used=1)], 650) == ["graph", "small"]  # skipped ones leave room
    assert _order(rels, 0) == []


def test_without_statistics_every_vector_index_comes_first_then_the_smallest():
    rels = [_rel("heap", 500), _rel("pkey", 20), _rel("graph_b", 300, True), _rel("graph_a", 300, True)]
    assert _order(rels, 10_000) == ["graph_a", "graph_b", "pkey", "heap"]


def test_missing_pages_are_read_in_runs_merged_across_short_cached_gaps():
    pages = b"\x01\x00\x00\x01\x00" + b"\x01" * 100 + b"\x00"
    assert missing_ranges(pages) == [(1, 4), (105, 1)]
    assert missing_ranges(pages, merge_gap=1) == [(1, 2), (4, 1), (105, 1)]
    assert missing_ranges(b"\x01" * 10) == []
    assert missing_ranges(b"") == []


def test_a_graph_is_walked_by_one_search_per_800_pages_from_a_sample_of_whole_pages():
    assert walks_for(1) == 1
    assert walks_for(8192 * 800 * 2) == 2 and walks_for(8192 * 800 * 2 + 1) == 3
    assert walks_for(10 << 40) == 400
    assert sample_percent(1, 3000, 656) == pytest.approx(100 * 8 / 656)  # at least 8 pages
    assert sample_percent(162, 650_000, 162_000) == pytest.approx(100 * 3 * 162 / 650_000)  # 3x the rows
    assert sample_percent(400, -1, 0) == 100.0  # never analysed: the whole table, up to the limit


def resident_share(path: Path) -> float:
    """The share of `path`'s pages in the page cache (mincore, through `pagecache.residency`)."""
    pages = residency(path)
    assert pages is not None, "mincore is not available here"
    return pages.count(1) / len(pages) if pages else 1.0


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _data_dir(conn: psycopg.Connection) -> Path:
    folder = Path(conn.execute("SHOW data_directory").fetchone()[0])
    if not folder.is_dir():  # DATABASE_URL on another machine: its files are not ours to read
        pytest.skip("the test server's data folder is not on this machine")
    return folder


def _vector(rng: np.random.Generator) -> str:
    return "[" + ",".join(f"{x:.4f}" for x in rng.standard_normal(384)) + "]"


@pytest.fixture
def private_server() -> Iterator[Path]:
    """A server of this test's own, so it can be restarted (its buffers emptied). Outside pytest's basetemp:
    as root, pgserver runs PostgreSQL as a user that must reach the folder (conftest.server_url)."""
    home = Path(tempfile.mkdtemp(prefix="mp-test-prewarm-"))
    home.chmod(0o755)
    try:
        yield home / "pgdata"
    finally:
        leave_embedded(home / "pgdata")
        shutil.rmtree(home, ignore_errors=True)


def _warm_table(conn: psycopg.Connection, rng: np.random.Generator, partial: bool = False) -> int:
    """`warm`: 3,000 vectors under an HNSW index, one row in ten with a body too long to stay in the row and too
    random to compress (TOASTed). `partial`: the index holds owner a's rows only (two in three), as an owner's
    graph does. Returns the index's pages."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute("CREATE TABLE warm (id int PRIMARY KEY, v vector(384), body text, owner_id text)")
    with conn.cursor().copy("COPY warm (id, v, body, owner_id) FROM STDIN") as copy:
        for i in range(3000):
            copy.write_row((i, _vector(rng), rng.bytes(3000).hex() if i % 10 == 0 else "short",
                            "b" if i % 3 == 0 else "a"))
    where = " WHERE owner_id = 'a'" if partial else ""
    conn.execute(f"CREATE INDEX warm_v ON warm USING hnsw (v vector_cosine_ops){where}")
    return conn.execute("SELECT pg_relation_size('warm_v') / 8192").fetchone()[0]


def _restart(pgdata: Path) -> str:
    """Stop and start the server: PostgreSQL's buffers are empty again."""
    leave_embedded(pgdata)
    return start_embedded_server(pgdata).get_uri()


def test_prewarm_reads_what_the_server_fetched_since_its_start_into_the_page_cache(private_server):
    rng = np.random.default_rng(3)
    url = start_embedded_server(private_server).get_uri()
    with psycopg.connect(url, autocommit=True) as conn:
        _warm_table(conn, rng)
        conn.execute("CREATE TABLE cold (id int PRIMARY KEY, body text)")
        conn.execute("INSERT INTO cold SELECT i, repeat('x', 500) FROM generate_series(1, 3000) i")
    url = _restart(private_server)
    with psycopg.connect(url, autocommit=True) as conn:
        for name in ("cold", "cold_pkey", "warm", "warm_pkey", "warm_v"):
            conn.execute("SELECT pg_stat_reset_single_table_counters(%s::regclass)", (name,))
        for _ in range(5):  # the vector index and its table are read from outside the buffers; `cold` is not
            conn.execute("SELECT id FROM warm ORDER BY v <=> %s::vector LIMIT 5", (_vector(rng),)).fetchall()
        conn.execute("SELECT length(body) FROM warm WHERE id % 10 = 0").fetchall()  # from the TOAST table
        conn.execute("SELECT pg_stat_force_next_flush()")
        folder = _data_dir(conn)
        toast = conn.execute("SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'warm'").fetchone()[0]
        files = {name: folder / conn.execute("SELECT pg_relation_filepath(%s)", (name,)).fetchone()[0]
                 for name in ("warm_v", "warm", "cold")}
        conn.execute("CHECKPOINT")
        os.sync()
        for path in files.values():
            _evict(path)
        before = {name: resident_share(path) for name, path in files.items()}
        assert before["warm_v"] < 0.5, before  # evicted: the check below can tell
        assert cache_warmth(conn, folder)["resident_share"] < 0.9

        result = prewarm(conn, folder, budget=1 << 30)

        assert result is not None and result.relations[0] == "warm_v", result
        assert {"warm", toast} <= set(result.relations), result
        assert not {"cold", "cold_pkey"} & set(result.relations), result
        sizes = dict(conn.execute(
            "SELECT oid::regclass::text, pg_relation_size(oid) FROM pg_class WHERE oid::regclass::text = ANY(%s)",
            (result.relations,)).fetchall())
        assert result.bytes_read + result.bytes_cached == sum(sizes.values())
        assert result.bytes_read >= sizes["warm_v"]  # evicted above, so read now
        assert resident_share(files["warm_v"]) == 1.0
        assert resident_share(files["warm"]) == 1.0
        assert resident_share(files["cold"]) <= before["cold"] + 0.01
        assert cache_warmth(conn, folder)["resident_share"] == 1.0  # what `status` reports

        again = prewarm(conn, folder, budget=1 << 30)  # all cached now: nothing is read twice
        assert again is not None and again.bytes_read == 0 and again.bytes_cached == sum(sizes.values()), again


def test_one_process_prewarms_at_a_time(db_url):
    with psycopg.connect(db_url, autocommit=True) as holder, psycopg.connect(db_url, autocommit=True) as conn:
        holder.execute("SELECT pg_advisory_lock(%s)", (LOCK_PREWARM,))
        assert prewarm(conn, _data_dir(conn), budget=1 << 30) is None
        holder.execute("SELECT pg_advisory_unlock(%s)", (LOCK_PREWARM,))
        assert prewarm(conn, _data_dir(conn), budget=1 << 30) is not None


def _index_reads(conn: psycopg.Connection, name: str) -> int:
    """Pages of index `name` PostgreSQL has read into its buffers (this session's counts flushed first)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    return conn.execute("SELECT idx_blks_read FROM pg_statio_user_indexes WHERE indexrelname = %s",
                        (name,)).fetchone()[0]


@pytest.mark.parametrize("partial", [False, True], ids=["whole-table", "owner-graph"])
def test_prewarm_searches_the_vector_indexes_into_postgres_buffers(private_server, partial):
    """A whole-table graph and a partial one (an owner's: walked from her rows, with her predicate)."""
    rng = np.random.default_rng(4)
    url = start_embedded_server(private_server).get_uri()
    with psycopg.connect(url, autocommit=True) as conn:
        pages = _warm_table(conn, rng, partial)
    url = _restart(private_server)
    where = "WHERE owner_id = 'a'" if partial else ""
    with psycopg.connect(url, autocommit=True) as conn:  # searches after a restart: the statistics show reads
        for _ in range(3):
            conn.execute(f"SELECT id FROM warm {where} ORDER BY v <=> %s::vector LIMIT 5", (_vector(rng),)).fetchall()
    for walk in (False, True):
        url = _restart(private_server)
        with psycopg.connect(url, autocommit=True) as conn:
            before = _index_reads(conn, "warm_v")
            result = prewarm(conn, _data_dir(conn), budget=1 << 30, walk=walk)
            read = _index_reads(conn, "warm_v") - before
        assert result is not None and "warm_v" in result.relations, result
        if walk:
            assert result.graphs_walked == 1 and read >= pages // 2, (result, read, pages)
        else:
            assert result.graphs_walked == 0 and read == 0, (result, read)
