"""The MCP tools an agent records its work with (mem.record_learning / record_task / update_task / record_event,
mem.relevant_learnings), through real MCP client sessions over streamable HTTP with bearer keys."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from memory_pipelines import Memory
from memory_pipelines.infra.auth import create_key
from memory_pipelines.retrieval.search import search
from memory_pipelines.surfaces.mcp import build_http_app
from memory_pipelines.vocabulary import TASK_STATUSES, TASK_TYPES, WRITE_CONTRACTS
from tests.test_api import LiveServer
from tests.test_mcp import _client, data, error_text

ITEM_TOOLS = {"mem.record_learning", "mem.record_task", "mem.update_task", "mem.record_event",
              "mem.relevant_learnings"}


@pytest.fixture
def mcp_http(runtime):
    with LiveServer(build_http_app(Memory(runtime, llm=None))) as srv:
        yield f"{srv.url}/mcp"


def _fields(source: str) -> set[str]:
    return {s.name for s in WRITE_CONTRACTS[source]}


def _rows(pool, sql: str, *params: Any) -> list[tuple]:
    with pool.connection() as conn:
        return conn.execute(sql, params).fetchall()


def test_schemas_are_the_write_contract(mcp_http, runtime):
    _kid, key = create_key(runtime.pool, "alice")

    async def main() -> dict:
        async with _client(mcp_http, key) as client:
            return {t.name: t.input_schema for t in (await client.list_tools()).tools if t.name in ITEM_TOOLS}

    schemas = anyio.run(main)
    assert set(schemas) == ITEM_TOOLS
    assert set(schemas["mem.record_learning"]["properties"]) == _fields("learning") - {"active"}
    assert schemas["mem.record_learning"]["required"] == ["title"]
    assert set(schemas["mem.record_event"]["required"]) == {"type", "payload"}
    update = schemas["mem.update_task"]
    assert set(update["properties"]) == _fields("task") | {"ref"} and update["required"] == ["ref"]
    assert update["properties"]["status"]["anyOf"][0]["enum"] == list(TASK_STATUSES)
    assert schemas["mem.relevant_learnings"]["properties"]["task_type"]["anyOf"][0]["enum"] == list(TASK_TYPES)
    assert "owner_id" not in schemas["mem.record_task"]["properties"]


def test_an_agent_records_its_work_and_finds_it_again(mcp_http, runtime):
    _a, alice = create_key(runtime.pool, "alice")
    _b, bob = create_key(runtime.pool, "bob")

    async def main() -> None:
        async with _client(mcp_http, alice) as a:
            lesson = {"title": "Set a deadline on every outbound HTTP call", "content": "A hung vendor API held "
                      "every worker", "task_type": "dev", "failure_class": "TIMEOUT", "category": "failure_pattern",
                      "key": "lesson-timeouts", "at": "2025-01-10T08:00:00Z"}
            first = data(await a.call_tool("mem.record_learning", lesson))
            assert first["action"] == "created" and first["key"] == "lesson-timeouts"
            again = data(await a.call_tool("mem.record_learning", lesson))
            assert (again["id"], again["action"]) == (first["id"], "unchanged")
            data(await a.call_tool("mem.record_learning", {"title": "Write the runbook first", "task_type": "qa"}))
            hits = search(runtime.pool, runtime.embedder, "alice", "outbound deadline", mode="keyword").hits
            assert [h.id for h in hits] == [first["id"]]  # keyword-searchable when the answer comes back
            ctx = data(await a.call_tool("mem.context", {"query": "deadline on outbound HTTP calls", "mode": "debug"}))
            assert first["id"] in [i["id"] for i in ctx["items"]] and "outbound HTTP call" in ctx["block"]

            best = data(await a.call_tool("mem.relevant_learnings", {"task_type": "dev", "failure_class": "TIMEOUT"}))
            assert best["learnings"][0]["id"] == first["id"] and best["learnings"][0]["score"] > 0

            task = data(await a.call_tool("mem.record_task", {"title": "Add client timeouts", "status": "in_progress",
                                                              "task_type": "dev", "key": "T-42"}))
            done = data(await a.call_tool("mem.update_task", {"ref": "T-42", "status": "completed"}))
            assert (done["id"], done["action"]) == (task["id"], "updated")
            by_id = data(await a.call_tool("mem.update_task", {"ref": task["id"], "status": "completed"}))
            assert by_id["action"] == "unchanged"

            event = data(await a.call_tool("mem.record_event", {"type": "task_failed", "payload": {
                "task": "nightly export", "error": "vendor API timed out"}}))
            assert event["action"] == "created"

            bad = error_text(await a.call_tool("mem.record_event", {"type": "Task Failed", "payload": {}}))
            assert "type" in bad
            bad = error_text(await a.call_tool("mem.record_event", {"type": "alert", "payload": "disk full"}))
            assert "payload" in bad
            bad = error_text(await a.call_tool("mem.record_learning", {"title": "x", "at": "1999-12-31T00:00:00Z"}))
            assert "`at`" in bad and "2000" in bad
            bad = error_text(await a.call_tool("mem.record_learning", {"title": "x", "at": True}))
            assert "`at`" in bad and "2000" not in bad  # a boolean is no time (it was read as Unix second 1)
            dated = data(await a.call_tool("mem.record_learning", {"title": "dated", "key": "d", "at": 1736496000}))
            assert dated["action"] == "created"
            bad = error_text(await a.call_tool("mem.record_task", {"title": "x", "colour": "red"}))
            assert "colour" in bad
            bad = error_text(await a.call_tool("mem.update_task", {"ref": "T-404", "status": "failed"}))
            assert "no task 'T-404'" in bad
            bad = error_text(await a.call_tool("mem.record_task", {"title": "x", "owner_id": "bob"}))
            assert "owner_id" in bad

        async with _client(mcp_http, bob) as b:  # another owner's key or id is not found, like an unknown one
            for ref in ("T-42", task["id"]):
                assert "no task" in error_text(await b.call_tool("mem.update_task", {"ref": ref, "status": "failed"}))
            assert data(await b.call_tool("mem.relevant_learnings", {"task_type": "dev"}))["learnings"] == []

    anyio.run(main)
    assert _rows(runtime.pool, "SELECT owner_id, status FROM tasks") == [("alice", "completed")]
    assert _rows(runtime.pool, "SELECT count(*) FROM learnings WHERE owner_id = 'alice'") == [(3,)]
    assert _rows(runtime.pool, "SELECT owner_id FROM events WHERE type = %s", "task_failed") == [("alice",)]


def test_numbers_and_booleans_are_json_ones_and_a_null_clears_a_task_field(mcp_http, runtime):
    _a, alice = create_key(runtime.pool, "alice")

    async def main() -> None:
        async with _client(mcp_http, alice) as a:
            made = data(await a.call_tool("mem.record_task", {"title": "Rotate keys", "task_type": "dev",
                                                              "status": "pending", "key": "T-7"}))
            for args, field in [({"ref": "T-7", "active": "false"}, "active"),  # as over HTTP: a JSON boolean
                                ({"ref": "T-7", "active": "yes"}, "active"), ({"ref": "T-7", "active": 0}, "active")]:
                assert field in error_text(await a.call_tool("mem.update_task", args)), args
            for tool, args, field in [("mem.search", {"query": "keys", "limit": "5"}, "limit"),
                                      ("mem.search", {"query": "keys", "limit": True}, "limit"),
                                      ("mem.timeline", {"limit": "5"}, "limit"),
                                      ("mem.context", {"query": "keys", "token_budget": "800"}, "token_budget"),
                                      ("mem.relevant_learnings", {"limit": "5"}, "limit")]:
                assert field in error_text(await a.call_tool(tool, args)), (tool, args)
            cleared = data(await a.call_tool("mem.update_task", {"ref": "T-7", "task_type": None, "key": None}))
            assert cleared["action"] == "updated" and cleared["key"] is None
            kept = data(await a.call_tool("mem.update_task", {"ref": made["id"], "title": "Rotate the keys"}))
            assert kept["action"] == "updated"
            for field in ("title", "status"):  # not nullable: refused by name, nothing changed
                refused = error_text(await a.call_tool("mem.update_task", {"ref": made["id"], field: None}))
                assert f"`{field}`" in refused

    anyio.run(main)
    assert _rows(runtime.pool, "SELECT title, task_type, status, key, is_active FROM tasks") == [
        ("Rotate the keys", None, "pending", None, True)]


def _said_clearable(text: str, after: str) -> set[str]:
    """The task fields `text` names in its sentence (or table cell) that starts at `after`."""
    said = re.split(r"\.\s|\|", text.split(after, 1)[1])[0]
    return {name for name in _fields("task") if re.search(rf"`?\b{name}\b`?", said)}


def test_the_fields_update_task_says_a_null_clears_are_the_ones_it_clears(mcp_http, runtime):
    """mem.update_task's description and docs/mcp.md named description, status and at as cleared by a null, which
    the tool refuses; what they name must be what a null clears, and none that it refuses."""
    _a, alice = create_key(runtime.pool, "alice")

    async def main() -> tuple[str, set[str], set[str]]:
        async with _client(mcp_http, alice) as a:
            tools = {t.name: t for t in (await a.list_tools()).tools}
            cleared, refused = set(), set()
            for field in sorted(_fields("task") - {"title"}):
                made = data(await a.call_tool("mem.record_task", {"title": f"Task {field}", "key": f"T-{field}"}))
                result = await a.call_tool("mem.update_task", {"ref": made["id"], field: None})
                (refused if result.is_error else cleared).add(field)
            return tools["mem.update_task"].description, cleared, refused | {"title"}

    description, cleared, refused = anyio.run(main)
    assert cleared == {"key", "task_type", "project"}
    assert _said_clearable(description, "A null clears") == cleared, description
    page = (Path(__file__).resolve().parents[1] / "docs" / "mcp.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| `mem.update_task`"))
    assert _said_clearable(row, "`null` clears") == cleared, row
    assert not _said_clearable(description, "A null clears") & refused


def test_a_text_argument_holding_json_text_is_taken_as_the_text_sent(mcp_http, runtime):
    """The SDK parsed a string argument holding JSON text before validation unless it was typed plain `str`: a
    lesson's content '{"retries": 3}' was refused, a key "null" was dropped (each record made a new task with no
    key) and a project filter "null" searched every project. A list sent as JSON text is still a list."""
    _a, alice = create_key(runtime.pool, "alice")

    async def main() -> None:
        async with _client(mcp_http, alice) as a:
            lesson = data(await a.call_tool("mem.record_learning", {"title": "Retry config", "content":
                                                                    '{"retries": 3}', "key": "[1]"}))
            assert lesson["key"] == "[1]"
            first = data(await a.call_tool("mem.record_task", {"title": "Keyed null", "key": "null"}))
            again = data(await a.call_tool("mem.record_task", {"title": "Keyed null", "key": "null"}))
            assert (first["key"], again["id"], again["action"]) == ("null", first["id"], "unchanged")
            data(await a.call_tool("mem.ingest_memory", {"content": "Deploys bake for five minutes",
                                                         "content_type": "plan", "project_name": "web"}))
            found = data(await a.call_tool("mem.search", {"query": "deploys bake", "project_name": "null"}))
            assert found["results"] == []
            hits = data(await a.call_tool("mem.search", {"query": "deploys bake"}))["results"]
            got = data(await a.call_tool("mem.get", {"ids": f'["{hits[0]["id"]}"]'}))
            assert [m["id"] for m in got["memories"]] == [hits[0]["id"]]

    anyio.run(main)
    assert _rows(runtime.pool, "SELECT content, key FROM learnings") == [('{"retries": 3}', "[1]")]
    assert _rows(runtime.pool, "SELECT key FROM tasks") == [("null",)]


def test_a_tool_call_naming_an_argument_twice_is_refused_over_http(mcp_http, runtime):
    """A JSON-RPC body naming an argument twice ({"title": "Old", "title": "New"}) was parsed by the SDK keeping
    the last value: the task was stored titled "New", answered "created". It is a 400 naming the member now, and
    nothing is written (the HTTP API refuses the same body with a 422)."""
    _kid, key = create_key(runtime.pool, "alice")
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    with httpx.Client(timeout=60) as http:
        opened = http.post(mcp_http, json=init, headers=headers)
        assert opened.status_code == 200, opened.text
        session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"],
                   "mcp-protocol-version": "2025-06-18"}
        http.post(mcp_http, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        raw = ('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "mem.record_task",'
               ' "arguments": {"title": "Old", "title": "New", "key": "RAW1"}}}')
        refused = http.post(mcp_http, content=raw, headers=session)
        assert refused.status_code == 400 and "'title' twice" in refused.json()["error"]["message"], refused.text
        assert refused.json()["id"] == 2, refused.text  # the client matches the error to its call by the id
        twice = http.post(mcp_http, content=raw.replace('"id": 2,', '"id": 3, "id": 4,'), headers=session)
        assert twice.status_code == 400 and twice.json()["id"] is None, twice.text
        fine = raw.replace('"title": "Old", ', "")
        assert http.post(mcp_http, content=fine, headers=session).status_code == 200  # the session goes on
    assert _rows(runtime.pool, "SELECT title FROM tasks WHERE owner_id = 'alice'") == [("New",)]
