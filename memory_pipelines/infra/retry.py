"""Retry a remote call with exponential backoff and full jitter, honouring `Retry-After`.

Shared by the OpenAI embedder and the chat client. Transient failures are rate limits (429),
request timeouts (408), server errors (5xx), timeouts and connection errors; anything else is
raised at once. When the retries run out, `RetriesExhausted` wraps the last error so callers can
say how many attempts were made and what went wrong last.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class RetriesExhausted(Exception):
    """Every attempt failed with a transient error; `last_error` is the final one."""

    def __init__(self, attempts: int, last_error: BaseException) -> None:
        super().__init__(f"gave up after {attempts} attempts: {describe_error(last_error)}")
        self.attempts = attempts
        self.last_error = last_error


def status_code(exc: BaseException) -> int | None:
    """The HTTP status carried by an API error, if any."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: 408, 429, 5xx, timeouts and connection errors."""
    import openai

    status = status_code(exc)
    if status is not None:
        return status in (408, 429) or status >= 500
    return isinstance(exc, openai.APIConnectionError | TimeoutError | ConnectionError)


def retry_after_seconds(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, then `Retry-After`), or None."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / divisor)
        except ValueError:
            pass
    return _http_date_delay(headers.get("retry-after"))


def _http_date_delay(value: str | None) -> float | None:
    """Seconds until an HTTP-date `Retry-After`, or None if absent or unparseable."""
    if not value:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def describe_error(exc: BaseException) -> str:
    """A short human description: `HTTP 429`, `timeout`, `connection error`, or the error itself."""
    import openai

    status = status_code(exc)
    if status is not None:
        return f"HTTP {status}"
    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError | ConnectionError):
        return "connection error"
    return f"{type(exc).__name__}: {exc}"


def backoff_delay(
    attempt: int,
    exc: BaseException,
    *,
    backoff_base: float,
    backoff_max: float,
    retry_after: Callable[[BaseException], float | None] = retry_after_seconds,
    rng: Callable[[], float] = random.random,
) -> float:
    """Delay before retry number `attempt` (0-based): the server's Retry-After, else full jitter."""
    hinted = retry_after(exc)
    if hinted is not None:
        return min(hinted, backoff_max)
    return rng() * min(backoff_max, backoff_base * (2**attempt))


def call_with_retries(
    fn: Callable[[], T],
    *,
    max_retries: int,
    backoff_base: float,
    backoff_max: float,
    sleep: Callable[[float], None] = time.sleep,
    is_retryable: Callable[[BaseException], bool] = is_transient,
    retry_after: Callable[[BaseException], float | None] = retry_after_seconds,
    rng: Callable[[], float] = random.random,
) -> T:
    """Call `fn`, retrying transient failures up to `max_retries` times (so at most max_retries+1 calls).

    Non-transient errors propagate unchanged; exhausting the retries raises `RetriesExhausted`.
    """
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            if not is_retryable(exc):
                raise
            if attempt >= max_retries:
                raise RetriesExhausted(attempt + 1, exc) from exc
            sleep(
                backoff_delay(
                    attempt,
                    exc,
                    backoff_base=backoff_base,
                    backoff_max=backoff_max,
                    retry_after=retry_after,
                    rng=rng,
                )
            )
            attempt += 1
