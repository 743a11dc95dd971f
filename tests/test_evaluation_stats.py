"""The statistics of `memory-pipelines eval`: bootstrap intervals over queries, paired differences, run
comparison from saved rankings. Pure: no database, no model."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from memory_pipelines.evaluation.run import METHODS, Query, compare_runs, format_table, memory_id_for, summarise
from memory_pipelines.evaluation.stats import (
    mean_ci,
    paired_by_category,
    paired_difference,
    resample_counts,
    summarise_scores,
    versus_best,
)

RNG = np.random.default_rng(7)


def test_resamples_are_deterministic_multisets_of_the_queries():
    c = resample_counts(50, 200, seed=3)
    assert c.shape == (200, 50) and (c.sum(axis=1) == 50).all()
    assert np.array_equal(c, resample_counts(50, 200, seed=3))
    assert not np.array_equal(c, resample_counts(50, 200, seed=4))


def test_the_interval_contains_the_mean_and_matches_the_normal_width():
    values = RNG.integers(0, 2, 400).astype(float)  # hit or miss per query
    mean, lo, hi = mean_ci(values)
    assert lo < mean < hi
    expected = 2 * 1.96 * np.sqrt(mean * (1 - mean) / values.size)  # ≈ 0.098 at p = 0.5
    assert abs((hi - lo) - expected) < 0.2 * expected


def test_the_interval_narrows_with_more_queries():
    def width(n: int) -> float:
        _m, lo, hi = mean_ci(np.random.default_rng(1).random(n))
        return hi - lo

    assert width(2000) < width(200) / 2.5 < width(20) / 2.5**2  # ~ 1/sqrt(n): sqrt(10) ≈ 3.2 per step


def test_constant_values_and_edge_sizes():
    assert mean_ci([0.5] * 30) == (0.5, 0.5, 0.5)
    assert mean_ci([1.0]) == (1.0, 1.0, 1.0)
    assert all(np.isnan(x) for x in mean_ci([]))


def test_paired_difference_of_identical_runs_is_exactly_zero():
    a = RNG.random(300)
    assert paired_difference(a, a.copy()) == (0.0, 0.0, 0.0)


def test_a_constant_shift_is_found_exactly_and_pairing_removes_query_difficulty():
    a = RNG.random(300)  # very different queries: unpaired this would be a wide interval
    diff, lo, hi = paired_difference(a + 0.1, a)
    assert diff == pytest.approx(0.1) and lo == pytest.approx(0.1) and hi == pytest.approx(0.1)
    with pytest.raises(ValueError):
        paired_difference(a, a[:-1])


def test_fused_versus_best_channel():
    n = 200
    w = resample_counts(n)
    keyword = RNG.integers(0, 2, n) * 0.2  # weak
    semantic = RNG.random(n) * 0.8
    # Equal to the better channel: the difference is 0 and the interval cannot lie above it.
    same = versus_best(semantic, {"keyword": keyword, "semantic": semantic}, w)
    assert same["best_channel"] == "semantic" and same["diff"] == 0.0
    assert same["ci"][1] == 0.0 and same["ci"][0] <= 0.0
    # Clearly better on every query: the whole interval is above 0.
    better = versus_best(np.minimum(semantic + 0.15, 1.0), {"keyword": keyword, "semantic": semantic}, w)
    assert better["ci"][0] > 0.1 and better["diff"] == pytest.approx(0.15, abs=0.02)
    # Worse than the better channel: the whole interval is below 0.
    worse = versus_best(semantic * 0.5, {"keyword": keyword, "semantic": semantic}, w)
    assert worse["ci"][1] < 0


def _scores(n: int, seed: int = 0) -> tuple[list[str], dict[str, dict[str, np.ndarray]]]:
    rng = np.random.default_rng(seed)
    cats = [("single_hop", "multi_hop", "temporal")[i % 3] for i in range(n)]
    scores = {m: {k: rng.random(n) for k in ("recall@5", "recall@10", "ndcg@10")} for m in METHODS}
    return cats, scores


def test_summary_has_the_old_keys_intervals_and_the_fused_comparison():
    cats, scores = _scores(90)
    out = summarise_scores(cats, scores)
    assert list(out) == list(METHODS)
    assert list(out["keyword"]) == ["overall", "single_hop", "multi_hop", "temporal"]
    row = out["hybrid"]["multi_hop"]
    assert row["n"] == 30 and out["hybrid"]["overall"]["n"] == 90
    for metric in ("recall@5", "recall@10", "ndcg@10"):
        lo, hi = row[f"{metric}_ci"]
        assert lo <= row[metric] <= hi
        assert row[metric] == round(float(np.mean(scores["hybrid"][metric][1::3])), 4)
    assert set(row["vs_best_channel"]) == {"recall@5", "recall@10", "ndcg@10"}
    assert "vs_best_channel" in out["hybrid_rrf"]["overall"]
    assert "vs_best_channel" not in out["semantic"]["overall"] and "vs_best_channel" not in out["context"]["overall"]
    # A category's numbers depend only on its own queries.
    only = summarise_scores(cats[1::3], {m: {k: v[1::3] for k, v in s.items()} for m, s in scores.items()})
    assert only["hybrid"]["multi_hop"] == row
    assert summarise_scores([], {m: {"recall@10": []} for m in METHODS}) == {m: {} for m in METHODS}


def test_summary_costs_well_under_a_second():
    cats, scores = _scores(2000)
    started = time.perf_counter()
    summarise_scores(cats, scores)
    assert time.perf_counter() - started < 1.0


def _query(i: int, category: str, gold: list[str]) -> Query:
    return Query(f"q{i}", "alice", f"question {i}", gold, category, datetime(2024, 1, 1, tzinfo=UTC))


def test_summarise_scores_rankings_as_before_and_the_table_shows_intervals():
    per_query = []
    for i in range(40):
        gold = [f"m{i}", f"m{i + 100}"]
        mids = [memory_id_for(g) for g in gold]
        good, half, none = mids, mids[:1] + ["x"] * 9, ["x"] * 10
        ranks = {"keyword": none if i % 2 else half, "semantic": half, "hybrid": good, "hybrid_rrf": half,
                 "context": good, "hybrid_matched": good}
        per_query.append((_query(i, "single_hop" if i < 20 else "temporal", gold), ranks))
    out = summarise(per_query)
    assert out["semantic"]["overall"]["recall@10"] == 0.5 and out["semantic"]["overall"]["recall@10_ci"] == [0.5, 0.5]
    assert out["keyword"]["overall"]["recall@5"] == 0.25
    assert out["hybrid"]["overall"]["ndcg@10"] == 1.0
    vs = out["hybrid"]["temporal"]["vs_best_channel"]["recall@10"]
    assert vs == {"best_channel": "semantic", "diff": 0.5, "ci": [0.5, 0.5]}
    table = format_table(out)
    assert "single_hop (n=20)" in table and "0.500 [0.500, 0.500]" in table
    assert "hybrid − best channel (semantic), recall@10: +0.500 [0.500, 0.500]" in table
    lo, hi = out["keyword"]["overall"]["recall@10_ci"]
    assert f"0.250 [{lo:.3f}, {hi:.3f}]" in table and lo < 0.25 < hi


def _run(path: Path, rows: list[tuple[str, str, list[str], list[str]]]) -> Path:
    path.write_text("".join(json.dumps({"id": qid, "owner": "o", "category": cat, "query": qid, "gold": gold,
                                        "rankings": {"hybrid": ranked, "keyword": []}}) + "\n"
                            for qid, cat, gold, ranked in rows), encoding="utf-8")
    return path


def test_compare_runs_on_saved_rankings(tmp_path):
    base, new = [], []
    for i in range(30):
        cat = "multi_hop" if i % 2 else "single_hop"
        gold = [f"d{i}a", f"d{i}b"]
        base.append((f"q{i}", cat, gold, [f"d{i}a", "z"]))
        # The new run finds the second evidence turn on multi-hop queries only, and drops q0 (unmatched).
        new.append((f"q{i}", cat, gold, [f"d{i}a", f"d{i}b"] if cat == "multi_hop" else [f"d{i}a", "y"]))
    a = _run(tmp_path / "a.jsonl", base)
    b = _run(tmp_path / "b.jsonl", new[1:] + [("extra", "temporal", ["e"], ["e"])])
    out = compare_runs(a, b, "hybrid")
    assert list(out) == ["overall", "multi_hop", "single_hop"]
    assert out["multi_hop"] == {"diff": 0.5, "ci": [0.5, 0.5], "a": 0.5, "b": 1.0, "n": 15}
    assert out["single_hop"]["diff"] == 0.0 and out["single_hop"]["ci"] == [0.0, 0.0] and out["single_hop"]["n"] == 14
    assert 0 < out["overall"]["ci"][0] < out["overall"]["diff"] < out["overall"]["ci"][1] < 0.5
    same = compare_runs(a, a, "hybrid", metric="ndcg@10")
    assert all(v["diff"] == 0.0 and v["ci"] == [0.0, 0.0] for v in same.values())
    # The direction is B − A.
    assert compare_runs(b, a, "hybrid")["multi_hop"]["diff"] == -0.5


def test_compare_runs_refuses_runs_that_do_not_match(tmp_path):
    a = _run(tmp_path / "a.jsonl", [("q1", "c", ["x"], ["x"])])
    with pytest.raises(ValueError, match="gold"):
        compare_runs(a, _run(tmp_path / "b.jsonl", [("q1", "c", ["y"], ["x"])]), "hybrid")
    with pytest.raises(ValueError, match="share no query"):
        compare_runs(a, _run(tmp_path / "c.jsonl", [("q2", "c", ["x"], ["x"])]), "hybrid")
    with pytest.raises(ValueError, match="method"):
        compare_runs(a, a, "semantic")


def test_paired_by_category_direction_and_counts():
    out = paired_by_category(["a", "b", "a"], [0.0, 1.0, 0.5], [1.0, 1.0, 0.5])
    assert out["a"]["diff"] == 0.5 and out["a"]["n"] == 2 and out["b"]["diff"] == 0.0
