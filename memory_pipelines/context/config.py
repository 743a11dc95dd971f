"""Versioned scoring configs: read the active one, add a version, activate (or roll back to) one."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ..infra.db import reading
from ..infra.errors import NotFoundError
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
    """Make `version` the active config (the next build uses it); also how a rollback is done."""
    with pool.connection() as conn, conn.transaction():
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
