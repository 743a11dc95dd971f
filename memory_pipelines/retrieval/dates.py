"""A question that names a time prefers what happened then: a soft date prior.

"When did Melanie go camping in June?", "What did I cook last week?", "我上个月去哪儿旅游了？": the time named
is evidence about which memory answers, which neither channel reads (a turn of a June session rarely says
"June"). So when a short question names a time (`text/times.spans`, resolved against when it is asked: the
search's as-of time, else now), a candidate written in that span, or telling of a time inside it ("we went
camping yesterday", resolved against its own date), scores × (1 + DATE_BOOST): a preference, not a filter, since
the memory may have been written long after the event. The memories of a narrow named time are also read on
their own (`span_filters`; `search._memories_in_spans`), so one that better-worded memories of other months pushed
out of the candidates still competes. A question naming no time, and a long query (a
dialogue, whose times describe its own moment rather than what it asks for), are left as they are.

On locomo_dev, 113 of the 116 gold turns of questions naming a month are dated in that month, where 36 % of
hybrid's top ten were (docs/retrieval-quality.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ..text.keywords import keyword_terms, word_forms
from ..text.times import Span, spans, without_times
from .filters import SearchFilters
from .fusion import rescored

DATE_BOOST = 0.25
# Words that ask what happened, besides the time: a question holding no other term asks only about its time.
_HAPPENED = word_forms("""
    tell told say said talk chat discuss do did happen remember mention plan planned schedule
    聊 聊天 说 讲 谈 提到 发生 做 干 记得 那天 那时 事 事情 经历 过得 安排 计划
""")
TOLD_TOP = 30  # the candidates whose own texts are read for times: reading one costs 25-250 µs
TOLD_CHARS = 1_000  # of a long text only the start is read: the bound on a long document's cost


def in_span(hit: Any, asked: Sequence[Span], read_text: bool = True) -> bool:
    """Whether the hit was written in one of the spans, or (`read_text`) tells of a time, resolved against its
    date, inside one."""
    return _placed(hit, asked, read_text) is not None


def _placed(hit: Any, asked: Sequence[Span], read_text: bool = True) -> str | None:
    """"written" when the hit was written in one of the spans, "told" when (`read_text`) it tells of a time inside
    one ("tomorrow" in a memory of the day before), else None."""
    written = getattr(hit, "created_at", None)
    if written is None:
        return None
    if any(s.holds(written) for s in asked):
        return "written"
    told = spans((hit.text or "")[:TOLD_CHARS], written) if read_text else []
    return "told" if any(t.within(a) for t in told for a in asked) else None


def dated(ranked: Sequence[Any], asked: Sequence[Span], boost: float = DATE_BOOST, first: bool = False) -> list[Any]:
    """`ranked` with the hits `in_span` of the question's spans scored × (1 + boost), re-sorted; with `first` (a
    question only about its time: `asks_only_when`) those written then also take the best other hit's score on top,
    so they all rank before the rest, in their own order ("What did we talk about on May 3?" is answered by that
    day's exchanges; one of May 2 that says "talk to you tomorrow" only tells of it, and keeps the × boost alone;
    when nothing was written then yet, "What is planned for tomorrow?", the memories announcing it lead).
    The texts of the first TOLD_TOP only are read for times. Pure."""
    if not asked:
        return list(ranked)
    placed = [_placed(h, asked, read_text=i < TOLD_TOP) for i, h in enumerate(ranked)]
    # the memories written then lead; none written yet (tomorrow, next week), those announcing it do
    leader = "written" if "written" in placed else "told"
    lead = max((h.score for h, p in zip(ranked, placed, strict=True) if p != leader), default=0.0) if first else 0.0
    out = [rescored(h, score=h.score * (1.0 + boost) + (lead if p == leader else 0.0),
                    extra={**(h.extra or {}), "date_prior": 1.0 + boost})
           if p else h for h, p in zip(ranked, placed, strict=True)]
    return sorted(out, key=lambda h: (-h.score, h.source, h.id))


def asked_spans(query: str, long: bool, now: datetime) -> list[Span]:
    """The spans a question names, resolved against `now`; none for a long query (`text/focus.Focused.long`)."""
    return [] if long else spans(query, now)


def span_filters(f: SearchFilters, asked: Sequence[Span], now: datetime) -> list[SearchFilters]:
    """`f` narrowed to each span (within its own as-of time and time range); a span outside them is dropped."""
    latest = f.as_of or now
    earliest = latest - timedelta(days=f.time_range_days) if f.time_range_days is not None else None
    out = []
    for span in asked:
        start = max(span.start, earliest) if earliest is not None else span.start
        end = min(span.end, latest)
        if end > start:
            out.append(replace(f, as_of=end, time_range_days=(end - start).total_seconds() / 86400))
    return out


def asks_only_when(query: str, now: datetime) -> bool:
    """Whether the question asks only what happened at the time it names: no term beyond the time and
    `_HAPPENED` ("What did we talk about on May 3?", "昨天发生了什么？"). Its channels' scores then say next to
    nothing about which memory answers: the memories of that time do."""
    return all(t in _HAPPENED for t in keyword_terms(without_times(query, now)))
