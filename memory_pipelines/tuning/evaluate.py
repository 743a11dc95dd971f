"""Offline replay: re-rank each held-out build's logged candidates with a config and score the ranking.

Scores come from `context.scoring` (the same functions the online builder uses). Metrics per build:
hit@k (k = 1, 3, 5: some used item in the top k), nDCG@10 (binary gains), MRR (1 / rank of the first used
item), and tokens per hit (tokens of the top 5 over used items in the top 5). Ranking metrics average over
builds with at least one used item among the re-ranked candidates; tokens per hit sums over every build.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..context.features import DEFAULT_INPUTS, Ranker, ranker_inputs
from ..context.scoring import PROFILE_SOURCES, ScoringConfig, ranked_floor
from ..vocabulary import CONTEXT_MODES as MODES
from .frames import FEATURES, labelled, resolved_population

HIT_KS = (1, 3, 5)
NDCG_K = 10
TOKENS_K = 5
RANKING_METRICS = ("hit@1", "hit@3", "hit@5", "ndcg@10", "mrr")
METRICS = (*RANKING_METRICS, "tokens_per_hit")
DEFAULT_TOKENS = 50.0

CAVEATS = """What an offline replay can and cannot show:
- Only logged candidates are re-ranked. An item the retrievers never returned cannot be found by any
  config, and (with feedback on injected items only) an item that was never shown has no label, so the
  replay re-ranks the shown items and treats the rest as unknown. A config that would surface good items
  the active one hid is under-rated; the replay is conservative about change.
- Position bias: items shown higher are used more because they were shown higher. Labels from the active
  ranking favour the active config. Correction: builds logged with a randomised order
  (MEMORY_PIPELINES_EXPLORE_RATE, off by default) have labels independent of the active ranking; when the
  held-out set has enough of them their metrics are reported separately as the less biased estimate.
- The replay orders by score alone; online, MMR (λ 0.7) reorders near-duplicates and the token budget
  decides how many items are shown, so hit@k here is a proxy for what reaches the agent.
- The profile (okr) is always injected first online, so it is left out of the re-ranking.
- The replay applies each config's half-lives, mode and source weights, decay floor, weight bounds,
  learned ranker and relevance floors (the last two on builds logged with features, sql/009: a candidate
  below the floors is removed, and counts as not used). A floor lower than the one the log was built with
  replays like that one: the candidates it would admit were never logged.
- `used` is the caller's feedback: builds without feedback are left out, and a caller who reports loosely
  (everything used) makes every config look alike."""


def has_features(cands: pd.DataFrame) -> np.ndarray:
    """Which candidates carry a logged feature dict (builds logged since sql/009)."""
    if FEATURES not in cands:
        return np.zeros(len(cands), dtype=bool)
    return np.array([isinstance(f, dict) for f in cands[FEATURES]], dtype=bool)


def feature_matrix(features: pd.Series | list, names: tuple[str, ...] | list[str] = DEFAULT_INPUTS) -> np.ndarray:
    """The ranker inputs (`features.ranker_inputs`) of each feature dict, one row per candidate."""
    rows = [ranker_inputs(f, names) for f in features]
    return np.asarray(rows, dtype=float).reshape(len(rows), len(names))


def ranker_probability(ranker: Ranker, X: np.ndarray) -> np.ndarray:
    """`Ranker.probability` over a matrix of its inputs (vectorised; the same formula)."""
    z = ranker.intercept + ((X - np.asarray(ranker.mean)) / np.asarray(ranker.scale)) @ np.asarray(ranker.coef)
    return 1.0 / (1.0 + np.exp(-z))


def config_relevance(cands: pd.DataFrame, config: ScoringConfig) -> np.ndarray:
    """Each candidate's relevance under `config`, as `ScoringConfig.relevance` computes it online: the ranker's
    probability when the config has one, else the fused search score. Candidates with logged features read
    both from them (the logged `relevance` is whatever the logging config used); candidates without (builds
    logged before sql/009) keep their logged relevance, which was the fused score. The profile keeps its own."""
    rel = cands["relevance"].to_numpy(dtype=float).copy()
    feat = has_features(cands)
    if not feat.any():
        return rel
    feats = cands[FEATURES].to_numpy()
    scored = feat & ~cands["source"].isin(PROFILE_SOURCES).to_numpy()
    idx = np.flatnonzero(scored)
    if config.ranker is not None:
        rel[idx] = ranker_probability(config.ranker, feature_matrix(feats[idx], config.ranker.features))
    else:
        rel[idx] = [float(feats[i].get("fused", rel[i])) for i in idx]
    return rel


def floor_mask(cands: pd.DataFrame, config: ScoringConfig) -> np.ndarray:
    """Which candidates clear `config`'s relevance floors (`ScoringConfig.admits` on their logged channel
    scores, as `scoring.apply_floor` online); candidates without logged features and the profile pass."""
    keep = np.ones(len(cands), dtype=bool)
    if FEATURES not in cands:
        return keep
    floored: dict[Any, list[tuple[int, float, bool]]] = {}  # per build: (row, fused, clears the floor)
    for i, (f, source, build) in enumerate(zip(cands[FEATURES], cands["source"], cands["retrieval_id"], strict=True)):
        if isinstance(f, dict) and source not in PROFILE_SOURCES:
            passes = config.admits(
                f.get("semantic"), f.get("keyword"), f.get("keyword_evidence"), float(f.get("neighbour_gain") or 0),
                float(f.get("date_prior") or 1.0) > 1.0,
            )
            floored.setdefault(build, []).append((i, float(f.get("fused") or 0.0), passes))
    for rows in floored.values():  # as online: search's order keeps what ranks above a candidate that clears it
        for (i, _, _), k in zip(rows, ranked_floor([r[1] for r in rows], [r[2] for r in rows]), strict=True):
            keep[i] = k
    return keep


def rerank_scores(cands: pd.DataFrame, config: ScoringConfig, relevance: np.ndarray | None = None) -> np.ndarray:
    """Each candidate's score under `config`, computed by scoring.py exactly as the online builder does
    (`relevance` overrides the config's relevance, e.g. a ranker's cross-fitted probabilities)."""
    rel = config_relevance(cands, config) if relevance is None else np.asarray(relevance, dtype=float)
    ages = cands["age_days"].to_numpy(dtype=float)
    decay = np.array(
        [
            config.decay(s, None if math.isnan(a) else float(a))
            for s, a in zip(cands["source"], ages, strict=True)
        ]
    )
    weights = {(s, m): config.weight(s, m) for s, m in set(zip(cands["source"], cands["mode"], strict=True))}
    w = np.array([weights[(s, m)] for s, m in zip(cands["source"], cands["mode"], strict=True)])
    return rel * decay * w


def _tokens(cands: pd.DataFrame) -> np.ndarray:
    """Logged tokens; unknown ones (items not injected) get their source's median."""
    tok = cands["tokens"].astype(float)
    med = tok.groupby(cands["source"]).transform("median")
    overall = tok.median()
    fill = DEFAULT_TOKENS if pd.isna(overall) else float(overall)
    return tok.fillna(med).fillna(fill).to_numpy(dtype=float)


def rank_population(cands: pd.DataFrame, population: str = "auto") -> pd.DataFrame:
    """The candidates a replay re-ranks: labelled ones, without the profile."""
    pop = labelled(cands, resolved_population(cands, population))
    return pop[~pop["source"].isin(PROFILE_SOURCES)]


def per_build_metrics(
    cands: pd.DataFrame, config: ScoringConfig, relevance: np.ndarray | None = None
) -> pd.DataFrame:
    """One row per build: mode, n_used, hit@k, ndcg@10, mrr, tokens@5, hits@5 (cands already populated;
    `relevance`, aligned with `cands`, overrides the config's relevance)."""
    if cands.empty:
        return pd.DataFrame(
            columns=[
                "retrieval_id",
                "mode",
                "n_used",
                "hit@1",
                "hit@3",
                "hit@5",
                "ndcg@10",
                "mrr",
                "tokens@5",
                "hits@5",
            ]
        )
    kept = floor_mask(cands, config)
    df = pd.DataFrame(
        {
            "retrieval_id": cands["retrieval_id"].to_numpy(),
            "mode": cands["mode"].to_numpy(),
            "labelled_used": cands["used"].to_numpy(dtype=bool),
            "used": cands["used"].to_numpy(dtype=bool) & kept,  # a floored item is never shown
            "score": np.where(kept, rerank_scores(cands, config, relevance), -np.inf),
            "logged_rank": cands["rank"].to_numpy(dtype=float),
            "tokens": _tokens(cands),
        }
    )
    df = df.sort_values(
        ["retrieval_id", "score", "logged_rank"], ascending=[True, False, True], kind="mergesort"
    )
    df["pos"] = df.groupby("retrieval_id", sort=False).cumcount() + 1
    pos = df["pos"].to_numpy()
    used = df["used"].to_numpy()
    df["gain"] = np.where(used & (pos <= NDCG_K), 1.0 / np.log2(pos + 1), 0.0)
    df["first"] = np.where(used, pos, np.inf)
    for k in HIT_KS:
        df[f"u@{k}"] = used & (pos <= k)
    df["tok@5"] = np.where(pos <= TOKENS_K, df["tokens"], 0.0)
    g = df.groupby("retrieval_id", sort=True)
    out = pd.DataFrame(
        {
            "mode": g["mode"].first(),
            "n_used": g["labelled_used"].sum(),  # the ideal ranking: every labelled item, floored or not
            "dcg": g["gain"].sum(),
            "first": g["first"].min(),
            "tokens@5": g["tok@5"].sum(),
            "hits@5": g[f"u@{TOKENS_K}"].sum(),
        }
    )
    for k in HIT_KS:
        out[f"hit@{k}"] = g[f"u@{k}"].any().astype(float)
    ideal = np.array([np.sum(1.0 / np.log2(np.arange(2, min(int(n), NDCG_K) + 2))) for n in out["n_used"]])
    out["ndcg@10"] = np.where(ideal > 0, out["dcg"] / np.where(ideal > 0, ideal, 1.0), 0.0)
    out["mrr"] = np.where(np.isfinite(out["first"]), 1.0 / out["first"], 0.0)
    return out.drop(columns=["dcg", "first"]).reset_index()


def summarize(per_build: pd.DataFrame) -> dict[str, Any]:
    """Averages of the ranking metrics over builds with a used item; tokens per hit over all builds."""
    with_use = per_build[per_build["n_used"] > 0]
    hits = float(per_build["hits@5"].sum())
    out: dict[str, Any] = {"n_builds": int(len(per_build)), "n_with_use": int(len(with_use))}
    for m in RANKING_METRICS:
        out[m] = float(with_use[m].mean()) if len(with_use) else None
    out["tokens_per_hit"] = float(per_build["tokens@5"].sum()) / hits if hits else None
    return out


def _paired_delta(
    a: pd.DataFrame, b: pd.DataFrame, metric: str, n_boot: int, rng: np.random.Generator
) -> dict[str, float | None]:
    """Mean of b − a over builds with a used item, and a paired bootstrap 95 % interval."""
    mask = a["n_used"].to_numpy() > 0
    d = b[metric].to_numpy(dtype=float)[mask] - a[metric].to_numpy(dtype=float)[mask]
    if len(d) == 0:
        return {"delta": None, "ci_low": None, "ci_high": None}
    means = d[rng.integers(0, len(d), (n_boot, len(d)))].mean(axis=1) if n_boot else np.array([d.mean()])
    return {
        "delta": float(d.mean()),
        "ci_low": float(np.percentile(means, 2.5)),
        "ci_high": float(np.percentile(means, 97.5)),
    }


def evaluate(
    candidates: pd.DataFrame,
    builds: pd.DataFrame,
    configs: dict[str, ScoringConfig],
    *,
    population: str = "auto",
    baseline: str = "active",
    n_boot: int = 1000,
    seed: int = 0,
    min_randomized: int = 30,
) -> dict[str, Any]:
    """Metrics of each named config on these builds, overall, by mode, on randomised builds, and deltas
    (each config minus `baseline`) with paired bootstrap 95 % intervals for the ranking metrics."""
    pop = resolved_population(candidates, population) if len(candidates) else "injected"
    cands = rank_population(candidates, pop)
    per = {name: per_build_metrics(cands, cfg) for name, cfg in configs.items()}
    randomized_ids = (
        set(builds.loc[builds["randomized"].astype(bool), "retrieval_id"]) if len(builds) else set()
    )
    result: dict[str, Any] = {
        "population": pop,
        "n_builds": int(len(builds)),
        "configs": {},
        "caveats": CAVEATS,
    }
    for name, pb in per.items():
        entry = {
            "overall": summarize(pb),
            "by_mode": {m: summarize(pb[pb["mode"] == m]) for m in MODES if (pb["mode"] == m).any()},
        }
        rb = pb[pb["retrieval_id"].isin(randomized_ids)]
        entry["randomized"] = summarize(rb) if (rb["n_used"] > 0).sum() >= min_randomized else None
        result["configs"][name] = entry
    rng = np.random.default_rng(seed)
    if baseline in per:
        result["deltas"] = {
            name: {m: _paired_delta(per[baseline], pb, m, n_boot, rng) for m in RANKING_METRICS}
            for name, pb in per.items()
            if name != baseline
        }
    return result
