"""The Dagster `tuning` group on a real database with simulated logs: a log with signal and a wrong active
config publishes a new active version through the gate; a log without signal (or no log at all) makes the
gate refuse (a WARN with the reasons, the run still succeeds) and leaves the active version alone; the weekly
schedule targets the group and its check."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from assets.definitions import all_assets, defs
from assets.resources import MemoryResource
from assets.tuning import TUNING_GROUP, publish_gate, tuning_assets, tuning_checks, weekly_tuning
from memory_pipelines.context.config import activate, active_config, add_config, list_configs
from memory_pipelines.context.scoring import ScoringConfig
from memory_pipelines.tuning.simulate import SimSpec, hidden_truth, simulate_log, write_log_rows

warnings.filterwarnings("ignore", category=dg.BetaWarning)

RUN_CONFIG = {
    "loggers": {"console": {"config": {"log_level": "ERROR"}}},
    "ops": {
        "fitted_scoring_params": {"config": {"bootstrap": 10}},
        "scoring_evaluation": {"config": {"bootstrap": 300}},
    },
}
ASSET_KEYS = {
    "retrieval_log_frames",
    "hit_rate_report",
    "fitted_scoring_params",
    "scoring_evaluation",
    "published_scoring_config",
}


def wrong_config() -> ScoringConfig:
    """Far from the simulator's hidden truth: slow task decay, fast learning decay, inverted weights."""
    truth = hidden_truth()
    return ScoringConfig(
        version=0,
        half_lives={**truth.half_lives, "task": 400.0, "learning": 5.0, "event": 30.0},
        mode_weights={s: {m: round(1 / w, 3) for m, w in ws.items()} for s, ws in truth.mode_weights.items()},
    )


def _log(pool, spec: SimSpec, active: ScoringConfig) -> int:
    """Activate `active` as a new version and write a simulated log of builds made with it."""
    version = add_config(pool, active, note="active during the simulated log (test)")
    activate(pool, version)
    spec.active, spec.config_version = active, version
    write_log_rows(pool, simulate_log(spec))
    return version


def _run(db_url: str) -> dg.ExecuteInProcessResult:
    res = MemoryResource(database_url=db_url, embedder="fake")
    return dg.materialize(
        [*tuning_assets, *tuning_checks], resources={"memory": res}, run_config=RUN_CONFIG,
        raise_on_error=False,
    )


def _meta(result: dg.ExecuteInProcessResult) -> dict[str, dict]:
    out = {}
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        out[mat.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return out


def _gate(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    [evaluation] = [e for e in result.get_asset_check_evaluations() if e.check_name == "publish_gate"]
    return evaluation


@pytest.fixture(autouse=True)
def _plots_home(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))


@pytest.mark.slow
def test_signal_log_with_a_wrong_config_publishes_through_the_gate(db_url, pool, tmp_path):
    old = _log(pool, SimSpec(n_builds=400, seed=21), wrong_config())
    result = _run(db_url)
    assert result.success
    gate = _gate(result)
    assert gate.passed and gate.severity == dg.AssetCheckSeverity.WARN
    meta = _meta(result)
    assert set(meta) == ASSET_KEYS

    frames = meta["retrieval_log_frames"]
    assert frames["builds"] == 400 and (frames["train_builds"], frames["held_out_builds"]) == (280, 120)
    assert 0 < frames["used_share_of_injected"] < 1 and frames["labels"] == "injected"

    report = meta["hit_rate_report"]
    assert "| task | plan |" in report["hit_rates"] and report["cells"] > 10
    for name in ("hit_rate_source_mode", "hit_rate_by_age"):
        assert report[f"plot_{name}"].startswith(f"![{name}](data:image/png;base64,iVBORw0KGgo")
        path = Path(report[f"plot_{name}_path"])
        assert path.is_relative_to(tmp_path) and path.read_bytes()[:4] == b"\x89PNG"

    fit = meta["fitted_scoring_params"]
    assert fit["signal"] and fit["parameters_refitted"] > 0 and fit["active_version"] == old
    assert "| half_life.task |" in fit["parameters"]

    ev = meta["scoring_evaluation"]
    assert ev["gate_would_pass"] and ev["hit@5_proposed"] > ev["hit@5_active"]
    assert "| hit@5 |" in ev["overall"] and "| debug |" in ev["by_mode"]
    assert "Position bias" in ev["caveats"] and ev["plot_evaluation"].startswith("![evaluation](data:")

    published = meta["published_scoring_config"]
    new = published["version"]
    assert new != old and published["previous_version"] == old
    assert published["rollback"] == f"memory-pipelines scoring activate {old}"
    now = active_config(pool)
    assert now.version == new
    assert now.half_lives["task"] < 100  # moved from the wrong 400 d towards the hidden 12 d
    with pool.connection() as conn:
        fitted_on, evaluation = conn.execute(
            "SELECT fitted_on, evaluation FROM scoring_configs WHERE version = %s", (new,)
        ).fetchone()
    assert fitted_on["base_version"] == old and fitted_on["train_builds"] == 280
    assert evaluation["checks"] and all(c["passed"] for c in evaluation["checks"])
    assert evaluation["deltas"]["proposed"]["hit@5"]["delta"] > 0


@pytest.mark.slow
def test_no_signal_log_fails_the_gate_and_keeps_the_active_version(db_url, pool):
    old = _log(pool, SimSpec(n_builds=400, seed=22, no_signal=True), ScoringConfig())
    versions = len(list_configs(pool))
    result = _run(db_url)
    assert result.success  # a refusal is the gate's job, not a failed run
    gate = _gate(result)
    assert not gate.passed and gate.severity == dg.AssetCheckSeverity.WARN and "signal" in gate.description
    assert "signal" in gate.metadata["refused_by"].value and "signal" in gate.metadata["reasons"].value
    assert gate.metadata["signal"].value.startswith("FAIL")
    assert gate.metadata["within_bounds"].value.startswith("ok")
    meta = _meta(result)
    assert "published_scoring_config" not in meta
    assert set(meta) == ASSET_KEYS - {"published_scoring_config"}
    assert not meta["fitted_scoring_params"]["signal"] and not meta["scoring_evaluation"]["gate_would_pass"]
    assert len(list_configs(pool)) == versions and active_config(pool).version == old


def test_an_empty_log_reports_too_little_data_and_publishes_nothing(db_url, pool):
    versions = list_configs(pool)
    result = _run(db_url)
    assert result.success
    gate = _gate(result)
    assert not gate.passed and gate.severity == dg.AssetCheckSeverity.WARN and "enough_data" in gate.description
    meta = _meta(result)
    assert meta["retrieval_log_frames"]["builds"] == 0
    assert "No labelled candidates" in meta["hit_rate_report"]["hit_rates"]
    assert meta["scoring_evaluation"]["held_out_builds"] == 0
    assert "published_scoring_config" not in meta
    assert list_configs(pool) == versions


def test_weekly_schedule_runs_the_tuning_group_with_its_gate():
    with dg.build_schedule_context(scheduled_execution_time=datetime(2026, 1, 5, 4, 0, tzinfo=UTC)) as ctx:
        data = weekly_tuning.evaluate_tick(ctx)
    assert len(data.run_requests) == 1
    assert weekly_tuning.cron_schedule == "0 4 * * 1" and weekly_tuning.job_name == "weekly_tuning"
    job = defs.resolve_job_def("weekly_tuning")
    assert ASSET_KEYS | {"scoring_evaluation_publish_gate"} <= set(job.graph.node_dict)
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.asset_keys_for_group(TUNING_GROUP)} == ASSET_KEYS
    [spec] = publish_gate.check_specs
    assert not spec.blocking and spec.asset_key == dg.AssetKey("scoring_evaluation")
    assert not {a.key for a in all_assets} & {dg.AssetKey(k) for k in ASSET_KEYS}  # not in `make run`
