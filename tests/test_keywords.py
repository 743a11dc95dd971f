"""Keyword terms (jieba + English), BM25 helpers, TF-IDF top terms and Jaccard similarity."""

from __future__ import annotations

import math
import sys
import threading
from collections import Counter

import pytest

from memory_pipelines.text import keywords
from memory_pipelines.text.keywords import (
    bm25_idf,
    bm25_scores,
    bm25_term_score,
    jaccard,
    keyword_terms,
    term_counts,
    terms,
    tfidf_top_terms,
)


def test_chinese_is_segmented_into_multi_character_words() -> None:
    assert terms("数据库连接池耗尽") == ["数据库", "连接池", "耗尽"]


def test_chinese_stop_words_and_single_characters_are_dropped() -> None:
    got = terms("我们在生产环境中遇到了错误，用户的订单也都没有同步")
    assert got == ["生产", "环境", "遇到", "错误", "用户", "订单", "同步"]


def test_chinese_question_words_are_stop_words_like_english_ones() -> None:
    # 哪里 / 多少 / 几点 ask, as "where" / "how many" / "when" do: a memory holding them is no better an answer.
    assert terms("我上个月和家人去哪里旅游了？") == ["上个月", "家人", "旅游"]
    assert terms("这双运动鞋花了多少钱，快递几点到的") == ["运动鞋", "快递"]
    assert terms("where did we travel with the family?") == ["travel", "famili"]


def test_english_lowercase_stop_words_and_identifiers() -> None:
    got = terms("The API returned HTTP-429 because the rate_limit of oauth2 was hit")
    assert got == ["api", "return", "http", "429", "rate_limit", "oauth2", "hit"]


def test_english_words_are_stemmed_and_unstemmed_terms_keep_their_form() -> None:
    assert terms("painted paintings painting Painter") == ["paint", "paint", "paint", "painter"]
    assert terms("libraries library") == ["librari", "librari"]
    # Words to show or to find in a text: only a plural s goes
    assert terms("painted paintings libraries", stem=False) == ["painted", "painting", "librarie"]


def test_plural_s_is_removed_but_not_from_ss_us_is_or_short_words() -> None:
    assert terms("errors databases status class analysis bus gas", stem=False) == [
        "error",
        "database",
        "status",
        "class",
        "analysis",
        "bus",
        "gas",
    ]


def test_numbers_need_two_digits_and_one_letter_words_go() -> None:
    assert terms("retry 3 times after 30 s, x y 2024") == ["retri", "time", "30", "2024"]


def test_mixed_chinese_english_and_full_width() -> None:
    expected = ["用户", "登录", "失败", "原因", "oauth2", "令牌", "过期"]
    assert terms("用户登录失败，原因是OAuth2令牌过期") == expected
    assert terms("ＡＰＩ　ｅｒｒｏｒｓ") == ["api", "error"]


def test_edge_inputs() -> None:
    assert terms("") == []
    assert terms("the of 的 了 a") == []
    assert terms("__init__ ___") == ["init"]


def test_term_counts_counts_normalised_terms() -> None:
    assert term_counts("Error errors ERROR 数据库 数据库") == Counter({"error": 3, "数据库": 2})


def test_terms_is_thread_safe_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keywords, "_jieba_module", None)  # force the lazy initialisation again
    results: list[list[str]] = []

    def work() -> None:
        results.append(terms("缓存命中率下降导致延迟升高"))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    assert all(r == results[0] for r in results)
    assert "缓存" in results[0] and "延迟" in results[0]


def test_bm25_idf_formula_and_monotone_in_df() -> None:
    assert bm25_idf(10, 1) == pytest.approx(math.log(1 + 9.5 / 1.5))
    idfs = [bm25_idf(100, df) for df in (1, 5, 20, 50, 100)]
    assert idfs == sorted(idfs, reverse=True)
    assert len(set(idfs)) == len(idfs)
    assert all(v > 0 for v in idfs)
    with pytest.raises(ValueError):
        bm25_idf(-1, 0)


def test_bm25_term_score_saturates_and_penalises_long_documents() -> None:
    idf = bm25_idf(10, 2)
    assert bm25_term_score(0, 10, 10, idf) == 0.0
    scores = [bm25_term_score(tf, 10, 10, idf) for tf in (1, 2, 4, 8, 100)]
    assert scores == sorted(scores)
    assert scores[-1] < idf * (1.2 + 1)  # bounded by idf * (k1 + 1)
    assert bm25_term_score(1, 10, 10, idf) == pytest.approx(idf)  # average length, tf 1 -> idf
    assert bm25_term_score(2, 5, 10, idf) > bm25_term_score(2, 20, 10, idf)
    assert bm25_term_score(2, 5, 10, idf, b=0.0) == pytest.approx(bm25_term_score(2, 20, 10, idf, b=0.0))


def _corpus() -> dict[str, Counter[str]]:
    texts = {
        "pool": "数据库连接池耗尽，连接池重启后恢复。postgres connection pool exhausted again",
        "db": "数据库备份完成。postgres backup finished overnight",
        "lunch": "午饭很好吃，我们去了新开的餐厅",
        "deploy": "deploy finished; postgres migration applied to the database",
    }
    return {doc_id: term_counts(text) for doc_id, text in texts.items()}


def test_bm25_ranks_the_document_with_more_and_rarer_query_terms_first() -> None:
    docs = _corpus()
    scores = bm25_scores(terms("连接池 postgres 耗尽"), docs)
    assert set(scores) == set(docs)
    ranked = sorted(scores, key=scores.__getitem__, reverse=True)
    assert ranked[0] == "pool"
    assert scores["lunch"] == 0.0
    assert scores["db"] > 0 and scores["deploy"] > 0  # "postgres" only, which is common
    assert scores["pool"] > 3 * scores["db"]


def test_bm25_rare_term_outweighs_common_term() -> None:
    docs = _corpus()
    rare = bm25_scores(["餐厅"], docs)["lunch"]
    common = bm25_scores(["postgres"], docs)["db"]
    assert rare > common


def test_bm25_scores_edge_cases() -> None:
    assert bm25_scores(["x"], {}) == {}
    docs = _corpus()
    assert bm25_scores(["postgres", "postgres"], docs) == bm25_scores(["postgres"], docs)
    assert set(bm25_scores(["nothing"], docs).values()) == {0.0}


def test_tfidf_top_terms_prefers_distinctive_terms() -> None:
    texts = [
        "数据库连接池耗尽，数据库重启",
        "数据库备份完成",
        "postgres errors errors timeout",
        "",
    ]
    top = tfidf_top_terms(texts, top_k=2)
    assert len(top) == 4
    assert top[0][0][0] == "数据库"  # twice in the text (sublinear tf beats the rarer single terms)
    assert top[2][0] == ("error", pytest.approx(top[2][0][1]))
    assert top[3] == []
    for row in top[:3]:
        assert len(row) == 2
        assert all(round(w, 4) == w and 0 < w <= 1 for _, w in row)
        assert [w for _, w in row] == sorted((w for _, w in row), reverse=True)
    assert tfidf_top_terms([]) == []
    assert tfidf_top_terms(["the of", "的 了"]) == [[], []]


def test_jaccard_identities_and_overlap() -> None:
    a = "数据库连接池耗尽 postgres"
    assert jaccard(a, a) == 1.0
    assert jaccard(a, "午饭很好吃 lunch") == 0.0
    assert jaccard("errors in the pool", "pool error") == 1.0  # same term set after normalisation
    partial = jaccard("数据库连接池耗尽", "数据库备份完成")  # {数据库, 连接池, 耗尽} vs {数据库, 备份, 完成}
    assert partial == pytest.approx(1 / 5)
    assert jaccard(a, "postgres") == jaccard("postgres", a)


def test_jaccard_falls_back_to_character_bigrams() -> None:
    assert jaccard("的了", "的了") == 1.0  # only stop words: no terms
    assert jaccard("的了吗", "的了") == pytest.approx(1 / 2)  # {的了, 了吗} vs {的了}
    assert jaccard("", "") == 1.0
    assert jaccard("", "数据库") == 0.0


def test_stemming_is_thread_safe() -> None:
    # One shared Snowball stemmer, switched between threads this often, gives wrong stems and IndexErrors.
    before = sys.getswitchinterval()
    words = [f"{stem}{ending}" for stem in ("paint", "walk", "jump", "connect", "deploy", "test")
             for ending in ("ed", "ing", "s", "er", "ation")]
    expected = {w: keywords._stemmer().stemWord(w) for w in words}
    results: list[bool] = []

    def work() -> None:
        for _ in range(50):
            try:
                results.append(all(keywords._normalise_word.__wrapped__(w) == expected[w] for w in words))
            except Exception:  # a stemmer used by two threads at once raises, IndexError mostly
                results.append(False)

    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(before)
    assert len(results) == 400 and all(results)


@pytest.mark.parametrize(("text", "expected"), [
    ("我养了一只猫", {"猫"}),  # a one-character noun: jieba's whole words alone keep none of it
    ("我有一条狗", {"狗"}),
    ("我会弹钢琴", {"钢琴", "弹钢琴"}),  # a long word and the word inside it
    ("他喜欢看篮球比赛", {"篮球", "比赛", "篮球比赛"}),
])
def test_keyword_terms_hold_the_parts_of_chinese_words(text, expected):
    got = set(keyword_terms(text))
    assert expected <= got
    assert not got & {"我", "了", "一", "只", "他", "有", "会"}  # function characters stay out
    assert set(terms(text)) <= got  # the whole words are still there


def test_keyword_terms_of_english_are_its_terms():
    text = "We finished painting the fence in three weekends."
    assert keyword_terms(text) == terms(text)
