"""The retention asset in Dagster: one prune per materialisation with rows removed and seconds as metadata, its
check, the daily schedule, a bad age refused by name, and no prune in `main_job`."""

from __future__ import annotations

import dagster as dg
import pytest

from assets import retention
from assets.definitions import defs
from assets.resources import MemoryResource
from memory_pipelines.context.history import hit_rates
from tests.factories import add_event
from tests.removal_world import aged_log

QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def _run(db_url: str, *checks: dg.AssetChecksDefinition, **ages: str) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [retention.log_retention, *checks],
        resources={"memory": MemoryResource(database_url=db_url, embedder="fake")},
        run_config={**QUIET, "ops": {"log_retention": {"config": ages}}}, raise_on_error=False)


def _error(result: dg.ExecuteInProcessResult) -> str:
    return result.get_step_failure_events()[0].event_specific_data.error.to_string()


def test_the_retention_asset_prunes_and_reports_what_it_removed(db_url, pool, fake_embedder, fake_openai):
    aged_log(pool, fake_embedder, fake_openai, "alice", log_days=45, alert_days=200)
    history = hit_rates(pool, "alice", days=60)
    result = _run(db_url, candidates="30d", builds="60d", events="90d")
    assert result.success
    meta = result.asset_materializations_for_node("log_retention")[0].metadata
    assert meta["builds_removed"].value == 0 and meta["events_removed"].value == 1
    assert meta["candidates_removed"].value > 0 and meta["rows_removed"].value == meta["candidates_removed"].value + 1
    assert meta["seconds"].value >= 0 and meta["days_rolled_up"].value == 1
    assert hit_rates(pool, "alice", days=60) == history


def test_a_bad_age_fails_the_run_naming_the_field_and_removes_nothing(db_url, pool):
    with pool.connection() as conn:
        add_event(conn, "alice", "alert", {"disk": "full"}, hours=24 * 200)
    result = _run(db_url, events="-3d")
    assert not result.success
    assert "ValidationError: events: must not be negative" in _error(result)
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1


@pytest.mark.parametrize(("field", "age"), [("events", "0"), ("candidates", "12h")])
def test_an_age_under_a_day_fails_the_run_as_at_the_command_line(db_url, pool, field, age):
    with pool.connection() as conn:
        add_event(conn, "alice", "alert", {"disk": "full"}, hours=2)
    result = _run(db_url, **{field: age})
    assert not result.success
    assert f"ValidationError: {field}: must be at least 1 day" in _error(result)
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1


def test_the_check_warns_when_rows_past_their_age_remain(db_url, pool):
    with pool.connection() as conn:
        add_event(conn, "alice", "alert", {"disk": "full"}, hours=24 * 200)
    res = MemoryResource(database_url=db_url, embedder="fake")
    stale = retention.log_within_retention(dg.build_asset_check_context(), res)  # never materialised: env ages
    assert not stale.passed and stale.severity == dg.AssetCheckSeverity.WARN
    result = _run(db_url, retention.log_within_retention)  # the default ages
    assert result.success and result.get_asset_check_evaluations()[0].passed


def test_the_check_judges_by_the_ages_the_run_pruned_with(db_url, pool, monkeypatch):
    """A run keeping events 365 days was warned about a 200-day-old event: the check read the environment's ages."""
    monkeypatch.delenv("MEMORY_PIPELINES_RETAIN_EVENTS", raising=False)  # the environment's default: 90 days
    with pool.connection() as conn:
        add_event(conn, "alice", "alert", {"disk": "full"}, hours=24 * 200)
    result = _run(db_url, retention.log_within_retention, events="365d")
    assert result.success
    [check] = result.get_asset_check_evaluations()
    assert check.passed, check.description
    assert check.metadata["events_age_days"].value == 365
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1


def test_daily_schedule_and_kept_out_of_the_main_job():
    dg.Definitions.validate_loadable(retention.defs)
    assert retention.daily_retention.cron_schedule == "0 5 * * *"
    job = defs.resolve_job_def("retention")
    assert set(job.graph.node_dict) == {"log_retention", "log_retention_log_within_retention"}
    assert "log_retention" not in defs.resolve_job_def("main_job").graph.node_dict


@pytest.mark.parametrize("bad", ["30 days", "abc"])
def test_config_ages_are_durations(db_url, bad):
    result = _run(db_url, candidates=bad)
    assert not result.success
    assert "ValidationError: candidates: must be a duration" in _error(result)
