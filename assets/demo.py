"""The demo corpus as an asset, so a newcomer can fill an empty database from the UI; `demo_job` is what
`memory-pipelines run` launches first."""

import dagster as dg

from memory_pipelines.pipelines.demo import load_demo

from .resources import RESOURCES, MemoryResource

DEMO_GROUP = "demo"


@dg.asset(group_name=DEMO_GROUP, kinds={"json", "postgres"},
          description="Insert the bundled demo corpus (idempotent: a second load inserts nothing).")
def demo_corpus(context: dg.AssetExecutionContext, memory: MemoryResource) -> dg.MaterializeResult:
    inserted = load_demo(memory.runtime.pool)
    context.log.info("demo corpus inserted: " + ", ".join(f"{k} {v}" for k, v in inserted.items()))
    return dg.MaterializeResult(metadata={f"inserted_{k}": v for k, v in inserted.items()})


demo_job = dg.define_asset_job(
    "demo_job", selection=dg.AssetSelection.assets(demo_corpus), executor_def=dg.in_process_executor,
    description="Load the bundled demo corpus (one step, in the run's own process).",
)

defs = dg.Definitions(assets=[demo_corpus], jobs=[demo_job], resources=RESOURCES)
