"""Jobs and schedules that span domains; each domain module holds its own (see definitions.py).

- `main_job` (what `memory-pipelines run` / `make run` launches after `demo_job`): every asset and check
  but the `tuning` and `retention` groups and the demo corpus, over all buckets in one run (`RANGE_TAGS`: a
  single-run backfill, so each embedding step makes one keyset pass over its table and a bulk first load may
  defer the HNSW index). It runs its steps in the run's own process: the embedding model loads once, not once
  per step process.
- `index_maintenance`: memory vectors + deferred arbitration, HNSW indexes, keyword tables; nightly at
  03:00 UTC, after the embedding backfill (02:00, `embeddings.nightly_embedding_backfill`).

Elsewhere: `embedding_backfill`, its nightly schedule and `unembedded_rows_sensor` (embeddings.py);
`weekly_tuning`, Mondays 04:00 UTC (tuning.py); `retention`, daily at 05:00 UTC (retention.py); `demo_job`
(demo.py); `memory_context` (context_job.py).
"""

import dagster as dg

from memory_pipelines.operations.main_job import RANGE_TAGS

from .demo import DEMO_GROUP
from .embeddings import memory_vectors, vector_indexes
from .ingest import INGEST_GROUP
from .keywords import keyword_assets
from .resources import RESOURCES
from .retention import RETENTION_GROUP
from .tuning import TUNING_GROUP

MAIN_SELECTION = dg.AssetSelection.all() - dg.AssetSelection.groups(
    TUNING_GROUP, DEMO_GROUP, INGEST_GROUP, RETENTION_GROUP
)

main_job = dg.define_asset_job(
    "main_job", selection=MAIN_SELECTION, executor_def=dg.in_process_executor,
    description="Everything `make run` keeps current: embeddings, memory vectors, HNSW indexes, keyword tables "
                "and their checks; not the tuning group nor the demo corpus. Launch it over every bucket "
                f"(tags {RANGE_TAGS}).",
)

maintenance_job = dg.define_asset_job(
    "index_maintenance",
    selection=dg.AssetSelection.assets(memory_vectors, vector_indexes, *keyword_assets.values()),
    description="Memory vectors and deferred arbitration, HNSW indexes, incremental keyword tables.",
)

nightly_maintenance = dg.ScheduleDefinition(
    name="nightly_maintenance", job=maintenance_job, cron_schedule="0 3 * * *", execution_timezone="UTC",
    description="Nightly, after the backfill: memory vectors, HNSW indexes, keyword tables.",
)

defs = dg.Definitions(jobs=[main_job, maintenance_job], schedules=[nightly_maintenance], resources=RESOURCES)
