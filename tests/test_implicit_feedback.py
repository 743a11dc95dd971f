"""Implicit feedback: the agent posts what it produced; the injected items it demonstrably used are marked used
(`used_by = 'implicit'`) with the evidence. Explicit feedback wins; a second post marks nothing twice; bad input
(another owner's build, unknown ids, an empty or over-long output) is refused with nothing marked, over the
library, HTTP (real uvicorn), MCP (a real client session) and the CLI (a subprocess). The demo corpus's
simulated sessions label candidates, idempotently, and the tuning gate refuses with a WARN, not a failed run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import warnings

import anyio
import dagster as dg
import httpx
import numpy as np
import psycopg
import pytest
from mcp import Client

from memory_pipelines import Memory
from memory_pipelines.context import implicit
from memory_pipelines.context.log import record_feedback, record_implicit_feedback
from memory_pipelines.demo.corpus import load_demo, read_demo
from memory_pipelines.demo.sessions import load_demo_sessions
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all, finish_memories
from memory_pipelines.infra.auth import create_key
from memory_pipelines.infra.errors import NotFoundError, ValidationError
from memory_pipelines.surfaces.http import create_app
from memory_pipelines.surfaces.mcp import build_server, config_owner
from memory_pipelines.text.keywords import terms
from memory_pipelines.vocabulary import MAX_OUTPUT
from tests.factories import add_goal, add_learning, add_task
from tests.test_api import LiveServer

warnings.filterwarnings("ignore", category=dg.BetaWarning)

STRIPE = ("Auth error: expired token causes 401 from Stripe",
          "Stripe webhooks returned 401 after the OAuth token expired at midnight. Refresh the token five minutes "
          "before expiry and retry the call once; the 401 errors stopped.")
POOL = ("QueuePool limit reached in billing-api",
        "billing-api exhausted its SQLAlchemy QueuePool of 20 connections during the nightly export. Raise "
        "pool_size to 40 and close sessions in the worker's finally block.")
FLAKY = ("Quarantine flaky Playwright checkout test",
         "The checkout end-to-end test fails one run in ten on the shared runner because of an animation. Tag it "
         "quarantine and wait for the network idle event before clicking.")
QUERY = "triage this week: auth error after the token expired, QueuePool limit, flaky checkout test"
USES_STRIPE = ("Looked at our notes: Stripe webhooks returned 401 because the OAuth token expired. I'll refresh "
               "the token five minutes before expiry and retry the call once.")
UNRELATED = "Booked the venue for the team offsite and sent the calendar invite with the agenda."
BAD_OUTPUTS = {"empty": "", "blank": "   \n ", "huge": "x" * (1024 * 1024)}


@pytest.fixture
def built(runtime):
    """Three learnings for alice (embedded, indexed), one build injecting the Stripe one and another
    (ids["other"]); (memory, result, ids)."""
    with runtime.pool.connection() as conn:
        ids = {name: add_learning(conn, "alice", t, c, failure_class="AUTH" if name == "stripe" else None)
               for name, (t, c) in {"stripe": STRIPE, "pool": POOL, "flaky": FLAKY}.items()}
        add_task(conn, "bob", "bob's own task", "nothing to do with alice")
    embed_all(runtime.pool, runtime.embedder)
    index_all(runtime.pool)
    memory = Memory(runtime, llm=None)
    result = memory.context("alice", QUERY, mode="debug", token_budget=2000)
    injected = [it.id for it in result.items]
    assert ids["stripe"] in injected, [it.title for it in result.items]
    others = [i for i in injected if i != ids["stripe"]]
    assert others, "the build must inject an item the outputs do not use"
    ids["other"] = others[0]
    return memory, result, ids


def marks(pool, retrieval_id: str) -> dict[str, tuple]:
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT item_id, used, used_by, evidence FROM retrieval_candidates WHERE retrieval_id = %s AND injected",
            (retrieval_id,),
        ).fetchall()
        state = conn.execute("SELECT feedback_at, implicit_at FROM retrievals WHERE id = %s",
                             (retrieval_id,)).fetchone()
    return {"items": {r[0]: (r[1], r[2], r[3]) for r in rows}, "state": state}


def used_ids(pool, retrieval_id: str) -> set[str]:
    return {i for i, (u, _by, _ev) in marks(pool, retrieval_id)["items"].items() if u}


# -- the pure scoring ------------------------------------------------------------------------------------------

def test_lexical_overlap_counts_distinctive_terms_not_the_query():
    distinct = implicit.distinctive_terms(STRIPE[0] + " " + STRIPE[1], QUERY)
    assert "stripe" in distinct and "401" in distinct
    assert not {"auth", "error", "token", "expired"} & set(distinct)  # the query's words prove nothing
    share, matched = implicit.lexical_overlap(distinct, implicit.output_terms(USES_STRIPE))
    assert share >= implicit.IMPLICIT_THRESHOLD and {"stripe", "401", "refresh"} <= set(matched)
    share, matched = implicit.lexical_overlap(distinct, implicit.output_terms(UNRELATED))
    assert share == 0 and matched == []


def test_chinese_terms_and_the_glossary_bridge_languages():
    distinct = implicit.distinctive_terms("连接池耗尽：billing-api 的连接池在夜间导出时耗尽", "导出失败")
    assert "连接池" in distinct
    zh_output = implicit.output_terms("把连接池调大到 40，并在 finally 里关闭会话。")
    connection = terms("connection")[0]  # keyword terms are stems: "connect"
    assert "连接池" in zh_output and connection in zh_output  # 连接池 → connection pool
    assert implicit.lexical_overlap([connection, "pool"], zh_output)[1] == [connection, "pool"]


def test_semantic_overlap_takes_the_best_chunk_above_the_floor():
    item = np.array([1.0, 0.0], dtype=np.float32)
    chunks = np.array([[0.0, 1.0], [0.96, 0.28]], dtype=np.float32)
    sem, cos = implicit.semantic_overlap(item, chunks, [0.8, 0.8])
    assert cos == pytest.approx(0.96) and sem == pytest.approx((0.96 - 0.8) / 0.2)
    assert implicit.semantic_overlap(item, chunks[:1], [0.8]) == (0.0, 0.0)
    assert implicit.decide(0.1, implicit.IMPLICIT_THRESHOLD) and not implicit.decide(0.1, 0.1)


def test_a_long_output_is_chunked():
    long = " ".join([UNRELATED] * 80 + [USES_STRIPE])
    assert len(implicit.output_chunks(long)) > 1


# -- the library ----------------------------------------------------------------------------------------------

def test_a_used_item_is_marked_implicit_with_its_evidence(built, runtime):
    memory, result, ids = built
    out = memory.implicit_feedback("alice", result.retrieval_id, USES_STRIPE)
    assert out["marked"] == 1 and out["used"] == 1 and not out["explicit_feedback"]
    got = marks(runtime.pool, result.retrieval_id)
    used, by, ev = got["items"][ids["stripe"]]
    assert used and by == "implicit"
    assert ev["used"] and max(ev["semantic"], ev["lexical"]) >= ev["threshold"] == implicit.IMPLICIT_THRESHOLD
    assert {"stripe", "401"} <= set(ev["matched_terms"]) and 0 <= ev["semantic"] <= 1
    for other in set(got["items"]) - {ids["stripe"]}:
        used, by, ev = got["items"][other]
        assert not used and by is None and ev is not None and not ev["used"]  # evidence kept for unused too
    assert got["state"][0] is not None and got["state"][1] is not None  # counts as feedback for the tuner
    history = memory.build("alice", result.retrieval_id)
    assert {i["id"]: i["used_by"] for i in history["items"] if i["used"]} == {ids["stripe"]: "implicit"}


def test_an_unrelated_output_marks_nothing(built, runtime):
    memory, result, _ids = built
    out = memory.implicit_feedback("alice", result.retrieval_id, UNRELATED)
    assert out["marked"] == 0 and out["used"] == 0
    assert used_ids(runtime.pool, result.retrieval_id) == set()
    assert all(not i["evidence"]["used"] for i in out["items"] if i["evidence"])


def test_posted_twice_marks_once(built, runtime):
    memory, result, ids = built
    assert memory.implicit_feedback("alice", result.retrieval_id, USES_STRIPE)["marked"] == 1
    before = marks(runtime.pool, result.retrieval_id)
    again = memory.implicit_feedback("alice", result.retrieval_id, USES_STRIPE)
    assert again["marked"] == 0 and again["used"] == 1
    assert marks(runtime.pool, result.retrieval_id) == before


def test_explicit_after_implicit_overrides(built, runtime):
    memory, result, ids = built
    memory.implicit_feedback("alice", result.retrieval_id, USES_STRIPE)
    assert record_feedback(runtime.pool, "alice", result.retrieval_id, [ids["other"]]) == 1
    got = marks(runtime.pool, result.retrieval_id)["items"]
    assert {i for i, (u, _b, _e) in got.items() if u} == {ids["other"]}
    assert {b for _u, b, _e in got.values()} == {"explicit"}


def test_implicit_after_explicit_changes_nothing(built, runtime):
    memory, result, ids = built
    record_feedback(runtime.pool, "alice", result.retrieval_id, [ids["other"]])
    before = marks(runtime.pool, result.retrieval_id)
    out = memory.implicit_feedback("alice", result.retrieval_id, USES_STRIPE)
    assert out["explicit_feedback"] and out["marked"] == 0
    assert marks(runtime.pool, result.retrieval_id) == before
    assert used_ids(runtime.pool, result.retrieval_id) == {ids["other"]}


def test_bad_input_marks_nothing(built, runtime):
    memory, result, _ids = built
    rid = result.retrieval_id
    before = marks(runtime.pool, rid)
    with pytest.raises(NotFoundError):
        memory.implicit_feedback("bob", rid, USES_STRIPE)  # another owner's build
    for unknown in ("00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        with pytest.raises(NotFoundError):
            memory.implicit_feedback("alice", unknown, USES_STRIPE)
    for output in (*BAD_OUTPUTS.values(), None, 42, "bad \x00 nul"):
        with pytest.raises(ValidationError) as err:
            record_implicit_feedback(runtime.pool, runtime.embedder, "alice", rid, output)
        assert err.value.field == "output"
    assert marks(runtime.pool, rid) == before and before["state"] == (None, None)


# -- the surfaces ---------------------------------------------------------------------------------------------

def test_http_endpoint_marks_and_refuses_bad_input(built, runtime):
    memory, result, ids = built
    rid = result.retrieval_id
    keys = {o: create_key(runtime.pool, o, name="test")[1] for o in ("alice", "bob")}
    url = "/api/brain/memory/feedback/implicit"
    with LiveServer(create_app(memory)) as srv:
        alice = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=60)
        bob = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {keys['bob']}"}, timeout=60)
        assert httpx.post(srv.url + url, json={"retrieval_id": rid, "output": USES_STRIPE}).status_code == 401
        assert bob.post(url, json={"retrieval_id": rid, "output": USES_STRIPE}).status_code == 404
        missing = alice.post(url, json={"retrieval_id": "00000000-0000-0000-0000-000000000000",
                                        "output": USES_STRIPE})
        assert missing.status_code == 404
        for output in BAD_OUTPUTS.values():
            r = alice.post(url, json={"retrieval_id": rid, "output": output})
            assert r.status_code == 422 and "output" in r.text, (r.status_code, r.text[:200])
        assert alice.post(url, json={"retrieval_id": rid}).status_code == 422
        assert used_ids(runtime.pool, rid) == set()
        ok = alice.post(url, json={"retrieval_id": rid, "output": USES_STRIPE})
        assert ok.status_code == 200, ok.text
        body = ok.json()
        assert body["marked"] == 1 and body["used"] == 1
        [item] = [i for i in body["items"] if i["used"]]
        assert item["id"] == ids["stripe"] and item["used_by"] == "implicit" and item["evidence"]["matched_terms"]
        again = alice.post(url, json={"retrieval_id": rid, "output": USES_STRIPE}).json()
        assert again["marked"] == 0 and again["used"] == 1
        build = alice.get(f"/api/brain/memory/builds/{rid}").json()
        assert [i["used_by"] for i in build["items"] if i["used"]] == ["implicit"]
    assert used_ids(runtime.pool, rid) == {ids["stripe"]}


def test_with_the_embedder_down_the_semantic_measures_are_null_not_zero(built, runtime):
    """With the embedding provider down, implicit feedback stored semantic 0.0 and cosine 0.0 on every item: a
    measured "no overlap at all", which the calibration read as such. They are now null (not measured), in the
    answer and the log; lexical overlap still decides."""
    memory, result, ids = built
    rid = result.retrieval_id
    runtime.embedder.fail_after = runtime.embedder.texts_embedded  # the provider is down from now on
    key = create_key(runtime.pool, "alice", name="test")[1]
    with LiveServer(create_app(memory)) as srv:
        alice = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        ok = alice.post("/api/brain/memory/feedback/implicit", json={"retrieval_id": rid, "output": USES_STRIPE})
    assert ok.status_code == 200, ok.text
    body = ok.json()
    assert body["degraded"] and body["marked"] == 1, body
    evs = [i["evidence"] for i in body["items"]]
    assert evs and all(e["semantic"] is None and e["cosine"] is None for e in evs), evs
    logged = [ev for _u, _by, ev in marks(runtime.pool, rid)["items"].values() if ev is not None]
    assert logged and all(ev["semantic"] is None and ev["cosine"] is None for ev in logged), logged
    assert used_ids(runtime.pool, rid) == {ids["stripe"]}  # lexical overlap alone decided


def test_an_upper_case_retrieval_id_is_answered_as_logged(built, runtime):
    """A retrieval id sent in upper case (PostgreSQL reads it fine) was echoed upper case by both feedback
    answers, so the caller held an id that matched no build it listed. Both now answer the id as logged."""
    memory, result, ids = built
    rid = result.retrieval_id
    key = create_key(runtime.pool, "alice", name="test")[1]
    with LiveServer(create_app(memory)) as srv:
        alice = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        implicit_answer = alice.post("/api/brain/memory/feedback/implicit",
                                     json={"retrieval_id": rid.upper(), "output": USES_STRIPE})
        explicit_answer = alice.post("/api/brain/memory/feedback",
                                     json={"retrieval_id": rid.upper(), "used_ids": [ids["stripe"]]})
    assert implicit_answer.status_code == explicit_answer.status_code == 200, (implicit_answer.text,
                                                                               explicit_answer.text)
    assert implicit_answer.json()["retrieval_id"] == explicit_answer.json()["retrieval_id"] == rid
    assert rid == rid.lower() and used_ids(runtime.pool, rid) == {ids["stripe"]}


def test_the_answer_lists_the_builds_injected_items_not_its_profile_goals(runtime):
    """The implicit answer's items listed the profile's goals too (a plan build with two goals and six items
    answered eight items, two of source okr with evidence null; the CLI said "1 used of 8 injected") where the
    context answer, the build's injected_count and the hit rates count six: the goals are never marked. Now the
    items are the context answer's, in block order."""
    with runtime.pool.connection() as conn:
        add_goal(conn, "alice", "Cut memory retrieval latency below 100 ms", priority=0)
        add_goal(conn, "alice", "Ship the billing dashboard")
        add_learning(conn, "alice", *STRIPE, failure_class="AUTH")
        add_learning(conn, "alice", *POOL)
    embed_all(runtime.pool, runtime.embedder)
    index_all(runtime.pool)
    key = create_key(runtime.pool, "alice", name="test")[1]
    with LiveServer(create_app(Memory(runtime, llm=None))) as srv:
        alice = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        ctx = alice.post("/api/brain/memory/context", json={"query": QUERY, "mode": "plan"}).json()
        assert ctx["block"].startswith("## 当前 OKR") and ctx["items"], ctx["block"]
        body = alice.post("/api/brain/memory/feedback/implicit",
                          json={"retrieval_id": ctx["retrieval_id"], "output": USES_STRIPE}).json()
        build = alice.get(f"/api/brain/memory/builds/{ctx['retrieval_id']}").json()
    assert [(i["source"], i["id"]) for i in body["items"]] == [(i["source"], i["id"]) for i in ctx["items"]]
    assert len(body["items"]) == build["injected_count"] and all(i["evidence"] for i in body["items"])


def test_explicit_and_implicit_feedback_at_once_never_deadlock_and_explicit_wins(built, runtime, db_url):
    """Implicit feedback locks the build, then its candidates; explicit feedback updated the candidates first and
    the build last. Posted together (the implicit post waiting for the build's lock, the explicit one arriving
    meanwhile), each waited for the other: PostgreSQL broke the deadlock by failing one, and its feedback was
    lost. Explicit feedback now locks the build first too: both answer 200 and the explicit marks stand."""
    memory, result, ids = built
    rid = result.retrieval_id
    key = create_key(runtime.pool, "alice", name="test")[1]
    answers: dict[str, httpx.Response] = {}

    def waiting(n: int) -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            for _ in range(500):
                if conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                " AND wait_event_type = 'Lock'").fetchone()[0] >= n:
                    return
                time.sleep(0.02)
        raise AssertionError(f"{n} requests never waited for the build's lock")

    with LiveServer(create_app(memory)) as srv, psycopg.connect(db_url) as holder:
        alice = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        holder.execute("SELECT 1 FROM retrievals WHERE id = %s FOR UPDATE", (rid,))
        posts = {"implicit": ("/api/brain/memory/feedback/implicit", {"retrieval_id": rid, "output": USES_STRIPE}),
                 "explicit": ("/api/brain/memory/feedback", {"retrieval_id": rid, "used_ids": [ids["other"]]})}
        threads = []
        for n, (name, (url, body)) in enumerate(posts.items(), start=1):
            def post(name=name, url=url, body=body) -> None:
                answers[name] = alice.post(url, json=body)
            threads.append(threading.Thread(target=post))
            threads[-1].start()
            waiting(n)
        holder.commit()
        for t in threads:
            t.join(60)
    assert {n: r.status_code for n, r in answers.items()} == {"implicit": 200, "explicit": 200}, \
        {n: r.text[:200] for n, r in answers.items()}
    assert used_ids(runtime.pool, rid) == {ids["other"]}
    assert {by for _u, by, _e in marks(runtime.pool, rid)["items"].values()} == {"explicit"}


def test_mcp_tool_marks_and_refuses_bad_input(built, runtime):
    memory, result, ids = built
    rid = result.retrieval_id

    async def flow() -> None:
        async with Client(build_server(memory, config_owner("alice"))) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"mem.feedback", "mem.implicit_feedback"} <= tools
            for output in BAD_OUTPUTS.values():
                bad = await client.call_tool("mem.implicit_feedback", {"retrieval_id": rid, "output": output})
                assert bad.is_error and "output" in bad.content[0].text
            missing = await client.call_tool("mem.implicit_feedback", {
                "retrieval_id": "00000000-0000-0000-0000-000000000000", "output": USES_STRIPE})
            assert missing.is_error and "not found" in missing.content[0].text
            assert used_ids(runtime.pool, rid) == set()
            ok = await client.call_tool("mem.implicit_feedback", {"retrieval_id": rid, "output": USES_STRIPE})
            assert not ok.is_error and ok.structured_content["marked"] == 1
            explicit = await client.call_tool("mem.feedback", {"retrieval_id": rid.upper(), "used_ids": [ids["other"]]})
            assert not explicit.is_error and explicit.structured_content == {"retrieval_id": rid, "marked": 1}

        async with Client(build_server(memory, config_owner("bob"))) as client:
            other = await client.call_tool("mem.implicit_feedback", {"retrieval_id": rid, "output": USES_STRIPE})
            assert other.is_error and "not found" in other.content[0].text

    anyio.run(flow)
    assert used_ids(runtime.pool, rid) == {ids["other"]}  # explicit won


def _cli(args: list[str], db_url: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    return subprocess.run([sys.executable, "-m", "memory_pipelines.surfaces.cli", *args], input=stdin,
                          capture_output=True, text=True, env=env, timeout=120)


def test_cli_command_marks_and_refuses_bad_input(built, runtime, db_url, tmp_path):
    _memory, result, ids = built
    rid = result.retrieval_id
    huge = tmp_path / "huge.txt"
    huge.write_text(BAD_OUTPUTS["huge"])
    for args in (["--output", ""], ["--output-file", str(huge)], ["--output", USES_STRIPE, "--owner", "bob"]):
        proc = _cli(["feedback", rid, *args], db_url)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert ("output" in proc.stderr) if "bob" not in args else ("not found" in proc.stderr)
        assert "got 100,001" not in proc.stderr  # a file is read only that far: not its length
    assert used_ids(runtime.pool, rid) == set()
    proc = _cli(["feedback", rid, "--owner", "alice", "--output-file", "-", "--json"], db_url, stdin=USES_STRIPE)
    assert proc.returncode == 0, proc.stderr
    assert '"marked": 1' in proc.stdout and ids["stripe"] in proc.stdout
    assert used_ids(runtime.pool, rid) == {ids["stripe"]}


def test_cli_feedback_can_say_nothing_was_used(built, runtime, db_url):
    """`used_ids: []` ("nothing was used", a negative label for every injected item) is feedback over HTTP and MCP,
    but the CLI's explicit feedback took only --used ID (repeated): no way to say none, and `--used ''` was
    refused as not injected. `--none` now marks every injected item unused (used_by explicit), as [] does."""
    _memory, result, ids = built
    rid = result.retrieval_id
    proc = _cli(["feedback", rid, "--owner", "alice", "--output", USES_STRIPE], db_url)
    assert proc.returncode == 0 and used_ids(runtime.pool, rid) == {ids["stripe"]}, proc.stderr
    proc = _cli(["feedback", rid, "--owner", "alice", "--none"], db_url)
    assert proc.returncode == 0 and "0 item(s) marked used" in proc.stdout, proc.stderr
    state = marks(runtime.pool, rid)
    assert used_ids(runtime.pool, rid) == set() and state["state"][0] is not None
    assert {by for _u, by, _e in state["items"].values()} == {"explicit"}
    both = _cli(["feedback", rid, "--owner", "alice", "--none", "--used", ids["stripe"]], db_url)
    assert both.returncode == 2 and "--none" in both.stderr, both.stderr


def test_cli_feedback_with_an_empty_output_names_the_option(built, runtime, db_url, tmp_path):
    """An empty --output-file was refused as "output: must not be empty", the library's field, not the option."""
    _memory, result, _ids = built
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n", encoding="utf-8")
    for option, value in (("--output-file", str(empty)), ("--output", " ")):
        proc = _cli(["feedback", result.retrieval_id, "--owner", "alice", option, value], db_url)
        assert proc.returncode == 2 and f"{option}: must not be empty" in proc.stderr, proc.stderr
    assert used_ids(runtime.pool, result.retrieval_id) == set()


def test_output_limit_is_one_value_for_every_surface():
    from memory_pipelines.surfaces.http.models import ImplicitFeedbackRequest

    schema = ImplicitFeedbackRequest.model_json_schema()["properties"]["output"]
    assert schema["maxLength"] == MAX_OUTPUT and MAX_OUTPUT < 1024 * 1024


# -- the demo log ---------------------------------------------------------------------------------------------

def _demo(runtime) -> None:
    load_demo(runtime.pool)
    embed_all(runtime.pool, runtime.embedder)
    with runtime.pool.connection() as conn:
        finish_memories(conn, runtime.embedder.model_name)
    index_all(runtime.pool)


def _log_counts(pool) -> tuple[int, int, int]:
    with pool.connection() as conn:
        return conn.execute(
            "SELECT count(DISTINCT r.id), count(c.*) FILTER (WHERE c.injected),"
            " count(c.*) FILTER (WHERE c.used AND c.used_by = 'implicit')"
            " FROM retrievals r JOIN retrieval_candidates c ON c.retrieval_id = r.id WHERE r.feedback_at IS NOT NULL"
        ).fetchone()


@pytest.mark.slow
def test_demo_sessions_label_candidates_idempotently_and_the_gate_warns(runtime, db_url, tmp_path, monkeypatch):
    from assets.resources import MemoryResource
    from assets.tuning import tuning_assets, tuning_checks

    _demo(runtime)
    corpus = read_demo()
    corpus["sessions"] = corpus["sessions"][::8]  # 49 of the 386, spread over the six weeks
    n = len(corpus["sessions"])
    first = load_demo_sessions(runtime.pool, runtime.embedder, corpus)
    assert first["built"] == first["fed_back"] == n and first["skipped_reason"] is None
    builds, labelled, used = _log_counts(runtime.pool)
    assert builds == n and labelled > 100 and 0 < used < labelled
    with runtime.pool.connection() as conn:
        days = conn.execute("SELECT max(created_at) - min(created_at) FROM retrievals").fetchone()[0]
    assert days.days >= 28  # spread over the weeks of the sessions, not all now
    second = load_demo_sessions(runtime.pool, runtime.embedder, corpus)
    assert second["built"] == 0 and second["skipped"] == n
    assert _log_counts(runtime.pool) == (builds, labelled, used)

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    result = dg.materialize(
        [*tuning_assets, *tuning_checks], resources={"memory": MemoryResource(database_url=db_url, embedder="fake")},
        run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}},
                    "ops": {"fitted_scoring_params": {"config": {"bootstrap": 5}},
                            "scoring_evaluation": {"config": {"bootstrap": 100}}}},
        raise_on_error=False,
    )
    assert result.success  # a refusal is not a failed run
    [gate] = [e for e in result.get_asset_check_evaluations() if e.check_name == "publish_gate"]
    assert not gate.passed and gate.severity == dg.AssetCheckSeverity.WARN
    assert "enough_data" in gate.metadata["refused_by"].value and "enough_data" in gate.metadata["reasons"].value
    mats = {e.materialization.asset_key.to_user_string(): e.materialization.metadata
            for e in result.get_asset_materialization_events()}
    assert "published_scoring_config" not in mats
    assert mats["retrieval_log_frames"]["used"].value == used
    assert any(k.startswith("plot_") for k in mats["hit_rate_report"])


# -- cross-lingual: the semantic channel (the bundled model) ---------------------------------------------------

ZH_USES_POOL = ("billing-api 的 nightly export 把 SQLAlchemy 的 QueuePool（20 个连接）耗尽了。"
                "我会把 pool_size 调到 40，"
                "并且在 worker 的 finally block 里 close session。")
"""A Chinese answer that uses the English POOL learning: its meaning, plus the identifiers an agent keeps."""


@pytest.mark.slow
def test_a_chinese_output_using_an_english_item_is_marked_by_meaning(db_url, pool, local_embedder):
    from memory_pipelines.infra.settings import Settings
    from memory_pipelines.runtime import Runtime

    runtime = Runtime(settings=Settings(database_url=db_url, embedder="local"), url=db_url, pool=pool,
                      embedder=local_embedder)
    with pool.connection() as conn:
        ids = {name: add_learning(conn, "alice", t, c) for name, (t, c) in
               {"stripe": STRIPE, "pool": POOL, "flaky": FLAKY}.items()}
    embed_all(pool, local_embedder)
    index_all(pool)
    memory = Memory(runtime, llm=None)
    result = memory.context("alice", QUERY, mode="debug", token_budget=2000)
    injected = {it.id for it in result.items}
    assert ids["pool"] in injected and len(injected) > 1
    out = memory.implicit_feedback("alice", result.retrieval_id, ZH_USES_POOL)
    ev = {i["id"]: i["evidence"] for i in out["items"] if i["evidence"]}
    assert used_ids(pool, result.retrieval_id) == {ids["pool"]}
    assert ev[ids["pool"]]["used"] and {*terms("sqlalchemy"), "pool_size"} <= set(ev[ids["pool"]]["matched_terms"])
    # the meaning carries across languages: the used item's semantic score stands clear of the others'
    others = [e["semantic"] for i, e in ev.items() if i != ids["pool"]]
    assert ev[ids["pool"]]["semantic"] > max(others) + 0.15, ev
    assert all(not e["used"] for i, e in ev.items() if i != ids["pool"])
