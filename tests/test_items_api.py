"""Tasks, learnings, capabilities, goals and events through real HTTP (uvicorn on loopback): written, found by keyword
at once and by vectors after the server's background pass, rewritten by key, updated in part, deactivated, refused
when bad (422 naming the field and the item, or `items` over the batch size; nothing written), owner isolation."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

from memory_pipelines.infra.auth import create_key
from memory_pipelines.store.item_contract import MAX_OBJECT_DEPTH
from memory_pipelines.vocabulary import LOCK_KEYWORD_STATS, MAX_BATCH, MAX_ITEM_KEY, MAX_ITEM_TEXT, WRITE_TABLES
from tests.test_api import client
from tests.test_items import ONE, WORD

PLURAL = {"task": "tasks", "learning": "learnings", "capability": "capabilities", "goal": "goals", "event": "events"}


@pytest.fixture
def alice(live, runtime) -> httpx.Client:
    return client(live, create_key(runtime.pool, "alice")[1])


@pytest.fixture
def bob(live, runtime) -> httpx.Client:
    return client(live, create_key(runtime.pool, "bob")[1])


def _rows(pool, source: str) -> list[dict]:
    with pool.connection() as conn:
        cur = conn.execute(f"SELECT * FROM {WRITE_TABLES[source]} ORDER BY created_at")
        names = [d.name for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _written(pool) -> int:
    with pool.connection() as conn:
        return sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in WRITE_TABLES.values()) + \
            conn.execute("SELECT count(*) FROM keyword_docs").fetchone()[0]


def _found(c: httpx.Client, word: str, mode: str) -> set[str]:
    r = c.post("/api/brain/memory/search", json={"query": word, "mode": mode, "topK": 10})
    assert r.status_code == 200, r.text
    return {m["id"] for m in r.json()["matches"]}


def _context_ids(c: httpx.Client, query: str, **extra) -> list[str]:
    r = c.post("/api/brain/memory/context", json={"query": query, "mode": "debug", "tokenBudget": 2000, **extra})
    assert r.status_code == 200, r.text
    return [i["id"] for i in r.json()["items"]]


def test_one_item_of_each_source_written_over_http_is_found_at_once_then_by_vectors(app, alice, bob, runtime):
    ids = {}
    for source, item in ONE.items():
        r = alice.post(f"/api/{PLURAL[source]}", json=item)
        assert r.status_code == 201, r.text
        assert r.json()["action"] == "created" and r.json()["key"] == item["key"]
        ids[source] = r.json()["id"]
    for source in ("task", "learning", "capability"):  # keyword-searchable when the answer came back
        assert ids[source] in _found(alice, WORD[source], "keyword"), source
        assert ids[source] not in _found(bob, WORD[source], "keyword"), source
    assert ids["event"] in _context_ids(alice, "axolotl gateway")  # a recent event, by its keyword channel
    profile = alice.post("/api/brain/memory/context", json={"query": "release", "mode": "plan"}).json()["block"]
    assert "Ship the narwhal release" in profile
    assert app.state.embed_worker.wait_idle(30)  # the server's background pass
    for source in WORD:
        row = next(r for r in _rows(runtime.pool, source) if str(r["id"]) == ids[source])
        assert row["embedding"] is not None and row["embedded_hash"] == row["content_hash"], source
    for source in ("task", "learning", "capability"):
        assert ids[source] in _found(alice, WORD[source], "semantic"), source
    assert ids["learning"] in _context_ids(alice, "marmalade timeouts")
    assert _context_ids(bob, "marmalade timeouts") == []


def test_rewriting_a_key_over_http_updates_in_place(app, alice, runtime):
    first = alice.post("/api/learnings", json=ONE["learning"]).json()
    assert app.state.embed_worker.wait_idle(30)
    embedded_at = _rows(runtime.pool, "learning")[0]["embedded_at"]
    same = alice.post("/api/learnings", json=ONE["learning"])
    assert same.status_code == 201 and same.json() == {"id": first["id"], "key": "L-1", "action": "unchanged"}
    changed = alice.post("/api/learnings", json={**ONE["learning"], "content": "raise the pool to 80"}).json()
    assert changed == {"id": first["id"], "key": "L-1", "action": "updated"}
    batch = alice.post("/api/learnings/batch", json={"items": [ONE["learning"] | {"content": "raise the pool to 80"},
                                                              {"title": "a second marmalade lesson"}]})
    assert batch.status_code == 200, batch.text
    assert [x["action"] for x in batch.json()["results"]] == ["unchanged", "created"]
    assert batch.json()["counts"] == {"created": 1, "updated": 0, "unchanged": 1}
    assert batch.json()["results"][0]["id"] == first["id"] and batch.json()["results"][1]["index"] == 1
    rows = _rows(runtime.pool, "learning")
    assert len(rows) == 2 and rows[0]["content"] == "raise the pool to 80"
    assert app.state.embed_worker.wait_idle(30)
    assert _rows(runtime.pool, "learning")[0]["embedded_at"] > embedded_at  # the changed text was re-embedded


def _lock_waits(db_url: str, n: int) -> None:
    """Until `n` sessions wait on a lock (each look a fresh connection: a transaction keeps its first snapshot)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with psycopg.connect(db_url, autocommit=True) as conn:
            if conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                            " AND wait_event_type = 'Lock'").fetchone()[0] >= n:
                return
        time.sleep(0.05)
    raise AssertionError(f"{n} writes never waited on a lock")


def test_two_clients_writing_one_new_key_at_once_store_it_once_and_the_second_is_unchanged(alice, runtime, db_url):
    """The second write's upsert read the row as absent (it was not committed yet), dated the item now and, on
    the conflict, took its own time as a change: `updated`, a new created_at, re-indexed and re-embedded."""
    with psycopg.connect(db_url) as holder, ThreadPoolExecutor(2) as ex:
        holder.execute("SELECT pg_advisory_xact_lock(%s, hashtext('task:alice:stats'))", (LOCK_KEYWORD_STATS,))
        first = ex.submit(alice.post, "/api/tasks", json=ONE["task"])
        _lock_waits(db_url, 1)  # the first write inserted its row and waits to count it in alice's statistics
        second = ex.submit(alice.post, "/api/tasks", json=ONE["task"])
        _lock_waits(db_url, 2)  # the second waits on the first's uncommitted row
        holder.commit()
        answers = [first.result(30), second.result(30)]
    assert [a.status_code for a in answers] == [201, 201], [a.text for a in answers]
    assert [a.json()["action"] for a in answers] == ["created", "unchanged"]
    rows = _rows(runtime.pool, "task")
    assert len(rows) == 1 and str(rows[0]["id"]) == answers[0].json()["id"] == answers[1].json()["id"]


def test_patch_changes_a_task_status_re_embeds_it_and_deactivation_hides_items(app, alice, runtime):
    task = alice.post("/api/tasks", json=ONE["task"]).json()
    learning = alice.post("/api/learnings", json=ONE["learning"]).json()
    assert app.state.embed_worker.wait_idle(30)
    before = _rows(runtime.pool, "task")[0]
    r = alice.patch("/api/tasks/T-1", json={"status": "completed"})
    assert r.status_code == 200 and r.json() == {"id": task["id"], "key": "T-1", "action": "updated"}
    assert alice.patch(f"/api/tasks/{task['id']}", json={"status": "completed"}).json()["action"] == "unchanged"
    assert app.state.embed_worker.wait_idle(30)
    after = _rows(runtime.pool, "task")[0]
    assert after["status"] == "completed" and after["title"] == ONE["task"]["title"]
    assert after["embedded_at"] > before["embedded_at"] and after["embedded_hash"] == after["content_hash"]
    assert alice.patch("/api/goals/G-1", json={"progress": 50}).status_code == 404  # not written yet
    alice.post("/api/goals", json=ONE["goal"])
    text = alice.patch("/api/goals/G-1", json={"progress": "50"})
    assert text.status_code == 422 and text.json()["field"] == "progress"
    assert alice.patch("/api/goals/G-1", json={"at": True}).json()["field"] == "at"
    assert alice.patch("/api/goals/G-1", json={"progress": 50}).json()["action"] == "updated"
    assert _rows(runtime.pool, "goal")[0]["progress"] == 50

    assert learning["id"] in _found(alice, "marmalade", "hybrid")
    assert alice.get(f"/api/brain/memory/detail/{learning['id']}").json()["active"] is True
    assert alice.patch("/api/learnings/L-1", json={"active": False}).json()["action"] == "updated"
    assert learning["id"] not in _found(alice, "marmalade", "hybrid")
    assert learning["id"] not in _context_ids(alice, "marmalade timeouts")
    hidden = alice.get(f"/api/brain/memory/detail/{learning['id']}")  # still opens by id, and says so
    assert hidden.status_code == 200 and hidden.json()["active"] is False
    alice.patch("/api/goals/G-1", json={"active": False})
    assert "narwhal" not in alice.post("/api/brain/memory/context", json={"query": "release", "mode": "plan"}
                                       ).json()["block"]


def test_relevant_learnings_and_a_context_with_a_task(alice):
    alice.post("/api/learnings/batch", json={"items": [
        ONE["learning"],
        {"title": "Document the release steps", "task_type": "research", "category": "best_practice"}]})
    r = alice.post("/api/learnings/relevant", json={"task_type": "dev", "failure_class": "timeout", "limit": 5})
    assert r.status_code == 200, r.text
    found = r.json()["learnings"]
    assert found[0]["title"] == ONE["learning"]["title"]
    assert found[0]["breakdown"]["task_type"] == 10 and found[0]["breakdown"]["failure_class"] == 8
    assert found[0]["score"] > found[1]["score"]
    task = {"task_type": "dev", "failure_class": "TIMEOUT", "event_type": "task_failed"}
    ids = _context_ids(alice, "what should I check first", task=task)
    assert found[0]["id"] in ids
    bad = alice.post("/api/brain/memory/context", json={"query": "x", "task": {"task_type": "cooking"}})
    assert bad.status_code == 422 and bad.json()["field"] == "task.task_type"
    assert alice.post("/api/learnings/relevant", json={"event_type": "Task Failed"}).status_code == 422


def _nested(depth: int) -> dict:
    """An object whose innermost value sits under `depth` objects."""
    out: dict = {"leaf": 1}
    for _ in range(depth - 1):
        out = {"a": out}
    return out


BAD = [
    ("task", {"title": "t", "colour": "red"}, "colour"),
    ("task", {"title": "t", "status": "done"}, "status"),
    ("task", {"title": ""}, "title"),
    ("task", {"title": "   "}, "title"),
    ("event", {"type": "task_failed", "payload": "boom"}, "payload"),
    ("event", {"type": "task_failed", "payload": [1, 2]}, "payload"),
    ("task", {"title": "t", "key": "k" * (MAX_ITEM_KEY + 1)}, "key"),
    ("learning", {"title": "l", "content": "c" * (MAX_ITEM_TEXT + 1)}, "content"),
    ("task", {"title": "t", "at": "1999-12-31T00:00:00Z"}, "at"),
    ("task", {"title": "t", "at": "2999-01-01T00:00:00Z"}, "at"),
    ("task", {"title": "t", "at": 4_000_000_000}, "at"),
    ("goal", {"title": "g", "progress": 101}, "progress"),
    ("goal", {"title": "g", "progress": "50"}, "progress"),  # a JSON number only, as a batch and the CLI say
    ("goal", {"title": "g", "priority": "1"}, "priority"),
    ("task", {"title": "t", "at": True}, "at"),  # the field itself, not one type of its union ("at.str")
    ("task", {"title": "t", "at": {}}, "at"),
    ("learning", {"title": "l", "failure_class": "timeout"}, "failure_class"),
    ("task", {"title": "t", "metadata": {"a": "x\x00y"}}, "metadata"),
    ("event", {"type": "alert", "payload": {"x\x00": 1}}, "payload"),
    ("event", {"type": "memory_retrieval", "payload": {"note": "mine"}}, "type"),  # the build log's: export drops it
    ("task", {"title": "t", "metadata": {"a": ["ok", {"b": "\x00"}]}}, "metadata"),
    ("task", {"title": "t", "metadata": _nested(MAX_OBJECT_DEPTH + 1)}, "metadata"),  # read back it broke the encoder
]


def test_metadata_at_the_depth_limit_and_an_escaped_backslash_read_back(alice):
    meta = {"path": "C:\\u0000dir", "deep": _nested(MAX_OBJECT_DEPTH - 1)}  # a backslash, then "u0000": no NUL
    made = alice.post("/api/tasks", json={"title": "deep but fine", "metadata": meta})
    assert made.status_code == 201, made.text
    got = alice.get(f"/api/brain/memory/detail/{made.json()['id']}")
    assert got.status_code == 200, got.text
    assert {k: got.json()["metadata"][k] for k in meta} == meta


@pytest.mark.parametrize(("source", "item", "field"), BAD)
def test_bad_input_is_a_422_naming_the_field_and_the_item_and_writes_nothing(alice, runtime, source, item, field):
    one = alice.post(f"/api/{PLURAL[source]}", json=item)
    assert one.status_code == 422, one.text
    assert one.json()["field"] == field and one.json()["detail"][0]["loc"][-1] == field
    good = {"task": {"title": "fine"}, "learning": {"title": "fine"}, "goal": {"title": "fine"},
            "event": {"type": "alert", "payload": {}}}[source]
    batch = alice.post(f"/api/{PLURAL[source]}/batch", json={"items": [good, good, item]})
    assert batch.status_code == 422, batch.text
    assert batch.json()["field"] == f"items[2].{field}"
    assert batch.json()["detail"][0]["loc"] == ["body", "items", "2", field]
    assert _written(runtime.pool) == 0


def test_bodies_that_are_not_items_and_oversized_batches(alice, runtime):
    for body in ([{"title": "t"}], "task", 5):
        r = alice.post("/api/tasks", json=body)
        assert r.status_code == 422, r.text
    r = alice.post("/api/tasks/batch", json={"items": [{"title": "ok"}, "not an object"]})
    assert r.status_code == 422 and r.json()["field"] == "items[1]"
    r = alice.post("/api/tasks/batch", json={"items": [{"title": "ok"}, {"title": "t", "progress": "half"}]})
    assert r.status_code == 422 and r.json()["field"] == "items[1].progress", r.text  # one spelling, every 422
    r = alice.post("/api/tasks/batch", json={"items": []})
    assert r.status_code == 422 and r.json()["field"] == "items"
    # Over the documented maxItems: a 422 like any schema violation (413 is a body over its bytes), naming items.
    assert httpx.get(f"{alice.base_url}/openapi.json").json()["components"]["schemas"]["TaskBatch"]["properties"][
        "items"]["maxItems"] == MAX_BATCH
    r = alice.post("/api/tasks/batch", json={"items": [{"title": f"t{i}"} for i in range(MAX_BATCH + 1)]})
    assert r.status_code == 422 and r.json()["field"] == "items", r.text[:300]
    problem = r.json()["detail"][0]
    assert problem["loc"] == ["body", "items"] and str(MAX_BATCH) in problem["msg"], problem
    assert str(MAX_BATCH + 1) in problem["msg"], problem
    r = alice.post("/api/tasks/batch", json={"items": [{"title": "a", "key": "k"}, {"title": "b", "key": "k"}]})
    assert r.status_code == 422 and r.json()["field"] == "items[1].key"
    r = alice.patch("/api/tasks/T-1", json={})
    assert r.status_code in (404, 422)
    # bytes that are not UTF-8, and JSON nested deeper than the parser reads, were a 400 naming nothing
    deep = '{"title": "deep", "metadata": ' + '{"a": ' * 5000 + "1" + "}" * 5001
    for raw in ('{"title": "caf\xe9"}'.encode("latin-1"), deep.encode()):
        r = alice.post("/api/tasks", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and r.json()["field"] == "body", r.text[:300]
    assert _written(runtime.pool) == 0
    ok = alice.post("/api/tasks/batch", json={"items": [{"title": f"t{i}"} for i in range(MAX_BATCH)]})
    assert ok.status_code == 200 and ok.json()["counts"]["created"] == MAX_BATCH


def test_owners_never_touch_each_others_items(alice, bob, runtime):
    mine = alice.post("/api/tasks", json=ONE["task"]).json()
    theirs = bob.post("/api/tasks", json=ONE["task"]).json()
    assert theirs["action"] == "created" and theirs["id"] != mine["id"]
    unknown_id = "00000000-0000-0000-0000-000000000000"
    for ref, missing in ((mine["id"], unknown_id), ("T-1", "T-404")):
        carol = client(alice.base_url.__str__(), create_key(runtime.pool, "carol")[1])
        other = carol.patch(f"/api/tasks/{ref}", json={"status": "failed"})
        unknown = carol.patch(f"/api/tasks/{missing}", json={"status": "failed"})
        assert other.status_code == unknown.status_code == 404
        assert other.json()["detail"].replace(ref, "X") == unknown.json()["detail"].replace(missing, "X")
    assert bob.patch(f"/api/tasks/{mine['id']}", json={"status": "failed"}).status_code == 404
    assert bob.patch("/api/tasks/T-1", json={"status": "failed"}).json()["id"] == theirs["id"]
    rows = {str(r["id"]): r for r in _rows(runtime.pool, "task")}
    assert rows[mine["id"]]["status"] == "in_progress" and rows[theirs["id"]]["status"] == "failed"
    assert alice.post("/api/tasks", json={"title": "x"}, params={"owner_id": "bob"}).status_code == 422
    assert httpx.post(f"{alice.base_url}/api/tasks", json={"title": "x"}).status_code == 401


def test_a_collision_with_another_stored_item_is_a_409_naming_the_field(alice, runtime):
    assert alice.post("/api/capabilities", json={"name": "Summarise logs"}).status_code == 201
    r = alice.post("/api/capabilities", json={"name": "Summarise logs", "key": "c-1"})
    assert r.status_code == 409 and r.json()["field"] == "name" and "Summarise logs" in r.json()["detail"]
    r = alice.post("/api/capabilities/batch", json={"items": [{"name": "Other"}, {"name": "Summarise logs",
                                                                                   "key": "c-1"}]})
    assert r.status_code == 409 and r.json()["field"] == "items[1].name"
    alice.post("/api/tasks/batch", json={"items": [{"title": "a", "key": "A"}, {"title": "b", "key": "B"}]})
    r = alice.patch("/api/tasks/B", json={"key": "A"})
    assert r.status_code == 409 and r.json()["field"] == "key"
    assert [row["name"] for row in _rows(runtime.pool, "capability")] == ["Summarise logs"]
    assert sorted(row["key"] for row in _rows(runtime.pool, "task")) == ["A", "B"]


def test_a_method_a_path_does_not_take_is_a_405_naming_every_method_it_takes(alice):
    """Starlette named the first route whose path matched: OPTIONS /api/learnings/batch said `Allow: DELETE`,
    from /api/learnings/{ref}."""
    for path, allowed in [("/api/learnings/batch", {"POST", "PATCH", "DELETE"}),  # a key may be "batch"
                          ("/api/learnings/relevant", {"POST", "PATCH", "DELETE"}),
                          ("/api/tasks/T-1", {"PATCH", "DELETE"}), ("/health", {"GET"})]:
        r = alice.request("OPTIONS", path)
        assert r.status_code == 405, (path, r.text)
        assert {m.strip() for m in r.headers["allow"].split(",")} == allowed, (path, r.headers["allow"])
        assert "detail" in r.json()


def test_a_keyless_capability_rewriting_a_keyed_one_by_name_says_updated_and_is_reindexed(alice, runtime):
    """A keyless write found the keyed row of that name and changed it, but answered `unchanged` and skipped the
    keyword index: the new words were not keyword-searchable."""
    made = alice.post("/api/capabilities", json={"key": "h1", "name": "helm", "description": "charts"}).json()
    r = alice.post("/api/capabilities", json={"name": "helm", "description": "charts quokka"})
    assert r.status_code == 201 and r.json()["id"] == made["id"], r.text
    assert r.json()["action"] == "updated", r.text
    assert made["id"] in _found(alice, "quokka", "keyword")
    again = alice.post("/api/capabilities", json={"name": "helm", "description": "charts quokka"}).json()
    assert again["action"] == "unchanged"
    assert [(row["key"], row["description"]) for row in _rows(runtime.pool, "capability")] == [("h1", "charts quokka")]


def test_a_keyless_capability_rewriting_a_keyed_one_by_name_answers_the_stored_key(alice, runtime):
    """The keyless rewrite answered `key: null` although the row it updated (or left unchanged) has a key."""
    made = alice.post("/api/capabilities", json={"key": "h1", "name": "helm", "description": "charts"}).json()
    updated = alice.post("/api/capabilities", json={"name": "helm", "description": "charts v2"})
    assert updated.json() == {"id": made["id"], "key": "h1", "action": "updated"}, updated.text
    same = alice.post("/api/capabilities", json={"name": "helm", "description": "charts v2"})
    assert same.json() == {"id": made["id"], "key": "h1", "action": "unchanged"}, same.text
    batch = alice.post("/api/capabilities/batch", json={"items": [{"name": "helm", "description": "charts v3"},
                                                                 {"name": "kubectl", "description": "pods"}]})
    assert batch.status_code == 200, batch.text
    assert [(x["key"], x["action"]) for x in batch.json()["results"]] == [("h1", "updated"), (None, "created")]
    assert [(row["key"], row["name"]) for row in _rows(runtime.pool, "capability")] == [("h1", "helm"),
                                                                                         (None, "kubectl")]


def test_a_write_with_a_query_parameter_it_does_not_take_is_refused_and_changes_nothing(alice, runtime):
    """`POST /api/tasks?dry_run=true` (as the erase takes it) rewrote the keyed task for real, clearing the fields
    the body left out; any change (POST, PATCH, DELETE) now refuses a query parameter it does not take."""
    alice.post("/api/tasks", json={"key": "T-1", "title": "Fix the gateway", "status": "in_progress"})
    before = _rows(runtime.pool, "task")
    for method, path, body in [("POST", "/api/tasks", {"key": "T-1", "title": "Fix the gateway"}),
                               ("POST", "/api/tasks/batch", {"items": [{"key": "T-1", "title": "x"}]}),
                               ("PATCH", "/api/tasks/T-1", {"status": "failed"})]:
        r = alice.request(method, path, json=body, params={"dry_run": "true"})
        assert r.status_code == 422 and r.json()["field"] == "dry_run", (method, path, r.text)
    assert _rows(runtime.pool, "task") == before
    assert alice.get("/api/brain/memory/builds", params={"limit": 1, "_": "1"}).status_code == 200  # reads: as before


def test_two_capabilities_taking_one_name_at_once_store_one_and_the_other_is_a_409(alice, runtime, db_url):
    """Each write's name check ran before the other's row was committed; the second then hit the unique name:
    it was a 500 (UniqueViolation), and must be the 409 a sequential write gets."""
    with psycopg.connect(db_url) as holder, ThreadPoolExecutor(2) as ex:
        holder.execute("SELECT pg_advisory_xact_lock(%s, hashtext('capability:alice:stats'))", (LOCK_KEYWORD_STATS,))
        first = ex.submit(alice.post, "/api/capabilities", json={"name": "Race name", "key": "r-1"})
        _lock_waits(db_url, 1)  # the first inserted its row and waits to count it in alice's statistics
        second = ex.submit(alice.post, "/api/capabilities", json={"name": "Race name", "key": "r-2"})
        _lock_waits(db_url, 2)  # the second passed the name check and waits on the first's uncommitted row
        holder.commit()
        answers = [first.result(30), second.result(30)]
    assert [a.status_code for a in answers] == [201, 409], [a.text for a in answers]
    assert answers[1].json()["field"] == "name"
    assert [(row["key"], row["name"]) for row in _rows(runtime.pool, "capability")] == [("r-1", "Race name")]


def test_two_patches_taking_one_capability_name_at_once_change_one_and_the_other_is_a_409(alice, runtime, db_url):
    alice.post("/api/capabilities/batch", json={"items": [{"name": "first", "key": "A"},
                                                          {"name": "second", "key": "B"}]})
    with psycopg.connect(db_url) as holder, ThreadPoolExecutor(2) as ex:
        holder.execute("SELECT pg_advisory_xact_lock(%s, hashtext('capability:alice:stats'))", (LOCK_KEYWORD_STATS,))
        first = ex.submit(alice.patch, "/api/capabilities/A", json={"name": "taken"})
        _lock_waits(db_url, 1)
        second = ex.submit(alice.patch, "/api/capabilities/B", json={"name": "taken"})
        _lock_waits(db_url, 2)
        holder.commit()
        answers = [first.result(30), second.result(30)]
    assert [a.status_code for a in answers] == [200, 409], [a.text for a in answers]
    assert answers[1].json()["field"] == "name"
    assert sorted((row["key"], row["name"]) for row in _rows(runtime.pool, "capability")) == [
        ("A", "taken"), ("B", "second")]


def test_an_owner_id_naming_the_keys_own_owner_is_taken_and_any_other_refused(alice, runtime):
    """An item write refused `owner_id` outright ("Extra inputs are not permitted") where every other body takes
    the key's own owner; another owner's is refused everywhere, and nothing is written."""
    mine = alice.post("/api/tasks", json={"title": "own", "key": "T-1", "owner_id": "alice"})
    assert mine.status_code == 201, mine.text
    batch = alice.post("/api/tasks/batch", json={"owner_id": "alice", "items": [{"title": "two", "key": "T-2",
                                                                                 "owner_id": "alice"}]})
    assert batch.status_code == 200, batch.text  # each item's schema is the single write's, owner_id and all
    r = alice.post("/api/tasks/batch", json={"items": [{"title": "x", "key": "T-3"},
                                                       {"title": "y", "owner_id": "bob"}]})
    assert r.status_code == 422 and r.json()["field"] == "items[1].owner_id", r.text
    assert alice.patch("/api/tasks/T-1", json={"status": "completed", "owner_id": "alice"}).status_code == 200
    for method, path, body in (("POST", "/api/tasks", {"title": "x", "key": "T-3"}),
                               ("POST", "/api/tasks/batch", {"items": [{"title": "x", "key": "T-3"}]}),
                               ("PATCH", "/api/tasks/T-2", {"status": "failed"})):
        r = alice.request(method, path, json={**body, "owner_id": "bob"})
        assert r.status_code == 422 and r.json()["field"] == "owner_id", r.text
    rows = {row["key"]: (row["owner_id"], row["status"]) for row in _rows(runtime.pool, "task")}
    assert rows == {"T-1": ("alice", "completed"), "T-2": ("alice", "pending")}
