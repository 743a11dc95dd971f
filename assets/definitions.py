"""The Dagster code location (workspace.yaml points here): `dagster dev -w workspace.yaml`.

Each domain module exposes its own `defs` (assets, checks, jobs, schedules, sensors, bound to the one
`memory` resource); this module merges them and adds the executor. Installed, the package is
`memory_pipelines_dagster`; in a checkout it is `assets`; every import inside it is relative.

The executor is the multiprocess one (steps in parallel processes on this machine) unless
MEMORY_PIPELINES_DAGSTER_EXECUTOR says `k8s` (dagster-k8s: one Kubernetes Job per step) or `celery`
(dagster-celery: steps as Celery tasks); `main_job` and `demo_job` run in their run's own process.
"""

import os

import dagster as dg

from memory_pipelines.infra.errors import ConfigError

from . import automation, context_job, demo, embeddings, ingest, keywords, retention, tuning
from .embeddings import SOURCE_TABLES, embedding_assets, memory_vectors, vector_indexes
from .keywords import keyword_assets

all_assets = [
    *SOURCE_TABLES.values(),
    *embedding_assets.values(),
    memory_vectors,
    vector_indexes,
    *keyword_assets.values(),
    demo.demo_corpus,
    demo.demo_sessions,
]
"""Every asset but the `tuning` group, which needs a retrieval log with feedback and runs weekly
(`weekly_tuning`) or from the UI. `main_job` materialises these, the demo corpus apart (`demo_job`)."""


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


defs = dg.Definitions.merge(
    embeddings.defs,
    keywords.defs,
    tuning.defs,
    retention.defs,
    demo.defs,
    context_job.defs,
    automation.defs,
    ingest.defs,
    dg.Definitions(jobs=[demo.demo_sessions_job], executor=select_executor()),
)
