"""The retrieval log as pandas frames: one row per build, one row per scored candidate.

The tuner aggregates over every owner by default (the scoring config is global); it returns parameters and
aggregate metrics only, never another owner's rows. Pass `owners` to restrict it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from psycopg_pool import ConnectionPool

from ..infra.errors import ValidationError
from ..operations.retention import MAX_AGE

BUILD_COLUMNS = (
    "retrieval_id",
    "owner_id",
    "mode",
    "token_budget",
    "token_used",
    "candidates_count",
    "injected_count",
    "config_version",
    "degraded",
    "randomized",
    "as_of",
    "created_at",
    "feedback_at",
)
CANDIDATE_COLUMNS = (
    "retrieval_id",
    "owner_id",
    "source",
    "item_id",
    "relevance",
    "age_days",
    "mode",
    "decay",
    "mode_weight",
    "score",
    "rank",
    "mmr_rank",
    "tokens",
    "injected",
    "used",
)
FEATURES = "features"
"""The candidates frame's last column: each candidate's logged feature dict (sql/009; None before it)."""


@dataclass
class LogFrames:
    """Builds (one row per retrieval) and their candidates."""

    builds: pd.DataFrame
    candidates: pd.DataFrame

    @property
    def n_builds(self) -> int:
        return len(self.builds)


def check_since(field: str, since_days: float | None) -> None:
    """A look back of more than 0 days and at most retention's longest age (a century): beyond it (or NaN,
    inf) no date PostgreSQL or Python can subtract."""
    if since_days is not None and not 0 < since_days <= MAX_AGE.days:
        raise ValidationError(field, f"must be a number of days above 0, at most {MAX_AGE.days:,}")


def empty_builds() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in BUILD_COLUMNS})


def empty_candidates() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in (*CANDIDATE_COLUMNS, FEATURES)})


def load_log(
    pool: ConnectionPool,
    *,
    since_days: float | None = None,
    owners: Sequence[str] | None = None,
    require_feedback: bool = True,
) -> LogFrames:
    """Load builds (and their candidates) created in the last `since_days` days; each candidate with its
    logged `features` dict (None for builds logged before sql/009), which the learned ranker fits on.

    `require_feedback` keeps only builds whose feedback was recorded (`feedback_at` set): without it a build's
    `used` flags are all false because nobody said, not because nothing was used.
    """
    check_since("since_days", since_days)
    where = ["TRUE"]
    params: dict[str, object] = {}
    if since_days is not None:
        where.append("r.created_at >= now() - make_interval(secs => %(secs)s)")
        params["secs"] = float(since_days) * 86400
    if owners is not None:
        where.append("r.owner_id = ANY(%(owners)s)")
        params["owners"] = list(owners)
    if require_feedback:
        where.append("r.feedback_at IS NOT NULL")
    cond = " AND ".join(where)
    with pool.connection() as conn:
        brows = conn.execute(
            "SELECT r.id::text, r.owner_id, r.mode, r.token_budget, r.token_used, r.candidates_count,"
            " r.injected_count, r.config_version, r.degraded, r.randomized, r.as_of, r.created_at,"
            " r.feedback_at"
            f" FROM retrievals r WHERE {cond} ORDER BY r.created_at, r.id",
            params,
        ).fetchall()
        crows = conn.execute(
            "SELECT c.retrieval_id::text, c.owner_id, c.source, c.item_id, c.relevance, c.age_days, c.mode,"
            " c.decay, c.mode_weight, c.score, c.rank, c.mmr_rank, c.tokens, c.injected, c.used, c.features"
            " FROM retrieval_candidates c"
            " JOIN retrievals r ON r.id = c.retrieval_id AND r.owner_id = c.owner_id"
            f" WHERE {cond} ORDER BY c.retrieval_id, c.rank",
            params,
        ).fetchall()
    builds = pd.DataFrame(brows, columns=list(BUILD_COLUMNS)) if brows else empty_builds()
    cands = pd.DataFrame(crows, columns=[*CANDIDATE_COLUMNS, FEATURES]) if crows else empty_candidates()
    return LogFrames(normalize_builds(builds), normalize_candidates(cands))


def normalize_builds(builds: pd.DataFrame) -> pd.DataFrame:
    """Types the tuner relies on (timestamps UTC, booleans)."""
    out = builds.copy()
    for col in ("as_of", "created_at", "feedback_at"):
        if col in out:
            out[col] = pd.to_datetime(out[col], utc=True)
    if "randomized" in out:
        out["randomized"] = out["randomized"].fillna(False).astype(bool)
    return out.reset_index(drop=True)


def normalize_candidates(cands: pd.DataFrame) -> pd.DataFrame:
    """Numeric columns as floats (age NaN when unknown), flags as booleans."""
    out = cands.copy()
    for col in ("relevance", "age_days", "decay", "mode_weight", "score", "tokens", "mmr_rank", "rank"):
        if col in out:
            out[col] = pd.to_numeric(out[col], errors="coerce").astype(float)
    for col in ("injected", "used"):
        if col in out:
            out[col] = out[col].fillna(False).astype(bool)
    return out.reset_index(drop=True)


def time_split(
    builds: pd.DataFrame, holdout_fraction: float = 0.3, *, column: str = "created_at"
) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks over `builds` (train, test): the latest `holdout_fraction` of builds by `column` is test.

    Ties are broken by retrieval id so the split is deterministic.
    """
    if not 0 < holdout_fraction < 1:
        raise ValidationError("holdout_fraction", "must be between 0 and 1 (exclusive)")
    n = len(builds)
    order = np.lexsort((builds["retrieval_id"].astype(str).to_numpy(), builds[column].to_numpy()))
    n_test = int(round(n * holdout_fraction))
    test = np.zeros(n, dtype=bool)
    if n_test:
        test[order[n - n_test :]] = True
    return ~test, test


def select(
    frames_builds: pd.DataFrame, candidates: pd.DataFrame, mask: np.ndarray | pd.Series
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The builds under a boolean mask (aligned with `frames_builds`) and their candidates."""
    m = np.asarray(mask, dtype=bool)
    if len(m) != len(frames_builds):
        raise ValidationError("mask", f"has {len(m)} entries for {len(frames_builds)} builds")
    b = frames_builds[m]
    c = candidates[candidates["retrieval_id"].isin(set(b["retrieval_id"]))]
    return b.reset_index(drop=True), c.reset_index(drop=True)


def labelled(candidates: pd.DataFrame, population: str = "auto") -> pd.DataFrame:
    """The candidates whose `used` flag carries information.

    Feedback only marks injected items, so a candidate that was never shown cannot have been used: fitting or
    scoring on it would teach the tuner the active config's own choices. `population`:
    "injected" keeps injected candidates, "all" keeps all, "auto" keeps all when some non-injected candidate
    is marked used (labels from an oracle, as in the LoCoMo replay) and injected ones otherwise.
    """
    if population not in ("auto", "injected", "all"):
        raise ValidationError("population", "must be auto, injected or all")
    if population == "auto":
        population = "all" if bool((candidates["used"] & ~candidates["injected"]).any()) else "injected"
    return candidates if population == "all" else candidates[candidates["injected"]]


def resolved_population(candidates: pd.DataFrame, population: str = "auto") -> str:
    """What "auto" resolves to for these candidates."""
    if population != "auto":
        return population
    return "all" if bool((candidates["used"] & ~candidates["injected"]).any()) else "injected"
