"""Offline tuning: the fit recovers hidden parameters from a simulated log, publishing is gated, a log
without signal publishes nothing, rollback, report / plots, the real builder's log, and the CLI end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.context.config import activate, active_config, add_config, list_configs
from memory_pipelines.context.exploration import exploration_order, explore_rate
from memory_pipelines.context.log import record_feedback
from memory_pipelines.context.scoring import UNBOUNDED, ScoringConfig
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all
from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.errors import ConfigError, NotFoundError, ValidationError
from memory_pipelines.surfaces.cli import main
from memory_pipelines.tuning.evaluate import evaluate, per_build_metrics, rerank_scores, summarize
from memory_pipelines.tuning.fit import FitOptions, config_from_dict, fit_parameters
from memory_pipelines.tuning.floors import relevance_floor_params
from memory_pipelines.tuning.frames import load_log, time_split
from memory_pipelines.tuning.publish import Gate, decide
from memory_pipelines.tuning.report import format_result, hit_rate_table, write_plots
from memory_pipelines.tuning.run import run_tuning, tune_and_evaluate
from memory_pipelines.tuning.simulate import (
    HIDDEN_DECAY_FLOOR,
    HIDDEN_SOURCE_WEIGHTS,
    SimSpec,
    hidden_source_truth,
    hidden_truth,
    simulate_log,
    write_log_rows,
)
from memory_pipelines.tuning.sparse import poisson_interval
from memory_pipelines.vocabulary import CONTEXT_MODES as MODES
from tests.factories import add_auth_history, add_task
from tests.test_cli import run_cli


def cli_exit(args: list[str]) -> int:
    """The CLI's exit code for `args`, run in this process (argparse's refusals exit through SystemExit)."""
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


def wrong_config() -> ScoringConfig:
    """Deliberately wrong: slow decay where the truth is fast and back to front, weights inverted."""
    truth = hidden_truth()
    return ScoringConfig(
        version=0,
        half_lives={
            "task": 400.0,
            "learning": 5.0,
            "event": 30.0,
            "okr": None,
            "capability": None,
            "memory": None,
        },
        mode_weights={
            s: {m: round(1.0 / w, 3) for m, w in ws.items()} for s, ws in truth.mode_weights.items()
        },
    )


def _geo_ratios(weights: dict[str, float]) -> dict[str, float]:
    g = math.exp(np.mean([math.log(w) for w in weights.values()]))
    return {s: w / g for s, w in weights.items()}


def test_fit_recovers_hidden_half_lives_and_mode_weight_ratios_at_50k_candidates():
    frames = simulate_log(SimSpec(n_builds=2300, seed=11))
    assert 48_000 <= len(frames.candidates) <= 55_000
    truth = hidden_truth()
    fit = fit_parameters(frames.candidates, ScoringConfig(), FitOptions(n_boot=0))
    assert fit.signal and fit.population == "injected"
    for source in ("task", "learning", "event"):
        p = next(p for p in fit.params if p.name == f"half_life.{source}")
        assert p.status == "fitted"
        assert p.value == pytest.approx(truth.half_lives[source], rel=0.2), source
    fitted_cells = 0
    for mode in MODES:
        fitted = {
            p.source: p.value
            for p in fit.params
            if p.kind == "weight" and p.mode == mode and p.status == "fitted"
        }
        assert len(fitted) >= 4, mode
        fitted_cells += len(fitted)
        got = _geo_ratios(fitted)
        want = _geo_ratios({s: truth.weight(s, mode) for s in fitted})
        for s in fitted:
            assert got[s] == pytest.approx(want[s], rel=0.2), (mode, s)
    assert fitted_cells >= 20


def test_fit_reports_sample_sizes_intervals_and_keeps_thin_parameters():
    frames = simulate_log(SimSpec(n_builds=600, seed=5))
    opt = FitOptions(n_boot=15, min_samples=250, min_positives=20)
    fit = fit_parameters(frames.candidates, ScoringConfig(), opt)
    shown = frames.candidates[frames.candidates["injected"]]
    assert any(p.kind == "weight" for p in fit.params)
    assert any(p.status in ("fitted", "clamped") for p in fit.params)
    for p in fit.params:
        if p.kind == "weight":
            cell = shown[(shown["source"] == p.source) & (shown["mode"] == p.mode)]
            assert (p.n, p.n_used) == (len(cell), int(cell["used"].sum()))
        if p.status in ("fitted", "clamped"):
            assert p.ci_low is not None and p.ci_low <= p.value <= p.ci_high, p.name
        if p.status == "thin":
            assert p.value == p.active and (p.n < 250 or p.n_used < 20 or p.n - p.n_used < 20)
    assert any(p.status == "thin" for p in fit.params)
    assert any("too thin" in n for n in fit.notes)
    lo, hi = opt.weight_bounds
    assert all(lo <= w <= hi for ws in fit.config.mode_weights.values() for w in ws.values())


def test_the_profile_is_not_fitted_its_weights_stay_as_configured():
    frames = simulate_log(SimSpec(n_builds=600, seed=5))
    shown = frames.candidates[frames.candidates["injected"]]
    assert (shown["source"] == "okr").sum() > 250  # enough profile rows that a fit would weigh them
    active = ScoringConfig()
    fit = fit_parameters(frames.candidates, active, FitOptions(n_boot=0))
    assert fit.signal
    assert not [p.name for p in fit.params if p.source == "okr"]
    assert fit.config.mode_weights["okr"] == active.mode_weights["okr"]


def _by_name(params: list[dict]) -> dict[str, dict]:
    return {p["name"]: p for p in params}


def _tune(frames: Any, options: FitOptions, active: ScoringConfig | None = None, **evaluation: Any) -> dict:
    """The simulated log split by time (the newest 30 % held out), fitted and evaluated against `active`."""
    train, test = time_split(frames.builds, 0.3)
    return tune_and_evaluate(frames.candidates, frames.builds, train, test, active or ScoringConfig(),
                             options=options, **evaluation)


def test_fit_recovers_hidden_source_weights_and_decay_floor_and_carries_them_to_the_proposal():
    truth = hidden_source_truth()  # the seed's mode weights × task 0.5, memory 2.0; pure exponential decay
    frames = simulate_log(SimSpec(truth=truth, n_builds=1200, seed=27))
    active = ScoringConfig()
    result = _tune(frames, FitOptions(n_boot=30), active, n_boot_eval=200)
    params = _by_name(result["fit"]["params"])
    for source in ("task", "learning", "capability", "memory", "event"):
        p = params[f"source_weight.{source}"]
        want = HIDDEN_SOURCE_WEIGHTS.get(source, 1.0)
        assert p["ci_low"] <= want <= p["ci_high"], (source, p)
        if want == 1.0:  # the interval covers "no change": the active weight stays
            assert p["status"] == "no_change" and p["value"] == 1.0, p
        else:
            assert p["status"] == "fitted" and p["value"] == pytest.approx(want, rel=0.15), p
    assert params["source_weight.memory"]["ci_low"] > 1.5 and params["source_weight.task"]["ci_high"] < 0.75
    floor = params["decay_floor"]  # the truth has no floor, the active config 0.5
    assert floor["status"] == "fitted" and floor["value"] < active.decay_floor
    assert floor["ci_low"] <= HIDDEN_DECAY_FLOOR <= floor["ci_high"] < active.decay_floor
    for ch in ("semantic", "keyword"):  # this log has no channel scores: every floor replays alike, kept
        p = params[f"relevance_floor.{ch}"]
        assert p["status"] == "no_change" and p["value"] == active.relevance_floors[ch]
    proposed = config_from_dict(result["proposed"])
    assert proposed.source_weights == pytest.approx(
        {"task": params["source_weight.task"]["value"], "memory": params["source_weight.memory"]["value"]}
    )
    assert proposed.decay_floor == floor["value"] and proposed.relevance_floors == active.relevance_floors
    lo, hi = proposed.weight_bounds
    for p in result["fit"]["params"]:  # a re-fitted cell keeps its fitted factor: mode weight × source weight
        if p["kind"] == "weight" and p["status"] in ("fitted", "clamped"):
            assert proposed.weight(p["source"], p["mode"]) == pytest.approx(min(max(p["value"], lo), hi))
    text = format_result({**result, "decision": decide(result, Gate(min_train_builds=1))})
    assert "source_weight.memory" in text and "decay_floor" in text and "relevance_floor.semantic" in text
    assert not any(r.startswith("within_bounds") for r in decide(result)["reasons"])
    assert "refitted" not in {r.split(":")[0] for r in decide(result)["reasons"]}


def test_source_weights_reach_modes_whose_cells_are_too_thin():
    truth = hidden_source_truth()
    frames = simulate_log(SimSpec(truth=truth, n_builds=1200, seed=24))
    # cells (source × mode) have ~1/4 of a source's samples: with this threshold sources are fitted, cells not
    result = _tune(frames, FitOptions(n_boot=20, min_samples=1500), n_boot_eval=500)
    params = _by_name(result["fit"]["params"])
    assert all(p["status"] == "thin" for p in result["fit"]["params"] if p["kind"] == "weight")
    assert params["source_weight.memory"]["status"] == "fitted" and params["source_weight.task"]["status"] == "fitted"
    proposed = config_from_dict(result["proposed"])
    assert proposed.mode_weights == ScoringConfig().mode_weights  # kept as they were, times the source weight
    assert proposed.weight("memory", "chat") > ScoringConfig().weight("memory", "chat")
    assert proposed.weight("task", "plan") < ScoringConfig().weight("task", "plan")
    delta = result["evaluation"]["deltas"]["proposed"]["ndcg@10"]
    assert delta["delta"] > 0 and delta["ci_low"] > 0


def test_poisson_interval_matches_the_exact_garwood_bounds():
    for k, (lo, hi) in {0: (0.0, 3.6889), 1: (0.0253, 5.5716), 5: (1.6235, 11.6683), 20: (12.2165, 30.8884)}.items():
        assert poisson_interval(k) == pytest.approx((lo, hi), abs=1e-3), k


def test_a_sparse_source_is_lowered_only_when_its_uses_fall_outside_the_exact_interval():
    """Events rarely used (hidden weight 0.1, too few used items for their own fit) are lowered within
    their Poisson interval, which excludes the active weight; events at their true weight but just as
    thin keep it."""
    over = hidden_source_truth()
    over = replace(over, source_weights={**over.source_weights, "event": 0.1})
    fit = fit_parameters(simulate_log(SimSpec(truth=over, n_builds=400, seed=3)).candidates, ScoringConfig(),
                         FitOptions(n_boot=10))
    ev = _by_name(fit.as_dict()["params"])["source_weight.event"]
    assert ev["n_used"] < 20 and ev["status"] in ("fitted", "clamped"), ev
    assert ev["ci_low"] <= ev["value"] <= ev["ci_high"] < ev["active"], ev
    assert fit.config.source_weights["event"] == ev["value"]
    for seed in (5, 6):
        frames = simulate_log(SimSpec(truth=hidden_source_truth(), n_builds=300, events_per_build=(0, 1), seed=seed))
        fit = fit_parameters(frames.candidates, ScoringConfig(), FitOptions(n_boot=10))
        ev = _by_name(fit.as_dict()["params"])["source_weight.event"]
        assert ev["status"] == "thin" and ev["value"] == ev["active"] and ev["n_used"] < 20, ev


def test_without_signal_no_source_weight_or_floor_changes():
    active = ScoringConfig(source_weights={"event": 0.8}, decay_floor=0.4)
    frames = simulate_log(SimSpec(n_builds=1000, seed=9, no_signal=True, active=active))
    fit = fit_parameters(frames.candidates, active, FitOptions(n_boot=10))
    assert not fit.signal
    rows = [p for p in fit.params if p.kind in ("source_weight", "decay_floor", "relevance_floor")]
    assert {p.kind for p in rows} == {"source_weight", "decay_floor", "relevance_floor"}
    assert all(p.kept_active and p.value == p.active for p in rows)
    assert fit.config.params() == active.params()


def test_replay_metrics_on_a_hand_built_build():
    cands = pd.DataFrame(
        {
            "retrieval_id": ["r1"] * 4,
            "owner_id": "o",
            "source": ["task", "task", "learning", "capability"],
            "item_id": ["a", "b", "c", "d"],
            "relevance": [0.9, 0.8, 0.5, 0.4],
            "age_days": [0.0, 0.0, 0.0, 0.0],
            "mode": "plan",
            "decay": 1.0,
            "mode_weight": 1.0,
            "score": 0.0,
            "rank": [1, 2, 3, 4],
            "mmr_rank": 1.0,
            "tokens": [10.0, 20.0, 30.0, 40.0],
            "injected": True,
            "used": [False, False, True, False],
        }
    )
    flat = ScoringConfig(half_lives={}, mode_weights={})
    row = per_build_metrics(cands, flat).iloc[0]
    assert (row["hit@1"], row["hit@3"], row["hit@5"]) == (0.0, 1.0, 1.0)
    assert row["mrr"] == pytest.approx(1 / 3)
    assert row["ndcg@10"] == pytest.approx(1 / math.log2(4))
    assert summarize(per_build_metrics(cands, flat))["tokens_per_hit"] == pytest.approx(100.0)
    boost = ScoringConfig(half_lives={}, mode_weights={"learning": {"plan": 2.0}}, weight_bounds=(0.05, 5.0))
    row = per_build_metrics(cands, boost).iloc[0]
    assert (row["hit@1"], row["mrr"], row["ndcg@10"]) == (1.0, 1.0, 1.0)


def _floor_log(n_builds: int) -> pd.DataFrame:
    """Builds of one used memory (semantic 0.6) under three unused ones that rank above it on a keyword match
    too weak for the keyword floor (evidence 0.1) and a semantic score of 0.35, just over the 0.30 floor;
    six more unused ones at semantic 0.5 rank below."""
    rows = []
    for b in range(n_builds):
        items = [(0.5, 0.6, None, True)] + [(0.55, 0.35, 0.1, False)] * 3 + [(0.3, 0.5, None, False)] * 6
        for i, (fused, sem, kw, used) in enumerate(items):
            rows.append({
                "retrieval_id": f"r{b}", "owner_id": "o", "source": "memory", "item_id": f"m{b}-{i}",
                "relevance": fused, "age_days": 1.0, "mode": "plan", "decay": 1.0, "mode_weight": 1.0,
                "score": fused, "rank": i + 1, "mmr_rank": float(i + 1), "tokens": 40.0, "injected": True,
                "used": used,
                "features": {"fused": fused, "semantic": sem, "keyword": kw, "keyword_evidence": kw},
            })
    return pd.DataFrame(rows)


def test_a_raised_relevance_floor_is_replayed_as_online_and_trims_only_the_tail():
    cands = _floor_log(120)
    active = ScoringConfig(half_lives={}, mode_weights={})
    row = per_build_metrics(cands, active).iloc[0]
    assert row["ndcg@10"] == pytest.approx(1 / math.log2(5))  # the used memory is 4th
    # The three above it fail a raised floor but rank above a candidate that clears it: they stay, as online.
    raised = ScoringConfig(half_lives={}, mode_weights={}, relevance_floors={"semantic": 0.4, "keyword": 0.25})
    assert per_build_metrics(cands, raised).iloc[0]["ndcg@10"] == pytest.approx(1 / math.log2(5))
    too_high = ScoringConfig(half_lives={}, mode_weights={}, relevance_floors={"semantic": 0.7, "keyword": 0.25})
    row = per_build_metrics(cands, too_high).iloc[0]  # nothing clears it: all floored, the used one never found
    assert (row["n_used"], row["ndcg@10"], row["hit@5"]) == (1, 0.0, 0.0)

    params = {p.name: p for p in relevance_floor_params(cands, active, active, True, FitOptions(n_boot=20))}
    sem, kw = params["relevance_floor.semantic"], params["relevance_floor.keyword"]
    assert sem.status == "no_change" and sem.value == sem.active  # a floor cannot reorder what search ranked
    assert kw.status == "no_change" and kw.value == kw.active
    thin = relevance_floor_params(_floor_log(50), active, active, True, FitOptions(n_boot=5))
    assert {p.status for p in thin} == {"thin"} and all(p.value == p.active for p in thin)


def test_replay_scores_agree_with_the_logged_online_scores():
    frames = simulate_log(SimSpec(n_builds=50, seed=2))
    np.testing.assert_allclose(
        rerank_scores(frames.candidates, ScoringConfig()), frames.candidates["score"], rtol=1e-12
    )


def test_time_split_holds_out_the_newest_builds():
    frames = simulate_log(SimSpec(n_builds=100, seed=3))
    train, test = time_split(frames.builds, 0.25)
    assert test.sum() == 25 and not (train & test).any() and (train | test).all()
    assert frames.builds["created_at"][train].max() < frames.builds["created_at"][test].min()


def _sim_into_db(pool, spec: SimSpec, active: ScoringConfig) -> int:
    version = add_config(pool, active, note="deliberately wrong (test)")
    activate(pool, version)
    spec.config_version = version
    spec.active = active
    write_log_rows(pool, simulate_log(spec))
    return version


@pytest.mark.slow
def test_publishing_improves_held_out_hit5_activates_and_rolls_back(pool, tmp_path):
    old = _sim_into_db(pool, SimSpec(n_builds=1200, seed=7, randomized_rate=0.1), wrong_config())
    result = run_tuning(
        pool, holdout_fraction=0.3, plots_dir=tmp_path, publish=True, options=FitOptions(n_boot=10)
    )
    decision = result["decision"]
    assert decision["publish"], decision["reasons"]
    new = decision["version"]
    assert new and new != old
    overall = result["evaluation"]["configs"]
    assert overall["proposed"]["overall"]["hit@5"] > overall["active"]["overall"]["hit@5"] + 0.01
    assert result["evaluation"]["deltas"]["proposed"]["hit@5"]["ci_low"] > 0
    assert active_config(pool).version == new
    assert active_config(pool).half_lives["task"] == pytest.approx(hidden_truth().half_lives["task"], rel=0.3)
    stored = {r["version"]: r for r in list_configs(pool)}[new]
    assert stored["is_active"] and stored["evaluation"]["deltas"]["proposed"]["hit@5"]["delta"] > 0
    with pool.connection() as conn:
        fitted_on = conn.execute(
            "SELECT fitted_on FROM scoring_configs WHERE version = %s", (new,)
        ).fetchone()[0]
    assert fitted_on["train_builds"] == 840 and fitted_on["base_version"] == old
    published = active_config(pool)  # the fitted source weights and floors are stored in params
    assert published.params() == config_from_dict(result["proposed"]).params()
    assert any(p["kind"] == "source_weight" for p in fitted_on["params"])
    activate(pool, old)  # rollback
    assert active_config(pool).version == old
    assert active_config(pool).params() == wrong_config().params()
    with pytest.raises(NotFoundError):
        activate(pool, 999)


@pytest.mark.slow
def test_a_log_without_signal_publishes_nothing(pool):
    old = _sim_into_db(pool, SimSpec(n_builds=1200, seed=8, no_signal=True), ScoringConfig())
    before = len(list_configs(pool))
    result = run_tuning(pool, publish=True, options=FitOptions(n_boot=10))
    decision = result["decision"]
    assert not decision["publish"] and decision["version"] is None
    assert any(r.startswith("signal") for r in decision["reasons"])
    assert len(list_configs(pool)) == before and active_config(pool).version == old


def test_even_a_forced_proposal_shows_no_improvement_on_a_log_without_signal():
    seed = ScoringConfig(**UNBOUNDED)  # logged and replayed in the truth's own (unbounded) form
    frames = simulate_log(SimSpec(n_builds=1000, seed=9, no_signal=True, active=seed))
    _, test = time_split(frames.builds, 0.3)
    test_ids = set(frames.builds["retrieval_id"][test])
    cands = frames.candidates[frames.candidates["retrieval_id"].isin(test_ids)]
    ev = evaluate(cands, frames.builds[test], {"active": seed, "proposed": hidden_truth()})
    d = ev["deltas"]["proposed"]["hit@5"]
    assert d["ci_low"] < 0.01 and abs(d["delta"]) < 0.05


def test_gate_blocks_thin_data_and_out_of_bounds_parameters():
    frames = simulate_log(SimSpec(n_builds=120, seed=4))
    result = _tune(frames, FitOptions(n_boot=5))
    failed = {r.split(":")[0] for r in decide(result)["reasons"]}
    assert "enough_data" in failed
    result["proposed"]["mode_weights"]["task"]["plan"] = 50.0
    assert "within_bounds" in {r.split(":")[0] for r in decide(result, Gate(min_train_builds=1))["reasons"]}
    result["proposed"]["mode_weights"]["task"]["plan"] = 1.0
    result["proposed"]["params"]["source_weights"] = {"memory": 50.0}
    assert "source_weight.memory=50.0" in decide(result, Gate(min_train_builds=1))["checks"][-1]["detail"]
    result["proposed"]["params"]["source_weights"] = {}
    result["proposed"]["params"]["decay_floor"] = 1.5
    assert "decay_floor=1.5" in decide(result, Gate(min_train_builds=1))["checks"][-1]["detail"]
    result["proposed"]["params"]["decay_floor"] = 0.5
    result["proposed"]["params"]["relevance_floors"] = {"semantic": 1.2, "keyword": 0.3}
    detail = decide(result, Gate(min_train_builds=1))["checks"][-1]["detail"]
    assert "relevance_floor.semantic=1.2" in detail and "keyword" not in detail


def test_hit_rate_report_and_plots(tmp_path):
    frames = simulate_log(SimSpec(n_builds=300, seed=6))
    table = hit_rate_table(frames.candidates)
    shown = frames.candidates[frames.candidates["injected"]]
    assert table["labelled"].sum() == len(shown) and table["used"].sum() == shown["used"].sum()
    assert table["candidates"].sum() == len(frames.candidates)
    assert set(table["age_bucket"]) >= {"<1d", "7-30d", "n/a"} - {"n/a"}
    ok = table[table["labelled"] > 0]
    assert ((ok["ci_low"] <= ok["hit_rate"]) & (ok["hit_rate"] <= ok["ci_high"])).all()
    result = _tune(frames, FitOptions(n_boot=0), n_boot_eval=100)
    paths = write_plots(frames.candidates, result, tmp_path / "plots")
    assert {p.name for p in paths} == {"hit_rate_source_mode.png", "hit_rate_by_age.png", "evaluation.png"}
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_load_log_reads_the_real_builders_log_with_feedback_only(pool, fake_embedder):
    with pool.connection() as conn:
        add_auth_history(conn, "alice", goal="Cut retrieval latency", tasks=8, error="auth error 401")
        add_task(conn, "bob", "login auth error bob", "bob only", days=1)
    embed_all(pool, fake_embedder)
    index_all(pool)
    built = [
        build_memory_context(pool, fake_embedder, "alice", "login auth error", mode)
        for mode in ("plan", "debug", "execute")
    ]
    build_memory_context(pool, fake_embedder, "bob", "login auth error", "plan")
    for r in built[:2]:
        record_feedback(pool, "alice", r.retrieval_id, [r.items[0].id])
    frames = load_log(pool)
    assert set(frames.builds["retrieval_id"]) == {built[0].retrieval_id, built[1].retrieval_id}
    assert set(frames.candidates["owner_id"]) == {"alice"}
    assert frames.candidates["used"].sum() == 2
    np.testing.assert_allclose(
        rerank_scores(frames.candidates, active_config(pool)), frames.candidates["score"], rtol=1e-9
    )
    assert len(load_log(pool, owners=["bob"]).builds) == 0
    assert len(load_log(pool, require_feedback=False).builds) == 4


def test_exploration_is_off_by_default_and_validated():
    assert explore_rate({}) == 0.0
    assert explore_rate({"MEMORY_PIPELINES_EXPLORE_RATE": "0.05"}) == 0.05
    with pytest.raises(ConfigError, match="MEMORY_PIPELINES_EXPLORE_RATE"):
        explore_rate({"MEMORY_PIPELINES_EXPLORE_RATE": "2"})
    assert sorted(exploration_order(7)) == list(range(7))


def _cli(args: list[str], db_url: str) -> subprocess.CompletedProcess:
    return run_cli(args, {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}, timeout=240)


@pytest.mark.slow
def test_cli_tune_publish_list_and_rollback(db_url, tmp_path):
    pool = get_pool(db_url, max_size=2)
    old = _sim_into_db(pool, SimSpec(n_builds=900, seed=12), wrong_config())
    proc = _cli(["tune", "--publish", "--bootstrap", "5", "--plots", str(tmp_path)], db_url)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "hit@5" in out and "ndcg@10" in out and "tokens_per_hit" in out and "half_life.task" in out
    assert f"PUBLISHED scoring config version {old + 1}" in out
    assert (tmp_path / "evaluation.png").exists()
    listed = _cli(["scoring", "list", "--json"], db_url)
    rows = json.loads(listed.stdout)
    assert [r["version"] for r in rows if r["is_active"]] == [old + 1]
    assert _cli(["scoring", "activate", str(old)], db_url).returncode == 0
    assert active_config(pool).version == old
    missing = _cli(["scoring", "activate", "999"], db_url)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr and "999" in missing.stderr
    dry = _cli(["tune", "--json", "--bootstrap", "0"], db_url)
    assert dry.returncode == 0, dry.stderr
    payload = json.loads(dry.stdout)
    assert payload["decision"]["dry_run"] and payload["evaluation"]["configs"]["proposed"]["overall"]["hit@5"]
    assert active_config(pool).version == old


@pytest.mark.slow
def test_cli_tune_refuses_a_bad_look_back_or_plots_folder_before_running(db_url, tmp_path, monkeypatch, capsys):
    """One line naming the flag and exit 2, nothing on stdout (a traceback before, the folder's after the run).
    In process (the CLI's own main): six interpreter starts took 11 s."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("MEMORY_PIPELINES_EMBEDDER", "fake")
    (tmp_path / "a-file").write_text("x")
    cases = [(["--since", days], "--since") for days in ("1e6", "inf", "nan", "0")]
    cases += [(["--plots", str(path)], "--plots") for path in (tmp_path / "a-file", tmp_path / "a-file" / "x")]
    for args, flag in cases:
        code = cli_exit(["tune", "--json", *args])
        out, err = capsys.readouterr()
        assert code == 2 and out == "", (args, out, err)
        assert flag in err and "Traceback" not in err, (args, err)
    with pytest.raises(ValidationError, match="since_days"):
        load_log(get_pool(db_url, max_size=1), since_days=1e9)


def test_an_empty_log_reports_too_little_data(pool, tmp_path):
    result = run_tuning(pool, plots_dir=tmp_path, publish=True, options=FitOptions(n_boot=5))
    assert not result["decision"]["publish"] and result["decision"]["version"] is None
    assert any(r.startswith("enough_data") for r in result["decision"]["reasons"])
    assert "no usable data" in " ".join(result["fit"]["notes"])
    assert "NOT published" in format_result(result)


def test_two_activations_at_once_leave_one_active_and_both_answer(pool, db_url):
    """`scoring activate` deactivated the versions active in its snapshot, then activated its own: two at once (both
    waiting behind a lock on the active row) each missed the version the other had just activated, and the second
    failed on the one-active unique index with a psycopg UniqueViolation traceback (exit 1). Activations now take
    turns on the table's rows: both exit 0 and the last one is the active version."""
    two, three = (add_config(pool, ScoringConfig(), note=f"v{n}") for n in (2, 3))
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    cmd = [sys.executable, "-m", "memory_pipelines.surfaces.cli", "scoring", "activate"]
    with pool.connection() as holder:
        holder.execute("SELECT 1 FROM scoring_configs WHERE is_active FOR UPDATE")
        procs = []
        for n, version in enumerate((two, three), start=1):
            procs.append(subprocess.Popen([*cmd, str(version)], env={**os.environ, **env}, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
            for _ in range(500):
                holder.execute("SELECT pg_stat_clear_snapshot()")  # else the transaction reads its first snapshot
                waiting = holder.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                         " AND wait_event_type = 'Lock'").fetchone()[0]
                if waiting >= n:
                    break
                time.sleep(0.02)
            else:
                raise AssertionError(f"activation {n} never waited behind the lock")
        holder.commit()
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _out, err in results]
    assert [r["version"] for r in list_configs(pool) if r["is_active"]] == [three]
