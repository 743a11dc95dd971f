"""The `tuning` group: offline tuning of half-lives and mode weights from the retrieval log (weekly).

    retrieval_log_frames ─┬─ hit_rate_report
                          └─ fitted_scoring_params ── scoring_evaluation
                                 ──[publish_gate, WARN]──> published_scoring_config

The logic lives in `memory_pipelines.tuning`; these assets only load, call and present. The gate is an
asset check on `scoring_evaluation` built from `publish.gate_checks` (enough data, a signal, something
re-fitted, a held-out improvement whose 95 % interval is above zero, no guard metric worse, every parameter
within bounds). A refusal is what the gate is for, not an error: the check fails with severity WARN, its
metadata says which checks refused and why, and the run succeeds. `published_scoring_config` re-applies the
same gate before writing anything: when the gate refuses it publishes nothing and is not materialised (an
optional output), so the active version stays and materialising it on its own cannot bypass the gate.

The tuning library (pandas, scikit-learn, matplotlib) is imported inside the assets, on first use: loading
the code location for another job (`main_job`, a sensor tick) does not pay seconds for it.

Plots are PNG files under $DAGSTER_HOME/storage/tuning_plots/<run id>/ (a temp folder without
DAGSTER_HOME), shown in the UI as Markdown images (base64 data URIs) with their paths beside them.

The group is not part of `main_job`; `make run` materialises it after replaying the demo corpus's simulated
agent sessions (`demo_sessions`), so a fresh demo database shows labelled candidates and hit-rate plots.
Otherwise it runs from the `weekly_tuning` schedule/job or the UI.
"""

import base64
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import numpy as np

from memory_pipelines.context.config import active_config

from .resources import RESOURCES, MemoryResource

if TYPE_CHECKING:
    from memory_pipelines.tuning.publish import Gate

TUNING_GROUP = "tuning"


class TuningLogConfig(dg.Config):
    since_days: float | None = None
    """Only builds of the last N days (unset: the whole log with feedback, as `memory-pipelines tune`)."""
    holdout_fraction: float = 0.3
    """Share of the newest builds held out for evaluation; the rest is fitted on."""
    owners: list[str] | None = None
    """Only these owners' builds (unset: every owner; the scoring config is global)."""


class FitConfig(dg.Config):
    bootstrap: int = 50
    """Bootstrap refits over builds for the parameters' 95 % intervals."""


class EvaluationConfig(dg.Config):
    bootstrap: int = 1000
    """Paired bootstrap resamples for the held-out deltas' 95 % intervals."""
    min_train_builds: int = 200
    min_train_labelled: int = 2000
    min_test_builds: int = 50
    """Held-out builds with at least one used item."""
    min_improvement: float = 0.01
    """Absolute gain on hit@5 or nDCG@10 the proposal must show (its 95 % interval above zero)."""
    max_regression: float = 0.02
    """No guard metric (hit@5, nDCG@10, MRR) may drop by more."""

    def gate(self) -> "Gate":
        from memory_pipelines.tuning.publish import Gate

        return Gate(
            min_train_builds=self.min_train_builds,
            min_train_labelled=self.min_train_labelled,
            min_test_builds=self.min_test_builds,
            min_improvement=self.min_improvement,
            max_regression=self.max_regression,
        )


# ---------------------------------------------------------------- presentation helpers


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table (no tabulate dependency)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def plots_dir(context: dg.AssetExecutionContext) -> Path:
    home = os.environ.get("DAGSTER_HOME")
    base = Path(home) / "storage" / "tuning_plots" if home else Path(tempfile.gettempdir()) / "mp_tuning"
    return base / context.run.run_id


def image_metadata(paths: list[Path]) -> dict[str, dg.MetadataValue]:
    """Each PNG as a Markdown image (a base64 data URI the UI renders) and as a path."""
    out: dict[str, dg.MetadataValue] = {}
    for p in paths:
        data = base64.b64encode(p.read_bytes()).decode()
        out[f"plot_{p.stem}"] = dg.MetadataValue.md(f"![{p.stem}](data:image/png;base64,{data})")
        out[f"plot_{p.stem}_path"] = dg.MetadataValue.path(str(p))
    return out


# ---------------------------------------------------------------- assets


@dg.asset(
    group_name=TUNING_GROUP,
    kinds={"postgres", "pandas"},
    description="The retrieval log (builds with feedback and every candidate they scored) as pandas frames, "
    "with the time split: the newest `holdout_fraction` of builds is held out.",
)
def retrieval_log_frames(
    context: dg.AssetExecutionContext, config: TuningLogConfig, memory: MemoryResource
) -> dg.Output[dict[str, Any]]:
    from memory_pipelines.tuning.frames import load_log, resolved_population, time_split

    frames = load_log(memory.runtime.pool, since_days=config.since_days, owners=config.owners)
    b, c = frames.builds, frames.candidates
    if frames.n_builds:
        train, test = time_split(b, config.holdout_fraction)
    else:
        if not 0 < config.holdout_fraction < 1:
            time_split(b, config.holdout_fraction)  # raises the ValidationError
        train = test = np.zeros(0, dtype=bool)
    injected, used = int(c["injected"].sum()), int(c["used"].sum())
    with_use = c.loc[c["used"], "retrieval_id"].nunique() if len(c) else 0
    first = str(b["created_at"].min()) if len(b) else None
    last = str(b["created_at"].max()) if len(b) else None
    context.log.info(f"retrieval log: {len(b)} builds with feedback, {len(c)} candidates, {used} used")
    metadata = {
        "builds": len(b),
        "candidates": len(c),
        "injected": injected,
        "used": used,
        "used_share_of_injected": round(int((c["used"] & c["injected"]).sum()) / injected, 4)
        if injected
        else None,
        "builds_with_a_used_item": int(with_use),
        "labels": resolved_population(c) if len(c) else "none",
        "first_build": first,
        "last_build": last,
        "train_builds": int(train.sum()),
        "held_out_builds": int(test.sum()),
        "owners": int(b["owner_id"].nunique()) if len(b) else 0,
        "builds_by_mode": dg.MetadataValue.json(_counts(b["mode"])),
        "randomized_builds": int(b["randomized"].sum()) if len(b) else 0,
        "since_days": config.since_days,
        "holdout_fraction": config.holdout_fraction,
    }
    from memory_pipelines.tuning.rollup import rolled_up

    # the counts of candidates retention pruned (rolled up per day), for the hit-rate report
    pruned = rolled_up(memory.runtime.pool, since_days=config.since_days, owners=config.owners)
    value = {"builds": b, "candidates": c, "train": train, "test": test, "rolled_up": pruned}
    return dg.Output(value, metadata=metadata)


@dg.asset(
    group_name=TUNING_GROUP,
    kinds={"pandas", "matplotlib"},
    description="Hit rate (used / labelled) by source × mode × age bucket with Wilson 95 % intervals, "
    "as a table and PNG plots.",
)
def hit_rate_report(context: dg.AssetExecutionContext, retrieval_log_frames: dict[str, Any]) -> dg.Output:
    from memory_pipelines.tuning.frames import resolved_population
    from memory_pipelines.tuning.report import hit_rate_table, write_plots
    from memory_pipelines.tuning.rollup import with_rolled_up

    cands = retrieval_log_frames["candidates"]
    table = with_rolled_up(hit_rate_table(cands), retrieval_log_frames.get("rolled_up", []),
                           resolved_population(cands) if len(cands) else "auto")
    shown = table[table["labelled"] > 0]
    rows = [
        [r.source, r.mode, r.age_bucket, r.candidates, r.injected, r.labelled, r.used, r.hit_rate,
         f"[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]"]
        for r in shown.itertuples(index=False)
    ]
    header = ["source", "mode", "age", "candidates", "injected", "labelled", "used", "hit rate", "95% CI"]
    md = md_table(header, rows) if rows else "_No labelled candidates in the log yet: nothing to report._"
    paths = write_plots(cands, None, plots_dir(context)) if len(cands) else []
    return dg.Output(
        table,
        metadata={
            "hit_rates": dg.MetadataValue.md(md),
            "cells": len(shown),
            "labels": resolved_population(cands) if len(cands) else "none",
            **image_metadata(paths),
        },
    )


@dg.asset(
    group_name=TUNING_GROUP,
    kinds={"pandas", "scikitlearn"},  # the log-linear fit is scikit-learn's LogisticRegression
    description="Half-lives and mode weights fitted on the training builds (log-linear logistic fit), with "
    "bootstrap 95 % intervals and sample sizes; thin parameters keep their active value. Row `ranker`: the "
    "learned ranker over the logged candidate features, proposed only when its cross-fitted nDCG@10 gain "
    "on the training builds is above 0.",
)
def fitted_scoring_params(
    context: dg.AssetExecutionContext,
    config: FitConfig,
    memory: MemoryResource,
    retrieval_log_frames: dict[str, Any],
) -> dg.Output[dict[str, Any]]:
    from memory_pipelines.tuning.fit import FitOptions
    from memory_pipelines.tuning.publish import jsonable
    from memory_pipelines.tuning.run import fit_on_train

    active = active_config(memory.runtime.pool)
    f = retrieval_log_frames
    fitted = fit_on_train(
        f["candidates"], f["builds"], f["train"], active, options=FitOptions(n_boot=config.bootstrap)
    )
    fit = fitted["fit"]
    rows = [
        [p["name"], p["active"], p["estimate"], p["value"],
         f"[{_fmt(p['ci_low'], 2)}, {_fmt(p['ci_high'], 2)}]" if p["ci_low"] is not None else "",
         p["n"], p["n_used"], p["status"]]
        for p in fit["params"]
    ]
    header = ["parameter", "active", "fitted", "proposed", "95% CI", "n", "used", "status"]
    notes = "\n".join(f"- {n}" for n in fit["notes"]) or "- none"
    refit = sum(p["status"] in ("fitted", "clamped") for p in fit["params"])
    context.log.info(f"fit: signal {fit['signal']}, {refit} of {len(fit['params'])} parameters re-fitted")
    return dg.Output(
        fitted,
        metadata={
            "parameters": dg.MetadataValue.md(md_table(header, rows) if rows else "_nothing fitted_"),
            "notes": dg.MetadataValue.md(notes),
            "signal": bool(fit["signal"]),
            "relevance_coef": _num(fit["relevance_coef"]),
            "relevance_z": _num(fit["relevance_z"]),
            "parameters_refitted": refit,
            "train_builds": fitted["data"]["train_builds"],
            "train_labelled": fitted["data"]["train_labelled"],
            "train_used": fitted["data"]["train_used"],
            "active_version": fitted["active"]["version"],
            "proposed": dg.MetadataValue.json(jsonable(fitted["proposed"])),
        },
    )


@dg.asset(
    group_name=TUNING_GROUP,
    kinds={"pandas", "matplotlib"},
    description="Offline replay of the held-out builds with the active and the proposed config: hit@1/3/5, "
    "nDCG@10, MRR, tokens per hit, overall and by mode, paired-bootstrap deltas, and the caveats.",
)
def scoring_evaluation(
    context: dg.AssetExecutionContext,
    config: EvaluationConfig,
    retrieval_log_frames: dict[str, Any],
    fitted_scoring_params: dict[str, Any],
) -> dg.Output[dict[str, Any]]:
    from memory_pipelines.tuning.evaluate import METRICS
    from memory_pipelines.tuning.publish import decide
    from memory_pipelines.tuning.report import write_plots
    from memory_pipelines.tuning.run import evaluate_on_test

    f = retrieval_log_frames
    result = evaluate_on_test(
        fitted_scoring_params, f["candidates"], f["builds"], f["test"], n_boot_eval=config.bootstrap
    )
    gate = config.gate()
    result["gate"] = asdict(gate)
    result["decision"] = {**decide(result, gate), "dry_run": True}
    ev = result["evaluation"]
    act = ev["configs"].get("active", {}).get("overall", {})
    pro = ev["configs"].get("proposed", {}).get("overall", {})
    deltas = ev.get("deltas", {}).get("proposed", {})
    overall = []
    for m in METRICS:
        d = deltas.get(m) or {}
        ci = f"[{_fmt(d.get('ci_low'))}, {_fmt(d.get('ci_high'))}]" if d.get("ci_low") is not None else ""
        delta = pro[m] - act[m] if pro.get(m) is not None and act.get(m) is not None else None
        overall.append([m, act.get(m), pro.get(m), delta, ci])
    by_mode = []
    for mode, a in ev["configs"].get("active", {}).get("by_mode", {}).items():
        p = ev["configs"]["proposed"]["by_mode"].get(mode, {})
        cells = [f"{_fmt(a.get(m))} → {_fmt(p.get(m))}" for m in METRICS]
        by_mode.append([mode, a.get("n_with_use", 0), *cells])
    paths = write_plots(f["candidates"].iloc[:0], result, plots_dir(context))
    checks = "\n".join(f"- {'✅' if c['passed'] else '❌'} **{c['name']}**: {c['detail']}"
                       for c in result["decision"]["checks"])
    return dg.Output(
        result,
        metadata={
            "overall": dg.MetadataValue.md(
                md_table(["metric", "active", "proposed", "Δ", "95% CI of Δ"], overall)
                + f"\n\nheld-out builds with a used item: {act.get('n_with_use', 0)} "
                f"of {act.get('n_builds', 0)}"
            ),
            "by_mode": dg.MetadataValue.md(
                md_table(["mode", "n", *METRICS], by_mode) if by_mode else "_no held-out builds_"
            ),
            "gate_preview": dg.MetadataValue.md(checks),
            "caveats": dg.MetadataValue.md(ev["caveats"]),
            "held_out_builds": result["data"]["test_builds"],
            "held_out_builds_with_use": int(act.get("n_with_use", 0)),
            "hit@5_active": _num(act.get("hit@5")),
            "hit@5_proposed": _num(pro.get("hit@5")),
            "ndcg@10_active": _num(act.get("ndcg@10")),
            "ndcg@10_proposed": _num(pro.get("ndcg@10")),
            "gate_would_pass": bool(result["decision"]["publish"]),
            **image_metadata(paths),
        },
    )


@dg.asset_check(
    asset=scoring_evaluation,
    name="publish_gate",
    description="Enough data, a signal, something re-fitted, a held-out improvement (95 % interval above 0), "
    "no guard metric worse, every parameter within bounds. A refusal is a WARN with the reasons in the "
    "metadata; `published_scoring_config` then publishes nothing.",
)
def publish_gate(scoring_evaluation: dict[str, Any]) -> dg.AssetCheckResult:
    from memory_pipelines.tuning.publish import Gate, gate_checks

    checks = gate_checks(scoring_evaluation, Gate(**scoring_evaluation["gate"]))
    failed = [c for c in checks if not c["passed"]]
    return dg.AssetCheckResult(
        passed=not failed,
        severity=dg.AssetCheckSeverity.WARN,
        description=("not published: " + "; ".join(f"{c['name']}: {c['detail']}" for c in failed)) if failed
        else "every gate check passed",
        metadata={
            **{c["name"]: dg.MetadataValue.text(("ok: " if c["passed"] else "FAIL: ") + c["detail"])
               for c in checks},
            "refused_by": dg.MetadataValue.json([c["name"] for c in failed]),
            "reasons": dg.MetadataValue.md("\n".join(f"- **{c['name']}**: {c['detail']}" for c in failed)
                                           or "_none: the gate passed_"),
        },
    )


@dg.asset(
    group_name=TUNING_GROUP,
    kinds={"postgres"},
    description="The proposed config stored as a new scoring config version (with what it was fitted on and "
    "its evaluation) and activated; the online builder uses it from its next build. Published only when "
    "the gate (`scoring_evaluation:publish_gate`) passes; otherwise not materialised, the run still succeeds. "
    "Rollback: `memory-pipelines scoring activate N`.",
    output_required=False,
)
def published_scoring_config(
    context: dg.AssetExecutionContext, memory: MemoryResource, scoring_evaluation: dict[str, Any]
) -> Iterator[dg.Output]:
    from memory_pipelines.tuning.publish import Gate, jsonable, publish_result

    pool = memory.runtime.pool
    result = scoring_evaluation
    base = result["active"]["version"]
    current = active_config(pool).version
    if current != base:
        raise dg.Failure(
            f"the active scoring config changed since the fit (fitted against version {base}, now "
            f"{current}); nothing published. Fix: re-run the tuning job."
        )
    note = f"dagster run {context.run.run_id[:8]}: tuned from {result['data']['train_builds']} builds"
    decision = publish_result(pool, result, Gate(**result["gate"]), note=note)
    if not decision["publish"]:  # the gate refused: a WARN on publish_gate, not a failed run
        context.log.warning("the publish gate refused; nothing published: " + "; ".join(decision["reasons"]))
        return
    version = decision["version"]
    context.log.info(f"published scoring config version {version} (was {base}); it is now active")
    ev = result["evaluation"]["configs"]
    yield dg.Output(
        None,
        metadata={
            "version": version,
            "previous_version": base,
            "rollback": f"memory-pipelines scoring activate {base}",
            "hit@5_before": _num(ev["active"]["overall"].get("hit@5")),
            "hit@5_after": _num(ev["proposed"]["overall"].get("hit@5")),
            "config": dg.MetadataValue.json(jsonable({**result["proposed"], "version": version})),
        }
    )


def _counts(col: Any) -> dict[str, int]:
    return {str(k): int(n) for k, n in col.value_counts().items()}


def _num(v: Any) -> float | None:
    return float(v) if v is not None and isinstance(v, int | float) and math.isfinite(v) else None


tuning_assets = [
    retrieval_log_frames,
    hit_rate_report,
    fitted_scoring_params,
    scoring_evaluation,
    published_scoring_config,
]
tuning_checks = [publish_gate]


tuning_job = dg.define_asset_job(
    "weekly_tuning", selection=dg.AssetSelection.groups(TUNING_GROUP),
    description="Tuning of half-lives and mode weights from the retrieval log: fit, held-out replay, and "
                "publishing gated by the same checks as `publish_gate` (a WARN check, not blocking).",
)

weekly_tuning = dg.ScheduleDefinition(
    name="weekly_tuning", job=tuning_job, cron_schedule="0 4 * * 1", execution_timezone="UTC",
    description="Weekly (Mondays 04:00 UTC): tune on the retrieval log; publish only if the gate passes.",
)

defs = dg.Definitions(assets=tuning_assets, asset_checks=tuning_checks, jobs=[tuning_job],
                      schedules=[weekly_tuning], resources=RESOURCES)
