"""Asset checks: embedding coverage and model/dimension consistency (blocking), keyword freshness.

Embedding checks look at the buckets of the run they execute in (a run of bucket 3 is judged on
bucket 3, so the first runs of a fanned-out backfill do not fail for buckets still queued); run on
their own they look at the whole table. A failed blocking check fails the run and stops every asset
downstream of the checked one in it.
"""

import dagster as dg

from memory_pipelines.index.keywords import keyword_staleness, stale_stat_owners
from memory_pipelines.infra.migrate import stored_dimension
from memory_pipelines.vocabulary import INDEXED, INDEXED_NAMES

from .embeddings import BUCKETS, embedding_assets
from .keywords import keyword_assets
from .resources import MemoryResource


def check_buckets(context: dg.AssetCheckExecutionContext) -> list[int]:
    """Buckets of the run the check executes in; all of them outside a partitioned run."""
    op = context.op_execution_context
    if op.has_partition_key or op.has_partition_key_range:
        return sorted(int(k) for k in op.partition_keys)
    return list(range(BUCKETS))


def _bucket_clause(buckets: list[int]) -> str:
    if len(buckets) == BUCKETS:
        return ""
    return " AND abs(hashtext(t.id::text)::bigint) %% %(n)s = ANY(%(buckets)s)"


def coverage(conn, source_name: str, model: str, buckets: list[int]) -> tuple[int, int]:
    """(active rows without a current embedding from `model`, active rows) in the given buckets."""
    source = INDEXED[source_name]
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE t.embedding IS NULL OR t.embedding_model IS DISTINCT FROM %(model)s"
        " OR t.embedded_hash IS DISTINCT FROM t.content_hash), count(*)"
        f" FROM {source.from_sql} WHERE {source.active_sql}{_bucket_clause(buckets)}",
        {"model": model, "n": BUCKETS, "buckets": buckets},
    ).fetchone()
    return int(row[0]), int(row[1])


def embedded_mix(conn, source_name: str, buckets: list[int]) -> dict[str, int]:
    """Embedded active rows per `model / dimension` in the given buckets."""
    source = INDEXED[source_name]
    rows = conn.execute(
        "SELECT coalesce(t.embedding_model, '?') || ' / ' || vector_dims(t.embedding), count(*)"
        f" FROM {source.from_sql} WHERE {source.active_sql} AND t.embedding IS NOT NULL"
        f"{_bucket_clause(buckets)}"
        " GROUP BY 1 ORDER BY 2 DESC",
        {"n": BUCKETS, "buckets": buckets},
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def _coverage_check(source: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=embedding_assets[source], name="embedding_coverage", blocking=True,
        description="No active row without an embedding from the current model for its current content.",
    )
    def _check(context: dg.AssetCheckExecutionContext, memory: MemoryResource) -> dg.AssetCheckResult:
        rt = memory.runtime
        buckets = check_buckets(context)
        with rt.pool.connection() as conn:
            pending, active = coverage(conn, source, rt.embedder.model_name, buckets)
        return dg.AssetCheckResult(
            passed=pending == 0,
            severity=dg.AssetCheckSeverity.ERROR,
            description=f"{pending} of {active} active rows lack a current embedding" if pending else None,
            metadata={"rows_pending": pending, "rows_active": active, "model": rt.embedder.model_name,
                      "coverage": round(1.0 - pending / active, 6) if active else 1.0,
                      "buckets": dg.MetadataValue.json(buckets)},
        )

    return _check


def _consistency_check(source: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=embedding_assets[source], name="embedding_consistency", blocking=True,
        description="Every stored vector has the configured model's dimension and comes from the configured "
                    "model; the database was built for that dimension.",
    )
    def _check(context: dg.AssetCheckExecutionContext, memory: MemoryResource) -> dg.AssetCheckResult:
        rt = memory.runtime
        buckets = check_buckets(context)
        expected = f"{rt.embedder.model_name} / {rt.embedder.dimension}"
        with rt.pool.connection() as conn:
            mix = embedded_mix(conn, source, buckets)
            stored = stored_dimension(conn)
        others = {k: v for k, v in mix.items() if k != expected}
        db_ok = stored is not None and stored[0] == rt.embedder.dimension
        problems = []
        if others:
            problems.append(f"{sum(others.values())} rows embedded by another model or dimension: {others}")
        if not db_ok:
            problems.append(f"database built for {stored}, model makes {rt.embedder.dimension}-d vectors")
        return dg.AssetCheckResult(
            passed=not problems,
            severity=dg.AssetCheckSeverity.ERROR,
            description="; ".join(problems) or None,
            metadata={"expected": expected, "found": dg.MetadataValue.json(mix),
                      "database_dimension": stored[0] if stored else None},
        )

    return _check


def _freshness_check(source: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=keyword_assets[source], name="keyword_freshness",
        description="Every active row is keyword-indexed at its current content; no entry for removed rows; "
                    "every owner's stored BM25 statistics count what is indexed.",
    )
    def _check(memory: MemoryResource) -> dg.AssetCheckResult:
        with memory.runtime.pool.connection() as conn:
            lag = keyword_staleness(conn, source)
            stale_stats = len(stale_stat_owners(conn, source))
        fresh = lag["stale"] == 0 and lag["orphaned"] == 0 and stale_stats == 0
        return dg.AssetCheckResult(
            passed=fresh,
            severity=dg.AssetCheckSeverity.WARN,
            description=None if fresh else f"{lag['stale']} rows changed since indexed, "
                                           f"{lag['orphaned']} entries of removed rows, "
                                           f"{stale_stats} owners with stale BM25 statistics",
            metadata={"rows_stale": lag["stale"], "entries_orphaned": lag["orphaned"],
                      "rows_active": lag["active"], "owners_stale_statistics": stale_stats},
        )

    return _check


embedding_checks = [f(s) for s in INDEXED_NAMES for f in (_coverage_check, _consistency_check)]
keyword_checks = [_freshness_check(s) for s in INDEXED_NAMES]
all_checks = embedding_checks + keyword_checks
