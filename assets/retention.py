"""Retention of the retrieval log and the events: `log_retention` prunes what is past its age (the hit rates rolled
up per day first, so the web view's history and the tuner's report keep them), daily at 05:00 UTC.

Every context build logs a row and about 30 candidate rows; nothing else ever removes them. The asset's
materialisation is one prune (`operations.retention.prune`), its metadata the rows removed per table and the
seconds it took; its check warns when the log still holds rows older than the ages (a run left them: locks met
too often, or the schedule is off). The ages come from the run config, else MEMORY_PIPELINES_RETAIN_* (defaults:
candidates 30 days, builds 90, events 90); the check judges by those of the latest materialisation (its `age_days`),
the environment's only before the first. Not part of `main_job`: pruning is for a store in service.
"""

import time
from datetime import UTC, datetime, timedelta

import dagster as dg

from memory_pipelines.operations.retention import RetentionPolicy, log_status, prune

from .embeddings import DB_WRITE_POOL
from .resources import RESOURCES, MemoryResource

RETENTION_GROUP = "retention"
PARTS = {"candidates": "retrieval_candidates", "builds": "retrievals", "events": "events"}
"""Each retention age and the table it applies to."""


class RetentionConfig(dg.Config):
    """Ages as '30d', '36h', '1440m' or '86400s' (a bare number is days), at least a day (as `memory-pipelines
    prune` checks them); unset: MEMORY_PIPELINES_RETAIN_*."""

    candidates: str | None = None
    """How long the scored candidates of each build are kept."""
    builds: str | None = None
    """How long the builds themselves (one row each) are kept."""
    events: str | None = None
    """How long events (the build log's and the owners') are kept."""


@dg.asset(
    group_name=RETENTION_GROUP,
    kinds={"postgres"},
    pool=DB_WRITE_POOL,
    description="The retrieval log and the events within their retention ages: older rows pruned in short "
                "batches, their hit rates rolled up per day and source first.",
)
def log_retention(context: dg.AssetExecutionContext, config: RetentionConfig,
                  memory: MemoryResource) -> dg.MaterializeResult:
    policy = RetentionPolicy.from_env(candidates=config.candidates, builds=config.builds, events=config.events)
    pool = memory.pool()
    started = time.perf_counter()
    result = prune(pool, policy)
    seconds = time.perf_counter() - started
    with pool.connection() as conn:
        kept = log_status(conn)
    removed = result.removed
    context.log.info(f"retention: removed {removed} in {seconds:.1f} s ({result.batches} batches)")
    return dg.MaterializeResult(metadata={
        "rows_removed": sum(removed[t] for t in ("retrieval_candidates", "retrievals", "events")),
        "candidates_removed": removed["retrieval_candidates"],
        "builds_removed": removed["retrievals"],
        "events_removed": removed["events"],
        "batches": result.batches,
        "batches_retried": result.retried,
        "seconds": round(seconds, 3),
        "candidate_rows_kept": kept["retrieval_candidates"]["rows"],
        "oldest_candidates_kept": kept["retrieval_candidates"]["oldest"] or "-",
        "days_rolled_up": kept["rolled_up"]["days"],
        "age_days": dg.MetadataValue.json(age_days(policy)),
    })


def age_days(policy: RetentionPolicy) -> dict[str, float]:
    """The policy's ages in days, as the materialisation records them."""
    return {part: getattr(policy, part) / timedelta(days=1) for part in PARTS}


def pruned_with(instance: dg.DagsterInstance) -> RetentionPolicy:
    """The ages the latest materialisation pruned with; the environment's before the first one."""
    event = instance.get_latest_materialization_event(log_retention.key)
    recorded = event.asset_materialization.metadata.get("age_days") if event and event.asset_materialization else None
    if recorded is None:  # never materialised (or before the ages were recorded): what a scheduled run would use
        return RetentionPolicy.from_env()
    return RetentionPolicy(**{part: timedelta(days=days) for part, days in recorded.value.items()})


@dg.asset_check(asset=log_retention, name="log_within_retention",
                description="No build, candidate or event is older than its retention age (plus a day).")
def log_within_retention(context: dg.AssetCheckExecutionContext, memory: MemoryResource) -> dg.AssetCheckResult:
    policy = pruned_with(context.instance)
    with memory.pool().connection() as conn:
        kept = log_status(conn)
    now = datetime.now(UTC)
    late = {}
    for part, table in PARTS.items():
        oldest = kept[table]["oldest"]
        if oldest and now - datetime.fromisoformat(oldest) > getattr(policy, part) + timedelta(days=1):
            late[table] = oldest
    return dg.AssetCheckResult(
        passed=not late, severity=dg.AssetCheckSeverity.WARN,
        description=None if not late else f"rows past their age remain: {late}",
        metadata={**{f"oldest_{t}": kept[t]["oldest"] or "-" for t in PARTS.values()},
                  **{f"{part}_age_days": days for part, days in age_days(policy).items()}},
    )


retention_job = dg.define_asset_job(
    "retention", selection=dg.AssetSelection.groups(RETENTION_GROUP),
    description="Prune the retrieval log and the events past their ages, hit rates rolled up first.",
)

daily_retention = dg.ScheduleDefinition(
    name="daily_retention", job=retention_job, cron_schedule="0 5 * * *", execution_timezone="UTC",
    description="Daily at 05:00 UTC, after the nightly maintenance and the weekly tuning: the log's retention.",
)

defs = dg.Definitions(assets=[log_retention], asset_checks=[log_within_retention], jobs=[retention_job],
                      schedules=[daily_retention], resources=RESOURCES)
