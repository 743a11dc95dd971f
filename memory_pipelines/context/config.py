"""Versioned scoring configs: read the active one, add a version, activate (or roll back to) one, restore the
active one of an export (`scoring_configs.json`) into another store."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ..infra.db import reading
from ..infra.errors import NotFoundError, ValidationError
from ..vocabulary import CONTEXT_MODES, SOURCES
from .scoring import ScoringConfig


def active_config(pool: ConnectionPool) -> ScoringConfig:
    """The active scoring config (the spec's defaults if none is active)."""
    with reading(pool) as conn:
        row = conn.execute(
            "SELECT version, half_lives, mode_weights, params FROM scoring_configs WHERE is_active"
        ).fetchone()
    return ScoringConfig.from_row(*row) if row else ScoringConfig()


def add_config(
    pool: ConnectionPool,
    config: ScoringConfig,
    *,
    fitted_on: dict[str, Any] | None = None,
    evaluation: dict[str, Any] | None = None,
    note: str | None = None,
) -> int:
    """Store a new (inactive) version; returns its number."""
    with pool.connection() as conn:
        row = conn.execute(
            "INSERT INTO scoring_configs (half_lives, mode_weights, params, fitted_on, evaluation, note)"
            " VALUES (%s, %s, %s, %s, %s, %s) RETURNING version",
            (
                Jsonb(config.half_lives),
                Jsonb(config.mode_weights),
                Jsonb(config.params()),
                Jsonb(fitted_on or {}),
                Jsonb(evaluation or {}),
                note,
            ),
        ).fetchone()
    return int(row[0])


def activate(pool: ConnectionPool, version: int) -> None:
    """Make `version` the active config (the next build uses it); also how a rollback is done.

    Activations take turns (a lock that conflicts with itself, not with the builds' reads): each then sees the
    version the one before it activated, so two at once never both stay active."""
    with pool.connection() as conn, conn.transaction():
        conn.execute("LOCK TABLE scoring_configs IN SHARE ROW EXCLUSIVE MODE")
        if conn.execute("SELECT 1 FROM scoring_configs WHERE version = %s", (version,)).fetchone() is None:
            raise NotFoundError(f"scoring config version {version} does not exist")
        conn.execute(
            "UPDATE scoring_configs SET is_active = false WHERE is_active AND version <> %s", (version,)
        )
        conn.execute(
            "UPDATE scoring_configs SET is_active = true, activated_at = now() WHERE version = %s", (version,)
        )


def list_configs(pool: ConnectionPool) -> list[dict[str, Any]]:
    """Every version, newest first."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT version, is_active, note, created_at, activated_at, evaluation FROM scoring_configs"
            " ORDER BY version DESC"
        ).fetchall()
    keys = ("version", "is_active", "note", "created_at", "activated_at", "evaluation")
    return [dict(zip(keys, r, strict=True)) for r in rows]


def _number(field: str, value: Any, *, nullable: bool = False, lo: float = 0.0, hi: float = math.inf,
            zero: bool = False) -> None:
    """`value` a finite number in (lo, hi] (in [lo, hi] with `zero`), or null when `nullable`."""
    if value is None and nullable:
        return
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or not (lo <= value if zero else lo < value) or value > hi):
        what = "a positive number" if lo == 0 and not zero and hi == math.inf else f"a number from {lo} to {hi}"
        raise ValidationError(field, f"must be {what}{' or null' if nullable else ''}, not {value!r}")


def _check_params(params: dict[str, Any]) -> None:
    """The fields of an exported config's `params` that scoring reads: relevance floors per channel (0 to 1), the
    decay floor (0 to 1), the weight bounds ([lo, hi], 0 <= lo <= hi) and a weight per source (positive);
    a bad one would make every context build fail once the config is active."""
    floors = params.get("relevance_floors") or {}
    if not isinstance(floors, dict):
        raise ValidationError("params.relevance_floors", "must be a JSON object of channel floors")
    for channel, floor in floors.items():
        _number(f"params.relevance_floors.{channel}", floor, hi=1.0, zero=True)
    if "decay_floor" in params:
        _number("params.decay_floor", params["decay_floor"], hi=1.0, zero=True)
    bounds = params.get("weight_bounds")
    if bounds is not None:
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise ValidationError("params.weight_bounds", f"must be [low, high], not {bounds!r}")
        for k, bound in enumerate(bounds):
            _number(f"params.weight_bounds[{k}]", bound, zero=True)
        if bounds[0] > bounds[1]:
            raise ValidationError("params.weight_bounds", f"must be [low, high] with low <= high, not {bounds!r}")
    weights = params.get("source_weights") or {}
    if not isinstance(weights, dict):
        raise ValidationError("params.source_weights", "must be a JSON object of a weight per source")
    for source, weight in weights.items():
        if source not in SOURCES:
            raise ValidationError(f"params.source_weights.{source}", "is not a source")
        _number(f"params.source_weights.{source}", weight)


def _missing(field: str, named: dict[str, Any], wanted: tuple[str, ...], what: str) -> None:
    """Refuse `named` (ValidationError on `field`) when it leaves out some of `wanted`, listing them."""
    if missing := [w for w in wanted if w not in named]:
        raise ValidationError(field, f"names no {what} for {', '.join(missing)}: the config must give every one")


def _check_every_source(half_lives: dict[str, Any], weights: dict[str, Any]) -> None:
    """Every source has a half-life (null: no decay) and a weight per mode: scoring would silently give one left
    out no decay and weight 1, not what the exporting store used (every stored config names them all)."""
    _missing("half_lives", half_lives, tuple(SOURCES), "half-life (null: no decay)")
    _missing("mode_weights", weights, tuple(SOURCES), "mode weights")
    for source, modes in weights.items():
        _missing(f"mode_weights.{source}", modes, CONTEXT_MODES, "weight")


def exported_active(path: Path) -> dict[str, Any]:
    """The active entry of an export's `scoring_configs.json`, its fields checked (ValidationError names one)."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationError(str(path), f"is not a readable scoring_configs.json: {exc}") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValidationError(str(path), "must be a JSON list of config versions, as `export` writes it")
    active = [e for e in entries if e.get("is_active") is True]
    if len(active) != 1:
        raise ValidationError("is_active", f"{len(active)} versions are marked active in {path}; expected 1")
    entry = active[0]
    half_lives, weights = entry.get("half_lives"), entry.get("mode_weights")
    if not isinstance(half_lives, dict) or not isinstance(weights, dict):
        raise ValidationError("half_lives", "and mode_weights must be JSON objects")
    for source, days in half_lives.items():
        if source not in SOURCES:
            raise ValidationError(f"half_lives.{source}", "is not a source")
        _number(f"half_lives.{source}", days, nullable=True)
    for source, modes in weights.items():
        if source not in SOURCES or not isinstance(modes, dict):
            raise ValidationError(f"mode_weights.{source}", "is not a source with an object of mode weights")
        for mode, weight in modes.items():
            if mode not in CONTEXT_MODES:
                raise ValidationError(f"mode_weights.{source}.{mode}", f"is not a mode ({', '.join(CONTEXT_MODES)})")
            _number(f"mode_weights.{source}.{mode}", weight)
    if not isinstance(entry.get("params") or {}, dict):
        raise ValidationError("params", "must be a JSON object")
    _check_params(entry.get("params") or {})
    _check_every_source(half_lives, weights)
    return entry


def restore_active(pool: ConnectionPool, path: Path) -> tuple[int, bool]:
    """Make the active config of an export's `scoring_configs.json` active here: a stored version with the same
    half-lives, mode weights and params is activated again, else it is added first (version numbers differ
    between stores). Returns (the active version, whether it was added)."""
    entry = exported_active(path)
    try:
        config = ScoringConfig.from_row(0, entry["half_lives"], entry["mode_weights"], entry.get("params"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationError("params", f"cannot be read as a scoring config: {exc}") from None
    wanted = (config.half_lives, config.mode_weights, config.params())
    with reading(pool) as conn:
        rows = conn.execute("SELECT version, half_lives, mode_weights, params FROM scoring_configs"
                            " ORDER BY version DESC").fetchall()
    for row in rows:
        stored = ScoringConfig.from_row(*row)
        if (stored.half_lives, stored.mode_weights, stored.params()) == wanted:
            activate(pool, stored.version)
            return stored.version, False
    version = add_config(pool, config, fitted_on=entry.get("fitted_on") or {},
                         evaluation=entry.get("evaluation") or {},
                         note=f"restored from {path.name} (version {entry.get('version')} there)")
    activate(pool, version)
    return version, True
