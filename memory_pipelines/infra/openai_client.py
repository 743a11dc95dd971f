"""The `openai` client the embedder and the chat model share: built once here, with the client's own retries
off and this project's on (`retry.call_with_retries`: 429, 408, 5xx, timeouts and connection errors, with
backoff and `Retry-After`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from .errors import ConfigError
from .redact import redact, redact_url
from .retry import call_with_retries

T = TypeVar("T")


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

    def call(self, request: Callable[[], T], max_retries: int | None = None, max_wait: float | None = None) -> T:
        """`request()` (one API call), retried on transient failures (at most `max_retries` times when given,
        else as configured; waiting at most `max_wait` seconds between tries, whatever a Retry-After asks);
        raises `RetriesExhausted` or the error."""
        retries = self.max_retries if max_retries is None else min(max_retries, self.max_retries)
        wait = self.backoff_max if max_wait is None else min(max_wait, self.backoff_max)
        return call_with_retries(request, max_retries=retries, backoff_base=self.backoff_base,
                                 backoff_max=wait, sleep=self.sleep)

    def redact(self, text: str) -> str:
        """`text` (an error's message, which may quote the key) without the API key."""
        return redact(text, self.api.api_key)
