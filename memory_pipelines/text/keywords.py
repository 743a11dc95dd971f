"""Keyword terms for Chinese and English text, BM25 helpers, TF-IDF top terms and Jaccard similarity.

All functions are pure (no I/O beyond jieba loading its bundled dictionary on first use).
Chinese runs are segmented with jieba in accurate mode; everything else is split into
lower-cased words on non-alphanumerics (``_`` is kept so identifiers like ``rate_limit`` survive), and English
words are reduced to their Snowball stem (``snowballstemmer``, BSD), so "painted" and "paintings" match "paint"
(docs/retrieval-quality.md has what it does to recall). Changing these terms changes what is indexed:
migration 011 marks every keyword entry pending, so the next keyword refresh re-indexes.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from types import ModuleType

_CJK_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# A run of CJK ideographs, or a run of word characters that are not CJK ideographs.
_RUN = re.compile(rf"(?P<cjk>[{_CJK_CHARS}]+)|(?P<word>[^\W{_CJK_CHARS}]+)")
_HAS_CJK = re.compile(f"[{_CJK_CHARS}]")
_DIGITS = re.compile(r"\d+")

_EN_STOP = """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves also get got via per etc ok okay yes
"""

_ZH_STOP = """
    的 了 是 在 和 也 就 都 而 及 与 或 着 呢 吗 吧 啊 呀 把 被 让 给 对 从 向 于 这 那 有 没 不 很
    一个 一些 一下 一样 我们 你们 他们 她们 它们 咱们 自己 这个 那个 这些 那些 这样 那样 这里 那里
    这种 那种 因为 所以 但是 可是 不过 如果 然后 而且 并且 或者 还是 以及 就是 不是 只是 还有
    可以 可能 没有 什么 怎么 怎样 为什么 已经 正在 进行 通过 对于 关于 其中 之后 之前 时候 以后
    以前 之间 现在 一直 非常 比较 有些 其他 其它 另外 同时 然而 因此 由于 虽然 即使 等等
    哪里 哪儿 哪个 哪些 哪天 哪位 哪种 多少 多久 几个 几次 几点 几天 如何 怎么样 怎么办 为啥 干嘛
"""

# One-character Chinese words that say nothing alone: pronouns, particles, copulas, prepositions, adverbs,
# numerals, measure words and the commonest light verbs (一条狗 keeps 狗; 我就去 keeps nothing).
_ZH_STOP_CHARS = """
    我 你 您 他 她 它 们 咱 俺 的 地 得 了 着 过 吗 呢 吧 啊 呀 哦 嗯 哈 嘛 啦 哇 喔 诶 唉 呗 哎 嘿 噢 喂
    是 有 在 和 与 或 就 都 也 还 又 很 太 更 最 真 挺 蛮 好 不 没 别 未 把 被 让 给 对 从 向 往 到 为 以
    而 及 但 并 则 即 若 如 才 再 只 该 会 能 要 想 可 这 那 哪 谁 啥 么 个 些 一 二 两 三 几 每 各 某 其
    此 之 于 上 下 里 中 多 少 点 次 样 种 去 来 说 做 用 叫 等 跟 同 将 已 曾 正 刚 却 号
"""

EN_STOP_WORDS: frozenset[str] = frozenset(_EN_STOP.split())
ZH_STOP_WORDS: frozenset[str] = frozenset(_ZH_STOP.split())
STOP_WORDS: frozenset[str] = EN_STOP_WORDS | ZH_STOP_WORDS
ZH_STOP_CHARS: frozenset[str] = frozenset(_ZH_STOP_CHARS.split())

_jieba_module: ModuleType | None = None
_jieba_lock = threading.Lock()


def _jieba() -> ModuleType:
    """Import and initialise jieba once (thread-safe), with its startup logging silenced."""
    global _jieba_module
    if _jieba_module is None:
        with _jieba_lock:
            if _jieba_module is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba_module = jieba
    return _jieba_module


def zh_word_tags(text: str) -> list[tuple[str, str]]:
    """(word, part-of-speech tag) of each word of a Chinese text, by jieba's tagger (loaded on first use)."""
    _jieba()
    import jieba.posseg

    return [(w.word, w.flag) for w in jieba.posseg.cut(text)]


def zh_dictionary_tag(word: str) -> str | None:
    """jieba's dictionary tag of a Chinese word, or None when the dictionary does not hold it."""
    _jieba()
    import jieba.posseg

    return jieba.posseg.dt.word_tag_tab.get(word)


_stemmers = threading.local()


def _stemmer() -> object:
    """This thread's English stemmer: a Snowball stemmer keeps the word it works on in its own fields, so one
    object must not stem in two threads at once."""
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        import snowballstemmer

        stemmer = _stemmers.english = snowballstemmer.stemmer("english")
    return stemmer


def _plural(word: str) -> str:
    """`word` without a plural ``s`` on words over 3 characters (not ``ss``/``us``/``is``: class, status, analysis)."""
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")) and word[-2].isalpha():
        return word[:-1]
    return word


@functools.lru_cache(maxsize=100_000)
def _normalise_word(word: str) -> str:
    """An English word's Snowball (Porter 2) stem: "painted", "painting" and "paintings" are all "paint".

    Only words of ASCII letters are stemmed; an identifier or a word with digits ("rate_limit", "oauth2") only
    loses a plural ``s``.
    """
    if word.isascii() and word.isalpha():
        return _stemmer().stemWord(word)
    return _plural(word)


def word_forms(words: str) -> frozenset[str]:
    """The whitespace-separated `words` as written and as keyword terms (stemmed): for word lists compared with
    `terms`' output. No jieba: Chinese words are kept as written."""
    out = set(words.split())
    return frozenset(out | {_normalise_word(w) for w in out if w.isascii()})


@functools.lru_cache(maxsize=100_000)
def _word_terms(run: str, stem: bool = True) -> tuple[str, ...]:
    """Terms from a non-CJK word run (already lower-cased): stems, or words without a plural ``s``. Cached:
    a vocabulary repeats, and a text's words each cost ~0.6 µs here (stem cached) against ~0.17 µs for a cached one."""
    word = run.strip("_")
    if len(word) < 2 or word in STOP_WORDS:
        return ()
    if _DIGITS.fullmatch(word):
        return (word,)  # numbers of >= 2 digits
    word = _normalise_word(word) if stem else _plural(word)
    return () if word in STOP_WORDS else (word,)


def _cjk_terms(run: str) -> Iterable[str]:
    """Multi-character jieba words from a CJK run, minus stop words."""
    if len(run) < 2:
        return ()
    return [w for w in _jieba().lcut(run) if len(w) >= 2 and w not in STOP_WORDS]


def _cjk_parts(run: str) -> Iterable[str]:
    """`_cjk_terms` with the parts a search must also match: jieba's search-mode sub-words of a long word
    ("篮球比赛" also gives 篮球, 比赛) and one-character words that carry content (狗, 猫, 茶, 书)."""
    return [
        w for w in _jieba().lcut_for_search(run)
        if w not in STOP_WORDS and (len(w) >= 2 or w not in ZH_STOP_CHARS)
    ]


def terms(text: str, *, stem: bool = True, parts: bool = False) -> list[str]:
    """Keyword terms of `text` in order, with repeats.

    NFKC-normalised (full-width letters become ASCII), lower-cased; Chinese runs segmented by
    jieba; 1-character tokens and stop words dropped; English words stemmed (`_normalise_word`). With
    `stem=False`, English words keep their form bar a plural ``s``: words to show (tags) or to find in a text.
    With `parts`, Chinese runs also give their parts (`_cjk_parts`): the keyword index's terms (`keyword_terms`).
    """
    if not text:
        return []
    text = unicodedata.normalize("NFKC", text).lower()
    cjk_terms = _cjk_parts if parts else _cjk_terms
    out: list[str] = []
    for m in _RUN.finditer(text):
        cjk = m.group("cjk")
        out.extend(cjk_terms(cjk) if cjk is not None else _word_terms(m.group("word"), stem))
    return out


def keyword_terms(text: str) -> list[str]:
    """The terms the keyword channel indexes and searches: `terms` with Chinese words' parts."""
    return terms(text, parts=True)


def term_counts(text: str) -> Counter[str]:
    """Term frequencies of `text`."""
    return Counter(terms(text))


def keyword_counts(text: str) -> Counter[str]:
    """Frequencies of `keyword_terms`: a document's postings in the keyword index."""
    return Counter(keyword_terms(text))


def has_cjk(text: str) -> bool:
    """Whether `text` contains a CJK ideograph."""
    return _HAS_CJK.search(text) is not None


# --- BM25 -----------------------------------------------------------------------------------------


def bm25_idf(n_docs: int, df: int) -> float:
    """BM25 inverse document frequency, Lucene/Okapi form ``ln(1 + (N - df + 0.5) / (df + 0.5))``.

    Always positive; decreases as `df` grows.
    """
    if n_docs < 0 or df < 0:
        raise ValueError("n_docs and df must be non-negative")
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


def bm25_term_score(
    tf: float, doc_len: float, avg_len: float, idf: float, k1: float = 1.2, b: float = 0.75
) -> float:
    """One term's BM25 contribution: ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * doc_len / avg_len))``."""
    if tf <= 0:
        return 0.0
    norm = 1.0 - b + b * (doc_len / avg_len) if avg_len > 0 else 1.0
    return idf * tf * (k1 + 1.0) / (tf + k1 * norm)


def bm25_scores(
    query_terms: Iterable[str], docs: Mapping[str, Counter[str]], k1: float = 1.2, b: float = 0.75
) -> dict[str, float]:
    """In-memory BM25 over `docs` (id -> term counts); every doc id is returned, non-matching ones with 0.

    Each distinct query term counts once (repeats in the query do not add weight).
    """
    if not docs:
        return {}
    lengths = {doc_id: sum(counts.values()) for doc_id, counts in docs.items()}
    avg_len = sum(lengths.values()) / len(docs)
    scores = dict.fromkeys(docs, 0.0)
    for term in dict.fromkeys(query_terms):
        df = sum(1 for counts in docs.values() if counts.get(term, 0) > 0)
        if df == 0:
            continue
        idf = bm25_idf(len(docs), df)
        for doc_id, counts in docs.items():
            tf = counts.get(term, 0)
            if tf:
                scores[doc_id] += bm25_term_score(tf, lengths[doc_id], avg_len, idf, k1, b)
    return scores


# --- TF-IDF and similarity ------------------------------------------------------------------------


def tfidf_top_terms(texts: list[str], top_k: int = 8, *, stem: bool = True) -> list[list[tuple[str, float]]]:
    """Per text, its `top_k` terms (`terms` with `stem`) by TF-IDF (sublinear tf, fitted on `texts`), weights
    rounded to 4 places.

    Ordered by weight descending, then term; terms with zero weight are omitted.
    """
    if not texts:
        return []
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(analyzer=functools.partial(terms, stem=stem), sublinear_tf=True)
    try:
        matrix = vectorizer.fit_transform(texts).tocsr()
    except ValueError:  # empty vocabulary: no text has any term
        return [[] for _ in texts]
    vocab = vectorizer.get_feature_names_out()
    result: list[list[tuple[str, float]]] = []
    for row in range(matrix.shape[0]):
        span = slice(matrix.indptr[row], matrix.indptr[row + 1])
        cols, weights = matrix.indices[span], matrix.data[span]
        pairs = [(str(vocab[j]), float(w)) for j, w in zip(cols, weights, strict=True)]
        pairs.sort(key=lambda p: (-p[1], p[0]))
        result.append([(t, round(w, 4)) for t, w in pairs[:top_k] if w > 0])
    return result


def char_bigrams(text: str) -> set[str]:
    """Character bigrams of `text` (NFKC, lower-cased, whitespace removed); the single char if length 1."""
    s = "".join(unicodedata.normalize("NFKC", text).lower().split())
    if len(s) < 2:
        return {s} if s else set()
    return {s[i : i + 2] for i in range(len(s) - 1)}


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the term sets of `a` and `b`.

    Falls back to character bigrams when either term set is empty; two texts with nothing
    comparable are 1.0 if their normalised forms are equal (e.g. both empty), else 0.0.
    """
    return jaccard_sets(term_set(a), term_set(b), a, b)


@functools.lru_cache(maxsize=8192)
def term_set(text: str) -> frozenset[str]:
    """The set of terms of `text` (what `jaccard` compares); cached, as the same memories come back
    build after build (segmenting one costs ~0.1 ms)."""
    return frozenset(terms(text))


def jaccard_sets(sa: frozenset[str], sb: frozenset[str], a: str, b: str) -> float:
    """`jaccard(a, b)` given the precomputed term sets of a and b."""
    if not sa or not sb:
        sa, sb = frozenset(char_bigrams(a)), frozenset(char_bigrams(b))
    if not sa and not sb:
        return 1.0 if a.strip() == b.strip() else 0.0
    shared = len(sa & sb)  # the union's size without building it
    return shared / (len(sa) + len(sb) - shared)
