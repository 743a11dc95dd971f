"""The ways out through real HTTP (uvicorn on loopback) and a real MCP client session: forget per source, drop a
project, erase the key's owner, the audit trail; and the cross-owner probe of every one of them (0 leaks: another
owner's id answers exactly as an id nobody has, and nothing is removed)."""

from __future__ import annotations

import json
import socket
import time
import uuid
from typing import get_args

import anyio
import httpx
import pytest

from memory_pipelines import Memory, vocabulary
from memory_pipelines.infra.auth import create_key
from memory_pipelines.operations import export
from memory_pipelines.store.removal import FORGETTABLE
from memory_pipelines.surfaces.http.routes import removal as routes
from memory_pipelines.surfaces.mcp import Forgettable, build_http_app
from tests.factories import add_capability, add_event, add_goal, add_learning, add_task
from tests.removal_world import owner_rows, table_counts
from tests.test_api import LiveServer
from tests.test_cli import run_cli
from tests.test_mcp import _client as mcp_client
from tests.test_mcp import data, error_text

PLURAL = routes.ITEM_PATHS


def _client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _items(c: httpx.Client, runtime, owner: str) -> dict[str, str]:
    """One item of every source for `owner`, the memory written through the API."""
    with runtime.pool.connection() as conn:
        ids = {"task": add_task(conn, owner, f"{owner} deploy task"),
               "learning": add_learning(conn, owner, f"{owner} lesson"),
               "capability": add_capability(conn, owner, f"{owner} skill"),
               "goal": add_goal(conn, owner, f"{owner} goal"),
               "event": add_event(conn, owner, "alert", {"disk": f"{owner} full"})}
    ids["memory"] = c.post("/ingest/memory", json={"project_name": "agent-mem", "content_type": "plan",
                                                   "content": f"{owner} ships on Tuesdays"}).json()["id"]
    return ids


def _forget(c: httpx.Client, source: str, item_id: str) -> httpx.Response:
    path = f"/memories/{item_id}" if source == "memory" else f"/api/{PLURAL[source]}/{item_id}"
    return c.delete(path)


@pytest.fixture
def two(live, runtime):
    alice_key_id, alice_key = create_key(runtime.pool, "alice")
    _b, bob_key = create_key(runtime.pool, "bob")
    a, b = _client(live, alice_key), _client(live, bob_key)
    return {"alice": (a, _items(a, runtime, "alice"), alice_key_id), "bob": (b, _items(b, runtime, "bob"), None)}


def test_every_removal_of_another_owners_rows_is_the_same_404_as_an_unknown_id(two, runtime):
    (_a, alice, _), (b, _bob, _) = two["alice"], two["bob"]
    before = table_counts(runtime.pool)
    for source, item_id in alice.items():  # bob names alice's ids, then ids nobody has
        foreign = _forget(b, source, item_id)
        unknown = _forget(b, source, str(uuid.uuid4()) if source != "memory" else "mem_" + "0" * 20)
        assert foreign.status_code == unknown.status_code == 404, source
        assert foreign.json() == {"detail": f"no {source} {item_id!r}"}
        assert set(foreign.json()) == set(unknown.json())
    projects = b.delete("/projects/web-app")  # alice has no such project either; bob has none
    assert projects.status_code == 404 and projects.json() == {"detail": "no project 'web-app'"}
    spoof = b.delete("/api/owner", params={"confirm": "alice"})  # bob's key can only ever erase bob
    assert spoof.status_code == 422 and spoof.json()["field"] == "confirm"
    spoof = b.delete("/api/owner", params={"confirm": "alice", "owner_id": "alice"})
    assert spoof.status_code == 422 and spoof.json()["field"] == "owner_id"
    dry = b.delete("/api/owner", params={"dry_run": "true"})
    assert dry.status_code == 200 and dry.json()["owner"] == "bob" and "alice" not in dry.text
    assert b.get("/api/removals").json() == {"removals": [], "next_cursor": None}
    assert table_counts(runtime.pool) == before  # nothing of anyone's was removed


def test_forget_each_source_then_the_audit_trail_names_the_key(two, runtime):
    (a, alice, key_id), (b, bob, _) = two["alice"], two["bob"]
    bob_before = owner_rows(runtime.pool, "bob")
    for source, item_id in alice.items():
        out = _forget(a, source, item_id)
        assert out.status_code == 200, out.text
        body = routes.Forgotten.model_validate(out.json())
        assert (body.source, body.id) == (source, item_id) and body.removed
        again = _forget(a, source, item_id)  # idempotent: gone is gone, and says so like an unknown id
        assert again.status_code == 404 and again.json() == {"detail": f"no {source} {item_id!r}"}
    assert a.get(f"/api/brain/memory/detail/{alice['task']}").status_code == 404
    assert a.get("/memories", params={"ids": alice["memory"]}).json()["missing"] == [alice["memory"]]
    assert alice["memory"] not in a.get("/memories/search", params={"query": "ships Tuesdays"}).text
    trail = routes.Removals.model_validate(a.get("/api/removals", params={"limit": 4}).json())
    assert [r.source for r in trail.removals] == ["memory", "event", "goal", "capability"]
    assert {r.actor for r in trail.removals} == {key_id} and trail.next_cursor
    rest = a.get("/api/removals", params={"cursor": trail.next_cursor}).json()["removals"]
    assert [r["source"] for r in rest] == ["learning", "task"]
    assert owner_rows(runtime.pool, "bob") == bob_before
    assert b.get(f"/api/brain/memory/detail/{bob['task']}").status_code == 200


def test_drop_project_and_erase_over_http(two, runtime):
    (a, _alice, _), (b, bob, _) = two["alice"], two["bob"]
    a.post("/ingest/memory", json={"project_name": "web-app", "content_type": "requirement",
                                   "content": "The login page keeps the session cookie for 30 days."})
    dropped = a.delete("/projects/web-app")
    assert dropped.status_code == 200 and dropped.json()["removed"]["projects"] == 1
    assert [p["project_key"] for p in a.get("/projects").json()["projects"]] == ["agent-mem"]
    assert b.get("/projects").json()["projects"][0]["memory_count"] == 1

    missing = a.delete("/api/owner")
    assert missing.status_code == 422 and missing.json()["field"] == "confirm"
    wrong = a.delete("/api/owner", params={"confirm": "ALICE"})
    assert wrong.status_code == 422 and wrong.json()["field"] == "confirm"
    alice_rows = owner_rows(runtime.pool, "alice")
    preview = routes.Erased.model_validate(a.delete("/api/owner", params={"dry_run": "true"}).json())
    assert preview.dry_run and preview.audit_id is None and preview.counts["api_keys"] == 1
    assert owner_rows(runtime.pool, "alice") == alice_rows
    assert a.get("/whoami").status_code == 200  # the dry run removed nothing, the key included
    erased = routes.Erased.model_validate(a.delete("/api/owner", params={"confirm": "alice"}).json())
    assert not erased.dry_run and erased.counts == preview.counts
    assert a.get("/whoami").status_code == 401  # her key went with her
    assert {t: n for t, n in owner_rows(runtime.pool, "alice").items() if n} == {"removals": 1}
    assert b.get(f"/api/brain/memory/detail/{bob['learning']}").status_code == 200
    bad = b.delete(f"/api/tasks/{'x' * 201}")
    assert bad.status_code == 422 and bad.json()["field"] == "ref"
    blank = b.delete("/api/tasks/%20")
    assert blank.status_code == 422 and blank.json()["field"] == "ref"


def test_route_examples_validate_and_sources_agree():
    for model in (routes.Forgotten, routes.ProjectDropped, routes.Erased, routes.Removals):
        for example in model.model_config["json_schema_extra"]["examples"]:
            model.model_validate(example)
    assert set(get_args(Forgettable)) == set(FORGETTABLE) == {*routes.ITEM_PATHS, "memory"}


def test_a_removal_with_a_misspelt_or_guessed_dry_run_is_refused_and_removes_nothing(two, runtime):
    """`DELETE /api/owner?confirm=alice&dryRun=true` (the API's camelCase elsewhere: topK, tokenBudget) ignored
    dryRun and erased every row of alice, and `DELETE /projects/agent-mem?dry_run=true` (as the erase takes it)
    dropped the project: a query parameter a removal does not take is now a 422 naming it."""
    a, alice = two["alice"][0], two["alice"][1]
    before = owner_rows(runtime.pool, "alice")
    for typo in ("dryRun", "dry-run", "dryrun"):
        r = a.delete("/api/owner", params={"confirm": "alice", typo: "true"})
        assert r.status_code == 422 and r.json()["field"] == typo, r.text
    for path in ("/projects/agent-mem", f"/api/tasks/{alice['task']}", f"/memories/{alice['memory']}"):
        r = a.delete(path, params={"dry_run": "true"})
        assert r.status_code == 422 and r.json()["field"] == "dry_run", (path, r.text)
    assert owner_rows(runtime.pool, "alice") == before and a.get("/whoami").status_code == 200
    assert a.delete("/api/owner", params={"confirm": "alice", "dry_run": "true"}).json()["dry_run"]


@pytest.fixture
def mcp_http(runtime):
    with LiveServer(build_http_app(Memory(runtime, llm=None))) as srv:
        yield f"{srv.url}/mcp"


def test_mcp_forget_is_scoped_to_the_key_and_audited(mcp_http, runtime):
    a_id, alice = create_key(runtime.pool, "alice")
    _b, bob = create_key(runtime.pool, "bob")

    async def main() -> None:
        async with mcp_client(mcp_http, alice) as a:
            mine = data(await a.call_tool("mem.ingest_memory", {
                "project_name": "vault", "content_type": "insight", "content": "the passphrase is tangerine-42"}))["id"]
        async with mcp_client(mcp_http, bob) as b:
            foreign = error_text(await b.call_tool("mem.forget", {"source": "memory", "id": mine}))
            unknown = error_text(await b.call_tool("mem.forget", {"source": "memory", "id": "mem_" + "0" * 20}))
            assert foreign.replace(mine, "X") == unknown.replace("mem_" + "0" * 20, "X")
            assert "source" in error_text(await b.call_tool("mem.forget", {"source": "fragment", "id": mine}))
        async with mcp_client(mcp_http, alice) as a:
            out = data(await a.call_tool("mem.forget", {"source": "memory", "id": mine}))
            assert out["removed"]["memories"] == 1
            got = data(await a.call_tool("mem.get", {"ids": [mine]}))
            assert got["missing"] == [mine] and "tangerine" not in json.dumps(got)

    anyio.run(main)
    trail = Memory(runtime, llm=None).removals("alice")["removals"]
    assert [(r["action"], r["actor"]) for r in trail] == [("forget", a_id)]


def test_mcp_forget_of_an_unknown_learning_points_to_where_item_ids_come_from(mcp_http, runtime):
    """The hint said 'Use ids returned by mem.search (for your own memories)' for a task or learning too, a tool
    that never returns their ids: an agent following it could not find the item."""
    _k, alice = create_key(runtime.pool, "alice")

    async def main() -> None:
        async with mcp_client(mcp_http, alice) as a:
            data(await a.call_tool("mem.record_learning", {"title": "Retry 429s with jitter", "key": "l-1"}))
            assert data(await a.call_tool("mem.forget", {"source": "learning", "id": "l-1"}))["removed"]
            gone = error_text(await a.call_tool("mem.forget", {"source": "learning", "id": "l-1"}))
            assert "no learning 'l-1'" in gone and "mem.search" not in gone, gone
            assert "mem.context" in gone and "key" in gone, gone
            memory = error_text(await a.call_tool("mem.forget", {"source": "memory", "id": "mem_" + "0" * 20}))
            assert "mem.search" in memory, memory

    anyio.run(main)


def test_mcp_forget_of_an_unknown_goal_or_capability_names_the_writes_that_exist(mcp_http, runtime):
    """The hint said 'the id or key its mem.record_* call returned' for a goal or a capability too, but no MCP
    tool records one: they are written over HTTP (POST /api/goals, /api/capabilities) or the CLI."""
    _k, alice = create_key(runtime.pool, "alice")

    async def main() -> None:
        async with mcp_client(mcp_http, alice) as a:
            tools = {t.name for t in (await a.list_tools()).tools}
            for source in ("goal", "capability"):
                gone = error_text(await a.call_tool("mem.forget", {"source": source, "id": "g-1"}))
                assert f"no {source} 'g-1'" in gone and "mem.record_" not in gone, gone
                assert f"/api/{source}s" in gone and "mem.context" in gone, gone
            for source in ("task", "learning", "event"):
                gone = error_text(await a.call_tool("mem.forget", {"source": source, "id": "g-1"}))
                assert f"mem.record_{source}" in gone and f"mem.record_{source}" in tools, gone

    anyio.run(main)


def test_an_item_written_with_a_key_is_forgotten_by_its_key(live, runtime):
    _k, key = create_key(runtime.pool, "alice")
    _b, bob_key = create_key(runtime.pool, "bob")
    a, b = _client(live, key), _client(live, bob_key)
    written = a.post("/api/tasks", json={"title": "rotate the signing keys", "key": "ops-42"})
    assert written.status_code == 201, written.text
    assert b.delete("/api/tasks/ops-42").json() == {"detail": "no task 'ops-42'"}  # bob has no such key
    out = a.delete("/api/tasks/ops-42")
    assert out.status_code == 200 and out.json()["id"] == written.json()["id"]
    assert a.delete("/api/tasks/ops-42").status_code == 404
    again = a.post("/api/tasks", json={"title": "rotate the signing keys", "key": "ops-42"})
    assert again.status_code == 201 and again.json()["action"] == "created"  # the key is free again

    # a key or project key with a slash, as the write accepts it, reached as one path segment encoded or not
    slashed = a.post("/api/tasks", json={"title": "file the ticket", "key": "JIRA/7"}).json()
    assert a.patch("/api/tasks/JIRA%2F7", json={"status": "completed"}).json()["action"] == "updated"
    assert b.delete("/api/tasks/JIRA%2F7").status_code == 404
    assert a.delete("/api/tasks/JIRA%2F7").json()["id"] == slashed["id"]
    a.post("/api/tasks", json={"title": "file the ticket", "key": "JIRA/7"})
    assert a.delete("/api/tasks/JIRA/7").status_code == 200
    a.post("/ingest/memory", json={"project_key": "web/app", "project_name": "web", "content_type": "plan",
                                   "content": "Ship the slash-safe routes on Tuesday."})
    assert b.delete("/projects/web%2Fapp").status_code == 404
    dropped = a.delete("/projects/web%2Fapp")
    assert dropped.status_code == 200 and dropped.json()["removed"]["projects"] == 1


def test_a_drop_given_a_project_name_names_that_projects_key_and_removes_nothing(two, runtime):
    """The name answered only "no project 'X'", though the owner's project of that name was one key away."""
    (a, _alice, _), (b, _bob, _) = two["alice"], two["bob"]
    for c, name, key in ((a, "Agent Memory", "agent-memory-key"), (b, "Agent Memory", "agent-memory-key"),
                         (b, "Web App", "bob-web")):
        assert c.post("/ingest/memory", json={"project_name": name, "project_key": key, "content_type": "plan",
                                              "content": f"{name} builds nightly."}).status_code == 200
    before = table_counts(runtime.pool)
    named = a.delete("/projects/Agent Memory")
    assert named.status_code == 404 and named.json() == {"detail": (
        "no project 'Agent Memory' (key); the project named 'Agent Memory' has key 'agent-memory-key'")}
    foreign = a.delete("/projects/Web App")  # bob's project name: alice hears nothing of it
    assert foreign.status_code == 404 and foreign.json() == {"detail": "no project 'Web App'"}
    assert table_counts(runtime.pool) == before


def test_the_keys_owner_downloads_her_export_and_the_cli_imports_it_back(two, runtime, db_url, tmp_path):
    """GET /api/owner/export streams the key's owner's items and memories as JSON Lines, nobody else's, whatever
    `owner` parameter is guessed; the file imports back whole into another owner with the real CLI."""
    (a, alice, _), (b, bob, _) = two["alice"], two["bob"]
    got = a.get("/api/owner/export")
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in got.text.splitlines()]
    assert sorted(r["source"] for r in rows) == sorted(alice)
    assert "bob" not in got.text and all("alice" in json.dumps(r) for r in rows)
    assert b.get("/api/owner/export").text.count("\n") == len(bob) and "alice" not in b.get("/api/owner/export").text

    guessed = a.get("/api/owner/export", params={"owner": "bob"})
    assert guessed.status_code == 200 and guessed.text == got.text  # reads ignore what they do not take
    assert httpx.get(str(a.base_url.join("/api/owner/export"))).status_code == 401

    path = tmp_path / "alice.jsonl"
    path.write_bytes(got.content)
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    imported = run_cli(["import", str(path), "--owner", "alice-copy"], env)
    assert imported.returncode == 0, imported.stderr
    sources = ("tasks", "learnings", "capabilities", "goals", "events", "memories")
    copy, original = owner_rows(runtime.pool, "alice-copy"), owner_rows(runtime.pool, "alice")
    assert {t: copy[t] for t in sources} == {t: original[t] for t in sources} == dict.fromkeys(sources, 1)


def test_the_export_stream_joins_lines_in_chunks_and_loses_none():
    lines = [f'{{"n": {i}}}\n' for i in range(7)]
    chunks = list(routes._chunks(iter(lines), size=3))
    assert [c.count("\n") for c in chunks] == [3, 3, 1] and "".join(chunks) == "".join(lines)
    assert list(routes._chunks(iter([]), size=3)) == []


BULK_TASKS = 40_000
"""~15 MB of export: several times what the kernel's socket buffers hold (tcp_wmem's 4 MB at most here)."""


def _add_bulk_tasks(pool) -> None:
    with pool.connection() as conn:
        conn.execute("INSERT INTO tasks (owner_id, title, description, task_type, status)"
                     " SELECT 'alice', 'bulk task ' || i, repeat('rollout notes ', 20), 'dev', 'completed'"
                     " FROM generate_series(1, %s) i", (BULK_TASKS,))


def _stalled_download(base_url: str, key: str) -> socket.socket:
    """A client that asks for the export, reads its first bytes and then nothing more (a tiny receive buffer, so
    the server's writes back up into the stream at once)."""
    host, port = base_url.removeprefix("http://").split(":")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((host, int(port)))
    s.sendall(f"GET /api/owner/export HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
    assert s.recv(64).startswith(b"HTTP/1.1 200"), "the download did not start"
    return s


def _downloads(pool) -> list[str]:
    """The states of the server's export connections (`application_name`), in this database."""
    with pool.connection() as conn:
        return [r[0] for r in conn.execute(
            "SELECT state FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()",
            (export.DOWNLOAD_APPLICATION,))]


def test_stalled_downloads_hold_no_pooled_connection_and_the_one_past_the_cap_is_a_429(two, runtime, live):
    """A client that stops reading its export keeps a connection of the download's own, not one of the pool's: with
    as many stalled as the server streams at once, every other call still answers; the next download is a 429 with
    Retry-After and changes nothing; a stalled client that goes away gives its place back."""
    a, alice, _ = two["alice"]
    _add_bulk_tasks(runtime.pool)
    key = a.headers["Authorization"].removeprefix("Bearer ")
    stalled = [_stalled_download(live, key) for _ in range(routes.EXPORT_DOWNLOADS)]
    try:
        assert len(_downloads(runtime.pool)) == routes.EXPORT_DOWNLOADS  # none of them the pool's
        busy = a.get("/api/owner/export")
        assert busy.status_code == 429 and busy.headers["Retry-After"] == str(routes.EXPORT_BUSY_RETRY_SECONDS)
        assert busy.json() == {"detail": f"{routes.EXPORT_DOWNLOADS} exports are downloading already; retry later"}
        for _ in range(routes.EXPORT_DOWNLOADS):  # each call its own pooled connection, while the downloads wait
            assert a.get("/whoami").status_code == 200
            assert a.get("/memories/search", params={"query": "ships"}).status_code == 200
        stalled.pop().close()
        for _ in range(200):  # the server notices the client gone at its next write
            got = a.get("/api/owner/export")
            if got.status_code != 429:
                break
            time.sleep(0.05)
        assert got.status_code == 200 and got.text.count("\n") == BULK_TASKS + len(alice), got.text[:200]
    finally:
        for s in stalled:
            s.close()
        for _ in range(200):  # each download ends, its connection closed, before the database goes
            if not _downloads(runtime.pool):
                break
            time.sleep(0.05)
    assert _downloads(runtime.pool) == []


def test_a_download_whose_client_stops_reading_gives_up_its_snapshot_after_the_idle_limit(two, runtime, live,
                                                                                           monkeypatch):
    """The server ends a stalled download's database session once it has waited `DOWNLOAD_IDLE_SECONDS` (here 1):
    its snapshot no longer holds back the server's clean-up; the client's stream ends cut, short of the memories."""
    monkeypatch.setattr(vocabulary, "DOWNLOAD_IDLE_SECONDS", 1)
    a, alice, _ = two["alice"]
    _add_bulk_tasks(runtime.pool)
    stalled = _stalled_download(live, a.headers["Authorization"].removeprefix("Bearer "))
    try:
        assert len(_downloads(runtime.pool)) == 1
        for _ in range(200):
            if not _downloads(runtime.pool):
                break
            time.sleep(0.05)
        assert _downloads(runtime.pool) == []
        monkeypatch.undo()  # cut: the download below runs under the usual limit (a busy machine may pause it 1 s)
        stalled.settimeout(30)
        received = b""
        while chunk := stalled.recv(1 << 16):  # read on: what was sent, then the end, without the last line
            received += chunk
        assert 0 < received.count(b'"bulk task ') < BULK_TASKS and b"ships" not in received  # no memory line
        assert not received.endswith(b"\r\n0\r\n\r\n")  # cut: HTTP's last chunk never came
    finally:
        stalled.close()
    for _ in range(200):  # its place given back
        got = a.get("/api/owner/export")
        if got.status_code != 429:
            break
        time.sleep(0.05)
    assert got.status_code == 200 and got.text.count("\n") == BULK_TASKS + len(alice)


def test_a_client_that_holds_its_download_open_without_reading_loses_its_place_after_the_idle_limit(
        two, runtime, live, monkeypatch):
    """Clients that keep their sockets open but read nothing are cut off once the server has waited
    `DOWNLOAD_IDLE_SECONDS` (here 1) to send: their places come back while they still hold their sockets, and each
    finds its stream closed without HTTP's last chunk."""
    monkeypatch.setattr(vocabulary, "DOWNLOAD_IDLE_SECONDS", 1)
    a, alice, _ = two["alice"]
    _add_bulk_tasks(runtime.pool)
    stalled = [_stalled_download(live, a.headers["Authorization"].removeprefix("Bearer "))
               for _ in range(routes.EXPORT_DOWNLOADS)]
    try:
        for _ in range(200):  # none of them reads, none of them closes: the server cuts each at the limit
            if not _downloads(runtime.pool):
                break
            time.sleep(0.05)
        monkeypatch.undo()  # the download below runs under the usual limit (a busy machine may pause it 1 s)
        for _ in range(200):
            got = a.get("/api/owner/export")
            if got.status_code != 429:
                break
            time.sleep(0.05)
        assert got.status_code == 200 and got.text.count("\n") == BULK_TASKS + len(alice)
        for s in stalled:
            s.settimeout(30)
            received = b""
            while chunk := s.recv(1 << 16):  # what was sent before the cut, then the server's close
                received += chunk
            assert b'"bulk task ' in received and not received.endswith(b"\r\n0\r\n\r\n")
    finally:
        for s in stalled:
            s.close()
    assert _downloads(runtime.pool) == []
