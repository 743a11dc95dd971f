"""Time expressions (text/times.py) and the date prior of search (retrieval/dates.py): a question naming a time
prefers what was written, or tells of, that time; a question naming none, and a dialogue, are left as they are."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from memory_pipelines.retrieval import search as search_module
from memory_pipelines.retrieval.dates import (
    DATE_BOOST,
    asked_spans,
    asks_only_when,
    dated,
    in_span,
    span_filters,
)
from memory_pipelines.retrieval.filters import SearchFilters
from memory_pipelines.retrieval.search import search
from memory_pipelines.store.ingest import ingest_memory
from memory_pipelines.text.times import spans, without_relative_past, without_times

ASKED = datetime(2023, 7, 12, 10, 30, tzinfo=UTC)  # a Wednesday


def days(text: str, anchor: datetime = ASKED) -> list[tuple[str, str]]:
    return [(s.start.date().isoformat(), s.end.date().isoformat()) for s in spans(text, anchor)]


@pytest.mark.parametrize(("text", "expected"), [
    ("What did I do yesterday?", [("2023-07-11", "2023-07-12")]),
    ("the day before yesterday", [("2023-07-10", "2023-07-11")]),
    ("What did we cook last week?", [("2023-07-03", "2023-07-10")]),
    ("the past week", [("2023-07-03", "2023-07-10")]),
    ("the previous month", [("2023-06-01", "2023-07-01")]),
    ("last weekend", [("2023-07-08", "2023-07-10")]),
    ("last Monday", [("2023-07-10", "2023-07-11")]),
    ("last Wednesday", [("2023-07-05", "2023-07-06")]),  # strictly before the day asked
    ("three weeks ago", [("2023-06-18", "2023-06-25")]),
    ("2 days ago", [("2023-07-09", "2023-07-12")]),
    ("a month ago", [("2023-06-01", "2023-07-01")]),
    ("When did Melanie go camping in June?", [("2023-06-01", "2023-07-01")]),
    ("in December", [("2022-12-01", "2023-01-01")]),  # the latest December at or before the question
    ("What did she paint in July 2023?", [("2023-07-01", "2023-08-01")]),
    ("on 8 May 2023", [("2023-05-08", "2023-05-09")]),
    ("June 8th, 2022", [("2022-06-08", "2022-06-09")]),
    ("2023-05-08", [("2023-05-08", "2023-05-09")]),
    ("2023/5/8", [("2023-05-08", "2023-05-09")]),
    ("2023-05-08我读了什么书", [("2023-05-08", "2023-05-09")]),  # digits touching Chinese: no word boundary
    ("on 2023.05.08.", [("2023-05-08", "2023-05-09")]),
    ("the week before last", [("2023-06-26", "2023-07-03")]),
    ("the month before last", [("2023-05-01", "2023-06-01")]),
    ("in 2022", [("2022-01-01", "2023-01-01")]),
    ("last year", [("2022-01-01", "2023-01-01")]),
    ("我上个月去哪儿旅游了？", [("2023-06-01", "2023-07-01")]),
    ("昨天晚上吃了什么", [("2023-07-11", "2023-07-12")]),
    ("上周三", [("2023-07-05", "2023-07-06")]),
    ("上周末", [("2023-07-08", "2023-07-10")]),
    ("三个月前", [("2023-04-01", "2023-05-01")]),
    ("两周前", [("2023-06-25", "2023-07-02")]),
    ("去年", [("2022-01-01", "2023-01-01")]),
    ("2022年5月", [("2022-05-01", "2022-06-01")]),
    ("五月份", [("2023-05-01", "2023-06-01")]),
    ("5月8号", [("2023-05-08", "2023-05-09")]),
    ("十二月二十五日", [("2022-12-25", "2022-12-26")]),
    ("last summer", [("2022-06-01", "2022-09-01")]),  # this one has not ended yet
    ("during the summer", [("2023-06-01", "2023-09-01")]),
    ("in winter 2021", [("2021-12-01", "2022-03-01")]),
    ("this weekend", [("2023-07-15", "2023-07-17")]),
    ("on Monday", [("2023-07-10", "2023-07-11")]),
    ("周三我去了哪儿", [("2023-07-12", "2023-07-13")]),  # the latest Wednesday: today
    ("前几天", [("2023-07-05", "2023-07-13")]),
    ("去年夏天", [("2022-06-01", "2022-09-01")]),
    ("2022年冬天", [("2022-12-01", "2023-03-01")]),
    ("这周末", [("2023-07-15", "2023-07-17")]),
    ("What did we do on Christmas?", [("2022-12-24", "2022-12-27")]),  # the latest at or before the question
    ("What did Caroline cook for Thanksgiving 2021?", [("2021-11-25", "2021-11-26")]),  # the fourth Thursday
    ("New Year's Eve", [("2022-12-31", "2023-01-01")]),
    ("the Fourth of July", [("2023-07-04", "2023-07-05")]),  # a holiday, not the month
    ("五一假期我去了哪里", [("2023-05-01", "2023-05-06")]),
    ("2022年国庆节", [("2022-10-01", "2022-10-08")]),
    ("圣诞节", [("2022-12-24", "2022-12-27")]),
    # moving holidays: the nth weekday of a month, Easter, the lunisolar festivals (text/lunar_dates.py)
    ("Mother's Day", [("2023-05-14", "2023-05-15")]),
    ("Memorial Day", [("2023-05-29", "2023-05-30")]),  # the last Monday of May
    ("Labor Day", [("2022-09-05", "2022-09-06")]),  # this year's is still to come
    ("Easter 2024", [("2024-03-31", "2024-04-01")]),
    ("Chinese New Year", [("2023-01-21", "2023-01-29")]),  # from its eve, the holiday week
    ("去年春节", [("2022-01-31", "2022-02-08")]),
    ("2021年的中秋节", [("2021-09-21", "2021-09-22")]),
    ("端午节", [("2023-06-22", "2023-06-23")]),
    ("清明节", [("2023-04-05", "2023-04-06")]),
    ("前年国庆节", [("2021-10-01", "2021-10-08")]),
    ("2050年春节", [("2050-01-01", "2051-01-01")]),  # past the lunisolar table's years: the year alone
    # parts of a month (thirds) and of a year
    ("early June", [("2023-06-01", "2023-06-11")]),
    ("mid-May", [("2023-05-11", "2023-05-21")]),
    ("the end of last month", [("2023-06-21", "2023-07-01")]),
    ("late last year", [("2022-09-01", "2023-01-01")]),
    ("5月初", [("2023-05-01", "2023-05-11")]),
    ("五月中旬", [("2023-05-11", "2023-05-21")]),
    ("上个月底", [("2023-06-21", "2023-07-01")]),
    ("5月中国队比赛", [("2023-05-01", "2023-06-01")]),  # 中国, not the middle of May
    ("去年年底", [("2022-09-01", "2023-01-01")]),
    ("今年上半年", [("2023-01-01", "2023-07-01")]),
    # a few days, half a month or a year
    ("the other day", [("2023-07-05", "2023-07-13")]),
    ("a couple weeks ago", [("2023-06-25", "2023-07-02")]),
    ("几天前", [("2023-07-05", "2023-07-13")]),
    ("前两天", [("2023-07-05", "2023-07-13")]),
    ("两天前", [("2023-07-09", "2023-07-12")]),  # a number of days: a day either side
    ("半个月前", [("2023-06-22", "2023-07-02")]),
    ("a fortnight ago", [("2023-06-25", "2023-07-02")]),
    ("this past weekend", [("2023-07-08", "2023-07-10")]),
    # a month or a day of a year named beside it: one span, that year's (not the year and the latest such month)
    ("去年三月我学了什么", [("2022-03-01", "2022-04-01")]),
    ("今年3月", [("2023-03-01", "2023-04-01")]),
    ("去年的12月25号", [("2022-12-25", "2022-12-26")]),
    ("前年五月初", [("2021-05-01", "2021-05-11")]),
    ("上个月5号", [("2023-06-05", "2023-06-06")]),
    ("What did I do in March last year?", [("2022-03-01", "2022-04-01")]),
    ("last year in August", [("2022-08-01", "2022-09-01")]),
    ("5 March of last year", [("2022-03-05", "2022-03-06")]),
    ("June this year", [("2023-06-01", "2023-07-01")]),
    ("我去年三个月都在出差", [("2022-01-01", "2023-01-01")]),  # 三个月 is a duration, not March
    # the same days a year before; a day of the month alone; ahead, for plans
    ("去年这个时候我在哪", [("2022-06-28", "2022-07-27")]),
    ("this time last year", [("2022-06-28", "2022-07-27")]),
    ("3号那天我做了什么", [("2023-07-03", "2023-07-04")]),
    ("on the 20th", [("2023-06-20", "2023-06-21")]),  # the latest 20th at or before the question
    ("坐3号线去公司", []),  # a metro line
    ("tomorrow", [("2023-07-13", "2023-07-14")]),
    ("明天有什么安排", [("2023-07-13", "2023-07-14")]),
    ("后天", [("2023-07-14", "2023-07-15")]),
    ("先天和后天", []),  # innate and acquired
    ("下周三", [("2023-07-19", "2023-07-20")]),
    ("next week", [("2023-07-17", "2023-07-24")]),
    ("下个月", [("2023-08-01", "2023-09-01")]),
    ("next weekend", [("2023-07-22", "2023-07-24")]),
    ("明年", [("2024-01-01", "2025-01-01")]),
    ("next to the window", []),
    ("这周一", [("2023-07-10", "2023-07-11")]),  # that day of this week, not the whole week
    ("本周五", [("2023-07-14", "2023-07-15")]),
    ("over the weekend", [("2023-07-08", "2023-07-10")]),
    ("the weekend before last", [("2023-07-01", "2023-07-03")]),
    ("this past Monday", [("2023-07-10", "2023-07-11")]),
    ("the night before last", [("2023-07-10", "2023-07-11")]),
    # three years back; a year and a half; "back" for "ago"; a while ago, vaguer than a few days
    ("大前年", [("2020-01-01", "2021-01-01")]),  # not 前年 inside it
    ("大前年的春节", [("2020-01-24", "2020-02-01")]),  # from its eve
    ("大前年夏天", [("2020-06-01", "2020-09-01")]),
    ("a year and a half ago", [("2021-11-01", "2022-04-01")]),
    ("一年半前", [("2021-11-01", "2022-04-01")]),
    ("three months back", [("2023-04-01", "2023-05-01")]),
    ("a month or so ago", [("2023-06-01", "2023-07-01")]),
    ("several days ago", [("2023-07-07", "2023-07-10")]),
    ("a while ago", [("2023-05-13", "2023-07-05")]),
    ("前段时间我换了工作", [("2023-05-13", "2023-07-05")]),
    ("前阵子", [("2023-05-13", "2023-07-05")]),
    ("前些天", [("2023-07-05", "2023-07-13")]),
    ("end of last month", [("2023-06-21", "2023-07-01")]),
    ("at the beginning of May", [("2023-05-01", "2023-05-11")]),
])
def test_expressions_resolve_against_the_anchor(text, expected):
    assert days(text) == expected


@pytest.mark.parametrize("text", [
    "May I ask you something?",  # the verb, not the month
    "Jan went home early.",  # a name
    "I stayed for three months.",
    "我在那里住了三个月",  # a duration, not March
    "What do you like to paint?",
    "2000 steps a day",
    "version 1.2023.05.08",
    "2023-13-45",
    "a new year begins",  # not the holiday
    "我头脑很清明",  # clear-headed, not the festival
    "我们吃了元宵",  # the dumplings
    "眼前一段路很难走",  # a stretch of road ahead
    "前一天我去了",  # the day before some other day
    "I'll be back in a while",
    "I went back to school",
])
def test_words_that_are_not_times_name_none(text):
    assert spans(text, ASKED) == []


def test_a_date_that_does_not_exist_names_nothing():
    assert spans("February 30", ASKED) == []
    assert spans("2月30日", ASKED) == []


@dataclass
class H:
    id: str
    score: float
    created_at: datetime | None
    text: str = ""
    source: str = "memory"
    extra: dict = field(default_factory=dict)


def test_dated_prefers_what_was_written_or_told_in_the_span_without_filtering():
    june = spans("in June", ASKED)
    ranked = [
        H("may-strong", 0.70, datetime(2023, 5, 20, tzinfo=UTC), "We went camping at the lake."),
        H("june", 0.60, datetime(2023, 6, 3, tzinfo=UTC), "We went camping at the lake."),
        H("told", 0.58, datetime(2023, 7, 1, tzinfo=UTC), "We went camping yesterday, so much fun."),
        H("july", 0.59, datetime(2023, 7, 2, tzinfo=UTC), "Camping is fun."),
        H("undated", 0.57, None),
    ]
    out = dated(ranked, june)
    assert [h.id for h in out] == ["june", "told", "may-strong", "july", "undated"]
    assert out[0].score == pytest.approx(0.60 * (1 + DATE_BOOST))
    assert out[2].score == 0.70 and ranked[1].score == 0.60  # the rest untouched; pure
    # A broad time told in a memory ("this year") is not inside June: no preference.
    assert not in_span(H("broad", 0.5, datetime(2023, 7, 2, tzinfo=UTC), "this year was great"), june)
    assert dated(ranked, []) == ranked


def test_a_dialogue_query_names_no_time_for_the_prior():
    dialogue = "User: I logged my water intake yesterday.\nAI: Great!\nUser: " + "What next? " * 20
    assert asked_spans("What did I log yesterday?", long=False, now=ASKED)
    assert asked_spans(dialogue, long=True, now=ASKED) == []


def remember(pool, embedder, owner: str, text: str, when: datetime) -> str:
    """A memory written at `when`."""
    return ingest_memory(pool, embedder, None, owner, content=text, content_type="insight",
                         ts=int(when.timestamp()), project_name="life", conflict_threshold=0.999).id


def test_search_prefers_the_memory_of_the_month_a_question_names(pool, fake_embedder):
    may = remember(pool, fake_embedder, "alice", "Went camping by the lake with the kids, we roasted s'mores.",
                   datetime(2023, 5, 14, tzinfo=UTC))
    june = remember(pool, fake_embedder, "alice", "Went camping by the lake with the kids, we saw a heron.",
                    datetime(2023, 6, 18, tzinfo=UTC))
    remember(pool, fake_embedder, "alice", "Bought a new tent for the next camping trip.",
             datetime(2023, 6, 2, tzinfo=UTC))
    f = SearchFilters(as_of=ASKED)
    plain = search(pool, fake_embedder, "alice", "camping by the lake with the kids", filters=f).hits
    in_june = search(pool, fake_embedder, "alice", "camping by the lake with the kids in June", filters=f).hits
    in_may = search(pool, fake_embedder, "alice", "camping by the lake with the kids in May", filters=f).hits
    assert {may, june} <= {h.id for h in plain}
    assert in_june[0].id == june and in_june[0].extra["date_prior"] == pytest.approx(1 + DATE_BOOST)
    assert in_may[0].id == may
    off = search(pool, fake_embedder, "alice", "camping by the lake with the kids in June", filters=f, dates=False)
    assert all("date_prior" not in h.extra for h in off.hits)
    # Without an as-of time the question is resolved against now; a year written out names that year.
    now_june = search(pool, fake_embedder, "alice", "camping by the lake with the kids in June 2023").hits
    assert now_june[0].id == june


def test_a_chinese_question_naming_last_month_prefers_that_months_memory(pool, fake_embedder):
    may = remember(pool, fake_embedder, "li", "周末和家人去杭州西湖旅游，吃了很多小吃。",
                   datetime(2023, 5, 20, tzinfo=UTC))
    june = remember(pool, fake_embedder, "li", "周末和家人去苏州园林旅游，吃了很多小吃。",
                    datetime(2023, 6, 17, tzinfo=UTC))
    f = SearchFilters(as_of=ASKED)  # July 2023: 上个月 is June
    hits = search(pool, fake_embedder, "li", "我上个月和家人去哪里旅游了？", filters=f).hits
    assert [h.id for h in hits][:2] == [june, may]
    two_months = search(pool, fake_embedder, "li", "我两个月前和家人去哪里旅游了？", filters=f).hits
    assert two_months[0].id == may


def test_a_month_of_last_year_prefers_that_month_not_this_years(pool, fake_embedder):
    """"去年三月" / "in March last year" name March 2022 alone (asked in July 2023): read as the year and the latest
    March, they preferred this year's March trip and everything of last year just as much."""
    trips = {"li": ("周末和家人去杭州西湖旅游，吃了很多小吃。", "周末和家人去苏州园林旅游，吃了很多小吃。",
                    "周末和家人去南京旅游，吃了很多小吃。", "我去年三月和家人去哪里旅游了？"),
             "sam": ("A weekend trip with the family to Hangzhou, lots of street food.",
                     "A weekend trip with the family to Suzhou, lots of street food.",
                     "A weekend trip with the family to Nanjing, lots of street food.",
                     "Where did we go on a weekend trip with the family in March last year?")}
    f = SearchFilters(as_of=ASKED)
    for owner, (a, b, c, question) in trips.items():
        last_march = remember(pool, fake_embedder, owner, a, datetime(2022, 3, 19, tzinfo=UTC))
        this_march = remember(pool, fake_embedder, owner, b, datetime(2023, 3, 18, tzinfo=UTC))
        last_june = remember(pool, fake_embedder, owner, c, datetime(2022, 6, 11, tzinfo=UTC))
        hits = search(pool, fake_embedder, owner, question, filters=f).hits
        prior = {h.id: h.extra.get("date_prior") for h in hits}
        assert hits[0].id == last_march, question
        assert prior.get(this_march) is None and prior.get(last_june) is None, question


def test_a_question_about_a_plan_prefers_the_memory_that_tells_of_that_day(pool, fake_embedder):
    """"What am I doing tomorrow?": a memory written this morning that says "tomorrow" tells of the day asked about;
    one that tells of another day does not."""
    plan = remember(pool, fake_embedder, "ana", "Tomorrow I am visiting grandma in the hospital.",
                    datetime(2023, 7, 12, 8, tzinfo=UTC))
    other = remember(pool, fake_embedder, "ana", "Tomorrow I am doing the shopping for grandma.",
                     datetime(2023, 7, 3, 8, tzinfo=UTC))
    zh_plan = remember(pool, fake_embedder, "ana", "明天下午去医院看奶奶。", datetime(2023, 7, 12, 8, tzinfo=UTC))
    zh_other = remember(pool, fake_embedder, "ana", "明天下午去超市给奶奶买东西。", datetime(2023, 7, 3, 8, tzinfo=UTC))
    f = SearchFilters(as_of=ASKED)
    for question, told, not_told in (("What am I doing for grandma tomorrow?", plan, other),
                                     ("我明天要为奶奶做什么？", zh_plan, zh_other)):
        hits = search(pool, fake_embedder, "ana", question, filters=f).hits
        prior = {h.id: h.extra.get("date_prior") for h in hits}
        assert prior.get(told) == pytest.approx(1 + DATE_BOOST) and prior.get(not_told) is None, question


def test_a_question_about_last_month_does_not_match_a_memory_that_says_last_month(pool, fake_embedder):
    """"我上个月买了什么？" asked in July: June's memory says 今天, not 上个月; January's that says 上个月 meant
    December. The question's 上个月 goes to the date prior, not to the keyword channel (the text embedded keeps it)."""
    june = remember(pool, fake_embedder, "li", "今天买了一台新电脑。", datetime(2023, 6, 20, tzinfo=UTC))
    january = remember(pool, fake_embedder, "li", "上个月买了一部新手机，上个月真是花了不少钱。",
                       datetime(2023, 1, 5, tzinfo=UTC))
    f = SearchFilters(as_of=ASKED)
    keyword = search(pool, fake_embedder, "li", "我上个月买了什么？", mode="keyword", filters=f).hits
    assert [h.id for h in keyword] == [june, january]  # both by 买; 上个月 no longer ranks January first


JUNE_PASTA = "We cooked pasta at home, the neighbours came with their two kids and a big salad bowl."


def pasta_in_march_and_june(pool, embedder, owner: str, june_texts: list[str]) -> list[str]:
    """60 close matches from March, which fill both channels' 50 candidates, and a little weaker June ones, which
    rank under them; the June memories' ids."""
    for i in range(60):
        remember(pool, embedder, owner, f"We cooked pasta at home, batch number {i}.",
                 datetime(2023, 3, 1, tzinfo=UTC) + timedelta(hours=i))
    return [remember(pool, embedder, owner, text, datetime(2023, 6, 10 + i, tzinfo=UTC))
            for i, text in enumerate(june_texts)]


def test_the_memories_of_a_named_time_are_read_on_their_own_so_one_pushed_out_competes(pool, fake_embedder):
    (june,) = pasta_in_march_and_june(pool, fake_embedder, "cook", [JUNE_PASTA])
    f = SearchFilters(as_of=ASKED)
    asked = search(pool, fake_embedder, "cook", "what pasta did we cook at home in June?", filters=f).hits
    assert asked[0].id == june and asked[0].extra["date_prior"] == pytest.approx(1 + DATE_BOOST)
    # Without the time, or without the date step, it stays under them (and without the span read it is no
    # candidate at all, so the prior alone cannot raise it: the first assertion fails on search without it).
    plain = search(pool, fake_embedder, "cook", "what pasta did we cook at home?", filters=f).hits
    off = search(pool, fake_embedder, "cook", "what pasta did we cook at home in June?", filters=f, dates=False).hits
    assert june not in {h.id for h in plain} | {h.id for h in off}
    # A span after the search's as-of time is not read: nothing from it could be found.
    before = search(pool, fake_embedder, "cook", "what pasta did we cook at home in June?",
                    filters=SearchFilters(as_of=datetime(2023, 5, 1, tzinfo=UTC))).hits
    assert june not in {h.id for h in before}


def test_a_named_time_holding_more_memories_than_the_cap_is_not_read_on_its_own(pool, fake_embedder, monkeypatch):
    june = pasta_in_march_and_june(pool, fake_embedder, "wide", [JUNE_PASTA, JUNE_PASTA + " Again."])
    f = SearchFilters(as_of=ASKED)
    question = "what pasta did we cook at home in June?"
    assert search(pool, fake_embedder, "wide", question, filters=f).hits[0].id in june  # two: read
    monkeypatch.setattr(search_module, "SPAN_READ_MAX_ROWS", 1)
    assert not set(june) & {h.id for h in search(pool, fake_embedder, "wide", question, filters=f).hits}


def test_span_filters_keep_the_searchs_own_time_limits():
    f = SearchFilters(as_of=ASKED, time_range_days=30)
    june, may = spans("in June", ASKED)[0], spans("in May", ASKED)[0]
    (g,) = span_filters(f, [june], ASKED)
    # June from the start of the search's 30 days (June 12th, 10:30) to its end
    assert g.as_of == june.end
    assert g.time_range_days == pytest.approx((june.end - (ASKED - timedelta(days=30))).total_seconds() / 86400)
    assert span_filters(f, [may], ASKED) == []  # May ended more than 30 days before the as-of time
    (h,) = span_filters(SearchFilters(), [june], ASKED)
    assert h.as_of == june.end and h.time_range_days == 30


@pytest.mark.parametrize(("question", "alone"), [
    ("What did we talk about on May 3?", True),
    ("Do you remember what I said yesterday?", True),
    ("我5月3号跟你聊了些什么？", True),
    ("昨天发生了什么？", True),
    ("5月3号那天我经历了什么", True),
    ("明天有什么安排", True),
    ("What is planned for tomorrow?", True),
    ("What did I cook last week?", False),  # cooking is evidence beside the time
    ("When did Melanie go camping in June?", False),
    ("我上个月去哪儿旅游了？", False),
])
def test_a_question_asking_only_what_happened_then_is_told_apart(question, alone):
    assert asks_only_when(question, ASKED) is alone


def test_a_question_only_about_its_time_ranks_that_times_memories_first():
    may3 = spans("on May 3", ASKED)
    ranked = [
        H("other-day-strong", 0.30, datetime(2023, 5, 4, 12, tzinfo=UTC)),  # a stray keyword match
        H("other-day", 0.12, datetime(2023, 5, 5, 12, tzinfo=UTC)),
        H("may3-a", 0.05, datetime(2023, 5, 3, 12, tzinfo=UTC)),
        H("may3-b", 0.02, datetime(2023, 5, 3, 13, tzinfo=UTC)),
    ]
    assert [h.id for h in dated(ranked, may3)][:2] == ["other-day-strong", "other-day"]  # × 1.25 is not enough
    first = dated(ranked, may3, first=True)
    assert [h.id for h in first] == ["may3-a", "may3-b", "other-day-strong", "other-day"]
    assert first[0].score == pytest.approx(0.05 * (1 + DATE_BOOST) + 0.30) and first[2].score == 0.30
    # one of the day before that only tells of May 3 ("talk to you tomorrow") keeps the × boost, not the lead
    told = H("may2-tomorrow", 0.10, datetime(2023, 5, 2, 21, tzinfo=UTC), "Let's talk again tomorrow.")
    first = dated([*ranked, told], may3, first=True)
    assert [h.id for h in first][:3] == ["may3-a", "may3-b", "other-day-strong"]
    assert next(h for h in first if h.id == told.id).score == pytest.approx(0.10 * (1 + DATE_BOOST))
    # a day ahead has nothing written yet: the memories announcing it lead
    tomorrow = spans("tomorrow", ASKED)
    plans = [H("other", 0.30, datetime(2023, 7, 1, tzinfo=UTC)),
             H("announced", 0.05, datetime(2023, 7, 12, 8, tzinfo=UTC), "Tomorrow I am visiting grandma.")]
    assert [h.id for h in dated(plans, tomorrow, first=True)] == ["announced", "other"]


@pytest.mark.parametrize(("text", "kept"), [
    ("我上个月去哪儿旅游了？", "我 去哪儿旅游了？"),
    ("What did I cook last weekend?", "What did I cook  ?"),
    ("今天我学了一道新菜", "今天我学了一道新菜"),  # a memory of today says today too
    ("What am I doing tomorrow?", "What am I doing tomorrow?"),  # and one announcing tomorrow says tomorrow
    ("上个月底我搬家了", " 我搬家了"),
    ("这个月底我要搬家", "这个月底我要搬家"),
    ("early last month", " "),
    ("When did Melanie go camping in June?", "When did Melanie go camping in June?"),  # a month names the same time
    ("去年三月我学了什么", "去年三月我学了什么"),
    ("前阵子我换了什么工作", " 我换了什么工作"),
    ("What did I buy a while ago?", "What did I buy  ?"),
    ("What did I do on 8 May 2023?", "What did I do on 8 May 2023?"),
])
def test_without_relative_past_keeps_only_times_that_mean_the_same_in_any_text(text, kept):
    assert without_relative_past(text) == kept


def test_without_times_takes_the_expressions_out():
    kept = without_times("What did we talk about on May 3?", ASKED).split()
    assert kept == ["What", "did", "we", "talk", "about", "on", "?"]
    assert without_times("no time here", ASKED) == "no time here"
