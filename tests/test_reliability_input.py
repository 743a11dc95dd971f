"""Issue 15, a hostile-but-fair probe of the input surfaces: each finding is a test here.

2. Any schema-valid content is stored (the tokenizer caps one call at 200 000 tokens; "<|endoftext|>" is text),
   and a failed ingest leaves nothing behind (no project without its memory).
3. What the LLM answers is cleaned before it is stored (NUL, lone surrogates, lengths, tag counts), or the
   extractive fallback is used: the memory is stored either way.
4. A forged timeline cursor is a 422 naming `cursor` over HTTP and a tool error over MCP, never a 500.
6. Secrets are never printed: a malformed DATABASE_URL is one line without its password (exit 2); messages and
   log lines mask URLs' passwords and keys.
7. Every surface validates the same way: the CLI checks --owner and the query with the shared limits; MCP refuses
   an owner_id naming another owner and unknown arguments; `ts` has the schema minimum the library accepts;
   since / until are whole Unix seconds or ISO times; a rejected query parameter is reported at ["query", name].

And a schemathesis run of the HTTP API against a live server (a few hundred cases here; 10 000+ by hand, see
`test_schemathesis_fuzz_of_the_http_api`).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from memory_pipelines import Memory
from memory_pipelines.infra.auth import create_key
from memory_pipelines.infra.llm import ChatLLM
from memory_pipelines.infra.redact import install_redaction, redact, redact_url
from memory_pipelines.surfaces.http import create_app
from memory_pipelines.surfaces.mcp import build_http_app
from memory_pipelines.text.chunks import chunk_text
from memory_pipelines.text.tokens import _encoding, count_tokens, truncate_to_tokens
from memory_pipelines.vocabulary import MAX_QUERY, MAX_TS, MIN_TS
from tests.test_api import EN, ZH, LiveServer, client, ingest
from tests.test_mcp import _client, data, error_text

ROOT = Path(__file__).resolve().parents[1]
ROCKETS = "🚀" * 100_000  # 300 000 tokens: over the tokenizer's 200 000 per call
FAMILIES = "👨‍👩‍👧‍👦" * 14_000  # 98 000 characters, 252 000 tokens
SPECIAL = "The tokenizer's end marker <|endoftext|> is text here, and so is <|fim_prefix|>."


def _table_counts(pool) -> dict[str, int]:
    with pool.connection() as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("projects", "memories", "fragments", "memory_arbitrations")}


@pytest.fixture
def fake_llm(fake_openai) -> ChatLLM:
    return ChatLLM(api_key="sk-test-key-0123456789", model="gpt-test", base_url=fake_openai.base_url,
                   max_retries=0)


@pytest.fixture
def live_llm(runtime, fake_llm):
    """The HTTP API with a chat model (the fake OpenAI server) summarising and arbitrating."""
    with LiveServer(create_app(Memory(runtime, llm=fake_llm))) as srv:
        yield srv.url


@pytest.fixture
def key(runtime) -> str:
    return create_key(runtime.pool, "alice", name="test")[1]


# -- 2. any schema-valid content; no half-written ingest ------------------------------------------------------

def test_tokens_are_counted_for_text_over_the_tokenizer_cap_and_special_token_text():
    assert count_tokens(ROCKETS) == 300_000 and count_tokens(FAMILIES) == 252_000
    assert count_tokens(truncate_to_tokens(ROCKETS, 6000)) == 6000
    assert count_tokens(SPECIAL) > 10 and truncate_to_tokens(SPECIAL, 1000) == SPECIAL
    for text in ("The quick brown fox jumps over the lazy dog.  " * 9000, "中文，没有空格。" * 20_000):
        assert count_tokens(text) == len(_encoding().encode_ordinary(text))  # pieces cut where BPE cuts: exact


@pytest.mark.parametrize("content", [ROCKETS, FAMILIES, SPECIAL], ids=["rockets", "families", "special"])
def test_schema_valid_content_is_stored_in_chunks_of_at_most_500_tokens(live, key, runtime, content):
    c = client(live, key)
    r = c.post("/ingest/memory", json={"project_name": "emoji", "content_type": "insight", "content": content})
    assert r.status_code == 200, r.text[:300]
    got = c.get("/memories", params={"ids": r.json()["id"]}).json()["memories"]
    assert got[0]["content"] == content
    with runtime.pool.connection() as conn:
        chunks = [row[0] for row in conn.execute(
            "SELECT content FROM fragments WHERE memory_id = %s ORDER BY chunk_index", (r.json()["id"],))]
    assert chunks == chunk_text(content) and all(count_tokens(chunk) <= 500 for chunk in chunks)


def test_content_over_the_tokenizer_cap_is_summarised_and_stored_with_a_chat_model(live_llm, key, runtime,
                                                                                      fake_openai):
    """The summariser's input is cut to 6 000 tokens: that cut failed on 300 000 tokens, after the project
    had been written (an empty project stayed behind)."""
    fake_openai.chat_responses.append(json.dumps({"summary": "A line of rockets.", "tags": ["rockets"]}))
    r = client(live_llm, key).post("/ingest/memory", json={"project_name": "emoji", "content_type": "insight",
                                                           "content": ROCKETS})
    assert r.status_code == 200, r.text[:300]
    counts = _table_counts(runtime.pool)
    assert counts["projects"] == 1 and counts["memories"] == 1
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT summary FROM memories").fetchone()[0] == "A line of rockets."


def test_a_failed_write_leaves_no_project_behind(runtime):
    """Everything that can fail outside the database runs before the write; the write is one transaction.
    A failure inside it (here a constraint the test adds) rolls back the project too."""
    memory = Memory(runtime, llm=None)
    with runtime.pool.connection() as conn:
        conn.execute("ALTER TABLE memories ADD CONSTRAINT probe_refuses CHECK (content NOT LIKE '%refuse me%')")
    with pytest.raises(psycopg.errors.CheckViolation):
        memory.ingest("alice", content="please refuse me", content_type="plan", project_name="brand-new")
    assert _table_counts(runtime.pool) == {"projects": 0, "memories": 0, "fragments": 0, "memory_arbitrations": 0}
    with runtime.pool.connection() as conn:
        conn.execute("ALTER TABLE memories DROP CONSTRAINT probe_refuses")
    assert memory.ingest("alice", content="now store me", content_type="plan", project_name="brand-new").status \
        == "created"
    assert _table_counts(runtime.pool)["projects"] == 1


# -- 3. the LLM's output is not trusted -----------------------------------------------------------------------

def test_llm_summary_and_tags_are_cleaned_before_they_are_stored(live_llm, key, runtime, fake_openai):
    """Memory content can prompt-inject the summariser into answering with NUL, lone surrogates, a huge
    summary and dozens of tags: what is stored is clean text within the limits."""
    answer = ('{"summary": "Chose\\u0000 pgvector\\ud800 for vectors\\u001b[31m' + " long" * 100 + '", '
              '"tags": ["db\\u0000", "\\udc80", "", "pgvector", "PGVECTOR", ' + ", ".join(
                  f'"tag{i}"' for i in range(40)) + ', "' + "t" * 500 + '"]}')
    fake_openai.chat_responses.append(answer)
    r = client(live_llm, key).post("/ingest/memory", json={"project_name": "p", "content_type": "plan",
                                                           "content": EN})
    assert r.status_code == 200, r.text[:300]
    with runtime.pool.connection() as conn:
        summary, tags, meta = conn.execute("SELECT summary, tags, metadata FROM memories").fetchone()
    assert summary.startswith("Chose pgvector for vectors [31m long") and len(summary) <= 200
    assert "\x00" not in summary and "\x1b" not in summary
    assert tags[:3] == ["db", "pgvector", "tag0"] and len(tags) == 8
    assert meta["summary_by"] == "gpt-test"


def test_an_unusable_llm_summary_falls_back_to_the_extractive_one(live_llm, key, runtime, fake_openai):
    fake_openai.chat_responses.extend(['{"summary": "\\u0000\\u0001 \\ud800", "tags": ["x"]}'] * 2)
    r = client(live_llm, key).post("/ingest/memory", json={"project_name": "p", "content_type": "plan",
                                                           "content": EN})
    assert r.status_code == 200, r.text[:300]
    with runtime.pool.connection() as conn:
        summary, meta = conn.execute("SELECT summary, metadata FROM memories").fetchone()
    assert summary == EN and meta["summary_by"] == "extractive"


def test_an_llm_arbitration_reason_with_nul_is_cleaned(live_llm, key, runtime, fake_openai):
    c = client(live_llm, key)
    fake_openai.chat_responses.append('{"summary": "Session cookie kept 30 days.", "tags": ["cookie"]}')
    first = ingest(c, EN, project="web")
    fake_openai.chat_responses.extend([
        '{"summary": "Session cookie kept 31 days.", "tags": ["cookie"]}',
        '{"action": "KEEP_BOTH", "reason": "different\\u0000 durations\\ud800"}',
    ])
    second = ingest(c, EN.replace("30 days", "31 days"), project="web")
    assert second["action"] == "KEEP_BOTH" and second["candidate_id"] == first["id"]
    with runtime.pool.connection() as conn:
        reason = conn.execute("SELECT reason FROM memory_arbitrations WHERE action = 'KEEP_BOTH'").fetchone()[0]
    assert reason == "different durations"


# -- 4. forged timeline cursors -------------------------------------------------------------------------------

def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


FORGED_CURSORS = [
    _b64("1700000000:mem_\x00bcdef0123456789abcd"),  # a NUL in the id
    _b64("99999999999999999999:mem_0123456789abcdef0123"),  # a ts beyond bigint
    _b64("-99999999999999999999:mem_0123456789abcdef0123"),
    _b64("1700000000:\x00"),
    _b64("１７:mem_0123456789abcdef0123"),  # full-width digits int() would take
    _b64(" 17:mem_0123456789abcdef0123"),
    _b64("17:mem_0123456789abcdef0123") + "==",  # padding: another spelling of a valid cursor
]


def test_forged_timeline_cursors_are_a_422_naming_cursor(live, key):
    c = client(live, key)
    for i in range(3):
        ingest(c, f"memory number {i} about the timeline", ts=MIN_TS + i)
    page = c.get("/memories/timeline", params={"limit": 2}).json()
    assert page["next_cursor"] and len(c.get("/memories/timeline", params={
        "limit": 2, "cursor": page["next_cursor"]}).json()["items"]) == 1
    for cursor in FORGED_CURSORS:
        r = c.get("/memories/timeline", params={"cursor": cursor})
        assert r.status_code == 422, (cursor, r.status_code, r.text[:200])
        assert r.json()["field"] == "cursor" and r.json()["detail"][0]["loc"] == ["query", "cursor"]


def test_booleans_are_not_integers(live, key):
    """JSON true is not 1 (found by the 14,754-case schemathesis run: `topK: true` was answered 200)."""
    c = client(live, key)
    for path, body, field in [
        ("/api/brain/memory/search", {"query": "pgvector", "topK": True}, "topK"),
        ("/api/brain/memory/context", {"query": "pgvector", "tokenBudget": False}, "tokenBudget"),
        ("/ingest/memory", {"content": "a memory", "content_type": "insight", "project_name": "p", "ts": True},
         "ts"),
    ]:
        r = c.post(path, json=body)
        assert r.status_code == 422 and r.json()["field"] == field, (path, r.status_code, r.text[:200])
    assert c.post("/api/brain/memory/search", json={"query": "pgvector", "topK": 3}).status_code == 200


def test_forged_timeline_cursors_are_a_tool_error_over_mcp(runtime):
    _kid, key = create_key(runtime.pool, "dave")
    with LiveServer(build_http_app(Memory(runtime, llm=None))) as srv:

        async def main() -> None:
            async with _client(f"{srv.url}/mcp", key) as mcp:
                for cursor in FORGED_CURSORS:
                    text = error_text(await mcp.call_tool("mem.timeline", {"cursor": cursor}))
                    assert "invalid `cursor`" in text, (cursor, text)

        anyio.run(main)


# -- 6. secrets never printed ---------------------------------------------------------------------------------

def _cli(args: list[str | bytes], env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "OPENAI_API_KEY")}
    return subprocess.run([sys.executable, "-m", "memory_pipelines.surfaces.cli", *args], capture_output=True,
                          env={**full, **env}, timeout=120, cwd=str(ROOT))


@pytest.mark.parametrize("url", [
    "postgresql://probe:s3cret-Pa55@[::1/db",  # unterminated IPv6 host
    "host=localhost password=s3cret-Pa55 bogus=1",  # unknown option
    "postgresql://probe:s3cret-Pa55@localhost:5432/db?sslmode=sometimes",
])
def test_a_malformed_database_url_is_one_line_without_its_password(url, tmp_path):
    proc = _cli(["status"], {"DATABASE_URL": url, "MEMORY_PIPELINES_EMBEDDER": "fake",
                             "MEMORY_PIPELINES_HOME": str(tmp_path)})
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "s3cret-Pa55" not in err + proc.stdout.decode()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "DATABASE_URL" in lines[0] and "Traceback" not in err


def test_provider_errors_printed_by_the_cli_mask_the_base_url_password_and_the_key(db_url, fake_openai,
                                                                                       tmp_path):
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO tasks (owner_id, title) VALUES ('alice', 'needs an embedding')")
    base = fake_openai.base_url.replace("http://", "http://proxyuser:base-Pa55word@")
    fake_openai.faults.extend([{"status": 500}] * 20)
    proc = _cli(["-v", "embed"], {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "openai",
                                  "OPENAI_API_KEY": "sk-probe-0123456789abcdef", "OPENAI_BASE_URL": base,
                                  "OPENAI_EMBED_DIMENSIONS": "384", "OPENAI_MAX_RETRIES": "1",
                                  "MEMORY_PIPELINES_HOME": str(tmp_path)})
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 1, out[-2000:]
    assert "could not be embedded" in out and "proxyuser:***@127.0.0.1" in out
    assert "base-Pa55word" not in out and "sk-probe-0123456789abcdef" not in out


def test_redact_masks_url_passwords_conninfo_passwords_and_keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "plain-secret-key")
    assert redact_url("postgresql://u:p%40ss@h:5432/db") == "postgresql://u:***@h:5432/db"
    text = ("postgresql://u:hunter22@h/db host=h password='a b' password=x2 Authorization: Bearer mp_abcdefghij "
            "sk-abcdefghijkl api_key=zzz the plain-secret-key")
    masked = redact(text)
    for secret in ("hunter22", "a b", "x2", "mp_abcdefghij", "sk-abcdefghijkl", "zzz", "plain-secret-key"):
        assert secret not in masked, (secret, masked)
    assert redact("http://127.0.0.1:8000/v1 ok") == "http://127.0.0.1:8000/v1 ok"


def test_log_lines_and_their_tracebacks_are_redacted(caplog):
    install_redaction()
    log = logging.getLogger("memory_pipelines.probe")
    try:
        raise RuntimeError("cannot reach postgresql://app:tr0ub4dor@db/app")
    except RuntimeError:
        with caplog.at_level(logging.WARNING):
            log.exception("failed with key %s", "mp_abcdefghijklmnop")
    text = caplog.text
    assert "tr0ub4dor" not in text and "mp_abcdefghijklmnop" not in text
    assert "postgresql://app:***@db/app" in text and "RuntimeError" in text


def test_access_log_records_keep_their_arguments_and_still_print():
    """uvicorn's access formatter unpacks record.args itself: redaction must not take them away (it did, and
    every access line of `serve` printed a 'Logging error' traceback instead)."""
    from uvicorn.logging import AccessFormatter

    install_redaction()
    fmt = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False)
    plain = logging.getLogger("uvicorn.access").makeRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/health", "1.1", 200), None)
    assert fmt.format(plain) == '127.0.0.1:5000 - "GET /health HTTP/1.1" 200 OK'
    leaking = logging.getLogger("uvicorn.access").makeRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/x?dsn=postgresql://app:tr0ub4dor@db/app", "1.1", 422), None)
    line = fmt.format(leaking)
    assert "tr0ub4dor" not in line and "GET /x?dsn=postgresql://app:***@db/app" in line
    assert line.endswith(" 422 Unprocessable Entity")


# -- 7. every surface validates the same way ------------------------------------------------------------------

def test_cli_validates_owner_and_query_with_the_shared_limits(db_url, tmp_path):
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake", "MEMORY_PIPELINES_HOME": str(tmp_path)}
    cases = [
        (["search", "pgvector", "--owner", b"\xff\xfe"], "--owner"),  # not UTF-8
        (["search", "pgvector", "--owner", ""], "--owner"),  # was silently 'default'
        (["context", "pgvector", "--owner", "x" * 201], "--owner"),
        (["search", "x" * (MAX_QUERY + 1)], "query"),
        (["context", "x" * 100_000], "query"),
        (["search", "a\x01b\ud800".encode("utf-8", "surrogatepass")], "query"),
        (["keys", "create", "--owner", b"\xff"], "--owner"),
        (["write", "task", "--owner", "a\x01b", "--json", '{"title": "t"}'], "--owner"),  # a control character
        (["search", "pgvector", "--owner", " alice "], "--owner"),  # padded: read nobody's rows, answered empty
        (["context", "pgvector", "--owner", "alice\t"], "--owner"),
        (["export", "--owner", " alice", "out"], "--owner"),
        (["context", "pgvector", "--budget", "-5"], "--budget"),
    ]
    for args, field in cases:
        proc = _cli(args, env)
        err = proc.stderr.decode()
        assert proc.returncode == 2, (args[:2], proc.returncode, err[-500:])
        assert err.startswith(f"error: {field}:") and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert _cli(["search", "pgvector", "--owner", "alice"], env).returncode == 0
    too_long = _cli(["search", "x" * (MAX_QUERY + 1)], env).stderr.decode()  # the library's words, not pydantic's
    assert too_long == f"error: query: must be at most {MAX_QUERY} characters, got {MAX_QUERY + 1}\n", too_long


def test_mcp_refuses_an_owner_id_naming_another_owner_and_unknown_arguments(runtime):
    _kid, key = create_key(runtime.pool, "dave")
    with LiveServer(build_http_app(Memory(runtime, llm=None))) as srv:

        async def main() -> None:
            async with _client(f"{srv.url}/mcp", key) as mcp:
                for tool, args in [("mem.search", {"query": "x"}), ("mem.list_projects", {}),
                                   ("mem.ingest_memory", {"content": "x", "content_type": "plan",
                                                          "project_name": "p"})]:
                    text = error_text(await mcp.call_tool(tool, {**args, "owner_id": "mallory"}))
                    assert "owner_id" in text and "server" in text, text
                text = error_text(await mcp.call_tool("mem.search", {"query": "x", "bogus": 1}))
                assert "bogus" in text and "query" in text
                # As over HTTP: naming one's own owner is tolerated.
                assert data(await mcp.call_tool("mem.search", {"query": "x", "owner_id": "dave"}))["results"] == []

        anyio.run(main)
    assert _table_counts(runtime.pool)["memories"] == 0


def test_ts_minimum_in_the_schemas_is_what_the_library_accepts(live, key, runtime):
    spec = httpx.get(f"{live}/openapi.json").json()
    ts = spec["components"]["schemas"]["IngestRequest"]["properties"]["ts"]["anyOf"][0]
    assert ts["minimum"] == MIN_TS and ts["maximum"] == MAX_TS
    c = client(live, key)
    for bad in (0, MIN_TS - 1):
        r = c.post("/ingest/memory", json={"project_name": "p", "content_type": "plan", "content": "x", "ts": bad})
        assert r.status_code == 422 and r.json()["field"] == "ts"
    assert ingest(c, ZH, ts=MIN_TS)["status"] == "created"
    with LiveServer(build_http_app(Memory(runtime, llm=None))) as srv:

        async def main() -> None:
            async with _client(f"{srv.url}/mcp", key) as mcp:
                tools = {t.name: t for t in (await mcp.list_tools()).tools}
                schema = tools["mem.ingest_memory"].input_schema["properties"]["ts"]["anyOf"][0]
                assert schema["minimum"] == MIN_TS
                text = error_text(await mcp.call_tool("mem.ingest_memory", {
                    "content": "x", "content_type": "plan", "project_name": "p", "ts": 0}))
                assert "ts" in text

        anyio.run(main)


def test_since_and_until_are_whole_unix_seconds_or_iso_times_on_http_and_mcp(live, key, runtime):
    c = client(live, key)
    mid = ingest(c, ZH, ts=1_700_000_000)["id"]
    for field in ("since", "until"):
        for bad in ("0.5", "1700000000.5", "1e400", "-1", str(MAX_TS + 1), "99999999999999999999"):
            r = c.get("/memories/timeline", params={field: bad})
            assert r.status_code == 422, (field, bad, r.status_code, r.text[:200])
            assert r.json()["field"] == field and r.json()["detail"][0]["loc"] == ["query", field]
    ids = lambda **p: [i["id"] for i in c.get("/memories/timeline", params=p).json()["items"]]  # noqa: E731
    assert ids(since="1700000000", until="1700000001") == [mid]
    assert ids(since="1700000000.0") == [mid] and ids(until="1700000000") == []
    assert ids(since="2023-11-14T22:13:20Z") == [mid] and ids(since="2023-11-14T22:13:20.5Z") == []
    with LiveServer(build_http_app(Memory(runtime, llm=None))) as srv:

        async def main() -> None:
            async with _client(f"{srv.url}/mcp", key) as mcp:
                assert "until" in error_text(await mcp.call_tool("mem.timeline", {"until": 0.5}))
                assert "since" in error_text(await mcp.call_tool("mem.timeline", {"since": MAX_TS + 1}))
                got = data(await mcp.call_tool("mem.timeline", {"since": 1_700_000_000, "until": 1_700_000_001}))
                assert [i["id"] for i in got["items"]] == [mid]

        anyio.run(main)


def test_library_rejections_of_query_and_path_parameters_name_where_they_came_from(live, key):
    c = client(live, key)
    cases = [
        ("/memories", {"ids": "x" * 201}, ["query", "ids"]),
        ("/memories/timeline", {"cursor": "bogus"}, ["query", "cursor"]),
        ("/projects", {"owner_id": "mallory"}, ["query", "owner_id"]),
    ]
    for path, params, loc in cases:
        r = c.get(path, params=params)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, (path, r.text[:200])
    r = c.post("/ingest/memory", params={"owner_id": "mallory"},
               json={"project_name": "p", "content_type": "plan", "content": "x"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "owner_id"]
    r = c.post("/ingest/memory", json={"project_name": "p", "content_type": "plan", "content": "x",
                                       "owner_id": "mallory"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "owner_id"]


# -- the HTTP API fuzzed from its own OpenAPI schema ----------------------------------------------------------

def test_a_project_key_and_name_of_two_projects_is_a_422_the_fuzz_hooks_set_aside(live, key):
    """A by-hand `st run` as http-api.md gives it failed twice (ST202): its coverage phase sends the schema's example
    project_name with another project_key, a documented 422 ("both: the same project") no schema can state."""
    import tests.schemathesis_hooks as hooks

    c = client(live, key)
    ingest(c, EN, project="web-app")
    for path in ("/memories/search", "/memories/timeline"):
        r = c.get(path, params={"query": "cookie", "project_key": "0", "project_name": "web-app"})
        assert r.status_code == 422 and r.json()["field"] == "project_name", r.text
        assert hooks.unstatable(r), r.text
    other = c.get("/memories/search", params={"query": "cookie", "limit": 0})
    assert other.status_code == 422 and not hooks.unstatable(other), other.text  # every other 422 is still kept


FUZZ_EXAMPLES = int(os.environ.get("MP_FUZZ_EXAMPLES", "12"))
FUZZ_ONLY = os.environ.get("MP_FUZZ_ONLY", "")  # by hand: fuzz only the operations whose label holds it


@pytest.mark.slow
@pytest.mark.timeout(900)  # 33 operations × 2 modes × FUZZ_EXAMPLES requests: minutes on a busy 2-core machine
def test_schemathesis_fuzz_of_the_http_api(live, key):
    """Every operation of the OpenAPI schema, schema-valid and schema-violating requests, every schemathesis
    check: no 5xx, every status, header and body as documented, invalid input refused and valid input accepted
    (but for the rules tests/schemathesis_hooks.py names). A few hundred cases; by hand, 10 000+:
    `SCHEMATHESIS_HOOKS=tests.schemathesis_hooks st run URL/openapi.json -H 'Authorization: Bearer KEY' -n 700`."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis.core.failures import FailureGroup
    from schemathesis.generation import GenerationMode

    import tests.schemathesis_hooks  # noqa: F401  (registers the failure filter)

    c = client(live, key)
    ingest(c, ZH)
    ingest(c, EN, project="web-app")
    schema = schemathesis.openapi.from_url(f"{live}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    failures: list[str] = []
    cases = 0

    def fuzz(operation: Any, mode: GenerationMode) -> None:
        label = f"{operation.label} ({mode.value})"

        @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(mode))
        def run(case: Any) -> None:
            nonlocal cases
            cases += 1
            try:
                case.call_and_validate(headers={"Authorization": f"Bearer {key}"})
            except (AssertionError, FailureGroup) as exc:  # keep going: report every operation's failures
                kept = [e for e in getattr(exc, "exceptions", [exc]) if not tests.schemathesis_hooks.ignored(e)]
                if kept:
                    failures.append(f"{label}: {str(exc)[:1500]}")

        try:
            run()
        except Unsatisfiable:  # no schema-violating request exists for an operation without parameters
            assert mode is GenerationMode.NEGATIVE, label

    for operation in operations:
        if FUZZ_ONLY not in operation.label:
            continue
        for mode in GenerationMode:
            fuzz(operation, mode)
    print(f"schemathesis: {cases} cases, {len(operations)} operations")  # shown with -s
    assert len(operations) >= 16 and (FUZZ_ONLY or cases >= 10 * len(operations))
    assert not failures, "\n".join(failures[:10])
