"""`memory-pipelines run`'s pipeline: the code location's `demo_job`, then its `main_job` over every bucket,
launched through Dagster's own loading of the code location and read back from the shared instance.

The library never imports the code location. It names its module (`code_location()`), runs
`dagster job execute -m <module>.definitions -a defs -j <job>` in a subprocess with DAGSTER_HOME set to the
instance `make dagster` also uses (`dagster_home.py`), tags the runs with one launch id, and then reads
from that instance what they reported: per asset the counts of its materialisation, per check whether it
passed. Without `verbose` the subprocess's output goes to `<MEMORY_PIPELINES_HOME>/logs/dagster-run.log`.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..infra.errors import UserError
from ..infra.settings import Settings, get_settings
from ..vocabulary import BUCKETS
from .dagster_home import instance_env, instance_environ

DEMO_JOB = "demo_job"
MAIN_JOB = "main_job"
DEMO_SESSIONS_JOB = "demo_sessions_job"
INSTALLED_MODULE = "memory_pipelines_dagster"
CHECKOUT_MODULE = "assets"
LAUNCH_TAG = "memory_pipelines/launch"
LOCATION_NAME = "memory_pipelines"  # workspace.yaml's location_name
REPOSITORY_TAG = ".dagster/repository"
"""Runs started by `dagster job execute` carry no code-location origin; this tag (what the webserver sets on
runs it launches) files them under the job of the `memory_pipelines` location in the UI."""
RANGE_TAGS = {"dagster/asset_partition_range_start": "0",
              "dagster/asset_partition_range_end": str(BUCKETS - 1)}
"""One run over every bucket of the partitioned (embedding) assets."""
LOG_NAME = "dagster-run.log"

KEPT_METADATA = ("rows_embedded", "rows_skipped", "rows_failed", "rows_pending_after", "rows_per_second",
                 "model", "rows_indexed", "terms_written", "rows_removed", "memories_done", "memories_pending",
                 "arbitrated", "index_rebuilt", "builds", "built_now", "sessions", "sessions_built",
                 "builds_with_implicit_feedback", "labelled_candidates", "used_implicit", "used_share",
                 "gate_would_pass")
"""Metadata a run summary keeps per asset (besides the demo's `inserted_*` counts)."""


def code_location() -> tuple[str, Path | None]:
    """(package of the Dagster code location, folder to load it from), found without importing it.

    Installed from the wheel it is `memory_pipelines_dagster`, beside `memory_pipelines`. In a checkout it is
    the `assets/` folder beside the `memory_pipelines` package (loaded from the checkout's root, so a
    `memory_pipelines_dagster` an editable install copied earlier is not used, nor anyone's own `assets`).
    """
    if importlib.util.find_spec("dagster") is None:
        raise UserError("the Dagster extra is not installed. Fix: pip install 'memory-pipelines[dagster]' "
                        "(or pip install -e '.[dagster]' in a checkout).")
    library = importlib.util.find_spec("memory_pipelines")
    assert library is not None and library.origin
    root = Path(library.origin).resolve().parent.parent
    installed = importlib.util.find_spec(INSTALLED_MODULE)
    if installed and installed.origin and Path(installed.origin).resolve().parent.parent == root:
        return INSTALLED_MODULE, None
    checkout = importlib.machinery.PathFinder.find_spec(CHECKOUT_MODULE, [str(root)])
    if (checkout and checkout.origin and Path(checkout.origin).resolve() == root / CHECKOUT_MODULE / "__init__.py"
            and (root / CHECKOUT_MODULE / "definitions.py").is_file()):
        return CHECKOUT_MODULE, root
    if installed:
        return INSTALLED_MODULE, None
    raise UserError("the Dagster code location is not installed. Fix: pip install 'memory-pipelines[dagster]' "
                    "(or pip install -e '.[dagster]' in a checkout).")


def dagster_command(job: str, module: str, workdir: Path | None, tags: dict[str, str],
                    config: Path | None = None) -> list[str]:
    """The `dagster job execute` command line of one job of the code location."""
    cmd = [sys.executable, "-m", "dagster", "job", "execute", "-m", f"{module}.definitions", "-a", "defs",
           "-j", job, "--tags", json.dumps(tags)]
    if workdir is not None:
        cmd += ["-d", str(workdir)]
    if config is not None:
        cmd += ["-c", str(config)]
    return cmd


def _value(v: Any) -> Any:
    return getattr(v, "value", v)


def summarise_events(materializations: Iterable, evaluations: Iterable) -> dict[str, Any]:
    """Per asset the counts it reported (the last materialisation of each: a range run reports the same on
    every partition), per check `asset:check` whether it passed."""
    assets: dict[str, dict[str, Any]] = {}
    for mat in materializations:
        assets[mat.asset_key.to_user_string()] = {k: _value(v) for k, v in mat.metadata.items()
                                                  if k in KEPT_METADATA or k.startswith("inserted_")}
    checks = {f"{e.asset_key.to_user_string()}:{e.check_name}": bool(e.passed) for e in evaluations}
    return {"assets": assets, "checks": checks}


def totals(summary: dict[str, Any]) -> dict[str, Any]:
    """Rows embedded / failed / keyword-indexed over every asset, and the failed checks."""
    assets = summary["assets"].values()
    return {
        "embedded": sum(int(a.get("rows_embedded", 0)) for a in assets),
        "failed": sum(int(a.get("rows_failed", 0)) for a in assets),
        "keyword_rows_indexed": sum(int(a.get("rows_indexed", 0)) for a in assets),
        "checks_failed": sorted(k for k, ok in summary["checks"].items() if not ok),
    }


@contextlib.contextmanager
def open_instance(env: dict[str, str]) -> Iterator[Any]:
    """The shared instance, opened as the launched runs saw it (their DAGSTER_HOME and storage URL)."""
    import dagster as dg

    with instance_environ(env), dg.DagsterInstance.get() as instance:
        yield instance


def read_runs(instance: Any, launch_id: str) -> dict[str, dict[str, Any]]:
    """What the runs of one launch reported, by job name: success, run id, status, assets and checks."""
    import dagster as dg

    out: dict[str, dict[str, Any]] = {}
    records = instance.get_run_records(filters=dg.RunsFilter(tags={LAUNCH_TAG: launch_id}), ascending=True)
    for record in records:
        run = record.dagster_run
        events = instance.get_records_for_run(
            run.run_id,
            of_type={dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_CHECK_EVALUATION},
        ).records
        entries = [r.event_log_entry for r in events]
        summary = summarise_events([e.asset_materialization for e in entries if e.asset_materialization],
                                   [e.asset_check_evaluation for e in entries if e.asset_check_evaluation])
        out[run.job_name] = {"success": run.status == dg.DagsterRunStatus.SUCCESS, "run_id": run.run_id,
                             "status": run.status.value, **summary}
    return out


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file ('' when there is none)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


CHILD_STOP_SECONDS = 10.0
"""How long a job's process is given to record its run's end once this one is stopped (within a 30 s kill grace)."""


def _run_child(cmd: list[str], env: dict[str, str], **streams: Any) -> int:
    """Run one `dagster job execute` to its end; its exit code. Should this process be stopped (SIGTERM, SIGINT,
    Ctrl-C), the job gets one SIGINT and CHILD_STOP_SECONDS to mark its run failed: subprocess.run would kill it at
    once, and Dagster would show the run as started for ever. The job runs in a process group of its own, so a
    terminal's Ctrl-C reaches it through this process only, once (a SIGINT sent to this process alone, which it
    did not pass on, left the run started)."""
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, process_group=0, **streams)
    try:
        return proc.wait()
    except BaseException:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(CHILD_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        raise


def run_main_job(settings: Settings | None = None, *, verbose: bool = False, load_demo: bool = True) -> dict[str, Any]:
    """Launch `demo_job` (unless `load_demo` is false), `main_job` over every bucket, then (with the demo)
    `demo_sessions_job` (the demo's simulated agent sessions and the tuning group up to its gate) through
    Dagster, in the shared instance; return what they reported (the shape `memory-pipelines run` prints).

    Never raises on a failed step or check: `success`, the per-check results and `log` say what happened.
    """
    settings = settings or get_settings()
    started = time.perf_counter()
    module, workdir = code_location()
    env = instance_env(settings)
    home = Path(env["DAGSTER_HOME"])
    logs = settings.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / LOG_NAME
    run_config = logs / "dagster-run-config.yaml"
    run_config.write_text("loggers:\n  console:\n    config:\n      log_level: INFO\n")  # not every event
    launch_id = uuid.uuid4().hex
    tags = {LAUNCH_TAG: launch_id, "trigger": "memory-pipelines run",
            REPOSITORY_TAG: f"__repository__@{LOCATION_NAME}"}
    jobs = [(DEMO_JOB, tags)] if load_demo else []
    jobs.append((MAIN_JOB, {**tags, **RANGE_TAGS}))
    if load_demo:
        jobs.append((DEMO_SESSIONS_JOB, tags))
    codes: dict[str, int] = {}
    with open(log_path, "w") as log:
        for job, job_tags in jobs:
            cmd = dagster_command(job, module, workdir, job_tags, run_config)
            if not verbose:
                log.write(f"$ {' '.join(cmd)}\n")
                log.flush()
            codes[job] = _run_child(cmd, env, stdout=None if verbose else log,
                                    stderr=None if verbose else subprocess.STDOUT)
    with open_instance(env) as instance:
        runs = read_runs(instance, launch_id)
    main = runs.get(MAIN_JOB) or {"success": False, "run_id": None, "status": "NOT_STARTED", "assets": {},
                                  "checks": {}}
    out: dict[str, Any] = {**main, **totals(main)}
    out["success"] = bool(main["success"]) and codes.get(MAIN_JOB) == 0
    if load_demo:
        out["demo"] = runs.get(DEMO_JOB) or {"success": False, "run_id": None, "assets": {}, "checks": {}}
        out["demo_sessions"] = runs.get(DEMO_SESSIONS_JOB) or {"success": False, "run_id": None, "assets": {},
                                                              "checks": {}}
    out.update(dagster_home=str(home), module=module, launch_id=launch_id, exit_codes=codes,
               log=None if verbose else str(log_path), seconds=round(time.perf_counter() - started, 2))
    return out
