"""Read the embedded server's most used relations into the OS page cache when a long-running process starts.

After the machine restarts, or its page cache has gone to other files, every page a context build reads comes
from disk, one random read at a time: at 1M memories the first 200 builds after such a start took p50 167 ms
and p99 4.8 s (bench/context_latency.py, `--warmup 10`, caches dropped), and within those 200 builds the three
HNSW graphs were read whole (1.3 GB, 650 MB, 650 MB). Read front to back, the same files come in at the disk's
sequential speed (~800 MB/s on the development machine). So `serve` and `mcp` read them at start, in a thread:
the vector indexes first, then the relations whose pages PostgreSQL most often had to fetch from outside its
buffers (its statistics' `blks_read`, per page held), as long as they fit in PREWARM_MEMORY_SHARE of the memory
available. Fetches, not buffer hits: a table hit a million times on a few pages (the keyword table at 1M) needs
those few pages, not its 3 GB. Pages already cached cost a copy, not a disk read.

Only for the embedded server, whose files are on this machine: a server behind DATABASE_URL warms itself
(`pg_prewarm`'s autoprewarm, offered by managed services too). PostgreSQL's own buffers are not filled: the
`pg_prewarm` extension is not in the embedded build, and a miss served from the page cache costs microseconds.
"""

from __future__ import annotations

import logging
import mmap
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg

from ..vocabulary import LOCK_PREWARM
from .pagecache import missing_ranges, residency

log = logging.getLogger(__name__)

PREWARM_MEMORY_SHARE = 0.5
"""At most this share of the memory available at start is read: the cache is the machine's, not only ours."""
READ_CHUNK_BYTES = 8 << 20

RELATIONS_SQL = """
SELECT c.oid::regclass::text, pg_relation_filepath(c.oid), pg_relation_size(c.oid),
       coalesce(am.amname = 'hnsw', false),
       coalesce(t.heap_blks_read, i.idx_blks_read, 0)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_am am ON am.oid = c.relam AND c.relkind = 'i'
LEFT JOIN pg_statio_user_tables t ON t.relid = c.oid
LEFT JOIN pg_statio_user_indexes i ON i.indexrelid = c.oid
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i', 'm') AND pg_relation_size(c.oid) > 0
"""


@dataclass(frozen=True)
class Relation:
    """A table or index: its file (relative to the data folder), its size, and how many pages PostgreSQL read
    into its buffers since the statistics were reset."""

    name: str
    path: str
    size: int
    vector_index: bool
    blocks_read: int


@dataclass(frozen=True)
class Prewarmed:
    relations: list[str]
    bytes_read: int
    bytes_cached: int  # found in the page cache already, so not read again
    seconds: float


def prewarm_order(relations: list[Relation], budget: int) -> list[Relation]:
    """What to read, in order: vector indexes first, then by pages read per page held, skipping any that would
    overrun `budget` bytes. Relations never read are left out, unless the statistics are empty (a crash
    discards them): then every vector index first, then the rest smallest first."""
    if any(r.blocks_read for r in relations):
        wanted = [r for r in relations if r.blocks_read]
        wanted.sort(key=lambda r: (not r.vector_index, -r.blocks_read / max(r.size, 1), r.name))
    else:
        wanted = sorted(relations, key=lambda r: (not r.vector_index, r.size, r.name))
    chosen, left = [], budget
    for rel in wanted:
        if rel.size <= left:
            chosen.append(rel)
            left -= rel.size
    return chosen


def used_relations(conn: psycopg.Connection) -> list[Relation]:
    return [Relation(*row) for row in conn.execute(RELATIONS_SQL).fetchall()]


def read_relation(pgdata: Path, rel: Relation, buffer: bytearray) -> tuple[int, int]:
    """Read the pages of every segment file of `rel` (PostgreSQL splits a relation into 1 GB files: f, f.1, ...)
    that are not in the page cache already (`pagecache.residency`; where the system cannot say, the whole file):
    a copy of 10 GB already cached costs ~10 s of CPU. Returns (bytes read, bytes found cached)."""
    read = cached = segment = 0
    while True:
        path = pgdata / (rel.path if segment == 0 else f"{rel.path}.{segment}")
        try:
            size = path.stat().st_size
            pages = residency(path)
            ranges = [(0, size)] if pages is None else [
                (first * mmap.PAGESIZE, count * mmap.PAGESIZE) for first, count in missing_ranges(pages)
            ]
            with path.open("rb", buffering=0) as f:
                for offset, length in ranges:
                    f.seek(offset)
                    view, left = memoryview(buffer), length
                    while left > 0 and (n := f.readinto(view[: min(left, len(buffer))])):
                        read, left = read + n, left - n
            cached += max(0, size - sum(length for _, length in ranges))
        except FileNotFoundError:
            return read, cached
        segment += 1


def prewarm(conn: psycopg.Connection, pgdata: Path, budget: int | None = None) -> Prewarmed | None:
    """Read the relations `prewarm_order` picks into the page cache; None when another process is at it."""
    if budget is None:
        budget = int(psutil.virtual_memory().available * PREWARM_MEMORY_SHARE)
    if not conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_PREWARM,)).fetchone()[0]:
        return None
    try:
        chosen = prewarm_order(used_relations(conn), budget)
        if not conn.autocommit:
            conn.commit()
        started, read, cached, buffer = time.perf_counter(), 0, 0, bytearray(READ_CHUNK_BYTES)
        for rel in chosen:
            got = read_relation(pgdata, rel, buffer)
            read, cached = read + got[0], cached + got[1]
            log.debug("prewarmed %s (%.0f MB)", rel.name, rel.size / 1e6)
        return Prewarmed([r.name for r in chosen], read, cached, time.perf_counter() - started)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_PREWARM,))
        if not conn.autocommit:
            conn.commit()


def start_prewarm(url: str, pgdata: Path) -> threading.Thread:
    """`prewarm` in a daemon thread on its own connection; logs what it read, or why it could not."""

    def run() -> None:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
                result = prewarm(conn, pgdata)
        except (OSError, psycopg.Error) as exc:
            log.warning("prewarm of the embedded database skipped: %s", exc)
            return
        if result is None:
            log.info("prewarm: another process is reading the database's files")
        else:  # beside the start-up banner: how long the first requests may have read from disk
            print(f"prewarmed {len(result.relations)} relations of the embedded database into the page cache: "
                  f"{result.bytes_read / 1e6:.0f} MB read in {result.seconds:.1f} s, "
                  f"{result.bytes_cached / 1e6:.0f} MB there already", file=sys.stderr)

    thread = threading.Thread(target=run, name="prewarm", daemon=True)
    thread.start()
    return thread
