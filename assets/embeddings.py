"""Embeddings: one asset per source, partitioned by hash bucket of the row id, with their checks, the
backfill job, its nightly schedule and the sensor that reacts to new rows.

A partition is a static hash bucket (`vocabulary.bucket_sql`), not a slice of time: every bucket is always
"live", and materialising it embeds whatever in it is pending (no embedding, another model's, or content
changed since). A backfill over all buckets fans out into runs of `MAX_BUCKETS_PER_RUN` buckets; the
`embedding_provider` pool caps how many steps call the provider at once across runs, and
`memory_db_writes` caps the database-heavy maintenance steps.

Checks (blocking): coverage and model/dimension consistency. They look at the buckets of the run they
execute in (a run of bucket 3 is judged on bucket 3, so the first runs of a fanned-out backfill do not fail
for buckets still queued); run on their own they look at the whole table. A failed blocking check fails the
run and stops every asset downstream of the checked one in it.

`unembedded_rows_sensor` launches backfill runs for the buckets where new unembedded rows appeared. It
reads only the partial `*_pending_embedding` indexes, so a tick costs a few index lookups; its cursor holds
the pending count per source and bucket, and it requests a run only when a count grew (rows a failing
provider left behind are not re-requested every tick: the nightly run retries them). Content changes and
model switches are the nightly run's job.
"""

import hashlib
import json

import dagster as dg
import psycopg

from memory_pipelines.index.owner_indexes import sync_owner_indexes
from memory_pipelines.index.vectors import BackfillResult, embed_buckets, ensure_vector_indexes, finish_memories
from memory_pipelines.infra.errors import UserError
from memory_pipelines.infra.migrate import stored_dimension
from memory_pipelines.operations.coverage import (
    embedded_mix,
    embedding_coverage,
    memory_vector_counts,
    unembedded_by_bucket,
    vector_index_names,
)
from memory_pipelines.store.ingest import finish_deferred
from memory_pipelines.vocabulary import BUCKETS, INDEXED, INDEXED_NAMES

from .resources import RESOURCES, MemoryResource

MAX_BUCKETS_PER_RUN = 2
PROVIDER_POOL = "embedding_provider"
DB_WRITE_POOL = "memory_db_writes"

bucket_partitions = dg.StaticPartitionsDefinition([str(i) for i in range(BUCKETS)])

# The tables the application writes; Dagster does not materialise them, it reads them.
SOURCE_TABLES: dict[str, dg.AssetSpec] = {
    name: dg.AssetSpec(
        key=dg.AssetKey(["memory_db", INDEXED[name].table]),
        group_name="sources",
        kinds={"postgres", "table"},
        description=f"The `{INDEXED[name].table}` table, written by the application (HTTP API, MCP, ingest).",
    )
    for name in INDEXED_NAMES
}
SOURCE_TABLES["fragment"] = SOURCE_TABLES["fragment"].replace_attributes(
    description="The `fragments` table: memory chunks written by ingest (agent-mem)."
)


class EmbedConfig(dg.Config):
    """Run options of an embedding backfill (all optional)."""

    defer_index: bool | None = None
    """Drop the HNSW index during the load and rebuild it after. Unset: when most of the table is pending."""
    max_consecutive_failures: int = 3
    """Give up on a bucket after this many failed provider batches in a row (rows stay pending)."""


def embedding_asset_key(source: str) -> dg.AssetKey:
    return dg.AssetKey(f"{source}_embeddings")


def _buckets_of(op: dg.OpExecutionContext) -> list[int]:
    if op.has_partition_key or op.has_partition_key_range:
        return sorted(int(k) for k in op.partition_keys)
    return list(range(BUCKETS))


def run_buckets(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> list[int]:
    """The buckets this run covers: its partition key(s), or every bucket when it is not partitioned."""
    return _buckets_of(context)


def check_buckets(context: dg.AssetCheckExecutionContext) -> list[int]:
    """Buckets of the run the check executes in; all of them outside a partitioned run."""
    return _buckets_of(context.op_execution_context)


def result_metadata(result: BackfillResult, dimension: int, buckets: list[int]) -> dict:
    """What a materialisation reports."""
    return {
        "rows_embedded": result.embedded,
        "rows_skipped": result.skipped,
        "rows_failed": result.failed,
        "rows_pending_after": result.pending_after,
        "rows_per_second": round(result.rows_per_second, 1),
        "seconds": round(result.seconds, 3),
        "batches": result.batches,
        "model": result.model,
        "dimension": dimension,
        "buckets": dg.MetadataValue.json(buckets),
        "index_rebuilt": result.index_rebuilt,
        "indexes_built": dg.MetadataValue.json(result.indexes_built),
        "errors": dg.MetadataValue.json(result.errors[:5]),
    }


# ---------------------------------------------------------------- assets


def _build_embedding_asset(source: str) -> dg.AssetsDefinition:
    table = INDEXED[source].table

    @dg.asset(
        key=embedding_asset_key(source),
        deps=[SOURCE_TABLES[source]],
        group_name="embeddings",
        partitions_def=bucket_partitions,
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=MAX_BUCKETS_PER_RUN),
        kinds={"postgres", "pgvector"},
        pool=PROVIDER_POOL,
        description=(
            f"Embeddings of `{table}`: every active row with no embedding, another model's, or content "
            "changed since it was embedded; nothing else. Binary COPY into a staging table and one UPDATE "
            "per batch, each committed, so a killed run resumes where it stopped."
            + (" Memory vectors (mean of fragment vectors) are set as their fragments complete."
               if source == "fragment" else "")
        ),
    )
    def _embeddings(context: dg.AssetExecutionContext, config: EmbedConfig,
                    memory: MemoryResource) -> dg.MaterializeResult:
        rt = memory.runtime
        buckets = run_buckets(context)
        done = {"rows": 0, "batches": 0}

        def progress(rows: int) -> None:
            done["rows"] += rows
            done["batches"] += 1
            context.log.info(f"{source}: batch {done['batches']} written, {done['rows']} rows embedded")

        context.log.info(f"{source}: embedding buckets {buckets} of {BUCKETS} with {rt.embedder.model_name}")
        result = embed_buckets(
            rt.pool, rt.embedder, source, buckets, BUCKETS, batch_size=memory.batch_size,
            defer_index=config.defer_index, max_consecutive_failures=config.max_consecutive_failures,
            progress=progress,
        )
        summary = (f"{source}: {result.embedded} embedded, {result.skipped} already current, {result.failed} "
                   f"failed, {result.pending_after} still pending ({result.rows_per_second:.0f} rows/s)")
        if result.failed or result.pending_after:
            context.log.warning(summary + "; pending rows are retried by the next run. Errors: "
                                + "; ".join(result.errors[:3]))
        else:
            context.log.info(summary)
        return dg.MaterializeResult(metadata=result_metadata(result, rt.embedder.dimension, buckets))

    return _embeddings


embedding_assets: dict[str, dg.AssetsDefinition] = {s: _build_embedding_asset(s) for s in INDEXED_NAMES}


@dg.asset(
    deps=[embedding_assets["fragment"]],
    group_name="embeddings",
    kinds={"postgres", "pgvector"},
    pool=DB_WRITE_POOL,
    description=(
        "Memory-level vectors (mean of their fragments) and the deferred arbitration of memories ingested "
        "while the provider was down (`finish_deferred`)."
    ),
)
def memory_vectors(context: dg.AssetExecutionContext, memory: MemoryResource) -> dg.MaterializeResult:
    rt = memory.runtime
    with rt.pool.connection() as conn:
        completed = finish_memories(conn, rt.embedder.model_name)
    settled = finish_deferred(rt.pool, rt.embedder, memory.llm())
    with rt.pool.connection() as conn:
        done, pending = memory_vector_counts(conn, rt.embedder.model_name)
    context.log.info(f"memory vectors: {completed} completed now, {done} done, {pending} pending; "
                     f"deferred arbitration: {settled['arbitrated']} settled, "
                     f"{settled['still_pending']} left")
    if settled["failed_fragments"] or settled["still_pending"]:
        context.log.warning(f"{settled['failed_fragments']} fragments failed, {settled['still_pending']} "
                            "memories still wait for arbitration; the next run retries them")
    return dg.MaterializeResult(metadata={
        "memories_completed": completed,
        "memories_done": done,
        "memories_pending": pending,
        "arbitrated": settled["arbitrated"],
        "arbitration_actions": dg.MetadataValue.json(settled["actions"]),
        "arbitration_still_pending": settled["still_pending"],
        "fragments_embedded_late": settled["embedded_fragments"],
        "fragments_failed": settled["failed_fragments"],
        "model": rt.embedder.model_name,
    })


@dg.asset(
    deps=list(embedding_assets.values()),
    group_name="embeddings",
    kinds={"postgres", "pgvector"},
    pool=DB_WRITE_POOL,
    description="Every owner holding more than 10,000 embedded rows of a table has an HNSW index of her own "
                "there, and owners who no longer do have none (index/owner_indexes.py); a table-wide index a "
                "killed load left missing is built again. Embedding loads sync their table's owners themselves.",
)
def vector_indexes(context: dg.AssetExecutionContext, memory: MemoryResource) -> dg.MaterializeResult:
    rt = memory.runtime
    with rt.pool.connection() as conn:
        restored = ensure_vector_indexes(conn)
        owners = sync_owner_indexes(conn, rt.embedder.dimension)
        after = vector_index_names(conn)
    if restored:
        context.log.warning(f"rebuilt missing HNSW indexes: {restored}")
    if owners.built or owners.dropped:
        context.log.info(f"owner indexes: built {owners.built}, dropped {owners.dropped}")
    if owners.busy:
        context.log.info(f"left to the loads in progress: {owners.busy}")
    return dg.MaterializeResult(metadata={"indexes": dg.MetadataValue.json(sorted(after)),
                                          "built_now": dg.MetadataValue.json(sorted(restored + owners.built)),
                                          "owner_indexes_built": dg.MetadataValue.json(owners.built),
                                          "owner_indexes_dropped": dg.MetadataValue.json(owners.dropped),
                                          "owner_indexes_kept": owners.kept,
                                          "tables_busy": dg.MetadataValue.json(owners.busy)})


# ---------------------------------------------------------------- checks


def _coverage_check(source: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=embedding_assets[source], name="embedding_coverage", blocking=True,
        description="No active row without an embedding from the current model for its current content.",
    )
    def _check(context: dg.AssetCheckExecutionContext, memory: MemoryResource) -> dg.AssetCheckResult:
        rt = memory.runtime
        buckets = check_buckets(context)
        with rt.pool.connection() as conn:
            pending, active = embedding_coverage(conn, source, rt.embedder.model_name, buckets)
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


embedding_checks = [f(s) for s in INDEXED_NAMES for f in (_coverage_check, _consistency_check)]


# ---------------------------------------------------------------- automation

embedding_job = dg.define_asset_job(
    "embedding_backfill",
    selection=dg.AssetSelection.assets(*embedding_assets.values()),
    description="Embed every pending row of the selected buckets (a partition = a hash bucket of the id).",
)


@dg.schedule(job=embedding_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
             description="Nightly: every bucket, so changed content and model switches are re-embedded too.")
def nightly_embedding_backfill(context: dg.ScheduleEvaluationContext):
    when = context.scheduled_execution_time
    stamp = when.strftime("%Y-%m-%d") if when else "now"
    for key in bucket_partitions.get_partition_keys():
        yield dg.RunRequest(run_key=f"nightly-{stamp}-{key}", partition_key=key, tags={"trigger": "nightly"})


@dg.sensor(job=embedding_job, minimum_interval_seconds=60,
           description="Launches backfill runs for the buckets where new unembedded rows appeared.")
def unembedded_rows_sensor(context: dg.SensorEvaluationContext, memory: MemoryResource):
    previous = json.loads(context.cursor) if context.cursor else {}
    try:
        with memory.pool().connection() as conn:
            current = unembedded_by_bucket(conn)
    except (psycopg.Error, OSError, UserError) as exc:
        return dg.SkipReason(f"database not reachable or not migrated: {str(exc).splitlines()[0]}")
    grown: dict[str, list[str]] = {}
    for source, buckets in current.items():
        for bucket, count in buckets.items():
            if count > previous.get(source, {}).get(bucket, 0):
                grown.setdefault(bucket, []).append(source)
    cursor = json.dumps(current, sort_keys=True)
    if not grown:
        return dg.SensorResult(skip_reason=dg.SkipReason("no new unembedded rows"), cursor=cursor)
    digest = hashlib.sha1(cursor.encode()).hexdigest()[:12]
    requests = [
        dg.RunRequest(
            run_key=f"{bucket}:{'+'.join(sources)}:{digest}",
            partition_key=bucket,
            asset_selection=[embedding_asset_key(s) for s in sources],
            tags={"trigger": "unembedded_rows_sensor"},
        )
        for bucket, sources in sorted(grown.items())
    ]
    context.log.info(f"new unembedded rows in buckets {sorted(grown)}: requesting {len(requests)} runs")
    return dg.SensorResult(run_requests=requests, cursor=cursor)


defs = dg.Definitions(
    assets=[*SOURCE_TABLES.values(), *embedding_assets.values(), memory_vectors, vector_indexes],
    asset_checks=embedding_checks,
    jobs=[embedding_job],
    schedules=[nightly_embedding_backfill],
    sensors=[unembedded_rows_sensor],
    resources=RESOURCES,
)
