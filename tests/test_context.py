"""build_memory_context (context-builder spec, acceptance) and the retrieval log."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.context.config import activate, add_config
from memory_pipelines.context.history import hit_rates
from memory_pipelines.context.log import record_feedback, write_log
from memory_pipelines.context.scoring import ScoringConfig
from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all
from memory_pipelines.infra.errors import NotFoundError, ValidationError
from memory_pipelines.retrieval.search import SearchFilters, search
from memory_pipelines.text.keywords import jaccard
from memory_pipelines.text.tokens import count_tokens
from tests.factories import add_capability, add_event, add_goal, add_learning, add_task


@pytest.fixture
def team(pool, fake_embedder):
    with pool.connection() as conn:
        add_goal(conn, "alice", "Cut memory retrieval latency below 100 ms", priority=0, progress=40)
        add_goal(conn, "alice", "Ship the billing dashboard", priority=1, progress=70, status="pending")
        add_goal(conn, "alice", "Old finished goal", status="completed")
        for i in range(4):  # near-duplicates
            add_task(
                conn,
                "alice",
                "fix login auth error token expired",
                f"the oauth token expired again {i}",
                days=1 + i,
            )
        add_task(conn, "alice", "fix login auth error in mobile app", "refresh token rotation", days=31)
        add_task(conn, "alice", "fix login auth error in mobile app (old)", "refresh token rotation", days=91)
        add_learning(
            conn,
            "alice",
            "auth error: expired token",
            "refresh the oauth token before expiry",
            failure_class="AUTH",
            category="failure_pattern",
            days=10,
        )
        add_capability(conn, "alice", "login auth error triage", "diagnose auth error and token expiry")
        for i in range(40):
            add_task(conn, "alice", f"login auth error report {i}", "long text " * 80 + f"variant {i}", days=i)
        add_event(conn, "alice", "task_failed", {"task": "login", "error": "auth error 401"}, hours=2)
        add_event(conn, "alice", "alert", {"service": "auth", "message": "token expired spike"}, hours=40)
        add_event(conn, "alice", "deploy_note", {"message": "not a seed type"}, hours=1)
        add_task(conn, "bob", "fix login auth error token expired", "bob's private task", days=1)
        add_goal(conn, "bob", "Bob's secret goal", priority=0)
    embed_all(pool, fake_embedder)
    index_all(pool)


def _build(pool, embedder, **kw):
    args = {"owner": "alice", "query": "login auth error token expired", "mode": "execute"} | kw
    return build_memory_context(pool, embedder, args.pop("owner"), args.pop("query"), **args)


def test_default_budget_is_never_exceeded(pool, fake_embedder, team):
    for mode in ("plan", "execute", "debug", "chat"):
        result = _build(pool, fake_embedder, mode=mode)
        assert result.token_budget == 800
        assert count_tokens(result.block) == result.token_used <= 800
        assert result.items


def test_top_five_are_pairwise_distinct(pool, fake_embedder, team):
    items = _build(pool, fake_embedder).items[:5]
    assert len(items) == 5  # the team holds far more than five candidates, four of them near-duplicates
    lines = [i.line for i in items]
    for a in range(len(lines)):
        for b in range(a + 1, len(lines)):
            assert jaccard(lines[a], lines[b]) < 0.8


def test_the_block_lists_what_mmr_chose_by_score(pool, fake_embedder, team):
    """MMR decides what enters within the budget; the block lists it by score, so diversity reorders nothing."""
    for budget in (800, 32_000):
        result = _build(pool, fake_embedder, token_budget=budget, exploration=0.0)
        scores = [i.score for i in result.items]
        assert len(scores) > 3 and scores == sorted(scores, reverse=True)
    small = {i.id for i in _build(pool, fake_embedder, exploration=0.0).items}
    large = [i.id for i in _build(pool, fake_embedder, token_budget=32_000, exploration=0.0).items]
    assert small <= set(large)  # a larger budget can only add items


def test_plan_mode_puts_the_okr_profile_first_and_chat_has_none(pool, fake_embedder, team):
    plan = _build(pool, fake_embedder, mode="plan")
    assert plan.block.startswith("## 当前 OKR 焦点")
    assert "Cut memory retrieval latency" in plan.block and "Old finished goal" not in plan.block
    assert "Bob's secret goal" not in plan.block
    chat = _build(pool, fake_embedder, mode="chat")
    assert "OKR" not in chat.block


def test_factors_decay_and_capabilities(pool, fake_embedder, team):
    items = _build(pool, fake_embedder, token_budget=4000).items
    for item in items:
        assert item.score == pytest.approx(item.relevance * item.decay * item.mode_weight)
        if item.source == "capability":
            assert item.decay == 1.0
        if item.source == "task":  # bounded: the decay floor plus the rest halving every 30 days
            floor = ScoringConfig().decay_floor
            assert item.decay == pytest.approx(floor + (1 - floor) * 0.5 ** (item.age_days / 30), rel=1e-6)
    assert any(i.source == "capability" for i in items) and any(i.source == "task" for i in items)
    assert all("bob" not in i.line for i in items)


def test_events_window_by_mode(pool, fake_embedder, team):
    execute = _build(pool, fake_embedder, token_budget=4000)
    debug = _build(pool, fake_embedder, mode="debug", token_budget=4000)
    exec_events = [i.title for i in execute.items if i.source == "event"]
    debug_events = [i.title for i in debug.items if i.source == "event"]
    assert exec_events == ["[task_failed]"]  # 24 h window, seed types only
    assert sorted(debug_events) == ["[alert]", "[task_failed]"]  # 72 h in debug


def test_events_are_ranked_by_relevance_not_a_free_half(pool, fake_embedder, team):
    """Events are searched like every source: an unrelated recent one is floored, not given 0.5; one not
    embedded yet competes by its keywords."""
    with pool.connection() as conn:
        add_event(conn, "alice", "alert", {"message": "quarterly marketing newsletter draft"}, hours=1)
    embed_all(pool, fake_embedder)
    with pool.connection() as conn:
        pending = add_event(conn, "alice", "task_failed", {"task": "login", "error": "auth token expired 401"}, hours=1)
    index_all(pool)  # keywords only: the new event has no embedding yet
    result = _build(pool, fake_embedder, token_budget=4000)
    assert pending in {i.id for i in result.items if i.source == "event"}
    assert not any("newsletter" in i.line for i in result.items)
    assert result.floored >= 1 and result.as_dict()["floored"] == result.floored
    assert all(i.relevance != 0.5 for i in result.items if i.source == "event")


def test_retrieval_log_and_feedback(pool, fake_embedder, team):
    result = _build(pool, fake_embedder)
    with pool.connection() as conn:
        build = conn.execute(
            "SELECT candidates_count, injected_count, token_used, token_budget, mode FROM retrievals WHERE id = %s",
            (result.retrieval_id,),
        ).fetchone()
        logged = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE injected) FROM retrieval_candidates WHERE retrieval_id = %s",
            (result.retrieval_id,),
        ).fetchone()
        event = conn.execute(
            "SELECT payload FROM events WHERE type = 'memory_retrieval' AND payload->>'retrieval_id' = %s",
            (result.retrieval_id,),
        ).fetchone()
    assert build == (result.candidates_count, build[1], result.token_used, 800, "execute")
    assert build[1] == len(result.items)
    assert logged[0] >= result.candidates_count and logged[1] >= len(result.items)
    payload = event[0]
    for key in (
        "query",
        "mode",
        "candidates_count",
        "injected_count",
        "injected_sources",
        "token_used",
        "token_budget",
    ):
        assert key in payload
    used = [result.items[0].id]
    with pool.connection() as conn:
        goals = [r[0] for r in conn.execute("SELECT item_id FROM retrieval_candidates WHERE retrieval_id = %s"
                                            " AND source = 'okr' AND injected", (result.retrieval_id,))]
    assert goals  # the profile is logged with the build, shown first
    assert record_feedback(pool, "alice", result.retrieval_id, used + goals) == 1  # goals are never marked
    with pytest.raises(ValidationError) as err:
        record_feedback(pool, "alice", result.retrieval_id, ["not-in-this-build"])
    assert err.value.field == "used_ids"
    rates = hit_rates(pool, "alice", days=2)
    assert rates["total"]["injected"] == build[1] and rates["total"]["used"] == 1  # the build's own counts
    assert "okr" not in {s["source"] for s in rates["by_source"]}
    with pytest.raises(NotFoundError):
        record_feedback(pool, "bob", result.retrieval_id, used)
    with pytest.raises(NotFoundError):
        record_feedback(pool, "alice", "00000000-0000-0000-0000-000000000000", used)


def test_the_log_commits_without_waiting_for_its_flush_and_only_the_log(pool):
    """write_log turns synchronous commit off for its own transaction: the row is visible to another session
    at once, and the connection is back to synchronous commits after it."""
    with pool.connection() as conn:
        conn.execute("SET synchronous_commit = on")
        conn.commit()  # so that the block below is a transaction of its own, not a savepoint
        try:
            with conn.transaction():
                retrieval_id = write_log(
                    conn, owner="alice", query="q", mode="execute", budget=800, tokens_used=0, config_version=1,
                    degraded=None, as_of=datetime.now(UTC), ranked=[], injected={}, injected_sources=[],
                )
                assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "off"
            assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        finally:
            conn.execute("RESET synchronous_commit")
            conn.commit()
    with pool.connection() as other:
        row = other.execute("SELECT owner_id FROM retrievals WHERE id = %s", (retrieval_id,)).fetchone()
    assert row == ("alice",)


def test_provider_outage_degrades_never_errors(pool, team):
    broken = FakeEmbedder(384)
    broken.fail_after = 0
    result = _build(pool, broken)
    assert result.degraded and result.items
    assert count_tokens(result.block) <= 800
    with pool.connection() as conn:
        degraded = conn.execute("SELECT degraded FROM retrievals WHERE id = %s", (result.retrieval_id,)).fetchone()
    assert degraded[0]


def test_active_config_is_used_from_the_next_build(pool, fake_embedder, team):
    config = ScoringConfig(
        mode_weights={
            **ScoringConfig().mode_weights,
            "capability": {m: 0.01 for m in ("plan", "execute", "debug", "chat")},
        },
        weight_bounds=(0.01, 5.0),  # the default bounds would lift 0.01 to their floor
        decay_floor=0.3,
    )
    version = add_config(pool, config, note="test")
    activate(pool, version)
    result = _build(pool, fake_embedder, token_budget=4000)
    assert result.config_version == version
    capabilities = [i for i in result.items if i.source == "capability"]
    assert capabilities and all(i.mode_weight == 0.01 for i in capabilities)
    tasks = [i for i in result.items if i.source == "task"]
    assert tasks and all(i.decay == pytest.approx(0.3 + 0.7 * 0.5 ** (i.age_days / 30)) for i in tasks)


def test_bad_input_names_the_field(pool, fake_embedder, team):
    for kw, field in [
        ({"query": ""}, "query"),
        ({"mode": "yolo"}, "mode"),
        ({"token_budget": 10}, "token_budget"),
    ]:
        with pytest.raises(ValidationError) as err:
            _build(pool, fake_embedder, **kw)
        assert err.value.field == field


@pytest.mark.slow
def test_chinese_query_finds_english_learning_with_local_model(pool, local_embedder):
    with pool.connection() as conn:
        target = add_learning(
            conn,
            "alice",
            "Auth error: expired token causes 401",
            "Calls fail with an auth error when the OAuth token expires; refresh it first.",
            failure_class="AUTH",
        )
        add_learning(conn, "alice", "Database connection pool exhausted", "Raise max connections carefully.")
        add_learning(conn, "alice", "Flaky UI test on Safari", "Retry the selector wait.")
        add_learning(conn, "alice", "Billing cap reached", "The monthly spend cap stops the API calls.")
    embed_all(pool, local_embedder)
    index_all(pool)
    hits = search(
        pool, local_embedder, "alice", "认证失败", filters=SearchFilters(sources=("learning",)), limit=4
    ).hits  # hybrid: the local model plus the bilingual glossary of the keyword channel
    assert hits[0].id == target
    context = build_memory_context(pool, local_embedder, "alice", "认证失败", mode="debug")
    assert any(i.id == target for i in context.items)


def test_exploration_builds_are_random_and_logged_as_such(pool, fake_embedder, team):
    random.seed(7)  # exploration draws from the global RNG: seeded, the test is deterministic
    explored = _build(pool, fake_embedder, token_budget=4000, exploration=0.5)
    orders = {
        tuple(i.id for i in _build(pool, fake_embedder, token_budget=4000, exploration=0.5).items) for _ in range(8)
    }
    normal = _build(pool, fake_embedder, token_budget=4000, exploration=0.0)
    assert len(orders) > 2  # some builds were shuffled
    with pool.connection() as conn:
        flags = conn.execute(
            "SELECT randomized FROM retrievals WHERE id IN (%s, %s)", (explored.retrieval_id, normal.retrieval_id)
        ).fetchall()
        randomized = conn.execute("SELECT count(*) FILTER (WHERE randomized), count(*) FROM retrievals").fetchone()
    assert (False,) in flags
    assert 0 < randomized[0] < randomized[1]
