"""Pure scoring, MMR and budget (the context-builder spec: acceptance figures)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from memory_pipelines.context.budget import fit_to_budget
from memory_pipelines.context.mmr import mmr_select
from memory_pipelines.context.scoring import (
    DECAY_FLOOR,
    RELEVANCE_FLOORS,
    UNBOUNDED,
    ScoringConfig,
    apply_floor,
    ranked_floor,
    time_decay,
)
from memory_pipelines.text.keywords import jaccard
from memory_pipelines.text.tokens import count_tokens


def test_task_decay_halves_every_30_days():
    seed = ScoringConfig(**UNBOUNDED)  # the seed's pure exponential decay
    assert seed.decay("task", 30) == pytest.approx(0.5, abs=1e-9)
    assert seed.decay("task", 90) == pytest.approx(0.125, abs=1e-9)
    assert seed.decay("learning", 90) == pytest.approx(0.5, abs=1e-9)
    assert seed.decay("event", 1) == pytest.approx(0.5, abs=1e-9)
    assert time_decay(30, 30) == pytest.approx(0.5, abs=1e-9)


def test_decay_orders_but_never_buries():
    config = ScoringConfig()
    floor = config.decay_floor
    assert config.decay("task", 0) == pytest.approx(1.0)
    assert config.decay("task", 30) == pytest.approx(floor + (1 - floor) * 0.5)
    assert config.decay("task", 10_000) == pytest.approx(floor)  # a very old item keeps the floor
    assert config.decay("task", 10) > config.decay("task", 20)  # still ordered by age
    lo, hi = config.weight_bounds
    # the largest lift one item can get over another of higher relevance
    assert hi / (lo * floor) <= 6.0


def test_capabilities_goals_and_memories_do_not_decay():
    config = ScoringConfig()
    for source in ("capability", "okr", "memory"):
        assert config.decay(source, 365) == 1.0
    assert time_decay(None, 30) == 1.0


def test_mode_weights_are_the_seed_table_within_bounds():
    seed = ScoringConfig(**UNBOUNDED)
    assert seed.weight("okr", "plan") == 1.5 and seed.weight("event", "debug") == 1.5
    assert seed.weight("learning", "chat") == 0.6 and seed.weight("task", "execute") == 1.2
    config = ScoringConfig()
    lo, hi = config.weight_bounds
    assert config.weight("task", "execute") == 1.2 and config.weight("event", "debug") == min(1.5, hi)
    assert config.weight("event", "chat") == max(0.3, lo)  # bounded: the seed's 0.3 cannot bury events
    boosted = ScoringConfig(source_weights={"learning": 10.0, "task": 0.5})
    assert boosted.weight("learning", "plan") == hi and boosted.weight("task", "plan") == max(0.5, lo)


def test_relevance_floor_per_channel():
    config = ScoringConfig(relevance_floors={"semantic": 0.4, "keyword": 0.2})
    assert config.passes_floor(0.5, None) and config.passes_floor(None, 0.25) and config.passes_floor(0.1, 0.3)
    assert not config.passes_floor(0.3, 0.1) and not config.passes_floor(None, None)
    items = [Channels(0.9, None, relevance=0.5), Channels(0.1, 0.05), Channels(None, 0.5, relevance=0.3),
             Channels(0.39, None, relevance=0.2)]
    kept, floored = apply_floor(items, config)
    assert kept == [items[0], items[2]] and floored == 2
    # Search's order decides: a candidate ranked above one that clears the floor stays; the tail goes.
    ranked = [Channels(0.9, None, relevance=0.6), Channels(0.35, 0.1, relevance=0.25),
              Channels(None, 0.3, relevance=0.15), Channels(0.2, None, relevance=0.1)]
    kept, floored = apply_floor(ranked, config)
    assert kept == ranked[:3] and floored == 1
    assert ranked_floor([0.5, 0.4, 0.3], [False, False, False]) == [False, False, False]  # nothing relevant
    # The keyword channel is judged by its evidence when search reports it (BM25 against the corpus's strongest
    # one-term match), so a small corpus's matches are not floored for their small BM25.
    small_corpus = [Channels(None, 0.03, keyword_evidence=0.5, relevance=0.1),
                    Channels(None, 0.5, keyword_evidence=0.1)]
    kept, floored = apply_floor(small_corpus, config)
    assert kept == [small_corpus[0]] and floored == 1
    # A conversation turn lifted by an adjacent top hit passes whatever its own channels say.
    turns = [Channels(0.1, None, extra={"neighbour_gain": 0.2}, relevance=0.2),
             Channels(0.1, None, extra={"neighbour_gain": 0.0})]
    kept, floored = apply_floor(turns, config)
    assert kept == [turns[0]] and floored == 1
    assert config.passes_floor(None, None, lifted=True)
    # Found by both channels, each weakly ("Hi, I'm Susan" and the memory about Susan): the channels' agreement is
    # the evidence; a candidate only one channel found, as weakly, is still floored.
    weak = [Channels(0.2, 0.02, keyword_evidence=0.1, relevance=0.2), Channels(0.25, None, relevance=0.1),
            Channels(None, 0.02, keyword_evidence=0.1, relevance=0.05), Channels(0.0, 0.02, keyword_evidence=0.1)]
    kept, floored = apply_floor(weak, config)
    assert kept == [weak[0]] and floored == 3
    # Of the time the question names (search's date prior) and above zero on one channel: the time and the channel
    # agree ("What did I do last weekend?" and last weekend's memory, whose words the question does not share). The
    # time alone, or a channel at its zero, is not enough.
    dated = [Channels(0.1, None, extra={"date_prior": 1.25}, relevance=0.3), Channels(0.2, None, relevance=0.2),
             Channels(None, 0.02, keyword_evidence=0.1, extra={"date_prior": 1.25}, relevance=0.15),
             Channels(0.0, None, extra={"date_prior": 1.25}, relevance=0.1)]
    kept, floored = apply_floor(dated, config)
    assert kept == dated[:3] and floored == 1  # the second ranks above the third, which clears the floor
    assert not config.admits(0.0, None, None, 0.0, dated=True) and not config.admits(0.1, None, None, 0.0)


def test_stored_config_without_params_reads_the_defaults():
    old = ScoringConfig.from_row(3, {"task": 10}, {"task": {"plan": 2.0}})
    assert old.version == 3 and old.decay_floor == DECAY_FLOOR and old.relevance_floors == RELEVANCE_FLOORS
    new = ScoringConfig(decay_floor=0.2, source_weights={"event": 0.8}, relevance_floors={"semantic": 0.5})
    back = ScoringConfig.from_row(4, new.half_lives, new.mode_weights, new.params())
    assert back.decay_floor == 0.2 and back.source_weights == {"event": 0.8}
    assert back.relevance_floors["semantic"] == 0.5 and back.weight_bounds == new.weight_bounds


@dataclass
class Channels:
    semantic: float | None
    keyword: float | None
    keyword_evidence: float | None = None
    extra: dict = field(default_factory=dict)
    relevance: float = 0.0


@dataclass
class Item:
    score: float
    text: str
    embedding: np.ndarray | None = None


def test_fit_to_budget_chooses_in_the_order_given_and_writes_in_rank_order():
    lines = ["- a " + "x " * 50, "- b short", "- c " + "y " * 50, "- d short"]
    budget = fit_to_budget("", [lines[0], lines[1], lines[3]], 10_000).tokens + 2  # a, b and d, not c as well
    chosen = fit_to_budget("", lines, budget)
    assert chosen.included == [0, 1, 3]  # c does not fit; d, after it, still does
    ranked = fit_to_budget("", lines, budget, rank=[2, 0, 3, 1])
    assert ranked.included == [1, 3, 0]  # the same lines, written b, d, a
    assert ranked.block.splitlines()[1:] == [lines[1], lines[3], lines[0]]
    assert ranked.tokens == count_tokens(ranked.block) <= budget


def test_mmr_drops_near_duplicates_and_keeps_order_of_distinct_items():
    items = [
        Item(1.0, "deploy the payment service to production with a canary"),
        Item(0.99, "deploy the payment service to production with a canary rollout"),
        Item(0.95, "deploy the payment service to production with canary"),
        Item(0.7, "rotate the database credentials in the vault"),
        Item(0.6, "write the quarterly report on agent accuracy"),
    ]
    chosen = mmr_select(items, k=5)
    texts = [items[i].text for i in chosen]
    assert texts[0] == items[0].text
    for a in range(len(texts)):
        for b in range(a + 1, len(texts)):
            assert jaccard(texts[a], texts[b]) < 0.8
    assert items[3].text in texts and items[4].text in texts


def test_mmr_prefers_diverse_items_by_embedding():
    e1, e2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    items = [Item(1.0, "a one", e1), Item(0.95, "b two", e1 * 0.99 + e2 * 0.01), Item(0.8, "c three", e2)]
    assert mmr_select(items, k=2) == [0, 2]


def test_budget_is_never_exceeded_and_profile_comes_first():
    profile = "## 当前 OKR 焦点\n- 把记忆检索延迟降到 100 ms 以下 (in_progress, 40%)"
    lines = [
        f"- [task · 2026-10-0{i % 9 + 1}] 修复认证失败问题 number {i}: " + "细节 " * 60 for i in range(40)
    ]
    for budget in (60, 200, 800):
        fitted = fit_to_budget(profile, lines, budget)
        assert count_tokens(fitted.block) == fitted.tokens <= budget
        assert fitted.block.startswith("## 当前 OKR 焦点")
    assert fit_to_budget(profile, lines, 800).included  # some items fit after the profile


def test_a_profile_over_the_budget_keeps_whole_goal_lines():
    """"recall@10 >= 0." cut from "recall@10 >= 0.8" says something else: whole lines or none."""
    profile = ("## 当前 OKR 焦点 (current OKRs)\n- Cross-lingual learning recall@10 >= 0.8 (in_progress, 50%)\n"
               "- 把记忆检索延迟降到 100 ms 以下 (pending, 0%)")
    goals = profile.splitlines()[1:]
    for budget in range(1, count_tokens(profile) + 1):
        fitted = fit_to_budget(profile, [], budget)
        assert fitted.tokens <= budget
        shown = fitted.profile.splitlines()
        assert fitted.block == fitted.profile and shown[1:] == goals[: max(len(shown) - 1, 0)]  # whole, in order
        assert (len(shown) != 1) and fitted.profile_included == bool(shown)  # never a heading alone
    assert fit_to_budget(profile, [], count_tokens(profile)).profile == profile
