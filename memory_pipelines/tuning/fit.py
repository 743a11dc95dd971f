"""The log-linear fit of half-lives and mode weights from logged candidates (used vs not used).

The online score is multiplicative, so its logarithm is linear:

    log score = log relevance − (ln 2 / half_life[source]) · age + log weight[source][mode]

We fit P(used) = sigmoid(b · log relevance + Σ_s c_s · age · 1[s] + Σ_{s,m} d_sm · 1[s,m] + a) with an
L2-regularised logistic regression. The model does not know the score's scale, so every coefficient is
divided by b (the log-relevance coefficient, i.e. the score's own scale): half_life_s = −b · ln 2 / c_s and
log weight_sm = d_sm / b. Within a build every candidate shares one mode, so ranking cannot see a per-mode
constant: weights are identified only as ratios within a mode; we normalise each mode so the geometric mean
of its fitted weights equals the active config's over the same sources. Sources without decay in the active
config (capability, memory, okr) get no age feature. A parameter with too few samples (or used items) is
"thin" and keeps its active value; estimates outside the bounds are clamped and flagged. Uncertainty comes
from a bootstrap over builds (candidates of one build are not independent).

Beyond half-lives and mode weights (issue 11):

- **source weights**: a second fit of the same model in which the active mode weights are an offset
  (feature 0 is log relevance + log mode weight, so its coefficient b is the score's scale) and each source
  gets one indicator shared by every mode (plus one per mode, which ranking cannot see):
  log source_weight_s = d_s / b, normalised so the geometric mean over the fitted sources equals the
  active one. When the active mode weights are so far off that b is not positive in this refit, the
  source weights are "unidentified" and keep their active values. A source needs enough labelled
  candidates (`_enough`); the weight is clamped to `source_weight_bounds` and keeps its active value when
  its bootstrap interval covers it ("no_change"). Where a mode weight is re-fitted it carries the whole
  fitted factor of its cell (the proposed mode weight is the fitted cell weight / the proposed source
  weight), so the source weight matters where a cell is thin.
- **sparse sources**: a source too thin for that (few used items; with none, a bootstrap over builds never
  sees one and says nothing) is tested instead: the refit's model, with the source at its active weight,
  predicts how many of its candidates should have been used; the weights at which that prediction meets
  the ends of the exact 95 % Poisson interval of the observed count are its interval. When the interval
  excludes the active weight, the source takes the refit's own estimate (L2-penalised, so finite without a
  used item; normalised like the others), kept within the interval; otherwise it stays ("thin").
- **decay floor**: chosen on the training builds by replaying them (evaluate.per_build_metrics, the online
  scoring functions) with the proposed half-lives and weights over a grid of floors; the objective is
  mean nDCG@10 over builds with a used item. A bootstrap over builds gives the interval of the chosen floor
  and of its gain over the active floor; the active floor stays unless that gain's interval is above 0.
- **relevance floors**: each channel's floor is chosen the same way over the active floor and a few raises
  of it (`relevance_floor_steps`); the replay removes the candidates whose logged channel scores (sql/009
  `features`) fall below the tried floors. A lower floor than the active one is not tried: the candidates it
  would admit were removed online, never shown, so the log cannot say whether they would have been used.
- **the learned ranker** (`ranker.py`): a logistic model of P(used) over each candidate's logged features,
  proposed (row "ranker") only when its cross-fitted nDCG@10 gain on the training builds is clearly above 0;
  it then becomes the proposed config's relevance (`params["ranker"]`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import chi2
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from ..context.scoring import ScoringConfig
from ..infra.errors import ValidationError
from ..vocabulary import CONTEXT_MODES as MODES
from .evaluate import PROFILE_SOURCES, per_build_metrics
from .frames import labelled, resolved_population
from .ranker import RankerFit, RankerOptions, fit_ranker

LN2 = math.log(2)


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


@dataclass
class FitResult:
    config: ScoringConfig
    params: list[ParamEstimate]
    relevance_coef: float
    relevance_ci: tuple[float | None, float | None]
    relevance_z: float
    signal: bool
    n_builds: int
    n_candidates: int
    n_used: int
    population: str
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": config_to_dict(self.config),
            "params": [asdict(p) for p in self.params],
            "relevance_coef": self.relevance_coef,
            "relevance_ci": list(self.relevance_ci),
            "relevance_z": self.relevance_z,
            "signal": self.signal,
            "n_builds": self.n_builds,
            "n_candidates": self.n_candidates,
            "n_used": self.n_used,
            "population": self.population,
            "notes": list(self.notes),
        }


def config_to_dict(config: ScoringConfig) -> dict[str, Any]:
    return {
        "version": config.version,
        "half_lives": dict(config.half_lives),
        "mode_weights": {s: dict(w) for s, w in config.mode_weights.items()},
        "params": config.params(),
    }


def config_from_dict(d: dict[str, Any]) -> ScoringConfig:
    return ScoringConfig.from_row(int(d.get("version") or 0), d["half_lives"], d["mode_weights"], d.get("params"))


@dataclass
class _Layout:
    """Which column of the design matrix is which."""

    decay_sources: list[str]
    age_scale: dict[str, float]
    cells: list[tuple[str, str]]

    @property
    def n_features(self) -> int:
        return 1 + len(self.decay_sources) + len(self.cells)


def _layout(df: pd.DataFrame, active: ScoringConfig) -> _Layout:
    present = set(df["source"].unique())
    decay_sources = [s for s, h in active.half_lives.items() if h is not None and s in present]
    decay_sources = [s for s in decay_sources if df.loc[df["source"] == s, "age_days"].dropna().nunique() > 1]
    scale = {}
    for s in decay_sources:
        ages = df.loc[df["source"] == s, "age_days"].dropna().to_numpy()
        scale[s] = float(np.std(ages)) or 1.0
    cells = sorted(
        {(s, m) for s, m in zip(df["source"], df["mode"], strict=True)},
        key=lambda c: (MODES.index(c[1]) if c[1] in MODES else 99, c[0]),
    )
    return _Layout(decay_sources, scale, cells)


def _design(df: pd.DataFrame, layout: _Layout, min_relevance: float) -> np.ndarray:
    n = len(df)
    X = np.zeros((n, layout.n_features))
    X[:, 0] = np.log(np.maximum(df["relevance"].to_numpy(dtype=float), min_relevance))
    src = df["source"].to_numpy()
    age = np.nan_to_num(df["age_days"].to_numpy(dtype=float), nan=0.0)
    for j, s in enumerate(layout.decay_sources, start=1):
        X[:, j] = np.where(src == s, age / layout.age_scale[s], 0.0)
    mode = df["mode"].to_numpy()
    off = 1 + len(layout.decay_sources)
    for j, (s, m) in enumerate(layout.cells):
        X[:, off + j] = (src == s) & (mode == m)
    return X


def _model(X: np.ndarray, y: np.ndarray, C: float) -> LogisticRegression:
    """L2-regularised logistic regression (Newton–Cholesky: a few exact steps on this small design).

    BLAS runs single-threaded: on a design this narrow its threads only contend (10× slower on 2 cores).
    """
    model = LogisticRegression(C=C, solver="newton-cholesky", max_iter=200, tol=1e-6)
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)
    return model


def _coefs(X: np.ndarray, y: np.ndarray, C: float, *, with_se: bool = False) -> Any:
    """The coefficients of `_model` (and the log-relevance coefficient's standard error)."""
    model = _model(X, y, C)
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


def _derive(
    coef: np.ndarray, layout: _Layout, active: ScoringConfig, free: dict[str, list[str]]
) -> tuple[float, dict[str, float], dict[tuple[str, str], float]]:
    """(b, decay rate per source in 1/days, normalised log weight per free cell)."""
    b = float(coef[0])
    rates = {}
    for j, s in enumerate(layout.decay_sources, start=1):
        c = coef[j] / layout.age_scale[s]
        rates[s] = -c / b if b > 0 else math.nan
    off = 1 + len(layout.decay_sources)
    raw = {cell: coef[off + j] / b if b > 0 else math.nan for j, cell in enumerate(layout.cells)}
    logw: dict[tuple[str, str], float] = {}
    for m, sources in free.items():
        vals = np.array([raw[(s, m)] for s in sources])
        target = np.mean([math.log(max(active.weight(s, m), 1e-9)) for s in sources])
        for s, v in zip(sources, vals - vals.mean() + target, strict=True):
            logw[(s, m)] = float(v)
    return b, rates, logw


def _counts(df: pd.DataFrame) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, str], tuple[int, int]]]:
    aged = df[df["age_days"].notna()]
    by_source = aged.groupby("source")["used"].agg(["size", "sum"])
    by_cell = df.groupby(["source", "mode"])["used"].agg(["size", "sum"])
    return (
        {s: (int(r["size"]), int(r["sum"])) for s, r in by_source.iterrows()},
        {(s, m): (int(r["size"]), int(r["sum"])) for (s, m), r in by_cell.iterrows()},
    )


def _pct(values: list[float]) -> tuple[float | None, float | None]:
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(arr) < 2:
        return None, None
    return float(np.percentile(arr, 2.5)), float(np.percentile(arr, 97.5))


def _clip(v: float, lo: float, hi: float) -> float:
    return float(min(max(v, lo), hi))


def _half_life(rate: float) -> float:
    return LN2 / rate if rate > 0 else math.inf


def fit_parameters(
    candidates: pd.DataFrame, active: ScoringConfig, options: FitOptions | None = None
) -> FitResult:
    """Fit half-lives and mode weights on logged candidates; the proposed config is `result.config`."""
    opt = options or FitOptions()
    population = resolved_population(candidates, opt.population) if len(candidates) else "injected"
    df = labelled(candidates, population).reset_index(drop=True) if len(candidates) else candidates
    notes: list[str] = []
    n_used = int(df["used"].sum()) if len(df) else 0
    n_builds = int(df["retrieval_id"].nunique()) if len(df) else 0
    if len(df) == 0 or n_used == 0 or n_used == len(df):
        notes.append("no usable data: need labelled candidates with both used and unused items")
        return _unchanged(active, df, population, notes, n_builds, n_used)
    layout = _layout(df, active)
    X = _design(df, layout, opt.min_relevance)
    y = df["used"].to_numpy(dtype=int)
    src_counts, cell_counts = _counts(df)
    thin_src = {s for s in layout.decay_sources if not _enough(src_counts.get(s, (0, 0)), opt)}
    free: dict[str, list[str]] = {}
    for s, m in layout.cells:
        if _enough(cell_counts[(s, m)], opt):
            free.setdefault(m, []).append(s)
    free = {m: ss for m, ss in free.items() if len(ss) >= 2}

    coef, se = _coefs(X, y, opt.C, with_se=True)
    b, rates, logw = _derive(coef, layout, active, free)
    boot_b, boot_rates, boot_logw = _bootstrap(df, X, y, layout, active, free, opt)
    if len(boot_b) >= 2:  # builds are clusters: the bootstrap spread is the honest one when it is wider
        se = max(se, float(np.std(boot_b, ddof=1)))
    b_ci = _pct(boot_b) if len(boot_b) >= 2 else (b - 1.96 * se, b + 1.96 * se)
    z = b / se if se > 0 else math.inf
    signal = b > 0 and z >= opt.min_signal_z and (b_ci[0] is None or b_ci[0] > 0)
    if not signal:
        notes.append(
            f"no signal: the log-relevance coefficient is {b:.3g} (z = {z:.2g}, need ≥ "
            f"{opt.min_signal_z:g}); usage does not follow the score, so every parameter keeps its "
            "active value"
        )
    params = _half_life_params(active, layout, rates, boot_rates, src_counts, thin_src, signal, opt)
    params += _weight_params(active, layout, logw, boot_logw, cell_counts, free, signal, opt)
    params += _source_weight_params(df, layout, active, signal, opt)
    params.append(_decay_floor_param(df, _proposed(active, params), active, signal, opt))
    params += _relevance_floor_params(df, _proposed(active, params), active, signal, opt)
    config = _proposed(active, params)
    ranked = fit_ranker(df, config, opt.ranker, population=population)
    params.append(_ranker_param(ranked))
    if ranked.note:
        notes.append(ranked.note)
    if ranked.ranker is not None:
        config = replace(config, ranker=ranked.ranker)
    thin = [p.name for p in params if p.status == "thin"]
    if thin:
        notes.append(
            f"too thin (fewer than {opt.min_samples} samples or {opt.min_positives} used), kept "
            f"active: {', '.join(thin)}"
        )
    clamped = [p.name for p in params if p.status == "clamped"]
    if clamped:
        notes.append(f"outside bounds, clamped: {', '.join(clamped)}")
    return FitResult(
        config=config,
        params=params,
        relevance_coef=b,
        relevance_ci=b_ci,
        relevance_z=z,
        signal=signal,
        n_builds=n_builds,
        n_candidates=len(df),
        n_used=n_used,
        population=population,
        notes=notes,
    )


def _enough(count: tuple[int, int], opt: FitOptions) -> bool:
    n, pos = count
    return n >= opt.min_samples and pos >= opt.min_positives and n - pos >= opt.min_positives


def _bootstrap(
    df: pd.DataFrame,
    X: np.ndarray,
    y: np.ndarray,
    layout: _Layout,
    active: ScoringConfig,
    free: dict[str, list[str]],
    opt: FitOptions,
) -> tuple[list[float], dict[str, list[float]], dict[tuple[str, str], list[float]]]:
    """Refit on builds resampled with replacement; the derived parameters of each refit."""
    rng = np.random.default_rng(opt.seed)
    groups = list(df.groupby("retrieval_id", sort=False).indices.values())
    boot_b: list[float] = []
    boot_rates: dict[str, list[float]] = {s: [] for s in layout.decay_sources}
    boot_logw: dict[tuple[str, str], list[float]] = {}
    for _ in range(opt.n_boot):
        pick = rng.integers(0, len(groups), len(groups))
        idx = np.concatenate([groups[i] for i in pick])
        yb = y[idx]
        if yb.min() == yb.max():
            continue
        b, rates, logw = _derive(_coefs(X[idx], yb, opt.C), layout, active, free)
        boot_b.append(b)
        for s, r in rates.items():
            boot_rates[s].append(r)
        for cell, v in logw.items():
            boot_logw.setdefault(cell, []).append(v)
    return boot_b, boot_rates, boot_logw


def _half_life_params(
    active: ScoringConfig,
    layout: _Layout,
    rates: dict[str, float],
    boot: dict[str, list[float]],
    counts: dict[str, tuple[int, int]],
    thin: set[str],
    signal: bool,
    opt: FitOptions,
) -> list[ParamEstimate]:
    lo, hi = opt.half_life_bounds
    out = []
    for s, h_active in active.half_lives.items():
        if h_active is None:
            continue
        n, pos = counts.get(s, (0, 0))
        name = f"half_life.{s}"
        if s not in layout.decay_sources:
            out.append(
                ParamEstimate(
                    name,
                    "half_life",
                    s,
                    None,
                    h_active,
                    None,
                    h_active,
                    None,
                    None,
                    n,
                    pos,
                    "unidentified" if n else "thin",
                )
            )
            continue
        est = _half_life(rates[s])
        r_lo, r_hi = _pct(boot[s])
        ci_low = _clip(_half_life(r_hi), lo, hi) if r_hi is not None and signal else None
        ci_high = _clip(_half_life(r_lo), lo, hi) if r_lo is not None and signal else None
        status = "no_signal" if not signal else "thin" if s in thin else "fitted"
        value = h_active
        if status == "fitted":
            value = _clip(est, lo, hi)
            if not lo <= est <= hi:
                status = "clamped"
        out.append(
            ParamEstimate(
                name, "half_life", s, None, h_active, _finite(est), value, ci_low, ci_high, n, pos, status
            )
        )
    return out


def _weight_params(
    active: ScoringConfig,
    layout: _Layout,
    logw: dict[tuple[str, str], float],
    boot: dict[tuple[str, str], list[float]],
    counts: dict[tuple[str, str], tuple[int, int]],
    free: dict[str, list[str]],
    signal: bool,
    opt: FitOptions,
) -> list[ParamEstimate]:
    lo, hi = opt.weight_bounds
    out = []
    for s, m in layout.cells:
        n, pos = counts[(s, m)]
        w_active = active.weight(s, m)
        name = f"weight.{s}.{m}"
        if (s, m) not in logw:
            status = "thin" if not _enough((n, pos), opt) else "unidentified"
            out.append(
                ParamEstimate(name, "weight", s, m, w_active, None, w_active, None, None, n, pos, status)
            )
            continue
        est = math.exp(logw[(s, m)]) if signal else math.nan
        ci = _pct(boot.get((s, m), [])) if signal else (None, None)
        ci_low = _clip(math.exp(ci[0]), lo, hi) if ci[0] is not None else None
        ci_high = _clip(math.exp(ci[1]), lo, hi) if ci[1] is not None else None
        status, value = ("no_signal", w_active) if not signal else ("fitted", _clip(est, lo, hi))
        if signal and not lo <= est <= hi:
            status = "clamped"
        out.append(
            ParamEstimate(
                name, "weight", s, m, w_active, _finite(est), value, ci_low, ci_high, n, pos, status
            )
        )
    return out


def _finite(v: float) -> float | None:
    return None if v is None or math.isnan(v) else (v if math.isfinite(v) else None)


def _proposed(active: ScoringConfig, params: list[ParamEstimate]) -> ScoringConfig:
    """The proposed config: fitted values replace active ones; kept parameters stay as they are.

    A re-fitted mode weight is the whole fitted factor of its cell, so it is stored divided by the proposed
    source weight (their product, which the builder uses, is the fitted value)."""
    half_lives = dict(active.half_lives)
    weights = {s: dict(w) for s, w in active.mode_weights.items()}
    source_weights = dict(active.source_weights)
    decay_floor = active.decay_floor
    relevance_floors = dict(active.relevance_floors)
    for p in params:
        if p.kind == "source_weight" and not p.kept_active and p.value is not None:
            source_weights[p.source] = p.value
        elif p.kind == "decay_floor" and not p.kept_active and p.value is not None:
            decay_floor = p.value
        elif p.kind == "relevance_floor" and not p.kept_active and p.value is not None:
            relevance_floors[p.source] = p.value
    for p in params:
        if p.kind == "half_life":
            half_lives[p.source] = p.value
        elif p.kind == "weight" and not p.kept_active and p.value is not None:
            weights.setdefault(p.source, {})[p.mode] = p.value / source_weights.get(p.source, 1.0)
    return replace(
        active,
        version=0,
        half_lives=half_lives,
        mode_weights=weights,
        source_weights=source_weights,
        decay_floor=decay_floor,
        relevance_floors=relevance_floors,
    )


# --- source weights: the same model with the active mode weights as an offset ----------------------------


@dataclass
class _SourceLayout:
    """Columns of the source-weight design: log relevance + log mode weight, ages, sources, modes."""

    base: _Layout
    sources: list[str]
    modes: list[str]
    free: list[str]

    @property
    def n_features(self) -> int:
        return 1 + len(self.base.decay_sources) + len(self.sources) + len(self.modes)


def _source_counts(df: pd.DataFrame) -> dict[str, tuple[int, int]]:
    g = df.groupby("source")["used"].agg(["size", "sum"])
    return {s: (int(r["size"]), int(r["sum"])) for s, r in g.iterrows()}


def _source_layout(df: pd.DataFrame, base: _Layout, opt: FitOptions) -> _SourceLayout:
    counts = _source_counts(df)
    sources = sorted(counts)
    free = [s for s in sources if s not in PROFILE_SOURCES and _enough(counts[s], opt)]
    modes = sorted(set(df["mode"]), key=lambda m: MODES.index(m) if m in MODES else 99)
    return _SourceLayout(base, sources, modes, free if len(free) >= 2 else [])


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
    for j, s in enumerate(sl.base.decay_sources, start=1):
        X[:, j] = np.where(src == s, age / sl.base.age_scale[s], 0.0)
    off = 1 + len(sl.base.decay_sources)
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
    off = 1 + len(sl.base.decay_sources)
    raw = {s: coef[off + j] / b for j, s in enumerate(sl.sources)}
    vals = np.array([raw[s] for s in sl.free])
    target = np.mean([math.log(max(active.source_weights.get(s, 1.0), 1e-9)) for s in sl.free])
    return {s: float(v) for s, v in zip(sl.free, vals - vals.mean() + target, strict=True)}


def _source_weight_params(
    df: pd.DataFrame, base: _Layout, active: ScoringConfig, signal: bool, opt: FitOptions
) -> list[ParamEstimate]:
    """One row per source (the profile aside): fitted, clamped, no_change (the interval covers the active
    weight), thin, unidentified (fewer than two sources with enough data) or no_signal."""
    sl = _source_layout(df, base, opt)
    counts = _source_counts(df)
    logsw: dict[str, float] = {}
    boot: dict[str, list[float]] = {s: [] for s in sl.free}
    sparse: dict[str, tuple[float, float, float, float]] = {}
    if sl.free and signal:
        X = _source_design(df, sl, active, opt.min_relevance)
        y = df["used"].to_numpy(dtype=int)
        model = _model(X, y, opt.C)
        logsw = _derive_sources(model.coef_[0], sl, active)
        if logsw:
            sparse = _sparse_sources(model, X, y, df["source"].to_numpy(), sl, active, opt)
        rng = np.random.default_rng(opt.seed)
        groups = list(df.groupby("retrieval_id", sort=False).indices.values())
        for _ in range(opt.n_boot):
            idx = np.concatenate([groups[i] for i in rng.integers(0, len(groups), len(groups))])
            if y[idx].min() == y[idx].max():
                continue
            for s, v in _derive_sources(_coefs(X[idx], y[idx], opt.C), sl, active).items():
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
            status = "no_signal" if not signal else "thin" if not _enough((n, pos), opt) else "unidentified"
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
        ci = _pct(boot.get(s, []))
        ci_low = _clip(math.exp(ci[0]), lo, hi) if ci[0] is not None else None
        ci_high = _clip(math.exp(ci[1]), lo, hi) if ci[1] is not None else None
        status, value = "fitted", _clip(est, lo, hi)
        if not lo <= est <= hi:
            status = "clamped"
        if ci[0] is not None and math.exp(ci[0]) <= w_active <= math.exp(ci[1]):
            status, value = "no_change", w_active
        out.append(
            ParamEstimate(
                name, "source_weight", s, None, w_active, _finite(est), value, ci_low, ci_high, n, pos, status
            )
        )
    return out


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


def _sparse_sources(
    model: LogisticRegression,
    X: np.ndarray,
    y: np.ndarray,
    src: np.ndarray,
    sl: _SourceLayout,
    active: ScoringConfig,
    opt: FitOptions,
) -> dict[str, tuple[float, float, float, float]]:
    """{source: (value, estimate, ci_low, ci_high)} for the sources too thin for their own fit whose use the
    refit's model mispredicts at their active weight (`_weight_interval` excludes it). The estimate is the
    refit's own, normalised as `_derive_sources` does; the value is it kept within the interval. Sources
    whose interval covers the active weight are left out (they keep it)."""
    coef, b = model.coef_[0], float(model.coef_[0][0])
    col = {s: 1 + len(sl.base.decay_sources) + j for j, s in enumerate(sl.sources)}
    ref = float(np.mean([coef[col[s]] for s in sl.free]))  # a free source's indicator, at the mean weight
    target = float(np.mean([math.log(max(active.source_weights.get(s, 1.0), 1e-9)) for s in sl.free]))
    out = {}
    for s in sl.sources:
        if s in sl.free or s in PROFILE_SOURCES:
            continue
        mask = src == s
        w_active = float(active.source_weights.get(s, 1.0))
        shift = ref - coef[col[s]] + b * (math.log(max(w_active, 1e-9)) - target)
        low, high = _weight_interval(X[mask] @ coef + model.intercept_[0] + shift, b, int(y[mask].sum()), w_active, opt)
        if not low <= w_active <= high:
            estimate = math.exp((coef[col[s]] - ref) / b + target)
            out[s] = (_clip(estimate, low, high), estimate, low, high)
    return out


# --- floors -------------------------------------------------------------------------------------------------


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
    gain_ci = _pct(gains)
    if j == ja or (gain_ci[0] is not None and gain_ci[0] <= 0):
        return "no_change", grid[j], _pct(chosen), n_builds
    return "fitted", grid[j], _pct(chosen), n_builds


def _decay_floor_param(
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


def _relevance_floor_params(
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


def _ranker_param(fit: RankerFit) -> ParamEstimate:
    """The ranker's report row: active / fitted / proposed are cross-fitted nDCG@10 on the training builds
    (the proposed config without the new ranker, with it, and whichever is proposed); the CI is the fitted
    one's. Status fitted (proposed), no_change, thin or disabled."""
    value = fit.ndcg if fit.status == "fitted" else fit.baseline_ndcg
    return ParamEstimate(
        "ranker", "ranker", "*", None, fit.baseline_ndcg, fit.ndcg, value, fit.ndcg_ci[0], fit.ndcg_ci[1],
        fit.n, fit.n_used, fit.status,
    )


def _unchanged(
    active: ScoringConfig, df: pd.DataFrame, population: str, notes: list[str], n_builds: int, n_used: int
) -> FitResult:
    return FitResult(
        config=replace(
            active,
            version=0,
            half_lives=dict(active.half_lives),
            mode_weights={k: dict(v) for k, v in active.mode_weights.items()},
        ),
        params=[],
        relevance_coef=math.nan,
        relevance_ci=(None, None),
        relevance_z=math.nan,
        signal=False,
        n_builds=n_builds,
        n_candidates=len(df),
        n_used=n_used,
        population=population,
        notes=notes,
    )


def weight_ratios(
    config: ScoringConfig, mode: str, sources: list[str], reference: str = "task"
) -> dict[str, float]:
    """weight[s][mode] / weight[reference][mode]: what the ranking can actually see."""
    if reference not in sources:
        raise ValidationError("reference", f"{reference} is not among {sources}")
    ref = config.weight(reference, mode)
    return {s: config.weight(s, mode) / ref for s in sources}
