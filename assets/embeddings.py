"""Embedding backfills: one asset per source, partitioned by hash bucket of the row id.

A partition is a static hash bucket (`abs(hashtext(id::text)) % BUCKETS`), not a slice of time: every
bucket is always "live", and materialising it embeds whatever in it is pending (no embedding, another
model's, or content changed since). A backfill over all buckets fans out into runs of
`MAX_BUCKETS_PER_RUN` buckets; the `embedding_provider` pool caps how many steps call the provider at
once across runs, and `memory_db_writes` caps the database-heavy maintenance steps.
"""


import dagster as dg

from memory_pipelines.index.vectors import BackfillResult, embed_buckets, ensure_vector_indexes, finish_memories
from memory_pipelines.pipelines.deferred import finish_deferred
from memory_pipelines.vocabulary import INDEXED, INDEXED_NAMES

from .resources import MemoryResource

BUCKETS = 8
MAX_BUCKETS_PER_RUN = 2
PROVIDER_POOL = "embedding_provider"
DB_WRITE_POOL = "memory_db_writes"

bucket_partitions = dg.StaticPartitionsDefinition([str(i) for i in range(BUCKETS)])

# The tables the application writes; Dagster does not materialise them, it reads them.
SOURCE_TABLES: dict[str, dg.AssetSpec] = {
    name: dg.AssetSpec(
        key=dg.AssetKey(["memory_db", INDEXED[name].table]),
        group_name="sources",
        kinds={"postgres"},
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


def run_buckets(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> list[int]:
    """The buckets this run covers: its partition key(s), or every bucket when it is not partitioned."""
    if context.has_partition_key or context.has_partition_key_range:
        return sorted(int(k) for k in context.partition_keys)
    return list(range(BUCKETS))


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
        "errors": dg.MetadataValue.json(result.errors[:5]),
    }


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
        done, pending = conn.execute(
            "SELECT count(*) FILTER (WHERE embedding_status = 'done' AND embedding_model = %s),"
            " count(*) FILTER (WHERE embedding_status <> 'done' OR embedding_model IS DISTINCT FROM %s)"
            " FROM memories WHERE is_active",
            (rt.embedder.model_name, rt.embedder.model_name),
        ).fetchone()
    context.log.info(f"memory vectors: {completed} completed now, {done} done, {pending} pending; "
                     f"deferred arbitration: {settled['arbitrated']} settled, "
                     f"{settled['still_pending']} left")
    if settled["failed_fragments"] or settled["still_pending"]:
        context.log.warning(f"{settled['failed_fragments']} fragments failed, {settled['still_pending']} "
                            "memories still wait for arbitration; the next run retries them")
    return dg.MaterializeResult(metadata={
        "memories_completed": completed,
        "memories_done": int(done),
        "memories_pending": int(pending),
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
    description="Every HNSW index exists (a load that deferred one and was killed is healed here).",
)
def vector_indexes(context: dg.AssetExecutionContext, memory: MemoryResource) -> dg.MaterializeResult:
    rt = memory.runtime
    with rt.pool.connection() as conn:
        listing = "SELECT indexname FROM pg_indexes WHERE indexname LIKE '%_hnsw'"
        before = {r[0] for r in conn.execute(listing)}
        ensure_vector_indexes(conn)
        conn.commit()
        after = {r[0] for r in conn.execute(listing)}
    built = sorted(after - before)
    if built:
        context.log.warning(f"rebuilt missing HNSW indexes: {built}")
    return dg.MaterializeResult(metadata={"indexes": dg.MetadataValue.json(sorted(after)),
                                          "built_now": dg.MetadataValue.json(built)})
