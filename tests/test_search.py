"""Search (advanced-search and progressive-search specs): modes, filters inside the query, min score,
limit, owner isolation."""

from __future__ import annotations

import pytest

from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all
from memory_pipelines.infra.errors import NotFoundError, ValidationError
from memory_pipelines.retrieval.disclosure import detail, related, summary_search
from memory_pipelines.retrieval.search import SearchFilters, search
from tests.factories import add_capability, add_learning, add_memory, add_task


@pytest.fixture
def corpus(pool, fake_embedder):
    ids = {}
    with pool.connection() as conn:
        ids["t_deploy"] = add_task(
            conn, "alice", "deploy payment service", "canary rollout to production", project_key="pay", days=2
        )
        ids["t_old"] = add_task(
            conn, "alice", "deploy payment service v1", "first rollout", days=200, project_key="pay"
        )
        ids["t_db"] = add_task(
            conn, "alice", "tune postgres connection pool", "pool exhausted under load", days=5
        )
        ids["l_auth"] = add_learning(
            conn, "alice", "auth error: expired token", "refresh the oauth token", failure_class="AUTH"
        )
        ids["c_search"] = add_capability(conn, "alice", "vector search", "pgvector hnsw cosine search")
        ids["m_plan"] = add_memory(
            conn, "alice", "plan: deploy payment service in three waves", content_type="plan", project="pay"
        )
        ids["m_test"] = add_memory(
            conn,
            "alice",
            "testing: payment service deploy regression suite",
            content_type="testing",
            project="pay",
        )
        for i in range(20):
            add_task(conn, "alice", f"filler task {i}", "unrelated chores and paperwork", days=3)
        ids["bob_deploy"] = add_task(conn, "bob", "deploy payment service", "bob's secret rollout", days=1)
        ids["bob_mem"] = add_memory(conn, "bob", "bob secret plan to deploy payment service", project="pay")
    embed_all(pool, fake_embedder)
    index_all(pool)
    return ids


@pytest.mark.parametrize("mode", ["semantic", "keyword", "hybrid"])
def test_each_mode_finds_the_matching_items(pool, fake_embedder, corpus, mode):
    result = search(pool, fake_embedder, "alice", "deploy payment service", mode=mode, limit=5)
    ids = [h.id for h in result.hits]
    # Four of alice's items hold every query word. Keyword and hybrid put the short deploy task in the top 3;
    # the bag-of-words fake embedder orders the four by word hashes that include each text's date, so which
    # of them the semantic channel puts fourth changes with the calendar day: it must find all four first.
    every_word = {corpus[k] for k in ("t_deploy", "t_old", "m_plan", "m_test")}
    assert corpus["t_deploy"] in ids[:3] if mode != "semantic" else set(ids[:4]) == every_word
    assert corpus["bob_deploy"] not in ids and corpus["bob_mem"] not in ids
    assert result.degraded is None


def test_filters_apply_before_the_limit(pool, fake_embedder, corpus):
    f = SearchFilters(memory_types=("testing",))
    hits = search(pool, fake_embedder, "alice", "deploy payment service", filters=f, limit=1).hits
    assert [h.id for h in hits] == [corpus["m_test"]]  # the filter did not starve the limit
    recent = SearchFilters(sources=("task",), time_range_days=30)
    ids = [
        h.id for h in search(pool, fake_embedder, "alice", "deploy payment service v1", filters=recent).hits
    ]
    assert corpus["t_old"] not in ids and corpus["t_deploy"] in ids
    proj = SearchFilters(sources=("task", "memory"), project="pay")
    hits = search(pool, fake_embedder, "alice", "deploy", filters=proj, limit=20).hits
    assert hits and all(h.extra.get("project_key") == "pay" for h in hits)


def test_min_score_and_limit(pool, fake_embedder, corpus):
    all_hits = search(pool, fake_embedder, "alice", "deploy payment service", limit=20).hits
    assert len(search(pool, fake_embedder, "alice", "deploy payment service", limit=3).hits) == 3
    threshold = all_hits[2].score
    high = search(pool, fake_embedder, "alice", "deploy payment service", limit=20, min_score=threshold).hits
    assert high and all(h.score >= threshold for h in high) and len(high) < len(all_hits)


def test_bad_input_names_the_field(pool, fake_embedder, corpus):
    for kwargs, field in [
        ({"query": " "}, "query"),
        ({"mode": "magic"}, "mode"),
        ({"limit": 0}, "limit"),
        ({"min_score": 2.0}, "min_score"),
    ]:
        args = {"query": "deploy", **kwargs}
        with pytest.raises(ValidationError) as err:
            search(pool, fake_embedder, "alice", **args)
        assert err.value.field == field
    with pytest.raises(ValidationError) as err:
        search(pool, fake_embedder, "alice", "x", filters=SearchFilters(memory_types=("poems",)))
    assert err.value.field == "memory_types"


def test_provider_outage_degrades_to_keywords(pool, corpus):
    broken = FakeEmbedder(384)
    broken.fail_after = 0
    result = search(pool, broken, "alice", "deploy payment service", mode="semantic")
    assert result.degraded and "keyword" in result.degraded
    assert corpus["t_deploy"] in [h.id for h in result.hits]


def test_owner_isolation_with_guessed_ids(pool, fake_embedder, corpus):
    for bob_id in (corpus["bob_deploy"], corpus["bob_mem"]):
        with pytest.raises(NotFoundError):
            detail(pool, "alice", bob_id)
        with pytest.raises(NotFoundError):
            related(pool, fake_embedder, "alice", bob_id)
    assert detail(pool, "bob", corpus["bob_deploy"])["title"] == "deploy payment service"
    with pytest.raises(NotFoundError):
        detail(pool, "alice", "not-a-uuid")


def test_progressive_disclosure(pool, fake_embedder, corpus):
    matches = summary_search(pool, fake_embedder, "alice", "deploy payment service", top_k=3)["matches"]
    assert set(matches[0]) >= {"id", "level", "title", "similarity", "preview"}
    full = detail(pool, "alice", matches[0]["id"])
    assert full["id"] == matches[0]["id"] and "created_at" in full
    near = related(pool, fake_embedder, "alice", corpus["t_deploy"], top_k=3)["matches"]
    assert corpus["t_deploy"] not in [m["id"] for m in near] and near
    with_self = related(pool, fake_embedder, "alice", corpus["t_deploy"], top_k=3, exclude_self=False)[
        "matches"
    ]
    assert with_self[0]["id"] == corpus["t_deploy"]


def test_text_postgres_cannot_store_is_a_validation_error(pool, fake_embedder, corpus):
    with pytest.raises(ValidationError) as err:
        search(pool, fake_embedder, "alice", "deploy\x00payment")
    assert err.value.field == "query"
    with pytest.raises(ValidationError) as err:
        detail(pool, "alice", "mem_\x00")
    assert err.value.field == "id"
    with pytest.raises(ValidationError):
        search(pool, fake_embedder, "alice", "lone \ud800 surrogate")


def test_pruned_keyword_postings_rank_like_the_exact_scan(pool, fake_embedder, corpus):
    """Without extra filters BM25 reads impact-ordered postings; with one it scores every posting."""
    pruned = search(pool, fake_embedder, "alice", "deploy payment service rollout", mode="keyword", limit=10)
    exact = search(pool, fake_embedder, "alice", "deploy payment service rollout", mode="keyword", limit=10,
                   filters=SearchFilters(time_range_days=3650))
    assert [h.id for h in pruned.hits] == [h.id for h in exact.hits]
    assert [round(h.score, 3) for h in pruned.hits] == [round(h.score, 3) for h in exact.hits]


PAGER = "The pager rotation handoff happens on Mondays at 10:00 UTC."
NOTES = [
    "We decided to deploy the web app on Fridays only after the staging checks pass.",
    "Alice prefers short status updates in the team channel.",
    "The billing service retries failed card charges three times over two days.",
    "Use the blue-green rollout for database migrations that lock big tables.",
]


def test_a_memory_not_embedded_yet_ranks_by_its_keyword_match(db_url, pool, local_embedder):
    """Stored without waiting, a memory has no vector until the worker runs: that is no evidence against it,
    so an exact keyword hit leads hybrid search and the context block (it tied with an unrelated note before)."""
    from memory_pipelines import Memory
    from memory_pipelines.infra.settings import Settings
    from memory_pipelines.runtime import Runtime

    mem = Memory(Runtime(Settings(database_url=db_url, embedder="local"), db_url, pool, local_embedder), llm=None)
    for note in NOTES:
        mem.ingest("alice", content=note, content_type="insight", project_name="ops")
    pending = mem.ingest("alice", content=PAGER, content_type="insight", project_name="ops", wait=False)
    assert pending.action == "DEFERRED"
    hits = mem.search("alice", "pager rotation handoff").hits
    assert hits[0].id == pending.id and hits[0].score > 2 * hits[1].score
    assert mem.context("alice", "pager rotation handoff").items[0].id == pending.id
