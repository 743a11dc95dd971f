"""The on-demand context job: build one memory context from the launchpad and show it on the run.

Jobs → `memory_context` → Launchpad opens with a default config that runs as it stands (a question the
demo corpus answers, for its owner `team-alpha`); change any field:

    query: "认证失败怎么处理? auth error after the token expired"
    owner: team-alpha
    mode: debug          # plan | execute | debug | chat
    budget: 800          # tokens, 50 to 32000

The job's config is this flat `ContextConfig` (a job-level config mapping onto the `build_context` op), so
it is checked before any run exists: `mode` is an enum of the schema (the launchpad marks a typo as you
type), and the whole config is validated by pydantic (`budget` within MIN_BUDGET..MAX_BUDGET, a non-empty
query and owner, no whitespace around the owner) when the run config is resolved, so a bad value is refused
at launch, not by the op.
The `memory` resource follows the environment, as in every other job.

The op's output is the block and its items (the same dict the HTTP API returns); the block and a table
of the items (source, score and each factor of it) are attached to the run as Markdown metadata.
"""

from enum import Enum
from typing import Any

import dagster as dg
from pydantic import Field, ValidationError, field_validator

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.surfaces.schema import not_blank, owner_id
from memory_pipelines.vocabulary import (
    CONTEXT_MODES,
    DEFAULT_BUDGET,
    MAX_BUDGET,
    MAX_NAME,
    MAX_QUERY,
    MIN_BUDGET,
)

from .resources import RESOURCES, MemoryResource

ContextMode = Enum("ContextMode", {m: m for m in CONTEXT_MODES})
"""vocabulary.CONTEXT_MODES as an enum: the launchpad offers these values and rejects any other."""

DEFAULT_QUERY = "认证失败怎么处理? auth error after the token expired"
DEFAULT_OWNER = "team-alpha"


class ContextConfig(dg.Config):
    """One context build; every field has a default, so the launchpad's default config runs."""

    query: str = Field(default=DEFAULT_QUERY, min_length=1, max_length=MAX_QUERY,
                       description="What the agent is about to do or was asked.")
    owner: str = Field(default=DEFAULT_OWNER, min_length=1, max_length=MAX_NAME,
                       description="Whose memory to read (every read is scoped to this owner; the demo "
                                   "corpus has team-alpha, team-beta and solo-gamma).")
    mode: ContextMode = Field(default=ContextMode["execute"],
                              description=f"{' | '.join(CONTEXT_MODES)}: weights the sources "
                                          "(the context-builder spec: MODE_WEIGHT).")
    budget: int = Field(default=DEFAULT_BUDGET, ge=MIN_BUDGET, le=MAX_BUDGET,
                        description=f"Token budget of the block ({MIN_BUDGET} to {MAX_BUDGET}).")

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        """Whitespace alone is refused at launch, as HTTP, MCP and the CLI refuse it."""
        return not_blank(value)

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str) -> str:
        """A blank or padded owner (which would read nobody's rows) is refused at launch, as by the CLI."""
        return owner_id(value)


def validated(values: dict[str, Any]) -> ContextConfig:
    """The launchpad's values as a ContextConfig, or a config error naming each bad field."""
    try:
        return ContextConfig(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'config'}: "
                             f"{e['msg'].removeprefix('Value error, ')}"
                             for e in exc.errors())
        raise dg.DagsterInvalidConfigError(f"Invalid memory_context config: {problems}", [], values) from exc


@dg.config_mapping(config_schema=ContextConfig.to_config_schema())
def context_config(values: dict[str, Any]) -> dict[str, Any]:
    """The flat launchpad config, validated, as the `build_context` op's config."""
    return dg.RunConfig(ops={"build_context": validated(values)}).to_config_dict()


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
    mode = config.mode.value
    result = build_memory_context(rt.pool, rt.embedder, config.owner, config.query, mode, config.budget)
    out = result.as_dict()
    if result.degraded:
        context.log.warning(f"degraded: {result.degraded}")
    context.log.info(f"{len(result.items)} items injected from {result.candidates_count} candidates, "
                     f"{result.token_used}/{result.token_budget} tokens")
    context.add_output_metadata({
        "context": dg.MetadataValue.md(f"**{config.owner}** · `{mode}` · {config.query}\n\n"
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


@dg.job(config=context_config,
        description="Build one memory context on demand (launchpad config: query, owner, mode, budget; the "
                    "default config runs on the demo corpus).")
def memory_context():
    build_context()


defs = dg.Definitions(jobs=[memory_context], resources=RESOURCES)
