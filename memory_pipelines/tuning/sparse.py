"""Sources too thin for a weight of their own (few used items; with none, a bootstrap over builds never sees one
and says nothing) are tested instead: the source-weight refit's model, with the source at its active weight,
predicts how many of its candidates should have been used; the weights at which that prediction meets the ends of
the exact 95 % Poisson interval of the observed count are its interval. When the interval excludes the active
weight, the source takes the refit's own estimate (L2-penalised, so finite without a used item; normalised like
the others), kept within the interval; otherwise it stays ("thin").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.stats import chi2
from sklearn.linear_model import LogisticRegression

from ..context.scoring import ScoringConfig
from .estimates import FitOptions, clip
from .evaluate import PROFILE_SOURCES


def _solve(f: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """x in [lo, hi] with f(x) = target for an increasing f (bisection), or the nearer end when out of reach."""
    if f(lo) >= target:
        return lo
    if f(hi) <= target:
        return hi
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return (lo + hi) / 2


def poisson_interval(k: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Garwood) two-sided interval of a Poisson mean after observing `k` events."""
    tail = (1 - level) / 2
    lower = chi2.ppf(tail, 2 * k) / 2 if k else 0.0
    return float(lower), float(chi2.ppf(1 - tail, 2 * k + 2) / 2)


def _weight_interval(z: np.ndarray, b: float, used: int, w_active: float, opt: FitOptions) -> tuple[float, float]:
    """The weights at which the predicted uses (`z`: the candidates' logits at the active weight, `b`: the
    score's scale) meet the ends of the exact 95 % Poisson interval of `used`, within the source bounds."""

    def predicted(log_ratio: float) -> float:
        return float(np.sum(1.0 / (1.0 + np.exp(-(z + b * log_ratio)))))

    lo_w, hi_w = opt.source_weight_bounds
    bounds = (math.log(lo_w / w_active), math.log(hi_w / w_active))
    low, high = poisson_interval(used)
    return w_active * math.exp(_solve(predicted, low, *bounds)), w_active * math.exp(_solve(predicted, high, *bounds))


def sparse_sources(
    model: LogisticRegression,
    X: np.ndarray,
    y: np.ndarray,
    src: np.ndarray,
    columns: dict[str, int],
    free: list[str],
    active: ScoringConfig,
    opt: FitOptions,
) -> dict[str, tuple[float, float, float, float]]:
    """{source: (value, estimate, ci_low, ci_high)} for the sources too thin for their own fit whose use the
    refit's model mispredicts at their active weight (`_weight_interval` excludes it). `columns`: each source's
    indicator column in `X`, in the refit's order; `free`: the sources fitted on their own. The estimate is the
    refit's own, normalised as the free sources' are (geometric mean of theirs = the active one); the value is
    it kept within the interval. Sources whose interval covers the active weight are left out (they keep it)."""
    coef, b = model.coef_[0], float(model.coef_[0][0])
    ref = float(np.mean([coef[columns[s]] for s in free]))  # a free source's indicator, at the mean weight
    target = float(np.mean([math.log(max(active.source_weights.get(s, 1.0), 1e-9)) for s in free]))
    out = {}
    for s, col in columns.items():
        if s in free or s in PROFILE_SOURCES:
            continue
        mask = src == s
        w_active = float(active.source_weights.get(s, 1.0))
        shift = ref - coef[col] + b * (math.log(max(w_active, 1e-9)) - target)
        low, high = _weight_interval(X[mask] @ coef + model.intercept_[0] + shift, b, int(y[mask].sum()), w_active, opt)
        if not low <= w_active <= high:
            estimate = math.exp((coef[col] - ref) / b + target)
            out[s] = (clip(estimate, low, high), estimate, low, high)
    return out
