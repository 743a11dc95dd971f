"""Materialise the whole asset graph in-process (what `make run` does), on the embedded defaults.

Two runs: the demo corpus, then every other asset and check in one run over all buckets (a
single-run backfill: each embedding step makes one keyset pass over its table, so a bulk first load
may defer the HNSW index). With DAGSTER_HOME set the runs are recorded in that instance and show in
the UI; otherwise an ephemeral instance is used.
"""

import os
import time
from typing import Any

import dagster as dg

from .checks import all_checks
from .definitions import all_assets
from .demo import demo_corpus
from .embeddings import BUCKETS
from .resources import MemoryResource

RANGE_TAGS = {"dagster/asset_partition_range_start": "0",
              "dagster/asset_partition_range_end": str(BUCKETS - 1)}

_KEEP = ("rows_embedded", "rows_skipped", "rows_failed", "rows_pending_after", "rows_per_second", "model",
         "rows_indexed", "terms_written", "rows_removed", "memories_done", "memories_pending", "arbitrated",
         "index_rebuilt", "builds", "built_now")


def _value(v: Any) -> Any:
    return getattr(v, "value", v)


def _logging(progress: bool) -> dict:
    return {"loggers": {"console": {"config": {"log_level": "INFO" if progress else "ERROR"}}}}


def summarise(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    """Per asset the counts it reported, per check whether it passed."""
    assets: dict[str, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        assets[mat.asset_key.to_user_string()] = {k: _value(v) for k, v in mat.metadata.items() if k in _KEEP}
    checks: dict[str, bool] = {}
    for event in result.get_asset_check_evaluations():
        checks[f"{event.asset_key.to_user_string()}:{event.check_name}"] = event.passed
    return {"success": result.success, "run_id": result.run_id, "assets": assets, "checks": checks}


def materialize_all(progress: bool = True, resource: MemoryResource | None = None,
                    load_demo: bool = True) -> dict[str, Any]:
    """Load the demo corpus, then materialise every asset and run every check; returns what they reported.

    `progress` prints Dagster's INFO log (one line per batch) to stderr. Never raises on a failed step
    or check: `success` and the per-check results say what happened.
    """
    started = time.perf_counter()
    resources = {"memory": resource or MemoryResource()}
    instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else None
    out: dict[str, Any] = {}
    if load_demo:
        demo = dg.materialize([demo_corpus], resources=resources, instance=instance,
                              run_config=_logging(progress), raise_on_error=False)
        out["demo"] = summarise(demo)
    graph = [a for a in all_assets if a is not demo_corpus]
    main = dg.materialize([*graph, *all_checks], resources=resources, instance=instance, tags=RANGE_TAGS,
                          run_config=_logging(progress), raise_on_error=False)
    summary = summarise(main)
    out.update(summary)
    out["embedded"] = sum(int(a.get("rows_embedded", 0)) for a in summary["assets"].values())
    out["failed"] = sum(int(a.get("rows_failed", 0)) for a in summary["assets"].values())
    out["keyword_rows_indexed"] = sum(int(a.get("rows_indexed", 0)) for a in summary["assets"].values())
    out["checks_failed"] = sorted(k for k, ok in summary["checks"].items() if not ok)
    out["seconds"] = round(time.perf_counter() - started, 2)
    return out
