"""ChatLLM through the real `openai` client against the local FakeOpenAI server."""

from __future__ import annotations

import pytest

from memory_pipelines.infra.errors import ConfigError
from memory_pipelines.infra.llm import ChatLLM, LLMError
from memory_pipelines.infra.settings import Settings
from tests.fake_openai import FakeOpenAI


def make(server: FakeOpenAI, delays: list[float] | None = None, **kwargs) -> ChatLLM:
    sleep = delays.append if delays is not None else (lambda _s: None)
    kwargs.setdefault("timeout", 5.0)
    return ChatLLM("test-key", "gpt-test", base_url=server.base_url, sleep=sleep, **kwargs)


def test_valid_json_object(fake_openai: FakeOpenAI) -> None:
    fake_openai.chat_responses.append('{"facts": ["likes tea"], "score": 0.5}')
    out = make(fake_openai).complete_json("Extract facts as JSON.", "I like tea.")
    assert out == {"facts": ["likes tea"], "score": 0.5}
    path, body, headers = fake_openai.requests[0]
    assert path == "/v1/chat/completions" and len(fake_openai.requests) == 1
    assert body["model"] == "gpt-test" and body["response_format"] == {"type": "json_object"}
    assert body["messages"] == [
        {"role": "system", "content": "Extract facts as JSON."},
        {"role": "user", "content": "I like tea."},
    ]
    assert headers["authorization"] == "Bearer test-key" and "temperature" not in body


def test_default_reply_is_empty_object(fake_openai: FakeOpenAI) -> None:
    assert make(fake_openai).complete_json("Answer in JSON.", "hi") == {}


def test_json_hint_added_when_prompts_do_not_mention_json(fake_openai: FakeOpenAI) -> None:
    make(fake_openai, temperature=0.0).complete_json("Extract facts.", "I like tea.")
    body = fake_openai.requests[0][1]
    assert "JSON" in body["messages"][0]["content"] and body["messages"][0]["content"].startswith(
        "Extract facts."
    )
    assert body["temperature"] == 0.0


@pytest.mark.parametrize("reply", ["not json", '{"a": 1', "", "[1, 2]", '"text"'])
def test_malformed_or_non_object_output_raises(fake_openai: FakeOpenAI, reply: str) -> None:
    fake_openai.chat_responses.append(reply)
    with pytest.raises(LLMError):
        make(fake_openai).complete_json("Return JSON.", "x")
    assert len(fake_openai.requests) == 1  # bad output is not retried


def test_500_then_success(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.append({"status": 500})
    fake_openai.chat_responses.append('{"ok": true}')
    delays: list[float] = []
    assert make(fake_openai, delays).complete_json("Return JSON.", "x") == {"ok": True}
    assert len(fake_openai.requests) == 2 and len(delays) == 1


def test_429_retry_after_is_honoured(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.append({"status": 429, "retry_after": 0.02})
    delays: list[float] = []
    make(fake_openai, delays).complete_json("Return JSON.", "x")
    assert delays == [0.02] and len(fake_openai.requests) == 2


def test_exhausted_retries_raise(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.extend([{"status": 502}] * 5)
    with pytest.raises(LLMError, match="after 3 attempts.*HTTP 502"):
        make(fake_openai, max_retries=2).complete_json("Return JSON.", "x")
    assert len(fake_openai.requests) == 3


def test_timeout_is_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.append({"delay": 2.0})
    fake_openai.chat_responses.append('{"n": 1}')
    assert make(fake_openai, timeout=0.2).complete_json("Return JSON.", "x") == {"n": 1}
    assert len(fake_openai.requests) == 2


def test_bad_key_fails_fast(fake_openai: FakeOpenAI) -> None:
    llm = ChatLLM("bad-key", "gpt-test", base_url=fake_openai.base_url, sleep=lambda _s: None)
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):
        llm.complete_json("Return JSON.", "x")
    assert len(fake_openai.requests) == 1


def test_from_settings(fake_openai: FakeOpenAI) -> None:
    assert ChatLLM.from_settings(Settings()) is None
    assert ChatLLM.from_settings(Settings(openai_api_key="k", openai_chat_model=None)) is None
    assert ChatLLM.from_settings(Settings(openai_chat_model="gpt-test")) is None
    llm = ChatLLM.from_settings(
        Settings(
            openai_api_key="test-key", openai_chat_model="gpt-test", openai_base_url=fake_openai.base_url
        )
    )
    assert llm is not None and llm.model == "gpt-test"
    fake_openai.chat_responses.append('{"x": 1}')
    assert llm.complete_json("Return JSON.", "x") == {"x": 1}


def test_missing_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        ChatLLM("", "gpt-test")
