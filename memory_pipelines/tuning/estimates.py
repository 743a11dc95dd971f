"""What a fit proposes (one `ParamEstimate` per parameter), its options, and the statistics every fit shares:
the penalised logistic model, percentile intervals, bounds and the thin-data rule."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from .ranker import RankerOptions


@dataclass(frozen=True)
class FitOptions:
    """Regularisation, bootstrap, thin-data thresholds and bounds."""

    C: float = 10.0
    n_boot: int = 50
    min_samples: int = 200
    min_positives: int = 20
    half_life_bounds: tuple[float, float] = (0.25, 3650.0)
    weight_bounds: tuple[float, float] = (0.05, 5.0)
    population: str = "auto"
    min_relevance: float = 1e-3
    min_signal_z: float = 3.0  # the log-relevance coefficient must be this many standard errors above 0
    source_weight_bounds: tuple[float, float] = (0.25, 4.0)
    decay_floor_grid: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    min_floor_builds: int = 100  # training builds with a used item needed to choose a decay or relevance floor
    relevance_floor_steps: tuple[float, ...] = (0.05, 0.10, 0.15, 0.20)  # raises tried over the active floor
    seed: int = 0
    ranker: RankerOptions = field(default_factory=RankerOptions)


@dataclass
class ParamEstimate:
    """One fitted parameter: `value` is what the proposed config uses (active when thin)."""

    name: str
    kind: str  # "half_life" | "weight" | "source_weight" | "decay_floor" | "relevance_floor" | "ranker"
    source: str
    mode: str | None
    active: float | None
    estimate: float | None  # unclamped point estimate (None = not estimated)
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    n_used: int
    status: str  # fitted | clamped | thin | unidentified | no_signal | no_change | disabled (ranker)

    @property
    def kept_active(self) -> bool:
        return self.status in ("thin", "unidentified", "no_signal", "no_change", "disabled")


def logistic_model(X: np.ndarray, y: np.ndarray, C: float) -> LogisticRegression:
    """L2-regularised logistic regression (Newton–Cholesky: a few exact steps on this small design).

    BLAS runs single-threaded: on a design this narrow its threads only contend.
    """
    model = LogisticRegression(C=C, solver="newton-cholesky", max_iter=200, tol=1e-6)
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)
    return model


def coefficients(X: np.ndarray, y: np.ndarray, C: float, *, with_se: bool = False) -> Any:
    """The coefficients of `logistic_model` (and the log-relevance coefficient's standard error)."""
    model = logistic_model(X, y, C)
    if not with_se:
        return model.coef_[0]
    return model.coef_[0], _relevance_se(model, X, C)


def _relevance_se(model: LogisticRegression, X: np.ndarray, C: float) -> float:
    """Standard error of the log-relevance coefficient from the penalised Fisher information."""
    p = model.predict_proba(X)[:, 1]
    Xi = np.c_[X, np.ones(len(X))]
    H = (Xi * (p * (1 - p))[:, None]).T @ Xi + np.diag([1.0 / C] * X.shape[1] + [0.0])
    try:
        return float(math.sqrt(max(np.linalg.pinv(H)[0, 0], 0.0)))
    except np.linalg.LinAlgError:  # pragma: no cover - pinv of a symmetric matrix converges
        return math.inf


def percentile_ci(values: list[float]) -> tuple[float | None, float | None]:
    """The 2.5th and 97.5th percentiles of the finite values (None, None with fewer than two)."""
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(arr) < 2:
        return None, None
    return float(np.percentile(arr, 2.5)), float(np.percentile(arr, 97.5))


def clip(v: float, lo: float, hi: float) -> float:
    return float(min(max(v, lo), hi))


def finite(v: float) -> float | None:
    return None if v is None or math.isnan(v) else (v if math.isfinite(v) else None)


def enough(count: tuple[int, int], opt: FitOptions) -> bool:
    """Whether (samples, used) are enough for a parameter of its own (else it is "thin")."""
    n, pos = count
    return n >= opt.min_samples and pos >= opt.min_positives and n - pos >= opt.min_positives
