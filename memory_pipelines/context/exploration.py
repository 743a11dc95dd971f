"""Exploration: a small share of builds injected in a random order, so their labels are free of position bias.

Off by default. Feedback only labels what was shown, and what was shown (and where) was chosen by the
active config: a replay on such labels favours the active config. In a randomised build every candidate
has the same chance to be shown at each position, so its labels are independent of the active ranking and
the offline replay on those builds is unbiased (the evaluator reports them separately). The cost is a
worse context for that share of builds, hence a small rate (0.02–0.05) and only where the agent tolerates it.

The builder (`builder.py`) takes the rate as its `exploration` argument; `Memory.context` passes
`Settings.explore_rate` (MEMORY_PIPELINES_EXPLORE_RATE). A build with probability `rate` injects
`exploration_order(...)` instead of the MMR order and is logged `randomized`.
"""

from __future__ import annotations

import os
import random

from ..infra.settings import EXPLORE_RATE_ENV, parse_explore_rate


def explore_rate(env: dict[str, str] | None = None) -> float:
    """The share of builds to randomise, from MEMORY_PIPELINES_EXPLORE_RATE (default 0: off)."""
    return parse_explore_rate((env if env is not None else os.environ).get(EXPLORE_RATE_ENV, ""))


def should_explore(rate: float, rng: random.Random | None = None) -> bool:
    """Whether this build is an exploration build."""
    return rate > 0 and (rng or random).random() < rate


def exploration_order(n: int, rng: random.Random | None = None) -> list[int]:
    """A uniformly random order of n candidates (indices), to inject instead of the MMR order."""
    order = list(range(n))
    (rng or random).shuffle(order)
    return order
