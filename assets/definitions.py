"""The Dagster code location (workspace.yaml points here): `dagster dev -w workspace.yaml`.

The executor is the multiprocess one (steps in parallel processes on this machine) unless
MEMORY_PIPELINES_DAGSTER_EXECUTOR says `k8s` (dagster-k8s: one Kubernetes Job per step) or `celery`
(dagster-celery: steps as Celery tasks); the definitions are otherwise the same everywhere.
"""

import os

import dagster as dg

from memory_pipelines.infra.errors import ConfigError

from .automation import jobs, schedules, sensors
from .checks import all_checks
from .context_job import memory_context
from .demo import demo_corpus
from .embeddings import SOURCE_TABLES, embedding_assets, memory_vectors, vector_indexes
from .keywords import keyword_assets
from .resources import MemoryResource
from .tuning import tuning_assets, tuning_checks

all_assets = [
    *SOURCE_TABLES.values(),
    *embedding_assets.values(),
    memory_vectors,
    vector_indexes,
    *keyword_assets.values(),
    demo_corpus,
]
"""What `materialize_all` (`make run`) materialises: everything but the `tuning` group, which needs a
retrieval log with feedback and runs weekly (`weekly_tuning`) or from the UI."""


def select_executor(kind: str | None = None) -> dg.ExecutorDefinition:
    """multiprocess (default), k8s or celery; the latter two need their Dagster integration installed."""
    kind = (kind or os.environ.get("MEMORY_PIPELINES_DAGSTER_EXECUTOR") or "multiprocess").lower()
    if kind == "multiprocess":
        return dg.multiprocess_executor.configured({"max_concurrent": 4})
    try:
        if kind == "k8s":
            from dagster_k8s import k8s_job_executor

            return k8s_job_executor
        if kind == "celery":
            from dagster_celery import celery_executor

            return celery_executor
    except ImportError as exc:
        raise ConfigError(f"MEMORY_PIPELINES_DAGSTER_EXECUTOR={kind} needs its integration: {exc}. "
                          f"Fix: pip install dagster-{'k8s' if kind == 'k8s' else 'celery'}.") from exc
    raise ConfigError(f"MEMORY_PIPELINES_DAGSTER_EXECUTOR={kind!r} is not an executor. "
                      "Fix: use multiprocess, k8s or celery.")


defs = dg.Definitions(
    assets=[*all_assets, *tuning_assets],
    asset_checks=[*all_checks, *tuning_checks],
    jobs=[*jobs, memory_context],
    schedules=schedules,
    sensors=sensors,
    resources={"memory": MemoryResource()},
    executor=select_executor(),
)
