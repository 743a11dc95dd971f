"""Pure scoring, MMR and budget (the context-builder spec: acceptance figures)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from memory_pipelines.context.budget import fit_to_budget
from memory_pipelines.context.mmr import mmr_select
from memory_pipelines.context.scoring import ScoringConfig, time_decay
from memory_pipelines.text.keywords import jaccard
from memory_pipelines.text.tokens import count_tokens


def test_task_decay_halves_every_30_days():
    config = ScoringConfig()
    assert config.decay("task", 30) == pytest.approx(0.5, abs=1e-9)
    assert config.decay("task", 90) == pytest.approx(0.125, abs=1e-9)
    assert config.decay("learning", 90) == pytest.approx(0.5, abs=1e-9)
    assert config.decay("event", 1) == pytest.approx(0.5, abs=1e-9)


def test_capabilities_goals_and_memories_do_not_decay():
    config = ScoringConfig()
    for source in ("capability", "okr", "memory"):
        assert config.decay(source, 365) == 1.0
    assert time_decay(None, 30) == 1.0


def test_mode_weights_are_the_seed_table():
    config = ScoringConfig()
    assert config.weight("okr", "plan") == 1.5 and config.weight("event", "debug") == 1.5
    assert config.weight("learning", "chat") == 0.6 and config.weight("task", "execute") == 1.2


@dataclass
class Item:
    score: float
    text: str
    embedding: np.ndarray | None = None


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
