"""Exploration: a small share of builds injected in a random order, so their labels are free of position bias.

Off by default. Feedback only labels what was shown, and what was shown (and where) was chosen by the
active config: a replay on such labels favours the active config. In a randomised build every candidate
has the same chance to be shown at each position, so its labels are independent of the active ranking and
the offline replay on those builds is unbiased (the evaluator reports them separately). The cost is a
worse context for that share of builds, hence a small rate (0.02–0.05) and only where the agent tolerates it.

The online builder (`context/builder.py`) uses it: with probability `explore_rate()` (or its `exploration`
argument) a build injects `exploration_order(...)` instead of the MMR order and is logged `randomized`.

This module imports no pandas, so the online builder can use it without the `dagster` extra.
"""

from __future__ import annotations

import os
import random

from ..infra.errors import ConfigError

EXPLORE_RATE_ENV = "MEMORY_PIPELINES_EXPLORE_RATE"
MAX_EXPLORE_RATE = 0.5


def explore_rate(env: dict[str, str] | None = None) -> float:
    """The share of builds to randomise, from MEMORY_PIPELINES_EXPLORE_RATE (default 0: off)."""
    raw = (env if env is not None else os.environ).get(EXPLORE_RATE_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        rate = float(raw)
    except ValueError:
        rate = -1.0
    if not 0.0 <= rate <= MAX_EXPLORE_RATE:
        raise ConfigError(
            f"{EXPLORE_RATE_ENV}={raw!r} is not a share from 0 to {MAX_EXPLORE_RATE}. "
            f"Fix: set it to e.g. 0.02, or unset it to turn exploration off."
        )
    return rate


def should_explore(rate: float, rng: random.Random | None = None) -> bool:
    """Whether this build is an exploration build."""
    return rate > 0 and (rng or random).random() < rate


def exploration_order(n: int, rng: random.Random | None = None) -> list[int]:
    """A uniformly random order of n candidates (indices), to inject instead of the MMR order."""
    order = list(range(n))
    (rng or random).shuffle(order)
    return order
