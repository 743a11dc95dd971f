"""Hit rates by source × mode × age bucket, PNG plots (matplotlib, Agg), and the text table the CLI prints."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..vocabulary import CONTEXT_MODES as MODES
from ..vocabulary import SOURCE_NAMES as SOURCES
from .frames import labelled, resolved_population

AGE_EDGES = (0.0, 1.0, 7.0, 30.0, 90.0, 365.0, math.inf)
AGE_LABELS = ("<1d", "1-7d", "7-30d", "30-90d", "90-365d", ">365d")
NO_AGE = "n/a"


def age_bucket(age_days: pd.Series) -> pd.Series:
    """Age buckets as ordered labels; unknown ages are 'n/a'."""
    cut = pd.cut(age_days.astype(float), bins=list(AGE_EDGES), labels=list(AGE_LABELS), right=False)
    return cut.astype(object).where(age_days.notna(), NO_AGE)


def hit_rate_table(candidates: pd.DataFrame, population: str = "auto") -> pd.DataFrame:
    """One row per (source, mode, age bucket): candidates, injected, labelled, used, and the hit rate
    (used / labelled) with a Wilson 95 % interval."""
    cols = [
        "source",
        "mode",
        "age_bucket",
        "candidates",
        "injected",
        "labelled",
        "used",
        "hit_rate",
        "ci_low",
        "ci_high",
    ]
    if candidates.empty:
        return pd.DataFrame(columns=cols)
    pop = resolved_population(candidates, population)
    df = candidates.assign(age_bucket=age_bucket(candidates["age_days"]))
    lab = labelled(df, pop)
    keys = ["source", "mode", "age_bucket"]
    allc = df.groupby(keys).agg(candidates=("used", "size"), injected=("injected", "sum"))
    labc = lab.groupby(keys).agg(labelled=("used", "size"), used=("used", "sum"))
    t = allc.join(labc, how="left").fillna(0).astype(int).reset_index()
    t["hit_rate"] = np.where(t["labelled"] > 0, t["used"] / t["labelled"].where(t["labelled"] > 0, 1), np.nan)
    lo, hi = _wilson(t["used"].to_numpy(float), t["labelled"].to_numpy(float))
    t["ci_low"], t["ci_high"] = lo, hi
    order = {lab_: i for i, lab_ in enumerate((*AGE_LABELS, NO_AGE))}
    t["_s"] = t["source"].map(lambda s: SOURCES.index(s) if s in SOURCES else 99)
    t["_m"] = t["mode"].map(lambda m: MODES.index(m) if m in MODES else 99)
    t["_a"] = t["age_bucket"].map(order)
    return t.sort_values(["_s", "_m", "_a"]).drop(columns=["_s", "_m", "_a"]).reset_index(drop=True)[cols]


def _wilson(k: np.ndarray, n: np.ndarray, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        denom = 1 + z**2 / n
        centre = (p + z**2 / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    # the interval always holds p; rounding can leave it 1e-18 off when p is 0 or 1
    lo = np.clip(np.minimum(centre - half, p), 0.0, 1.0)
    hi = np.clip(np.maximum(centre + half, p), 0.0, 1.0)
    return np.where(n > 0, lo, np.nan), np.where(n > 0, hi, np.nan)


def write_plots(candidates: pd.DataFrame, result: dict[str, Any] | None, folder: str | Path) -> list[Path]:
    """PNG files in `folder`: hit rate by source × mode, hit rate by age per source, and (with a result)
    active vs proposed on held-out builds. Returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    population = result["fit"]["population"] if result else "auto"
    paths = []
    if not candidates.empty:
        paths.append(_heatmap(plt, candidates, population, out / "hit_rate_source_mode.png"))
        paths.append(_age_lines(plt, hit_rate_table(candidates, population), out / "hit_rate_by_age.png"))
    if result and result["evaluation"].get("configs"):
        paths.append(_eval_bars(plt, result["evaluation"], out / "evaluation.png"))
    return paths


def _heatmap(plt: Any, candidates: pd.DataFrame, population: str, path: Path) -> Path:
    lab = labelled(candidates, resolved_population(candidates, population))
    pivot = lab.groupby(["source", "mode"])["used"].mean().unstack("mode")
    pivot = pivot.reindex(
        index=[s for s in SOURCES if s in pivot.index], columns=[m for m in MODES if m in pivot]
    )
    fig, ax = plt.subplots(figsize=(6, 4))
    im = ax.imshow(pivot.to_numpy(dtype=float), cmap="viridis", vmin=0, aspect="auto")
    ax.set_xticks(range(len(pivot.columns)), list(pivot.columns))
    ax.set_yticks(range(len(pivot.index)), list(pivot.index))
    for i in range(pivot.shape[0]):
        for j in range(pivot.shape[1]):
            v = pivot.iat[i, j]
            if not pd.isna(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(im, ax=ax, label="hit rate (used / labelled)")
    ax.set_title("Hit rate by source × mode")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _age_lines(plt: Any, table: pd.DataFrame, path: Path) -> Path:
    sources = [s for s in SOURCES if s in set(table["source"])]
    fig, axes = plt.subplots(
        1, max(len(sources), 1), figsize=(3.2 * max(len(sources), 1), 3.2), sharey=True, squeeze=False
    )
    for ax, s in zip(axes[0], sources, strict=False):
        sub = table[table["source"] == s]
        for m in MODES:
            rows = sub[(sub["mode"] == m) & (sub["labelled"] > 0)]
            if len(rows):
                ax.plot(rows["age_bucket"].astype(str), rows["hit_rate"], marker="o", label=m)
        ax.set_title(s)
        ax.tick_params(axis="x", rotation=45)
    axes[0][0].set_ylabel("hit rate")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("Hit rate by age bucket")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _eval_bars(plt: Any, evaluation: dict[str, Any], path: Path) -> Path:
    metrics = ("hit@1", "hit@3", "hit@5", "ndcg@10", "mrr")
    names = list(evaluation["configs"])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / max(len(names), 1)
    x = np.arange(len(metrics))
    for i, name in enumerate(names):
        overall = evaluation["configs"][name]["overall"]
        ax.bar(x + i * width, [overall.get(m) or 0.0 for m in metrics], width, label=name)
    ax.set_xticks(x + width * (len(names) - 1) / 2, metrics)
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title("Held-out replay")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _f(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return "-"
    return f"{v:.{digits}f}"


def format_result(result: dict[str, Any]) -> str:
    """The evaluation table (active vs proposed, overall and by mode), the parameters and the decision."""
    d, ev, fit = result["data"], result["evaluation"], result["fit"]
    lines = [
        f"data: {d['train_builds']} training builds ({d['train_labelled']} labelled candidates, "
        f"{d['train_used']} used), {d['test_builds']} held-out builds; labels: {d['population']}"
        + (f"; randomised builds: {d['randomized_builds']}" if d.get("randomized_builds") else ""),
        "",
        "held-out replay          active   proposed     delta   95% CI",
    ]
    configs = ev.get("configs", {})
    act = configs.get("active", {}).get("overall", {})
    pro = configs.get("proposed", {}).get("overall", {})
    deltas = ev.get("deltas", {}).get("proposed", {})
    for m in ("hit@1", "hit@3", "hit@5", "ndcg@10", "mrr", "tokens_per_hit"):
        digits = 1 if m == "tokens_per_hit" else 3
        dl = deltas.get(m)
        delta = (pro.get(m) - act.get(m)) if pro.get(m) is not None and act.get(m) is not None else None
        ci = f"[{_f(dl['ci_low'])}, {_f(dl['ci_high'])}]" if dl and dl.get("ci_low") is not None else ""
        lines.append(
            f"  {m:<20} {_f(act.get(m), digits):>8} {_f(pro.get(m), digits):>10} "
            f"{_f(delta, digits):>9}   {ci}"
        )
    lines.append(f"  builds with a used item: {act.get('n_with_use', 0)} of {act.get('n_builds', 0)}")
    lines += [
        "",
        "by mode (active → proposed)   n   hit@5            ndcg@10          mrr              tok/hit",
    ]
    for mode, a in configs.get("active", {}).get("by_mode", {}).items():
        p = configs["proposed"]["by_mode"].get(mode, {})
        cells = "  ".join(
            f"{_f(a.get(m), 1 if m == 'tokens_per_hit' else 3):>6} → "
            f"{_f(p.get(m), 1 if m == 'tokens_per_hit' else 3):<6}"
            for m in ("hit@5", "ndcg@10", "mrr", "tokens_per_hit")
        )
        lines.append(f"  {mode:<26} {a.get('n_with_use', 0):>4}   {cells}")
    rnd = configs.get("active", {}).get("randomized")
    if rnd:
        prnd = configs["proposed"]["randomized"]
        lines.append(
            f"  randomised builds only ({rnd['n_with_use']}): hit@5 {_f(rnd['hit@5'])} → "
            f"{_f(prnd['hit@5'])}, ndcg@10 {_f(rnd['ndcg@10'])} → {_f(prnd['ndcg@10'])}"
        )
    lines += [
        "",
        f"fit: log-relevance coefficient {_f(fit['relevance_coef'])} "
        f"[{_f(fit['relevance_ci'][0])}, {_f(fit['relevance_ci'][1])}], z {_f(fit.get('relevance_z'), 1)}, "
        f"signal: {fit['signal']}",
        "parameter                    active   fitted   proposed   95% CI                n    used  status",
    ]
    for p in fit["params"]:
        ci = f"[{_f(p['ci_low'], 2)}, {_f(p['ci_high'], 2)}]" if p["ci_low"] is not None else ""
        lines.append(
            f"  {p['name']:<26} {_f(p['active'], 2):>6} {_f(p['estimate'], 2):>8} "
            f"{_f(p['value'], 2):>10}   {ci:<20} {p['n']:>6} {p['n_used']:>6}  {p['status']}"
        )
    lines += [f"  note: {n}" for n in fit["notes"]]
    dec = result.get("decision")
    if dec:
        lines.append("")
        if dec.get("version"):
            lines.append(f"decision: PUBLISHED scoring config version {dec['version']} (now active)")
        elif dec["publish"]:
            lines.append("decision: would publish (run with --publish)")
        else:
            lines.append("decision: NOT published")
        lines += [f"  {'ok  ' if c['passed'] else 'FAIL'} {c['name']}: {c['detail']}" for c in dec["checks"]]
    if result.get("plots"):
        lines.append("plots: " + ", ".join(result["plots"]))
    return "\n".join(lines)
