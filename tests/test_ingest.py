"""agent-mem ingest against the real database: validation, chunking, arbitration (LLM through the fake
OpenAI server and the real ChatLLM, and the rules fallback), versions, concurrency and provider outages."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.embeddings.base import to_array
from memory_pipelines.index.vectors import count_pending
from memory_pipelines.infra.errors import ValidationError
from memory_pipelines.infra.llm import ChatLLM
from memory_pipelines.store.ingest import MemoryInput, conflict_threshold_for, finish_deferred, ingest_memory
from memory_pipelines.store.ingest.inputs import FIELDS
from memory_pipelines.store.read import get_memories, search_memories
from memory_pipelines.vocabulary import INDEXED, MAX_CONTENT
from tests.fake_openai import FakeOpenAI

T = 0.5  # conflict threshold for the bag-of-words FakeEmbedder (related test texts score 0.6-0.9)

PGV_A = (
    "Decision: memory vectors live in PostgreSQL with pgvector and an HNSW index, because one database "
    "keeps backups and permissions simple for the agent memory service."
)
PGV_B = (
    "Decision update: memory vectors live in PostgreSQL with pgvector and an HNSW index; we dropped "
    "IVFFlat because recall was poor for the agent memory service."
)
LOGIN = "Requirement: the login page supports dark mode and full keyboard navigation for accessibility."


def make_llm(server: FakeOpenAI, **kwargs) -> ChatLLM:
    kwargs.setdefault("max_retries", 1)
    return ChatLLM(
        api_key="test", model="fake-chat", base_url=server.base_url, sleep=lambda _s: None, **kwargs
    )


def summary_json(text: str = "a summary", tags: list[str] | None = None) -> str:
    return json.dumps({"summary": text, "tags": tags if tags is not None else ["pgvector"]})


def decision_json(action: str, reason: str = "because", **extra) -> str:
    return json.dumps({"action": action, "reason": reason, **extra})


def ingest(pool, embedder, llm=None, owner="alice", content=PGV_A, **kw):
    kw.setdefault("content_type", "development")
    kw.setdefault("project_name", "Agent Mem")
    kw.setdefault("conflict_threshold", T)
    return ingest_memory(pool, embedder, llm, owner, content=content, **kw)


def counts(pool) -> dict[str, int]:
    with pool.connection() as conn:
        return {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in (
                "projects",
                "memories",
                "fragments",
                "memory_versions",
                "memory_arbitrations",
                "keyword_docs",
            )
        }


def arbitrations(pool) -> list[dict]:
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT action, candidate_memory_id, new_memory_id, similarity, old_summary, new_summary, model,"
            " reason,"
            " owner_id FROM memory_arbitrations ORDER BY id"
        ).fetchall()
    keys = (
        "action",
        "candidate",
        "new",
        "similarity",
        "old_summary",
        "new_summary",
        "model",
        "reason",
        "owner",
    )
    return [dict(zip(keys, r, strict=True)) for r in rows]


def memory_row(pool, memory_id: str) -> dict:
    with pool.connection() as conn:
        cur = conn.execute("SELECT * FROM memories WHERE id = %s", (memory_id,))
        names = [d.name for d in cur.description]
        row = cur.fetchone()
    return dict(zip(names, row, strict=True)) if row else {}


# --- validation ------------------------------------------------------------------------------------------

NOW = int(time.time())
GOOD = {"content": "x is y", "content_type": "insight", "project_name": "p"}


@pytest.mark.parametrize(
    ("owner", "changes", "field"),
    [
        ("", {}, "owner"),
        (None, {}, "owner"),
        ("ali\x01ce", {}, "owner"),  # a control character: an id nobody could type again
        ("ali\nce", {}, "owner"),
        ("alice", {"content": ""}, "content"),
        ("alice", {"content": "   \n"}, "content"),
        ("alice", {"content": "\u200b\ufeff"}, "content"),  # invisible: zero-width space, byte order mark
        ("alice", {"content": 42}, "content"),
        ("alice", {"content": "a" * (MAX_CONTENT + 1)}, "content"),
        ("alice", {"content_type": "note"}, "content_type"),
        ("alice", {"content_type": None}, "content_type"),
        ("alice", {"project_name": None}, "project_name"),
        ("alice", {"project_name": "  "}, "project_name"),
        ("alice", {"project_name": "\u200b"}, "project_name"),
        ("alice", {"project_name": "n" * 201}, "project_name"),
        ("alice", {"project_name": None, "project_key": "k" * 201}, "project_key"),
        ("alice", {"ts": True}, "ts"),
        ("alice", {"ts": "1700000000"}, "ts"),
        ("alice", {"ts": 1.7e9}, "ts"),
        ("alice", {"ts": 946_684_799}, "ts"),
        ("alice", {"ts": NOW + 2 * 86_400}, "ts"),
        ("alice", {"speaker": ""}, "speaker"),
    ],
)
def test_validation_names_the_field_and_writes_nothing(pool, fake_embedder, owner, changes, field) -> None:
    before = counts(pool)
    with pytest.raises(ValidationError) as err:
        ingest_memory(pool, fake_embedder, None, owner, **{**GOOD, **changes})
    assert err.value.field == field
    assert counts(pool) == before and fake_embedder.calls == 0


def test_the_input_is_parsed_once_into_one_value() -> None:
    got = MemoryInput.parse(" alice ", content="x is y", content_type="plan", project_name=" Agent Mem ",
                            machine_name=" laptop ", ts=1_700_000_000, speaker=" bob ", session=" s1 ")
    assert got == MemoryInput("alice", "x is y", "plan", "agent-mem", "Agent Mem", 1_700_000_000,
                              machine_name="laptop", speaker="bob", session="s1")
    by_key = MemoryInput.parse("alice", content="x", content_type="plan", project_key="ops")
    assert (by_key.project_key, by_key.project_name) == ("ops", "ops")
    assert abs(by_key.ts - time.time()) < 5  # default: now
    with pytest.raises(TypeError, match="not a memory field: colour"):
        MemoryInput.parse("alice", **GOOD, colour="red")


def test_the_http_body_carries_the_memory_fields() -> None:
    from memory_pipelines.surfaces.http.models import IngestRequest

    body = IngestRequest(**GOOD, speaker="bob", wait=False)
    assert set(body.memory_fields()) == FIELDS
    assert MemoryInput.parse("alice", **body.memory_fields()).speaker == "bob"


def test_limits_are_inclusive(pool, fake_embedder) -> None:
    r = ingest_memory(
        pool,
        fake_embedder,
        None,
        "alice",
        content="a " * (MAX_CONTENT // 2),
        content_type="insight",
        project_key="k" * 200,
        ts=946_684_800,
    )
    assert r.status == "created"
    assert memory_row(pool, r.id)["ts"] == 946_684_800


# --- chunking, vectors, indexes --------------------------------------------------------------------------


def long_text(paragraphs: int = 12) -> str:
    return "\n\n".join(
        f"Section {i}: the retrieval service ranks candidates by relevance, decay and mode weight; "
        + " ".join(f"detail{i}x{j} matters for tuning window {j}." for j in range(25))
        for i in range(paragraphs)
    )


def test_long_memory_is_chunked_into_embedded_fragments(pool, fake_embedder) -> None:
    text = long_text() + "\n\nFinal note: the unicorn flag enables the zebra cache."
    r = ingest(pool, fake_embedder, content=text, speaker="bob", ts=1_700_000_000)
    assert (r.status, r.action) == ("created", "CREATE")
    with pool.connection() as conn:
        frags = conn.execute(
            f"SELECT t.id, t.content, t.embedding, t.embedding_model, t.embedded_hash = t.content_hash,"
            f" {INDEXED['fragment'].text_sql} FROM {INDEXED['fragment'].from_sql} WHERE t.memory_id = %s"
            " ORDER BY t.chunk_index",
            (r.id,),
        ).fetchall()
        docs = conn.execute(
            "SELECT item_id FROM keyword_docs WHERE source = 'fragment' ORDER BY item_id"
        ).fetchall()
        assert count_pending(conn, "fragment", fake_embedder.model_name) == (0, len(frags))
    row = memory_row(pool, r.id)
    assert len(frags) >= 4 and row["chunk_count"] == len(frags)
    assert row["embedding_status"] == "done" and row["arbitration_status"] == "done"
    assert row["created_at"].timestamp() == 1_700_000_000 and row["speaker"] == "bob"
    assert all(f[3] == fake_embedder.model_name and f[4] for f in frags)
    # every fragment was embedded from exactly the text the backfill builds in SQL
    sql_texts = [f[5] for f in frags]
    assert sql_texts[0].startswith("bob: Section 0") and sql_texts[0].endswith(
        "[Agent Mem · development · 2023-11-14]"
    )
    stored = np.vstack([to_array(f[2]) for f in frags])
    # ... as the model reads it: without its closing day, which the keyword index keeps
    assert np.allclose(stored, fake_embedder.embed([t.removesuffix(" · 2023-11-14]") + "]" for t in sql_texts]),
                       atol=1e-6)
    assert not np.allclose(stored[0], fake_embedder.embed(sql_texts[:1])[0], atol=1e-3)
    mean = stored.mean(axis=0)
    assert np.allclose(to_array(row["avg_embedding"]), mean / np.linalg.norm(mean), atol=1e-5)
    assert [d[0] for d in docs] == [f[0] for f in frags]  # keyword-indexed at write time
    found = search_memories(pool, fake_embedder, "alice", "zebra cache unicorn")
    assert found["results"][0]["id"] == r.id and "zebra" in found["results"][0]["snippet"]


def test_extractive_summary_and_tags_without_llm(pool, fake_embedder) -> None:
    r = ingest(pool, fake_embedder, content=long_text(3))
    row = memory_row(pool, r.id)
    assert 0 < len(row["summary"]) <= 200 and 0 < len(row["tags"]) <= 8
    assert row["metadata"]["summary_by"] == "extractive"
    assert [(a["action"], a["model"], a["candidate"], a["new"]) for a in arbitrations(pool)] == [
        ("CREATE", "rules", None, r.id)
    ]


def test_llm_summary_is_validated_and_recorded(pool, fake_embedder, fake_openai) -> None:
    llm = make_llm(fake_openai)
    fake_openai.chat_responses.extend(
        [summary_json("s" * 300, [" Postgres ", "postgres", "HNSW"] + list("abcdefgh"))]
    )
    r = ingest(pool, fake_embedder, llm)
    row = memory_row(pool, r.id)
    assert len(row["summary"]) == 200 and row["summary"].endswith("…")
    assert row["tags"] == ["Postgres", "HNSW", "a", "b", "c", "d", "e", "f"]
    assert row["metadata"]["summary_by"] == "fake-chat"
    # a malformed answer is asked once more, then the extractive fallback is used
    fake_openai.chat_responses.extend(['{"summary": "ok", "tags": "not-a-list"}', "not json"])
    r2 = ingest(pool, fake_embedder, llm, content=LOGIN, content_type="requirement")
    assert len(fake_openai.requests) == 3
    row2 = memory_row(pool, r2.id)
    assert row2["metadata"]["summary_by"] == "extractive" and row2["summary"] == LOGIN


# --- arbitration through the LLM -------------------------------------------------------------------------


def test_llm_replace_keeps_old_version_and_logs(pool, fake_embedder, fake_openai) -> None:
    llm = make_llm(fake_openai)
    fake_openai.chat_responses.append(summary_json("pgvector with HNSW"))
    first = ingest(pool, fake_embedder, llm, content=PGV_A)
    fake_openai.chat_responses.extend(
        [
            summary_json("pgvector, IVFFlat dropped", ["ivfflat"]),
            decision_json("REPLACE", "same decision, newer"),
        ]
    )
    second = ingest(pool, fake_embedder, llm, content=PGV_B, content_type="insight", ts=1_750_000_000)
    assert (second.status, second.id, second.action, second.candidate_id) == (
        "updated",
        first.id,
        "REPLACE",
        first.id,
    )
    assert second.similarity is not None and second.similarity >= T
    prompt = fake_openai.requests[-1][1]["messages"][1]["content"]
    assert "pgvector with HNSW" in prompt and "pgvector, IVFFlat dropped" in prompt and first.id in prompt
    row = memory_row(pool, first.id)
    assert (row["content"], row["content_type"], row["ts"]) == (PGV_B, "insight", 1_750_000_000)
    assert row["summary"] == "pgvector, IVFFlat dropped" and row["tags"] == ["ivfflat"]
    assert row["updated_at"] > row["created_at"]
    with pool.connection() as conn:
        versions = conn.execute(
            "SELECT version, content, content_type, summary, owner_id FROM memory_versions"
            " WHERE memory_id = %s",
            (first.id,),
        ).fetchall()
        frags = conn.execute("SELECT content FROM fragments WHERE memory_id = %s", (first.id,)).fetchall()
        stale = conn.execute(
            "SELECT count(*) FROM keyword_docs kd WHERE NOT EXISTS"
            " (SELECT 1 FROM fragments f WHERE f.id = kd.item_id)"
        ).fetchone()[0]
    assert versions == [(1, PGV_A, "development", "pgvector with HNSW", "alice")]
    assert frags == [(PGV_B,)] and stale == 0
    with pool.connection() as conn:  # the new fragment is embedded from the text the backfill would build
        text, vec = conn.execute(
            f"SELECT {INDEXED['fragment'].text_sql}, t.embedding FROM {INDEXED['fragment'].from_sql}"
            " WHERE t.memory_id = %s",
            (first.id,),
        ).fetchone()
    day = " · " + row["created_at"].strftime("%Y-%m-%d") + "]"
    assert text.endswith("· insight" + day)
    assert np.allclose(to_array(vec), fake_embedder.embed([text.removesuffix(day) + "]"])[0], atol=1e-6)
    last = arbitrations(pool)[-1]
    assert (
        last["action"] == "REPLACE"
        and last["model"] == "fake-chat"
        and last["reason"] == "same decision, newer"
    )
    assert (last["candidate"], last["new"], last["old_summary"]) == (first.id, first.id, "pgvector with HNSW")
    assert counts(pool)["memories"] == 1
    # a second replace becomes version 2
    fake_openai.chat_responses.extend([summary_json("third"), decision_json("REPLACE")])
    third = ingest(pool, fake_embedder, llm, content=PGV_B + " Also tuned ef_search.")
    assert third.id == first.id
    with pool.connection() as conn:
        assert conn.execute("SELECT array_agg(version ORDER BY version) FROM memory_versions").fetchone()[
            0
        ] == [1, 2]


def test_llm_keep_both_and_skip(pool, fake_embedder, fake_openai) -> None:
    llm = make_llm(fake_openai)
    fake_openai.chat_responses.append(summary_json("first"))
    first = ingest(pool, fake_embedder, llm, content=PGV_A)
    fake_openai.chat_responses.extend([summary_json("second"), decision_json("keep_both", "different facts")])
    kept = ingest(pool, fake_embedder, llm, content=PGV_B)
    assert (kept.status, kept.action, kept.candidate_id) == (
        "created",
        "KEEP_BOTH",
        first.id,
    ) and kept.id != first.id
    fake_openai.chat_responses.extend(
        [summary_json("third"), decision_json("SKIP", "nothing new", target_id=kept.id)]
    )
    skipped = ingest(pool, fake_embedder, llm, content=PGV_B + " (again)")
    assert (skipped.status, skipped.id, skipped.action) == ("skipped", kept.id, "SKIP")
    assert counts(pool)["memories"] == 2 and counts(pool)["memory_versions"] == 0
    acts = [(a["action"], a["model"], a["candidate"], a["new"]) for a in arbitrations(pool)]
    assert acts == [
        ("CREATE", "rules", None, first.id),
        ("KEEP_BOTH", "fake-chat", first.id, kept.id),
        ("SKIP", "fake-chat", kept.id, None),
    ]


def test_llm_target_id_picks_the_candidate(pool, fake_embedder, fake_openai) -> None:
    a = ingest(pool, fake_embedder, None, content=PGV_A)
    b = ingest(pool, fake_embedder, None, content=PGV_B)
    assert b.action == "KEEP_BOTH"
    llm = make_llm(fake_openai)
    fake_openai.chat_responses.extend([summary_json(), decision_json("REPLACE", target_id=a.id)])
    r = ingest(pool, fake_embedder, llm, content=PGV_B + " We re-ran the recall benchmark.")
    assert (r.status, r.id) == ("updated", a.id)
    prompt = fake_openai.requests[-1][1]["messages"][1]["content"]
    assert a.id in prompt and b.id in prompt


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        '{"action": "MERGE", "reason": "x"}',
        '{"action": "REPLACE", "reason": 3}',
        '{"action": "REPLACE", "target_id": "mem_unknown"}',
        "[]",
    ],
)
def test_malformed_arbitration_falls_back_to_rules(pool, fake_embedder, fake_openai, bad) -> None:
    first = ingest(pool, fake_embedder, None, content=PGV_A)
    llm = make_llm(fake_openai)
    fake_openai.chat_responses.extend([summary_json(), bad, bad])
    r = ingest(pool, fake_embedder, llm, content=PGV_B)
    assert (r.status, r.action, r.candidate_id) == ("created", "KEEP_BOTH", first.id)  # rules never replace
    assert len(fake_openai.requests) == 3  # summary + arbitration asked twice
    last = arbitrations(pool)[-1]
    assert last["model"] == "rules" and "LLM arbitration failed" in last["reason"]
    # with the same text the fallback skips
    fake_openai.chat_responses.extend([summary_json(), bad, bad])
    dup = ingest(pool, fake_embedder, llm, content="  " + PGV_A.upper() + "\n")
    assert (dup.status, dup.id, dup.action) == ("skipped", first.id, "SKIP")
    assert counts(pool)["memory_versions"] == 0


def test_server_errors_are_retried_then_fall_back(pool, fake_embedder, fake_openai) -> None:
    first = ingest(pool, fake_embedder, None, content=PGV_A)
    llm = make_llm(fake_openai, max_retries=1)
    fake_openai.chat_responses.append(summary_json("from the llm"))
    fake_openai.faults.extend(
        [{}] + [{"status": 500}] * 4
    )  # summary succeeds; 2 attempts x 2 HTTP tries fail
    r = ingest(pool, fake_embedder, llm, content=PGV_B)
    assert (r.status, r.action, r.candidate_id) == ("created", "KEEP_BOTH", first.id)
    assert len(fake_openai.requests) == 5 and not fake_openai.faults
    last = arbitrations(pool)[-1]
    assert last["model"] == "rules" and "500" in last["reason"]
    assert memory_row(pool, r.id)["summary"] == "from the llm"


def test_a_hanging_chat_model_holds_the_project_lock_for_one_short_budget(pool, fake_embedder, fake_openai) -> None:
    """Arbitration runs under the project lock every other write of the project waits for: the model gets one
    attempt and one retry, each cut at the deadline, and no second try of the question; then the rules decide.
    With the configured budget (6 tries, asked twice) it held the lock for 12 timeouts and their backoff."""
    first = ingest(pool, fake_embedder, None, content=PGV_A)
    llm = make_llm(fake_openai, max_retries=5, timeout=0.5)
    fake_openai.chat_responses.append(summary_json("from the llm"))
    fake_openai.faults.extend([{}] + [{"delay": 3.0}] * 12)  # the summary answers; arbitration hangs
    started = time.monotonic()
    r = ingest(pool, fake_embedder, llm, content=PGV_B)
    held = time.monotonic() - started
    assert (r.status, r.action, r.candidate_id) == ("created", "KEEP_BOTH", first.id)
    assert len(fake_openai.requests) == 3 and held < 2.5, (len(fake_openai.requests), held)
    last = arbitrations(pool)[-1]
    assert last["model"] == "rules" and "timeout" in last["reason"]


def test_a_write_that_waits_on_a_hanging_provider_is_stored_pending_after_a_short_budget(pool, fake_openai) -> None:
    """The write's embedding gets one attempt and one retry, each cut at the deadline; then it is stored pending
    (DEFERRED) for the worker, which embeds it with the configured retries. With those the write waited for six
    timeouts and their backoff."""
    from memory_pipelines.embeddings.openai_provider import OpenAIEmbedder

    embedder = OpenAIEmbedder("test-key", base_url=fake_openai.base_url, model="test-embed", dimensions=384,
                              timeout=0.5, max_retries=5, sleep=lambda _s: None)
    fake_openai.faults.extend([{"delay": 3.0}] * 6)
    r = ingest(pool, embedder, None, content=PGV_A)
    assert (r.status, r.action, r.deferred) == ("created", "DEFERRED", True)
    assert len(fake_openai.requests) == 2
    row = memory_row(pool, r.id)
    assert (row["content"], row["embedding_status"], row["arbitration_status"]) == (PGV_A, "pending", "pending")
    fake_openai.faults.clear()
    finish_deferred(pool, embedder, None)
    assert memory_row(pool, r.id)["embedding_status"] == "done"


def test_a_background_pass_asks_a_chat_model_that_does_not_answer_once(pool, fake_embedder, fake_openai) -> None:
    """Memories stored without waiting get their LLM summary in the background pass. A model that hangs was asked
    for each of them with the whole retry budget, holding the pass (and the embedding of new writes) for minutes
    per memory; after its first failure the pass asks it no more, and the rest get the extractive summary."""
    llm = make_llm(fake_openai, max_retries=5, timeout=0.5)
    texts = [PGV_A, LOGIN, "Testing: the release candidate passed the smoke tests on staging and on the canary."]
    ids = [ingest(pool, fake_embedder, llm, content=t, wait=False).id for t in texts]
    fake_openai.faults.extend([{"delay": 3.0}] * 60)
    out = finish_deferred(pool, fake_embedder, llm, conflict_threshold=T)
    assert out["arbitrated"] == 3 and out["still_pending"] == 0
    assert len(fake_openai.requests) == 6  # one summary, six tries; then never again (the second ask included)
    assert {memory_row(pool, i)["arbitration_status"] for i in ids} == {"done"}
    assert {memory_row(pool, i)["metadata"]["summary_by"] for i in ids} == {"extractive"}


def test_500_then_success_uses_the_llm_answer(pool, fake_embedder, fake_openai) -> None:
    first = ingest(pool, fake_embedder, None, content=PGV_A)
    llm = make_llm(fake_openai, max_retries=1)
    fake_openai.chat_responses.extend([summary_json(), decision_json("REPLACE")])
    fake_openai.faults.extend([{}, {"status": 500}])
    r = ingest(pool, fake_embedder, llm, content=PGV_B)
    assert (r.status, r.id) == ("updated", first.id)


# --- rules without an LLM --------------------------------------------------------------------------------


def test_without_llm_never_replaces(pool, fake_embedder) -> None:
    variants = [
        PGV_A,
        PGV_B,
        PGV_B + " Recall improved.",
        PGV_A.replace("simple", "easy"),
        PGV_A,
        PGV_A + "  ",
    ]
    results = [ingest(pool, fake_embedder, None, content=v) for v in variants]
    assert [r.status for r in results] == ["created", "created", "created", "created", "skipped", "skipped"]
    assert [r.action for r in results[1:4]] == ["KEEP_BOTH"] * 3
    assert results[4].id == results[5].id == results[0].id
    assert counts(pool)["memory_versions"] == 0
    assert {a["model"] for a in arbitrations(pool)} == {"rules"}
    assert "REPLACE" not in {a["action"] for a in arbitrations(pool)}


def test_candidates_are_limited_to_the_owner_and_project(pool, fake_embedder) -> None:
    a = ingest(pool, fake_embedder, None, content=PGV_A)
    other_project = ingest(pool, fake_embedder, None, content=PGV_A, project_name="Other")
    other_owner = ingest(pool, fake_embedder, None, owner="mallory", content=PGV_A)
    assert other_project.status == other_owner.status == "created"
    assert len({a.id, other_project.id, other_owner.id}) == 3
    unrelated = ingest(pool, fake_embedder, None, content=LOGIN)
    assert (unrelated.action, unrelated.candidate_id) == ("CREATE", None)


def test_default_thresholds_per_model(local_embedder) -> None:
    assert conflict_threshold_for(local_embedder.model_name) == 0.90
    assert conflict_threshold_for(FakeEmbedder(384).model_name) == 0.60
    assert conflict_threshold_for("some-other-model") == 0.90


@pytest.mark.slow
def test_e5_threshold_separates_updates_from_unrelated(pool, local_embedder) -> None:
    """The real local model at its default threshold: an update is a candidate, unrelated text is not."""
    a = ingest_memory(
        pool,
        local_embedder,
        None,
        "alice",
        content=PGV_A,
        content_type="development",
        project_name="Agent Mem",
    )
    unrelated = ingest_memory(
        pool,
        local_embedder,
        None,
        "alice",
        content=LOGIN,
        content_type="development",
        project_name="Agent Mem",
    )
    update = ingest_memory(
        pool,
        local_embedder,
        None,
        "alice",
        content=PGV_B,
        content_type="development",
        project_name="Agent Mem",
    )
    assert (unrelated.action, unrelated.candidate_id) == ("CREATE", None)
    assert (update.action, update.candidate_id) == ("KEEP_BOTH", a.id) and update.similarity >= 0.90


# --- concurrency -----------------------------------------------------------------------------------------


def test_twenty_concurrent_duplicates_create_no_duplicates(pool, fake_embedder) -> None:
    texts = [PGV_A if i % 2 else LOGIN for i in range(20)]
    with ThreadPoolExecutor(max_workers=20) as ex:
        results = list(ex.map(lambda t: ingest(pool, fake_embedder, None, content=t), texts))
    created = [r for r in results if r.status == "created"]
    assert len(created) == 2 and counts(pool)["memories"] == 2
    assert {r.id for r in results} == {r.id for r in created}
    assert sorted(a["action"] for a in arbitrations(pool)) == ["CREATE"] * 2 + ["SKIP"] * 18


def test_twenty_concurrent_replaces_lose_no_version(pool, fake_embedder, fake_openai) -> None:
    llm = make_llm(fake_openai)
    # one reply serves both questions (summary and arbitration), whatever order the threads ask in
    reply = json.dumps(
        {"summary": "release plan", "tags": ["release"], "action": "REPLACE", "reason": "newer"}
    )
    fake_openai.chat_responses.extend([reply] * 40)
    texts = [
        f"Release plan revision {i}: ship the memory service API first, then the MCP server, then the "
        f"dashboard; freeze on day {i + 10}."
        for i in range(20)
    ]
    with ThreadPoolExecutor(max_workers=20) as ex:
        results = list(
            ex.map(lambda t: ingest(pool, fake_embedder, llm, content=t, content_type="plan"), texts)
        )
    statuses = [r.status for r in results]
    assert statuses.count("created") == 1 and statuses.count("updated") == 19
    assert len({r.id for r in results}) == 1
    with pool.connection() as conn:
        current = conn.execute("SELECT content FROM memories").fetchall()
        versions = conn.execute("SELECT version, content FROM memory_versions ORDER BY version").fetchall()
    assert [v[0] for v in versions] == list(range(1, 20))
    assert sorted([c[0] for c in current] + [v[1] for v in versions]) == sorted(texts)  # every text kept once
    assert sorted(a["action"] for a in arbitrations(pool)) == ["CREATE"] + ["REPLACE"] * 19


# --- provider outage -------------------------------------------------------------------------------------


def test_outage_stores_pending_then_finish_deferred_completes(pool, fake_embedder) -> None:
    fake_embedder.fail_after = 0
    r = ingest(pool, fake_embedder, None, content=long_text(6))
    assert (r.status, r.action, r.deferred) == ("created", "DEFERRED", True)
    row = memory_row(pool, r.id)
    assert (row["embedding_status"], row["arbitration_status"], row["avg_embedding"]) == (
        "pending",
        "pending",
        None,
    )
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*), count(embedding) FROM fragments").fetchone() == (
            row["chunk_count"],
            0,
        )
    deferred = arbitrations(pool)
    assert [(a["action"], a["new"], a["model"]) for a in deferred] == [("DEFERRED", r.id, None)]
    assert "fail_after" in deferred[0]["reason"]
    assert search_memories(pool, fake_embedder, "alice", "detail3x4 tuning")["results"][0]["id"] == r.id
    # still down: nothing is lost, nothing settles
    out = finish_deferred(pool, fake_embedder, None, conflict_threshold=T)
    assert out["arbitrated"] == 0 and out["still_pending"] == 1
    fake_embedder.fail_after = None
    out = finish_deferred(pool, fake_embedder, None, conflict_threshold=T)
    assert out["embedded_fragments"] == row["chunk_count"] and out["actions"] == {"CREATE": 1}
    assert out["still_pending"] == 0
    row = memory_row(pool, r.id)
    assert (row["embedding_status"], row["arbitration_status"], row["is_active"]) == ("done", "done", True)
    assert row["avg_embedding"] is not None
    assert [a["action"] for a in arbitrations(pool)] == ["DEFERRED", "CREATE"]
    assert finish_deferred(pool, fake_embedder, None)["arbitrated"] == 0


def test_deferred_duplicate_is_skipped_and_deactivated(pool, fake_embedder) -> None:
    first = ingest(pool, fake_embedder, None, content=PGV_A)
    fake_embedder.fail_after = 0
    dup = ingest(pool, fake_embedder, None, content=PGV_A)
    assert dup.deferred and dup.id != first.id
    fake_embedder.fail_after = None
    out = finish_deferred(pool, fake_embedder, None, conflict_threshold=T)
    assert out["actions"] == {"SKIP": 1} and out["outcomes"][0]["candidate_id"] == first.id
    row = memory_row(pool, dup.id)
    assert row["is_active"] is False and row["metadata"]["duplicate_of"] == first.id
    got = get_memories(pool, "alice", [dup.id])["memories"][0]
    assert got["is_active"] is False and got["duplicate_of"] == first.id
    assert [r["id"] for r in search_memories(pool, fake_embedder, "alice", "pgvector HNSW")["results"]] == [
        first.id
    ]


def test_deferred_replace_folds_into_the_old_memory(pool, fake_embedder, fake_openai) -> None:
    first = ingest(pool, fake_embedder, None, content=PGV_A)
    fake_embedder.fail_after = 0
    new = ingest(pool, fake_embedder, None, content=PGV_B, content_type="insight")
    fake_embedder.fail_after = None
    llm = make_llm(fake_openai)
    fake_openai.chat_responses.append(decision_json("REPLACE", "update"))
    out = finish_deferred(pool, fake_embedder, llm, conflict_threshold=T)
    assert out["actions"] == {"REPLACE": 1}
    old = memory_row(pool, first.id)
    assert (old["content"], old["content_type"], old["is_active"]) == (PGV_B, "insight", True)
    assert memory_row(pool, new.id)["metadata"]["merged_into"] == first.id
    with pool.connection() as conn:
        assert conn.execute("SELECT version, content FROM memory_versions").fetchall() == [(1, PGV_A)]
        assert conn.execute("SELECT memory_id, count(embedding) FROM fragments GROUP BY 1").fetchall() == [
            (first.id, 1)
        ]
    assert [a["action"] for a in arbitrations(pool)] == ["CREATE", "DEFERRED", "REPLACE"]


def test_live_ingest_ignores_unsettled_deferred_memories(pool, fake_embedder) -> None:
    fake_embedder.fail_after = 0
    deferred = ingest(pool, fake_embedder, None, content=PGV_A)
    fake_embedder.fail_after = None
    live = ingest(pool, fake_embedder, None, content=PGV_A)
    assert (live.status, live.action) == ("created", "CREATE")
    out = finish_deferred(pool, fake_embedder, None, conflict_threshold=T)
    assert out["outcomes"] == [
        {
            "id": deferred.id,
            "action": "SKIP",
            "candidate_id": live.id,
            "similarity": pytest.approx(1.0, abs=1e-5),
        }
    ]


def test_llm_timing_out_during_arbitration_keeps_both_and_records_it(pool, fake_embedder, fake_openai) -> None:
    """The arbiter times out on every attempt: the write still goes through, as KEEP_BOTH by the rules,
    and the arbitration log says why (no REPLACE on a guess, nothing lost)."""
    first = ingest(pool, fake_embedder, None, content=PGV_A)
    llm = make_llm(fake_openai, timeout=0.2, max_retries=1)
    fake_openai.chat_responses.append(summary_json("second"))
    fake_openai.faults.extend([{}, {"delay": 2.0}, {"delay": 2.0}, {"delay": 2.0}, {"delay": 2.0}])
    second = ingest(pool, fake_embedder, llm, content=PGV_B)
    assert (second.status, second.action, second.candidate_id) == ("created", "KEEP_BOTH", first.id)
    assert second.id != first.id and counts(pool)["memories"] == 2 and counts(pool)["memory_versions"] == 0
    last = arbitrations(pool)[-1]
    assert (last["action"], last["model"], last["candidate"], last["new"]) == (
        "KEEP_BOTH", "rules", first.id, second.id)
    assert "timed out" in last["reason"].lower() or "timeout" in last["reason"].lower(), last["reason"]


def test_a_write_without_waiting_makes_no_remote_call_and_the_worker_asks_the_llm(pool, fake_embedder,
                                                                                 fake_openai) -> None:
    """A hanging chat model held a background write for minutes: the write answers from the extractive summary
    and the pass that embeds and judges the memory asks the LLM for its summary."""
    llm = make_llm(fake_openai)
    r = ingest(pool, fake_embedder, llm, wait=False)
    assert r.action == "DEFERRED" and fake_openai.requests == []
    assert memory_row(pool, r.id)["metadata"]["summary_by"] == "extractive, the LLM's to come"
    fake_openai.chat_responses.append(summary_json("pgvector keeps the vectors", ["pgvector"]))
    finish_deferred(pool, fake_embedder, llm)
    row = memory_row(pool, r.id)
    assert (row["summary"], row["tags"], row["metadata"]["summary_by"]) == (
        "pgvector keeps the vectors", ["pgvector"], "fake-chat")
    assert [path for path, _body, _headers in fake_openai.requests] == ["/v1/chat/completions"]


NUMBERED = ("ALICEMARK memory {n}: 数据库连接池耗尽导致网关返回502错误; the gateway answered 502 while the"
            " connection pool was empty, so raise the pool size and add a queue timeout before the next release.")


@pytest.mark.parametrize("second, action", [
    (NUMBERED.format(n=7), "KEEP_BOTH"),  # one number differs: another fact (a probe saw "117" folded into "7")
    (NUMBERED.format(n=117).replace("empty", "drained"), "KEEP_BOTH"),  # one term differs
    (NUMBERED.format(n=117).upper() + "!", "SKIP"),  # case and punctuation only
])
def test_rules_skip_only_the_same_terms_and_numbers(pool, fake_embedder, second, action) -> None:
    """Without an LLM a near-identical text is folded only when its terms and numbers are the same: a SKIP makes
    the new memory inactive, so any fact only it holds would be lost to search (and, before, to the export)."""
    first = ingest(pool, fake_embedder, None, content=NUMBERED.format(n=117))
    r = ingest(pool, fake_embedder, None, content=second)
    assert r.similarity >= 0.98 and r.candidate_id == first.id  # near-identical by the vectors
    assert r.action == action
