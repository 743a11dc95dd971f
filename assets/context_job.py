"""The on-demand context job: build one memory context from the launchpad and show it on the run.

Launch `memory_context` from the UI with config such as

    ops:
      build_context:
        config: {query: "认证失败怎么处理", owner: team-alpha, mode: debug, budget: 800}

The op's output is the block and its items (the same dict the HTTP API returns); the block and a table
of the items (source, score and each factor of it) are attached to the run as Markdown metadata.
"""

import dagster as dg

from memory_pipelines.context.builder import DEFAULT_BUDGET, build_memory_context

from .resources import RESOURCES, MemoryResource


class ContextConfig(dg.Config):
    query: str
    """What the agent is about to do or was asked."""
    owner: str
    """Whose memory to read (every read is scoped to this owner)."""
    mode: str = "execute"
    """plan | execute | debug | chat: weights the sources (the context-builder spec: MODE_WEIGHT)."""
    budget: int = DEFAULT_BUDGET
    """Token budget of the block (50 to 32000)."""


def items_markdown(items: list[dict]) -> str:
    """The injected items as a Markdown table."""
    lines = ["| # | source | title | relevance | decay | mode weight | score | tokens |",
             "|---|---|---|---|---|---|---|---|"]
    for i, it in enumerate(items, 1):
        title = str(it["title"]).replace("|", "\\|")[:80]
        lines.append(f"| {i} | {it['source']} | {title} | {it['relevance']:.3f} | {it['decay']:.3f} | "
                     f"{it['mode_weight']:.2f} | {it['score']:.3f} | {it['tokens']} |")
    return "\n".join(lines)


@dg.op(out=dg.Out(dict, description="The context block and its items (ContextResult.as_dict())."),
       tags={"kind": "memory"})
def build_context(context: dg.OpExecutionContext, config: ContextConfig, memory: MemoryResource) -> dict:
    rt = memory.runtime
    result = build_memory_context(rt.pool, rt.embedder, config.owner, config.query, config.mode,
                                  config.budget)
    out = result.as_dict()
    if result.degraded:
        context.log.warning(f"degraded: {result.degraded}")
    context.log.info(f"{len(result.items)} items injected from {result.candidates_count} candidates, "
                     f"{result.token_used}/{result.token_budget} tokens")
    context.add_output_metadata({
        "context": dg.MetadataValue.md(f"**{config.owner}** · `{config.mode}` · {config.query}\n\n"
                                       + (result.block or "_(empty: nothing relevant)_")),
        "items": dg.MetadataValue.md(items_markdown(out["items"])),
        "token_used": result.token_used,
        "token_budget": result.token_budget,
        "candidates": result.candidates_count,
        "injected": len(result.items),
        "retrieval_id": str(result.retrieval_id),
        "degraded": result.degraded or "",
    })
    return out


@dg.job(description="Build one memory context on demand (launchpad config: query, owner, mode, budget).")
def memory_context():
    build_context()


defs = dg.Definitions(jobs=[memory_context], resources=RESOURCES)
