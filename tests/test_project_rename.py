"""Renaming a project through real HTTP and the CLI: the key stays, reads show the new name at once, a write by
the new name files there, the next refresh indexes the memories with it; refusals name the field and change
nothing; another owner's project of the same key is untouched and unreachable."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

from memory_pipelines.index.keywords import index_source, keyword_stale
from memory_pipelines.index.vectors import count_pending, embed_source
from memory_pipelines.infra.auth import create_key
from memory_pipelines.retrieval.filters import SearchFilters
from memory_pipelines.retrieval.search import search
from memory_pipelines.store.projects import ensure_project
from memory_pipelines.vocabulary import LOCK_PROJECT_NAMES
from tests.removal_world import table_counts
from tests.test_cli import run_cli
from tests.test_items_api import _lock_waits


def _client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _projects(c: httpx.Client) -> dict[str, tuple[str, int]]:
    return {p["project_key"]: (p["project_name"], p["memory_count"]) for p in c.get("/projects").json()["projects"]}


def _keyword_ids(runtime, owner: str, query: str) -> set[str]:
    found = search(runtime.pool, runtime.embedder, owner, query, mode="keyword",
                   filters=SearchFilters(sources=("memory",)), limit=10)
    return {h.id for h in found.hits}


@pytest.fixture
def pair(live, runtime):
    a, b = (_client(live, create_key(runtime.pool, o)[1]) for o in ("alice", "bob"))
    ids = []
    for c, text in ((a, "Alice ships the memory service on Tuesdays"), (a, "The vector index is rebuilt nightly"),
                    (b, "Bob ships the memory service on Tuesdays")):
        r = c.post("/ingest/memory", json={"project_name": "agent-mem", "content_type": "plan", "content": text,
                                           "wait": True})
        assert r.status_code == 200, r.text
        ids.append(r.json()["id"])
    a.post("/ingest/memory", json={"project_name": "web-app", "content_type": "requirement", "wait": True,
                                   "content": "The login page keeps the session cookie for 30 days."})
    return a, b, ids


def test_rename_keeps_the_key_shows_the_name_and_files_writes_by_it(pair, runtime):
    a, b, (m1, m2, bob_memory) = pair
    assert _keyword_ids(runtime, "alice", "zephyr") == set()
    r = a.patch("/projects/agent-mem", json={"project_name": "Zephyr memory"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["project_key"] == "agent-mem" and out["previous_name"] == "agent-mem"
    assert out["project_name"] == "Zephyr memory" and out["renamed"] and out["fragments_pending"] == 2
    assert _projects(a) == {"agent-mem": ("Zephyr memory", 2), "web-app": ("web-app", 1)}
    assert _projects(b) == {"agent-mem": ("agent-mem", 1)}  # bob's project of the same key keeps its name

    by_name = a.get("/memories/search", params={"query": "ships Tuesdays", "project_name": "Zephyr memory"}).json()
    assert {x["id"] for x in by_name["results"]} == {m1, m2}
    written = a.post("/ingest/memory", json={"project_name": "Zephyr memory", "content_type": "insight",
                                             "content": "Deploys on Tuesdays need a second reviewer.", "wait": True})
    assert written.status_code == 200, written.text
    assert _projects(a) == {"agent-mem": ("Zephyr memory", 3), "web-app": ("web-app", 1)}

    # the next refresh embeds and indexes the renamed project's memories with the name the model reads
    with runtime.pool.connection() as conn:
        assert count_pending(conn, "fragment", runtime.embedder.model_name)[0] >= 2
        assert keyword_stale(conn, "fragment")[0] >= 2
    embed_source(runtime.pool, runtime.embedder, "fragment")
    index_source(runtime.pool, "fragment")
    with runtime.pool.connection() as conn:
        assert count_pending(conn, "fragment", runtime.embedder.model_name)[0] == 0
        assert keyword_stale(conn, "fragment")[0] == 0
    assert {m1, m2, written.json()["id"]} <= _keyword_ids(runtime, "alice", "zephyr")
    assert _keyword_ids(runtime, "bob", "zephyr") == set()
    assert bob_memory not in _keyword_ids(runtime, "alice", "ships Tuesdays")

    same = a.patch("/projects/agent-mem", json={"project_name": "Zephyr memory"}).json()
    assert not same["renamed"] and same["previous_name"] == "Zephyr memory" and same["fragments_pending"] == 0


def test_rename_refusals_name_the_field_and_change_nothing(pair, runtime):
    a, b, _ids = pair
    before = table_counts(runtime.pool)
    for name in ("web-app", "Web App", "WEB  app"):  # another project's name, or the key the name derives
        r = a.patch("/projects/agent-mem", json={"project_name": name})
        assert r.status_code == 422 and r.json()["field"] == "project_name", r.text
        assert "already names project 'web-app'" in r.json()["detail"][0]["msg"]
    for body in ({"project_name": ""}, {"project_name": "   "}, {"project_name": "x" * 201}, {}):
        r = a.patch("/projects/agent-mem", json=body)
        assert r.status_code == 422 and r.json()["field"] == "project_name", (body, r.text)
    missing = a.patch("/projects/no-such", json={"project_name": "New"})
    assert missing.status_code == 404 and "no project 'no-such'" in missing.text
    assert a.patch("/projects/web-app", json={"project_name": "New"}).status_code == 200
    # alice's key from bob answers exactly as a key nobody has
    foreign = b.patch("/projects/web-app", json={"project_name": "Bob's now"})
    unknown = b.patch("/projects/zzz", json={"project_name": "Bob's now"})
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json() == {k: v.replace("zzz", "web-app") for k, v in unknown.json().items()}
    other = a.patch("/projects/agent-mem", json={"project_name": "x", "owner_id": "bob"})
    assert other.status_code == 422 and other.json()["field"] == "owner_id"
    assert _projects(a) == {"agent-mem": ("agent-mem", 2), "web-app": ("New", 1)}
    assert _projects(b) == {"agent-mem": ("agent-mem", 1)}
    after = table_counts(runtime.pool)
    assert after == before


def test_rename_project_at_the_command_line(db_url, pool):
    with pool.connection() as conn:
        ensure_project(conn, "alice", "agent-mem", "agent-mem")
        ensure_project(conn, "alice", "web-app", "Web App")
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    done = run_cli(["rename-project", "agent-mem", "Agent Memory", "--owner", "alice"], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("renamed project agent-mem: 'agent-mem' -> 'Agent Memory' "
                                   "(0 fragments to embed again on the next refresh)")
    clash = run_cli(["rename-project", "agent-mem", "Web App", "--owner", "alice"], env)
    assert clash.returncode == 2 and "Traceback" not in clash.stderr
    assert clash.stderr.startswith("error: project_name: 'Web App' already names project 'web-app'"), clash.stderr
    empty = run_cli(["rename-project", "agent-mem", " ", "--owner", "alice"], env)
    assert empty.returncode == 2 and empty.stderr.startswith("error: project_name: "), empty.stderr  # not --name
    by_name = run_cli(["rename-project", "Agent Memory", "Other", "--owner", "alice"], env)
    assert by_name.returncode == 2
    assert "the project named 'Agent Memory' has key 'agent-mem'" in by_name.stderr, by_name.stderr
    with pool.connection() as conn:
        names = dict(conn.execute("SELECT project_key, project_name FROM projects WHERE owner_id = 'alice'"))
    assert names == {"agent-mem": "Agent Memory", "web-app": "Web App"}


def test_a_new_project_may_not_take_a_name_another_answers_to(pair, runtime):
    """Writing with a new key and another project's name made two projects of one name, and a filter or a write by
    that name then reached only one of them: it is refused like a rename to that name, and nothing is stored."""
    a, _b, _ids = pair
    before = table_counts(runtime.pool)
    for name in ("web-app", "Web App"):
        r = a.post("/ingest/memory", json={"project_key": "web-app-2", "project_name": name,
                                           "content_type": "plan", "content": "A second login page."})
        assert r.status_code == 422 and r.json()["field"] == "project_name", r.text
        assert "already names project 'web-app'" in r.json()["detail"][0]["msg"]
    assert table_counts(runtime.pool) == before
    same = a.post("/ingest/memory", json={"project_key": "web-app", "project_name": "Web App",
                                          "content_type": "plan", "content": "The login page shows the key."})
    assert same.status_code == 200, same.text  # the project's own key: the name is not another's
    assert _projects(a) == {"agent-mem": ("agent-mem", 2), "web-app": ("web-app", 2)}


def test_two_new_projects_taking_one_name_at_once_create_one(pair, runtime, db_url):
    a, _b, _ids = pair
    with psycopg.connect(db_url) as holder, ThreadPoolExecutor(2) as ex:
        holder.execute("SELECT pg_advisory_xact_lock(%s, hashtext('alice'))", (LOCK_PROJECT_NAMES,))
        writes = [ex.submit(a.post, "/ingest/memory", json={"project_key": key, "project_name": "Shared name",
                                                            "content_type": "plan", "content": f"Plan {key}."})
                  for key in ("first-key", "second-key")]
        _lock_waits(db_url, 2)  # both found their key new and wait to check the name
        holder.commit()
        codes = sorted(w.result(30).status_code for w in writes)
    assert codes == [200, 422]
    named = [k for k, (name, _n) in _projects(a).items() if name == "Shared name"]
    assert len(named) == 1 and named[0] in ("first-key", "second-key")
