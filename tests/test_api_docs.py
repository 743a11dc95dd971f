"""The API documents itself truthfully: every endpoint names its answer (a model, with examples) and its errors;
real answers match the documented models field for field; request examples succeed as written; the docs pages
load from this server only; oversized bodies are a 413 and a body naming a member twice a 422; the build history and
hit rates, per owner."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel

from memory_pipelines import Memory
from memory_pipelines.context.history import hit_rates, recent_builds
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all
from memory_pipelines.infra.auth import create_key
from memory_pipelines.infra.errors import ValidationError
from memory_pipelines.surfaces.http import create_app
from memory_pipelines.surfaces.http import errors as e
from memory_pipelines.surfaces.http import models as m
from memory_pipelines.surfaces.http import responses as r
from memory_pipelines.surfaces.http.routes import items as it
from memory_pipelines.surfaces.http.routes.removal import ExportedRow
from memory_pipelines.vocabulary import MAX_BODY_BYTES
from tests.factories import add_capability, add_event, add_goal, add_learning, add_task

ZH = "我们选择 pgvector 存储向量，因为 PostgreSQL 已经在用，运维成本低，支持 HNSW 索引。"
DOCS = Path(__file__).resolve().parents[1] / "docs"
EN = "The login page keeps the session cookie for 30 days so users stay signed in across subdomains."


@pytest.fixture(scope="module")
def spec() -> dict:
    return create_app(object()).openapi()  # the document needs no database


def _client(url: str, key: str | None) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=60)


def _operations(spec: dict) -> Iterator[tuple[str, str, dict]]:
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            yield method, path, op


def _ref(schema: dict) -> str:
    return schema["$ref"].rsplit("/", 1)[-1]


# -- the document ------------------------------------------------------------------------------------------

def test_the_docs_count_the_operations_the_schema_has(spec):
    count = re.search(r"Over the (\d+) operations", (DOCS / "http-api.md").read_text())
    assert count and int(count.group(1)) == sum(1 for _ in _operations(spec))


def test_bounds_are_json_schema_ones(spec):
    from tests.test_vocabulary import _nonstandard

    assert _nonstandard(spec) == []


def test_every_endpoint_documents_its_answer_errors_and_what_it_does(spec):
    seen = 0
    for method, path, op in _operations(spec):
        seen += 1
        where = f"{method.upper()} {path}"
        assert len(op.get("description", "")) > len(op["summary"]) > 0, where
        content = (op["responses"].get("200") or op["responses"]["201"])["content"]
        ok = (content.get("application/json") or content["application/x-ndjson"])["schema"]  # a stream: a line's
        assert ok.get("$ref") or "application/json" not in content, f"{where}: an empty 200 schema"
        model = spec["components"]["schemas"][_ref(ok)] if "$ref" in ok else ok
        assert model.get("examples") and model.get("properties"), where
        codes = set(op["responses"])
        if path == "/health":
            assert "503" in codes and not op.get("security")
            continue
        assert op["security"] == [{"HTTPBearer": []}], where
        assert {"401", "422", "503"} <= codes, where
        for code in codes - {"200", "201"}:
            schema = op["responses"][code]["content"]["application/json"]["schema"]
            assert _ref(schema) == ("ValidationProblem" if code == "422" else "Error"), (where, code)
            assert op["responses"][code]["description"], (where, code)
        if "{" in path:
            assert "404" in codes, where
        if method == "post":
            assert {"400", "413"} <= codes, where
    # the item resources (5 sources × write, batch, update; relevant), the ways out, and renaming a project
    assert seen == 17 + 16 + 10 + 1


def test_request_examples_are_valid_and_never_name_the_owner(spec):
    bodies = {"SearchRequest": m.SearchRequest, "RelatedRequest": m.RelatedRequest, "IngestRequest": m.IngestRequest,
              "ContextRequest": m.ContextRequest, "FeedbackRequest": m.FeedbackRequest,
              "ImplicitFeedbackRequest": m.ImplicitFeedbackRequest,
              "RelevantLearningsRequest": it.RelevantLearningsRequest, "ProjectRename": m.ProjectRename,
              **{model.__name__: model for model in [*it.ITEM_MODELS.values(), *it.BATCH_MODELS.values(),
                                                      *it.CHANGE_MODELS.values()]}}
    posts = [op for method, _p, op in _operations(spec) if method in ("post", "patch")]
    assert len(posts) == len(bodies)
    for op in posts:
        name = _ref(op["requestBody"]["content"]["application/json"]["schema"])
        examples = spec["components"]["schemas"][name]["examples"]
        assert examples, name
        for example in examples:
            assert "owner_id" not in json.dumps(example), name
            bodies[name].model_validate(example)
    # owner_id stays documented (and rejected when it names another owner), only the examples leave it out
    assert "owner_id" in spec["components"]["schemas"]["IngestRequest"]["properties"]


def test_response_examples_validate_against_their_models():
    models = [v for module in (r, e, it) for v in vars(module).values()
              if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == module.__name__]
    checked = 0
    for model in models:
        for example in (model.model_config.get("json_schema_extra") or {}).get("examples", []):
            model.model_validate(example)
            checked += 1
    assert checked >= 18


# -- real answers against the documented models ----------------------------------------------------------

def _api_routes(app) -> list[APIRoute]:
    """The app's API routes, those of its included routers too."""
    return [c.original_route for c in iter_route_contexts(app.routes) if isinstance(c.original_route, APIRoute)]


def _documented(app, method: str, path: str) -> type[BaseModel]:
    for route in _api_routes(app):
        if route.path_format == path and method.upper() in route.methods:
            return route.response_model
    raise AssertionError(f"no route {method} {path}")


def test_real_answers_match_the_documented_models_field_for_field(app, live, runtime):
    key = create_key(runtime.pool, "alice")[1]
    c = _client(live, key)
    zh = c.post("/ingest/memory", json={"project_name": "agent-mem", "content_type": "development",
                                        "speaker": "李雷", "content": ZH}).json()
    c.post("/ingest/memory", json={"project_name": "web-app", "content_type": "requirement", "content": EN})
    with runtime.pool.connection() as conn:
        task = add_task(conn, "alice", "feat(auth): cross-subdomain cookie auth", "cookie auth on subdomains")
        gone = {"tasks": add_task(conn, "alice", "an old task"), "learnings": add_learning(conn, "alice", "a lesson"),
                "capabilities": add_capability(conn, "alice", "a skill"), "goals": add_goal(conn, "alice", "a goal"),
                "events": add_event(conn, "alice", "alert", {"disk": "full"})}
    embed_all(runtime.pool, runtime.embedder)
    index_all(runtime.pool)
    ctx = c.post("/api/brain/memory/context", json={"query": "pgvector cookie", "mode": "debug"}).json()
    c.post("/api/brain/memory/feedback", json={"retrieval_id": ctx["retrieval_id"], "used_ids": [zh["id"]]})
    calls = [
        ("GET", "/health", "/health", None),
        ("GET", "/whoami", "/whoami", None),
        ("POST", "/api/brain/memory/search", "/api/brain/memory/search", {"query": "cookie 登录", "topK": 5}),
        ("POST", "/api/brain/memory/search", "/api/brain/memory/search", {"query": "cookie", "mode": "keyword"}),
        ("GET", "/api/brain/memory/detail/{id}", f"/api/brain/memory/detail/{task}", None),
        ("GET", "/api/brain/memory/detail/{id}", f"/api/brain/memory/detail/{zh['id']}", None),
        ("GET", "/api/brain/memory/detail/{id}", f"/api/brain/memory/detail/{gone['goals']}", None),
        ("GET", "/api/brain/memory/detail/{id}", f"/api/brain/memory/detail/{gone['events']}", None),
        ("POST", "/api/brain/memory/search-related", "/api/brain/memory/search-related", {"base_id": task}),
        ("POST", "/api/brain/memory/context", "/api/brain/memory/context", {"query": "cookie", "tokenBudget": 300}),
        ("POST", "/api/brain/memory/feedback/implicit", "/api/brain/memory/feedback/implicit",
         {"retrieval_id": ctx["retrieval_id"], "output": "向量放在 pgvector 里，运维成本低。"}),
        ("POST", "/api/brain/memory/feedback", "/api/brain/memory/feedback",
         {"retrieval_id": ctx["retrieval_id"], "used_ids": [zh["id"]]}),
        ("GET", "/api/brain/memory/builds", "/api/brain/memory/builds", {"limit": 1}),
        ("GET", "/api/brain/memory/builds/{retrieval_id}", f"/api/brain/memory/builds/{ctx['retrieval_id']}", None),
        ("GET", "/api/brain/memory/hit-rates", "/api/brain/memory/hit-rates", {"days": 3}),
        ("POST", "/ingest/memory", "/ingest/memory", {"project_name": "agent-mem", "content_type": "development",
                                                      "content": ZH}),
        ("GET", "/memories/search", "/memories/search", {"query": "pgvector"}),
        ("GET", "/memories", "/memories", {"ids": f"{zh['id']},mem_ffffffffffffffffffff"}),
        ("GET", "/memories/timeline", "/memories/timeline", {"limit": 1}),
        ("GET", "/memories/{memory_id}/versions", f"/memories/{zh['id']}/versions", None),
        ("GET", "/projects", "/projects", None),
        ("PATCH", "/projects/{project_key}", "/projects/agent-mem", {"project_name": "Agent memory"}),
        ("POST", "/api/learnings/relevant", "/api/learnings/relevant", {"task_type": "dev"}),
        ("GET", "/api/owner/export", "/api/owner/export", None),
        *(("DELETE", f"/api/{plural}/{{ref}}", f"/api/{plural}/{item}", None) for plural, item in gone.items()),
        ("DELETE", "/memories/{memory_id}", f"/memories/{zh['id']}", None),
        ("DELETE", "/projects/{project_key}", "/projects/web-app", None),
        ("GET", "/api/removals", "/api/removals", {"limit": 5}),
        ("DELETE", "/api/owner", "/api/owner", {"dry_run": "true"}),
    ]
    for source, plural in it.PLURAL.items():
        calls += [
            ("POST", f"/api/{plural}", f"/api/{plural}", it.EXAMPLES[source]),
            ("POST", f"/api/{plural}/batch", f"/api/{plural}/batch", {"items": [it.EXAMPLES[source]]}),
            ("PATCH", f"/api/{plural}/{{ref}}", f"/api/{plural}/{it.EXAMPLES[source]['key']}",
             it.CHANGE_EXAMPLES[source]),
        ]
    documented = {(route.path_format, method) for route in _api_routes(app) if route.include_in_schema
                  for method in route.methods}
    assert {(t, mth) for mth, t, _p, _b in calls} == documented  # every endpoint is checked
    for method, template, path, payload in calls:
        if method in ("GET", "DELETE"):
            answer = c.request(method, path, params=payload)
        else:
            answer = c.request(method, path, json=payload)
        created = method == "POST" and template in {f"/api/{plural}" for plural in it.PLURAL.values()}
        assert answer.status_code == (201 if created else 200), (path, answer.text)
        if template == "/api/owner/export":  # JSON Lines: each line is one documented row
            lines = answer.text.splitlines()
            assert len(lines) >= 8 and all(ExportedRow.model_validate_json(line) for line in lines)
            continue
        _documented(app, method, template).model_validate(answer.json())  # extra fields are forbidden

    errors = [
        (httpx.get(f"{live}/projects"), 401, e.Error),
        (c.get(f"/api/brain/memory/detail/{'mem_' + '0' * 20}"), 404, e.Error),
        (c.get("/api/brain/memory/builds/00000000-0000-0000-0000-000000000000"), 404, e.Error),
        (c.post("/api/brain/memory/search", json={"query": "x", "topK": 0}), 422, e.ValidationProblem),
        (c.get("/api/brain/memory/builds", params={"limit": 0}), 422, e.ValidationProblem),
        (c.get("/api/brain/memory/builds", params={"cursor": "not-a-cursor"}), 422, e.ValidationProblem),
        (c.get("/api/brain/memory/hit-rates", params={"days": 0}), 422, e.ValidationProblem),
        (c.post("/ingest/memory", content=b"x" * (MAX_BODY_BYTES + 1),
                headers={"content-type": "application/json"}), 413, e.Error),
    ]
    for answer, status, model in errors:
        assert answer.status_code == status, (answer.request.url, answer.text)
        model.model_validate(answer.json())
    assert [a.json()["field"] for a, s, _ in errors if s == 422] == ["topK", "limit", "cursor", "days"]


def test_request_examples_succeed_as_written(spec, live, runtime):
    key = create_key(runtime.pool, "alice")[1]
    c = _client(live, key)
    schemas = spec["components"]["schemas"]

    def example(name: str) -> dict:
        return schemas[name]["examples"][0]

    for path, name in (("/ingest/memory", "IngestRequest"), ("/api/brain/memory/search", "SearchRequest"),
                       ("/api/brain/memory/context", "ContextRequest")):
        for body in schemas[name]["examples"]:
            answer = c.post(path, json=body)
            assert answer.status_code == 200, (path, answer.text)
    renamed = c.patch("/projects/agent-mem", json=example("ProjectRename"))  # the ingest examples' project
    assert renamed.status_code == 200 and renamed.json()["renamed"], renamed.text
    # The ones that name an id answer 404 (documented) for an id this owner does not have, never 422 ...
    assert c.post("/api/brain/memory/search-related", json=example("RelatedRequest")).status_code == 404
    assert c.post("/api/brain/memory/feedback", json=example("FeedbackRequest")).status_code == 404
    assert c.post("/api/brain/memory/feedback/implicit", json=example("ImplicitFeedbackRequest")).status_code == 404
    # ... and 200 with ids from earlier answers.
    ctx = c.post("/api/brain/memory/context", json=example("ContextRequest")).json()
    mem = ctx["items"][0]["id"]
    assert c.post("/api/brain/memory/search-related", json={**example("RelatedRequest"), "base_id": mem}) \
        .status_code == 200
    implicit = c.post("/api/brain/memory/feedback/implicit",
                      json={**example("ImplicitFeedbackRequest"), "retrieval_id": ctx["retrieval_id"]})
    assert implicit.status_code == 200, implicit.text
    r.ImplicitFeedback.model_validate(implicit.json())
    fb = c.post("/api/brain/memory/feedback", json={"retrieval_id": ctx["retrieval_id"], "used_ids": [mem]})
    assert fb.status_code == 200 and fb.json()["marked"] == 1
    # The item resources' examples: a write (201), a batch, then the update of the written item by its key.
    for source, plural in it.PLURAL.items():
        name = source.capitalize()
        for body in schemas[f"{name}Item"]["examples"]:
            assert c.post(f"/api/{plural}", json=body).status_code == 201, (plural, body)
        for body in schemas[f"{name}Batch"]["examples"]:
            assert c.post(f"/api/{plural}/batch", json=body).status_code == 200, (plural, body)
        for body in schemas[f"{name}Changes"]["examples"]:
            answer = c.patch(f"/api/{plural}/{it.EXAMPLES[source]['key']}", json=body)
            assert answer.status_code == 200, (plural, answer.text)
    for body in schemas["RelevantLearningsRequest"]["examples"]:
        answer = c.post("/api/learnings/relevant", json=body)
        assert answer.status_code == 200 and answer.json()["learnings"], answer.text


# -- offline docs ------------------------------------------------------------------------------------------

def test_docs_and_redoc_are_served_from_local_files(live):
    for page, assets in (("/docs", ["swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"]),
                         ("/redoc", ["redoc.standalone.js", "favicon.png"])):
        html = httpx.get(f"{live}{page}")
        assert html.status_code == 200 and "'self'" in html.headers["content-security-policy"]
        assert "http://" not in html.text and "https://" not in html.text, page
        for asset in assets:
            assert f"/static/docs/{asset}" in html.text
            got = httpx.get(f"{live}/static/docs/{asset}")
            assert got.status_code == 200 and len(got.content) > 1000, asset
    bundle = httpx.get(f"{live}/static/docs/redoc.standalone.js").text
    assert "cdn.redoc.ly" not in bundle and "Redoc" in bundle
    swagger = httpx.get(f"{live}/docs").text
    assert '"validatorUrl": null' in swagger and '"persistAuthorization": false' in swagger
    assert httpx.get(f"{live}/openapi.json").json()["info"]["title"] == "memory_pipelines"


# -- body limit --------------------------------------------------------------------------------------------

def test_a_body_over_the_limit_is_413_declared_or_streamed(live, runtime):
    key = create_key(runtime.pool, "alice")[1]
    c = _client(live, key)
    big = json.dumps({"project_name": "p", "content_type": "plan", "content": "x" * MAX_BODY_BYTES}).encode()
    declared = c.post("/ingest/memory", content=big, headers={"content-type": "application/json"})
    assert declared.status_code == 413 and str(MAX_BODY_BYTES) in declared.json()["detail"]

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(big), 65536):
            yield big[i:i + 65536]

    streamed = c.post("/ingest/memory", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413 and streamed.json()["detail"] == declared.json()["detail"]
    # Just under the limit the body is read and judged: content over 100 000 characters is a 422 naming it.
    under = c.post("/ingest/memory", json={"project_name": "p", "content_type": "plan", "content": "长" * 100_001})
    assert under.status_code == 422 and under.json()["field"] == "content"
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 0


def test_a_lying_content_length_never_reaches_the_app(live):
    """A raw request that declares more than the limit is refused before its body is sent."""
    host, port = live.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST /ingest/memory HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
        head = sock.recv(4096).decode("latin-1")
    assert head.startswith("HTTP/1.1 413")


# -- repeated members ----------------------------------------------------------------------------------------

def _raw(c: httpx.Client, method: str, path: str, body: str) -> httpx.Response:
    """A JSON body sent as written (a dict cannot hold a member twice)."""
    return c.request(method, path, content=body.encode(), headers={"content-type": "application/json"})


def test_a_body_naming_a_member_twice_is_a_422_naming_it_and_where_and_writes_nothing(live, runtime):
    """Python's JSON parser keeps the last of two same-named members: `{"content": "a", "content": "b"}` stored
    "b", and a proxy or a client that reads the first saw another request than the one served."""
    c = _client(live, create_key(runtime.pool, "alice")[1])
    cases = [
        ("POST", "/ingest/memory", '{"project_name": "p", "content_type": "plan", "content": "a", "content": "b"}',
         ["body", "content"], "content"),
        ("POST", "/api/tasks/batch", '{"items": [{"title": "ok"}, {"title": "t", "metadata": {"k": 1, "k": 2}}]}',
         ["body", "items", "1", "metadata", "k"], "items[1].metadata.k"),  # as a bad item's field: items[1].type
        ("POST", "/api/tasks/batch", '{"items": [{"title": "ok"}, {"title": "t", "metadata": {"0": 1, "0": 2}}]}',
         ["body", "items", "1", "metadata", "0"], "items[1].metadata.0"),  # a member named "0" is no position
        ("POST", "/api/tasks", '{"title": "t", "title": "u"}', ["body", "title"], "title"),
    ]
    for method, path, body, loc, field in cases:
        answer = _raw(c, method, path, body)
        assert answer.status_code == 422, (path, answer.text)
        e.ValidationProblem.model_validate(answer.json())
        problem = answer.json()["detail"][0]
        assert problem["loc"] == loc and repr(loc[-1]) in problem["msg"], (path, problem)
        assert answer.json()["field"] == field
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT (SELECT count(*) FROM memories) + (SELECT count(*) FROM tasks)").fetchone()[0] \
            == 0
    # The same name in different objects is no repeat.
    fine = _raw(c, "POST", "/api/tasks/batch",
                '{"items": [{"title": "a", "metadata": {"title": "x"}}, {"title": "b"}]}')
    assert fine.status_code == 200 and fine.json()["counts"]["created"] == 2, fine.text
    assert _raw(c, "PATCH", "/api/tasks/T-1", '{"status": "failed", "status": "completed"}').json()["field"] == "status"


def test_a_422_names_a_list_position_one_way_whoever_checked_it(live, runtime):
    """The schema's checks named a position `used_ids.0`, the library's `items[1].type`: a client had to parse
    both. Both are `name[i]` now."""
    c = _client(live, create_key(runtime.pool, "alice")[1])
    schema = _raw(c, "POST", "/api/brain/memory/feedback", '{"retrieval_id": "r", "used_ids": ["a", 5]}')
    assert schema.status_code == 422 and schema.json()["field"] == "used_ids[1]", schema.text
    assert schema.json()["detail"][0]["loc"] == ["body", "used_ids", "1"]
    library = _raw(c, "POST", "/api/tasks/batch", '{"items": [{"title": "ok"}, {"title": "t", "progress": "x"}]}')
    assert library.status_code == 422 and library.json()["field"] == "items[1].progress", library.text


def test_every_json_body_refuses_a_repeated_member(spec, live, runtime):
    """Every operation that takes a body parses it the same way: a router built without the app's route class
    would take `{"a": 1, "a": 2}` as `{"a": 2}` (and refuse `a` as an unknown field, not as a repeat)."""
    c = _client(live, create_key(runtime.pool, "alice")[1])
    with_body = [(m, p) for m, p, op in _operations(spec) if "requestBody" in op]
    assert with_body == [(m, p) for m, p, _op in _operations(spec) if m in ("post", "put", "patch")]
    for method, path in with_body:
        answer = _raw(c, method.upper(), re.sub(r"\{[^}]+\}", "T-1", path), '{"zz": {"a": 1}, "zz": 2}')
        assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["body", "zz"], (path, answer.text)


# -- build history and hit rates -----------------------------------------------------------------------------

def _builds(c: httpx.Client, n: int, query: str = "pgvector 索引") -> list[dict]:
    out = []
    for i in range(n):
        ctx = c.post("/api/brain/memory/context", json={"query": f"{query} {i}", "tokenBudget": 200}).json()
        out.append({**ctx, "query": f"{query} {i}"})
        time.sleep(0.005)
    return out


def test_build_history_pages_newest_first_with_used_marks_per_owner(live, runtime):
    a = _client(live, create_key(runtime.pool, "alice")[1])
    b = _client(live, create_key(runtime.pool, "bob")[1])
    for content in (ZH, EN):
        a.post("/ingest/memory", json={"project_name": "p", "content_type": "plan", "content": content})
    b.post("/ingest/memory", json={"project_name": "p", "content_type": "plan", "content": "bob's pgvector note"})
    built = _builds(a, 5)
    b_ctx = _builds(b, 1)[0]
    used = [built[2]["items"][0]["id"]]
    a.post("/api/brain/memory/feedback", json={"retrieval_id": built[2]["retrieval_id"], "used_ids": used})

    seen, cursor = [], None
    while True:
        page = a.get("/api/brain/memory/builds", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        seen += page["builds"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [s["retrieval_id"] for s in seen] == [x["retrieval_id"] for x in reversed(built)]
    for shown, ctx in zip(seen, reversed(built), strict=True):
        assert [i["id"] for i in shown["items"]] == [i["id"] for i in ctx["items"]]  # block order
        assert [i["score"] for i in shown["items"]] == pytest.approx([i["score"] for i in ctx["items"]])
        assert all(i["injected"] and i["title"] for i in shown["items"])
        assert (shown["query"], shown["mode"], shown["token_used"]) == (ctx["query"], "execute", ctx["token_used"])
    marked = next(s for s in seen if s["retrieval_id"] == built[2]["retrieval_id"])
    assert [i["id"] for i in marked["items"] if i["used"]] == used and marked["used_count"] == 1
    assert marked["feedback_at"] is not None
    assert all(s["feedback_at"] is None for s in seen if s is not marked)

    one = a.get(f"/api/brain/memory/builds/{built[0]['retrieval_id']}").json()
    assert [i["rank"] for i in one["items"]] == sorted(i["rank"] for i in one["items"])
    assert one["candidates_count"] == len([i for i in one["items"] if i["source"] != "okr"])

    # Bob sees his build only; Alice's build is "not found" for him, exactly like a missing one.
    assert [x["retrieval_id"] for x in b.get("/api/brain/memory/builds").json()["builds"]] == [b_ctx["retrieval_id"]]
    theirs = b.get(f"/api/brain/memory/builds/{built[0]['retrieval_id']}")
    missing = b.get("/api/brain/memory/builds/00000000-0000-0000-0000-000000000000")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"].replace(built[0]["retrieval_id"], "X") == \
        missing.json()["detail"].replace("00000000-0000-0000-0000-000000000000", "X")
    assert b.get("/api/brain/memory/hit-rates").json()["total"]["builds"] == 1
    assert b.get("/whoami").json() == {"owner": "bob"}
    assert b.get("/api/brain/memory/builds", params={"owner_id": "alice"}).status_code == 422
    for path in ("/whoami", "/api/brain/memory/builds", "/api/brain/memory/hit-rates",
                 f"/api/brain/memory/builds/{built[0]['retrieval_id']}"):
        assert httpx.get(f"{live}{path}").status_code == 401


def test_hit_rates_per_utc_day(runtime):
    mem = Memory(runtime, llm=None)
    mem.ingest("alice", content=ZH, content_type="plan", project_name="p")
    mem.ingest("alice", content=EN, content_type="plan", project_name="p")
    today = datetime.now(UTC).date()
    plan = [(0, 1), (0, None), (1, 0), (3, 2)]  # (days ago, items marked used; None: no feedback)
    expected: dict[date, list[int]] = {}
    for ago, n_used in plan:
        ctx = mem.context("alice", "pgvector cookie", token_budget=400)
        items = [i.id for i in ctx.items]
        assert len(items) >= 2
        if n_used is not None:
            assert mem.feedback("alice", ctx.retrieval_id, items[:n_used]) == n_used
            tally = expected.setdefault(today - timedelta(days=ago), [0, 0])
            tally[0] += len(items)
            tally[1] += n_used
        with runtime.pool.connection() as conn:
            conn.execute("UPDATE retrievals SET created_at = created_at - make_interval(days => %s) WHERE id = %s",
                         (ago, ctx.retrieval_id))
    mem.context("bob", "pgvector")  # another owner's builds never count

    rates = hit_rates(runtime.pool, "alice", days=7, today=today)
    assert rates["since"] == (today - timedelta(days=6)).isoformat() and rates["until"] == today.isoformat()
    assert [d["day"] for d in rates["daily"]] == [(today - timedelta(days=6 - k)).isoformat() for k in range(7)]
    for d in rates["daily"]:
        day = date.fromisoformat(d["day"])
        injected, used = expected.get(day, [0, 0])
        assert (d["injected"], d["used"]) == (injected, used), day
        assert d["hit_rate"] == (pytest.approx(used / injected, abs=1e-4) if injected else None)
        assert d["builds"] == sum(1 for ago, _ in plan if today - timedelta(days=ago) == day)
    total = rates["total"]
    assert (total["builds"], total["with_feedback"]) == (4, 3)
    assert total["used"] == 3 and total["hit_rate"] == pytest.approx(3 / total["injected"], abs=1e-4)
    assert sum(s["injected"] for s in rates["by_source"]) == total["injected"]

    short = hit_rates(runtime.pool, "alice", days=2, today=today)
    assert len(short["daily"]) == 2 and short["total"]["builds"] == 3  # the build 3 days ago is outside
    assert hit_rates(runtime.pool, "nobody", days=1)["total"] == {
        "builds": 0, "with_feedback": 0, "injected": 0, "used": 0, "hit_rate": None}
    for bad in (0, 367, True, "7"):
        with pytest.raises(ValidationError):
            hit_rates(runtime.pool, "alice", days=bad)
    for bad_cursor in ("", "bm9wZQ", "x" * 40):
        with pytest.raises(ValidationError):
            recent_builds(runtime.pool, "alice", cursor=bad_cursor)
