"""`exclude_session`: a search or context build for a query that is part of a conversation leaves that
conversation's memories out (its caller holds its turns), in the library, over real HTTP, at the command line and
in `eval`; a bad value names the field and builds nothing; another owner's session of the same name is not hers."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from memory_pipelines import Memory
from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.evaluation.run import evaluate
from memory_pipelines.infra.auth import create_key
from memory_pipelines.infra.errors import ValidationError
from memory_pipelines.surfaces.mcp import build_http_app
from tests.test_api import LiveServer
from tests.test_evaluation import _asked_early, _folder
from tests.test_mcp import _client as mcp_client
from tests.test_mcp import data, error_text

TURNS = {  # session -> turns about one trip, so every turn matches the query
    "trip-1": ["We booked the Lisbon trip for the first week of May.", "The Lisbon hotel is near the river."],
    "trip-2": ["For Lisbon I still need a train ticket to Sintra.", "Lisbon in May: pack a light jacket."],
}
QUERY = "Lisbon trip hotel train May"


@pytest.fixture
def memory(runtime) -> Memory:
    mem = Memory(runtime, llm=None)
    for owner in ("alice", "bob"):
        for session, turns in TURNS.items():
            for i, text in enumerate(turns):
                mem.ingest(owner, content=f"{owner}: {text}", content_type="plan", project_name="travel",
                           session=session, speaker="user" if i % 2 == 0 else "assistant")
    return mem


def _sessions(memory: Memory, owner: str, ids: list[str]) -> list[str]:
    return [m["session"] for m in memory.get(owner, ids)["memories"]]


def test_search_and_context_leave_the_named_conversation_out(memory):
    every = memory.search("alice", QUERY, sources=["memory"], limit=10).hits
    assert sorted(_sessions(memory, "alice", [h.id for h in every])) == ["trip-1", "trip-1", "trip-2", "trip-2"]
    for mode in ("hybrid", "semantic", "keyword"):
        kept = memory.search("alice", QUERY, mode=mode, sources=["memory"], limit=10, exclude_session="trip-1").hits
        assert _sessions(memory, "alice", [h.id for h in kept]) == ["trip-2", "trip-2"], mode
    built = memory.context("alice", QUERY, mode="chat", exclude_session=" trip-2 ")  # stripped, as written
    ids = [i.id for i in built.items if i.source == "memory"]
    assert _sessions(memory, "alice", ids) == ["trip-1", "trip-1"]
    assert all("bob:" not in i.line for i in built.items)  # her exclusion reads only her rows
    bob = memory.search("bob", QUERY, sources=["memory"], limit=10, exclude_session="no-such-session").hits
    assert len(bob) == 4


def test_a_bad_session_is_named_and_builds_nothing(memory, runtime):
    before = memory.builds("alice")["builds"]
    for bad in ("", "   ", "x" * 201, 7):
        with pytest.raises(ValidationError) as err:
            memory.context("alice", QUERY, exclude_session=bad)
        assert err.value.field == "exclude_session"
        with pytest.raises(ValidationError) as err:
            memory.search("alice", QUERY, exclude_session=bad)
        assert err.value.field == "exclude_session"
    assert memory.builds("alice")["builds"] == before


def test_context_over_http_takes_exclude_session(memory, live, runtime):
    c = httpx.Client(base_url=live, headers={"Authorization": f"Bearer {create_key(runtime.pool, 'alice')[1]}"},
                     timeout=60)
    r = c.post("/api/brain/memory/context", json={"query": QUERY, "mode": "chat", "exclude_session": "trip-1"})
    assert r.status_code == 200, r.text
    ids = [i["id"] for i in r.json()["items"] if i["source"] == "memory"]
    assert _sessions(memory, "alice", ids) == ["trip-2", "trip-2"]
    # The build history records what the build left out (stripped), and nothing for a build that left none out.
    plain = c.post("/api/brain/memory/context", json={"query": QUERY, "mode": "chat"}).json()["retrieval_id"]
    spaced = c.post("/api/brain/memory/context", json={"query": QUERY, "exclude_session": " trip-2 "}).json()
    left = {b["retrieval_id"]: b["exclude_session"] for b in c.get("/api/brain/memory/builds").json()["builds"]}
    assert left == {r.json()["retrieval_id"]: "trip-1", plain: None, spaced["retrieval_id"]: "trip-2"}
    one = c.get(f"/api/brain/memory/builds/{r.json()['retrieval_id']}").json()
    assert one["exclude_session"] == "trip-1"
    bad = c.post("/api/brain/memory/context", json={"query": QUERY, "exclude_session": ""})
    assert bad.status_code == 422 and bad.json()["field"] == "exclude_session"
    assert len(c.get("/api/brain/memory/builds").json()["builds"]) == 3  # the refused build logged nothing


def test_searches_over_http_take_exclude_session(memory, live, runtime):
    c = httpx.Client(base_url=live, headers={"Authorization": f"Bearer {create_key(runtime.pool, 'alice')[1]}"},
                     timeout=60)
    found = c.get("/memories/search", params={"query": QUERY, "exclude_session": "trip-1"})
    assert found.status_code == 200, found.text
    assert _sessions(memory, "alice", [x["id"] for x in found.json()["results"]]) == ["trip-2", "trip-2"]
    summary = c.post("/api/brain/memory/search", json={"query": QUERY, "topK": 10, "exclude_session": "trip-2"})
    assert summary.status_code == 200, summary.text
    ids = [x["id"] for x in summary.json()["matches"] if x["level"] == "memory"]
    assert _sessions(memory, "alice", ids) == ["trip-1", "trip-1"]
    for bad in (c.get("/memories/search", params={"query": QUERY, "exclude_session": ""}),
                c.post("/api/brain/memory/search", json={"query": QUERY, "exclude_session": "x" * 201})):
        assert bad.status_code == 422 and bad.json()["field"] == "exclude_session", bad.text


def test_mcp_context_and_search_take_exclude_session(memory, runtime):
    key = create_key(runtime.pool, "alice")[1]

    async def main(url: str) -> None:
        async with mcp_client(url, key) as c:
            built = data(await c.call_tool("mem.context", {"query": QUERY, "mode": "chat",
                                                           "exclude_session": "trip-2"}))
            ids = [i["id"] for i in built["items"] if i["source"] == "memory"]
            assert _sessions(memory, "alice", ids) == ["trip-1", "trip-1"]
            bad = error_text(await c.call_tool("mem.context", {"query": QUERY, "exclude_session": " "}))
            assert "exclude_session" in bad, bad
            found = data(await c.call_tool("mem.search", {"query": QUERY, "exclude_session": "trip-1"}))
            assert _sessions(memory, "alice", [x["id"] for x in found["results"]]) == ["trip-2", "trip-2"]

    with LiveServer(build_http_app(memory)) as srv:
        anyio.run(main, f"{srv.url}/mcp")


def _with_sessions(folder) -> None:
    """`_folder`'s memories: the three gold turns of each topic in one session, the other seven in another."""
    path = folder / "memories.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        owner, topic, i = r["id"].split("-")
        r["session"] = f"{owner}-{topic}-{'gold' if int(i) < 3 else 'rest'}"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    queries = folder / "queries.jsonl"
    rows = [json.loads(line) for line in queries.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        r["meta"] = {"session": r["id"][2:] + "-gold"}  # q-alice-0 -> alice-0-gold: the gold's own conversation
    queries.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")


def test_eval_leaves_each_querys_conversation_out(server_url, tmp_path):
    folder = _folder(tmp_path)
    _with_sessions(folder)
    embedder = FakeEmbedder(384)
    plain = evaluate(server_url, embedder, folder, methods=("hybrid", "context"))
    saved = tmp_path / "rankings.jsonl"
    out = evaluate(server_url, embedder, folder, methods=("hybrid", "context"), exclude_session="meta.session",
                   save_rankings=saved)
    assert plain["hybrid"]["overall"]["recall@10"] == 1.0
    assert out["hybrid"]["overall"]["recall@10"] == out["context"]["overall"]["recall@10"] == 0.0
    for row in map(json.loads, saved.read_text(encoding="utf-8").splitlines()):
        for ranked in row["rankings"].values():
            assert ranked and not set(ranked) & set(row["gold"])  # the gold is its conversation: all left out
    _asked_early(folder, None)
    with pytest.raises(ValidationError) as err:
        evaluate(server_url, embedder, folder, exclude_session="meta.session")
    assert err.value.field == "exclude_session" and "'q-alice-0'" in str(err.value)


def test_eval_and_context_on_the_command_line_take_exclude_session(db_url, tmp_path, memory):
    from tests.test_cli import run_cli

    folder = _folder(tmp_path)
    _with_sessions(folder)
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    proc = run_cli(["eval", str(folder), "--json", "--exclude-session", "meta.session"], env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hybrid"]["overall"]["recall@10"] == 0.0
    proc = run_cli(["context", QUERY, "--owner", "alice", "--mode", "chat", "--exclude-session", "trip-1",
                    "--json"], env)
    assert proc.returncode == 0, proc.stderr
    ids = [i["id"] for i in json.loads(proc.stdout)["items"] if i["source"] == "memory"]
    assert _sessions(memory, "alice", ids) == ["trip-2", "trip-2"]
    proc = run_cli(["context", QUERY, "--owner", "alice", "--exclude-session", " "], env)
    assert proc.returncode == 2 and "error: --exclude-session:" in proc.stderr, proc.stderr
    proc = run_cli(["search", QUERY, "--owner", "alice", "--source", "memory", "--exclude-session", "trip-2"], env)
    assert proc.returncode == 0, proc.stderr
    ids = [line.split()[2] for line in proc.stdout.splitlines()]
    assert _sessions(memory, "alice", ids) == ["trip-1", "trip-1"], proc.stdout
    proc = run_cli(["search", QUERY, "--owner", "alice", "--exclude-session", ""], env)
    assert proc.returncode == 2 and "error: --exclude-session:" in proc.stderr, proc.stderr
