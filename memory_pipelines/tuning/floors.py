"""The floors, chosen on the training builds by replaying them (evaluate.per_build_metrics, the online scoring
functions) with the proposed half-lives and weights over a grid; the objective is mean nDCG@10 over builds with
a used item. A bootstrap over builds gives the interval of the chosen floor and of its gain over the active one;
the active floor stays unless that gain's interval is above 0.

- **decay floor**: over `FitOptions.decay_floor_grid`.
- **relevance floors**: each channel's over the active floor and a few raises of it (`relevance_floor_steps`);
  the replay removes the candidates whose logged channel scores (sql/009 `features`) fall below the tried
  floors. A lower floor than the active one is not tried: the candidates it would admit were removed online,
  never shown, so the log cannot say whether they would have been used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd

from ..context.scoring import ScoringConfig
from .estimates import FitOptions, ParamEstimate, percentile_ci
from .evaluate import PROFILE_SOURCES, per_build_metrics


def _grid_choice(
    cands: pd.DataFrame, grid: list[float], current: float, config_at: Callable[[float], ScoringConfig], opt: FitOptions
) -> tuple[str, float | None, tuple[float | None, float | None], int]:
    """The grid value whose config (`config_at(value)`) maximises the replayed builds' mean nDCG@10 over builds
    with a used item: (status, chosen value, bootstrap interval of the chosen value, builds with a used item).
    Status "fitted" only when the bootstrap interval of its gain over `current` is above 0, else "no_change";
    "thin" with fewer than `opt.min_floor_builds` such builds. Ties go to `current`."""
    per = {v: per_build_metrics(cands, config_at(v)) for v in grid}
    mask = per[grid[0]]["n_used"].to_numpy() > 0
    n_builds = int(mask.sum())
    if n_builds < opt.min_floor_builds:
        return "thin", None, (None, None), n_builds
    M = np.column_stack([per[v]["ndcg@10"].to_numpy(dtype=float)[mask] for v in grid])
    ja = grid.index(current)

    def best(means: np.ndarray) -> int:
        j = int(np.argmax(means))
        return ja if means[ja] >= means[j] - 1e-12 else j

    j = best(M.mean(axis=0))
    rng = np.random.default_rng(opt.seed + 1)
    chosen, gains = [], []
    for _ in range(opt.n_boot):
        mb = M[rng.integers(0, len(M), len(M))].mean(axis=0)
        chosen.append(grid[best(mb)])
        gains.append(float(mb[j] - mb[ja]))
    gain_ci = percentile_ci(gains)
    if j == ja or (gain_ci[0] is not None and gain_ci[0] <= 0):
        return "no_change", grid[j], percentile_ci(chosen), n_builds
    return "fitted", grid[j], percentile_ci(chosen), n_builds


def decay_floor_param(
    df: pd.DataFrame, proposed: ScoringConfig, active: ScoringConfig, signal: bool, opt: FitOptions
) -> ParamEstimate:
    """The decay floor that maximises the training builds' mean nDCG@10 when they are replayed with the
    proposed half-lives and weights; kept unless the bootstrap interval of its gain is above 0.

    ci_low / ci_high are the bootstrap interval of the chosen floor itself; n is the labelled candidates
    (the builds with a used item when there are too few of them: "thin")."""
    current = round(float(active.decay_floor), 6)
    n_all, n_used = len(df), int(df["used"].sum())
    if not signal:
        status, estimate, ci = "no_signal", None, (None, None)
    else:
        cands = df[~df["source"].isin(PROFILE_SOURCES)]
        grid = sorted({round(float(f), 6) for f in opt.decay_floor_grid if 0 <= f < 1} | {current})
        status, estimate, ci, n_builds = _grid_choice(
            cands, grid, current, lambda f: replace(proposed, decay_floor=f), opt
        )
        if status == "thin":
            n_all = n_builds
    value = estimate if status == "fitted" and estimate is not None else current
    return ParamEstimate(
        "decay_floor", "decay_floor", "*", None, current, estimate, value, ci[0], ci[1], n_all, n_used, status
    )


def relevance_floor_params(
    df: pd.DataFrame, proposed: ScoringConfig, active: ScoringConfig, signal: bool, opt: FitOptions
) -> list[ParamEstimate]:
    """Each channel's relevance floor, chosen like the decay floor (replayed nDCG@10, bootstrap, kept unless
    the gain's interval is above 0), one channel at a time with the other at its active value.

    Only floors at or above the active one are tried: the replay removes the candidates a higher floor
    would remove (`evaluate.per_build_metrics`, from each candidate's logged channel scores), but the
    candidates the active floor removed online were never shown, so nothing says whether they would have
    been used. Builds logged before sql/009 carry no channel scores and are kept whatever the floor."""
    n_all, n_used = len(df), int(df["used"].sum())
    cands = df[~df["source"].isin(PROFILE_SOURCES)]
    out = []
    for ch, v in sorted(active.relevance_floors.items()):
        current = round(float(v), 6)
        name = f"relevance_floor.{ch}"
        if not signal:
            status, estimate, ci, n = "no_signal", None, (None, None), n_all
        else:
            grid = sorted({round(current + step, 6) for step in opt.relevance_floor_steps if current + step <= 1})
            grid = sorted(set(grid) | {current})

            def at(f: float, ch: str = ch) -> ScoringConfig:
                return replace(proposed, relevance_floors={**proposed.relevance_floors, ch: f})

            status, estimate, ci, n_builds = _grid_choice(cands, grid, current, at, opt)
            n = n_builds if status == "thin" else n_all
        value = estimate if status == "fitted" and estimate is not None else current
        out.append(
            ParamEstimate(name, "relevance_floor", ch, None, current, estimate, value, ci[0], ci[1], n, n_used, status)
        )
    return out
