"""A small time-bounded memo shared by the threads of one process."""

from __future__ import annotations

import time
from typing import Any


class Memo:
    """Values remembered per key for a while (one process, all threads); bounded: once it holds
    MAX_ENTRIES, the expired ones are forgotten."""

    MAX_ENTRIES = 10_000

    def __init__(self) -> None:
        self.entries: dict[tuple[Any, ...], tuple[Any, float]] = {}

    def get(self, key: tuple[Any, ...]) -> Any:
        value, until = self.entries.get(key, (None, 0.0))
        return value if until > time.monotonic() else None

    def put(self, key: tuple[Any, ...], value: Any, seconds: float) -> None:
        now = time.monotonic()
        if len(self.entries) >= self.MAX_ENTRIES:
            for stale in [k for k, (_, until) in list(self.entries.items()) if until <= now]:  # a copy: threads add
                self.entries.pop(stale, None)
        self.entries[key] = (value, now + seconds)

    def clear(self) -> None:
        self.entries.clear()
