"""The demo corpus as an asset, so a newcomer can fill an empty database from the UI."""

import dagster as dg

from memory_pipelines.pipelines.demo import load_demo

from .resources import MemoryResource


@dg.asset(group_name="demo", kinds={"postgres"},
          description="Insert the bundled demo corpus (idempotent: a second load inserts nothing).")
def demo_corpus(context: dg.AssetExecutionContext, memory: MemoryResource) -> dg.MaterializeResult:
    inserted = load_demo(memory.runtime.pool)
    context.log.info("demo corpus inserted: " + ", ".join(f"{k} {v}" for k, v in inserted.items()))
    return dg.MaterializeResult(metadata={f"inserted_{k}": v for k, v in inserted.items()})
