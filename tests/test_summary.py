"""Extractive summaries and keyword tags used when no LLM is configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_pipelines.text.summary import extractive_summary, tags

ROOT = Path(__file__).resolve().parent.parent

EN = (
    "Hi there! The production database connection pool was exhausted at 3am. "
    "We raised max_connections from 100 to 300 and the connection pool recovered. "
    "Also, lunch was good. The database team will review connection pool limits next week. Thanks everyone."
)
ZH = (
    "大家好。今天凌晨三点生产环境的数据库连接池耗尽了，导致大量请求超时。"
    "我们把最大连接数从100调整到300，连接池恢复正常。午饭很好吃。数据库团队下周会评审连接池的配置。"
)


@pytest.mark.parametrize("max_chars", [1, 2, 10, 30, 60, 120, 160, 200, 1000])
@pytest.mark.parametrize("text", [EN, ZH, "x" * 500, "ok. " * 100])
def test_summary_is_never_empty_or_too_long(text: str, max_chars: int) -> None:
    summary = extractive_summary(text, max_chars)
    assert summary
    assert len(summary) <= max_chars


def test_text_that_fits_is_returned_whole_with_whitespace_collapsed() -> None:
    assert extractive_summary("  Short   note.\n\nSecond line. ") == "Short note. Second line."
    assert extractive_summary("") == ""
    assert extractive_summary(" \n ") == ""
    with pytest.raises(ValueError):
        extractive_summary("text", 0)


def test_summary_keeps_central_sentences_in_order_and_drops_filler() -> None:
    summary = extractive_summary(EN, 160)
    assert summary == (
        "The production database connection pool was exhausted at 3am. "
        "The database team will review connection pool limits next week."
    )
    assert "lunch" not in extractive_summary(EN, 200)
    assert "Hi there" not in extractive_summary(EN, 200)


def test_chinese_summary_joins_without_spaces() -> None:
    first = "今天凌晨三点生产环境的数据库连接池耗尽了，导致大量请求超时。"
    last = "数据库团队下周会评审连接池的配置。"
    assert extractive_summary(ZH, 60) == first + last


def test_best_sentence_is_truncated_when_nothing_fits() -> None:
    summary = extractive_summary(EN, 40)
    assert summary.endswith("…")
    assert len(summary) <= 40
    assert "connection" in summary or "database" in summary
    assert not summary[:-1].endswith(" ")


def test_tied_sentences_go_to_the_earlier_one() -> None:
    """The two sentences have the same terms in the same order, so exactly the same score."""
    text = "POOL LIMITS WERE RAISED! Lunch was good. Pool limits were raised."
    assert extractive_summary(text, 30) == "POOL LIMITS WERE RAISED!"
    assert extractive_summary(text.replace("POOL LIMITS WERE RAISED!", "Pool limits were raised?"), 30) == (
        "Pool limits were raised?"
    )


@pytest.mark.slow
def test_summary_and_tags_do_not_depend_on_the_process() -> None:
    """Another interpreter, with another string-hash seed (set and dict-of-set orders change with it),
    gives the same summary and tags."""
    code = (
        "import json\n"
        "from memory_pipelines.text.summary import extractive_summary, tags\n"
        "from tests.test_summary import EN, ZH\n"
        "print(json.dumps([extractive_summary(EN, 120), extractive_summary(ZH, 60), tags(EN), tags(ZH)]))"
    )
    here = [extractive_summary(EN, 120), extractive_summary(ZH, 60), tags(EN), tags(ZH)]
    assert here[0] == "The database team will review connection pool limits next week."
    for seed in ("1", "4242"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True, text=True, check=True, timeout=60, cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert json.loads(out.stdout) == here


def test_tags_without_corpus_are_relevant() -> None:
    en_tags = tags(EN)
    assert len(en_tags) == 5
    assert {"connection", "database", "pool"} <= set(en_tags[:3])
    assert "lunch" not in en_tags
    zh_tags = tags(ZH, top_k=3)
    assert zh_tags[:2] == ["连接池", "数据库"]


def test_tags_with_corpus_prefer_distinctive_terms() -> None:
    corpus = [
        "The database is slow today and the database team is on it.",
        "Database backups finished.",
        "We deployed a new version of the database schema.",
    ]
    got = tags(EN, corpus=corpus, top_k=3)
    assert got[:2] == ["connection", "pool"]  # "database" is everywhere in the corpus
    assert "database" not in got


def test_tags_edge_cases() -> None:
    assert tags("") == []
    assert tags("the of and 的 了") == []
    assert tags(EN, top_k=0) == []
    assert tags("数据库", corpus=[]) == ["数据库"]
