"""Embedding backfill: embed every active row whose embedding is missing, stale or from another model.

Each batch is read by keyset (id order), embedded, copied into a temporary staging table with binary
COPY and applied with one UPDATE, then committed; so a run killed at any point resumes where it stopped
and never redoes committed work. The UPDATE only applies where the content is still the one embedded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from psycopg_pool import ConnectionPool

from .embeddings import Embedder, EmbeddingAuthError, EmbeddingError
from .migrate import VECTOR_COLUMNS
from .sources import EMBEDDED_SOURCES, SOURCES, Source

log = logging.getLogger(__name__)

ProgressFn = Callable[[int], None]


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
    index_rebuilt: bool = False

    @property
    def rows_per_second(self) -> float:
        return self.embedded / self.seconds if self.seconds > 0 else 0.0


def _pending_sql(source: Source, bucketed: bool) -> str:
    bucket = " AND abs(hashtext(t.id::text)) %% %(buckets)s = %(bucket)s" if bucketed else ""
    return (
        f"SELECT t.id::text, {source.text_sql}, t.content_hash FROM {source.from_sql}"
        f" WHERE {source.active_sql}"
        " AND (t.embedding IS NULL OR t.embedding_model IS DISTINCT FROM %(model)s"
        "      OR t.embedded_hash IS DISTINCT FROM t.content_hash)"
        f" AND (%(after)s::text IS NULL OR t.id > %(after)s::{source.id_type}){bucket}"
        " ORDER BY t.id LIMIT %(limit)s"
    )


def count_pending(conn: psycopg.Connection, source_name: str, model: str) -> tuple[int, int]:
    """(rows needing an embedding, active rows) for one source."""
    source = SOURCES[source_name]
    row = conn.execute(
        f"SELECT count(*) FILTER (WHERE t.embedding IS NULL OR t.embedding_model IS DISTINCT FROM %(model)s"
        f" OR t.embedded_hash IS DISTINCT FROM t.content_hash), count(*) FROM {source.from_sql}"
        f" WHERE {source.active_sql}",
        {"model": model},
    ).fetchone()
    return int(row[0]), int(row[1])


def _write_batch(
    conn: psycopg.Connection, source: Source, rows: list[tuple], vectors, model: str
) -> int:
    """COPY one batch into the staging table and apply it with a single UPDATE; returns rows updated."""
    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS embed_staging (id text, embedding vector, hash text)"
        " ON COMMIT DELETE ROWS"
    )
    with conn.cursor() as cur:
        with cur.copy("COPY embed_staging (id, embedding, hash) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["text", "vector", "text"])
            for (item_id, _text, content_hash), vec in zip(rows, vectors, strict=True):
                copy.write_row((item_id, vec, content_hash))
        cur.execute(
            f"UPDATE {source.table} t SET embedding = s.embedding, embedding_model = %s,"
            " embedded_hash = s.hash, embedded_at = now()"
            f" FROM embed_staging s WHERE t.id = s.id::{source.id_type} AND t.content_hash = s.hash",
            (model,),
        )
        return cur.rowcount


def finish_memories(conn: psycopg.Connection, model: str) -> int:
    """Set the memory vector (mean of its fragment vectors) of memories whose fragments are all embedded."""
    cur = conn.execute(
        "UPDATE memories m SET avg_embedding = s.v, embedding_model = %(model)s, embedding_status = 'done',"
        " embedded_hash = m.content_hash, embedded_at = now()"
        " FROM (SELECT f.memory_id, avg(f.embedding) AS v FROM fragments f JOIN memories mm ON mm.id = f.memory_id"
        "       WHERE mm.embedding_status <> 'done' OR mm.embedding_model IS DISTINCT FROM %(model)s"
        "       GROUP BY f.memory_id"
        "       HAVING bool_and(f.embedding IS NOT NULL AND f.embedding_model = %(model)s"
        "                       AND f.embedded_hash = f.content_hash)) s"
        " WHERE m.id = s.memory_id",
        {"model": model},
    )
    return cur.rowcount


def _index_for(source: Source) -> str | None:
    for table, _column, index in VECTOR_COLUMNS:
        if table == source.table:
            return index
    return None


def ensure_vector_indexes(conn: psycopg.Connection) -> None:
    """Create any HNSW index a deferred load dropped (idempotent)."""
    for table, column, index in VECTOR_COLUMNS:
        if index:
            conn.execute(f"CREATE INDEX IF NOT EXISTS {index} ON {table} USING hnsw ({column} vector_cosine_ops)")


def embed_source(
    pool: ConnectionPool,
    embedder: Embedder,
    source_name: str,
    *,
    batch_size: int | None = None,
    bucket: int | None = None,
    buckets: int | None = None,
    defer_index: bool | None = None,
    max_consecutive_failures: int = 3,
    progress: ProgressFn | None = None,
) -> BackfillResult:
    """Embed every pending row of one source (optionally one hash bucket of it).

    `defer_index` drops the source's HNSW index before the load and rebuilds it after; by default it
    does so when more than half of a table of over 2,000 rows needs embedding.
    """
    source = SOURCES[source_name]
    model = embedder.model_name
    result = BackfillResult(source=source_name, model=model)
    size = batch_size or max(embedder.batch_size, 16)
    started = time.perf_counter()
    index = _index_for(source)
    with pool.connection() as conn:
        pending, total = count_pending(conn, source_name, model)
    if defer_index is None:
        defer_index = total > 2000 and pending > total / 2 and bucket is None
    if defer_index and index and pending:
        with pool.connection() as conn:
            conn.execute(f"DROP INDEX IF EXISTS {index}")
        result.index_rebuilt = True
    params = {"model": model, "after": None, "limit": size, "buckets": buckets, "bucket": bucket}
    sql = _pending_sql(source, bucket is not None)
    consecutive_failures = 0
    try:
        while True:
            with pool.connection() as conn:
                rows = conn.execute(sql, params).fetchall()
            if not rows:
                break
            params["after"] = rows[-1][0]
            try:
                vectors = embedder.embed([r[1] for r in rows], kind="passage")
            except EmbeddingAuthError:
                raise
            except EmbeddingError as exc:
                result.failed += len(rows)
                result.errors.append(str(exc))
                consecutive_failures += 1
                log.warning("embedding %s batch failed (%s rows left pending): %s", source_name, len(rows), exc)
                if consecutive_failures >= max_consecutive_failures:
                    break
                continue
            consecutive_failures = 0
            with pool.connection() as conn:
                result.embedded += _write_batch(conn, source, rows, vectors, model)
                if source_name == "fragment":
                    finish_memories(conn, model)
            result.batches += 1
            if progress:
                progress(len(rows))
    finally:
        if result.index_rebuilt:
            with pool.connection() as conn:
                ensure_vector_indexes(conn)
        result.seconds = time.perf_counter() - started
    return result


def embed_all(
    pool: ConnectionPool, embedder: Embedder, progress: ProgressFn | None = None
) -> list[BackfillResult]:
    """Embed every pending row of every embedded source."""
    return [embed_source(pool, embedder, name, progress=progress) for name in EMBEDDED_SOURCES]


def pending_total(pool: ConnectionPool, model: str) -> int:
    """Rows of all embedded sources still needing an embedding from `model`."""
    with pool.connection() as conn:
        return sum(count_pending(conn, name, model)[0] for name in EMBEDDED_SOURCES)
