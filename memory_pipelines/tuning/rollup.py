"""The tuner's hit-rate report over the whole log: the live candidates' table (`report.hit_rate_table`) plus the
daily roll-up of the candidates retention pruned (`operations.retention.rolled_up_counts`), so the report reads the
same before and after a prune. (The fits need each candidate's features: they read the live log only.)"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
from psycopg_pool import ConnectionPool

from ..operations.retention import rolled_up_counts
from .report import AGE_LABELS, MODES, NO_AGE, SOURCES, _wilson

COUNTS = ("candidates", "injected", "labelled", "used")
KEYS = ["source", "mode", "age_bucket"]


def rolled_up(pool: ConnectionPool, *, since_days: float | None = None,
              owners: Sequence[str] | None = None) -> list[tuple]:
    """The roll-up's counts per (source, mode, age bucket) over the last `since_days` days (all when None)."""
    since = datetime.now(UTC) - timedelta(days=since_days) if since_days is not None else None
    with pool.connection() as conn:
        return rolled_up_counts(conn, since=since, owners=list(owners) if owners is not None else None)


def with_rolled_up(table: pd.DataFrame, rolled: Sequence[tuple], population: str) -> pd.DataFrame:
    """`table` (a `hit_rate_table`) with the rolled-up counts added, for the same population: 'injected' labels
    the injected candidates, 'all' every candidate ('auto': 'all' when some candidate not injected was used)."""
    if not rolled:
        return table
    frame = pd.DataFrame(list(rolled), columns=[*KEYS, "c", "i", "u", "ui"])
    if population == "auto":
        population = "all" if bool((frame["u"] > frame["ui"]).any()) else "injected"
    injected = population == "injected"
    extra = pd.DataFrame({
        **{k: frame[k] for k in KEYS},
        "candidates": frame["c"], "injected": frame["i"],
        "labelled": frame["i"] if injected else frame["c"], "used": frame["ui"] if injected else frame["u"],
    })
    both = pd.concat([table[[*KEYS, *COUNTS]], extra], ignore_index=True)
    t = both.groupby(KEYS, as_index=False)[list(COUNTS)].sum()
    t[list(COUNTS)] = t[list(COUNTS)].astype(int)
    t["hit_rate"] = np.where(t["labelled"] > 0, t["used"] / t["labelled"].where(t["labelled"] > 0, 1), np.nan)
    t["ci_low"], t["ci_high"] = _wilson(t["used"].to_numpy(float), t["labelled"].to_numpy(float))
    order = {label: i for i, label in enumerate((*AGE_LABELS, NO_AGE))}
    t["_s"] = t["source"].map(lambda s: SOURCES.index(s) if s in SOURCES else 99)
    t["_m"] = t["mode"].map(lambda m: MODES.index(m) if m in MODES else 99)
    t["_a"] = t["age_bucket"].map(lambda a: order.get(a, 99))
    return t.sort_values(["_s", "_m", "_a"]).drop(columns=["_s", "_m", "_a"]).reset_index(drop=True)[table.columns]
