"""The MCP server through real MCP client sessions: stdio (a spawned `memory-pipelines mcp` process) and
streamable HTTP (uvicorn on loopback, bearer keys)."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from memory_pipelines import Memory
from memory_pipelines.infra.auth import create_key, revoke_key
from memory_pipelines.store.ingest.inputs import FIELDS as MEMORY_FIELDS
from memory_pipelines.surfaces.mcp import build_http_app
from tests.test_api import EN, ZH, LiveServer

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"mem.ingest_memory", "mem.search", "mem.get", "mem.timeline", "mem.list_projects", "mem.context"}


def data(result) -> dict[str, Any]:
    """The JSON a successful tool call returned."""
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def error_text(result) -> str:
    assert result.is_error, result
    return " ".join(getattr(c, "text", "") for c in result.content)


async def _flow(client: Client) -> dict[str, Any]:
    """list tools, ingest (zh + en), search -> get, timeline, list_projects, context, bad input."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) >= TOOLS
    assert "mem.get" in tools["mem.search"].description and "snippet" in tools["mem.search"].description
    for ctype in ("requirement", "plan", "development", "testing", "insight"):
        assert ctype in tools["mem.ingest_memory"].description
    assert set(tools["mem.search"].input_schema["properties"]) >= {"query", "project_key", "scope", "limit"}
    assert "owner_id" not in tools["mem.search"].input_schema["properties"]

    zh = data(await client.call_tool("mem.ingest_memory", {
        "project_name": "agent-mem", "content_type": "development", "content": ZH, "speaker": "李雷"}))
    en = data(await client.call_tool("mem.ingest_memory", {
        "project_name": "web-app", "content_type": "requirement", "content": EN}))
    assert zh["status"] == en["status"] == "created"

    found = data(await client.call_tool("mem.search", {"query": "为什么用 pgvector 存储向量", "limit": 5}))
    assert found["next_action"] == "use_ids_to_call_mem_get"
    assert zh["id"] in [r["id"] for r in found["results"]]
    assert all(len(r["snippet"]) <= 200 for r in found["results"])
    scoped = data(await client.call_tool("mem.search", {"query": "cookie", "project_key": "web-app",
                                                        "scope": "requirement"}))
    assert [r["id"] for r in scoped["results"]] == [en["id"]]

    got = data(await client.call_tool("mem.get", {"ids": [zh["id"], en["id"]]}))
    assert {m["id"]: m["content"] for m in got["memories"]} == {zh["id"]: ZH, en["id"]: EN}
    assert {m["id"]: m["speaker"] for m in got["memories"]} == {zh["id"]: "李雷", en["id"]: None}
    # the tool takes the memory's fields, each passed on under its name
    assert set(tools["mem.ingest_memory"].input_schema["properties"]) == MEMORY_FIELDS

    tl = data(await client.call_tool("mem.timeline", {"project_key": "agent-mem"}))
    assert [i["id"] for i in tl["items"]] == [zh["id"]]
    projects = data(await client.call_tool("mem.list_projects", {}))["projects"]
    assert {p["project_key"] for p in projects} == {"agent-mem", "web-app"}

    ctx = data(await client.call_tool("mem.context", {"query": "pgvector 向量", "token_budget": 300}))
    assert ctx["token_used"] <= 300 and ctx["retrieval_id"] and "pgvector" in ctx["block"]

    bad = error_text(await client.call_tool("mem.ingest_memory", {
        "project_name": "agent-mem", "content_type": "notes", "content": "x"}))
    assert "content_type" in bad
    bad = error_text(await client.call_tool("mem.search", {"query": "x", "limit": 0}))
    assert "limit" in bad
    bad = error_text(await client.call_tool("mem.ingest_memory", {"content_type": "plan", "content": "x"}))
    assert "project_name" in bad
    bad = error_text(await client.call_tool("mem.ingest_memory", {
        "project_name": "p", "content_type": "plan", "content": "x", "ts": 5}))
    assert "ts" in bad
    bad = error_text(await client.call_tool("mem.timeline", {"cursor": "not-a-cursor"}))
    assert "cursor" in bad
    missing = data(await client.call_tool("mem.get", {"ids": ["mem_ffffffffffffffffffff"]}))
    assert missing["memories"] == [] and missing["missing"] == ["mem_ffffffffffffffffffff"]
    return {"zh": zh["id"], "en": en["id"]}


def _rows(pool) -> dict[str, int]:
    with pool.connection() as conn:
        return dict(conn.execute("SELECT owner_id, count(*) FROM memories GROUP BY owner_id").fetchall())


STDIO = [sys.executable, "-m", "memory_pipelines.surfaces.cli", "mcp", "--transport", "stdio"]


def _stdio_env(db_url: str, home: Path) -> dict[str, str]:
    """The stdio server's environment: owner carol."""
    return {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake", "MEMORY_PIPELINES_OWNER": "carol",
            "MEMORY_PIPELINES_HOME": str(home), "PYTHONPATH": str(ROOT)}


def _stdio(db_url: str, home: Path) -> StdioServerParameters:
    return StdioServerParameters(command=STDIO[0], args=STDIO[1:], cwd=str(ROOT), env=_stdio_env(db_url, home))


@pytest.mark.slow
def test_stdio_session_full_flow_for_the_configured_owner(db_url, runtime, tmp_path):
    params = _stdio(db_url, tmp_path)

    async def main() -> dict[str, Any]:
        async with Client(params, read_timeout_seconds=120) as client:
            ids = await _flow(client)
            # a recorded item is embedded by the server's worker (before, only `serve` ran one: never embedded)
            lesson = data(await client.call_tool("mem.record_learning", {"title": "Rotate the signing keys"}))
            for _ in range(200):
                with runtime.pool.connection() as conn:
                    if conn.execute("SELECT embedding IS NOT NULL FROM learnings WHERE id = %s",
                                    (lesson["id"],)).fetchone()[0]:
                        break
                await anyio.sleep(0.1)
            else:
                raise AssertionError("the recorded learning was never embedded")
            return ids

    ids = anyio.run(main)
    assert _rows(runtime.pool) == {"carol": 2}
    with runtime.pool.connection() as conn:
        owners = conn.execute("SELECT DISTINCT owner_id FROM memories WHERE id = ANY(%s)",
                              (list(ids.values()),)).fetchall()
    assert owners == [("carol",)]


@pytest.fixture
def mcp_http(runtime):
    with LiveServer(build_http_app(Memory(runtime, llm=None))) as srv:
        yield f"{srv.url}/mcp"


def _client(url: str, key: str) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60)


def test_http_session_full_flow_with_a_bearer_key(mcp_http, runtime):
    _kid, key = create_key(runtime.pool, "dave")

    async def main() -> None:
        async with _client(mcp_http, key) as client:
            await _flow(client)

    anyio.run(main)
    assert _rows(runtime.pool) == {"dave": 2}


def test_http_without_a_valid_key_is_401(mcp_http, runtime):
    key_id, revoked = create_key(runtime.pool, "dave")
    assert revoke_key(runtime.pool, key_id)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in (None, "Bearer mp_unknown", f"Bearer {revoked}", f"Basic {revoked}"):
        h = {**headers, **({"Authorization": auth} if auth else {})}
        r = httpx.post(mcp_http, json=init, headers=h)
        assert r.status_code == 401, (auth, r.status_code, r.text)
        assert r.headers["www-authenticate"].lower().startswith("bearer")


def test_http_two_keys_two_owners_isolated(mcp_http, runtime):
    _a, alice = create_key(runtime.pool, "alice")
    _b, bob = create_key(runtime.pool, "bob")
    secret = "alice secret: the vault passphrase is tangerine-42"

    async def main() -> None:
        async with _client(mcp_http, alice) as a:
            mine = data(await a.call_tool("mem.ingest_memory", {
                "project_name": "vault", "content_type": "insight", "content": secret}))["id"]
        async with _client(mcp_http, bob) as b:
            data(await b.call_tool("mem.ingest_memory", {
                "project_name": "notes", "content_type": "plan", "content": "bob plans a tangerine harvest"}))
            found = data(await b.call_tool("mem.search", {"query": secret, "limit": 100}))
            assert mine not in [r["id"] for r in found["results"]]
            got = data(await b.call_tool("mem.get", {"ids": [mine]}))
            assert got["memories"] == [] and got["missing"] == [mine]
            projects = data(await b.call_tool("mem.list_projects", {}))["projects"]
            assert [p["project_key"] for p in projects] == ["notes"]
            tl = data(await b.call_tool("mem.timeline", {}))
            assert mine not in json.dumps(tl)
            ctx = data(await b.call_tool("mem.context", {"query": "tangerine vault passphrase"}))
            assert "tangerine-42" not in ctx["block"] and mine not in json.dumps(ctx)
            # owner_id is not a parameter: one naming another owner is refused, as over HTTP.
            spoof = error_text(await b.call_tool("mem.search", {"query": secret, "owner_id": "alice"}))
            assert "owner_id" in spoof and mine not in spoof
        async with _client(mcp_http, alice) as a:
            found = data(await a.call_tool("mem.search", {"query": secret}))
            assert mine in [r["id"] for r in found["results"]]

    anyio.run(main)
    assert _rows(runtime.pool) == {"alice": 1, "bob": 1}


@pytest.mark.slow
def test_cli_mcp_http_serves_tools_behind_keys(db_url, runtime, tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake",
           "MEMORY_PIPELINES_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "memory_pipelines.surfaces.cli", "mcp", "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(600):
            try:
                first = httpx.post(url, json={}, timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read().decode()
                time.sleep(0.1)
        assert first.status_code == 401
        _kid, key = create_key(runtime.pool, "erin")

        async def main() -> set[str]:
            async with _client(url, key) as client:
                data(await client.call_tool("mem.ingest_memory", {
                    "project_key": "p1", "content_type": "testing", "content": "regression suite passes"}))
                return {t.name for t in (await client.list_tools()).tools}

        assert anyio.run(main) >= TOOLS
        assert _rows(runtime.pool) == {"erin": 1}
    finally:
        proc.terminate()
        proc.wait(30)


def test_context_event_and_goal_ids_open_in_detail_for_their_owner_over_http_and_mcp(live, mcp_http, runtime):
    alice_key, bob_key = create_key(runtime.pool, "alice")[1], create_key(runtime.pool, "bob")[1]
    alice, bob = (httpx.Client(base_url=live, headers={"Authorization": f"Bearer {k}"}, timeout=60)
                  for k in (alice_key, bob_key))
    goal = alice.post("/api/goals", json={"title": "Cut login failures below 1%", "status": "in_progress"})
    event = alice.post("/api/events", json={"type": "task_failed",
                                            "payload": {"task": "login", "error": "auth token expired 401"}})
    assert goal.status_code == event.status_code == 201, (goal.text, event.text)
    goal_id, event_id = goal.json()["id"], event.json()["id"]
    ctx = alice.post("/api/brain/memory/context", json={"query": "login auth token expired", "mode": "debug"})
    assert ctx.status_code == 200, ctx.text
    assert [i["id"] for i in ctx.json()["items"] if i["source"] == "event"] == [event_id]
    # the profile's goals are not block items: the build's log names them, as the web view shows
    build = alice.get(f"/api/brain/memory/builds/{ctx.json()['retrieval_id']}").json()
    assert [i["id"] for i in build["items"] if i["source"] == "okr" and i["injected"]] == [goal_id]

    handed_out = {event_id: "event", goal_id: "okr"}
    opened = {}
    for item_id, level in handed_out.items():
        r = alice.get(f"/api/brain/memory/detail/{item_id}")
        assert r.status_code == 200, r.text
        opened[item_id] = r.json()
        assert set(r.json()) == {"id", "level", "title", "description", "status", "metadata", "created_at",
                                 "active"}
        assert (r.json()["id"], r.json()["level"]) == (item_id, level)
        related = alice.post("/api/brain/memory/search-related", json={"base_id": item_id})
        assert related.status_code == 200 and item_id not in related.text, related.text
    assert "auth token expired 401" in opened[event_id]["description"]
    assert opened[event_id]["metadata"]["payload"] == {"task": "login", "error": "auth token expired 401"}
    assert (opened[goal_id]["title"], opened[goal_id]["status"]) == ("Cut login failures below 1%", "in_progress")

    missing = "00000000-0000-0000-0000-0000000000ff"
    for item_id in handed_out:  # another owner's id answers exactly like a missing one
        theirs, unknown = bob.get(f"/api/brain/memory/detail/{item_id}"), bob.get(f"/api/brain/memory/detail/{missing}")
        assert theirs.status_code == unknown.status_code == 404
        assert theirs.json()["detail"].replace(item_id, "X") == unknown.json()["detail"].replace(missing, "X")
        assert bob.post("/api/brain/memory/search-related", json={"base_id": item_id}).status_code == 404

    async def main() -> None:
        async with _client(mcp_http, alice_key) as a:
            mcp_ctx = data(await a.call_tool("mem.context", {"query": "login auth token expired", "mode": "debug"}))
            assert event_id in [i["id"] for i in mcp_ctx["items"]]
            for item_id in handed_out:
                assert data(await a.call_tool("mem.detail", {"id": item_id})) == opened[item_id]
        async with _client(mcp_http, bob_key) as b:
            for item_id in handed_out:
                theirs = error_text(await b.call_tool("mem.detail", {"id": item_id}))
                unknown = error_text(await b.call_tool("mem.detail", {"id": missing}))
                assert theirs.replace(item_id, "X") == unknown.replace(missing, "X") and "no item" in theirs

    anyio.run(main)


def test_feedback_on_a_build_not_found_points_to_mem_context(mcp_http, runtime):
    """mem.feedback and mem.implicit_feedback on another owner's (or an unknown) retrieval_id answered
    "retrieval … not found. Use ids returned by mem.search": mem.search hands out no retrieval ids, so an agent
    following the hint could never find the build. The hint now names mem.context's retrieval_id."""
    alice_key, bob_key = create_key(runtime.pool, "alice")[1], create_key(runtime.pool, "bob")[1]

    async def main() -> None:
        async with _client(mcp_http, alice_key) as a:
            rid = data(await a.call_tool("mem.context", {"query": "login auth token expired"}))["retrieval_id"]
        async with _client(mcp_http, bob_key) as b:
            for tool, args in (("mem.feedback", {"used_ids": []}), ("mem.implicit_feedback", {"output": "done"})):
                text = error_text(await b.call_tool(tool, {"retrieval_id": rid, **args}))
                assert "not found" in text and "mem.context" in text and "mem.search" not in text, text

    anyio.run(main)


def test_detail_of_an_unknown_id_points_to_every_tool_that_hands_out_ids(mcp_http, runtime):
    """mem.detail opens any item, but an unknown id answered "Use ids returned by mem.search (for your own
    memories)": mem.search hands out memory ids only, so an agent holding a learning's or a goal's id was sent to
    a tool that never returns one. The hint now names mem.context and the mem.record_* calls too."""
    _k, key = create_key(runtime.pool, "alice")

    async def main() -> None:
        async with _client(mcp_http, key) as a:
            text = error_text(await a.call_tool("mem.detail", {"id": "00000000-0000-0000-0000-0000000000ff"}))
            assert "no item" in text and "mem.search" in text, text
            assert "mem.context" in text and "mem.record_" in text, text

    anyio.run(main)


WRONG_TYPES = {  # a tool call with an argument of the wrong type -> the tool error naming it
    ("mem.search", '{"query": "x", "limit": "ten"}'):
        "Error executing tool mem.search: invalid `limit`: must be an integer, not a string. Change `limit` and call "
        "again.",
    ("mem.search", '{"query": 5}'):
        "Error executing tool mem.search: invalid `query`: must be a valid string. Change `query` and call again.",
    ("mem.get", '{"ids": ["mem_ffffffffffffffffffff", 7]}'):
        "Error executing tool mem.get: invalid `ids[1]`: must be a valid string. Change `ids[1]` and call again.",
    ("mem.update_task", '{"ref": "t1", "active": "yes"}'):
        "Error executing tool mem.update_task: invalid `active`: must be a valid boolean. Change `active` and call "
        "again.",
}


@pytest.mark.slow
def test_a_wrong_typed_argument_is_a_tool_error_naming_the_field_over_stdio_and_http(db_url, mcp_http, runtime,
                                                                                    tmp_path):
    """An argument of the wrong type ("limit": "ten") answered pydantic's raw report over both transports ("1
    validation error for search_toolArguments", the input echoed, a pydantic URL) where the server's other bad
    input reads as one line naming the field. It reads so now, and the session goes on."""
    _kid, key = create_key(runtime.pool, "dave")

    async def main(client: Client) -> None:
        for (tool, args), expected in WRONG_TYPES.items():
            assert error_text(await client.call_tool(tool, json.loads(args))) == expected
        assert data(await client.call_tool("mem.search", {"query": "x", "limit": 10}))["results"] == []

    async def both() -> None:
        async with Client(_stdio(db_url, tmp_path), read_timeout_seconds=120) as client:
            await main(client)
        async with _client(mcp_http, key) as client:
            await main(client)

    anyio.run(both)


class _RawStdio:
    """The stdio server as a subprocess driven with raw JSON-RPC lines (no client to parse or reshape them)."""

    def __init__(self, db_url: str, home: Path) -> None:
        self.proc = subprocess.Popen(STDIO, env={**os.environ, **_stdio_env(db_url, home)}, cwd=str(ROOT),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(b) for b in self.proc.stdout], daemon=True).start()

    def send(self, line: str) -> None:
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        """The next message on stdout that answers a request (not a notification)."""
        while True:
            message = json.loads(self.lines.get(timeout=120))
            if "id" in message:
                return message

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(30)


@pytest.mark.slow
def test_a_stdio_line_naming_a_member_twice_is_refused_as_over_http(db_url, runtime, tmp_path):
    """Over stdio the SDK read fd 0 and parsed each line itself, keeping the last value: a call naming "title"
    twice stored the task titled "New" and answered "created". The line is answered now with the error streamable
    HTTP answers (-32602 naming the member, under the request's id; null when the id itself is named twice), is not
    passed on, and the session goes on."""
    raw = _RawStdio(db_url, tmp_path)
    try:
        raw.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}))
        assert raw.answer()["result"]["serverInfo"]["name"] == "memory-pipelines"
        raw.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        twice = ('{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "mem.record_task",'
                 ' "arguments": {"title": "Old", "title": "New", "key": "RAW1"}}}')
        raw.send(twice)
        message = "invalid params: an object names the member 'title' twice; name each member once"
        assert raw.answer() == {"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": message}}
        raw.send(twice.replace('"id": 3,', '"id": 4, "id": 5,'))
        assert raw.answer() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32602, "message": message}}
        # lines the SDK cannot read were dropped without an answer (the client waited for ever): now answered as
        # streamable HTTP answers them, -32700 for what is not JSON, -32602 for JSON that is not a message
        for line, code in (("this is not json", -32700), ('{"jsonrpc": "2.0", "id": 7, "params": {"q": "\\ud800"}}',
                           -32700), ('{"a": ' * 300 + "1" + "}" * 300, -32700),
                           ('[{"jsonrpc": "2.0", "id": 8, "method": "tools/list"}]', -32602)):
            raw.send(line)
            refused = raw.answer()
            assert refused["id"] is None and refused["error"]["code"] == code, (line[:40], refused)
        raw.send('{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "mem.record_task",'
                 ' "arguments": {"title": "Fine", "key": "RAW2"}}}')
        fine = raw.answer()
        assert fine["id"] == 6 and not fine["result"].get("isError"), fine
    finally:
        raw.close()
    assert raw.proc.returncode == 0
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT owner_id, title, key FROM tasks").fetchall() == [("carol", "Fine", "RAW2")]
