"""Pure scoring: score = relevance × bounded decay × bounded weight, after a relevance floor.

The context-builder spec's `relevance × timeDecay(halfLife[source]) × modeWeight[source][mode]`, bounded so that
recency and mode weights reorder relevant items but never bury them:

- **floor**: a candidate enters when one of its channels clears that channel's floor on the calibrated
  scale of search (`retrieval/*.calibrate_*`: 0 is the model's floor for unrelated texts of the language
  pair; keyword BM25 saturated), when it is a conversation turn lifted by an adjacent top hit, when two signals
  agree (both channels above their zero, or one of them and the time the question names), or when search ranks
  it at least as high as a candidate that enters (`ranked_floor`). An empty slot is better than noise, and
  noise is what ranks below everything relevant: the floor trims the tail of search's ranking, never its middle.
- **decay** = decay_floor + (1 − decay_floor) · exp(−age · ln 2 / half-life): an item keeps at least 80 % of its
  score however old it is.
- **weight** = mode weight × source weight, clamped to `weight_bounds` (0.8 – 1.25, symmetric in ratio).
- **relevance**: the fused search score, or, when the config has a learned `ranker` (`params["ranker"]`,
  fitted and published by the tuner), the ranker's probability that the item is used, computed from the
  candidate's logged features (`features.py`). Decay and weight multiply it just the same.

So one item can outscore another of higher relevance by at most hi / (lo · decay_floor) (1.95× with the defaults:
recency and mode reorder items of comparable relevance; they do not lift a loosely related item over the one
asked for: tests/test_context_relevance.py, docs/retrieval-quality.md).
The offline tuner (memory_pipelines.tuning) uses these same functions, so online and offline agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ..vocabulary import seed_half_lives, seed_mode_weights
from .features import Ranker

SEED_HALF_LIVES: dict[str, float | None] = seed_half_lives()
SEED_MODE_WEIGHTS: dict[str, dict[str, float]] = seed_mode_weights()

# Floors on the calibrated channel scores (retrieval calibrate_semantic / calibrate_keyword), chosen from what the
# calibration means and checked on three sets, not fitted to one (docs/retrieval-quality.md). The keyword floor
# reads the match's evidence (BM25 over the corpus's strongest one-term match, hits.Hit.keyword_evidence), so
# it means the same in a corpus of 2 documents or of 100,000.
RELEVANCE_FLOORS: dict[str, float] = {"semantic": 0.30, "keyword": 0.25}
DECAY_FLOOR = 0.8
PROFILE_SOURCES = ("okr",)  # the profile is injected first whatever its score: no ranker applies to it
WEIGHT_BOUNDS: tuple[float, float] = (0.8, 1.25)


def time_decay(age_days: float | None, half_life_days: float | None) -> float:
    """exp(-age × ln 2 / half-life); 1 when there is no half-life (no decay) or no age."""
    if half_life_days is None or age_days is None or math.isinf(half_life_days) or half_life_days <= 0:
        return 1.0
    return math.exp(-max(age_days, 0.0) * math.log(2) / half_life_days)


@dataclass(frozen=True)
class ScoringConfig:
    """Half-lives (days, None = no decay), mode weights and the bounds of the score; one version is active
    in the database (`params` holds the fields beyond half-lives and mode weights). `ranker`, when set,
    replaces the fused search score as the relevance (`relevance`)."""

    version: int = 1
    half_lives: dict[str, float | None] = field(default_factory=lambda: dict(SEED_HALF_LIVES))
    mode_weights: dict[str, dict[str, float]] = field(
        default_factory=lambda: {k: dict(v) for k, v in SEED_MODE_WEIGHTS.items()}
    )
    relevance_floors: dict[str, float] = field(default_factory=lambda: dict(RELEVANCE_FLOORS))
    decay_floor: float = DECAY_FLOOR
    weight_bounds: tuple[float, float] = WEIGHT_BOUNDS
    source_weights: dict[str, float] = field(default_factory=dict)
    ranker: Ranker | None = None

    def relevance(self, source: str, fused: float, features: Mapping[str, Any] | None) -> float:
        """The relevance a score multiplies: the ranker's probability when the config has a ranker and the
        candidate has features (the profile keeps its own), else the fused search score."""
        if self.ranker is None or features is None or source in PROFILE_SOURCES:
            return fused
        return self.ranker.probability(features)

    def decay(self, source: str, age_days: float | None) -> float:
        """The decay factor: decay_floor + (1 − decay_floor) × exponential decay."""
        return self.decay_floor + (1.0 - self.decay_floor) * time_decay(age_days, self.half_lives.get(source))

    def weight(self, source: str, mode: str) -> float:
        """Mode weight × source weight, clamped to `weight_bounds`."""
        raw = float(self.mode_weights.get(source, {}).get(mode, 1.0)) * float(self.source_weights.get(source, 1.0))
        lo, hi = self.weight_bounds
        return min(max(raw, lo), hi)

    def passes_floor(self, semantic: float | None, keyword: float | None, lifted: bool = False) -> bool:
        """Whether a candidate clears the relevance floor: any channel at or above its floor, or it is a
        conversation turn lifted by an adjacent top hit (`retrieval/neighbours.py`): the other party's side of
        a relevant exchange ("what did she answer?") rarely shares its words or meaning with the question."""
        channels = (("semantic", semantic), ("keyword", keyword))
        return lifted or any(v is not None and v >= self.relevance_floors.get(name, 0.0) for name, v in channels)

    def admits(
        self, semantic: float | None, keyword: float | None, keyword_evidence: float | None, neighbour_gain: float,
        dated: bool = False,
    ) -> bool:
        """`passes_floor` for a retrieved candidate: the keyword channel is judged by its evidence when search
        reports one (Jaccard matches have none), and any neighbour lift counts as lifted. A candidate both channels
        found, each above its zero, passes too: their agreement is the evidence where either alone is weak; and
        so does one of the time the question names (`dated`: search's date prior) that either channel puts above
        its zero: the time and the channel agree."""
        found = (semantic or 0.0) > 0, (keyword_evidence or 0.0) > 0
        agreed = all(found) or (dated and any(found))
        return agreed or self.passes_floor(
            semantic, keyword if keyword_evidence is None else keyword_evidence, lifted=neighbour_gain > 0
        )

    def params(self) -> dict[str, Any]:
        """The fields stored in scoring_configs.params (JSON)."""
        out: dict[str, Any] = {
            "relevance_floors": dict(self.relevance_floors),
            "decay_floor": self.decay_floor,
            "weight_bounds": list(self.weight_bounds),
            "source_weights": dict(self.source_weights),
        }
        if self.ranker is not None:
            out["ranker"] = self.ranker.params()
        return out

    @classmethod
    def from_row(
        cls,
        version: int,
        half_lives: dict[str, Any],
        mode_weights: dict[str, Any],
        params: dict[str, Any] | None = None,
    ) -> ScoringConfig:
        """A stored version; fields missing from `params` (versions stored before it existed) take the defaults
        (no ranker: activating a version without one, a rollback, drops the ranker with it)."""
        p = params or {}
        return cls(
            version=version,
            half_lives=dict(half_lives),
            mode_weights={k: dict(v) for k, v in mode_weights.items()},
            relevance_floors={**RELEVANCE_FLOORS, **(p.get("relevance_floors") or {})},
            decay_floor=float(p.get("decay_floor", DECAY_FLOOR)),
            weight_bounds=tuple(p.get("weight_bounds") or WEIGHT_BOUNDS),  # type: ignore[arg-type]
            source_weights=dict(p.get("source_weights") or {}),
            ranker=Ranker.from_params(p["ranker"]) if p.get("ranker") else None,
        )


UNBOUNDED: dict[str, Any] = {"relevance_floors": {}, "decay_floor": 0.0, "weight_bounds": (0.0, 1e9)}
"""The seed's scoring: no floor, pure exponential decay, mode weights as they are (ScoringConfig(**UNBOUNDED))."""


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


class Channelled(Protocol):
    relevance: float
    semantic: float | None
    keyword: float | None
    keyword_evidence: float | None


T = TypeVar("T", bound=Channelled)


def ranked_floor(fused: Sequence[float], passes: Sequence[bool]) -> list[bool]:
    """Which candidates stay: those that clear the floor, and those search ranks at least as high (fused score at
    least that of the weakest candidate that clears it). Search's order decides what is relevant; the floor only
    says where relevance ends, so it trims the tail of the ranking and never takes an item out of its middle."""
    weakest = min((f for f, p in zip(fused, passes, strict=True) if p), default=math.inf)
    return [p or f >= weakest for f, p in zip(fused, passes, strict=True)]


def _admitted(c: Any, config: ScoringConfig) -> bool:
    """`config.admits` for a retrieved candidate, its lift and date prior read from search's `extra`."""
    extra = getattr(c, "extra", None) or {}
    return config.admits(c.semantic, c.keyword, c.keyword_evidence, float(extra.get("neighbour_gain", 0.0)),
                         float(extra.get("date_prior", 1.0)) > 1.0)


def apply_floor(candidates: Sequence[T], config: ScoringConfig) -> tuple[list[T], int]:
    """The candidates that stay under the relevance floor (`ranked_floor` on their fused relevance), and how many
    did not."""
    passes = [_admitted(c, config) for c in candidates]
    keep = ranked_floor([c.relevance for c in candidates], passes)
    kept = [c for c, k in zip(candidates, keep, strict=True) if k]
    return kept, len(candidates) - len(kept)
