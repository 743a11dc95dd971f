"""What a learned ranker sees of one candidate, and the ranker itself. Pure: no I/O.

`candidate_features` turns the candidates of one retrieval into compact dicts, written with every logged
candidate (`retrieval_candidates.features`, sql/009):

- `fused`: the hybrid search's score (the relevance the plain builder uses, neighbour lift included);
- `semantic` / `keyword`: each channel's calibrated score (`retrieval/*.calibrate_*`), null when the
  channel did not find the item; `keyword_evidence`: the keyword match against the corpus's strongest
  one-term match (`hits.Hit.keyword_evidence`);
- `rank_semantic` / `rank_keyword`: the item's 1-based rank within its retrieval by that channel's score
  (ranked before the relevance floor, so a config's floor does not move them), null when absent;
- `neighbour_gain`: the lift a neighbouring strong hit gave it (`retrieval/neighbours.py`), 0 if none;
- `date_prior`: the factor search's date prior gave it (`retrieval/dates.py`), 1 if none;
- `same_language`: the query and the item are in the same language (`text.language`);
- `source`, `age_days`: what decay and mode weights read (kept for analysis; the ranker does not use them).

`Ranker` is a logistic model over `RANKER_INPUTS` (standardised), stored in a scoring config's
`params["ranker"]`. When the active config has one, the builder's relevance is its probability that the item
is used; decay and the mode and source weights still multiply it (`scoring.py`). The tuner
(`tuning/ranker.py`) fits it from the same dicts, so online and offline compute the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ..infra.errors import ValidationError
from ..text.language import language


class Retrieved(Protocol):
    source: str
    text: str
    created_at: datetime | None
    relevance: float
    semantic: float | None
    keyword: float | None
    keyword_evidence: float | None
    extra: dict[str, Any]


def _ranks(values: Sequence[float | None]) -> list[int | None]:
    """1-based rank of each present value, highest first (ties keep retrieval order); None stays None."""
    present = sorted((i for i, v in enumerate(values) if v is not None), key=lambda i: -values[i])  # type: ignore[operator]
    out: list[int | None] = [None] * len(values)
    for rank, i in enumerate(present, start=1):
        out[i] = rank
    return out


def candidate_features(candidates: Sequence[Retrieved], query_language: str, now: datetime) -> list[dict[str, Any]]:
    """The features of each candidate of one retrieval (same order). `query_language` is
    `text.language.language(query)`; ages are measured from `now` (the build's moment)."""
    rank_sem = _ranks([c.semantic for c in candidates])
    rank_kw = _ranks([c.keyword for c in candidates])
    out = []
    for c, rs, rk in zip(candidates, rank_sem, rank_kw, strict=True):
        gain = c.extra.get("neighbour_gain") if c.extra else None
        prior = c.extra.get("date_prior") if c.extra else None
        out.append(
            {
                "fused": float(c.relevance),
                "semantic": None if c.semantic is None else float(c.semantic),
                "keyword": None if c.keyword is None else float(c.keyword),
                "keyword_evidence": None if c.keyword_evidence is None else float(c.keyword_evidence),
                "rank_semantic": rs,
                "rank_keyword": rk,
                "neighbour_gain": float(gain or 0.0),
                "date_prior": float(prior or 1.0),
                "same_language": language(c.text) == query_language,
                "source": c.source,
                "age_days": (now - c.created_at).total_seconds() / 86400 if c.created_at else None,
            }
        )
    return out


def _num(v: Any) -> float:
    return 0.0 if v is None else float(v)


def _recip(rank: Any) -> float:
    return 1.0 / float(rank) if rank else 0.0


# The ranker's inputs, each a function of one feature dict. A stored ranker names the inputs it was fitted on,
# so adding one here never changes a published ranker. Missing channels read 0 (the calibrated floor), and
# the reciprocal ranks are 0 then too, which is how the model tells "absent" from "weak".
RANKER_INPUTS: dict[str, Any] = {
    "fused": lambda f: _num(f.get("fused")),
    "semantic": lambda f: _num(f.get("semantic")),
    "keyword": lambda f: _num(f.get("keyword")),
    "keyword_evidence": lambda f: math.log1p(max(_num(f.get("keyword_evidence")), 0.0)),
    "rr_semantic": lambda f: _recip(f.get("rank_semantic")),
    "rr_keyword": lambda f: _recip(f.get("rank_keyword")),
    "neighbour_gain": lambda f: _num(f.get("neighbour_gain")),
    "same_language": lambda f: 1.0 if f.get("same_language") else 0.0,
}
DEFAULT_INPUTS: tuple[str, ...] = tuple(RANKER_INPUTS)


def ranker_inputs(features: Mapping[str, Any], names: Sequence[str] = DEFAULT_INPUTS) -> list[float]:
    """The named inputs of one candidate's feature dict."""
    return [RANKER_INPUTS[n](features) for n in names]


@dataclass(frozen=True)
class Ranker:
    """P(used) = sigmoid(intercept + Σ coef · (input − mean) / scale), over the named inputs."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    fitted_on: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        n = len(self.features)
        if not n or not (len(self.mean) == len(self.scale) == len(self.coef) == n):
            raise ValidationError("ranker", "features, mean, scale and coef must be non-empty and of one length")
        unknown = [f for f in self.features if f not in RANKER_INPUTS]
        if unknown:
            raise ValidationError("ranker", f"unknown inputs {unknown}; known: {list(RANKER_INPUTS)}")
        values = (*self.mean, *self.scale, *self.coef, self.intercept)
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            raise ValidationError("ranker", "mean, scale, coef and intercept must be finite numbers")
        if any(s <= 0 for s in self.scale):
            raise ValidationError("ranker", "every scale must be positive")

    @classmethod
    def from_params(cls, p: Mapping[str, Any]) -> Ranker:
        """A ranker as stored in `params["ranker"]`."""
        try:
            return cls(
                features=tuple(p["features"]),
                mean=tuple(float(v) for v in p["mean"]),
                scale=tuple(float(v) for v in p["scale"]),
                coef=tuple(float(v) for v in p["coef"]),
                intercept=float(p["intercept"]),
                fitted_on=dict(p.get("fitted_on") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError("ranker", f"malformed ranker parameters ({exc!r})") from exc

    def params(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "mean": list(self.mean),
            "scale": list(self.scale),
            "coef": list(self.coef),
            "intercept": self.intercept,
            "fitted_on": dict(self.fitted_on),
        }

    def logit(self, features: Mapping[str, Any]) -> float:
        x = ranker_inputs(features, self.features)
        return self.intercept + sum(
            c * (v - m) / s for v, m, s, c in zip(x, self.mean, self.scale, self.coef, strict=True)
        )

    def probability(self, features: Mapping[str, Any]) -> float:
        """The ranker's P(used) for one candidate's feature dict."""
        z = self.logit(features)
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
