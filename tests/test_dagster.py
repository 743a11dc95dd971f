"""The Dagster code location against the real database with the fake embedder."""

from __future__ import annotations

import os
import warnings
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from assets.context_job import memory_context
from assets.definitions import defs
from assets.embeddings import (
    BUCKETS,
    PROVIDER_POOL,
    embedding_assets,
    embedding_checks,
    nightly_embedding_backfill,
    unembedded_rows_sensor,
)
from assets.keywords import keyword_checks
from assets.materialize import RANGE_TAGS, materialize_all
from assets.resources import MemoryResource
from assets.tuning import weekly_tuning
from memory_pipelines.index.vectors import count_pending
from memory_pipelines.vocabulary import (
    CONTEXT_MODES,
    DEFAULT_BUDGET,
    INDEXED,
    INDEXED_NAMES,
    MAX_BUDGET,
    MIN_BUDGET,
)
from tests.factories import add_capability, add_learning, add_memory, add_task

warnings.filterwarnings("ignore", category=dg.BetaWarning)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
all_checks = [*embedding_checks, *keyword_checks]
LONG = " ".join(f"Sentence {i} explains one more detail of the 部署流水线 rollout." for i in range(120))


class FailingMemoryResource(MemoryResource):
    """Test hook (not in the code location's config): the fake provider fails after `fail_after` texts."""

    fail_after: int | None = None

    def _make_embedder(self, settings):
        embedder = super()._make_embedder(settings)
        embedder.fail_after = self.fail_after
        return embedder


def _resource(db_url: str, fake_fail_after: int | None = None, **kw) -> MemoryResource:
    if fake_fail_after is not None:
        return FailingMemoryResource(database_url=db_url, embedder="fake", fail_after=fake_fail_after, **kw)
    return MemoryResource(database_url=db_url, embedder="fake", **kw)


def _seed(pool, n_tasks: int = 40) -> None:
    with pool.connection() as conn:
        for i in range(n_tasks):
            add_task(conn, "alice", f"task {i} 认证失败 deployment", f"details {i} about rate limits")
        add_learning(conn, "alice", "auth error", "token expired, refresh it", failure_class="AUTH")
        add_learning(conn, "bob", "数据库连接池耗尽", "增加连接池大小并设置超时")
        add_capability(conn, "alice", "deploy", "roll out a service to production")
        add_memory(conn, "alice", LONG, speaker="Alice")


def _pending(pool, model: str) -> dict[str, int]:
    with pool.connection() as conn:
        return {s: count_pending(conn, s, model)[0] for s in INDEXED_NAMES}


def _active(pool) -> dict[str, int]:
    with pool.connection() as conn:
        return {s: count_pending(conn, s, "none")[1] for s in INDEXED_NAMES}


def _meta(result: dg.ExecuteInProcessResult, key: str) -> list[dict]:
    out = []
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        if mat.asset_key.to_user_string() == key:
            out.append({k: getattr(v, "value", v) for k, v in mat.metadata.items()})
    return out


def _one(result: dg.ExecuteInProcessResult, key: str) -> dict:
    """The metadata of one asset in a run (a range run reports the same on each partition it covers)."""
    found = _meta(result, key)
    assert found and all(m == found[0] for m in found)
    return found[0]


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {f"{e.asset_key.to_user_string()}:{e.check_name}": e.passed
            for e in result.get_asset_check_evaluations()}


def _checks_of(asset: str) -> list[dg.AssetChecksDefinition]:
    found = [c for c in all_checks if any(k.asset_key == dg.AssetKey(asset) for k in c.check_keys)]
    assert found
    return found


def test_definitions_load():
    dg.Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    jobs = {"embedding_backfill", "index_maintenance", "memory_context", "weekly_tuning", "retention"}
    assert jobs <= set(repo.job_names)
    assert {s.name for s in repo.schedule_defs} == {"nightly_embedding_backfill", "nightly_maintenance",
                                                   "weekly_tuning", "source_sync_schedule", "daily_retention"}
    assert sorted(s.name for s in repo.sensor_defs) == ["inbox_sensor", "index_after_ingest", "unembedded_rows_sensor"]
    graph = defs.resolve_asset_graph()
    for source in INDEXED_NAMES:
        node = graph.get(dg.AssetKey(f"{source}_embeddings"))
        assert node.partitions_def.get_partition_keys() == [str(b) for b in range(BUCKETS)]
        assert node.backfill_policy is not None
        assert embedding_assets[source].op.pool == PROVIDER_POOL
    blocking = {c.name for chk in embedding_checks for c in chk.check_specs if c.blocking}
    assert blocking == {"embedding_coverage", "embedding_consistency"}


def test_domains_merge_into_the_code_location_and_main_job_is_everything_but_tuning_and_demo():
    from assets import context_job, demo, embeddings, keywords, tuning
    from assets.definitions import all_assets

    for domain in (embeddings, keywords, tuning, demo, context_job):
        dg.Definitions.validate_loadable(domain.defs)  # each domain stands on its own
    main = defs.resolve_job_def("main_job")
    expected = {a.key.to_python_identifier() for a in all_assets if isinstance(a, dg.AssetsDefinition)}
    expected -= {"demo_corpus", "demo_sessions"}  # demo_sessions_job runs it, after main_job
    expected |= {f"{k.asset_key.to_python_identifier()}_{k.name}" for c in all_checks for k in c.check_keys}
    assert set(main.graph.node_dict) == expected
    assert main.executor_def.name == "in_process" and main.partitions_def == embeddings.bucket_partitions
    assert set(defs.resolve_job_def("demo_job").graph.node_dict) == {"demo_corpus"}


def test_code_location_is_named_without_importing_it():
    """In a checkout the code location is `assets/` beside the library (an editable install's
    `memory_pipelines_dagster` copy may be stale); the library never imports it."""
    import subprocess
    import sys
    from pathlib import Path

    from memory_pipelines.operations.main_job import code_location

    root = Path(__file__).resolve().parent.parent
    assert code_location() == ("assets", root)
    probe = ("import sys; from memory_pipelines.operations.main_job import code_location; code_location(); "
             "assert not {'assets', 'memory_pipelines_dagster', 'dagster'} & set(sys.modules), sys.modules")
    subprocess.run([sys.executable, "-c", probe], check=True, cwd=root.parent)


def test_instance_yaml_follows_the_database_and_keeps_a_file_of_ones_own(tmp_path, monkeypatch):
    from memory_pipelines.infra.settings import Settings
    from memory_pipelines.operations.dagster_home import ensure_instance, storage_url

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("MEMORY_PIPELINES_DAGSTER_STORAGE_URL", raising=False)
    home = ensure_instance(Settings(home=tmp_path))
    assert home == tmp_path / "dagster"
    assert f"sqlite:\n    base_dir: \"{home}\"" in (home / "dagster.yaml").read_text()
    # runs at once bounded by the cores: a sensor's eight backfill runs each loading the model flooded two
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == max(2, os.cpu_count())
    ensure_instance(Settings(home=tmp_path, database_url="postgresql://u@h/d"))  # ours: follows the switch
    assert "postgres_url:\n      env: MEMORY_PIPELINES_DAGSTER_STORAGE_URL" in (home / "dagster.yaml").read_text()
    (home / "dagster.yaml").write_text("storage:\n  sqlite:\n    base_dir: /elsewhere\n")  # one's own
    ensure_instance(Settings(home=tmp_path))
    assert "/elsewhere" in (home / "dagster.yaml").read_text()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "explicit"))  # an explicit DAGSTER_HOME wins
    assert ensure_instance(Settings(home=tmp_path)) == tmp_path / "explicit"
    assert storage_url("host=/run/pg port=5433 dbname=mem user=me password=p@ss") == \
        "postgresql+psycopg2://me:p%40ss@/mem?host=%2Frun%2Fpg&port=5433"
    assert storage_url("postgres://me@h/d") == "postgresql+psycopg2://me@h/d"


def test_the_written_instance_yaml_names_the_module_that_writes_it(tmp_path, monkeypatch):
    """Its first line told users to look in pipelines/dagster_home.py, a file no release has; one written so
    by an earlier release is still ours and rewritten."""
    from memory_pipelines.infra.settings import Settings
    from memory_pipelines.operations.dagster_home import ensure_instance

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("MEMORY_PIPELINES_DAGSTER_STORAGE_URL", raising=False)
    config = tmp_path / "dagster" / "dagster.yaml"
    config.parent.mkdir()
    config.write_text("# Written by memory-pipelines (pipelines/dagster_home.py); delete this line to keep your "
                      "edits.\nstorage:\n  sqlite:\n    base_dir: /old\n")
    ensure_instance(Settings(home=tmp_path))
    first, *rest = config.read_text().splitlines()
    named = first.split("(")[1].split(")")[0]
    assert (Path(__file__).resolve().parents[1] / named).is_file(), first
    assert "/old" not in "\n".join(rest)


def test_make_dagster_started_in_the_background_still_stops_on_sigint_and_sigterm(tmp_path):
    """A shell's background job starts with SIGINT ignored; exec kept that for dagster dev, which answers SIGTERM
    with SIGINT's handler, so `make dagster &` ignored both. The launcher gives the command SIGINT's default."""
    import os
    import signal
    import subprocess
    import sys

    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
    env = {**os.environ, "MEMORY_PIPELINES_HOME": str(tmp_path)}
    env.pop("DAGSTER_HOME", None)
    env.pop("DATABASE_URL", None)
    out = subprocess.run(
        [sys.executable, "-m", "memory_pipelines.operations.dagster_home", sys.executable, "-c", probe],
        env=env, capture_output=True, text=True, timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # as a background job starts
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_materialize_all_on_real_database(db_url, pool, fake_embedder):
    _seed(pool)
    res = _resource(db_url)
    out = materialize_all(progress=False, resource=res)
    assert out["success"], out
    assert out["checks"] and all(out["checks"].values()), out["checks"]
    assert _pending(pool, fake_embedder.model_name) == dict.fromkeys(INDEXED_NAMES, 0)
    active = _active(pool)
    assert out["embedded"] == sum(active.values()) and out["failed"] == 0
    assert out["assets"]["task_embeddings"]["model"] == fake_embedder.model_name
    assert out["assets"]["memory_vectors"]["memories_pending"] == 0
    assert out["keyword_rows_indexed"] == sum(active.values())
    again = materialize_all(progress=False, resource=res)  # nothing left to do, everything current
    assert again["success"] and again["embedded"] == 0 and again["keyword_rows_indexed"] == 0
    assert again["assets"]["task_embeddings"]["rows_skipped"] == active["task"]


def test_keyword_weights_are_sklearn_tfidf(db_url, pool):
    from sklearn.feature_extraction.text import TfidfVectorizer

    from assets.keywords import keyword_assets
    from memory_pipelines.text.keywords import keyword_terms

    _seed(pool, n_tasks=12)
    with pool.connection() as conn:
        add_task(conn, "alice", "数据库迁移失败", "回滚数据库迁移并检查锁")
    res = _resource(db_url)
    result = dg.materialize([keyword_assets["task"]], resources={"memory": res}, run_config=QUIET)
    assert _meta(result, "task_keywords")[0]["rows_indexed"] == 13
    src = INDEXED["task"]
    with pool.connection() as conn:
        docs = conn.execute(f"SELECT t.id::text, {src.text_sql} FROM {src.from_sql}"
                            " WHERE t.owner_id = 'alice'"
                            " ORDER BY 1").fetchall()
        stored = {(r[0], r[1]): r[2] for r in conn.execute(
            "SELECT item_id, keyword, weight FROM keywords WHERE source = 'task' AND owner_id = 'alice'")}
    vec = TfidfVectorizer(analyzer=keyword_terms, sublinear_tf=True, smooth_idf=True, norm=None)
    matrix = vec.fit_transform([d[1] for d in docs]).tocoo()
    vocab = vec.get_feature_names_out()
    cells = zip(matrix.row, matrix.col, matrix.data, strict=True)
    expected = {(docs[i][0], vocab[j]): w for i, j, w in cells}
    assert set(expected) == set(stored)
    assert all(abs(stored[k] - expected[k]) <= 1e-4 * max(1.0, expected[k]) for k in expected)
    assert any("数据库" in k[1] for k in stored)  # jieba segmented the Chinese title


def test_keyword_check_warns_on_stale_bm25_statistics_until_the_refresh(db_url, pool):
    """An ingest indexes its rows inline; the stored statistics lag until the keyword asset runs."""
    from assets.keywords import keyword_assets
    from memory_pipelines.index.keywords import index_rows

    _seed(pool, n_tasks=5)
    res = _resource(db_url)
    selection = [keyword_assets["task"], *_checks_of("task_keywords")]
    first = dg.materialize(selection, resources={"memory": res}, run_config=QUIET)
    assert _checks(first)["task_keywords:keyword_freshness"] is True
    with pool.connection() as conn:
        task = add_task(conn, "carol", "rotate the signing key", "before it expires")
        src = INDEXED["task"]
        rows = conn.execute(f"SELECT t.id::text, t.owner_id, {src.text_sql}, t.content_hash FROM {src.from_sql}"
                            " WHERE t.id = %s", (task,)).fetchall()
        with conn.transaction():
            index_rows(conn, "task", rows)
    check_only = dg.materialize(selection, resources={"memory": res}, run_config=QUIET,
                                selection=dg.AssetSelection.checks_for_assets(keyword_assets["task"]))
    evaluation = check_only.get_asset_check_evaluations()[0]
    assert evaluation.passed is False and evaluation.metadata["owners_stale_statistics"].value == 1
    again = dg.materialize(selection, resources={"memory": res}, run_config=QUIET)
    assert _checks(again)["task_keywords:keyword_freshness"] is True
    assert _meta(again, "task_keywords")[0]["owners_stats_refreshed"] == 1


@pytest.mark.slow
def test_partitioned_run_over_all_buckets(db_url, pool, fake_embedder):
    _seed(pool)
    res = _resource(db_url)
    selection = [*embedding_assets.values(), *embedding_checks]
    embedded = dict.fromkeys(INDEXED_NAMES, 0)
    for key in [str(b) for b in range(BUCKETS)]:
        result = dg.materialize(selection, partition_key=key, resources={"memory": res}, run_config=QUIET)
        checks = _checks(result)
        assert result.success and checks and all(checks.values())  # judged on its own bucket only
        for source in INDEXED_NAMES:
            (meta,) = _meta(result, f"{source}_embeddings")
            assert meta["buckets"] == [int(key)] and meta["rows_failed"] == 0
            embedded[source] += meta["rows_embedded"]
    assert embedded == _active(pool)  # every row exactly once across the buckets
    assert _pending(pool, fake_embedder.model_name) == dict.fromkeys(INDEXED_NAMES, 0)


def test_killed_run_resumes_and_embeds_every_row_exactly_once(db_url, pool, fake_embedder):
    _seed(pool, n_tasks=60)
    selection = [embedding_assets["task"], *_checks_of("task_embeddings")]
    failing = _resource(db_url, fake_fail_after=25, batch_size=10)
    first = dg.materialize(selection, resources={"memory": failing}, tags=RANGE_TAGS, run_config=QUIET,
                           raise_on_error=False)
    assert not first.success  # honest: the blocking coverage check failed the run
    checks = _checks(first)
    assert checks["task_embeddings:embedding_coverage"] is False
    meta = _one(first, "task_embeddings")
    # The parallel loaders of a whole-table run each stop at their first failed batch, after 20-25 rows.
    assert 20 <= meta["rows_embedded"] <= 25 and meta["rows_failed"] > 0
    assert meta["rows_pending_after"] == 60 - meta["rows_embedded"]
    assert meta["errors"]
    healthy = _resource(db_url, batch_size=10)
    second = dg.materialize(selection, resources={"memory": healthy}, tags=RANGE_TAGS, run_config=QUIET)
    meta2 = _one(second, "task_embeddings")
    assert second.success and _checks(second) and all(_checks(second).values())
    assert meta2["rows_embedded"] == 60 - meta["rows_embedded"] and meta2["rows_skipped"] == meta["rows_embedded"]
    assert meta["rows_embedded"] + meta2["rows_embedded"] == 60
    assert _pending(pool, fake_embedder.model_name)["task"] == 0


def test_failed_coverage_blocks_downstream(db_url, pool):
    from assets.embeddings import memory_vectors

    _seed(pool, n_tasks=2)
    failing = _resource(db_url, fake_fail_after=0)
    selection = [embedding_assets["fragment"], memory_vectors,
                 *_checks_of("fragment_embeddings")]
    result = dg.materialize(selection, resources={"memory": failing}, tags=RANGE_TAGS, run_config=QUIET,
                            raise_on_error=False)
    assert not result.success
    assert _meta(result, "fragment_embeddings")[0]["rows_failed"] > 0
    assert _meta(result, "memory_vectors") == []  # stopped by the blocking check


def test_sensor_requests_runs_only_for_new_unembedded_rows(db_url, pool, fake_embedder):
    res = _resource(db_url)
    with dg.build_sensor_context(resources={"memory": res}) as ctx:
        first = unembedded_rows_sensor(ctx)
    assert isinstance(first, dg.SensorResult) and not first.run_requests
    cursor = first.cursor
    _seed(pool, n_tasks=10)
    with dg.build_sensor_context(cursor=cursor, resources={"memory": res}) as ctx:
        second = unembedded_rows_sensor(ctx)
    keys = sorted(r.partition_key for r in second.run_requests)
    with pool.connection() as conn:
        expected = sorted({str(r[0]) for r in conn.execute(
            "SELECT abs(hashtext(id::text)::bigint) % 8 FROM tasks")})
    assert keys and set(expected) <= set(keys) and second.cursor != cursor
    assert all(dg.AssetKey("task_embeddings") in r.asset_selection for r in second.run_requests
               if r.partition_key in expected)
    with dg.build_sensor_context(cursor=second.cursor, resources={"memory": res}) as ctx:
        third = unembedded_rows_sensor(ctx)  # same pending rows: nothing new to request
    assert not third.run_requests
    with pool.connection() as conn:
        add_task(conn, "alice", "one more task")
    with dg.build_sensor_context(cursor=third.cursor, resources={"memory": res}) as ctx:
        fourth = unembedded_rows_sensor(ctx)
    assert len(fourth.run_requests) == 1
    assert fourth.run_requests[0].asset_selection == [dg.AssetKey("task_embeddings")]


def test_schedules_evaluate():
    when = datetime(2026, 1, 5, 2, 0, tzinfo=UTC)
    with dg.build_schedule_context(scheduled_execution_time=when) as ctx:
        requests = list(nightly_embedding_backfill(ctx))
    assert [r.partition_key for r in requests] == [str(b) for b in range(BUCKETS)]
    assert len({r.run_key for r in requests}) == BUCKETS
    assert weekly_tuning.cron_schedule == "0 4 * * 1"


def test_context_job_from_run_config(db_url, pool):
    _seed(pool, n_tasks=5)
    res = _resource(db_url)
    dg.materialize([*embedding_assets.values()], resources={"memory": res}, tags=RANGE_TAGS, run_config=QUIET)
    config = {"query": "认证失败 deployment", "owner": "alice", "mode": "debug", "budget": 400}
    result = memory_context.execute_in_process(run_config=config, resources={"memory": res})
    out = result.output_for_node("build_context")
    assert "认证失败 deployment" in out["block"] and out["items"] and out["token_used"] <= 400
    sources = {"task", "learning", "capability", "memory", "event"}
    assert all(item["source"] in sources for item in out["items"])
    outputs = [e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT"]
    md = outputs[0].event_specific_data.metadata
    assert "alice" in md["context"].value and "| source |" in md["items"].value
    with pool.connection() as conn:  # the build was logged like any other
        assert conn.execute("SELECT count(*) FROM retrievals WHERE owner_id = 'alice'").fetchone()[0] == 1


@pytest.mark.parametrize(("field", "value", "message"), [
    ("mode", "dream", "not in enum type ContextMode got dream"),
    ("budget", MIN_BUDGET - 1, f"budget: Input should be greater than or equal to {MIN_BUDGET}"),
    ("budget", MAX_BUDGET + 1, f"budget: Input should be less than or equal to {MAX_BUDGET}"),
    ("query", "", "query: String should have at least 1 character"),
    ("query", "   ", "query: must not be blank"),  # a run was made, then its op failed with a traceback
    ("owner", " \t ", "owner: must not be blank"),  # a run built an empty context for the owner '   '
    ("owner", " team-alpha ", "owner: must not start or end with whitespace"),  # read nobody's rows, no error
    ("owner", "team-alpha\t", "owner: must not start or end with whitespace"),
])
def test_context_job_config_is_refused_before_any_run(field, value, message):
    """The launchpad's config is checked when the run config is resolved: no run, no op, no database."""
    bad = {"query": "x", "owner": "alice", "mode": "debug", "budget": 400, field: value}
    with pytest.raises(dg.DagsterInvalidConfigError, match=message):
        dg.validate_run_config(memory_context, bad)
    with dg.instance_for_test() as instance:
        with pytest.raises(dg.DagsterInvalidConfigError, match=message):
            unreachable = MemoryResource(database_url="postgresql://nobody@127.0.0.1:1/none")
            memory_context.execute_in_process(run_config=bad, instance=instance, resources={"memory": unreachable})
        assert instance.get_runs() == []


def test_context_job_defaults_are_a_valid_example():
    """Every field has a default: the launchpad opens on a config that validates, shown as YAML defaults."""
    from assets.context_job import ContextMode

    resolved = dg.validate_run_config(defs.resolve_job_def("memory_context"))
    config = resolved["ops"]["build_context"]["config"]
    assert config == {"query": config["query"], "owner": "team-alpha", "mode": "execute", "budget": DEFAULT_BUDGET}
    assert config["query"].strip()
    assert [m.value for m in ContextMode] == list(CONTEXT_MODES)
    fields = memory_context.run_config_schema.config_type.fields
    assert set(fields) == {"query", "owner", "mode", "budget"} and not any(f.is_required for f in fields.values())


def test_context_job_default_config_runs_on_the_demo_corpus(db_url, pool):
    res = _resource(db_url)
    # main_job's work: embeddings and the keyword table (the fake embedder's vectors are noise, so the default
    # query's items clear the relevance floor by their keywords).
    materialize_all(progress=False, resource=res)  # loads the demo corpus first
    result = defs.resolve_job_def("memory_context").execute_in_process(resources={"memory": res})
    assert result.success
    out = result.output_for_node("build_context")
    assert out["items"] and 0 < out["token_used"] <= DEFAULT_BUDGET
    with pool.connection() as conn:
        owner, mode = conn.execute("SELECT owner_id, mode FROM retrievals").fetchone()
    assert (owner, mode) == ("team-alpha", "execute")


def test_resource_config_has_no_test_hooks():
    """What the launchpad offers under resources.memory.config: the settings a user has, nothing else."""
    user_fields = {"database_url", "home", "embedder", "batch_size"}
    assert set(MemoryResource.to_config_schema().as_field().config_type.fields) == user_fields
    for job in ("main_job", "embedding_backfill", "memory_context", "weekly_tuning"):
        schema = defs.resolve_job_def(job).run_config_schema.run_config_schema_type
        if "resources" in schema.fields:  # memory_context: a flat config, the resource follows the environment
            memory = schema.fields["resources"].config_type.fields["memory"].config_type.fields["config"]
            assert set(memory.config_type.fields) == user_fields, job


def test_asset_kinds_describe_what_each_asset_uses():
    """Kinds name the storage and the libraries an asset really runs: scikit-learn only where it fits."""
    graph = defs.resolve_asset_graph()
    kinds = {k.to_user_string(): set(graph.get(k).kinds) for k in graph.get_all_asset_keys()}
    for source in INDEXED_NAMES:
        assert kinds[f"{source}_keywords"] == {"postgres", "python"}
        assert kinds[f"{source}_embeddings"] == {"postgres", "pgvector"}
        assert kinds[f"memory_db/{INDEXED[source].table}"] == {"postgres", "table"}
    assert [k for k, v in kinds.items() if "scikitlearn" in v] == ["fitted_scoring_params"]
    assert all(0 < len(v) <= 3 for v in kinds.values()), kinds


@pytest.mark.parametrize("source", ["task"])
def test_other_buckets_are_left_alone(db_url, pool, fake_embedder, source):
    _seed(pool, n_tasks=30)
    with pool.connection() as conn:  # random ids may leave bucket 3 empty: add three fixed ids that are in it
        conn.execute(
            "INSERT INTO tasks (id, owner_id, title, description)"
            " SELECT id, 'alice', 'bucket task ' || id, 'in bucket 3'"
            " FROM (SELECT md5('bucket-' || i)::uuid AS id FROM generate_series(1, 400) AS i) AS c"
            " WHERE abs(hashtext(id::text)::bigint) % 8 = 3 ORDER BY id LIMIT 3")
    res = _resource(db_url)
    dg.materialize([embedding_assets[source]], partition_key="3", resources={"memory": res}, run_config=QUIET)
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT abs(hashtext(id::text)::bigint) % 8, embedding IS NOT NULL FROM tasks").fetchall()
    in_three = [done for bucket, done in rows if bucket == 3]
    elsewhere = [done for bucket, done in rows if bucket != 3]
    assert len(in_three) >= 3 and len(elsewhere) >= 10
    assert all(in_three) and not any(elsewhere)


def test_executor_choice_is_checked():
    from assets.definitions import select_executor
    from memory_pipelines.infra.errors import ConfigError

    assert select_executor("multiprocess").name == "multiprocess"
    with pytest.raises(ConfigError, match="not an executor"):
        select_executor("threads")


def test_bulk_load_defers_the_index_and_the_last_loader_builds_it(db_url, pool, monkeypatch):
    import psycopg

    from assets.embeddings import vector_indexes
    from memory_pipelines.index import owner_indexes
    from memory_pipelines.infra.migrate import index_exists
    from memory_pipelines.vocabulary import LOCK_INDEX

    monkeypatch.setattr(owner_indexes, "EXACT_SCAN_MAX_ROWS", 20)  # alice's 2,100 tasks are over it
    alice = owner_indexes.owner_index_name("tasks", "alice")
    with pool.connection() as conn:
        conn.execute("INSERT INTO tasks (owner_id, title, description) SELECT 'alice', 'bulk task ' || i,"
                     " 'row ' || i FROM generate_series(1, 2100) AS i")
    res = _resource(db_url)
    # Another bucket run is still loading (it holds the loaders' shared lock): this run leaves alice's graph
    # for that one to build.
    with psycopg.connect(db_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock_shared(%s, 0)", (LOCK_INDEX,))
        first = dg.materialize([embedding_assets["task"]], partition_key="0", resources={"memory": res},
                               run_config=QUIET)
        assert _one(first, "task_embeddings")["index_rebuilt"] is False
        with pool.connection() as conn:
            assert not index_exists(conn, alice)
    # The last loader (no other one active) builds it.
    second = dg.materialize([embedding_assets["task"]], partition_key="1", resources={"memory": res},
                            run_config=QUIET)
    assert _one(second, "task_embeddings")["index_rebuilt"] is True
    assert _one(second, "task_embeddings")["indexes_built"] == [alice]
    with pool.connection() as conn:
        assert index_exists(conn, alice)
        conn.execute(f"DROP INDEX {alice}")  # as if a loader had been killed
    healed = dg.materialize([vector_indexes], resources={"memory": res}, run_config=QUIET)
    assert _one(healed, "vector_indexes")["built_now"] == [alice]


def _cli_env(db_url: str, home, **extra: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "MEMORY_PIPELINES_DAGSTER_STORAGE_URL")}
    return {**env, "MEMORY_PIPELINES_HOME": str(home), "DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake",
            **extra}


@pytest.mark.slow
@pytest.mark.timeout(900)  # three jobs: the demo corpus, the main job, the demo's 386 sessions and tuning
def test_run_launches_the_jobs_through_dagster_into_the_shared_instance(db_url, pool, fake_embedder, tmp_path,
                                                                        monkeypatch):
    """`memory-pipelines run`: the demo corpus and the main job, launched by Dagster in a subprocess, recorded
    in the instance under MEMORY_PIPELINES_HOME (postgres storage: DATABASE_URL is set), read back from it."""
    import subprocess
    import sys

    from memory_pipelines.operations.dagster_home import storage_url

    env = _cli_env(db_url, tmp_path)  # db_url is a key=value conninfo: rewritten for Dagster's storage
    proc = subprocess.run([sys.executable, "-m", "memory_pipelines.surfaces.cli", "run"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    active = _active(pool)
    assert _pending(pool, fake_embedder.model_name) == dict.fromkeys(INDEXED_NAMES, 0)
    assert (f" assets materialised, {len(all_checks)} checks (0 failed), "
            f"{sum(active.values())} rows embedded, 0 failed, {sum(active.values())} rows keyword-indexed"
            in proc.stdout), proc.stdout
    assert "demo corpus: tasks" in proc.stdout and "search [team-alpha]" in proc.stdout
    assert "demo sessions: 386 builds with implicit feedback" in proc.stdout, proc.stdout
    assert (tmp_path / "logs" / "dagster-run.log").read_text().count("dagster job execute") == 3

    home = tmp_path / "dagster"
    assert "postgres" in (home / "dagster.yaml").read_text()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("MEMORY_PIPELINES_DAGSTER_STORAGE_URL", storage_url(db_url))  # as `make dagster` sets it
    with dg.DagsterInstance.get() as instance:
        runs = {r.job_name: r for r in instance.get_runs()}
        assert set(runs) == {"demo_job", "main_job", "demo_sessions_job"}
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs.values())
        main = runs["main_job"]
        assert main.tags["dagster/asset_partition_range_end"] == str(BUCKETS - 1)
        records = instance.get_records_for_run(
            main.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
        keys = {r.event_log_entry.asset_materialization.asset_key.to_user_string() for r in records}
        assert {"task_embeddings", "memory_vectors", "vector_indexes", "fragment_keywords"} <= keys
    with pool.connection() as conn:  # Dagster's own tables, in the database DATABASE_URL names
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 3
        labelled = conn.execute("SELECT count(*) FROM retrieval_candidates WHERE used_by = 'implicit'").fetchone()[0]
        assert labelled > 0


@pytest.mark.slow
def test_main_job_records_into_an_explicit_dagster_home(db_url, pool, fake_embedder, tmp_path, monkeypatch):
    """An explicit DAGSTER_HOME wins, and its dagster.yaml (SQLite here) is left as it is."""
    import json

    from memory_pipelines.infra.settings import Settings
    from memory_pipelines.operations.main_job import run_main_job

    _seed(pool, n_tasks=5)
    explicit = tmp_path / "instance"
    explicit.mkdir()
    yaml = f"storage:\n  sqlite:\n    base_dir: {json.dumps(str(explicit))}\n"
    (explicit / "dagster.yaml").write_text(yaml)
    for key, value in _cli_env(db_url, tmp_path / "home", DAGSTER_HOME=str(explicit)).items():
        monkeypatch.setenv(key, value)
    out = run_main_job(Settings.from_env(), load_demo=False)
    assert out["success"] and out["dagster_home"] == str(explicit) and "demo" not in out, out
    assert out["embedded"] == sum(_active(pool).values()) and not out["checks_failed"]
    assert (explicit / "dagster.yaml").read_text() == yaml and (explicit / "history" / "runs.db").exists()
    with dg.DagsterInstance.get() as instance:
        [run] = instance.get_runs()
        assert run.job_name == "main_job" and run.run_id == out["run_id"]


def test_the_runs_sample_contexts_are_shown_not_logged(runtime, capsys):
    """`memory-pipelines run` printed 4 sample context builds (one per mode) and logged them into the retrieval log
    the tuning reads, so each re-run added 4 retrievals and 4 build events (386 -> 390 -> 394 on the demo)."""
    from memory_pipelines.surfaces.cli.run import print_contexts

    with runtime.pool.connection() as conn:
        add_task(conn, "team-alpha", "Rotate the OAuth token before it expires", "auth error after expiry")
    count = "SELECT (SELECT count(*) FROM retrievals) + (SELECT count(*) FROM events)"
    with runtime.pool.connection() as conn:
        before = conn.execute(count).fetchone()[0]
    for _ in range(2):
        print_contexts(runtime, "team-alpha", "auth error after the token expired")
    assert capsys.readouterr().out.count("=== context [team-alpha] mode=") == 8
    with runtime.pool.connection() as conn:
        assert conn.execute(count).fetchone()[0] == before


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("sig", "said"), [("SIGTERM", "stopped (exit 143); committed work is kept"),
                                           ("SIGINT", "interrupted; committed work is kept")])
def test_a_signal_to_run_marks_its_dagster_run_ended_and_says_so(db_url, pool, tmp_path, sig, said):
    """`memory-pipelines run` ran each job with subprocess.run, which kills the job at once when SIGTERM ends the
    command: Dagster never recorded the run's end, so it showed as started for ever, and nothing was printed. The
    job now gets SIGINT and time to mark its run failed, and the command says it stopped. A SIGINT sent to the
    command alone (not to its process group, as a terminal's Ctrl-C is) was not passed on: the run stayed started."""
    import signal
    import subprocess
    import sys
    import time

    cli = [sys.executable, "-m", "memory_pipelines.surfaces.cli"]
    log = tmp_path / "run.err"  # a file, not a pipe: the progress bars would fill a pipe nobody reads yet
    # SIGTERM at its default, as a shell starts a command: a test worker may run with it ignored, which the CLI
    # would then rightly keep (nohup)
    defaults = lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGINT)]  # noqa: E731
    proc = subprocess.Popen([*cli, "run"], env=_cli_env(db_url, tmp_path / "home"), stdout=subprocess.DEVNULL,
                            stderr=log.open("w"), cwd=str(Path(__file__).resolve().parents[1]), preexec_fn=defaults)
    try:
        deadline = time.monotonic() + 240
        started = []
        while not started:  # the demo job's run, recorded in the database DATABASE_URL names
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
            with pool.connection() as conn:
                if conn.execute("SELECT to_regclass('runs')").fetchone()[0]:
                    started = conn.execute("SELECT run_id FROM runs WHERE status = 'STARTED'").fetchall()
        time.sleep(1.0)
        proc.send_signal(getattr(signal, sig))
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            jobs = (tmp_path / "home" / "logs" / "dagster-run.log")
            raise AssertionError(f"still running 60 s after SIGTERM; its stderr ends {log.read_text()[-1500:]!r}; "
                                 f"the job's log ends {jobs.read_text()[-3000:] if jobs.exists() else ''!r}") from None
        assert code == 128 + getattr(signal, sig)
        assert said in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    with pool.connection() as conn:
        statuses = dict(conn.execute("SELECT run_id, status FROM runs").fetchall())
    assert statuses[started[0][0]] in ("FAILURE", "CANCELED"), statuses
    assert "STARTED" not in statuses.values(), statuses
