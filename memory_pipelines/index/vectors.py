"""Embedding backfill: embed every active row whose embedding is missing, stale or from another model.

Each batch is read by keyset (id order), embedded, copied into a temporary staging table with binary
COPY and applied with one UPDATE, then committed; so a run killed at any point resumes where it stopped
and never redoes committed work. The UPDATE only applies where the content is still the one embedded.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ..embeddings import Embedder, EmbeddingAuthError, EmbeddingError
from ..infra.migrate import restore_vector_index
from ..vocabulary import BUCKETS, INDEXED, INDEXED_NAMES, VECTOR_COLUMNS, IndexedText, bucket_sql
from .owner_indexes import drop_owner_indexes, loader_lock_key, sync_owner_indexes

log = logging.getLogger(__name__)

ProgressFn = Callable[[int], None]
StopFn = Callable[[], bool]
"""Asked between batches: True ends a load early (a server shutting down), the rest left pending."""

LOADERS = 2
"""Parallel keyset passes of a whole-table load: while one waits for the provider or its UPDATE, the other
works (100k rows, instant provider: see bench/backfill_throughput.py)."""


@dataclass
class BackfillResult:
    """What one backfill of one source did."""

    source: str
    model: str
    embedded: int = 0
    failed: int = 0
    batches: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    indexes_built: list[str] = field(default_factory=list)  # owners' graphs built when the load was done
    skipped: int = 0  # active rows that already had a current embedding
    pending_after: int = 0  # rows of the covered buckets still needing an embedding at the end
    owners: set[str] = field(default_factory=set)  # owners of the rows embedded

    @property
    def rows_per_second(self) -> float:
        return self.embedded / self.seconds if self.seconds > 0 else 0.0

    @property
    def index_rebuilt(self) -> bool:
        return bool(self.indexes_built)


NEEDS_EMBEDDING = (
    "t.embedding IS NULL OR t.embedding_model IS DISTINCT FROM %(model)s"
    " OR t.embedded_hash IS DISTINCT FROM t.content_hash"
)
"""An active row needs an embedding: none, another model's, or its indexed text changed since."""


def _pending_sql(source: IndexedText, bucketed: bool) -> str:
    bucket = f" AND {bucket_sql()} = %(bucket)s" if bucketed else ""
    return (
        f"SELECT t.id::text, {source.text_sql}, t.content_hash, t.owner_id FROM {source.from_sql}"
        f" WHERE {source.active_sql}"
        f" AND ({NEEDS_EMBEDDING})"
        f" AND (%(after)s::text IS NULL OR t.id > %(after)s::{source.id_type}){bucket}"
        " ORDER BY t.id LIMIT %(limit)s"
    )


def _bucket_sql(bucket: int | None, buckets: int | None) -> str:
    """The filter on one bucket (`vocabulary.bucket_sql`), with `%(buckets)s` and `%(bucket)s` parameters."""
    if bucket is None:
        return ""
    if not buckets or not 0 <= bucket < buckets:
        raise ValueError(f"bucket {bucket!r} is not in range for {buckets!r} buckets")
    return f" AND {bucket_sql()} = %(bucket)s"


def count_pending(
    conn: psycopg.Connection, source_name: str, model: str, *, bucket: int | None = None,
    buckets: int | None = None,
) -> tuple[int, int]:
    """(rows needing an embedding, active rows) for one source, or for one hash bucket of it."""
    source = INDEXED[source_name]
    row = conn.execute(
        f"SELECT count(*) FILTER (WHERE {NEEDS_EMBEDDING}), count(*) FROM {source.from_sql}"
        f" WHERE {source.active_sql}{_bucket_sql(bucket, buckets)}",
        {"model": model, "buckets": buckets, "bucket": bucket},
    ).fetchone()
    return int(row[0]), int(row[1])


def _write_batch(
    conn: psycopg.Connection, source: IndexedText, rows: list[tuple], vectors, model: str
) -> int:
    """COPY one batch into the staging table and apply it with a single UPDATE; returns rows updated."""
    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS embed_staging (id text, embedding vector, hash text)"
        " ON COMMIT DELETE ROWS"
    )
    with conn.cursor() as cur:
        with cur.copy("COPY embed_staging (id, embedding, hash) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["text", "vector", "text"])
            for (item_id, _text, content_hash, _owner), vec in zip(rows, vectors, strict=True):
                copy.write_row((item_id, vec, content_hash))
        cur.execute(
            # A row a write holds is skipped, left pending for the next pass: waiting on it, in the join's order,
            # deadlocked with a batch write locking the same rows in key order.
            f"WITH free AS (SELECT t.id FROM {source.table} t JOIN embed_staging s ON t.id = s.id::{source.id_type}"
            f" ORDER BY t.id FOR UPDATE OF t SKIP LOCKED)"
            f" UPDATE {source.table} t SET embedding = s.embedding, embedding_model = %(model)s,"
            " embedded_hash = s.hash, embedded_at = now()"
            f" FROM embed_staging s, free WHERE t.id = free.id AND t.id = s.id::{source.id_type}"
            " AND t.content_hash = s.hash"
            # Only rows still pending: a concurrent run of the same rows that wrote first keeps its write,
            # and each row is counted embedded once.
            f" AND ({NEEDS_EMBEDDING})",
            {"model": model},
        )
        return cur.rowcount


# The mean of a memory's own fragments' vectors (not the context fragment's), for memories picked by `{which}`
# whose fragments are all embedded from their current text.
_READY_MEMORIES = (
    "SELECT f.memory_id, avg(f.embedding) FILTER (WHERE NOT f.with_context) AS v FROM fragments f"
    " JOIN memories mm ON mm.id = f.memory_id WHERE {which} GROUP BY f.memory_id"
    " HAVING bool_and(f.embedding IS NOT NULL AND f.embedding_model = %(model)s AND f.embedded_hash = f.content_hash)"
)
_SET_MEMORY_VECTOR = (
    "UPDATE memories m SET avg_embedding = s.v, embedding_model = %(model)s, embedding_status = 'done',"
    " embedded_hash = m.content_hash, embedded_at = now()"
)


def finish_memories(conn: psycopg.Connection, model: str, memory_ids: Sequence[str] | None = None) -> int:
    """Set the memory vector (mean of its own fragments' vectors, not the context fragment's) of memories whose
    fragments are all embedded: every memory not done, or `memory_ids` (a loader's batch, which this transaction
    locked with `lock_memories_of`), done or not, since fragments embedded again (a renamed project, an edited
    speaker) change their mean.

    Rows are locked in id order: parallel loaders finishing the same memories queue instead of deadlocking. A
    batch's memories are locked in a statement of their own, before their fragments are read, so of two loaders
    holding halves of one memory the one that waited reads the other's half, committed by then."""
    if memory_ids is None:
        ready = _READY_MEMORIES.format(
            which="mm.embedding_status <> 'done' OR mm.embedding_model IS DISTINCT FROM %(model)s")
        cur = conn.execute(
            f"WITH ready AS ({ready}), locked AS (SELECT m.id FROM memories m JOIN ready r ON r.memory_id = m.id"
            " ORDER BY m.id FOR NO KEY UPDATE OF m)"
            f" {_SET_MEMORY_VECTOR} FROM ready s JOIN locked l ON l.id = s.memory_id WHERE m.id = s.memory_id",
            {"model": model},
        )
        return cur.rowcount
    if not memory_ids:
        return 0
    ready = _READY_MEMORIES.format(which="mm.id = ANY(%(ids)s::text[])")
    cur = conn.execute(f"WITH ready AS ({ready}) {_SET_MEMORY_VECTOR} FROM ready s WHERE m.id = s.memory_id",
                       {"model": model, "ids": list(memory_ids)})
    return cur.rowcount


def lock_memories_of(conn: psycopg.Connection, fragment_ids: Sequence[str]) -> list[str]:
    """Lock the memories of `fragment_ids` in id order (waiting for a holder) and return their ids. The fragment
    embedding takes them before the fragments: a removal locks memories, then their fragments, and the other
    order deadlocked with it."""
    return [r[0] for r in conn.execute(
        "SELECT id FROM memories WHERE id IN (SELECT memory_id FROM fragments WHERE id = ANY(%s::text[]))"
        " ORDER BY id FOR NO KEY UPDATE", (list(fragment_ids),)).fetchall()]


def ensure_vector_indexes(conn: psycopg.Connection) -> list[str]:
    """Build every table-wide HNSW index that is missing and no load in progress will build; the names built.
    (The owners' graphs are `sync_owner_indexes`'.)"""
    return [VECTOR_COLUMNS[i][2] for i in range(len(VECTOR_COLUMNS)) if restore_vector_index(conn, i)]


def embed_source(pool: ConnectionPool, embedder: Embedder, source_name: str, **options: Any) -> BackfillResult:
    """Embed every pending row of one source, then build the owners' graphs that are missing. `options`: those of
    `embed_buckets` (batch_size, defer_index, max_consecutive_failures, progress, live, stop).

    `defer_index` drops the owners' graphs of the table before the load and builds them after; by default it
    does so when more than half of a table of over 2,000 rows needs embedding. The load holds the
    source's loader lock (shared), like the bucketed loads; whichever loader ends last builds the missing
    graphs, so a load killed after the drop is healed by the next run of any loader. `live`: see `embed_buckets`.
    """
    return embed_buckets(pool, embedder, source_name, range(BUCKETS), BUCKETS, **options)


_CLOSING_DAY = re.compile(r" · \d{4}-\d{2}-\d{2}\]$")


def model_text(text: str) -> str:
    """What the embedding model reads of an indexed text: all of it but its closing day ("[task · bug · open ·
    2026-01-06]" → "[task · bug · open]"). The keyword index and the date prior read the day; in the model it
    only moved similarities between texts of different days (docs/retrieval-quality.md, step 10)."""
    return _CLOSING_DAY.sub("]", text)


def _embed_rows(embedder: Embedder, rows: list[tuple]) -> tuple[list | None, EmbeddingError | None]:
    """The vectors of the rows' texts (second column, read by the model as `model_text`), or the provider's
    failure; a refused key is raised, since no later batch can succeed."""
    try:
        return embedder.embed([model_text(r[1]) for r in rows], kind="passage"), None
    except EmbeddingAuthError:
        raise
    except EmbeddingError as exc:
        return None, exc


def _keyset(pool: ConnectionPool, sql: str, params: dict[str, Any]) -> Iterator[list[tuple]]:
    """The batches of a keyset query ordered by id, `params["after"]` moved past the last row of each."""
    while True:
        with pool.connection() as conn:
            rows = conn.execute(sql, params).fetchall()
        if not rows:
            return
        params["after"] = rows[-1][0]
        yield rows


def _load(
    pool: ConnectionPool,
    embedder: Embedder,
    source_name: str,
    *,
    batch_size: int | None,
    bucket: int | None,
    buckets: int | None,
    max_consecutive_failures: int,
    progress: ProgressFn | None,
    stop: StopFn | None = None,
) -> BackfillResult:
    """One keyset pass over the pending rows of a source (or of one hash bucket): embed, COPY, UPDATE; `stop`
    ends it between batches (what is left stays pending)."""
    source = INDEXED[source_name]
    model = embedder.model_name
    result = BackfillResult(source=source_name, model=model)
    size = batch_size or max(embedder.batch_size, 16)
    started = time.perf_counter()
    params = {"model": model, "after": None, "limit": size, "buckets": buckets, "bucket": bucket}
    sql = _pending_sql(source, bucket is not None)
    consecutive_failures = 0
    try:
        for rows in _keyset(pool, sql, params):
            if stop is not None and stop():
                break
            vectors, exc = _embed_rows(embedder, rows)
            if exc is not None:
                result.failed += len(rows)
                result.errors.append(str(exc))
                consecutive_failures += 1
                log.warning(
                    "embedding %s batch failed (%s rows left pending): %s", source_name, len(rows), exc
                )
                if consecutive_failures >= max_consecutive_failures:
                    break
                continue
            consecutive_failures = 0
            with pool.connection() as conn:
                # memories before their fragments, the order a removal locks in
                memory_ids = lock_memories_of(conn, [r[0] for r in rows]) if source_name == "fragment" else None
                result.embedded += _write_batch(conn, source, rows, vectors, model)
                result.owners.update(r[3] for r in rows)
                if memory_ids is not None:
                    finish_memories(conn, model, memory_ids)
            result.batches += 1
            if progress:
                progress(len(rows))
    finally:
        result.seconds = time.perf_counter() - started
    return result


def embed_all(
    pool: ConnectionPool, embedder: Embedder, progress: ProgressFn | None = None
) -> list[BackfillResult]:
    """Embed every pending row of every embedded source, then build the table-wide HNSW indexes that are missing
    (`ensure_vector_indexes`), also when no row was pending: an index an interrupted load dropped comes back."""
    results = [embed_source(pool, embedder, name, progress=progress) for name in INDEXED_NAMES]
    with pool.connection() as conn:
        for index in ensure_vector_indexes(conn):
            log.warning("HNSW index %s was missing (an interrupted bulk load?); rebuilt it", index)
    return results


def pending_total(pool: ConnectionPool, model: str) -> int:
    """Rows of all embedded sources still needing an embedding from `model`."""
    with pool.connection() as conn:
        return sum(count_pending(conn, name, model)[0] for name in INDEXED_NAMES)


# --- bucketed backfills (the Dagster partitions) with a coordinated HNSW deferral --------------------------


@contextmanager
def _loader_lock(pool: ConnectionPool, source: IndexedText) -> Iterator[psycopg.Connection]:
    """Hold a shared advisory lock for the load: concurrent bucket runs each hold one."""
    with pool.connection() as conn:
        try:
            conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", loader_lock_key(source.table))
            conn.commit()
            yield conn
        finally:
            conn.rollback()
            conn.execute("SELECT pg_advisory_unlock_all()")
            conn.commit()


def _index_if_last(pool: ConnectionPool, source: IndexedText, dimension: int, owners: set[str] | None) -> list[str]:
    """Build the owners' missing graphs of the table (of `owners` only, when given) unless another loader still
    holds its shared lock (then that one builds them when done); the names built."""
    with pool.connection() as conn:
        return sync_owner_indexes(conn, dimension, tables=[source.table],
                                  owners=sorted(owners) if owners is not None else None).built


def embed_buckets(
    pool: ConnectionPool,
    embedder: Embedder,
    source_name: str,
    bucket_list: Sequence[int],
    buckets: int,
    *,
    batch_size: int | None = None,
    defer_index: bool | None = None,
    max_consecutive_failures: int = 3,
    progress: ProgressFn | None = None,
    live: bool = False,
    stop: StopFn | None = None,
) -> BackfillResult:
    """Embed the pending rows of some hash buckets of one source (all of them: one keyset pass); `stop` (asked
    between batches) ends the load early, leaving the rest pending.

    `defer_index` (default: when more than half of a table of over 2,000 rows is pending) drops the
    owners' HNSW graphs of the table before the load: each would make every row written an insert into a
    graph. Concurrent bucket runs coordinate through an advisory lock: each holds it shared while loading,
    and whichever finishes last (gets it exclusively) builds the graphs of the owners over the exact-scan
    cap. Every run ends that way when no other loader is active, so a killed run never leaves an owner
    without her graph for longer than the next run, and an owner who grew past the cap gets hers.
    """
    source = INDEXED[source_name]
    model = embedder.model_name
    todo = sorted({int(b) for b in bucket_list})
    whole = len(todo) == buckets
    result = BackfillResult(source=source_name, model=model)
    started = time.perf_counter()
    with _loader_lock(pool, source):
        with pool.connection() as conn:
            pending_table, total_table = count_pending(conn, source_name, model)
            if whole:
                pending, active = pending_table, total_table
            else:
                counts = [count_pending(conn, source_name, model, bucket=b, buckets=buckets) for b in todo]
                pending, active = sum(c[0] for c in counts), sum(c[1] for c in counts)
        result.skipped = active - pending
        if defer_index is None:
            defer_index = total_table > 2000 and pending_table > total_table / 2
        if defer_index and pending:
            with pool.connection() as conn:
                dropped = drop_owner_indexes(conn, source.table)
            if dropped:
                log.info("%s: %s owner HNSW indexes dropped for the load (%s of %s rows pending)",
                         source_name, len(dropped), pending_table, total_table)
        # A whole table loads in LOADERS parallel keyset passes (each over one hash part: one embeds while
        # the other's batch is written); hash buckets load one after the other (Dagster runs them in parallel).
        parts = [(k, LOADERS) for k in range(LOADERS)] if whole else [(b, buckets) for b in todo]
        loaders = ThreadPoolExecutor(max_workers=LOADERS if whole else 1)
        try:
            done = list(loaders.map(lambda part: _load(
                pool, embedder, source_name, batch_size=batch_size, bucket=part[0], buckets=part[1],
                max_consecutive_failures=max_consecutive_failures, progress=progress, stop=stop,
            ), parts))
        finally:  # stopped (SIGTERM, Ctrl-C): no waiting here for a loader still on a remote call
            loaders.shutdown(wait=sys.exc_info()[0] is None, cancel_futures=True)
        if source_name == "fragment":  # memories pending with nothing left to embed (a killed run's, a model's)
            with pool.connection() as conn:
                finish_memories(conn, model)
        for part in done:
            result.embedded += part.embedded
            result.failed += part.failed
            result.batches += part.batches
            result.errors.extend(part.errors)
            result.owners |= part.owners
    # A live server's background pass (`live`, a few rows at a time) looks only at the owners it wrote: whether
    # one crossed the cap. A batch load syncs the whole table (one count of every owner's rows): it also heals
    # what a killed load left and drops the graphs of owners who shrank.
    result.indexes_built = _index_if_last(pool, source, embedder.dimension, result.owners if live else None)
    with pool.connection() as conn:
        if whole:
            result.pending_after = count_pending(conn, source_name, model)[0]
        else:
            result.pending_after = sum(
                count_pending(conn, source_name, model, bucket=b, buckets=buckets)[0] for b in todo)
    result.seconds = time.perf_counter() - started
    return result


# --- the items a write left pending (the server's background worker) ----------------------------------------------

ITEM_SOURCES: tuple[str, ...] = ("task", "learning", "capability", "event")
"""The embedded sources callers write (store/items.py); goals are not embedded."""

_UNEMBEDDED = "t.embedded_hash IS DISTINCT FROM t.content_hash"
"""A live row whose indexed text has no current embedding: what `<table>_unembedded` (sql/013) lists."""


def embed_pending_items(
    pool: ConnectionPool, embedder: Embedder, owners: Sequence[str] | None = None, *, batch_size: int | None = None,
    stop: StopFn | None = None,
) -> dict[str, Any]:
    """Embed the live task, learning, capability and event rows (of `owners`; None: every owner) whose indexed
    text changed since it was embedded or never was, then build the graphs of the owners who crossed the
    exact-scan cap. The rows are found through the small partial indexes of such rows, so a pass costs what it
    embeds, not the size of the tables. A provider failure leaves the rest pending (the next pass, the backfill).
    Returns {embedded, failed, pending, errors}."""
    model = embedder.model_name
    size = batch_size or max(embedder.batch_size, 16)
    out: dict[str, Any] = {"embedded": 0, "failed": 0, "pending": 0, "errors": []}
    scope = " AND t.owner_id = ANY(%(owners)s)" if owners is not None else ""
    for name in ITEM_SOURCES:
        source = INDEXED[name]
        where = f"{source.active_sql} AND {_UNEMBEDDED}{scope}"
        params: dict[str, Any] = {"owners": list(owners or []), "after": None, "limit": size, "model": model}
        touched: set[str] = set()
        pending = (f"SELECT t.id::text, {source.text_sql}, t.content_hash, t.owner_id FROM {source.from_sql}"
                   f" WHERE {where} AND (%(after)s::uuid IS NULL OR t.id > %(after)s::uuid)"
                   " ORDER BY t.id LIMIT %(limit)s")
        for rows in _keyset(pool, pending, params):
            if stop is not None and stop():
                break
            vectors, exc = _embed_rows(embedder, rows)
            if exc is not None:
                out["failed"] += len(rows)
                out["errors"].append(f"{name}: {exc}")
                log.warning("embedding written %s rows failed (%s left pending): %s", name, len(rows), exc)
                break
            with pool.connection() as conn:
                out["embedded"] += _write_batch(conn, source, rows, vectors, model)
            touched.update(r[3] for r in rows)
        with pool.connection() as conn:
            if touched:
                sync_owner_indexes(conn, embedder.dimension, tables=[source.table], owners=sorted(touched))
            out["pending"] += conn.execute(
                f"SELECT count(*) FROM {source.from_sql} WHERE {where}", params).fetchone()[0]
    return out
