"""A minimal chat client that asks an OpenAI-compatible model for one JSON object.

Callers validate the keys they need; this module only guarantees a parsed `dict` or `LLMError`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .openai_client import Budget, OpenAIClient
from .retry import RetriesExhausted, describe_error, status_code

if TYPE_CHECKING:
    from .settings import Settings

_JSON_HINT = "Respond with a single JSON object."


class LLMError(RuntimeError):
    """The model could not be reached, rejected us, or did not return a JSON object."""


class LLMUnreachable(LLMError):
    """The model did not answer (timeouts, connection errors, server errors after the retries) or refused the key."""


class ChatLLM:
    """Chat completions in JSON mode (`response_format={"type": "json_object"}`)."""

    def __init__(
        self,
        api_key: str,
        model: str,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        temperature: float | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = OpenAIClient(api_key, base_url, user="the chat model", timeout=timeout,
                                   max_retries=max_retries, backoff_base=backoff_base, backoff_max=backoff_max,
                                   sleep=sleep)
        self.base_url = self.client.base_url
        self.model = model
        self.temperature = temperature

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatLLM | None:
        """A client for OPENAI_CHAT_MODEL, or None when no key or no chat model is configured."""
        if not settings.openai_api_key or not settings.openai_chat_model:
            return None
        return cls(
            api_key=settings.openai_api_key,
            model=settings.openai_chat_model,
            base_url=settings.openai_base_url,
            timeout=settings.openai_timeout,
            max_retries=settings.openai_max_retries,
        )

    def complete_json(self, system: str, user: str, budget: Budget | None = None) -> dict[str, Any]:
        """Send one system + user message and return the assistant's reply parsed as a JSON object; within
        `budget` when given (`openai_client.ON_REQUEST`), else with the configured retries."""
        content = self._complete(_with_json_hint(system, user), user, budget)
        try:
            parsed = json.loads(content)
        except json.JSONDecodeError as exc:
            raise LLMError(f"{self.model} returned malformed JSON ({exc.msg}): {content[:200]!r}") from exc
        if not isinstance(parsed, dict):
            raise LLMError(f"{self.model} returned JSON {type(parsed).__name__}, expected an object")
        return parsed

    def attempt_timeout(self, budget: Budget | None = None) -> float:
        """Seconds one request may take: the configured timeout, capped by `budget`'s."""
        return self.client.attempt_timeout(budget)

    def _complete(self, system: str, user: str, budget: Budget | None = None) -> str:
        """The assistant message content of one chat completion (with retries)."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "response_format": {"type": "json_object"},
        }
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        try:
            response = self.client.call(lambda api: api.chat.completions.create(**kwargs), budget)
        except Exception as exc:
            raise self._translate(exc) from exc
        if not response.choices or response.choices[0].message.content is None:
            raise LLMError(f"{self.model} returned no message content")
        return response.choices[0].message.content

    def _translate(self, exc: Exception) -> LLMError:
        """Map a client or retry failure to an LLMError with cause and fix."""
        if isinstance(exc, RetriesExhausted):
            return LLMUnreachable(
                f"chat model {self.model} failed after {exc.attempts} attempts at {self.base_url} "
                f"(last: {describe_error(exc.last_error)})"
            )
        if status_code(exc) in (401, 403):
            return LLMUnreachable(
                f"the OpenAI API key was rejected by {self.base_url} (HTTP {status_code(exc)}). "
                "Fix: check OPENAI_API_KEY."
            )
        detail = self.client.redact(getattr(exc, "message", None) or str(exc))
        return LLMError(f"chat request to {self.base_url} failed ({describe_error(exc)}): {detail}")


def _with_json_hint(system: str, user: str) -> str:
    """JSON mode requires the word "JSON" in the messages; add a hint to the system prompt if absent."""
    if "json" in (system + user).lower():
        return system
    return f"{system}\n\n{_JSON_HINT}" if system else _JSON_HINT
