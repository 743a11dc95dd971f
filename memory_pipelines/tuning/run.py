"""The tuning loop as one call: fit on the training builds, evaluate active vs proposed on held-out ones.

`tune_and_evaluate` is pure (frames in, a JSON-able dict out); `run_tuning` adds the database: load the
log, split it by time, tune, write the report and plots, and (optionally) publish through the gate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from psycopg_pool import ConnectionPool

from ..context.config import active_config
from ..context.scoring import ScoringConfig
from .evaluate import evaluate
from .fit import FitOptions, config_from_dict, config_to_dict, fit_parameters
from .frames import labelled, load_log, select, time_split


def tune_and_evaluate(
    candidates_df: pd.DataFrame,
    builds_df: pd.DataFrame,
    train_mask: np.ndarray | pd.Series,
    test_mask: np.ndarray | pd.Series,
    active: ScoringConfig,
    *,
    options: FitOptions | None = None,
    n_boot_eval: int = 1000,
) -> dict[str, Any]:
    """Fit on the builds under `train_mask`, evaluate on those under `test_mask` (masks align with builds_df).

    Returns {"active", "proposed" (config dicts), "fit" (parameters, CIs, sample sizes, notes),
    "evaluation" (active vs proposed, overall / by mode / randomised, deltas with CIs, caveats), "data"}.
    The two halves are `fit_on_train` and `evaluate_on_test` (the Dagster assets run them as two steps).
    """
    opt = options or FitOptions()
    fitted = fit_on_train(candidates_df, builds_df, train_mask, active, options=opt)
    return evaluate_on_test(
        fitted, candidates_df, builds_df, test_mask, n_boot_eval=n_boot_eval, seed=opt.seed
    )


def fit_on_train(
    candidates_df: pd.DataFrame,
    builds_df: pd.DataFrame,
    train_mask: np.ndarray | pd.Series,
    active: ScoringConfig,
    *,
    options: FitOptions | None = None,
) -> dict[str, Any]:
    """The fit half: {"active", "proposed", "fit", "data" (training side only)}."""
    opt = options or FitOptions()
    train_b, train_c = select(builds_df, candidates_df, train_mask)
    fit = fit_parameters(train_c, active, opt)
    data = {
        "train_builds": int(len(train_b)),
        "train_candidates": int(len(train_c)),
        "train_labelled": fit.n_candidates,
        "train_used": fit.n_used,
        "population": fit.population,
        "train_period": _period(train_b),
    }
    return {
        "active": config_to_dict(active),
        "proposed": config_to_dict(fit.config),
        "fit": fit.as_dict(),
        "data": data,
    }


def evaluate_on_test(
    fitted: dict[str, Any],
    candidates_df: pd.DataFrame,
    builds_df: pd.DataFrame,
    test_mask: np.ndarray | pd.Series,
    *,
    n_boot_eval: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """The evaluation half: replay the held-out builds with the active and the proposed config of `fitted`
    (a `fit_on_train` result); returns the full `tune_and_evaluate` result."""
    test_b, test_c = select(builds_df, candidates_df, test_mask)
    population = fitted["fit"]["population"]
    evaluation = evaluate(
        test_c,
        test_b,
        {"active": config_from_dict(fitted["active"]), "proposed": config_from_dict(fitted["proposed"])},
        population=population,
        n_boot=n_boot_eval,
        seed=seed,
    )
    d = fitted["data"]
    data = {
        "train_builds": d["train_builds"],
        "test_builds": int(len(test_b)),
        "train_candidates": d["train_candidates"],
        "test_candidates": int(len(test_c)),
        "train_labelled": d["train_labelled"],
        "train_used": d["train_used"],
        "population": population,
        "train_period": d["train_period"],
        "test_period": _period(test_b),
        "test_labelled": int(len(labelled(test_c, population))) if len(test_c) else 0,
        "randomized_builds": int(builds_df["randomized"].astype(bool).sum()) if len(builds_df) else 0,
    }
    return {**fitted, "evaluation": evaluation, "data": data}


def _period(builds: pd.DataFrame) -> list[str] | None:
    if builds.empty or "created_at" not in builds:
        return None
    return [str(builds["created_at"].min()), str(builds["created_at"].max())]


def run_tuning(
    pool: ConnectionPool,
    *,
    since_days: float | None = None,
    holdout_fraction: float = 0.3,
    plots_dir: str | Path | None = None,
    publish: bool = False,
    gate: Any = None,
    options: FitOptions | None = None,
    owners: list[str] | None = None,
) -> dict[str, Any]:
    """Load the log, tune and evaluate on a time split, write plots, and publish if asked and the gate passes.

    The result has a "decision" (always; `publish=False` reports what the gate would decide) and "plots".
    """
    from .publish import Gate, decide, publish_result
    from .report import hit_rate_table, write_plots
    from .rollup import rolled_up, with_rolled_up

    frames = load_log(pool, since_days=since_days, owners=owners)
    active = active_config(pool)
    if frames.n_builds:
        train, test = time_split(frames.builds, holdout_fraction)
    else:
        train = test = np.zeros(0, dtype=bool)
    result = tune_and_evaluate(frames.candidates, frames.builds, train, test, active, options=options)
    population = result["fit"]["population"]
    result["hit_rates"] = with_rolled_up(hit_rate_table(frames.candidates, population),
                                         rolled_up(pool, since_days=since_days, owners=owners),
                                         population).to_dict("records")
    result["plots"] = [str(p) for p in write_plots(frames.candidates, result, plots_dir)] if plots_dir else []
    gate = gate or Gate()
    result["decision"] = (
        publish_result(pool, result, gate) if publish else {**decide(result, gate), "dry_run": True}
    )
    return result
