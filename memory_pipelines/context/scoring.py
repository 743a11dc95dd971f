"""Pure scoring: score = relevance × timeDecay(half-life[source]) × modeWeight[source][mode].

The offline tuner (memory_pipelines.tuning) uses these same functions, so online and offline agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..vocabulary import seed_half_lives, seed_mode_weights

SEED_HALF_LIVES: dict[str, float | None] = seed_half_lives()
SEED_MODE_WEIGHTS: dict[str, dict[str, float]] = seed_mode_weights()


def time_decay(age_days: float | None, half_life_days: float | None) -> float:
    """exp(-age × ln 2 / half-life); 1 when there is no half-life (no decay) or no age."""
    if half_life_days is None or age_days is None or math.isinf(half_life_days) or half_life_days <= 0:
        return 1.0
    return math.exp(-max(age_days, 0.0) * math.log(2) / half_life_days)


@dataclass(frozen=True)
class ScoringConfig:
    """Half-lives (days, None = no decay) and mode weights; one version is active in the database."""

    version: int = 1
    half_lives: dict[str, float | None] = field(default_factory=lambda: dict(SEED_HALF_LIVES))
    mode_weights: dict[str, dict[str, float]] = field(
        default_factory=lambda: {k: dict(v) for k, v in SEED_MODE_WEIGHTS.items()}
    )

    def decay(self, source: str, age_days: float | None) -> float:
        return time_decay(age_days, self.half_lives.get(source))

    def weight(self, source: str, mode: str) -> float:
        return float(self.mode_weights.get(source, {}).get(mode, 1.0))

    @classmethod
    def from_row(
        cls, version: int, half_lives: dict[str, Any], mode_weights: dict[str, Any]
    ) -> ScoringConfig:
        return cls(
            version=version,
            half_lives=dict(half_lives),
            mode_weights={k: dict(v) for k, v in mode_weights.items()},
        )


@dataclass(frozen=True)
class Factors:
    """Each factor of one candidate's score."""

    relevance: float
    decay: float
    mode_weight: float

    @property
    def score(self) -> float:
        return self.relevance * self.decay * self.mode_weight


def factors(
    config: ScoringConfig, source: str, mode: str, relevance: float, age_days: float | None
) -> Factors:
    """The score factors of one candidate under one config."""
    return Factors(
        relevance=relevance, decay=config.decay(source, age_days), mode_weight=config.weight(source, mode)
    )
