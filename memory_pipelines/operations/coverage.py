"""What the pipelines measure: embedding coverage and consistency, pending rows per bucket, memory
vectors, keyword terms and vector indexes.

The Dagster assets, checks and sensor report these numbers; they read them through these functions
(every query parameterised, the bucket spelled by `vocabulary.bucket_sql`), never with SQL of their own.
`buckets=None` (or every bucket) means the whole table.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from ..index.vectors import NEEDS_EMBEDDING
from ..vocabulary import BUCKETS, INDEXED, INDEXED_NAMES, bucket_sql


def _in_buckets(buckets: Sequence[int] | None) -> tuple[str, dict]:
    """The filter on a subset of the buckets ('' for all of them) and its parameters."""
    chosen = sorted({int(b) for b in buckets}) if buckets is not None else list(range(BUCKETS))
    if any(not 0 <= b < BUCKETS for b in chosen):
        raise ValueError(f"buckets {chosen} are not all in 0..{BUCKETS - 1}")
    if len(chosen) == BUCKETS:
        return "", {}
    return f" AND {bucket_sql()} = ANY(%(bucket_list)s)", {"buckets": BUCKETS, "bucket_list": chosen}


def embedding_coverage(
    conn: psycopg.Connection, source_name: str, model: str, buckets: Sequence[int] | None = None
) -> tuple[int, int]:
    """(active rows without a current embedding from `model`, active rows) in the given buckets."""
    source = INDEXED[source_name]
    where, params = _in_buckets(buckets)
    row = conn.execute(
        f"SELECT count(*) FILTER (WHERE {NEEDS_EMBEDDING}), count(*)"
        f" FROM {source.from_sql} WHERE {source.active_sql}{where}",
        {"model": model, **params},
    ).fetchone()
    return int(row[0]), int(row[1])


def embedded_mix(conn: psycopg.Connection, source_name: str, buckets: Sequence[int] | None = None) -> dict[str, int]:
    """Embedded active rows per `model / dimension` in the given buckets, most frequent first."""
    source = INDEXED[source_name]
    where, params = _in_buckets(buckets)
    rows = conn.execute(
        "SELECT coalesce(t.embedding_model, '?') || ' / ' || vector_dims(t.embedding), count(*)"
        f" FROM {source.from_sql} WHERE {source.active_sql} AND t.embedding IS NOT NULL{where}"
        " GROUP BY 1 ORDER BY 2 DESC",
        params,
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def unembedded_by_bucket(conn: psycopg.Connection) -> dict[str, dict[str, int]]:
    """Rows with no embedding at all, per source and bucket (`{"task": {"3": 12}}`, buckets as strings).

    Reads only the partial `*_pending_embedding` indexes (`WHERE embedding IS NULL`): a few index lookups,
    cheap enough for a sensor tick. Rows of another model or with changed content are not counted."""
    out: dict[str, dict[str, int]] = {}
    for name in INDEXED_NAMES:
        rows = conn.execute(
            f"SELECT {bucket_sql()}, count(*) FROM {INDEXED[name].table} t WHERE t.embedding IS NULL GROUP BY 1",
            {"buckets": BUCKETS},
        ).fetchall()
        out[name] = {str(b): int(n) for b, n in rows}
    return out


def memory_vector_counts(conn: psycopg.Connection, model: str) -> tuple[int, int]:
    """(active memories whose vector is done with `model`, active memories still waiting for one)."""
    done, pending = conn.execute(
        "SELECT count(*) FILTER (WHERE embedding_status = 'done' AND embedding_model = %(model)s),"
        " count(*) FILTER (WHERE embedding_status <> 'done' OR embedding_model IS DISTINCT FROM %(model)s)"
        " FROM memories WHERE is_active",
        {"model": model},
    ).fetchone()
    return int(done), int(pending)


def keyword_term_count(conn: psycopg.Connection, source_name: str) -> int:
    """Rows (item, term) of one source in the keyword table."""
    return int(conn.execute("SELECT count(*) FROM keywords WHERE source = %s", (source_name,)).fetchone()[0])


def vector_index_names(conn: psycopg.Connection) -> set[str]:
    """The HNSW indexes that exist, table-wide and owners' alike."""
    return {r[0] for r in conn.execute(
        "SELECT c.relname::text FROM pg_class c JOIN pg_am am ON am.oid = c.relam WHERE am.amname = 'hnsw'")}
