"""The learned ranker: features logged with every candidate, fitted from used / unused labels, applied by the
builder, published only through the gate, dropped by a rollback."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.context.config import activate, active_config, add_config, list_configs
from memory_pipelines.context.features import Ranker, candidate_features
from memory_pipelines.context.log import record_feedback
from memory_pipelines.context.scoring import ScoringConfig
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all
from memory_pipelines.infra.errors import ValidationError
from memory_pipelines.tuning.evaluate import rerank_scores
from memory_pipelines.tuning.fit import FitOptions
from memory_pipelines.tuning.frames import load_log, time_split
from memory_pipelines.tuning.publish import Gate, decide
from memory_pipelines.tuning.ranker import RankerOptions, fit_ranker
from memory_pipelines.tuning.run import run_tuning, tune_and_evaluate
from memory_pipelines.tuning.simulate import simulate_feature_log, write_log_rows
from tests.factories import add_auth_history, add_memory

FEATURE_KEYS = {"fused", "semantic", "keyword", "keyword_evidence", "rank_semantic", "rank_keyword",
                "neighbour_gain", "date_prior", "same_language", "source", "age_days"}


class _Hit:
    def __init__(self, text, semantic, keyword, gain=None, source="memory"):
        self.source, self.text, self.created_at = source, text, datetime(2025, 1, 1, tzinfo=UTC)
        self.relevance = 0.6 * (semantic or 0) + 0.4 * (keyword or 0)
        self.semantic, self.keyword, self.keyword_evidence = semantic, keyword, keyword
        self.extra = {} if gain is None else {"neighbour_gain": gain}


def test_candidate_features_rank_each_channel_within_the_retrieval():
    hits = [_Hit("deploy the auth service", 0.5, None), _Hit("认证服务部署", 0.9, 0.2, gain=0.05),
            _Hit("auth token expired", None, 0.7), _Hit("rollback", 0.1, 0.4)]
    now = datetime(2025, 1, 11, tzinfo=UTC)
    f = candidate_features(hits, "en", now)
    assert [x["rank_semantic"] for x in f] == [2, 1, None, 3]
    assert [x["rank_keyword"] for x in f] == [None, 3, 1, 2]
    assert [x["same_language"] for x in f] == [True, False, True, True]
    assert [x["neighbour_gain"] for x in f] == [0.0, 0.05, 0.0, 0.0]
    assert f[0]["age_days"] == pytest.approx(10) and f[0]["source"] == "memory"
    assert f[2]["semantic"] is None and f[0]["keyword"] is None and f[1]["fused"] == hits[1].relevance
    assert all(set(x) == FEATURE_KEYS for x in f)


@pytest.fixture
def corpus(pool, fake_embedder):
    with pool.connection() as conn:
        add_auth_history(conn, "alice", goal="Cut memory retrieval latency", tasks=6, error="auth error 401 token")
        add_memory(conn, "alice", "登录认证错误：令牌过期", days=2)
        for i, text in enumerate([
            "the login auth error comes from an expired token",
            "auth error on login after the deploy",
            "login page redesign with a new error banner",
            "token rotation schedule for the auth service",
            "expired certificates broke the staging login",
            "weekly notes: auth, login, token, error, expired",
        ]):
            add_memory(conn, "alice", text, days=3 + i)
    embed_all(pool, fake_embedder)
    index_all(pool)


def _logged(pool, retrieval_id):
    with pool.connection() as conn:
        return conn.execute(
            "SELECT source, item_id, relevance, age_days, score, rank, features FROM retrieval_candidates"
            " WHERE retrieval_id = %s ORDER BY rank", (retrieval_id,),
        ).fetchall()


def test_every_candidate_of_a_build_is_logged_with_its_features(pool, fake_embedder, corpus):
    r = build_memory_context(pool, fake_embedder, "alice", "login auth error token expired", "debug")
    rows = _logged(pool, r.retrieval_id)
    assert len(rows) == r.candidates_count + 1  # and the profile goal
    with pool.connection() as conn:  # no memory of the corpus is a conversation's turn: no neighbour to lift
        assert conn.execute("SELECT count(*) FROM memories WHERE session IS NOT NULL").fetchone()[0] == 0
    assert {s for s, *_ in rows} >= {"okr", "task", "learning", "event", "memory"}
    for source, _id, relevance, age, _score, _rank, f in rows:
        assert set(f) == FEATURE_KEYS and f["source"] == source
        assert f["fused"] == relevance  # no ranker: the relevance is the fused search score
        assert f["age_days"] == pytest.approx(age)
        assert f["neighbour_gain"] == 0.0
        for ch in ("semantic", "keyword"):
            assert (f[ch] is None) == (f[f"rank_{ch}"] is None)
    # ranks are 1-based within one retrieval: tasks, learnings and memories share one, events have their own
    semantic = [f for s, *_, f in rows if s not in ("okr", "event") and f["rank_semantic"]]
    assert sorted(f["rank_semantic"] for f in semantic) == list(range(1, len(semantic) + 1))
    by_rank = sorted(semantic, key=lambda f: f["rank_semantic"])
    assert [f["semantic"] for f in by_rank] == sorted((f["semantic"] for f in by_rank), reverse=True)
    langs = {f["same_language"] for s, *_, f in rows if s == "memory"}
    assert True in langs
    frames = load_log(pool, require_feedback=False)
    assert frames.candidates["features"].map(lambda f: isinstance(f, dict)).all()


def _keyword_ranker(**kw) -> Ranker:
    """A hand-set ranker that follows the keyword channel's rank only."""
    return Ranker(features=("rr_keyword",), mean=(0.0,), scale=(1.0,), coef=(6.0,), intercept=-3.0, **kw)


def test_a_config_with_a_ranker_reorders_the_block_and_a_rollback_drops_it(pool, fake_embedder, corpus):
    query = "login auth error token expired"
    plain = build_memory_context(pool, fake_embedder, "alice", query, "chat")
    base = active_config(pool).version
    ranker = _keyword_ranker(fitted_on={"by": "hand"})
    version = add_config(pool, ScoringConfig(ranker=ranker), note="keyword ranker (test)")
    activate(pool, version)
    assert active_config(pool).ranker == ranker
    ranked = build_memory_context(pool, fake_embedder, "alice", query, "chat")
    rows = _logged(pool, ranked.retrieval_id)
    for _source, _id, relevance, _age, _score, _rank, f in rows:
        assert relevance == pytest.approx(ranker.probability(f))  # the relevance is the ranker's probability
        assert f["fused"] != relevance
    # decay and mode weight still multiply it: the logged scores replay exactly, and differ from the plain ones
    frames = load_log(pool, require_feedback=False)
    cands = frames.candidates[frames.candidates["retrieval_id"] == ranked.retrieval_id]
    np.testing.assert_allclose(rerank_scores(cands, active_config(pool)), cands["score"], rtol=1e-9)
    # the block follows the keyword channel now: the first item is the best keyword match of its retrieval
    top = ranked.items[0]
    top_f = next(f for s, i, *_, f in rows if (s, i) == (top.source, top.id))
    assert top_f["rank_keyword"] == 1
    assert [i.id for i in ranked.items] != [i.id for i in plain.items]
    activate(pool, base)  # the rollback: the version before has no ranker, so the next build has none either
    assert active_config(pool).ranker is None
    again = build_memory_context(pool, fake_embedder, "alice", query, "chat")
    assert [i.id for i in again.items] == [i.id for i in plain.items]
    assert all(rel == f["fused"] for _s, _i, rel, *_, f in _logged(pool, again.retrieval_id))


def test_a_malformed_ranker_is_refused():
    with pytest.raises(ValidationError, match="unknown inputs"):
        Ranker(features=("speaker_named",), mean=(0.0,), scale=(1.0,), coef=(1.0,), intercept=0.0)
    with pytest.raises(ValidationError, match="finite"):
        Ranker.from_params({"features": ["fused"], "mean": [0], "scale": [1], "coef": [float("nan")],
                            "intercept": 0})
    frames = simulate_feature_log(60, seed=5)
    train, test = time_split(frames.builds, 0.3)
    result = tune_and_evaluate(frames.candidates, frames.builds, train, test, ScoringConfig(),
                               options=FitOptions(n_boot=0), n_boot_eval=50)
    result["proposed"]["params"]["ranker"] = {**_keyword_ranker().params(), "scale": [0.0]}
    assert "ranker (" in decide(result, Gate(min_train_builds=1))["checks"][-1]["detail"]


def test_the_ranker_learns_that_used_items_have_a_high_keyword_score():
    frames = simulate_feature_log(400, seed=1)  # use follows the keyword channel; fused = 0.6 sem + 0.4 kw
    fit = fit_ranker(frames.candidates, ScoringConfig(), RankerOptions())
    assert fit.status == "fitted" and fit.ranker is not None
    coef = dict(zip(fit.ranker.features, fit.ranker.coef, strict=True))
    assert coef["keyword"] > 0.5 and coef["keyword"] == max(coef.values())
    assert coef["semantic"] < 0  # given the fused score, more semantic means less keyword
    assert fit.ndcg > fit.baseline_ndcg and fit.gain_ci[0] > 0
    assert fit.ranker.fitted_on["candidates"] == 6000 and fit.ranker.fitted_on["used"] == fit.n_used
    # with too little data nothing is proposed
    thin = fit_ranker(frames.candidates.head(100), ScoringConfig(), RankerOptions())
    assert thin.status == "thin" and thin.ranker is None


def test_a_fitted_ranker_is_published_through_the_gate_and_rolled_back(pool):
    old = active_config(pool).version
    write_log_rows(pool, simulate_feature_log(400, seed=3))
    result = run_tuning(pool, publish=True, options=FitOptions(n_boot=5))
    decision = result["decision"]
    assert decision["publish"], decision["reasons"]
    row = next(p for p in result["fit"]["params"] if p["name"] == "ranker")
    assert row["status"] == "fitted"
    assert result["evaluation"]["deltas"]["proposed"]["ndcg@10"]["ci_low"] > 0
    published = active_config(pool)
    assert published.version == decision["version"] != old and published.ranker is not None
    stored = published.ranker.params()
    assert set(stored) == {"features", "mean", "scale", "coef", "intercept", "fitted_on"}
    assert stored["fitted_on"]["builds"] == 280 and stored["fitted_on"]["used"] > 0
    activate(pool, old)  # rollback
    assert active_config(pool).ranker is None


def test_a_ranker_that_does_worse_on_held_out_builds_is_refused(pool):
    # the training builds' use follows the keyword channel, the newest (held-out) builds' the semantic one:
    # the cross-fitted check on the training builds proposes the ranker, the held-out replay refuses it
    frames = simulate_feature_log(400, seed=4, driver=lambda b: "keyword" if b < 280 else "semantic")
    write_log_rows(pool, frames)
    before = len(list_configs(pool))
    result = run_tuning(pool, publish=True, options=FitOptions(n_boot=5))
    assert result["proposed"]["params"].get("ranker")  # proposed ...
    decision = result["decision"]
    assert not decision["publish"] and decision["version"] is None  # ... and refused
    failed = {r.split(":")[0] for r in decision["reasons"]}
    assert {"improvement", "no_regression"} <= failed
    assert len(list_configs(pool)) == before and active_config(pool).ranker is None


def test_old_rows_without_features_replay_with_their_logged_relevance(pool, fake_embedder, corpus):
    r = build_memory_context(pool, fake_embedder, "alice", "login auth error token expired", "execute")
    record_feedback(pool, "alice", r.retrieval_id, [r.items[0].id])
    with pool.connection() as conn:  # as logged before sql/009
        conn.execute("UPDATE retrieval_candidates SET features = NULL WHERE retrieval_id = %s", (r.retrieval_id,))
    cands = load_log(pool).candidates
    assert cands["features"].isna().all()
    keyword = ScoringConfig(ranker=_keyword_ranker())
    np.testing.assert_allclose(rerank_scores(cands, keyword), cands["score"], rtol=1e-9)
    fit = fit_ranker(cands, ScoringConfig())
    assert fit.status == "thin" and fit.n == 0

