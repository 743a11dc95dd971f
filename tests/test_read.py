"""agent-mem reads: search snippets, get, timeline paging, projects, versions — and owner isolation."""

from __future__ import annotations

import json

import pytest

from memory_pipelines.infra.errors import NotFoundError, ValidationError
from memory_pipelines.infra.llm import ChatLLM
from memory_pipelines.store.ingest import ingest_memory
from memory_pipelines.store.read import (
    get_memories,
    list_projects,
    memory_versions,
    search_memories,
    snippet,
    timeline,
)

TS = 1_700_000_000


def put(
    pool, embedder, content, *, owner="alice", project="Agent Mem", ctype="development", ts=None, llm=None
):
    return ingest_memory(
        pool,
        embedder,
        llm,
        owner,
        content=content,
        content_type=ctype,
        project_name=project,
        ts=ts,
        conflict_threshold=0.5,
    )


@pytest.fixture
def corpus(pool, fake_embedder) -> dict[str, str]:
    ids = {
        "pg": put(
            pool, fake_embedder, "We store memory vectors in PostgreSQL with pgvector and HNSW.", ts=TS
        ).id,
        "login": put(
            pool, fake_embedder, "The login page needs dark mode.", ctype="requirement", ts=TS + 10
        ).id,
        "tests": put(
            pool,
            fake_embedder,
            "Regression tests run against a real PostgreSQL server.",
            ctype="testing",
            ts=TS + 20,
        ).id,
        "other": put(
            pool, fake_embedder, "Billing exports go to PostgreSQL nightly.", project="Billing", ts=TS + 30
        ).id,
        "bob": put(
            pool, fake_embedder, "Bob keeps PostgreSQL pgvector HNSW notes too.", owner="bob", ts=TS + 5
        ).id,
    }
    return ids


# --- search ----------------------------------------------------------------------------------------------


def test_search_returns_snippets_and_next_action(pool, fake_embedder, corpus) -> None:
    out = search_memories(pool, fake_embedder, "alice", "pgvector HNSW vectors")
    assert out["next_action"] == "use_ids_to_call_mem_get" and "degraded" not in out
    top = out["results"][0]
    assert top["id"] == corpus["pg"]
    assert set(top) == {
        "id",
        "project_key",
        "content_type",
        "snippet",
        "summary",
        "tags",
        "score",
        "created_at",
    }
    assert top["project_key"] == "agent-mem" and top["content_type"] == "development"
    assert top["snippet"].startswith("We store memory vectors") and top["created_at"].startswith(
        "2023-11-14T22:13:20"
    )
    assert corpus["bob"] not in {r["id"] for r in out["results"]}


def test_search_filters_scope_and_project(pool, fake_embedder, corpus) -> None:
    def ids(**kw) -> list[str]:
        return [r["id"] for r in search_memories(pool, fake_embedder, "alice", "PostgreSQL", **kw)["results"]]

    assert set(ids(scope="testing")) == {corpus["tests"]}
    assert corpus["other"] in ids() and corpus["other"] not in ids(project_key="agent-mem")
    assert set(ids(project_name="Billing")) == {corpus["other"]}
    assert set(ids(project_name="agent mem")) <= {corpus["pg"], corpus["login"], corpus["tests"]}
    assert ids(project_key="no-such-project") == [] and ids(project_name="Nope") == []
    assert ids(limit=1) and len(ids(limit=1)) == 1
    assert set(ids(project_key="agent-mem", project_name="agent mem")) == set(ids(project_key="agent-mem"))
    with pytest.raises(ValidationError) as refused:  # two projects named: the key's was searched, silently
        ids(project_key="agent-mem", project_name="Billing")
    assert refused.value.field == "project_name"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "5"}, "limit"),
        ({"limit": True}, "limit"),
        ({"scope": "note"}, "scope"),
        ({"query": "  "}, "query"),
        ({"owner": ""}, "owner"),
        ({"project_key": ""}, "project_key"),
    ],
)
def test_search_validation(pool, fake_embedder, kwargs, field) -> None:
    args = {"owner": "alice", "query": "pgvector", **kwargs}
    owner, query = args.pop("owner"), args.pop("query")
    with pytest.raises(ValidationError) as err:
        search_memories(pool, fake_embedder, owner, query, **args)
    assert err.value.field == field


def test_search_degrades_to_keywords_when_the_provider_is_down(pool, fake_embedder, corpus) -> None:
    fake_embedder.fail_after = 0
    out = search_memories(pool, fake_embedder, "alice", "dark mode login")
    assert "degraded" in out and out["results"][0]["id"] == corpus["login"]


def test_snippet_comes_from_the_best_fragment(pool, fake_embedder) -> None:
    filler = " ".join(
        f"Paragraph {i} talks about scheduling, retries and queue depth limits." for i in range(120)
    )
    text = filler + "\n\nThe flamingo migration renames the ostrich column before the backfill."
    mid = put(pool, fake_embedder, text).id
    for embedder_up in (True, False):
        fake_embedder.fail_after = None if embedder_up else 0
        hit = search_memories(pool, fake_embedder, "alice", "flamingo ostrich migration")["results"][0]
        assert hit["id"] == mid and len(hit["snippet"]) <= 200 and "flamingo" in hit["snippet"]


def test_snippet_of_a_chinese_memory_finds_a_one_character_word_without_the_embedder(pool, fake_embedder) -> None:
    filler = "".join(f"第{i}段讲的是排班、重试和队列深度的限制。" for i in range(150))
    mid = put(pool, fake_embedder, filler + "\n\n后来我养了一只猫，每天晚上陪它玩。").id
    fake_embedder.fail_after = 0  # keyword search: the fragment is chosen by the query's keyword terms
    hit = search_memories(pool, fake_embedder, "alice", "猫")["results"][0]
    assert hit["id"] == mid and "猫" in hit["snippet"]


def test_snippet_trimming() -> None:
    text = ("word " * 100) + "needle here " + ("tail " * 100)
    s = snippet(text, ["needle"])
    assert len(s) <= 200 and "needle" in s and s.startswith("…") and s.endswith("…")
    assert snippet("short  text\n", []) == "short text"
    head = snippet("x " * 300, [])
    assert len(head) <= 200 and head.endswith("…") and not head.startswith("…")


# --- get, versions ---------------------------------------------------------------------------------------


def test_get_returns_full_records_in_order_and_missing(pool, fake_embedder, corpus) -> None:
    out = get_memories(pool, "alice", [corpus["login"], "mem_nope", corpus["pg"], corpus["login"]])
    assert [m["id"] for m in out["memories"]] == [corpus["login"], corpus["pg"]]
    assert out["missing"] == ["mem_nope"]
    rec = out["memories"][1]
    assert rec["content"] == "We store memory vectors in PostgreSQL with pgvector and HNSW."
    assert (rec["project_key"], rec["project_name"], rec["version_count"]) == ("agent-mem", "Agent Mem", 1)
    assert {"summary", "tags", "created_at", "updated_at", "content_type"} <= set(rec)


@pytest.mark.parametrize("ids", [[], "mem_a", [1], [""], [f"mem_{i}" for i in range(101)]])
def test_get_validation(pool, ids) -> None:
    with pytest.raises(ValidationError) as err:
        get_memories(pool, "alice", ids)
    assert err.value.field == "ids"


def test_versions_after_replace(pool, fake_embedder, fake_openai) -> None:
    llm = ChatLLM(api_key="test", model="fake-chat", base_url=fake_openai.base_url, sleep=lambda _s: None)
    fake_openai.chat_responses.append(json.dumps({"summary": "v1", "tags": []}))
    first = put(pool, fake_embedder, "Cache TTL is 60 seconds for the search endpoint.", llm=llm)
    for n in (2, 3):
        fake_openai.chat_responses.extend(
            [
                json.dumps({"summary": f"v{n}", "tags": []}),
                json.dumps({"action": "REPLACE", "reason": "update"}),
            ]
        )
        assert (
            put(
                pool,
                fake_embedder,
                f"Cache TTL is {n * 60} seconds for the search endpoint.",
                llm=llm,
                ctype="plan",
            ).id
            == first.id
        )
    versions = memory_versions(pool, "alice", first.id)
    assert [(v["version"], v["summary"], v["content_type"]) for v in versions] == [
        (1, "v1", "development"),
        (2, "v2", "plan"),
    ]
    assert (
        versions[0]["content"] == "Cache TTL is 60 seconds for the search endpoint."
        and versions[0]["replaced_at"]
    )
    rec = get_memories(pool, "alice", [first.id])["memories"][0]
    assert rec["version_count"] == 3 and rec["summary"] == "v3"
    assert memory_versions(pool, "alice", put(pool, fake_embedder, "Unrelated: the logo is blue.").id) == []
    with pytest.raises(NotFoundError):
        memory_versions(pool, "alice", "mem_missing")


# --- timeline, projects ----------------------------------------------------------------------------------


def test_timeline_pages_oldest_first(pool, fake_embedder, corpus) -> None:
    tie = put(
        pool, fake_embedder, "Another note at the same second as the tests note.", ctype="insight", ts=TS + 20
    ).id
    seen, cursor, pages = [], None, 0
    while True:
        page = timeline(pool, "alice", limit=2, cursor=cursor)
        seen += [i["id"] for i in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    expected = [corpus["pg"], corpus["login"], *sorted([corpus["tests"], tie]), corpus["other"]]
    assert seen == expected and pages == 3
    assert corpus["bob"] not in seen
    item = timeline(pool, "alice", limit=1)["items"][0]
    assert set(item) >= {"id", "project_key", "content_type", "summary", "tags", "ts", "created_at"}


def test_timeline_filters(pool, fake_embedder, corpus) -> None:
    ids = lambda **kw: [i["id"] for i in timeline(pool, "alice", **kw)["items"]]  # noqa: E731
    assert ids(since=TS + 10, until=TS + 30) == [corpus["login"], corpus["tests"]]
    assert ids(project_key="billing") == [corpus["other"]]
    assert ids(project_key="unknown") == []
    assert ids(content_type="requirement") == [corpus["login"]]
    for kwargs, field in [
        ({"cursor": "%%%"}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"since": "yesterday"}, "since"),
        ({"since": TS + 5, "until": TS}, "until"),
        ({"content_type": "x"}, "content_type"),
    ]:
        with pytest.raises(ValidationError) as err:
            timeline(pool, "alice", **kwargs)
        assert err.value.field == field


def test_list_projects(pool, fake_embedder, corpus) -> None:
    projects = {p["project_key"]: p for p in list_projects(pool, "alice")}
    assert set(projects) == {"agent-mem", "billing"}
    assert projects["agent-mem"]["memory_count"] == 3 and projects["agent-mem"]["project_name"] == "Agent Mem"
    assert projects["billing"]["memory_count"] == 1 and projects["billing"]["last_updated"]
    assert [p["project_key"] for p in list_projects(pool, "bob")] == ["agent-mem"]
    assert list_projects(pool, "nobody") == []


# --- owner isolation -------------------------------------------------------------------------------------


def test_no_read_reaches_another_owner(pool, fake_embedder, fake_openai, corpus) -> None:
    llm = ChatLLM(api_key="test", model="fake-chat", base_url=fake_openai.base_url, sleep=lambda _s: None)
    fake_openai.chat_responses.extend(
        [json.dumps({"summary": "s", "tags": []}), json.dumps({"action": "REPLACE", "reason": "r"})]
    )
    replaced = put(
        pool, fake_embedder, "We store memory vectors in PostgreSQL with pgvector, HNSW and halfvec.", llm=llm
    )
    assert replaced.id == corpus["pg"]
    alice_ids = [v for k, v in corpus.items() if k != "bob"]
    # mallory guesses every id of alice (and bob's own is the only thing bob sees)
    for intruder in ("mallory", "bob"):
        got = get_memories(pool, intruder, alice_ids)
        assert got["memories"] == [] and got["missing"] == alice_ids
        with pytest.raises(NotFoundError):
            memory_versions(pool, intruder, corpus["pg"])
        found = search_memories(pool, fake_embedder, intruder, "PostgreSQL pgvector HNSW dark mode billing")
        assert not {r["id"] for r in found["results"]} & set(alice_ids)
        fake_embedder.fail_after = 0  # the keyword path too
        found = search_memories(pool, fake_embedder, intruder, "PostgreSQL pgvector HNSW dark mode billing")
        fake_embedder.fail_after = None
        assert not {r["id"] for r in found["results"]} & set(alice_ids)
        assert not {i["id"] for i in timeline(pool, intruder, limit=200)["items"]} & set(alice_ids)
        assert timeline(pool, intruder, project_key="billing")["items"] == []
    assert [m["id"] for m in get_memories(pool, "bob", [corpus["bob"], corpus["pg"]])["memories"]] == [
        corpus["bob"]
    ]
    assert (
        search_memories(pool, fake_embedder, "bob", "pgvector", project_key="agent-mem")["results"][0]["id"]
        == corpus["bob"]
    )
    assert list_projects(pool, "mallory") == []
