"""The `tuning` group: the slot the weekly tuning of half-lives and mode weights fills (next issue).

Today it holds one asset that summarises the retrieval log the tuner will learn from; the weekly
schedule in `automation.py` targets the whole group, so tuning assets added here run weekly with no
other change.
"""

import dagster as dg

from .resources import MemoryResource

TUNING_GROUP = "tuning"


@dg.asset(
    group_name=TUNING_GROUP,
    kinds={"postgres"},
    description="What the retrieval log holds for tuning: builds, candidates, injected and used items.",
)
def retrieval_log_summary(context: dg.AssetExecutionContext, memory: MemoryResource) -> dg.MaterializeResult:
    with memory.runtime.pool.connection() as conn:
        builds, last_week = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE created_at > now() - interval '7 days') FROM retrievals"
        ).fetchone()
        candidates, injected, used = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE injected), count(*) FILTER (WHERE used)"
            " FROM retrieval_candidates"
        ).fetchone()
        active = conn.execute("SELECT version FROM scoring_configs WHERE is_active").fetchone()
    context.log.info(f"retrieval log: {builds} builds ({last_week} in 7 days), {candidates} candidates, "
                     f"{injected} injected, {used} used")
    return dg.MaterializeResult(metadata={
        "builds": int(builds), "builds_last_7_days": int(last_week), "candidates": int(candidates),
        "injected": int(injected), "used": int(used), "active_config_version": active[0] if active else None,
    })
