"""Run `demo_job` and `main_job`'s selection in this process with a resource of one's choosing (tests,
notebooks); `memory-pipelines run` launches the jobs themselves through Dagster instead
(`memory_pipelines.operations.main_job`). Both report in the same shape.

With DAGSTER_HOME set the runs are recorded in that instance; otherwise an ephemeral instance is used.
"""

import os
import time
from typing import Any

import dagster as dg

from memory_pipelines.operations.main_job import RANGE_TAGS, summarise_events, totals

from .automation import MAIN_SELECTION
from .definitions import all_assets
from .demo import demo_corpus
from .embeddings import embedding_checks
from .keywords import keyword_checks
from .resources import MemoryResource

__all__ = ["RANGE_TAGS", "materialize_all", "summarise"]


def _logging(progress: bool) -> dict:
    return {"loggers": {"console": {"config": {"log_level": "INFO" if progress else "ERROR"}}}}


def summarise(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    """Per asset the counts it reported, per check whether it passed."""
    summary = summarise_events([e.materialization for e in result.get_asset_materialization_events()],
                               result.get_asset_check_evaluations())
    return {"success": result.success, "run_id": result.run_id, **summary}


def materialize_all(progress: bool = True, resource: MemoryResource | None = None,
                    load_demo: bool = True) -> dict[str, Any]:
    """Load the demo corpus, then materialise what `main_job` does over every bucket in one run; returns
    what they reported. Never raises on a failed step or check: `success` and the checks say what happened.

    `progress` prints Dagster's INFO log (one line per batch) to stderr.
    """
    started = time.perf_counter()
    resources = {"memory": resource or MemoryResource()}
    instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else None
    out: dict[str, Any] = {}
    if load_demo:
        demo = dg.materialize([demo_corpus], resources=resources, instance=instance,
                              run_config=_logging(progress), raise_on_error=False)
        out["demo"] = summarise(demo)
    main = dg.materialize([*all_assets, *embedding_checks, *keyword_checks], selection=MAIN_SELECTION,
                          resources=resources, instance=instance, tags=RANGE_TAGS, run_config=_logging(progress),
                          raise_on_error=False)
    summary = summarise(main)
    out.update(summary)
    out.update(totals(summary))
    out["seconds"] = round(time.perf_counter() - started, 2)
    return out
