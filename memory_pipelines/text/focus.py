"""Focus a long query (a dialogue or a long prompt) on what it asks now.

A query that is a whole dialogue, or a long prompt, would be embedded as one blur of every topic it
touched (and the local model reads only its first 512 tokens), and its keyword terms would count the
topic of the first turn as much as the last one's. `focus` splits such a query into turns and keeps:

- `embed_text`: a dialogue's last turn (filler turns such as "thanks!" or "哈哈" skipped), with the turns
  before it only while it does not say enough by itself (`CONTEXT_TERMS`), or all that fit when it names no
  thing its topic could be (`names_a_thing`: "我特别期待那天晚上，我想让它变得很特别！" after turns about a magic
  show), within `EMBED_BUDGET` tokens; a turn or a single-block prompt longer than the budget is cut to its
  last sentences that fit;
- `term_weights`: the keyword terms of every turn weighted by recency — the last turn 1.0, each earlier
  one `DECAY` times the next, never below `FLOOR`; a term takes its highest weight; filler words
  (greetings, acknowledgements, chit-chat, in English and Chinese) dropped besides the stop words.

A short query (under `SHORT_TOKENS` tokens), and any query that is one turn within the budget, is left
as it is: `embed_text` is the query and every term weighs 1.0, as without focusing; only its lines' role labels
("User:") and the past times it names relative to when it was asked ("yesterday", 上个月) are not keyword terms.

Pure; `focus` is cached (one context build asks for the same query's focus several times).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .keywords import has_cjk, keyword_terms, terms, word_forms, zh_dictionary_tag, zh_word_tags
from .times import without_relative_past
from .tokens import count_tokens, truncate_to_tokens

SHORT_TOKENS = 40
"""Below this many tokens (cl100k_base) a query is one turn and left untouched."""
EMBED_BUDGET = 128
"""Tokens of the focused text that is embedded: well inside multilingual-e5's 512-token window (cl100k counts
Chinese and English at least as densely as e5's XLM-R vocabulary, so 128 here is under ~200 there)."""
DECAY = 0.6
"""Each turn before the last weighs this much of the next one's weight..."""
FLOOR = 0.2
"""...but never less than this: an early turn still says something about the topic."""
CONTEXT_TERMS = 3
"""A dialogue's last turn with this many distinct terms says what it asks by itself and is embedded alone;
a shorter one ("and the second one?") is embedded with the turns before it until the text has as many."""

THING_TAGS = frozenset({"n", "nr", "ns", "nt", "nz", "nw", "nrt", "nrfg", "vn", "an", "s", "eng"})
"""jieba's part-of-speech tags of words that name a thing: nouns (people, places, organisations, other proper and
common ones), verbal and adjectival nouns, place words, English words in Chinese text."""
_MISTAGGED = frozenset({"谢谢", "我会", "试试"})  # jieba tags them nr, n, vn: "thanks", "I will", "try it"

_GENERIC = """
    be am is are was were been being have has had do does did done go goes going went gone get gets got make made
    take took want wanted like liked love loved think thought know knew feel felt look looking looked see saw seen
    come came need needed try tried hope wish wait say said tell told talk talked let give gave keep kept put find
    found seem mean meant guess believe sound sounded happen happened start started finish finished enjoy enjoyed
    help helped can cannot won ll ve re don didn doesn isn wasn aren weren haven hasn couldn wouldn shouldn
    good great nice fine happy glad excited exciting fun funny hard easy new old big small little amazing beautiful
    wonderful special best better bad worse worst fantastic incredible favorite favourite busy tired ready real
    important different same whole full long short early late next last first
    really very so too also just still always never ever often sometimes usually probably maybe perhaps actually
    definitely totally absolutely quite pretty much more most less least soon later already again forward back
    together even only though almost enough
    day days night nights time times week weekend morning evening afternoon today tonight tomorrow yesterday moment
    year month thing things stuff something anything everything nothing someone anyone everyone one way lot lots bit
    kind sort part idea place people everybody
"""
GENERIC_WORDS: frozenset[str] = word_forms(_GENERIC)
"""Common English verbs (and the pieces of their contractions: I'll, don't), adjectives, adverbs and time or
placeholder nouns: an English turn of only these (and filler) names nothing its topic could be ("I'm really
looking forward to that night, I want to make it very special!"). No tagger reads English here: this list stands
for the parts of speech jieba's tags tell apart in Chinese (`THING_TAGS`)."""

_FILLER = """
    hi hello hey hiya howdy yo thank thanks thx ty tysm cheers yeah yea yep yup nope nah ok okay
    lol lmao rofl haha hahaha hehe hah heh ha sure awesome wow oh ooh ah ahh uh uhh um umm hmm hm
    mm bye goodbye please pls plz sorry alright np btw anyway anyways
    嗨 你好 您好 哈喽 嘿 谢谢 多谢 感谢 谢啦 谢谢你 哈哈 哈哈哈 呵呵 嘿嘿 嘻嘻 嗯 嗯嗯 好的 好吧 好滴 对的 是的
    没问题 拜拜 再见 哦哦 噢噢 收到 明白 知道了 辛苦 辛苦了 不客气 请问 好嘞 行吧 啊啊
"""
FILLER_WORDS: frozenset[str] = word_forms(_FILLER)
"""Greetings, acknowledgements and chit-chat: they say nothing about what is asked (after `terms`'s own
normalisation: lower case and stemmed, so "thanks" arrives as "thank"; the set holds both forms)."""
_SOFT_FILLER = """
    cool great nice good fine right well perfect interesting amazing lovely true exactly indeed gotcha
    不错 太好了 厉害 真棒 棒棒 好厉害 有意思 确实 原来如此 原来 这样啊
"""
SOFT_FILLER_WORDS: frozenset[str] = word_forms(_SOFT_FILLER)
"""Words that are chit-chat in a turn of nothing else ("haha ok cool") but may be content elsewhere ("a cool
place", "Great Wall"): a turn of only filler and these is dropped, otherwise they stay terms."""
_LAUGH = re.compile(r"(?:ha|he|hi)+h?|l+o+l+|(?:哈|呵|嘿|嘻)+")

# A speaker prefix at the start of a line: "User:", "AI:", "Dr. Smith:", "用户：", "助手：" (not "http://").
_SPEAKER = re.compile(r"^[ \t]*(?:[A-Za-z][\w .'-]{0,30}?|[\u4e00-\u9fff]{1,8})[ \t]*[:：](?!//)")
_ROLES = r"(?:user|human|ai|assistant|bot|system|agent|用户|助手|人类|机器人|系统)"
# A role label of a dialogue written on one line: "... AI: ...", "…。助手：…" (two at least).
_INLINE_ROLE = re.compile(
    r"(?:^|(?<=\s)|(?<=[。！？.!?]))(?=(?:user|human|ai|assistant|用户|助手)[ \t]*[:：](?!//))", re.IGNORECASE
)
# A leading role label, whose words ("user", "ai", "助手") are not keyword terms.
_ROLE_LABEL = re.compile(rf"^[ \t]*{_ROLES}[ \t]*[:：](?!//)[ \t]*", re.IGNORECASE)
# The same label starting any line of a short query ("User: hi\nBot: ..."): who speaks, not what is asked.
_LINE_ROLE_LABELS = re.compile(_ROLE_LABEL.pattern, re.IGNORECASE | re.MULTILINE)
_BLANK = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*")
_CLAUSE_END = re.compile(r"(?<=[,;:])\s+|(?<=[，；：、])\s*")


@dataclass(frozen=True)
class Focused:
    """What is embedded and which keyword terms count how much; `long` when the query was focused."""

    embed_text: str
    term_weights: dict[str, float]
    long: bool


def _prefixed_lines(lines: list[str]) -> bool:
    """Whether two or more of `lines` start with a speaker prefix."""
    return sum(1 for line in lines if _SPEAKER.match(line)) >= 2


def _inline_roles(text: str) -> bool:
    """Whether `text` holds two or more role labels written on one line ("... AI: ...")."""
    return len(_INLINE_ROLE.findall(text)) >= 2


def is_dialogue(text: str) -> bool:
    """Whether `text` holds two or more speakers' lines ("User: ...\nAI: ...", or one line with two role labels)."""
    return _prefixed_lines(text.split("\n")) or _inline_roles(text)


def split_turns(query: str) -> list[str]:
    """The turns of a dialogue (prefixed lines, else blank-line blocks, else lines), or the sentences of a
    single-block prompt over `EMBED_BUDGET` tokens. A query under `SHORT_TOKENS` tokens, or one block within
    the budget, is one turn: ``[query]`` exactly."""
    return _split(query)[0]


def _split(query: str) -> tuple[list[str], bool]:
    """The turns, and whether they are a dialogue's (else a single message's sentences, or the query)."""
    if not query.strip() or count_tokens(query) < SHORT_TOKENS:
        return [query], False
    turns = _dialogue_turns(query.replace("\r\n", "\n").replace("\r", "\n"))
    if len(turns) > 1:
        return turns, True
    if count_tokens(query) <= EMBED_BUDGET:
        return [query], False
    return sentences(query), False


def _dialogue_turns(text: str) -> list[str]:
    lines = text.split("\n")
    if _prefixed_lines(lines):
        turns: list[str] = []
        for line in lines:
            if _SPEAKER.match(line) or not turns:
                turns.append(line)
            else:
                turns[-1] += "\n" + line  # a message of several lines
        return _clean(turns)
    blocks = _clean(_BLANK.split(text))
    if len(blocks) > 1:
        return blocks
    if len(_clean(lines)) > 1:
        return _clean(lines)
    if _inline_roles(text):
        return _clean(_INLINE_ROLE.split(text))
    return [text]


def _clean(parts: list[str]) -> list[str]:
    return [p.strip() for p in parts if p.strip()]


def sentences(text: str) -> list[str]:
    """`text` cut after English . ! ? (before a space) and Chinese 。！？."""
    return _clean(_SENTENCE_END.split(text)) or [text]


def is_filler(term: str) -> bool:
    """A greeting, an acknowledgement, a laugh."""
    return term in FILLER_WORDS or _LAUGH.fullmatch(term) is not None


def _turn_terms(turn: str, parts: bool = False) -> list[str]:
    """The turn's terms without filler (none at all for a turn of chit-chat), its role label left out; with
    `parts`, the keyword channel's terms (`keyword_terms`)."""
    words = [t for t in terms(_ROLE_LABEL.sub("", turn, count=1), parts=parts) if not is_filler(t)]
    return [] if all(t in SOFT_FILLER_WORDS for t in words) else words


def focus(query: str) -> Focused:
    """The focused form of `query` (see the module docstring). Returns a fresh `term_weights` dict."""
    f = _focus(query)
    return Focused(f.embed_text, dict(f.term_weights), f.long)


@functools.lru_cache(maxsize=256)
def _focus(query: str) -> Focused:
    turns, dialogue = _split(query)
    if not dialogue and count_tokens(query) <= EMBED_BUDGET:
        return Focused(query, dict.fromkeys(keyword_terms(_keyword_text(query)), 1.0), False)
    kept = [(turn, words) for turn in turns if (words := _turn_terms(turn))]
    if not kept:  # nothing but filler: keep the last turn as it is
        kept = [(turns[-1], terms(turns[-1]))]
    weights: dict[str, float] = {}
    for age, (turn, _) in enumerate(reversed(kept)):
        weight = max(FLOOR, DECAY**age)
        # the turns' words decide what is embedded (`_dialogue_text`); the keyword channel's terms are weighted
        for term in _turn_terms(turn, parts=True) or keyword_terms(turn):
            if weight > weights.get(term, 0.0):
                weights[term] = weight
    text = _dialogue_text(kept) if dialogue else cut_to_budget(query.strip())
    return Focused(text, weights, True)


def _keyword_text(query: str) -> str:
    """What of a short query the keyword channel reads: not its lines' role labels (who speaks), nor the past times
    it names relative to when it was asked ("yesterday", 上个月: a memory of that time says "today", and one holding
    the same words means another time; the search's date prior reads them instead)."""
    return without_relative_past(_LINE_ROLE_LABELS.sub("", query))


def names_a_thing(turn: str) -> bool:
    """Whether a turn names something its topic could be: for a Chinese turn, a word jieba tags as one
    (`THING_TAGS`); "我特别期待那天晚上，我想让它变得很特别！" names none (那天 and 它 point back, 晚上 is a
    time). Any other turn, a word outside `GENERIC_WORDS` and filler: "I'm really looking forward to that night"
    names none, "I'm going to Paris next week" names Paris."""
    body = _ROLE_LABEL.sub("", turn, count=1)
    if not has_cjk(body):
        return any(t not in GENERIC_WORDS and t not in SOFT_FILLER_WORDS for t in _turn_terms(body))
    return any(_a_thing(word, tag) for word, tag in zh_word_tags(body))


def _a_thing(word: str, tag: str) -> bool:
    """Whether a tagged word names a thing: a `THING_TAGS` word, or a set phrase holding one (吃火锅: 火锅); not a
    word jieba's dictionary mistags (谢谢 as a name, 我会 as a noun, 试试 as a verbal noun)."""
    if word in _MISTAGGED:
        return False
    if tag in THING_TAGS:
        return True
    return tag in ("l", "i") and any(zh_dictionary_tag(word[i:j]) in THING_TAGS
                                     for i in range(len(word)) for j in range(i + 2, len(word) + 1))


def _dialogue_text(kept: list[tuple[str, list[str]]], budget: int = EMBED_BUDGET) -> str:
    """The last turn (cut to the budget when longer), with the turns before it, newest first, while it has
    fewer than `CONTEXT_TERMS` distinct terms, or (a last turn that names no thing) while they fit in the budget."""
    chosen: list[str] = []
    seen: set[str] = set()
    used = 0
    vague = len(kept) > 1 and not names_a_thing(kept[-1][0])
    for turn, words in reversed(kept):
        cost = count_tokens(turn) + (1 if chosen else 0)
        if used + cost > budget:
            if not chosen:
                return cut_to_budget(turn, budget)
            break
        chosen.append(turn)
        used += cost
        seen.update(words)
        if len(seen) >= CONTEXT_TERMS and not vague:
            break
    return "\n".join(reversed(chosen))


def cut_to_budget(text: str, budget: int = EMBED_BUDGET) -> str:
    """`text` if it fits in `budget` tokens; else its last sentences that fit, else its last sentence's last
    clauses (cut after , ; : ， ； ： 、) that fit, else the start of its last clause cut to the budget."""
    if count_tokens(text) <= budget:
        return text
    last = sentences(text)[-1]
    clauses = _clean(_CLAUSE_END.split(last)) or [last]
    return (
        _last_fitting(sentences(text), budget, " ")
        or _last_fitting(clauses, budget, " ")
        or truncate_to_tokens(clauses[-1], budget)
    )


def _last_fitting(parts: list[str], budget: int, sep: str) -> str:
    """The last of `parts` whose join fits in `budget` tokens ("" when the last alone does not)."""
    chosen: list[str] = []
    used = 0
    for part in reversed(parts):
        cost = count_tokens(part) + (1 if chosen else 0)
        if used + cost > budget:
            break
        chosen.append(part)
        used += cost
    return sep.join(reversed(chosen))
