"""The learned ranker: P(used) from each candidate's logged features.

Every logged candidate carries its features (`context/features.py`, sql/009): the fused search score, each
channel's calibrated score and rank within its retrieval, the neighbour gain and whether query and item share
a language. The tuner fits `sklearn.linear_model.LogisticRegression` on the labelled training candidates
(standardised inputs, L2), with the used / unused labels as target. Recency and source stay outside the
model: decay, mode and source weights multiply the ranker's probability exactly as they multiply the fused
score (`ScoringConfig.relevance`), and the half-life / weight fit handles them.

Whether a ranker is worth proposing is decided on the training builds alone, by cross-fitting: builds are
split into `folds` groups, each group is scored by a ranker fitted on the others, and those out-of-fold
probabilities are replayed (`evaluate.per_build_metrics`, the online scoring) against the proposed config
without the new ranker (the active ranker, if any, or the fused score). The ranker is proposed only when the
mean nDCG@10 gain over builds with a used item has a bootstrap 95 % interval above 0; then the model fitted on
every training candidate goes into the proposed config's `params["ranker"]`. Publishing is the ordinary gate
(`publish.decide`: held-out improvement, no regression, bounds); a rollback to a version without a ranker
drops it (`ScoringConfig.from_row`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from ..context.features import DEFAULT_INPUTS, Ranker
from ..context.scoring import PROFILE_SOURCES, ScoringConfig
from .evaluate import feature_matrix, has_features, per_build_metrics
from .frames import FEATURES


@dataclass(frozen=True)
class RankerOptions:
    """What to fit and when a fitted ranker is proposed."""

    enabled: bool = True
    inputs: tuple[str, ...] = DEFAULT_INPUTS
    C: float = 1.0
    # "balanced" or None; balanced was never worse on LoCoMo (bench/ranker_locomo.py, docs/tuning.md).
    class_weight: str | None = "balanced"
    min_samples: int = 200  # labelled candidates with features
    min_positives: int = 20  # used ones (and as many unused)
    min_builds: int = 50  # training builds with a used item, for the cross-fitted check
    folds: int = 3
    n_boot: int = 200
    seed: int = 0


@dataclass
class RankerFit:
    """A fitted ranker (None when not proposed) and the report row's numbers."""

    ranker: Ranker | None
    status: str  # fitted | no_change | thin | disabled
    n: int
    n_used: int
    n_builds: int
    baseline_ndcg: float | None = None
    ndcg: float | None = None
    gain_ci: tuple[float | None, float | None] = (None, None)
    ndcg_ci: tuple[float | None, float | None] = (None, None)
    note: str | None = None


def training_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The labelled candidates a ranker learns from: with features, the profile aside."""
    if df.empty or FEATURES not in df:
        return df.iloc[:0]
    keep = has_features(df) & ~df["source"].isin(PROFILE_SOURCES).to_numpy()
    return df[keep].reset_index(drop=True)


def fit_model(X: np.ndarray, y: np.ndarray, inputs: tuple[str, ...], opt: RankerOptions,
              fitted_on: dict[str, Any] | None = None) -> Ranker:
    """Standardise, fit the logistic regression, return it as a `Ranker` (coefficients on the standardised
    inputs). A constant input gets scale 1 (and, regularised, a coefficient near 0)."""
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    model = LogisticRegression(C=opt.C, class_weight=opt.class_weight, solver="lbfgs", max_iter=500, tol=1e-6)
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit((X - mean) / scale, y)
    return Ranker(
        features=tuple(inputs),
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        coef=tuple(float(v) for v in model.coef_[0]),
        intercept=float(model.intercept_[0]),
        fitted_on=dict(fitted_on or {}),
    )


def cross_fitted(df: pd.DataFrame, X: np.ndarray, y: np.ndarray, opt: RankerOptions) -> np.ndarray:
    """Out-of-fold probabilities: each build's candidates scored by a ranker fitted on the other folds."""
    builds = df["retrieval_id"].to_numpy()
    ids = np.unique(builds)
    rng = np.random.default_rng(opt.seed)
    fold_of = dict(zip(ids[rng.permutation(len(ids))], np.arange(len(ids)) % opt.folds, strict=True))
    fold = np.array([fold_of[b] for b in builds])
    out = np.full(len(df), np.nan)
    for k in range(opt.folds):
        test = fold == k
        train = ~test
        if not test.any():
            continue
        if y[train].min() == y[train].max():  # one class only: no model, the fold keeps a constant score
            out[test] = float(y[train].mean())
            continue
        r = fit_model(X[train], y[train], opt.inputs, opt)
        z = r.intercept + ((X[test] - np.asarray(r.mean)) / np.asarray(r.scale)) @ np.asarray(r.coef)
        out[test] = 1.0 / (1.0 + np.exp(-z))
    return out


def _pct(values: np.ndarray) -> tuple[float | None, float | None]:
    if len(values) < 2:
        return None, None
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def fit_ranker(df: pd.DataFrame, proposed: ScoringConfig, opt: RankerOptions | None = None,
               *, population: str = "injected") -> RankerFit:
    """Fit a ranker on labelled training candidates `df` and decide (cross-fitted, training builds only)
    whether `proposed` should carry it; `proposed` is the config it would join (its relevance is the
    baseline: the active ranker, or the fused score)."""
    opt = opt or RankerOptions()
    rows = training_rows(df)
    n, n_used = len(rows), int(rows["used"].sum()) if len(rows) else 0
    n_builds = int(rows["retrieval_id"].nunique()) if n else 0
    if not opt.enabled:
        return RankerFit(None, "disabled", n, n_used, n_builds, note="ranker fitting disabled")
    if n < opt.min_samples or n_used < opt.min_positives or n - n_used < opt.min_positives:
        return RankerFit(
            None, "thin", n, n_used, n_builds,
            note=f"ranker: too few labelled candidates with features ({n}, {n_used} used; need "
                 f"{opt.min_samples} and {opt.min_positives} used and unused)",
        )
    X = feature_matrix(rows[FEATURES].to_numpy(), opt.inputs)
    y = rows["used"].to_numpy(dtype=int)
    oof = cross_fitted(rows, X, y, opt)
    base = per_build_metrics(rows, proposed)
    new = per_build_metrics(rows, proposed, relevance=oof)
    mask = base["n_used"].to_numpy() > 0
    if int(mask.sum()) < opt.min_builds:
        return RankerFit(
            None, "thin", n, n_used, n_builds,
            note=f"ranker: {int(mask.sum())} training builds with a used item (need {opt.min_builds})",
        )
    b = base["ndcg@10"].to_numpy(dtype=float)[mask]
    a = new["ndcg@10"].to_numpy(dtype=float)[mask]
    rng = np.random.default_rng(opt.seed + 1)
    idx = rng.integers(0, len(a), (opt.n_boot, len(a)))
    gain_ci = _pct((a - b)[idx].mean(axis=1))
    ndcg_ci = _pct(a[idx].mean(axis=1))
    gain = float((a - b).mean())
    fitted_on = {
        "builds": n_builds,
        "candidates": n,
        "used": n_used,
        "population": population,
        "C": opt.C,
        "class_weight": opt.class_weight,
        "cross_fitted_ndcg@10": {"baseline": float(b.mean()), "ranker": float(a.mean()), "gain": gain,
                                 "gain_ci": list(gain_ci), "builds_with_use": int(mask.sum()),
                                 "folds": opt.folds},
    }
    adopt = gain > 0 and gain_ci[0] is not None and gain_ci[0] > 0
    ranker = fit_model(X, y, opt.inputs, opt, fitted_on) if adopt else None
    note = (
        f"ranker: cross-fitted nDCG@10 on the training builds {b.mean():.3f} -> {a.mean():.3f} "
        f"(gain {gain:+.3f}, 95% CI [{_f(gain_ci[0])}, {_f(gain_ci[1])}]); "
        + ("proposed" if adopt else "not proposed (the gain's interval is not above 0)")
    )
    return RankerFit(ranker, "fitted" if adopt else "no_change", n, n_used, n_builds,
                     float(b.mean()), float(a.mean()), gain_ci, ndcg_ci, note)


def _f(v: float | None) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:+.3f}"
