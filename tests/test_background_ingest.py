"""`serve`'s background ingest through real HTTP: an ingest that does not wait is stored at once (DEFERRED,
keyword-searchable), and a low-priority worker embeds and judges it the way a live ingest would."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from memory_pipelines import Memory
from memory_pipelines.infra.auth import create_key
from memory_pipelines.infra.errors import ConfigError
from memory_pipelines.infra.priority import BACKGROUND_NICE
from memory_pipelines.infra.settings import Settings
from memory_pipelines.surfaces.http import create_app
from tests.test_api import EN, ZH, LiveServer, client, ingest


@pytest.fixture
def served(runtime) -> Iterator[tuple[FastAPI, str]]:
    app = create_app(Memory(runtime, llm=None), wait_ingest=False)
    with LiveServer(app) as srv:
        yield app, srv.url


@pytest.fixture
def keys(runtime) -> dict[str, str]:
    return {"alice": create_key(runtime.pool, "alice", name="test")[1]}


def _state(pool, memory_id: str) -> tuple[str, str, bool, int]:
    """(embedding status, arbitration status, active, fragments with a vector) of one memory."""
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT embedding_status, arbitration_status, is_active,"
            " (SELECT count(*) FROM fragments f WHERE f.memory_id = m.id AND f.embedding IS NOT NULL)"
            " FROM memories m WHERE id = %s",
            (memory_id,),
        ).fetchone()
    return row[0], row[1], row[2], int(row[3])


def test_an_ingest_that_does_not_wait_is_stored_at_once_then_embedded_and_judged(served, keys, runtime):
    app, url = served
    worker = app.state.embed_worker
    c = client(url, keys["alice"])

    first = ingest(c, EN, "requirement", project="web-app")
    assert (first["status"], first["action"], first["deferred"]) == ("created", "DEFERRED", True)
    found = c.get("/memories/search", params={"query": "session cookie subdomains"}).json()
    assert first["id"] in [m["id"] for m in found["results"]], "keyword search sees a queued memory at once"

    assert worker.wait_idle(60), "the background pass did not finish"
    assert _state(runtime.pool, first["id"]) == ("done", "done", True, 1)
    assert c.get("/memories", params={"ids": first["id"]}).json()["memories"][0]["embedded_at"]
    assert os.getpriority(os.PRIO_PROCESS, worker._thread.native_id) == BACKGROUND_NICE

    again = ingest(c, EN, "requirement", project="web-app")  # the same text again: a duplicate, judged later
    assert again["action"] == "DEFERRED" and again["id"] != first["id"]
    assert worker.wait_idle(60)
    got = c.get("/memories", params={"ids": again["id"]}).json()["memories"][0]
    assert got["is_active"] is False and got["duplicate_of"] == first["id"]

    waited = ingest(c, ZH, "development", wait=True)  # the request's `wait` wins over the server's default
    assert (waited["action"], waited["deferred"]) == ("CREATE", False)
    assert _state(runtime.pool, waited["id"]) == ("done", "done", True, 1)


def test_an_app_that_waits_by_default_embeds_before_answering(runtime, keys):
    app = create_app(Memory(runtime, llm=None))
    with LiveServer(app) as srv:
        done = ingest(client(srv.url, keys["alice"]), EN, "requirement")
    assert (done["action"], done["deferred"]) == ("CREATE", False)
    assert _state(runtime.pool, done["id"]) == ("done", "done", True, 1)
    assert app.state.embed_worker.passes == 0


def test_a_provider_outage_during_the_background_pass_keeps_the_memory_and_a_retry_embeds_it(runtime, fake_embedder):
    from memory_pipelines.store.ingest.worker import EmbedWorker

    memory = Memory(runtime, llm=None)
    worker = EmbedWorker(memory, retry_seconds=0.5)
    fake_embedder.fail_after = 0  # the provider is down
    try:
        queued = memory.ingest("alice", content=EN, content_type="requirement", project_name="web-app", wait=False)
        worker.notify()
        assert worker.wait_idle(30)
        assert _state(runtime.pool, queued.id) == ("pending", "pending", True, 0)
        assert worker.last is not None and worker.last["still_pending"] == 1
        fake_embedder.fail_after = None  # back: the worker's retry embeds it without another ingest
        for _ in range(300):  # embedding and judging commit separately: wait for both
            if _state(runtime.pool, queued.id)[:2] == ("done", "done"):
                break
            time.sleep(0.1)
        assert _state(runtime.pool, queued.id) == ("done", "done", True, 1)
    finally:
        worker.stop()


def test_rows_another_process_writes_are_embedded_by_the_servers_sweep(runtime, keys):
    """The CLI, an import or a script writes through its own `Memory`, which notifies no worker: the server's
    worker finds the rows on its sweep (before, they stayed pending until an HTTP write woke it)."""
    app = create_app(Memory(runtime, llm=None))
    app.state.embed_worker.sweep_seconds = 0.3
    with LiveServer(app) as srv:
        elsewhere = Memory(runtime, llm=None)  # as `memory-pipelines write` would, in its own process
        written = elsewhere.write("alice", "learning", {"key": "wombat", "title": "Wombat migration checklist",
                                                          "content": "Drain the billing cluster first."})
        for _ in range(100):
            with runtime.pool.connection() as conn:
                done = conn.execute("SELECT embedding IS NOT NULL FROM learnings WHERE id = %s",
                                    (written["id"],)).fetchone()[0]
            if done:
                break
            time.sleep(0.1)
        assert done
        hits = client(srv.url, keys["alice"]).post("/api/brain/memory/search", json={
            "query": "wombat billing migration", "mode": "semantic", "topK": 10}).json()
        assert written["id"] in [m["id"] for m in hits["matches"]]


def test_stopping_the_worker_mid_pass_waits_for_one_batch_and_leaves_the_rest_pending(runtime, fake_embedder):
    """A server's shutdown asks the worker to stop: it ends its pass between batches (before, it finished the
    whole pass, minutes for an import, then the 30 s limit left the database early), and the rows it did not
    reach stay pending for the next worker."""
    from memory_pipelines.store.ingest.worker import EmbedWorker

    memory = Memory(runtime, llm=None)
    memory.write_many("alice", "learning", [{"key": f"slow-{i}", "title": f"Learning {i}",
                                             "content": f"Step {i} of the slow migration."} for i in range(320)])
    plain = fake_embedder.embed_batch

    def slow(texts, kind="passage"):  # a provider taking 0.3 s a batch of 16: the pass takes ~6 s
        time.sleep(0.3)
        return plain(texts, kind)

    fake_embedder.embed_batch, size = slow, fake_embedder.batch_size
    fake_embedder.batch_size = 16
    worker = EmbedWorker(memory)
    try:
        worker.notify()
        for _ in range(100):
            if _embedded_learnings(runtime.pool) > 0:
                break
            time.sleep(0.05)
        started = time.monotonic()
        assert worker.stop(timeout=2.0), "the pass ran on after the stop"
        assert time.monotonic() - started < 2.0
        assert 0 < _embedded_learnings(runtime.pool) < 320
    finally:
        del fake_embedder.embed_batch
        fake_embedder.batch_size = size
    again = EmbedWorker(memory)
    again.notify()
    assert again.wait_idle(60)
    again.stop()
    assert _embedded_learnings(runtime.pool) == 320


def _embedded_learnings(pool) -> int:
    with pool.connection() as conn:
        return conn.execute("SELECT count(*) FROM learnings WHERE owner_id = 'alice' AND embedding IS NOT NULL"
                            ).fetchone()[0]


def test_the_exit_wait_for_the_worker_is_a_setting_checked_at_start():
    """`MEMORY_PIPELINES_STOP_WAIT`: 20 s unset (the database's stop then fits a 30 s kill grace); a value that is
    not 0-600 seconds is refused naming the variable (tests/test_reliability_db.py runs serve with 3 s)."""
    assert Settings.from_env({}).stop_wait == 20.0
    assert Settings.from_env({"MEMORY_PIPELINES_STOP_WAIT": " 3.5 "}).stop_wait == 3.5
    for bad in ("-1", "soon", "601"):
        with pytest.raises(ConfigError, match="MEMORY_PIPELINES_STOP_WAIT"):
            Settings.from_env({"MEMORY_PIPELINES_STOP_WAIT": bad})
