"""Jobs, schedules and the sensor that keep the memory indexed.

- `embedding_backfill` (partitioned by bucket): the embedding assets and their checks.
- `index_maintenance`: memory vectors + deferred arbitration, HNSW indexes, keyword tables.
- nightly: every bucket of the backfill at 02:00 UTC, maintenance at 03:00 UTC.
- `unembedded_rows_sensor`: launches backfill runs for the buckets where new unembedded rows appeared.
  Its query reads only the partial `*_pending_embedding` indexes (`WHERE embedding IS NULL`), so a tick
  costs a few index lookups; its cursor holds the pending count per source and bucket, and it requests a
  run only when a count grew (rows a failing provider left behind are not re-requested every tick: the
  nightly run retries them). Content changes and model switches are the nightly run's job.
- `weekly_tuning`: Mondays 04:00 UTC, the `tuning` group: log → hit-rate report → fit → evaluation →
  (blocking gate check) → published scoring config.
"""

import hashlib
import json

import dagster as dg
import psycopg

from memory_pipelines.infra.errors import UserError
from memory_pipelines.vocabulary import INDEXED, INDEXED_NAMES

from .embeddings import (
    BUCKETS,
    bucket_partitions,
    embedding_asset_key,
    embedding_assets,
    memory_vectors,
    vector_indexes,
)
from .keywords import keyword_assets
from .resources import MemoryResource
from .tuning import TUNING_GROUP

embedding_job = dg.define_asset_job(
    "embedding_backfill",
    selection=dg.AssetSelection.assets(*embedding_assets.values()),
    description="Embed every pending row of the selected buckets (a partition = a hash bucket of the id).",
)

maintenance_job = dg.define_asset_job(
    "index_maintenance",
    selection=dg.AssetSelection.assets(memory_vectors, vector_indexes, *keyword_assets.values()),
    description="Memory vectors and deferred arbitration, HNSW indexes, incremental keyword tables.",
)

tuning_job = dg.define_asset_job(
    "weekly_tuning", selection=dg.AssetSelection.groups(TUNING_GROUP),
    description="Tuning of half-lives and mode weights from the retrieval log: fit, held-out replay, and "
                "publishing gated by the blocking `publish_gate` check.",
)


@dg.schedule(job=embedding_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
             description="Nightly: every bucket, so changed content and model switches are re-embedded too.")
def nightly_embedding_backfill(context: dg.ScheduleEvaluationContext):
    when = context.scheduled_execution_time
    stamp = when.strftime("%Y-%m-%d") if when else "now"
    for key in bucket_partitions.get_partition_keys():
        yield dg.RunRequest(run_key=f"nightly-{stamp}-{key}", partition_key=key, tags={"trigger": "nightly"})


nightly_maintenance = dg.ScheduleDefinition(
    name="nightly_maintenance", job=maintenance_job, cron_schedule="0 3 * * *", execution_timezone="UTC",
    description="Nightly, after the backfill: memory vectors, HNSW indexes, keyword tables.",
)

weekly_tuning = dg.ScheduleDefinition(
    name="weekly_tuning", job=tuning_job, cron_schedule="0 4 * * 1", execution_timezone="UTC",
    description="Weekly (Mondays 04:00 UTC): tune on the retrieval log; publish only if the gate passes.",
)


def pending_by_bucket(conn: psycopg.Connection) -> dict[str, dict[str, int]]:
    """Rows with no embedding at all, per source and bucket (reads the partial pending indexes only)."""
    out: dict[str, dict[str, int]] = {}
    for name in INDEXED_NAMES:
        table = INDEXED[name].table
        rows = conn.execute(
            f"SELECT abs(hashtext(id::text)::bigint) %% %s, count(*) FROM {table}"
            " WHERE embedding IS NULL GROUP BY 1",
            (BUCKETS,),
        ).fetchall()
        out[name] = {str(b): int(n) for b, n in rows}
    return out


@dg.sensor(job=embedding_job, minimum_interval_seconds=60,
           description="Launches backfill runs for the buckets where new unembedded rows appeared.")
def unembedded_rows_sensor(context: dg.SensorEvaluationContext, memory: MemoryResource):
    previous = json.loads(context.cursor) if context.cursor else {}
    try:
        with memory.pool().connection() as conn:
            current = pending_by_bucket(conn)
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


schedules = [nightly_embedding_backfill, nightly_maintenance, weekly_tuning]
sensors = [unembedded_rows_sensor]
jobs = [embedding_job, maintenance_job, tuning_job]
