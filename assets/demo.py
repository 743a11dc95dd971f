"""The demo corpus as assets, so a newcomer can fill an empty database from the UI.

- `demo_corpus`: the bundled rows (`demo_job`, what `memory-pipelines run` launches first);
- `demo_sessions`: six weeks of simulated agent sessions replayed through the real code path (context build as
  of the session's moment → the agent's output → implicit feedback), after `main_job` embedded and indexed the
  corpus. `demo_sessions_job` (launched by `memory-pipelines run` after `main_job`) materialises it and then
  the tuning group up to the evaluation and its gate, so a fresh demo shows labelled candidates, hit-rate plots
  and the gate's verdict; publishing stays a deliberate act (`weekly_tuning`, the UI, `tune --publish`).
"""

import dagster as dg

from memory_pipelines.demo.corpus import load_demo
from memory_pipelines.demo.sessions import load_demo_sessions

from .embeddings import memory_vectors, vector_indexes
from .keywords import keyword_assets
from .resources import RESOURCES, MemoryResource
from .tuning import fitted_scoring_params, hit_rate_report, retrieval_log_frames, scoring_evaluation

DEMO_GROUP = "demo"


@dg.asset(group_name=DEMO_GROUP, kinds={"json", "postgres"},
          description="Insert the bundled demo corpus (idempotent: a second load inserts nothing).")
def demo_corpus(context: dg.AssetExecutionContext, memory: MemoryResource) -> dg.MaterializeResult:
    inserted = load_demo(memory.runtime.pool)
    context.log.info("demo corpus inserted: " + ", ".join(f"{k} {v}" for k, v in inserted.items()))
    return dg.MaterializeResult(metadata={f"inserted_{k}": v for k, v in inserted.items()})


@dg.asset(group_name=DEMO_GROUP, kinds={"postgres"},
          deps=[demo_corpus, memory_vectors, vector_indexes, *keyword_assets.values()],
          description="The demo's retrieval log: simulated agent sessions over six weeks (build → output → "
                      "implicit feedback), replayed idempotently (a second run adds nothing).")
def demo_sessions(context: dg.AssetExecutionContext, memory: MemoryResource) -> dg.MaterializeResult:
    rt = memory.runtime
    counts = load_demo_sessions(rt.pool, rt.embedder)
    if counts["skipped_reason"]:
        context.log.warning(f"demo sessions not replayed: {counts['skipped_reason']}")
    context.log.info("demo sessions: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    with rt.pool.connection() as conn:
        builds, labelled, used = conn.execute(
            "SELECT count(DISTINCT r.id), count(c.*) FILTER (WHERE c.injected),"
            " count(c.*) FILTER (WHERE c.used AND c.used_by = 'implicit')"
            " FROM retrievals r LEFT JOIN retrieval_candidates c ON c.retrieval_id = r.id"
            " WHERE r.implicit_at IS NOT NULL"
        ).fetchone()
    return dg.MaterializeResult(metadata={
        "sessions": counts["sessions"], "sessions_built": counts["built"], "sessions_fed_back": counts["fed_back"],
        "sessions_skipped": counts["skipped"], "builds_with_implicit_feedback": int(builds),
        "labelled_candidates": int(labelled), "used_implicit": int(used),
        "used_share": round(used / labelled, 4) if labelled else None,
    })


demo_job = dg.define_asset_job(
    "demo_job", selection=dg.AssetSelection.assets(demo_corpus), executor_def=dg.in_process_executor,
    description="Load the bundled demo corpus (one step, in the run's own process).",
)

demo_sessions_job = dg.define_asset_job(
    "demo_sessions_job",
    selection=dg.AssetSelection.assets(demo_sessions, retrieval_log_frames, hit_rate_report,
                                       fitted_scoring_params, scoring_evaluation),
    executor_def=dg.in_process_executor,
    config={"ops": {"fitted_scoring_params": {"config": {"bootstrap": 20}},
                    "scoring_evaluation": {"config": {"bootstrap": 300}}}},
    description="Replay the demo's simulated agent sessions into the retrieval log, then the tuning group up to "
                "the evaluation and its publish gate (nothing is published; fewer bootstrap resamples than "
                "`weekly_tuning`, to keep `make run` short). Run after `main_job`.",
)

# demo_sessions_job selects tuning assets too, so it joins the code location in definitions.py, where they are.
defs = dg.Definitions(assets=[demo_corpus, demo_sessions], jobs=[demo_job], resources=RESOURCES)
