"""Ways in from where the data lives: the inbox folder and a team's own PostgreSQL tables.

- `inbox_import` (one dynamic partition per file dropped into `$MEMORY_PIPELINES_HOME/inbox/`): imports the file
  (memory_pipelines/store/imports.py), then moves it to `inbox/done/`, or to `inbox/rejected/` with the reasons
  beside it (memory_pipelines/operations/inbox.py). A file whose name holds '[', ']', ',' or a control
  character (which a partition key cannot), of a format no import reads (`.json`, `.txt`), or in a folder
  inside an owner's folder goes to `inbox/rejected/` at once, its reason beside it.
  `inbox_sensor` adds the partition and requests its run once per file: run_key = path + size + mtime + ctime
  (a file moved back in is new), and its cursor remembers the files it requested while they wait. A run that
  fails for another reason (the database down) leaves the file where it
  is: re-execute its partition from the UI.
- `source_sync`: the syncs of `$MEMORY_PIPELINES_HOME/sync.yaml` (memory_pipelines/operations/source_sync.py),
  incremental from the watermark stored in our database; with `since` / `until` in its run config, exactly that
  range again. `source_sync_schedule` runs it every 15 minutes once switched on.
- `index_after_ingest`: when a run that materialised either asset succeeds (its job, or Materialize on the asset
  page), launches `ingest_indexing` over every bucket: the
  embedding assets (what the rows left pending), memory vectors, HNSW indexes and keyword tables downstream.

Both assets report rows read, created, updated, unchanged and rejected, the rejects themselves, and seconds.
"""

import json
import time

import dagster as dg

from memory_pipelines.infra.errors import UserError
from memory_pipelines.operations.inbox import (
    DONE,
    REJECTED,
    inbox_dir,
    move,
    owner_of,
    reject_unusable_names,
    source_of,
    waiting_files,
    write_rejects,
)
from memory_pipelines.operations.main_job import RANGE_TAGS
from memory_pipelines.operations.source_sync import config_path, load_syncs, parse_bound, sync
from memory_pipelines.store.imports import ImportFileError, import_file

from .embeddings import DB_WRITE_POOL, embedding_assets, memory_vectors, vector_indexes
from .keywords import keyword_assets
from .resources import RESOURCES, MemoryResource

INGEST_GROUP = "ingest"
inbox_files = dg.DynamicPartitionsDefinition(name="inbox_files")
"""One partition per file that arrived in the inbox (its path relative to the inbox)."""


class InboxConfig(dg.Config):
    skip_invalid: bool = False
    """Import the valid rows of a file that has rejected ones (each is still reported); by default such a file is
    not imported and goes to inbox/rejected/."""


def _rejects_metadata(rejects: list) -> dg.MetadataValue:
    return dg.MetadataValue.json([r.as_dict() if hasattr(r, "as_dict") else r for r in rejects[:50]])


@dg.asset(
    group_name=INGEST_GROUP,
    partitions_def=inbox_files,
    kinds={"file", "postgres"},
    pool=DB_WRITE_POOL,
    description="A file dropped into `MEMORY_PIPELINES_HOME/inbox/` (JSON Lines, CSV or Parquet; in "
                "`inbox/OWNER/` for that owner; named after its source, or with a source column), imported once: "
                "every row checked, then written by key (original times kept), keyword-indexed at once; then moved "
                "to `inbox/done/`, or to `inbox/rejected/` with `NAME.rejects.txt`. Run config `skip_invalid: true` "
                "imports the valid rows of a file that has rejected ones.",
)
def inbox_import(context: dg.AssetExecutionContext, config: InboxConfig,
                 memory: MemoryResource) -> dg.MaterializeResult:
    rt = memory.runtime
    inbox = inbox_dir(rt.settings.home)
    relpath = context.partition_key
    path = inbox / relpath
    if not path.is_file():
        raise dg.Failure(f"{relpath} is no longer in the inbox (imported files are in {DONE}/, refused ones in "
                         f"{REJECTED}/); drop it again to import it again")
    source = source_of(path.name)
    started = time.perf_counter()
    try:
        report = import_file(rt.pool, path, embedder=rt.embedder, source=source, owner=owner_of(relpath),
                             default_owner=rt.settings.default_owner, skip_invalid=config.skip_invalid)
    except ImportFileError as exc:
        moved = move(inbox, relpath, REJECTED)
        write_rejects(moved, None, str(exc))
        raise dg.Failure(f"{relpath} not imported: {exc}", metadata={
            "file": relpath, "error": str(exc), "moved_to": str(moved)}) from None
    seconds = time.perf_counter() - started
    totals = report.totals
    metadata = {
        "file": relpath, "format": report.format, "owner": owner_of(relpath) or "(owner column)",
        "source": source or "(source column)", "rows_read": report.rows, "rows_valid": report.valid,
        "rows_created": totals["created"], "rows_updated": totals["updated"], "rows_unchanged": totals["unchanged"],
        "rows_rejected": len(report.rejects), "rejects": _rejects_metadata(report.rejects),
        "counts": dg.MetadataValue.json(report.counts), "seconds": round(seconds, 3),
        "rows_per_second": round(report.rows / seconds, 1) if seconds > 0 else 0.0,
    }
    if not report.written or report.stopped:
        moved = move(inbox, relpath, REJECTED)
        write_rejects(moved, report, report.stopped and f"stopped at {report.stopped}")
        raise dg.Failure(f"{relpath} not imported: {len(report.rejects)} rows rejected (first: line "
                         f"{report.rejects[0].line}: {report.rejects[0].field}: {report.rejects[0].reason})",
                         metadata={**metadata, "moved_to": str(moved)})
    moved = move(inbox, relpath, DONE)
    if not (inbox / REJECTED / relpath).exists():  # the reasons of an earlier try moved back in and fixed
        (inbox / REJECTED / f"{relpath}.rejects.txt").unlink(missing_ok=True)
    if report.rejects:
        write_rejects(moved, report, None)
        context.log.warning(f"{relpath}: {len(report.rejects)} rows rejected and skipped (skip_invalid)")
    context.log.info(f"{relpath}: {report.rows} rows, {totals} in {seconds:.1f} s; moved to {moved}")
    return dg.MaterializeResult(metadata={**metadata, "moved_to": str(moved)})


inbox_import_job = dg.define_asset_job(
    "inbox_import_job", selection=dg.AssetSelection.assets(inbox_import),
    executor_def=dg.in_process_executor, description="Import one file of the inbox (a partition per file).",
)


@dg.sensor(job=inbox_import_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Launches one import run for each file that arrives in MEMORY_PIPELINES_HOME/inbox/.")
def inbox_sensor(context: dg.SensorEvaluationContext, memory: MemoryResource):
    inbox = inbox_dir(memory.settings().home)
    inbox.mkdir(parents=True, exist_ok=True)  # so the folder is there to drop files into
    for moved in reject_unusable_names(inbox):  # else such a file would wait there forever
        context.log.warning(f"inbox: {moved.name} cannot be imported (a name with '[', ']', ',' or a control "
                            "character, not a format the import reads, or in a folder inside an owner's folder): "
                            f"moved to {moved}, the reason beside it")
    files = waiting_files(inbox)
    requested = set(json.loads(context.cursor)) if context.cursor else set()
    new = [f for f in files if f.run_key not in requested]
    cursor = json.dumps(sorted({f.run_key for f in files} & (requested | {f.run_key for f in new})))
    if not new:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"no new file in {inbox}"), cursor=cursor)
    keys = [f.relpath for f in new]
    context.log.info(f"new in the inbox: {keys}")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f.run_key, partition_key=f.relpath, tags={"trigger": "inbox_sensor"})
                      for f in new],
        dynamic_partitions_requests=[inbox_files.build_add_request(sorted(set(keys)))],
        cursor=cursor,
    )


class SyncConfig(dg.Config):
    names: list[str] = []
    """The syncs to run (default: every one in sync.yaml)."""
    since: str | None = None
    """With `until`: re-read exactly the rows whose watermark is in [since, until) (ISO 8601 times or integers),
    leaving the stored watermark as it is. Either alone bounds that side only."""
    until: str | None = None


@dg.asset(
    group_name=INGEST_GROUP,
    kinds={"postgres"},
    pool=DB_WRITE_POOL,
    description="Rows of a team's own PostgreSQL tables (MEMORY_PIPELINES_HOME/sync.yaml: a URL, a table and a "
                "field-to-column mapping per sync) written as tasks, learnings, capabilities, goals or events: what "
                "is new since the watermark stored in our database, or with since/until exactly that range.",
)
def source_sync(context: dg.AssetExecutionContext, config: SyncConfig, memory: MemoryResource) -> dg.MaterializeResult:
    rt = memory.runtime
    path = config_path(rt.settings.home)
    try:
        specs = load_syncs(path)
        since, until = parse_bound(config.since), parse_bound(config.until)
    except UserError as exc:
        raise dg.Failure(str(exc)) from None
    unknown = sorted(set(config.names) - {s.name for s in specs})
    if unknown:
        raise dg.Failure(f"no sync named {unknown[0]!r} in {path}")
    started = time.perf_counter()
    results = []
    for spec in specs:
        if config.names and spec.name not in config.names:
            continue
        try:
            result = sync(rt.pool, spec, since=since, until=until)
        except UserError as exc:
            raise dg.Failure(str(exc), metadata={"synced_before": dg.MetadataValue.json(results)}) from None
        context.log.info(f"sync {spec.name}: {result.rows_read} rows read, {result.counts}, "
                         f"{len(result.rejects)} rejected; watermark {result.watermark_after}")
        if result.rejects:
            context.log.warning(f"sync {spec.name}: {len(result.rejects)} rows skipped, first: {result.rejects[0]}")
        results.append(result.as_dict())
    seconds = time.perf_counter() - started
    if not specs:
        context.log.info(f"no syncs configured in {path}")
    total = {k: sum(r[k] for r in results) for k in ("rows_read", "created", "updated", "unchanged", "rejected")}
    return dg.MaterializeResult(metadata={
        "config": str(path), "syncs": len(results),
        **{("rows_" + k if k != "rows_read" else k): v for k, v in total.items()},
        "ranged": since is not None or until is not None,
        "per_sync": dg.MetadataValue.json(results), "seconds": round(seconds, 3),
        "rows_per_second": round(total["rows_read"] / seconds, 1) if seconds > 0 else 0.0,
    })


source_sync_job = dg.define_asset_job(
    "source_sync_job", selection=dg.AssetSelection.assets(source_sync), executor_def=dg.in_process_executor,
    description="Sync the configured source databases (incremental; since/until in the run config for a range).",
)

source_sync_schedule = dg.ScheduleDefinition(
    name="source_sync_schedule", job=source_sync_job, cron_schedule="*/15 * * * *", execution_timezone="UTC",
    description="Every 15 minutes: what is new in the source databases since their watermarks.",
)

ingest_indexing_job = dg.define_asset_job(
    "ingest_indexing",
    selection=dg.AssetSelection.assets(*embedding_assets.values(), memory_vectors, vector_indexes,
                                       *keyword_assets.values()),
    executor_def=dg.in_process_executor,
    description="After an import or a sync: embed what it left pending, memory vectors, HNSW indexes, keyword "
                f"tables. Launched over every bucket (tags {RANGE_TAGS}).",
)


INGEST_KEYS = frozenset({inbox_import.key, source_sync.key})


def _ingested(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether a run materialised an import or a sync: their jobs, or any run that did (the asset page's
    Materialize runs them in Dagster's own asset job)."""
    if run.job_name in (inbox_import_job.name, source_sync_job.name):
        return True
    records = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
    return any(r.event_log_entry.dagster_event.asset_key in INGEST_KEYS for r in records)


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, request_job=ingest_indexing_job,
                      default_status=dg.DefaultSensorStatus.RUNNING,
                      description="When an import or a sync succeeded, embeds and indexes what it wrote.")
def index_after_ingest(context: dg.RunStatusSensorContext):
    if not _ingested(context.instance, context.dagster_run):
        return None  # not a SkipReason: any answer ends the tick, and each unrelated run then cost 30 s
    return dg.RunRequest(run_key=f"after-{context.dagster_run.run_id}", tags={**RANGE_TAGS, "trigger": "ingest"})


defs = dg.Definitions(
    assets=[inbox_import, source_sync],
    jobs=[inbox_import_job, source_sync_job, ingest_indexing_job],
    schedules=[source_sync_schedule],
    sensors=[inbox_sensor, index_after_ingest],
    resources=RESOURCES,
)
