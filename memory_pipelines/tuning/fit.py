"""The log-linear fit of half-lives and mode weights from logged candidates (used vs not used).

The online score is multiplicative, so its logarithm is linear:

    log score = log relevance − (ln 2 / half_life[source]) · age + log weight[source][mode]

We fit P(used) = sigmoid(b · log relevance + Σ_s c_s · age · 1[s] + Σ_{s,m} d_sm · 1[s,m] + a) with an
L2-regularised logistic regression. The model does not know the score's scale, so every coefficient is
divided by b (the log-relevance coefficient, i.e. the score's own scale): half_life_s = −b · ln 2 / c_s and
log weight_sm = d_sm / b. Within a build every candidate shares one mode, so ranking cannot see a per-mode
constant: weights are identified only as ratios within a mode; we normalise each mode so the geometric mean
of its fitted weights equals the active config's over the same sources. Sources without decay in the active
config (capability, memory) get no age feature; the profile (okr) is not fitted at all (it goes in first).
A parameter with too few samples (or used items) is "thin" and keeps its active value; estimates outside the
bounds are clamped and flagged. Uncertainty comes from a bootstrap over builds
(candidates of one build are not independent).

Beyond half-lives and mode weights, `fit_parameters` proposes the source weights (source_weights.py, with the
sparse sources' intervals in sparse.py), the decay and relevance floors (floors.py) and the learned ranker
(ranker.py: a logistic model of P(used) over each candidate's logged features, proposed (row "ranker") only
when its cross-fitted nDCG@10 gain on the training builds is clearly above 0; it then becomes the proposed
config's relevance, `params["ranker"]`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from ..context.scoring import PROFILE_SOURCES, ScoringConfig
from ..vocabulary import CONTEXT_MODES as MODES
from .estimates import FitOptions, ParamEstimate, clip, coefficients, enough, finite, percentile_ci
from .floors import decay_floor_param, relevance_floor_params
from .frames import labelled, resolved_population
from .ranker import RankerFit, fit_ranker
from .source_weights import source_weight_params

__all__ = ["FitOptions", "FitResult", "ParamEstimate", "config_from_dict", "config_to_dict", "fit_parameters"]

LN2 = math.log(2)


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


def _ranked_sources(df: pd.DataFrame) -> pd.DataFrame:
    """Without the profile: it goes in first whatever its weight, and feedback never marks it."""
    return df[~df["source"].isin(PROFILE_SOURCES)].reset_index(drop=True)


def _half_life(rate: float) -> float:
    return LN2 / rate if rate > 0 else math.inf


def fit_parameters(
    candidates: pd.DataFrame, active: ScoringConfig, options: FitOptions | None = None
) -> FitResult:
    """Fit half-lives and mode weights on logged candidates; the proposed config is `result.config`."""
    opt = options or FitOptions()
    population = resolved_population(candidates, opt.population) if len(candidates) else "injected"
    df = _ranked_sources(labelled(candidates, population)) if len(candidates) else candidates
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
    thin_src = {s for s in layout.decay_sources if not enough(src_counts.get(s, (0, 0)), opt)}
    free: dict[str, list[str]] = {}
    for s, m in layout.cells:
        if enough(cell_counts[(s, m)], opt):
            free.setdefault(m, []).append(s)
    free = {m: ss for m, ss in free.items() if len(ss) >= 2}

    coef, se = coefficients(X, y, opt.C, with_se=True)
    b, rates, logw = _derive(coef, layout, active, free)
    boot_b, boot_rates, boot_logw = _bootstrap(df, X, y, layout, active, free, opt)
    if len(boot_b) >= 2:  # builds are clusters: the bootstrap spread is the honest one when it is wider
        se = max(se, float(np.std(boot_b, ddof=1)))
    b_ci = percentile_ci(boot_b) if len(boot_b) >= 2 else (b - 1.96 * se, b + 1.96 * se)
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
    params += source_weight_params(df, layout.decay_sources, layout.age_scale, active, signal, opt)
    params.append(decay_floor_param(df, _proposed(active, params), active, signal, opt))
    params += relevance_floor_params(df, _proposed(active, params), active, signal, opt)
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
        b, rates, logw = _derive(coefficients(X[idx], yb, opt.C), layout, active, free)
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
        r_lo, r_hi = percentile_ci(boot[s])
        ci_low = clip(_half_life(r_hi), lo, hi) if r_hi is not None and signal else None
        ci_high = clip(_half_life(r_lo), lo, hi) if r_lo is not None and signal else None
        status = "no_signal" if not signal else "thin" if s in thin else "fitted"
        value = h_active
        if status == "fitted":
            value = clip(est, lo, hi)
            if not lo <= est <= hi:
                status = "clamped"
        out.append(
            ParamEstimate(
                name, "half_life", s, None, h_active, finite(est), value, ci_low, ci_high, n, pos, status
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
            status = "thin" if not enough((n, pos), opt) else "unidentified"
            out.append(
                ParamEstimate(name, "weight", s, m, w_active, None, w_active, None, None, n, pos, status)
            )
            continue
        est = math.exp(logw[(s, m)]) if signal else math.nan
        ci = percentile_ci(boot.get((s, m), [])) if signal else (None, None)
        ci_low = clip(math.exp(ci[0]), lo, hi) if ci[0] is not None else None
        ci_high = clip(math.exp(ci[1]), lo, hi) if ci[1] is not None else None
        status, value = ("no_signal", w_active) if not signal else ("fitted", clip(est, lo, hi))
        if signal and not lo <= est <= hi:
            status = "clamped"
        out.append(
            ParamEstimate(
                name, "weight", s, m, w_active, finite(est), value, ci_low, ci_high, n, pos, status
            )
        )
    return out


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
