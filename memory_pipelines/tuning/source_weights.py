"""Source weights: a second fit of the core model (fit.py) in which the active mode weights are an offset
(feature 0 is log relevance + log mode weight, so its coefficient b is the score's scale) and each source gets
one indicator shared by every mode (plus one per mode, which ranking cannot see):
log source_weight_s = d_s / b, normalised so the geometric mean over the fitted sources equals the active one.

When the active mode weights are so far off that b is not positive in this refit, the source weights are
"unidentified" and keep their active values. A source needs enough labelled candidates (`estimates.enough`);
the weight is clamped to `source_weight_bounds` and keeps its active value when its bootstrap interval covers it
("no_change"). A source too thin for that is tested instead (sparse.py). Where a mode weight is re-fitted it
carries the whole fitted factor of its cell (the proposed mode weight is the fitted cell weight / the proposed
source weight), so the source weight matters where a cell is thin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..context.scoring import ScoringConfig
from ..vocabulary import CONTEXT_MODES as MODES
from .estimates import FitOptions, ParamEstimate, clip, coefficients, enough, finite, logistic_model, percentile_ci
from .evaluate import PROFILE_SOURCES
from .sparse import sparse_sources


@dataclass
class _SourceLayout:
    """Columns of the source-weight design: log relevance + log mode weight, ages, sources, modes."""

    decay_sources: list[str]
    age_scale: dict[str, float]
    sources: list[str]
    modes: list[str]
    free: list[str]

    @property
    def n_features(self) -> int:
        return 1 + len(self.decay_sources) + len(self.sources) + len(self.modes)

    @property
    def source_columns(self) -> dict[str, int]:
        """Each source's indicator column, in source order."""
        return {s: 1 + len(self.decay_sources) + j for j, s in enumerate(self.sources)}


def _source_counts(df: pd.DataFrame) -> dict[str, tuple[int, int]]:
    g = df.groupby("source")["used"].agg(["size", "sum"])
    return {s: (int(r["size"]), int(r["sum"])) for s, r in g.iterrows()}


def _source_layout(
    df: pd.DataFrame, decay_sources: list[str], age_scale: dict[str, float], opt: FitOptions
) -> _SourceLayout:
    counts = _source_counts(df)
    sources = sorted(counts)
    free = [s for s in sources if s not in PROFILE_SOURCES and enough(counts[s], opt)]
    modes = sorted(set(df["mode"]), key=lambda m: MODES.index(m) if m in MODES else 99)
    return _SourceLayout(decay_sources, age_scale, sources, modes, free if len(free) >= 2 else [])


def _source_design(
    df: pd.DataFrame, sl: _SourceLayout, active: ScoringConfig, min_relevance: float
) -> np.ndarray:
    n = len(df)
    X = np.zeros((n, sl.n_features))
    src = df["source"].to_numpy()
    mode = df["mode"].to_numpy()
    mw = {
        (s, m): max(float(active.mode_weights.get(s, {}).get(m, 1.0)), 1e-9)
        for s, m in set(zip(src, mode, strict=True))
    }
    offset = np.log([mw[(s, m)] for s, m in zip(src, mode, strict=True)]) if n else np.zeros(0)
    X[:, 0] = np.log(np.maximum(df["relevance"].to_numpy(dtype=float), min_relevance)) + offset
    age = np.nan_to_num(df["age_days"].to_numpy(dtype=float), nan=0.0)
    for j, s in enumerate(sl.decay_sources, start=1):
        X[:, j] = np.where(src == s, age / sl.age_scale[s], 0.0)
    off = 1 + len(sl.decay_sources)
    for j, s in enumerate(sl.sources):
        X[:, off + j] = src == s
    off += len(sl.sources)
    for j, m in enumerate(sl.modes):
        X[:, off + j] = mode == m
    return X


def _derive_sources(coef: np.ndarray, sl: _SourceLayout, active: ScoringConfig) -> dict[str, float]:
    """Normalised log source weight per free source (geometric mean = the active one's)."""
    b = float(coef[0])
    if not sl.free or b <= 0:
        return {}
    off = 1 + len(sl.decay_sources)
    raw = {s: coef[off + j] / b for j, s in enumerate(sl.sources)}
    vals = np.array([raw[s] for s in sl.free])
    target = np.mean([math.log(max(active.source_weights.get(s, 1.0), 1e-9)) for s in sl.free])
    return {s: float(v) for s, v in zip(sl.free, vals - vals.mean() + target, strict=True)}


def source_weight_params(
    df: pd.DataFrame, decay_sources: list[str], age_scale: dict[str, float], active: ScoringConfig, signal: bool,
    opt: FitOptions,
) -> list[ParamEstimate]:
    """One row per source (the profile aside): fitted, clamped, no_change (the interval covers the active
    weight), thin, unidentified (fewer than two sources with enough data) or no_signal. `decay_sources` and
    `age_scale`: the core fit's age columns, which this design shares."""
    sl = _source_layout(df, decay_sources, age_scale, opt)
    counts = _source_counts(df)
    logsw: dict[str, float] = {}
    boot: dict[str, list[float]] = {s: [] for s in sl.free}
    sparse: dict[str, tuple[float, float, float, float]] = {}
    if sl.free and signal:
        X = _source_design(df, sl, active, opt.min_relevance)
        y = df["used"].to_numpy(dtype=int)
        model = logistic_model(X, y, opt.C)
        logsw = _derive_sources(model.coef_[0], sl, active)
        if logsw:
            sparse = sparse_sources(model, X, y, df["source"].to_numpy(), sl.source_columns, sl.free, active, opt)
        rng = np.random.default_rng(opt.seed)
        groups = list(df.groupby("retrieval_id", sort=False).indices.values())
        for _ in range(opt.n_boot):
            idx = np.concatenate([groups[i] for i in rng.integers(0, len(groups), len(groups))])
            if y[idx].min() == y[idx].max():
                continue
            for s, v in _derive_sources(coefficients(X[idx], y[idx], opt.C), sl, active).items():
                boot[s].append(v)
    lo, hi = opt.source_weight_bounds
    out = []
    for s in sl.sources:
        if s in PROFILE_SOURCES:
            continue
        n, pos = counts[s]
        w_active = float(active.source_weights.get(s, 1.0))
        name = f"source_weight.{s}"
        if s in sparse:
            value, est, ci_low, ci_high = sparse[s]
            status = "fitted" if value == est else "clamped"
            out.append(
                ParamEstimate(name, "source_weight", s, None, w_active, est, value, ci_low, ci_high, n, pos, status)
            )
            continue
        if s not in sl.free or not signal:
            status = "no_signal" if not signal else "thin" if not enough((n, pos), opt) else "unidentified"
            out.append(
                ParamEstimate(name, "source_weight", s, None, w_active, None, w_active, None, None, n, pos, status)
            )
            continue
        if s not in logsw:  # the refit saw no signal (b ≤ 0): nothing to propose
            status = "unidentified"
            out.append(
                ParamEstimate(name, "source_weight", s, None, w_active, None, w_active, None, None, n, pos, status)
            )
            continue
        est = math.exp(logsw[s])
        ci = percentile_ci(boot.get(s, []))
        ci_low = clip(math.exp(ci[0]), lo, hi) if ci[0] is not None else None
        ci_high = clip(math.exp(ci[1]), lo, hi) if ci[1] is not None else None
        status, value = "fitted", clip(est, lo, hi)
        if not lo <= est <= hi:
            status = "clamped"
        if ci[0] is not None and math.exp(ci[0]) <= w_active <= math.exp(ci[1]):
            status, value = "no_change", w_active
        out.append(
            ParamEstimate(
                name, "source_weight", s, None, w_active, finite(est), value, ci_low, ci_high, n, pos, status
            )
        )
    return out
