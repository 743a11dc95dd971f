"""Pure statistics of a retrieval evaluation: per-query scores, bootstrap confidence intervals over queries.

No I/O and no database: `evaluation.py` feeds these the rankings it measured, tests feed them synthetic ones.
Every interval is a percentile bootstrap over queries (resample the queries with replacement, recompute the
mean): `n_resamples` resamples with a fixed `seed`, drawn once per set of queries and shared by every method
and metric, so a difference of two methods is a *paired* bootstrap (the same queries in both, in every
resample). The resamples are a (resamples × queries) count matrix, so all means are a matrix product.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

METRICS = ("recall@5", "recall@10", "ndcg@10")
CHANNELS = ("keyword", "semantic")  # the single channels a fused ranking should beat
FUSED = ("hybrid", "hybrid_no_lift", "hybrid_no_speaker", "hybrid_no_prior", "hybrid_no_dates", "hybrid_weighted",
         "hybrid_rrf")
N_RESAMPLES = 1000
SEED = 0
ALPHA = 0.05  # 95 % intervals


def recall_at(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """|gold ∩ top-k| / |gold|."""
    return len(set(ranked[:k]) & set(gold)) / len(set(gold))


def ndcg_at(ranked: Sequence[str], gold: Sequence[str], k: int = 10) -> float:
    """Binary-relevance nDCG@k."""
    gold_set = set(gold)
    dcg = sum(1 / math.log2(i + 2) for i, item in enumerate(ranked[:k]) if item in gold_set)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold_set), k)))
    return dcg / ideal if ideal else 0.0


def query_scores(ranked: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """Every metric of one ranking of one query."""
    return {"recall@5": recall_at(ranked, gold, 5), "recall@10": recall_at(ranked, gold, 10),
            "ndcg@10": ndcg_at(ranked, gold, 10)}


def resample_counts(n: int, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(n_resamples, n): how often each of n queries is drawn in each resample (rows sum to n). Whole
    numbers held as floats, so the means are one BLAS matrix product."""
    if n == 0:
        return np.zeros((n_resamples, 0))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    counts = np.bincount((idx + n * np.arange(n_resamples)[:, None]).ravel(), minlength=n_resamples * n)
    return counts.reshape(n_resamples, n).astype(np.float64)


def resampled_means(counts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The mean of `values` (per query, optionally × columns) in every resample of `counts`."""
    return counts @ values / max(counts.shape[1], 1)


def percentile_ci(samples: np.ndarray, alpha: float = ALPHA) -> tuple[float, float]:
    """The (alpha/2, 1 - alpha/2) percentiles of bootstrap samples."""
    lo, hi = np.percentile(samples, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


def mean_ci(values: Sequence[float] | np.ndarray, n_resamples: int = N_RESAMPLES, seed: int = SEED,
            alpha: float = ALPHA) -> tuple[float, float, float]:
    """(mean, lo, hi) of per-query values: the percentile bootstrap interval of the mean."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return math.nan, math.nan, math.nan
    boots = resampled_means(resample_counts(v.size, n_resamples, seed), v)
    return (float(v.mean()), *percentile_ci(boots, alpha))


def paired_difference(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                      n_resamples: int = N_RESAMPLES, seed: int = SEED,
                      alpha: float = ALPHA) -> tuple[float, float, float]:
    """(mean of a − b, lo, hi): a and b are two runs' values on the same queries, in the same order; each
    resample draws the same queries for both."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired values need the same queries: {a.shape} against {b.shape}")
    return mean_ci(a - b, n_resamples, seed, alpha)


def versus_best(fused: np.ndarray, channels: Mapping[str, np.ndarray], counts: np.ndarray,
                alpha: float = ALPHA) -> dict[str, object]:
    """mean(fused) − max over channels of mean(channel), with its paired bootstrap interval.

    The best channel is the one with the higher mean on these queries; in each resample the statistic is
    recomputed (the fused mean minus the better channel mean *of that resample*), so choosing the better
    channel is part of what is resampled. A lower bound ≥ 0 says the fused ranking is at least as good as
    the better single channel beyond resampling noise.
    """
    return _versus_best(float(np.mean(fused)), {c: float(np.mean(v)) for c, v in channels.items()},
                        resampled_means(counts, fused), {c: resampled_means(counts, v) for c, v in channels.items()},
                        alpha)


def _versus_best(fused_mean: float, channel_means: Mapping[str, float], boot_fused: np.ndarray,
                 boot_channels: Mapping[str, np.ndarray], alpha: float) -> dict[str, object]:
    best = max(channel_means, key=lambda c: channel_means[c])
    boot_best = np.max(np.stack(list(boot_channels.values())), axis=0)
    lo, hi = percentile_ci(boot_fused - boot_best, alpha)
    return {"best_channel": best, "diff": round(fused_mean - channel_means[best], 4),
            "ci": [round(lo, 4), round(hi, 4)]}


def _category_order(categories: Sequence[str]) -> list[str]:
    """"overall", then the categories in order of first appearance (nothing without queries)."""
    return ["overall", *dict.fromkeys(categories)] if len(categories) else []


def summarise_scores(
    categories: Sequence[str],
    scores: Mapping[str, Mapping[str, Sequence[float] | np.ndarray]],
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    alpha: float = ALPHA,
) -> dict[str, dict[str, dict[str, object]]]:
    """{method: {category: {metric: mean, metric_ci: [lo, hi], n}}} for "overall" and every category.

    `categories[i]` is query i's category, `scores[method][metric][i]` its value. Fused methods (hybrid,
    hybrid_rrf) also get `vs_best_channel: {metric: {best_channel, diff, ci}}` when both channels were run.
    The resamples of a category depend only on its queries (the seed is reused per category).
    """
    cats = np.asarray(categories, dtype=object)
    out: dict[str, dict[str, dict[str, object]]] = {m: {} for m in scores}
    columns = [(m, k) for m, by_metric in scores.items() for k in by_metric]
    matrix = np.column_stack([np.asarray(scores[m][k], dtype=float) for m, k in columns]) if columns else None
    fused = [m for m in scores if m in FUSED] if all(c in scores for c in CHANNELS) else []
    for cat in _category_order(categories):
        mask = np.ones(len(cats), dtype=bool) if cat == "overall" else cats == cat
        n = int(mask.sum())
        values = matrix[mask]
        means = values.mean(axis=0)
        boots = resampled_means(resample_counts(n, n_resamples, seed), values)  # (resamples, columns)
        los, his = np.percentile(boots, [100 * alpha / 2, 100 * (1 - alpha / 2)], axis=0)
        col = {key: j for j, key in enumerate(columns)}
        for method, by_metric in scores.items():  # the old keys first (metrics, n), then the intervals
            row = {metric: round(float(means[col[method, metric]]), 4) for metric in by_metric} | {"n": n}
            for metric in by_metric:
                j = col[method, metric]
                row[f"{metric}_ci"] = [round(float(los[j]), 4), round(float(his[j]), 4)]
            out[method][cat] = row
        for method in fused:
            out[method][cat]["vs_best_channel"] = {
                metric: _versus_best(float(means[col[method, metric]]),
                                     {c: float(means[col[c, metric]]) for c in CHANNELS},
                                     boots[:, col[method, metric]],
                                     {c: boots[:, col[c, metric]] for c in CHANNELS}, alpha)
                for metric in scores[method] if all((c, metric) in col for c in CHANNELS)
            }
    return out


def paired_by_category(
    categories: Sequence[str],
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    alpha: float = ALPHA,
) -> dict[str, dict[str, object]]:
    """{category: {diff: mean(b − a), ci: [lo, hi], a, b, n}} overall and per category (paired bootstrap)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    cats = np.asarray(categories, dtype=object)
    out: dict[str, dict[str, object]] = {}
    for cat in _category_order(categories):
        mask = np.ones(len(cats), dtype=bool) if cat == "overall" else cats == cat
        diff, lo, hi = paired_difference(b[mask], a[mask], n_resamples, seed, alpha)
        out[cat] = {"diff": round(diff, 4), "ci": [round(lo, 4), round(hi, 4)],
                    "a": round(float(a[mask].mean()), 4), "b": round(float(b[mask].mean()), 4), "n": int(mask.sum())}
    return out
