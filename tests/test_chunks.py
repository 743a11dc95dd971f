"""Token-bounded chunking with overlap, preferring paragraph and sentence ends."""

from __future__ import annotations

import random

import pytest

from memory_pipelines.text.chunks import chunk_spans, chunk_text, split_sentences
from memory_pipelines.text.tokens import count_tokens

_VOCABULARY = """
    the database connection pool was exhausted after deploy so we raised max_connections
    and added retries with exponential backoff while the cache hit rate dropped
"""
_WORDS = _VOCABULARY.split()
_ZH_SENTENCES = [
    "数据库连接池在发布之后被耗尽了。",
    "我们把最大连接数调高，并且增加了带退避的重试！",
    "缓存命中率下降导致延迟升高；",
    "用户反馈登录失败，原因是令牌过期？",
    "运维团队在凌晨三点收到告警，随后回滚了配置。",
]


def _english(n_chars: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    paragraphs: list[str] = []
    while sum(len(p) for p in paragraphs) < n_chars:
        sentences = []
        for _ in range(rng.randint(2, 8)):
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 25)))
            sentences.append(words.capitalize() + rng.choice(".!?"))
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def _chinese(n_chars: int, seed: int = 2) -> str:
    rng = random.Random(seed)
    out = ""
    while len(out) < n_chars:
        out += rng.choice(_ZH_SENTENCES)
    return out


def _ends_at_sentence(chunk: str) -> bool:
    return chunk[-1] in ".!?。！？；"


def test_short_text_is_one_stripped_chunk() -> None:
    assert chunk_text("  Hello world.\n\n") == ["Hello world."]
    assert chunk_text("数据库连接池耗尽。") == ["数据库连接池耗尽。"]


def test_empty_text_gives_no_chunks() -> None:
    assert chunk_text("") == []
    assert chunk_text(" \n\t ") == []


def test_invalid_sizes_are_rejected() -> None:
    with pytest.raises(ValueError):
        chunk_text("x", chunk_tokens=0)
    with pytest.raises(ValueError):
        chunk_text("x", chunk_tokens=10, overlap_tokens=10)


def test_english_chunks_fit_overlap_and_end_at_sentences() -> None:
    text = _english(12_000)
    chunks = chunk_text(text)
    assert len(chunks) >= 4
    assert all(chunk and chunk == chunk.strip() for chunk in chunks)
    assert all(count_tokens(chunk) <= 500 for chunk in chunks)
    assert min(count_tokens(chunk) for chunk in chunks[:-1]) >= 250  # no tiny chunks mid-text
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        assert nxt[:20] in prev  # overlap: the next chunk starts inside the previous one
        assert _ends_at_sentence(prev)


def test_chunks_prefer_paragraph_ends() -> None:
    text = _english(12_000)
    spans = chunk_spans(text)
    assert len(spans) >= 4
    paragraph_ends = {i for i in range(len(text)) if text.startswith("\n\n", i)}
    at_paragraph = sum(1 for _, end in spans[:-1] if end in paragraph_ends)
    assert at_paragraph >= len(spans[:-1]) - 1


def test_overlap_is_about_the_requested_size() -> None:
    text = _english(12_000, seed=5)
    spans = chunk_spans(text, chunk_tokens=300, overlap_tokens=60)
    overlaps = [count_tokens(text[b[0] : a[1]]) for a, b in zip(spans, spans[1:], strict=False)]
    assert all(0 < n <= 60 for n in overlaps)
    assert sum(overlaps) / len(overlaps) >= 20


def test_no_overlap_when_zero_and_text_is_covered() -> None:
    text = _english(8_000, seed=3)
    spans = chunk_spans(text, chunk_tokens=200, overlap_tokens=0)
    assert len(spans) >= 5
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end
        assert not text[end:start].strip()  # nothing but whitespace between chunks


def test_chinese_text_chunks_at_chinese_sentence_ends() -> None:
    text = _chinese(6_000)
    chunks = chunk_text(text, chunk_tokens=200, overlap_tokens=30)
    assert len(chunks) > 10
    assert all(count_tokens(c) <= 200 for c in chunks)
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        assert _ends_at_sentence(prev)
        assert nxt[:10] in prev


def test_overlong_sentence_is_split_at_word_boundaries() -> None:
    words = [random.Random(4).choice(_WORDS) for _ in range(3000)]
    text = " ".join(words)  # no sentence ends at all
    chunks = chunk_text(text, chunk_tokens=100, overlap_tokens=10)
    assert len(chunks) > 10
    assert all(count_tokens(c) <= 100 for c in chunks)
    vocabulary = set(_WORDS)
    for chunk in chunks:
        assert set(chunk.split()) <= vocabulary  # no word was cut in half


def test_unbroken_chinese_and_blobs_still_chunk() -> None:
    zh = "数据库连接池耗尽缓存命中率下降" * 300
    blob = "x" * 5000
    for text in (zh, blob):
        chunks = chunk_text(text, chunk_tokens=120, overlap_tokens=20)
        assert len(chunks) > 3
        assert all(count_tokens(c) <= 120 for c in chunks)
        spans = chunk_spans(text, chunk_tokens=120, overlap_tokens=20)
        assert spans[0][0] == 0 and spans[-1][1] == len(text)
        assert all(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))  # overlapping


def test_spans_are_offsets_into_the_original_text() -> None:
    text = "\n  " + _english(3_000) + "  \n"
    spans = chunk_spans(text, chunk_tokens=120, overlap_tokens=20)
    assert len(spans) >= 3
    assert [text[a:b] for a, b in spans] == chunk_text(text, chunk_tokens=120, overlap_tokens=20)
    assert all(a < b for a, b in spans)
    assert all(s2 > s1 and e2 > e1 for (s1, e1), (s2, e2) in zip(spans, spans[1:], strict=False))


def test_split_sentences_english_and_chinese() -> None:
    text = 'He said "stop." Then left! 版本1.2 发布了。好的!下一步；最后\nnew line e.g. here'
    assert split_sentences(text) == [
        'He said "stop."',
        "Then left!",
        "版本1.2 发布了。",
        "好的!",
        "下一步；",
        "最后",
        "new line e.g.",
        "here",
    ]
