"""The HTTP surface (FastAPI): seed 000's progressive search, seed 004's memory centre, context and feedback.

Install with the `api` extra. `create_app(runtime)` builds the app; `memory-pipelines serve` runs it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:  # lazy, so `api.encode` imports without FastAPI's app machinery
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
