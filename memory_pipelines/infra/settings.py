"""Settings from the environment; every surface reads them through `get_settings()`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

HOME_ENV = "MEMORY_PIPELINES_HOME"
"""The folder of the embedded server's data, logs and the Dagster instance (default ./.memory_pipelines)."""
EXPLORE_RATE_ENV = "MEMORY_PIPELINES_EXPLORE_RATE"
MAX_EXPLORE_RATE = 0.5
STOP_WAIT_ENV = "MEMORY_PIPELINES_STOP_WAIT"
DEFAULT_STOP_WAIT = 20.0
"""Seconds an exit waits for the embedding worker's pass: under a 30 s kill grace (Kubernetes' default) with the
database's own stop after it."""


def parse_explore_rate(raw: str) -> float:
    """The share of context builds to randomise (empty: 0, off); a ConfigError outside [0, 0.5]."""
    raw = raw.strip()
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


def parse_stop_wait(raw: str) -> float:
    """Seconds an exiting server waits for the embedding worker (empty: the default); a ConfigError unless 0-600."""
    raw = raw.strip()
    if not raw:
        return DEFAULT_STOP_WAIT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0.0 <= seconds <= 600.0:
        raise ConfigError(f"{STOP_WAIT_ENV}={raw!r} is not a number of seconds from 0 to 600. "
                          f"Fix: set it to e.g. 20, or unset it for {DEFAULT_STOP_WAIT:g}.")
    return seconds


def _number(env: dict[str, str], name: str, kind: type, default: float | None, least: float, what: str) -> Any:
    """A numeric variable (unset or empty: `default`); a ConfigError naming it unless a `kind` ≥ `least`."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or value < least or value != value:  # NaN compares false: refused too
        raise ConfigError(f"{name}={raw!r} is not {what}. "
                          f"Fix: set it to e.g. {default if default is not None else 256:g}, or unset it.")
    return value


@dataclass(frozen=True)
class Settings:
    """What the library needs to run. Built from environment variables by `from_env`."""

    home: Path = field(default_factory=lambda: Path(".memory_pipelines").resolve())
    database_url: str | None = None
    embedder: str = "local"  # local | openai | fake
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    openai_embed_model: str = "text-embedding-3-small"
    openai_embed_dimensions: int | None = None
    openai_chat_model: str | None = None
    openai_timeout: float = 30.0
    openai_max_retries: int = 5
    fake_dimension: int = 384
    default_owner: str = "default"
    explore_rate: float = 0.0  # share of context builds injected in random order (context/exploration.py)
    stop_wait: float = DEFAULT_STOP_WAIT  # seconds an exit waits for the embedding worker's running pass

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        """Read MEMORY_PIPELINES_* / DATABASE_URL / OPENAI_* variables."""
        env = dict(os.environ if env is None else env)
        key = env.get("OPENAI_API_KEY") or None
        embedder = env.get("MEMORY_PIPELINES_EMBEDDER") or ("openai" if key else "local")
        return cls(
            home=Path(env.get(HOME_ENV) or ".memory_pipelines").resolve(),
            database_url=env.get("DATABASE_URL") or None,
            embedder=embedder,
            openai_api_key=key,
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            openai_embed_model=env.get("OPENAI_EMBED_MODEL") or "text-embedding-3-small",
            openai_embed_dimensions=_number(env, "OPENAI_EMBED_DIMENSIONS", int, None, 1,
                                            "a whole number of at least 1"),
            openai_chat_model=env.get("OPENAI_CHAT_MODEL") or ("gpt-4o-mini" if key else None),
            openai_timeout=_number(env, "OPENAI_TIMEOUT", float, 30.0, 0.001, "a positive number of seconds"),
            openai_max_retries=_number(env, "OPENAI_MAX_RETRIES", int, 5, 0, "a whole number of at least 0"),
            fake_dimension=_number(env, "MEMORY_PIPELINES_FAKE_DIM", int, 384, 1, "a whole number of at least 1"),
            default_owner=env.get("MEMORY_PIPELINES_OWNER") or "default",
            explore_rate=parse_explore_rate(env.get(EXPLORE_RATE_ENV, "")),
            stop_wait=parse_stop_wait(env.get(STOP_WAIT_ENV, "")),
        )


def get_settings() -> Settings:
    """Current settings from the environment."""
    return Settings.from_env()
