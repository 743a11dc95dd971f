"""The HTTP API through real HTTP (uvicorn on loopback): happy paths, keys, owner isolation, 422s, fuzz."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_pipelines import Memory
from memory_pipelines.embeddings.openai_provider import OpenAIEmbedder
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all
from memory_pipelines.infra.auth import create_key, resolve_key, revoke_key
from memory_pipelines.infra.llm import ChatLLM
from memory_pipelines.runtime import Runtime
from memory_pipelines.surfaces.http import create_app
from tests.factories import add_learning, add_task

TABLES = ("projects", "memories", "fragments", "memory_versions", "memory_arbitrations", "tasks", "learnings",
          "retrievals", "retrieval_candidates", "api_keys", "keyword_docs")


class LiveServer:
    """uvicorn serving an ASGI app on 127.0.0.1 in a thread."""

    def __init__(self, app) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                return self
            time.sleep(0.02)
        raise RuntimeError("uvicorn did not start")

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def keys(runtime) -> dict[str, str]:
    return {owner: create_key(runtime.pool, owner, name="test")[1] for owner in ("alice", "bob")}


def client(url: str, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=url, headers=headers, timeout=60)


def counts(pool) -> dict[str, int]:
    with pool.connection() as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


def ingest(c: httpx.Client, content: str, content_type: str = "development", project: str = "agent-mem",
           **extra) -> dict:
    r = c.post("/ingest/memory", json={"project_name": project, "content_type": content_type,
                                       "content": content, **extra})
    assert r.status_code == 200, r.text
    return r.json()


ZH = "我们选择 pgvector 存储向量，因为 PostgreSQL 已经在用，运维成本低，支持 HNSW 索引。"
EN = "The login page caches the session cookie for 30 days so users stay signed in across subdomains."

P = {"project_name": "p", "content_type": "plan"}

# (method, path, json body or query params) for every endpoint that needs a key.
ENDPOINTS = [
    ("POST", "/api/brain/memory/search", {"query": "pgvector"}),
    ("GET", "/api/brain/memory/detail/mem_00000000000000000000", None),
    ("POST", "/api/brain/memory/search-related", {"base_id": "mem_00000000000000000000"}),
    ("POST", "/api/brain/memory/context", {"query": "pgvector"}),
    ("POST", "/api/brain/memory/feedback", {"retrieval_id": "00000000-0000-0000-0000-000000000000",
                                            "used_ids": []}),
    ("POST", "/ingest/memory", {**P, "content": "x"}),
    ("GET", "/memories/search", {"query": "pgvector"}),
    ("GET", "/memories", {"ids": "mem_00000000000000000000"}),
    ("GET", "/memories/timeline", {}),
    ("GET", "/memories/mem_00000000000000000000/versions", None),
    ("GET", "/projects", None),
]


def call(c: httpx.Client, method: str, path: str, payload) -> httpx.Response:
    if method == "GET":
        return c.get(path, params=payload or None)
    return c.post(path, json=payload)


# -- health, docs ----------------------------------------------------------------------------------

def test_health_needs_no_key_and_reports_database_and_model(live, runtime):
    r = httpx.get(f"{live}/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["database"] == "ok"
    assert body["embedding_model"] == runtime.embedder.model_name and body["dimension"] == 384


def test_openapi_lists_every_endpoint_and_docs_are_served(live):
    spec = httpx.get(f"{live}/openapi.json").json()
    paths = set(spec["paths"])
    for _m, path, _p in ENDPOINTS:
        template = path.replace("mem_00000000000000000000", "{id}")
        assert template in paths or template.replace("{id}", "{memory_id}") in paths, template
    assert "/health" in paths
    assert "bearer" in json.dumps(spec["components"]["securitySchemes"]).lower()
    ingest_schema = spec["components"]["schemas"]["IngestRequest"]
    assert set(ingest_schema["properties"]["content_type"]["enum"]) == {
        "requirement", "plan", "development", "testing", "insight"}
    assert httpx.get(f"{live}/docs").status_code == 200


# -- keys ------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_every_endpoint_is_401_without_or_with_a_bad_key(live, runtime, keys):
    key_id, revoked = create_key(runtime.pool, "alice", name="old")
    assert revoke_key(runtime.pool, key_id)
    before = counts(runtime.pool)
    for method, path, payload in ENDPOINTS:
        for c in (client(live, None), client(live, "mp_not_a_real_key"), client(live, revoked),
                  httpx.Client(base_url=live, headers={"Authorization": f"Basic {keys['alice']}"})):
            r = call(c, method, path, payload)
            assert r.status_code == 401, (method, path, r.status_code, r.text)
            assert r.headers.get("www-authenticate", "").lower().startswith("bearer")
    # The same requests with a valid key are not 401.
    for method, path, payload in ENDPOINTS[:1]:
        assert call(client(live, keys["alice"]), method, path, payload).status_code == 200
    after = counts(runtime.pool)
    assert {k: v for k, v in after.items() if k != "api_keys"} == \
        {k: v for k, v in before.items() if k != "api_keys"}


# -- happy paths -----------------------------------------------------------------------------------

def test_memory_centre_flow_ingest_search_get_timeline_projects_versions(live, keys):
    c = client(live, keys["alice"])
    zh = ingest(c, ZH, "development", speaker="李雷", machine_name="laptop", ts=int(time.time()) - 120)
    en = ingest(c, EN, "requirement", project="web-app", ts=int(time.time()) - 60)
    assert zh["status"] == "created" and en["status"] == "created"
    assert zh["id"] != en["id"]

    r = c.get("/memories/search", params={"query": "为什么用 pgvector 存储向量"})
    assert r.status_code == 200, r.text
    found = r.json()
    items = found[next(k for k in ("results", "items", "matches", "memories") if k in found)]
    ids = [i["id"] for i in items]
    assert zh["id"] in ids
    assert all(len(i.get("snippet", "")) <= 200 for i in items)

    scoped = c.get("/memories/search", params={"query": "cookie session", "project_key": "web-app",
                                               "scope": "requirement", "limit": 5}).json()
    scoped_items = scoped[next(k for k in ("results", "items", "matches", "memories") if k in scoped)]
    assert [i["id"] for i in scoped_items] == [en["id"]]

    got = c.get("/memories", params={"ids": f"{zh['id']},{en['id']}"}).json()
    full = {m["id"]: m for m in got["memories"]}
    assert full[zh["id"]]["content"] == ZH and full[en["id"]]["content"] == EN
    assert full[zh["id"]]["session"] is None

    projects = c.get("/projects").json()["projects"]
    assert {p["project_key"] for p in projects} == {"agent-mem", "web-app"}

    tl = c.get("/memories/timeline", params={"project_key": "agent-mem"}).json()
    tl_items = tl[next(k for k in ("items", "memories", "results") if k in tl)]
    assert [i["id"] for i in tl_items] == [zh["id"]]
    limited = c.get("/memories/timeline", params={"content_type": "requirement", "limit": 1}).json()
    assert [i["id"] for i in limited[next(k for k in ("items", "memories", "results") if k in limited)]] \
        == [en["id"]]

    page1 = c.get("/memories/timeline", params={"limit": 1}).json()
    page2 = c.get("/memories/timeline", params={"limit": 1, "cursor": page1["next_cursor"]}).json()
    assert [i["id"] for i in page1["items"] + page2["items"]] == [zh["id"], en["id"]]  # oldest first
    assert page2["next_cursor"] is None
    assert c.get("/memories/timeline", params={"since": "2999-01-01T00:00:00Z"}).json()["items"] == []
    assert len(c.get("/memories/timeline", params={"until": "2999-01-01"}).json()["items"]) == 2

    v = c.get(f"/memories/{zh['id']}/versions")
    assert v.status_code == 200
    assert v.json() == {"memory_id": zh["id"], "versions": []}  # created, never replaced (rules never replace)

    # Turns of a conversation: the answer is found through the question it answers (sql/008).
    q = ingest(c, "Did you finish the lighthouse painting for the harbour exhibition?", "insight", project="chat",
               speaker="Caroline", session="call-1")
    a = ingest(c, "Yes! It took me three weekends and the kids chose the frame.", "insight", project="chat",
               speaker="Mel", session="call-1")
    got = c.get("/memories", params={"ids": a["id"]}).json()["memories"][0]
    assert got["session"] == "call-1"
    found = c.get("/memories/search", params={"query": "lighthouse painting harbour", "project_key": "chat"}).json()
    items = found[next(k for k in ("results", "items", "matches", "memories") if k in found)]
    assert {q["id"], a["id"]} <= {i["id"] for i in items}


def test_a_replace_over_http_keeps_the_old_text_as_a_version(runtime, keys, fake_openai):
    llm = ChatLLM(api_key="test", model="fake-chat", base_url=fake_openai.base_url, max_retries=0)
    newer = EN.replace("30 days", "31 days")
    with LiveServer(create_app(Memory(runtime, llm=llm))) as srv:
        c = client(srv.url, keys["alice"])
        fake_openai.chat_responses.append(json.dumps({"summary": "Cookie kept 30 days", "tags": ["cookie"]}))
        first = ingest(c, EN, "requirement", project="web-app", ts=1_700_000_000)
        fake_openai.chat_responses.extend([json.dumps({"summary": "Cookie kept 31 days", "tags": ["cookie"]}),
                                           json.dumps({"action": "REPLACE", "reason": "the duration changed"})])
        second = ingest(c, newer, "plan", project="web-app", ts=1_700_000_100)
        assert (second["status"], second["action"], second["id"]) == ("updated", "REPLACE", first["id"])

        v = c.get(f"/memories/{first['id']}/versions")
        assert v.status_code == 200, v.text
        (old,) = v.json()["versions"]
        assert {k: old[k] for k in ("version", "content_type", "summary", "content", "tags", "ts")} == {
            "version": 1, "content_type": "requirement", "summary": "Cookie kept 30 days", "content": EN,
            "tags": ["cookie"], "ts": 1_700_000_000}
        assert old["replaced_at"]
        now = c.get("/memories", params={"ids": first["id"]}).json()["memories"][0]
        assert (now["content"], now["content_type"], now["ts"], now["version_count"]) == (
            newer, "plan", 1_700_000_100, 2)
        assert c.get(f"/memories/{second['id']}/versions", headers={"Authorization": f"Bearer {keys['bob']}"}
                     ).status_code == 404  # another owner's memory


def test_a_provider_answering_nan_vectors_degrades_and_keeps_the_write(runtime, keys, fake_openai):
    """NaN vectors reached PostgreSQL, which refused them: search and context answered 500 and a write waiting for
    its embedding was not stored. Now such an answer is the provider's failure, handled as an outage is."""
    embedder = OpenAIEmbedder("test-key", base_url=fake_openai.base_url, model="test-embed", dimensions=384)
    broken = Runtime(settings=runtime.settings, url=runtime.url, pool=runtime.pool, embedder=embedder)
    with LiveServer(create_app(Memory(broken, llm=None))) as srv:
        c = client(srv.url, keys["alice"])
        fake_openai.faults.extend([{"vectors": "nan"}] * 6)
        r = c.post("/ingest/memory", json={"project_name": "ops", "content_type": "plan", "wait": True,
                                           "content": "The dugong survey starts on Monday."})
        assert r.status_code == 200 and r.json()["action"] == "DEFERRED", r.text
        found = c.get("/memories/search", params={"query": "dugong survey"})
        assert found.status_code == 200 and r.json()["id"] in {m["id"] for m in found.json()["results"]}, found.text
        built = c.post("/api/brain/memory/context", json={"query": "dugong survey", "mode": "plan"})
        assert built.status_code == 200 and built.json()["degraded"], built.text
        fake_openai.faults.clear()
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM memories WHERE owner_id = 'alice'").fetchone()[0] == 1


def test_progressive_search_summary_detail_related(live, keys, runtime):
    desc = "用 cookie 替代 localStorage 保存登录态"
    with runtime.pool.connection() as conn:
        t1 = add_task(conn, "alice", "feat(auth): cross-subdomain cookie auth", desc,
                      metadata={"repo": "cecelia-workspace", "pr_number": 6})
        add_task(conn, "alice", "fix(auth): cookie domain for subdomains", "cookie auth on every subdomain")
        add_learning(conn, "alice", "cookie auth needs SameSite=None", "cross-subdomain cookie auth pitfalls")
    embed_all(runtime.pool, runtime.embedder)
    index_all(runtime.pool)
    c = client(live, keys["alice"])

    r = c.post("/api/brain/memory/search", json={"query": "cookie auth", "topK": 2, "mode": "summary"})
    assert r.status_code == 200, r.text
    matches = r.json()["matches"]
    assert 1 <= len(matches) <= 2
    assert set(matches[0]) >= {"id", "level", "title", "similarity", "preview"}

    d = c.get(f"/api/brain/memory/detail/{t1}").json()
    assert d["id"] == t1 and d["level"] == "task" and d["status"] == "completed"
    assert d["metadata"]["pr_number"] == 6 and "localStorage" in d["description"]

    rel = c.post("/api/brain/memory/search-related", json={"base_id": t1, "topK": 5}).json()["matches"]
    assert rel and t1 not in [m["id"] for m in rel]
    with_self = c.post("/api/brain/memory/search-related",
                       json={"base_id": t1, "topK": 5, "exclude_self": False}).json()["matches"]
    assert t1 in [m["id"] for m in with_self]


def test_context_then_feedback(live, keys, runtime):
    c = client(live, keys["alice"])
    ingest(c, ZH)
    ingest(c, EN, "requirement", project="web-app")
    r = c.post("/api/brain/memory/context", json={"query": "pgvector 向量索引", "tokenBudget": 300})
    assert r.status_code == 200, r.text
    ctx = r.json()
    assert ctx["token_budget"] == 300 and ctx["token_used"] <= 300 and ctx["mode"] == "execute"
    assert ctx["retrieval_id"] and ctx["items"] and "pgvector" in ctx["block"]
    used = [ctx["items"][0]["id"]]
    fb = c.post("/api/brain/memory/feedback", json={"retrieval_id": ctx["retrieval_id"], "used_ids": used})
    assert fb.status_code == 200 and fb.json() == {"retrieval_id": ctx["retrieval_id"], "marked": 1}
    with runtime.pool.connection() as conn:
        marked = conn.execute("SELECT item_id FROM retrieval_candidates WHERE retrieval_id = %s AND used",
                              (ctx["retrieval_id"],)).fetchall()
    assert [m[0] for m in marked] == used
    again = c.post("/api/brain/memory/feedback", json={"retrieval_id": ctx["retrieval_id"], "used_ids": used})
    assert again.json()["marked"] == 1  # explicit feedback replaces the marks: a repeat gives the same ones

    # an id the build did not inject (a typo, another build's item), or no used_ids at all, labels nothing
    fresh = c.post("/api/brain/memory/context", json={"query": "pgvector 向量索引", "tokenBudget": 300}).json()
    for body in ({"used_ids": ["typo-id"]}, {"used_ids": [used[0], ctx["retrieval_id"]]}, {}):
        bad = c.post("/api/brain/memory/feedback", json={"retrieval_id": fresh["retrieval_id"], **body})
        assert bad.status_code == 422 and bad.json()["field"] == "used_ids", bad.text
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT feedback_at FROM retrievals WHERE id = %s",
                            (fresh["retrieval_id"],)).fetchone() == (None,)
    none = c.post("/api/brain/memory/feedback", json={"retrieval_id": fresh["retrieval_id"], "used_ids": []})
    assert none.json()["marked"] == 0  # "nothing was used" is feedback too


def test_a_degraded_context_with_nothing_over_the_floor_does_not_claim_a_keyword_answer(live, keys, runtime):
    """Provider down, 50 near-identical tasks: every keyword match was under the relevance floor and the block was
    empty, yet `degraded` said "answered from keywords"."""
    with runtime.pool.connection() as conn:
        for i in range(50):
            add_task(conn, "alice", "deploy the billing service", f"rollout step {i} of the billing deploy")
    index_all(runtime.pool)
    runtime.embedder.fail_after = 0  # the provider is down from here
    ctx = client(live, keys["alice"]).post("/api/brain/memory/context", json={"query": "billing deploy"}).json()
    assert ctx["items"] == [] and ctx["degraded"]
    assert "answered from keywords" not in ctx["degraded"], ctx["degraded"]
    assert "no keyword match cleared the relevance floor" in ctx["degraded"]


def test_feedback_naming_an_item_forgotten_since_the_build_says_so_and_marks_nothing(live, keys, runtime):
    """A build, a forget of one of its injected items, then feedback naming it answered "'<id>' is not an item
    this build injected": it was, and the agent would look for a typo. The 422 (naming used_ids, nothing marked)
    now says it may have been forgotten since and to leave it out; the other ids are accepted alone."""
    c = client(live, keys["alice"])
    with runtime.pool.connection() as conn:
        gone = add_learning(conn, "alice", "login cookie: SameSite", "set SameSite=None with Secure on the cookie")
        kept = add_task(conn, "alice", "fix the login cookie bug", "the session cookie expired after 30 days")
    embed_all(runtime.pool, runtime.embedder)
    index_all(runtime.pool)
    ctx = c.post("/api/brain/memory/context", json={"query": "login cookie SameSite session"}).json()
    assert {gone, kept} <= {i["id"] for i in ctx["items"]}, ctx["items"]
    assert c.delete(f"/api/learnings/{gone}").status_code == 200
    bad = c.post("/api/brain/memory/feedback", json={"retrieval_id": ctx["retrieval_id"], "used_ids": [gone, kept]})
    assert bad.status_code == 422 and bad.json()["field"] == "used_ids", bad.text
    assert "forgotten since (1 of its items was)" in bad.text, bad.text
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT feedback_at FROM retrievals WHERE id = %s",
                            (ctx["retrieval_id"],)).fetchone() == (None,)
    ok = c.post("/api/brain/memory/feedback", json={"retrieval_id": ctx["retrieval_id"], "used_ids": [kept]})
    assert ok.status_code == 200 and ok.json()["marked"] == 1, ok.text


# -- owner isolation -------------------------------------------------------------------------------

def test_two_owners_cannot_reach_each_other_through_any_endpoint(live, keys, runtime):
    a, b = client(live, keys["alice"]), client(live, keys["bob"])
    secret = "alice secret: the vault passphrase is tangerine-42 保险库口令"
    a_mem = ingest(a, secret, "insight", project="vault")["id"]
    with runtime.pool.connection() as conn:
        a_task = add_task(conn, "alice", "alice private task tangerine", "tangerine vault rotation")
    embed_all(runtime.pool, runtime.embedder)
    index_all(runtime.pool)
    a_ctx = a.post("/api/brain/memory/context", json={"query": "tangerine vault"}).json()["retrieval_id"]
    b_mem = ingest(b, "bob's own note about tangerine vaults", "insight", project="vault")["id"]
    missing_mem, missing_task = "mem_ffffffffffffffffffff", "00000000-0000-0000-0000-0000000000ff"
    before = counts(runtime.pool)

    def same_as_missing(path_of, theirs, missing):
        r1, r2 = b.get(path_of(theirs)), b.get(path_of(missing))
        assert r1.status_code == r2.status_code == 404
        assert r1.json()["detail"].replace(theirs, "X") == r2.json()["detail"].replace(missing, "X")

    same_as_missing(lambda i: f"/api/brain/memory/detail/{i}", a_mem, missing_mem)
    same_as_missing(lambda i: f"/api/brain/memory/detail/{i}", a_task, missing_task)
    same_as_missing(lambda i: f"/memories/{i}/versions", a_mem, missing_mem)
    for theirs, missing in ((a_mem, missing_mem), (a_task, missing_task)):
        r1 = b.post("/api/brain/memory/search-related", json={"base_id": theirs})
        r2 = b.post("/api/brain/memory/search-related", json={"base_id": missing})
        assert r1.status_code == r2.status_code == 404
    fb = b.post("/api/brain/memory/feedback", json={"retrieval_id": a_ctx, "used_ids": [a_mem]})
    fb_missing = b.post("/api/brain/memory/feedback",
                        json={"retrieval_id": "00000000-0000-0000-0000-000000000000", "used_ids": [a_mem]})
    assert fb.status_code == fb_missing.status_code == 404

    got = b.get("/memories", params={"ids": f"{a_mem},{b_mem}"})
    got_missing = b.get("/memories", params={"ids": f"{missing_mem},{b_mem}"})
    assert got.status_code == got_missing.status_code
    assert secret not in got.text and "tangerine-42" not in got.text
    assert got.text.replace(a_mem, "X") == got_missing.text.replace(missing_mem, "X")

    answers = [
        b.post("/api/brain/memory/search", json={"query": secret, "topK": 50}),
        b.post("/api/brain/memory/search", json={"query": "alice private task tangerine", "mode": "keyword"}),
        b.get("/memories/search", params={"query": secret, "limit": 100}),
        b.get("/memories/search", params={"query": "tangerine", "project_key": "vault"}),
        b.post("/api/brain/memory/context", json={"query": "tangerine vault passphrase"}),
        b.get("/memories/timeline"),
        b.get("/memories/timeline", params={"project_key": "vault"}),
        b.get("/projects"),
        b.post("/api/brain/memory/search-related", json={"base_id": b_mem, "topK": 50}),
    ]
    assert [r.status_code for r in answers] == [200] * len(answers)  # answered, so the absences below count
    texts = [r.text for r in answers]
    for text in texts:
        assert a_mem not in text and a_task not in text and "tangerine-42" not in text
        assert "alice private task" not in text
    assert b_mem in texts[2]

    # An owner_id in the request never switches owner.
    r = b.post("/api/brain/memory/search", json={"query": "tangerine", "owner_id": "alice"})
    assert r.status_code == 422 and r.json()["field"] == "owner_id"
    r = b.get("/memories/search", params={"query": "tangerine", "owner_id": "alice"})
    assert r.status_code == 422 and r.json()["field"] == "owner_id"
    r = b.post("/api/brain/memory/search", json={"query": "tangerine", "owner_id": "bob"})
    assert r.status_code == 200
    after = counts(runtime.pool)
    assert after["retrievals"] == before["retrievals"] + 1  # only bob's own context build
    assert {k: v for k, v in after.items() if not k.startswith("retrieval")} == \
        {k: v for k, v in before.items() if not k.startswith("retrieval")}


# -- validation ------------------------------------------------------------------------------------

BAD = [
    ("POST", "/ingest/memory", {**P, "content_type": "bogus", "content": "x"}, "content_type"),
    ("POST", "/ingest/memory", {"content_type": "plan", "content": "x"}, "project_name"),
    ("POST", "/ingest/memory", {**P, "content": ""}, "content"),
    ("POST", "/ingest/memory", {**P, "content": "a\x00b"}, "content"),
    ("POST", "/ingest/memory", {**P, "content": "x" * 100_001}, "content"),
    ("POST", "/ingest/memory", {**P, "content": "x", "ts": -1}, "ts"),
    ("POST", "/ingest/memory", {**P, "content": "x", "ts": "1700000000"}, "ts"),  # a JSON number only
    ("POST", "/api/brain/memory/context", {"query": "x", "tokenBudget": "800"}, "tokenBudget"),
    ("POST", "/ingest/memory", {**P, "content": "x", "session": ""}, "session"),
    ("POST", "/ingest/memory", {**P, "content": "x", "session": 7}, "session"),
    ("POST", "/ingest/memory", {**P, "content": "x", "source": "w"},
     "source"),
    ("POST", "/ingest/memory", {**P, "content": "x",
                                "owner_id": "bob"}, "owner_id"),
    ("POST", "/api/brain/memory/search", {"query": "x", "topK": 0}, "topK"),
    ("POST", "/api/brain/memory/search", {"query": "x", "mode": "fast"}, "mode"),
    ("POST", "/api/brain/memory/search", {"topK": 3}, "query"),
    ("POST", "/api/brain/memory/search", {"query": "x" * 2001}, "query"),
    ("POST", "/api/brain/memory/search-related", {"base_id": "", "topK": 3}, "base_id"),
    ("POST", "/api/brain/memory/context", {"query": "x", "tokenBudget": 10}, "tokenBudget"),
    ("POST", "/api/brain/memory/context", {"query": "x", "mode": "sleep"}, "mode"),
    ("POST", "/api/brain/memory/feedback", {"retrieval_id": "r", "used_ids": "abc"}, "used_ids"),
    ("GET", "/memories/search", {"query": "x", "limit": 0}, "limit"),
    ("GET", "/memories/search", {"query": "x", "scope": "everything"}, "scope"),
    ("GET", "/memories/search", {}, "query"),
    ("GET", "/memories", {"ids": ",,"}, "ids"),
    ("GET", "/memories", {"ids": ",".join(f"mem_{i}" for i in range(101))}, "ids"),
    ("GET", "/memories/timeline", {"since": "yesterday"}, "since"),
    ("GET", "/memories/timeline", {"content_type": "bogus"}, "content_type"),
    ("GET", "/memories/timeline", {"limit": 1000}, "limit"),
]


def test_bad_input_is_422_naming_the_field_and_changes_nothing(live, keys, runtime):
    c = client(live, keys["alice"])
    ingest(c, ZH)
    before = counts(runtime.pool)
    for method, path, payload, field in BAD:
        r = call(c, method, path, payload)
        assert r.status_code == 422, (path, payload, r.status_code, r.text)
        assert r.json()["field"] == field, (path, r.json())
    r = c.post("/ingest/memory", content=b'{"content": "x", ', headers={"content-type": "application/json"})
    assert r.status_code == 422
    r = c.post("/api/brain/memory/search", content=b'{"query": "\\ud800"}',
               headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["field"] == "query"
    assert counts(runtime.pool) == before


def test_101_real_memory_ids_are_refused_for_their_count_not_their_characters(live, keys):
    """101 ids of the real shape (`mem_` + 20 hex) ran over the 2,500-character cap first and the 422 said only
    "String should have at most 2500 characters"; a caller reading "up to 100 ids" could not tell why."""
    c = client(live, keys["alice"])
    ids = [f"mem_{i:020x}" for i in range(101)]
    r = c.get("/memories", params={"ids": ",".join(ids)})
    assert r.status_code == 422 and r.json()["field"] == "ids", r.text
    assert "1 to 100 memory ids" in r.json()["detail"][0]["msg"], r.text
    ok = c.get("/memories", params={"ids": ",".join(ids[:100])})
    assert ok.status_code == 200 and len(ok.json()["missing"]) == 100, ok.text


def test_a_422_message_is_the_rule_without_pydantics_value_error_prefix(live, keys):
    """A blank query answered "Value error, must not be blank" while the API's own checks say "must not be before
    since": the web view stripped the prefix itself, every other client showed it."""
    c = client(live, keys["alice"])
    for r in (c.get("/memories/search", params={"query": "   "}),
              c.post("/api/brain/memory/search", json={"query": "   "})):
        assert r.status_code == 422 and r.json()["field"] == "query", r.text
        assert r.json()["detail"][0]["msg"] == "must not be blank", r.text


# -- fuzz ------------------------------------------------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
                     st.sampled_from(["", "all", "plan", "summary", "execute", "mem_x", "\x00", "\ud800",
                                      "00000000-0000-0000-0000-000000000000", "2024-01-01T00:00:00"]))
_values = st.one_of(_scalars, st.lists(_scalars, max_size=4), st.dictionaries(st.text(max_size=5), _scalars,
                                                                              max_size=3))
_fields = ["query", "topK", "mode", "base_id", "exclude_self", "tokenBudget", "retrieval_id", "used_ids",
           "project_name", "project_key", "content_type", "content", "ts", "speaker", "machine_name",
           "project_path", "owner_id", "scope", "limit", "ids", "since", "until", "cursor"]
_bodies = st.one_of(st.dictionaries(st.sampled_from(_fields), _values, max_size=6), _values)
_params = st.dictionaries(st.sampled_from(_fields), st.one_of(st.text(max_size=30), st.integers().map(str),
                                                              st.sampled_from(["0", "-1", "1e9", "nan"])),
                          max_size=5)
_RAW_IDS = ["mem_x", "%00", "..", "a%2Fb", "%ff", "%ed%a0%80"]  # sent as they are (percent-escapes intact)
_path_ids = st.one_of(st.text(min_size=1, max_size=30), st.sampled_from(_RAW_IDS))
_FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _no_5xx(r: httpx.Response) -> None:
    assert r.status_code < 500, (r.request.method, str(r.request.url), r.status_code, r.text[:300])


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for m, p, _ in ENDPOINTS if m == "POST"])
def test_fuzz_post_bodies_never_5xx(live, keys, path):
    c = client(live, keys["alice"])

    @_FUZZ
    @given(body=_bodies)
    def run(body):
        raw = json.dumps(body, ensure_ascii=True, allow_nan=True).encode()
        _no_5xx(c.post(path, content=raw, headers={"content-type": "application/json"}))

    run()


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/memories/search", "/memories", "/memories/timeline", "/projects"])
def test_fuzz_get_params_never_5xx(live, keys, path):
    c = client(live, keys["alice"])

    @_FUZZ
    @given(params=_params)
    def run(params):
        _no_5xx(c.get(path, params=params))

    run()


@pytest.mark.slow
@pytest.mark.parametrize("template", ["/api/brain/memory/detail/{}", "/memories/{}/versions"])
def test_fuzz_path_ids_never_5xx(live, keys, template):
    c = client(live, keys["alice"])

    @_FUZZ
    @given(item_id=_path_ids)
    def run(item_id):
        from urllib.parse import quote

        safe = item_id if item_id in _RAW_IDS else quote(item_id, safe="")
        _no_5xx(c.get(template.format(safe)))

    run()


@_FUZZ
@given(key=st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
                   max_size=80))
@pytest.mark.slow
def test_fuzz_keys_are_401_never_5xx(live, key):
    value = b"Bearer mp_" + key.rstrip(" ").encode("latin-1")  # mp_ passes the key-shape check
    r = httpx.get(f"{live}/projects", headers={"Authorization": value})
    assert r.status_code == 401


# -- CLI: keys and serve ---------------------------------------------------------------------------

def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memory_pipelines.surfaces.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120)


@pytest.mark.slow
def test_cli_keys_create_list_revoke(db_url, runtime):
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    made = _cli(["keys", "create", "--owner", "alice", "--name", "laptop"], env)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("mp_") and "\n" not in key and "not be shown again" in made.stderr
    assert resolve_key(runtime.pool, key) == "alice"

    listed = _cli(["keys", "list", "--owner", "alice"], env)
    assert listed.returncode == 0 and key[:11] in listed.stdout and "laptop" in listed.stdout
    assert key not in listed.stdout
    assert json.loads(_cli(["keys", "list", "--json"], env).stdout)[0]["owner"] == "alice"

    revoked = _cli(["keys", "revoke", key[:11]], env)
    assert revoked.returncode == 0, revoked.stderr
    assert resolve_key(runtime.pool, key) is None
    again = _cli(["keys", "revoke", key[:11]], env)
    assert again.returncode == 2 and "Traceback" not in again.stderr and "no active key" in again.stderr


@pytest.mark.slow
def test_cli_serve_answers_health_and_keys(db_url, runtime):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    proc = subprocess.Popen([sys.executable, "-m", "memory_pipelines.surfaces.cli", "serve", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        health = None
        for _ in range(600):
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read().decode()
                time.sleep(0.1)
        assert health is not None and health.json()["database"] == "ok"
        _kid, key = create_key(runtime.pool, "alice")
        r = httpx.get(f"http://127.0.0.1:{port}/projects", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200 and r.json() == {"projects": []}
        assert httpx.get(f"http://127.0.0.1:{port}/projects").status_code == 401
        # An idle keep-alive connection outlives a client's 5 s idle timeout (uvicorn's default closed it at
        # 5 s, racing clients that reuse connections up to 5 s old: a ReadError under load).
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("GET", "/health")
            first = conn.getresponse()
            assert first.status == 200 and first.read()
            sock = conn.sock
            time.sleep(6)
            conn.request("GET", "/health")  # on the same socket: closed by the server, this raises
            again = conn.getresponse()
            assert again.status == 200 and again.read() and conn.sock is sock
        finally:
            conn.close()
    finally:
        proc.terminate()
        proc.wait(30)


def test_health_answers_503_within_seconds_while_the_database_is_frozen(db_url, fake_embedder):
    """A server that takes the connection and never answers (stopped, stuck in I/O) held `/health` for ever, so
    an orchestrator's probe could not tell a frozen database from a slow check. Here the one pooled connection's
    backend is stopped (SIGSTOP) and continued."""
    import signal

    import psycopg

    from memory_pipelines.infra.db import close_pool, get_pool
    from memory_pipelines.infra.settings import Settings
    from memory_pipelines.runtime import Runtime

    url = psycopg.conninfo.make_conninfo(db_url, application_name="frozen-health")  # a pool of its own
    pool = get_pool(url, max_size=1)
    memory = Memory(Runtime(Settings(database_url=url, embedder="fake"), url, pool, fake_embedder), llm=None)
    with LiveServer(create_app(memory)) as srv:
        with pool.connection() as conn:
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        assert httpx.get(f"{srv.url}/health").json()["database"] == "ok"
        os.kill(backend, signal.SIGSTOP)
        try:
            started = time.monotonic()
            r = httpx.get(f"{srv.url}/health", timeout=30)
            took = time.monotonic() - started
            assert (r.status_code, r.json()["status"]) == (503, "degraded") and took < 5, (r.text, took)
            assert r.json()["database"].startswith("not answering")
            again = httpx.get(f"{srv.url}/health", timeout=30)  # the first check still waits: said at once
            assert again.status_code == 503 and "a check has waited" in again.json()["database"]
        finally:
            os.kill(backend, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while httpx.get(f"{srv.url}/health").status_code != 200:
            assert time.monotonic() < deadline, "health did not recover once the backend went on"
            time.sleep(0.2)
    close_pool(url)
