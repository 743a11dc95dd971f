"""The `openai` client the embedder and the chat model share: built once here, with the client's own retries
off and this project's on (`retry.call_with_retries`: 429, 408, 5xx, timeouts and connection errors, with
backoff and `Retry-After`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import ConfigError
from .redact import redact, redact_url
from .retry import call_with_retries

T = TypeVar("T")


@dataclass(frozen=True)
class Budget:
    """How long a call on someone's path may take: seconds per attempt (None: the configured timeout), retries,
    and the longest wait between tries (whatever a Retry-After asks). Each is capped by the client's own
    configured value."""

    timeout: float | None
    retries: int
    max_wait: float


QUERY = Budget(timeout=5.0, retries=1, max_wait=1.0)
"""A search's query embedding: then search degrades to keywords (a 429's Retry-After: 60 held a search 20 s)."""
ON_REQUEST = Budget(timeout=None, retries=1, max_wait=1.0)
"""A call a caller waits for or a lock is held over (a write that waits, its arbitration under the project lock,
implicit feedback): one retry, then the work degrades (stored pending, rules, lexical overlap) and the background
worker, with the whole retry budget, finishes it. With the whole budget a hanging provider held a write, and the
project lock every other write of that project waits for, for minutes. Each attempt keeps the configured timeout
(`OPENAI_TIMEOUT`): a slow model of one's own is given what its operator set."""


class OpenAIClient:
    """An OpenAI-compatible API at `base_url` (None: OpenAI's), called with retries."""

    def __init__(
        self,
        api_key: str,
        base_url: str | None,
        *,
        user: str,
        timeout: float,
        max_retries: int,
        backoff_base: float,
        backoff_max: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`user` names what needs the key in the error when it is missing (e.g. "the chat model")."""
        import openai

        if not api_key:
            raise ConfigError(f"{user} needs an API key. Fix: set OPENAI_API_KEY.")
        self.api = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)
        self.timeout = timeout
        self.base_url = redact_url(str(self.api.base_url))  # for messages: without a password
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.sleep = sleep

    def call(self, request: Callable[[Any], T], budget: Budget | None = None) -> T:
        """`request(api)` (one API call on the client it is given), retried on transient failures: as configured,
        or within `budget` (each of its limits capped by the configured one); raises `RetriesExhausted` or the
        error."""
        if budget is None:
            api, retries, wait = self.api, self.max_retries, self.backoff_max
        else:
            api = self.api.with_options(timeout=self.attempt_timeout(budget))
            retries, wait = min(budget.retries, self.max_retries), min(budget.max_wait, self.backoff_max)
        return call_with_retries(lambda: request(api), max_retries=retries, backoff_base=self.backoff_base,
                                 backoff_max=wait, sleep=self.sleep)

    def attempt_timeout(self, budget: Budget | None = None) -> float:
        """Seconds one attempt may take: the configured timeout, capped by `budget`'s."""
        return self.timeout if budget is None or budget.timeout is None else min(self.timeout, budget.timeout)

    def redact(self, text: str) -> str:
        """`text` (an error's message, which may quote the key) without the API key."""
        return redact(text, self.api.api_key)
