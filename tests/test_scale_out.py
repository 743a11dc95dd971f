"""The scale-out path, simulated on one machine (docs/scale-out.md): several Dagster processes, each running the
embedding backfill of its own hash buckets with the multiprocess executor, against one shared PostgreSQL
database that holds both the memory and Dagster's run and event-log storage (dagster-postgres).

Launched the way `memory-pipelines run` launches its jobs (`dagster job execute` of the code location, in a
subprocess, with the instance environment of `operations/dagster_home.py`), into a temporary DAGSTER_HOME.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from memory_pipelines.index.owner_indexes import missing_owner_indexes
from memory_pipelines.index.vectors import count_pending
from memory_pipelines.infra.migrate import missing_vector_indexes
from memory_pipelines.infra.settings import Settings
from memory_pipelines.operations.dagster_home import STORAGE_URL_ENV, instance_env
from memory_pipelines.operations.main_job import LAUNCH_TAG, code_location, dagster_command, open_instance
from memory_pipelines.vocabulary import BUCKETS, INDEXED, INDEXED_NAMES
from tests.factories import add_memory

pytestmark = pytest.mark.slow

OWNERS = ("team-north", "team-south", "solo-west")
TASKS, LEARNINGS, MEMORIES = 800, 300, 60  # per owner: 2,400 tasks (over 2,000: a deferred bulk load)
JOB = "embedding_backfill"
SEEDED = ("task", "learning", "fragment")
"""The sources seeded, whose assets the runs select (`-o`): a step is a process, and each costs an import of the
code location, so the empty sources' steps are left out."""
FAKE_MODEL = "fake-hash-384"
SPLIT = BUCKETS // 2
OVERLAP = str(SPLIT - 1)  # a bucket of the first process, run again afterwards


def _seed(url: str) -> None:
    """Tasks and learnings as set-based inserts, memories (one fragment each) through the factories."""
    with psycopg.connect(url) as conn:
        for owner in OWNERS:
            conn.execute(
                "INSERT INTO tasks (owner_id, title, description, task_type, status, created_at)"
                " SELECT %s, 'deploy service ' || i, 'roll out build ' || i || ' to the canary pool', 'dev',"
                " 'completed', now() - make_interval(hours => i) FROM generate_series(1, %s) i",
                (owner, TASKS),
            )
            conn.execute(
                "INSERT INTO learnings (owner_id, title, content, task_type, category, created_at)"
                " SELECT %s, 'lesson ' || i, 'retry the flaky step ' || i || ' with backoff', 'qa', 'insight',"
                " now() - make_interval(hours => i) FROM generate_series(1, %s) i",
                (owner, LEARNINGS),
            )
            for i in range(MEMORIES):
                add_memory(conn, owner, f"{owner} decided to pin dependency {i} after the outage review",
                           project=f"project-{i % 3}")


def _launch(env: dict[str, str], tags: dict[str, str], log: Path, sources: tuple[str, ...]) -> subprocess.Popen:
    """`dagster job execute` of the backfill job, as `memory-pipelines run` launches a job, for some sources."""
    module, workdir = code_location()
    cmd = [*dagster_command(JOB, module, workdir, tags), "-o", ",".join(f"{s}_embeddings" for s in sources)]
    with log.open("w") as out:
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


def _wait(procs: dict[str, subprocess.Popen], logs: dict[str, Path], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    try:
        for name, proc in procs.items():
            try:
                code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                code = f"nothing: still running after {timeout} s"
            assert code == 0, f"{name} exited {code}:\n" + "\n".join(logs[name].read_text().splitlines()[-60:])
    finally:
        for proc in procs.values():  # on a failure or timeout: no dagster process of ours is left behind
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _updates(conn: psycopg.Connection, tables: list[str], expected: dict[str, int]) -> dict[str, int]:
    """n_tup_upd of each table from PostgreSQL's cumulative statistics: every UPDATE of a row counts once.

    A backend reports its counts when it exits at the latest; the runs' processes have exited, so wait
    (a few seconds at most) for their backends to have flushed."""
    deadline = time.monotonic() + 15
    while True:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = dict(conn.execute("SELECT relname, n_tup_upd FROM pg_stat_user_tables WHERE relname = ANY(%s)",
                                 (tables,)).fetchall())
        if all(rows.get(t, 0) >= expected[t] for t in tables) or time.monotonic() > deadline:
            return {t: int(rows.get(t, 0)) for t in tables}
        time.sleep(0.2)


@pytest.mark.timeout(600)  # ~50 s of CPU: each step is a process importing Dagster; slow on a loaded machine
def test_dagster_backfill_fans_out_over_processes_on_one_shared_database(db_url, monkeypatch):
    started = time.monotonic()
    _seed(db_url)
    tmp = Path(tempfile.mkdtemp(prefix="mp-test-scale-"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv(STORAGE_URL_ENV, raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp / "dagster"))  # a temporary instance, never the user's
    settings = Settings(home=tmp / "home", database_url=db_url, embedder="fake")
    env = instance_env(settings)  # dagster.yaml: run and event-log storage in db_url (dagster-postgres)
    env.update(MEMORY_PIPELINES_EMBEDDER="fake", MEMORY_PIPELINES_FAKE_DIM="384", DATABASE_URL=db_url)
    env.pop("MEMORY_PIPELINES_DAGSTER_EXECUTOR", None)  # the default: multiprocess
    assert "postgres" in (tmp / "dagster" / "dagster.yaml").read_text()
    launch = uuid.uuid4().hex
    try:
        with psycopg.connect(db_url) as conn:
            active = {name: count_pending(conn, name, FAKE_MODEL)[1] for name in INDEXED_NAMES}
            assert count_pending(conn, "task", FAKE_MODEL) == (len(OWNERS) * TASKS,) * 2
            assert conn.execute("SELECT count(DISTINCT owner_id) FROM fragments").fetchone()[0] == len(OWNERS)

        # Two processes at once, each a run over half of the buckets (what a backfill's runs or two machines
        # do), then a third run of one bucket the first one already covered.
        halves = {
            "low": {"dagster/asset_partition_range_start": "0", "dagster/asset_partition_range_end": OVERLAP},
            "high": {"dagster/asset_partition_range_start": str(SPLIT),
                     "dagster/asset_partition_range_end": str(BUCKETS - 1)},
        }
        logs = {name: tmp / f"{name}.log" for name in (*halves, "again")}
        seeded = time.monotonic()
        procs = {name: _launch(env, {LAUNCH_TAG: launch, "part": name, **tags}, logs[name], SEEDED)
                 for name, tags in halves.items()}
        _wait(procs, logs, timeout=400)
        _wait({"again": _launch(env, {LAUNCH_TAG: launch, "part": "again", "dagster/partition": OVERLAP},
                                logs["again"], ("task",))}, logs, timeout=150)
        ran = time.monotonic()

        import dagster as dg

        with open_instance(env) as instance:
            records = instance.get_run_records(filters=dg.RunsFilter(tags={LAUNCH_TAG: launch}))
            runs = {r.dagster_run.tags["part"]: r for r in records}
            assert sorted(runs) == ["again", "high", "low"]
            embedded: dict[str, dict[str, int]] = {}
            pids: dict[str, dict[str, set[int]]] = {}
            rebuilt: dict[str, bool] = {}
            for part, record in runs.items():
                run = record.dagster_run
                assert run.status == dg.DagsterRunStatus.SUCCESS, (part, run.status)
                entries = [r.event_log_entry for r in instance.get_records_for_run(run.run_id, limit=100_000).records]
                events = [e.dagster_event for e in entries if e.dagster_event is not None]
                engine = [e for e in events if e.event_type == dg.DagsterEventType.ENGINE_EVENT
                          and "multiprocess executor" in (e.message or "")]
                assert engine, f"run {part} did not use the multiprocess executor"
                steps = {e.step_key: e.pid for e in events if e.event_type == dg.DagsterEventType.STEP_START}
                pids[part] = {"orchestrator": {engine[0].pid}, "steps": set(steps.values())}
                assert set(steps) == {f"{s}_embeddings" for s in (("task",) if part == "again" else SEEDED)}
                # A range run reports the same metadata on each bucket it covers: one per asset and run.
                mats = {e.asset_key.to_user_string(): e.event_specific_data.materialization.metadata
                        for e in events if e.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION}
                embedded[part] = {k: int(m["rows_embedded"].value) for k, m in mats.items()}
                rebuilt[part] = bool(mats["task_embeddings"]["index_rebuilt"].value)
            low, high = runs["low"], runs["high"]
            assert low.start_time < high.end_time and high.start_time < low.end_time  # they ran at once

        # Steps ran in processes of their own: none in its run's orchestrator, and the two runs' orchestrators
        # (two `dagster job execute`) and steps are distinct processes.
        for part, p in pids.items():
            assert p["steps"].isdisjoint(p["orchestrator"]), (part, p)
            assert len(p["steps"]) == (1 if part == "again" else len(SEEDED)), (part, p)
        assert pids["low"]["orchestrator"] != pids["high"]["orchestrator"]
        assert pids["low"]["steps"].isdisjoint(pids["high"]["steps"])

        # Every active row embedded exactly once: the runs' writes add up to the rows (the overlapping run
        # wrote none), PostgreSQL counted exactly one UPDATE per row, and nothing is left pending.
        assert embedded["again"] == {"task_embeddings": 0}
        for name in SEEDED:
            key = f"{name}_embeddings"
            assert embedded["low"][key] + embedded["high"][key] == active[name] > 0, (name, embedded)
        tables = [INDEXED[n].table for n in INDEXED_NAMES if active[n]]
        expected = {INDEXED[n].table: active[n] for n in INDEXED_NAMES if active[n]}
        with psycopg.connect(db_url, autocommit=True) as conn:
            assert _updates(conn, tables, expected) == expected
            assert {n: count_pending(conn, n, FAKE_MODEL)[0] for n in INDEXED_NAMES} == dict.fromkeys(INDEXED_NAMES, 0)
            assert conn.execute("SELECT count(*) FROM tasks WHERE embedded_at IS NULL").fetchone()[0] == 0
            memories = conn.execute("SELECT count(*) FILTER (WHERE embedding_status = 'done'), count(*)"
                                    " FROM memories").fetchone()
            assert memories == (len(OWNERS) * MEMORIES,) * 2  # single-fragment memories: completed with it
            # No owner holds over the exact-scan cap of any table: no graph is wanted, none was built, and none
            # is missing (tests/test_dagster.py and test_owner_indexes.py build owners' graphs under a lower cap).
            assert missing_vector_indexes(conn) == [] and missing_owner_indexes(conn) == {}
        assert not any(rebuilt.values()), rebuilt
        print(f"\nseeded {sum(active.values())} rows in {seeded - started:.1f} s; two concurrent runs and the "
              f"overlap run took {ran - seeded:.1f} s; writes {json.dumps(embedded)}; "
              f"step pids {sorted(pids['low']['steps'] | pids['high']['steps'])}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
