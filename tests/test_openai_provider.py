"""OpenAIEmbedder through the real `openai` client against the local FakeOpenAI server."""

from __future__ import annotations

import time

import numpy as np
import pytest

from memory_pipelines.embeddings.base import EmbeddingAuthError, EmbeddingError
from memory_pipelines.embeddings.fake import fake_vector
from memory_pipelines.embeddings.openai_provider import MAX_INPUT_TOKENS, OpenAIEmbedder
from memory_pipelines.infra.errors import ConfigError
from memory_pipelines.infra.openai_client import ON_REQUEST, QUERY
from memory_pipelines.infra.retry import RetriesExhausted, backoff_delay, call_with_retries
from memory_pipelines.infra.settings import Settings
from memory_pipelines.text.tokens import count_tokens
from tests.fake_openai import FakeOpenAI

TEXTS = ["the cat sat on the mat", "pgvector stores embeddings", "我喜欢喝茶", "long-term memory for agents"]


def make(server: FakeOpenAI, delays: list[float] | None = None, **kwargs) -> OpenAIEmbedder:
    """An embedder for an unknown model (dimension taken from the server) that records its sleeps."""
    kwargs.setdefault("model", "test-embed")
    kwargs.setdefault("timeout", 5.0)
    sleep = delays.append if delays is not None else (lambda _s: None)
    return OpenAIEmbedder("test-key", base_url=server.base_url, sleep=sleep, **kwargs)


def expected(texts: list[str], dim: int = 384) -> np.ndarray:
    return np.vstack([fake_vector(t, dim) for t in texts])


def inputs_of(server: FakeOpenAI) -> list[list[str]]:
    return [body["input"] for path, body, _ in server.requests if path == "/v1/embeddings"]


def test_vectors_are_correct_and_in_input_order(fake_openai: FakeOpenAI) -> None:
    fake_openai.reverse_order = True  # the client must sort by `index`
    out = make(fake_openai).embed(TEXTS)
    assert out.dtype == np.float32 and out.shape == (4, 384)
    np.testing.assert_allclose(out, expected(TEXTS), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    path, body, headers = fake_openai.requests[0]
    assert len(fake_openai.requests) == 1 and path == "/v1/embeddings"
    assert body["model"] == "test-embed" and body["input"] == TEXTS and "dimensions" not in body
    assert headers["authorization"] == "Bearer test-key"


def test_kind_is_ignored(fake_openai: FakeOpenAI) -> None:
    embedder = make(fake_openai)
    np.testing.assert_array_equal(embedder.embed_query(TEXTS[0]), embedder.embed_batch([TEXTS[0]])[0])
    assert inputs_of(fake_openai) == [[TEXTS[0]], [TEXTS[0]]]


def test_empty_list_and_empty_string(fake_openai: FakeOpenAI) -> None:
    embedder = make(fake_openai, dimensions=16)
    assert embedder.embed([]).shape == (0, 16)
    assert embedder.embed(["", "x"]).shape == (2, 16)  # the API rejects "", so it is sent as " "
    assert inputs_of(fake_openai) == [[" ", "x"]]


def test_batches_split_at_max_inputs(fake_openai: FakeOpenAI) -> None:
    texts = [f"memory number {i}" for i in range(7)]
    out = make(fake_openai, max_inputs=5).embed(texts)
    assert [len(batch) for batch in inputs_of(fake_openai)] == [5, 2]
    np.testing.assert_allclose(out, expected(texts), atol=1e-6)


def test_server_input_limit_is_a_4xx_without_retry(fake_openai: FakeOpenAI) -> None:
    fake_openai.max_inputs = 3
    with pytest.raises(EmbeddingError, match="HTTP 400") as info:
        make(fake_openai, max_inputs=5).embed(TEXTS)
    assert not isinstance(info.value, EmbeddingAuthError)
    assert len(fake_openai.requests) == 1


def test_batches_split_at_token_cap(fake_openai: FakeOpenAI) -> None:
    texts = [f"item {i}: " + "apple banana cherry " * 3 for i in range(5)]
    sizes = [count_tokens(t) for t in texts]
    cap = sizes[0] * 2 + 1  # two texts fit, three do not
    out = make(fake_openai, max_tokens_per_request=cap).embed(texts)
    batches = inputs_of(fake_openai)
    assert [len(b) for b in batches] == [2, 2, 1]
    assert all(sum(count_tokens(t) for t in b) <= cap for b in batches)
    np.testing.assert_allclose(out, expected(texts), atol=1e-6)


def test_overlong_input_is_truncated(fake_openai: FakeOpenAI) -> None:
    text = "remember " * (MAX_INPUT_TOKENS + 500)
    assert count_tokens(text) > fake_openai.max_input_tokens  # the server would reject it as is
    out = make(fake_openai).embed([text, "short"])
    sent = inputs_of(fake_openai)[0]
    assert count_tokens(sent[0]) == MAX_INPUT_TOKENS and text.startswith(sent[0])
    assert sent[1] == "short" and out.shape == (2, 384)


def test_429_retry_after_is_honoured(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.append({"status": 429, "retry_after": 0.01})
    delays: list[float] = []
    out = make(fake_openai, delays).embed(TEXTS)
    assert delays == [0.01]
    assert len(fake_openai.requests) == 2
    np.testing.assert_allclose(out, expected(TEXTS), atol=1e-6)


def test_retry_after_is_capped_by_backoff_max(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.append({"status": 429, "retry_after": 30})
    delays: list[float] = []
    make(fake_openai, delays, backoff_max=0.05).embed(TEXTS)
    assert delays == [0.05]


def test_500_is_retried_with_jittered_backoff(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.extend([{"status": 500}, {"status": 503}])
    delays: list[float] = []
    out = make(fake_openai, delays, backoff_base=0.1).embed(TEXTS)
    assert len(fake_openai.requests) == 3 and len(delays) == 2
    assert 0 <= delays[0] <= 0.1 and 0 <= delays[1] <= 0.2
    np.testing.assert_allclose(out, expected(TEXTS), atol=1e-6)


def test_persistent_500_raises_after_max_retries(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.extend([{"status": 500}] * 10)
    with pytest.raises(EmbeddingError) as info:
        make(fake_openai, max_retries=3).embed(TEXTS)
    assert len(fake_openai.requests) == 4
    assert "HTTP 500" in str(info.value) and fake_openai.base_url in str(info.value)
    assert not isinstance(info.value, EmbeddingAuthError)


def test_timeout_is_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.append({"delay": 2.0})
    start = time.monotonic()
    out = make(fake_openai, timeout=0.2).embed(TEXTS)
    assert time.monotonic() - start < 1.5
    assert len(fake_openai.requests) == 2
    np.testing.assert_allclose(out, expected(TEXTS), atol=1e-6)


def test_persistent_timeout_names_the_cause(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.extend([{"delay": 2.0}] * 2)
    with pytest.raises(EmbeddingError, match="timeout"):
        make(fake_openai, timeout=0.1, max_retries=1).embed(TEXTS)
    assert len(fake_openai.requests) == 2


def test_connection_refused_is_retried_then_fails() -> None:
    with FakeOpenAI() as server:
        url = server.base_url
    embedder = OpenAIEmbedder("test-key", base_url=url, model="m", max_retries=2, sleep=lambda _s: None)
    with pytest.raises(EmbeddingError, match="after 3 attempts.*connection error"):
        embedder.embed(["hello"])


def test_401_fails_fast_with_auth_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.append({"status": 401})
    with pytest.raises(EmbeddingAuthError) as info:
        make(fake_openai).embed(TEXTS)
    assert len(fake_openai.requests) == 1
    message = str(info.value)
    assert fake_openai.base_url in message and "OPENAI_API_KEY" in message and "local model" in message


@pytest.mark.parametrize("status", [401, 403])
def test_auth_statuses_are_not_retried(fake_openai: FakeOpenAI, status: int) -> None:
    fake_openai.faults.append({"status": status})
    with pytest.raises(EmbeddingAuthError, match=f"HTTP {status}"):
        make(fake_openai).embed(TEXTS)
    assert len(fake_openai.requests) == 1


def test_bad_key_is_rejected(fake_openai: FakeOpenAI) -> None:
    embedder = OpenAIEmbedder("bad-key", base_url=fake_openai.base_url, model="m", dimensions=8)
    with pytest.raises(EmbeddingAuthError):
        embedder.embed(["hello"])
    assert len(fake_openai.requests) == 1


def test_dimensions_are_passed_through(fake_openai: FakeOpenAI) -> None:
    embedder = make(fake_openai, model="text-embedding-3-small", dimensions=64)
    assert embedder.dimension == 64 and fake_openai.requests == []
    out = embedder.embed(TEXTS)
    assert out.shape == (4, 64) and fake_openai.requests[0][1]["dimensions"] == 64
    np.testing.assert_allclose(out, expected(TEXTS, 64), atol=1e-6)


def test_known_model_dimension_needs_no_request(fake_openai: FakeOpenAI) -> None:
    assert make(fake_openai, model="text-embedding-3-large").dimension == 3072
    assert make(fake_openai, model="text-embedding-ada-002").dimension == 1536
    assert fake_openai.requests == []


def test_dimension_probe_for_unknown_model(fake_openai: FakeOpenAI) -> None:
    fake_openai.embed_dimension = 96
    embedder = make(fake_openai, model="my-embed")
    assert embedder.dimension == 96
    assert embedder.dimension == 96  # probed once
    assert len(fake_openai.requests) == 1 and "dimensions" not in fake_openai.requests[0][1]
    assert embedder.embed(TEXTS).shape == (4, 96)


def test_wrong_dimension_from_server_is_reported(fake_openai: FakeOpenAI) -> None:
    embedder = make(fake_openai, model="text-embedding-3-small")  # expects 1536, the fake returns 384
    with pytest.raises(EmbeddingError, match="OPENAI_EMBED_DIMENSIONS"):
        embedder.embed(TEXTS)


def test_from_settings(fake_openai: FakeOpenAI) -> None:
    settings = Settings(
        openai_api_key="test-key",
        openai_base_url=fake_openai.base_url,
        openai_embed_model="text-embedding-3-small",
        openai_embed_dimensions=32,
        openai_max_retries=2,
    )
    embedder = OpenAIEmbedder.from_settings(settings)
    assert (embedder.model_name, embedder.dimension, embedder.client.max_retries) == (
        "text-embedding-3-small",
        32,
        2,
    )
    assert embedder.embed(TEXTS).shape == (4, 32)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIEmbedder.from_settings(Settings())


def test_call_with_retries_does_not_retry_other_errors() -> None:
    calls: list[int] = []

    def boom() -> None:
        calls.append(1)
        raise ValueError("not transient")

    with pytest.raises(ValueError):
        call_with_retries(boom, max_retries=5, backoff_base=0.1, backoff_max=1.0, sleep=lambda _s: None)
    assert calls == [1]


def test_call_with_retries_exhausts_and_wraps() -> None:
    delays: list[float] = []

    def down() -> None:
        raise ConnectionError("refused")

    with pytest.raises(RetriesExhausted) as info:
        call_with_retries(
            down, max_retries=2, backoff_base=1.0, backoff_max=3.0, sleep=delays.append, rng=lambda: 1.0
        )
    assert info.value.attempts == 3 and isinstance(info.value.last_error, ConnectionError)
    assert delays == [1.0, 2.0]  # rng=1.0 gives the upper bound of full jitter


def test_backoff_is_capped() -> None:
    delay = backoff_delay(10, ConnectionError(), backoff_base=0.5, backoff_max=4.0, rng=lambda: 1.0)
    assert delay == 4.0


def test_a_query_gets_a_short_deadline_and_one_retry(fake_openai: FakeOpenAI) -> None:
    """A query is on a request's path: with the whole retry budget a hanging provider held a search for minutes."""
    embedder = make(fake_openai, timeout=0.3, max_retries=5)
    fake_openai.faults.extend([{"delay": 2.0}] * 3)
    with pytest.raises(EmbeddingError):
        embedder.embed_query("why pgvector?")
    assert len(fake_openai.requests) == 2  # one attempt and one retry, each cut at the deadline
    fake_openai.faults.clear()
    np.testing.assert_allclose(embedder.embed_query("why pgvector?"), expected(["why pgvector?"])[0], atol=1e-6)
    fake_openai.requests.clear()
    fake_openai.faults.extend([{"status": 500}] * 3 + [{"delay": 0.0}])
    assert embedder.embed(["a passage"]).shape == (1, 384)  # a passage keeps the configured retries
    assert len(fake_openai.requests) == 4


def test_a_query_waits_at_most_a_second_for_a_retry_whatever_retry_after_asks(fake_openai: FakeOpenAI) -> None:
    """A 429 with Retry-After: 60 held a search 20 s (the backoff's cap) before it answered from keywords."""
    delays: list[float] = []
    embedder = make(fake_openai, delays=delays)
    fake_openai.faults.extend([{"status": 429, "retry_after": 60}] * 2)
    with pytest.raises(EmbeddingError):
        embedder.embed_query("why pgvector?")
    assert delays == [1.0]
    delays.clear()
    fake_openai.faults.extend([{"status": 429, "retry_after": 3}, {}])
    embedder.embed(["a passage"])  # the background embedding waits as the server asks
    assert delays == [3.0]


def test_a_caller_that_waits_gets_a_short_budget_then_the_failure(fake_openai: FakeOpenAI) -> None:
    """A write that waits for its vectors (or holds its project's lock meanwhile) gets one attempt and one retry,
    each cut at the deadline, and waits at most a second between them: with the configured budget a hanging
    provider held it for minutes. The caller then stores it pending; `embed` keeps the configured retries."""
    delays: list[float] = []
    embedder = make(fake_openai, delays=delays, timeout=0.3, max_retries=5)
    fake_openai.faults.extend([{"delay": 2.0}] * 3)
    with pytest.raises(EmbeddingError):
        embedder.embed_on_request(TEXTS)
    assert len(fake_openai.requests) == 2
    fake_openai.faults.clear()
    fake_openai.faults.extend([{"status": 429, "retry_after": 60}, {}])
    np.testing.assert_allclose(embedder.embed_on_request(TEXTS), expected(TEXTS), atol=1e-6)
    assert delays[-1] == 1.0
    fake_openai.requests.clear()
    fake_openai.faults.extend([{"status": 500}] * 3 + [{}])
    assert embedder.embed(TEXTS).shape == (4, 384) and len(fake_openai.requests) == 4
    # each attempt keeps the timeout its operator set (a slow model of one's own); a query's is capped at 5 s
    slow = make(fake_openai, timeout=90.0)
    assert slow.client.attempt_timeout(ON_REQUEST) == 90.0 and slow.client.attempt_timeout(QUERY) == 5.0


@pytest.mark.parametrize("broken", ["nan", "zeros"])
def test_a_vector_that_is_not_finite_or_all_zeros_is_a_failed_call(fake_openai: FakeOpenAI, broken: str) -> None:
    """A NaN vector went on to PostgreSQL, which refused it (a 500 on search and context, a waiting write lost); a
    zero vector was stored as embedded and never matched anything. Both are now the provider's failure."""
    embedder = make(fake_openai)
    fake_openai.faults.append({"vectors": broken})
    with pytest.raises(EmbeddingError, match="not finite" if broken == "nan" else "all zeros"):
        embedder.embed(TEXTS)
    fake_openai.faults.append({"vectors": broken})
    with pytest.raises(EmbeddingError):
        embedder.embed_query(TEXTS[0])
    assert make(fake_openai).embed(TEXTS).shape == (4, 384)  # the next good answer is taken
