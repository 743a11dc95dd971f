"""Time expressions, English and Chinese, resolved to the spans of time they name.

"What did I cook last week?", "When did Melanie go camping in June?", "我上个月去哪儿旅游了？" name when the
thing asked about happened; "We went camping yesterday" or "上周我去了杭州" say when something happened,
relative to the day they were written. `spans(text, anchor)` reads such expressions and resolves them against
`anchor` (when the question was asked, or when the memory was written) into half-open UTC spans:

- days: today / tonight / yesterday / last night / the day before yesterday / N days ago / the other day, 今天 /
  昨天 / 前天 / N天前 / 几天前 / 前两天, an ISO date, "June 8" / "8 June 2023" / 5月8日, a day of the month alone
  ("on the 3rd", 3号, the latest at or before the anchor), this time last year / 去年这个时候 (a fortnight either
  side of that day);
- weeks: this week / last week / this or last weekend / over the weekend / the weekend before last / N weeks ago,
  这周 / 上周 / 上个星期 / 上周末 / N周前 / 半个月前, last Monday / this past Monday / on Monday …, 上周三 / 这周三 /
  周三 …, 前几天;
- months: this month / last month / N months ago / a month name ("in June", "June 2023", "March last year"), 这个月 /
  上个月 / N个月前 / 五月 / 2023年5月 / 去年三月 / 上个月5号; their thirds: early / mid / late June, the end of last
  month, 5月初 / 五月中旬 / 上个月底;
- seasons (northern): last summer / during the summer / winter 2021, 去年夏天 / 冬天 / 2022年冬天;
- years: this year / last year / N years ago / "in 2022", 今年 / 去年 / 前年 / N年前 / 2022年; their parts: early
  last year, 年初 / 去年年底 / 今年上半年;
- holidays: on a fixed day (Christmas, New Year's Day, Halloween, …, 元旦 / 五一 / 国庆 / 圣诞节 …), on a weekday
  of a month (Thanksgiving, Mother's Day, Memorial Day, …, 母亲节), Easter, and the lunisolar festivals of
  2000–2040 (春节 / Chinese New Year, 除夕, 元宵节, 清明节, 端午, 中秋, 重阳: `lunar_dates.py`).

- ahead (plans): tomorrow / the day after tomorrow / next week, weekend, month, year, 明天 / 后天 / 大后天 / 下周 /
  下周三 / 下周末 / 下个月 / 明年.

A month, a date or a holiday without its year is the latest one at or before the anchor. Month names are matched as
written (capitalised), so the verb "may" is not May. Pure.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from .lunar_dates import festival


@dataclass(frozen=True)
class Span:
    """[start, end) in UTC."""

    start: datetime
    end: datetime

    def holds(self, moment: datetime) -> bool:
        return self.start <= _utc(moment) < self.end

    def within(self, other: Span) -> bool:
        return other.start <= self.start and self.end <= other.end


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _day(anchor: datetime, back: int = 0, days: int = 1) -> Span:
    start = _utc(anchor).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=back)
    return Span(start, start + timedelta(days=days))


def _week(anchor: datetime, back: int) -> Span:
    """The calendar week (Monday first) `back` weeks before the anchor's."""
    monday = _day(anchor).start - timedelta(days=_utc(anchor).weekday()) - timedelta(weeks=back)
    return Span(monday, monday + timedelta(weeks=1))


def _month(year: int, month: int) -> Span:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return Span(start, end)


def _months_back(anchor: datetime, back: int) -> Span:
    a = _utc(anchor)
    index = a.year * 12 + a.month - 1 - back
    return _month(index // 12, index % 12 + 1)


def _year(year: int) -> Span:
    return Span(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))


def _latest_month(anchor: datetime, month: int, year: int | None) -> Span:
    """The month of that year, or the latest such month at or before the anchor."""
    a = _utc(anchor)
    return _month(year if year is not None else (a.year if month <= a.month else a.year - 1), month)


def _date(anchor: datetime, month: int, day: int, year: int | None) -> Span | None:
    """That day, or the latest such day at or before the anchor; None when it does not exist."""
    a = _utc(anchor)
    y = year if year is not None else (a.year if (month, day) <= (a.month, a.day) else a.year - 1)
    if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(y, month)[1]:
        return None
    start = datetime(y, month, day, tzinfo=UTC)
    return Span(start, start + timedelta(days=1))


# --- English --------------------------------------------------------------------------------------------------

_MONTHS = {name: i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name[:3]: i for name, i in list(_MONTHS.items()) if name != "May"})
_MONTHS.update({"Sept": 9})
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_FULL_MONTH = r"(?P<month>" + "|".join(name for name in calendar.month_name if name) + r")"
# A month named alone ("May I ask…", "March on") is a month only after a word that says so, or before its year.
_MONTH_LEAD = r"(?:[Ii]n|[Dd]uring|[Ss]ince|[Ff]rom|[Uu]ntil|[Bb]y|[Oo]f|[Ee]arly|[Ll]ate|[Mm]id-?|[Ll]ast|[Tt]his)\s+"
_WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2,
            "a couple": 2, "a few": 3, "few": 3}
_NUMBER = r"(?P<n>\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + r")"
_YEAR = r"(?P<year>(?:19|20)\d\d)"

_EN: list[tuple[re.Pattern[str], str]] = [(re.compile(p, f), kind) for p, f, kind in [
    # 2023-05-01, 2023/5/1: digits may touch Chinese text ("2023-05-01我读了…"), where \b does not hold
    (r"(?<![\d.])(?P<y>(?:19|20)\d\d)([-/.])(?P<m>\d{1,2})\2(?P<d>\d{1,2})(?!\d|\.\d)", 0, "iso"),
    (r"\bthe week before last\b", re.I, "week2"),
    (r"\bthe month before last\b", re.I, "month2"),
    (r"\bthe year before last\b", re.I, "year2"),
    (r"(?<!\w)(?P<holiday>(?i:christmas eve|christmas|halloween|thanksgiving|valentine['’]s day|easter"
     r"|mother['’]?s day|father['’]?s day|memorial day|labou?r day|chinese new year|lunar new year"
     r"|spring festival|lantern festival|mid-autumn festival|dragon boat festival)"
     r"|New Year['’]s (?:Eve|Day)|New Year['’]s|Independence Day|(?:Fourth|4th) of July)"
     rf"(?:,? {_YEAR})?(?!\w)", 0, "holiday"),
    # a month or a date of last / this year ("March last year", "5 March of last year", "last year in March"),
    # read before "last year" alone, which would leave the month to the latest one
    (rf"\b(?:(?P<day>\d{{1,2}})(?:st|nd|rd|th)? (?:of )?)?{_FULL_MONTH}(?: (?P<day2>\d{{1,2}})(?:st|nd|rd|th)?)?,?"
     r" (?:of )?(?P<which>last|this) year\b", 0, "month_of_year"),
    (rf"\b(?P<which>[Ll]ast|[Tt]his) year,? in {_FULL_MONTH}\b", 0, "month_of_year"),
    (r"\bthe (?:day|night) before (?:yesterday|last)\b", re.I, "day2"),
    (r"\b(?:this time|around this time|this day) last year\b|\ba year ago today\b", re.I, "year_ago_now"),
    (r"\bthe day after tomorrow\b", re.I, "ahead_day2"),
    (r"\btomorrow\b", re.I, "ahead_day1"),
    (r"\bnext weekend\b", re.I, "next_weekend"),
    (r"\bnext (?P<unit>week|month|year)\b", re.I, "next"),
    (r"\b(?:yesterday|last night)\b", re.I, "day1"),
    (r"\b(?:today|tonight|this (?:morning|afternoon|evening))\b", re.I, "day0"),
    (r"\bthe other day\b", re.I, "few_days"),
    (rf"\b{_NUMBER} (?P<unit>day|week|fortnight|month|year)s? ago\b", re.I, "ago"),
    (r"\bthe weekend before last\b", re.I, "weekend_before_last"),
    (r"\b(?:last|this past|the past|over the) weekend\b", re.I, "weekend"),
    (r"\bthis weekend\b", re.I, "this_weekend"),
    (rf"\b(?P<season>spring|summer|autumn|fall|winter),? (?:of )?{_YEAR}\b", re.I, "season"),
    (r"\b(?P<which>last|this|past|previous) (?P<season>spring|summer|autumn|fall|winter)\b", re.I, "season"),
    (r"\b(?:in|during|over)(?: the)? (?P<season>spring|summer|autumn|fall|winter)\b", re.I, "season"),
    (r"\b(?P<part>early|late)(?: in)? (?P<which>this|last) (?P<unit>month|year)\b", re.I, "part_of"),
    (r"\bthe (?P<part>beginning|start|middle|end) of (?P<which>this|last) (?P<unit>month|year)\b", re.I, "part_of"),
    (r"\b(?P<which>this|last|past|previous) (?P<unit>week|month|year)\b", re.I, "this_last"),
    (r"\b(?:last|this past|the past) (?P<weekday>" + "|".join(_WEEKDAYS) + r")\b", re.I, "weekday"),
    (r"\bon (?P<weekday>" + "|".join(_WEEKDAYS) + r")\b", re.I, "on_weekday"),
    (rf"\b{_MONTH} (?P<day>\d{{1,2}})(?:st|nd|rd|th)?\b(?:,? {_YEAR}\b)?", 0, "month_day"),
    (rf"\b(?P<day>\d{{1,2}})(?:st|nd|rd|th)? (?:of )?{_MONTH}(?:,? {_YEAR}\b)?", 0, "day_month"),
    (rf"\b(?P<part>[Ee]arly|[Mm]id|[Ll]ate)[- ]?{_FULL_MONTH}(?:,? {_YEAR}\b)?", 0, "month_part"),
    (rf"\bthe (?P<part>beginning|start|middle|end) of {_FULL_MONTH}(?:,? {_YEAR}\b)?", re.I, "month_part"),
    (rf"\b{_FULL_MONTH},? (?:of )?{_YEAR}\b", 0, "month"),
    (rf"\b{_MONTH_LEAD}(?:the month of )?{_FULL_MONTH}\b", 0, "month"),
    (rf"\b(?:in|during|since|of|year) {_YEAR}\b", re.I, "year"),
    (r"\bon the (?P<d>\d{1,2})(?:st|nd|rd|th)\b", re.I, "day_of_month"),
]]

# --- Chinese --------------------------------------------------------------------------------------------------

_ZH_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_NUM = r"(?P<n>\d{1,3}|[一二两三四五六七八九十]{1,3})"
# [2023年]5月[8日]: a month is not "三个月" (a duration); a day may be written 二十五.
_ZH_MONTH = r"(?P<m>\d{1,2}|十[一二]?|[一二三四五六七八九])"
_ZH_DATE = (r"(?:(?P<year>(?:19|20)\d\d)年)?(?<![个\d一二两三四五六七八九十])" + _ZH_MONTH + "月份?"
            r"(?:(?P<d>\d{1,2}|[一二三]?十[一二三四五六七八九]?|[一二三四五六七八九])[日号])?")
_ZH_YEARS_BACK = {"今": 0, "去": 1, "前": 2}  # 今年 / 去年 / 前年
# 月初 / 上旬 …, and 月中 only where 中 ends the word (月中旬, 月中的, not 5月中国…)
_ZH_PART = r"(?P<part>初|上旬|中旬|下旬|底|末|中(?=[的时左，。,.？?！!\s]|$))"
_ZH_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}

_ZH: list[tuple[re.Pattern[str], str]] = [(re.compile(p), kind) for p, kind in [
    (r"(?:(?:(?P<year>(?:19|20)\d\d)年|(?P<which>去|今|前)年)的?)?(?P<holiday>元旦|情人节|五一|劳动节|儿童节|教师节|国庆节?"
     r"|万圣节|平安夜|圣诞节?|感恩节|春节|除夕|大年三十|元宵节|清明(?=节|假)|端午节?|中秋节?|重阳节?|母亲节|父亲节)",
     "holiday"),
    (r"(?P<which>去|今|前)年的?(?<![个\d一二两三四五六七八九十])" + _ZH_MONTH + "月份?" + _ZH_PART, "zh_month_part"),
    (r"(?P<which>去|今|前)年的?" + _ZH_DATE, "zh_date"),
    (r"(?P<rel>上上个?|上个?|这个?|本)月的?(?P<d>\d{1,2}|[一二三]?十[一二三四五六七八九]?|[一二三四五六七八九])[日号]",
     "zh_month_day"),
    (r"去年的?(?:这个时候|这时候|此时|同期|今天|这一天)", "year_ago_now"),
    (r"大后天", "ahead_day3"),
    (r"(?<!先天和)(?<!先天)后天", "ahead_day2"),
    (r"明(?:天|早|晚|日)", "ahead_day1"),
    (r"下(?:个)?(?:周|星期|礼拜)末", "next_weekend"),
    (r"下(?:个)?(?:周|星期|礼拜)(?P<weekday>[一二三四五六日天])", "next_weekday"),
    (r"下(?:个)?(?P<unit>周|星期|礼拜|月)", "next"),
    (r"明年", "next_year"),
    (r"大前天", "day3"),
    (r"几天(?:以|之)?前|(?:前|这|近|最近)(?:两|几)天", "few_days"),
    (r"半个月(?:以|之)?前", "half_month"),
    (r"半年(?:以|之)?前", "half_year"),
    (r"前天", "day2"),
    (r"昨(?:天|晚|日|夜)", "day1"),
    (r"今(?:天|晚|早|日)", "day0"),
    (rf"{_ZH_NUM}(?P<unit>天|周|个星期|个礼拜|个月|年)(?:以|之)?前", "ago"),
    (r"上(?:个)?(?:周|星期|礼拜)末", "weekend"),
    (r"(?:这|本)(?:个)?(?:周|星期|礼拜)末", "this_weekend"),
    (r"(?:(?P<year>(?:19|20)\d\d)年|(?P<which>去年|今年|前年))?的?(?P<season>春天|夏天|秋天|冬天|春季|夏季|秋季|冬季)",
     "season"),
    (r"上(?:个)?(?:周|星期|礼拜)(?P<weekday>[一二三四五六日天])", "weekday"),
    (r"(?:这|本)(?:个)?(?:周|星期|礼拜)(?P<weekday>[一二三四五六日天])", "this_weekday"),
    (r"上上(?:个)?(?:周|星期|礼拜)", "week2"),
    (r"上(?:个)?(?:周|星期|礼拜)", "week1"),
    (r"(?:这|本)(?:个)?(?:周|星期|礼拜)", "week0"),
    (r"(?<![上下这本])(?:周|星期|礼拜)(?P<weekday>[一二三四五六日天])", "on_weekday"),
    (r"(?P<rel>上上个?|上个?|这个?|本)月" + _ZH_PART, "zh_month_part"),
    (r"(?:(?P<year>(?:19|20)\d\d)年)?(?<![个\d一二两三四五六七八九十])" + _ZH_MONTH + "月份?" + _ZH_PART,
     "zh_month_part"),
    (r"(?<![\d一二三四五六七八九十个上这本])月(?P<part>初|底|末)", "zh_month_part"),
    (r"(?:(?P<year>(?:19|20)\d\d)年|(?P<which>去|今|前)年)(?P<part>年?初|年?底|年?末|上半年|下半年)", "zh_year_part"),
    (r"(?<![\d去今前明])(?P<part>年初|年底|年末|上半年|下半年)", "zh_year_part"),
    (r"上上个月", "month2"),
    (r"上(?:个)?月", "month1"),
    (r"(?:这个|本)月", "month0"),
    (r"前年", "year2"),
    (r"去年", "year1"),
    (r"今年", "year0"),
    (_ZH_DATE, "zh_date"),
    (r"(?P<year>(?:19|20)\d\d)年(?!\d{1,2}月|[一二三四五六七八九十]{1,2}月)", "zh_year"),
    # a day of the month alone ("3号那天"): not a number of a line, a building, a room ("3号线", "5号楼")
    (r"(?<![\d./\-月年第])(?P<d>\d{1,2})[号日](?![线楼房门院床机口])", "day_of_month"),
]]


def _zh_number(text: str) -> int | None:
    """An Arabic or a Chinese number up to 99 ("3", "十二", "二十五", "两")."""
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        return (_ZH_DIGITS.get(tens, 0) if tens else 1) * 10 + (_ZH_DIGITS.get(ones, 0) if ones else 0)
    if len(text) == 1 and text in _ZH_DIGITS:
        return _ZH_DIGITS[text]
    return None


def _number(text: str) -> int | None:
    t = text.lower()
    return int(t) if t.isdigit() else _NUMBERS.get(t, _zh_number(text))


def _ago(anchor: datetime, n: int, unit: str) -> Span:
    if unit in ("day", "天"):
        return _day(anchor, back=n + 1, days=3)  # a day either side: "three days ago" is rarely exact
    if unit == "fortnight":
        n, unit = 2 * n, "week"
    if unit in ("week", "周", "个星期", "个礼拜"):
        return Span(_day(anchor, back=7 * n + 3).start, _day(anchor, back=7 * n - 4).start)
    if unit in ("month", "个月"):
        return _months_back(anchor, n)
    return _year(_utc(anchor).year - n)


_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12,
            "春天": 3, "夏天": 6, "秋天": 9, "冬天": 12, "春季": 3, "夏季": 6, "秋季": 9, "冬季": 12}


_S = TypeVar("_S", Span, Span | None)


def _latest(anchor: datetime, of: Callable[[int], _S]) -> _S:
    """`of` the anchor's year if it has begun by the anchor, else of the year before (None where `of` has none)."""
    a = _utc(anchor)
    this = of(a.year)
    return this if this is not None and this.start <= a else of(a.year - 1)


def _season(anchor: datetime, first_month: int, which: str | None, year: int | None) -> Span:
    """Three months from `first_month` (northern seasons; a winter runs into the next year): of that year, this
    year's (this / 今年), the last one ended before the anchor (last / previous / past), last year's (去年), the one
    before (前年), else the latest one begun at or before the anchor."""
    a = _utc(anchor)
    which = (which or "").lower()

    def of(y: int) -> Span:
        return Span(_month(y, first_month).start, _months_back(datetime(y, first_month, 1, tzinfo=UTC), -3).start)

    if year is not None:
        return of(year)
    if which in ("this", "今年"):
        return of(a.year)
    if which in ("去年", "前年"):
        return of(a.year - _ZH_YEARS_BACK[which[0]])
    latest = _latest(a, of)
    if which in ("last", "previous", "past") and latest.end > a:
        return of(latest.start.year - 1)
    return latest


# Holidays on a fixed day: (month, first day, days); names lower case, without apostrophes.
_HOLIDAYS: dict[str, tuple[int, int, int]] = {
    "christmas eve": (12, 24, 1), "christmas": (12, 24, 3), "new years eve": (12, 31, 1),
    "new years day": (1, 1, 1), "new years": (12, 31, 2), "valentines day": (2, 14, 1), "halloween": (10, 31, 1),
    "independence day": (7, 4, 1), "fourth of july": (7, 4, 1), "4th of july": (7, 4, 1),
    "元旦": (1, 1, 1), "情人节": (2, 14, 1), "五一": (5, 1, 5), "劳动节": (5, 1, 5), "儿童节": (6, 1, 1),
    "教师节": (9, 10, 1), "国庆": (10, 1, 7), "国庆节": (10, 1, 7), "万圣节": (10, 31, 1), "平安夜": (12, 24, 1),
    "圣诞": (12, 24, 3), "圣诞节": (12, 24, 3),
}
# Holidays on the nth weekday of a month (US): (month, weekday, n; -1 the last).
_WEEKDAY_HOLIDAYS: dict[str, tuple[int, int, int]] = {
    "thanksgiving": (11, 3, 4), "感恩节": (11, 3, 4), "mothers day": (5, 6, 2), "母亲节": (5, 6, 2),
    "fathers day": (6, 6, 3), "父亲节": (6, 6, 3), "memorial day": (5, 0, -1), "labor day": (9, 0, 1),
    "labour day": (9, 0, 1),
}
# Lunisolar festivals (text/lunar_dates.py): (festival, days from it to the first day, days).
_LUNAR_HOLIDAYS: dict[str, tuple[str, int, int]] = {
    "春节": ("lunar_new_year", -1, 8), "chinese new year": ("lunar_new_year", -1, 8),
    "lunar new year": ("lunar_new_year", -1, 8), "spring festival": ("lunar_new_year", -1, 8),
    "除夕": ("lunar_new_year", -1, 1), "大年三十": ("lunar_new_year", -1, 1),
    "元宵节": ("lunar_new_year", 14, 1), "lantern festival": ("lunar_new_year", 14, 1),
    "清明": ("qingming", 0, 1),
    "端午": ("dragon_boat", 0, 1), "端午节": ("dragon_boat", 0, 1), "dragon boat festival": ("dragon_boat", 0, 1),
    "中秋": ("mid_autumn", 0, 1), "中秋节": ("mid_autumn", 0, 1), "mid-autumn festival": ("mid_autumn", 0, 1),
    "重阳": ("double_ninth", 0, 1), "重阳节": ("double_ninth", 0, 1),
}


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> datetime:
    """The nth `weekday` (Monday 0) of the month; n = -1 the last."""
    if n < 0:
        last = datetime(year, month, calendar.monthrange(year, month)[1], tzinfo=UTC)
        return last - timedelta(days=(last.weekday() - weekday) % 7)
    first = datetime(year, month, 1, tzinfo=UTC)
    return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))


def _easter(year: int) -> datetime:
    """Western Easter Sunday (the anonymous Gregorian computus)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = divmod(b, 4)
    g = (8 * b + 13) // 25
    h = (19 * a + b - d - g + 15) % 30
    i, k = divmod(c, 4)
    l_ = (32 + 2 * e + 2 * i - h - k) % 7
    m = (a + 11 * h + 22 * l_) // 451
    month, day = divmod(h + l_ - 7 * m + 114, 31)
    return datetime(year, month, day + 1, tzinfo=UTC)


def _holiday_of(key: str, year: int) -> Span | None:
    """The holiday's span in `year`; None for a lunisolar festival outside the table's years."""
    if key == "easter":
        start, days = _easter(year), 1
    elif key in _WEEKDAY_HOLIDAYS:
        start, days = _nth_weekday(year, *_WEEKDAY_HOLIDAYS[key]), 1
    elif key in _LUNAR_HOLIDAYS:
        name, offset, days = _LUNAR_HOLIDAYS[key]
        day = festival(name, year)
        if day is None:
            return None
        start = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=offset)
    else:
        month, first, days = _HOLIDAYS[key]
        start = datetime(year, month, first, tzinfo=UTC)
    return Span(start, start + timedelta(days=days))


def _holiday(anchor: datetime, name: str, year: int | None) -> Span | None:
    """The holiday of that year, or the latest one begun at or before the anchor."""
    key = re.sub(r"['’]", "", name.lower())
    return _holiday_of(key, year) if year is not None else _latest(anchor, lambda y: _holiday_of(key, y))


# Thirds of a month (days 1–10, 11–20, 21–end) and of a year (January–April, May–August, September–December).
_PARTS = {"early": 0, "beginning": 0, "start": 0, "初": 0, "上旬": 0, "mid": 1, "middle": 1, "中": 1, "中旬": 1,
          "late": 2, "end": 2, "底": 2, "末": 2, "下旬": 2}


def _month_part(month: Span, part: str) -> Span:
    third = _PARTS[part.lower()]
    start = month.start + timedelta(days=10 * third)
    return Span(start, month.end if third == 2 else start + timedelta(days=10))


def _year_part(year: int, part: str) -> Span:
    if part.endswith("半年"):
        first, months = (1 if part == "上半年" else 7), 6
    else:
        first, months = 1 + 4 * _PARTS[part.lstrip("年").lower()], 4
    return Span(_month(year, first).start, _month(year, first + months - 1).end)


def _last_weekday(anchor: datetime, weekday: int) -> Span:
    back = (_utc(anchor).weekday() - weekday - 1) % 7 + 1  # strictly before the anchor's day
    return _day(anchor, back=back)


def _resolve(kind: str, m: re.Match[str], anchor: datetime) -> Span | None:  # noqa: PLR0911 - one case a kind
    g = m.groupdict()
    year = int(g["year"]) if g.get("year") else None
    if kind.startswith(("day", "week", "month", "year")) and kind[-1].isdigit():
        back = int(kind[-1])
        return {"day": lambda: _day(anchor, back=back), "week": lambda: _week(anchor, back),
                "month": lambda: _months_back(anchor, back),
                "year": lambda: _year(_utc(anchor).year - back)}[kind[:-1]]()
    if kind == "iso":
        return _date(anchor, int(g["m"]), int(g["d"]), int(g["y"]))
    if kind == "ago":
        n = _number(g["n"])
        return _ago(anchor, n, g["unit"].lower()) if n is not None and 0 < n < 100 else None
    if kind.startswith("ahead_day"):
        return _day(anchor, back=-int(kind[-1]))
    if kind == "next":
        return _months_back(anchor, -1) if g["unit"].lower() in ("month", "月") else (
            _year(_utc(anchor).year + 1) if g["unit"].lower() == "year" else _week(anchor, -1))
    if kind == "next_year":
        return _year(_utc(anchor).year + 1)
    if kind == "next_weekend":
        saturday = _week(anchor, -1).start + timedelta(days=5)
        return Span(saturday, saturday + timedelta(days=2))
    if kind == "next_weekday":
        start = _week(anchor, -1).start + timedelta(days=_ZH_WEEKDAYS[g["weekday"]])
        return Span(start, start + timedelta(days=1))
    if kind == "year_ago_now":  # the same days a year before, give or take a fortnight
        a = _day(anchor).start
        then = a.replace(year=a.year - 1, day=min(a.day, 28))
        return Span(then - timedelta(days=14), then + timedelta(days=15))
    if kind == "day_of_month":
        a, day = _utc(anchor), int(g["d"])
        month = _months_back(anchor, 0 if day <= a.day else 1).start
        return _date(anchor, month.month, day, month.year)
    if kind == "weekend_before_last":
        monday = _week(anchor, 1).start
        return Span(monday - timedelta(days=2), monday)
    if kind == "this_weekday":  # 这周三: that day of this calendar week, before or after the anchor
        start = _week(anchor, 0).start + timedelta(days=_ZH_WEEKDAYS[g["weekday"]])
        return Span(start, start + timedelta(days=1))
    if kind == "this_weekend":
        saturday = _week(anchor, 0).start + timedelta(days=5)
        return Span(saturday, saturday + timedelta(days=2))
    if kind == "few_days":
        return Span(_day(anchor, back=7).start, _day(anchor).end)
    if kind == "half_month":
        return Span(_day(anchor, back=20).start, _day(anchor, back=10).start)
    if kind == "half_year":
        return _months_back(anchor, 6)
    if kind == "part_of":
        back = 0 if g["which"].lower() == "this" else 1
        if g["unit"].lower() == "month":
            return _month_part(_months_back(anchor, back), g["part"])
        return _year_part(_utc(anchor).year - back, g["part"])
    if kind == "month_of_year":
        which_year = _utc(anchor).year - (g["which"].lower() == "last")
        day = g.get("day") or g.get("day2")
        month = _MONTHS[g["month"]]
        return _date(anchor, month, int(day), which_year) if day else _month(which_year, month)
    if kind == "zh_month_day":
        back = {"上上": 2, "上": 1}.get(g["rel"].rstrip("个"), 0)
        month = _months_back(anchor, back).start
        day = _zh_number(g["d"])
        return _date(anchor, month.month, day, month.year) if day else None
    if kind == "month_part":
        return _month_part(_latest_month(anchor, _MONTHS[g["month"]], year), g["part"])
    if kind == "zh_month_part":
        if g.get("m"):
            month = _zh_number(g["m"])
            if month is None or not 1 <= month <= 12:
                return None
            if g.get("which"):  # 去年 / 今年 / 前年
                year = _utc(anchor).year - _ZH_YEARS_BACK[g["which"]]
            return _month_part(_latest_month(anchor, month, year), g["part"])
        back = {"上上": 2, "上": 1}.get((g.get("rel") or "").rstrip("个"), 0)
        return _month_part(_months_back(anchor, back), g["part"])
    if kind == "zh_year_part":
        back = _ZH_YEARS_BACK.get(g.get("which") or "", 0)
        return _year_part(year if year is not None else _utc(anchor).year - back, g["part"])
    if kind == "on_weekday":
        w = g["weekday"]
        weekday = _ZH_WEEKDAYS[w] if w in _ZH_WEEKDAYS else _WEEKDAYS[w.lower()]
        return _day(anchor, back=(_utc(anchor).weekday() - weekday) % 7)
    if kind == "season":
        return _season(anchor, _SEASONS[g["season"].lower()], g.get("which"), year)
    if kind == "weekend":
        monday = _week(anchor, 0).start
        return Span(monday - timedelta(days=2), monday)
    if kind == "this_last":
        back = 0 if g["which"].lower() == "this" else 1
        unit = g["unit"].lower()
        if unit == "week":
            return _week(anchor, back)
        return _months_back(anchor, back) if unit == "month" else _year(_utc(anchor).year - back)
    if kind == "weekday":
        w = g["weekday"]
        if w in _ZH_WEEKDAYS:  # 上周三: that day of the previous calendar week
            start = _week(anchor, 1).start + timedelta(days=_ZH_WEEKDAYS[w])
            return Span(start, start + timedelta(days=1))
        return _last_weekday(anchor, _WEEKDAYS[w.lower()])
    if kind in ("month_day", "day_month"):
        return _date(anchor, _MONTHS[g["month"]], int(g["day"]), year)
    if kind == "month":
        return _latest_month(anchor, _MONTHS[g["month"]], year)
    if kind in ("year", "zh_year"):
        return _year(int(g["year"]))
    if kind == "holiday":
        if g.get("which"):  # 去年 / 今年 / 前年
            year = _utc(anchor).year - _ZH_YEARS_BACK[g["which"]]
        return _holiday(anchor, g["holiday"], year)
    if kind == "zh_date":
        month = _zh_number(g["m"])
        if month is None or not 1 <= month <= 12:
            return None
        if g.get("which"):  # 去年 / 今年 / 前年
            year = _utc(anchor).year - _ZH_YEARS_BACK[g["which"]]
        if g.get("d"):
            day = _zh_number(g["d"])
            return _date(anchor, month, day, year) if day else None
        return _latest_month(anchor, month, year)
    return None


# A word every expression above holds: most texts have none, and looking for one costs a twentieth of all the
# patterns (search reads the times of a few dozen candidates when a question names one).
_WORD = re.compile(r"[A-Za-z]+|\d{4}")
_EN_TRIGGERS = frozenset(
    {"yesterday", "today", "tonight", "ago", "last", "this", "past", "previous", "weekend",
     "spring", "summer", "autumn", "fall", "winter", "christmas", "halloween", "thanksgiving", "valentine", "year",
     "independence", "other", "early", "mid", "late", "beginning", "start", "middle", "end", "easter", "mother",
     "mothers", "father", "fathers", "memorial", "labor", "labour", "lunar", "chinese", "lantern", "dragon",
     "fortnight", "fortnights", "tomorrow", "next", "st", "nd", "rd", "th"}
    | set(_WEEKDAYS)
)
_ZH_TRIGGER = re.compile(
    r"昨|今[天晚早日年]|去年|前[天年几]|(?:天|周|星期|礼拜|月|年)(?:以|之)?前|[上这本]个?(?:周|星期|礼拜|月)"
    r"|[周期拜][一二三四五六日天]|[\d一二三四五六七八九十]月|[春夏秋冬][天季]"
    r"|元旦|情人节|五一|劳动节|儿童节|教师节|国庆|万圣节|平安夜|圣诞|感恩节"
    r"|明[天早晚日年]|后天|下个?(?:周|星期|礼拜|月)|\d[号日]"
    r"|[几两]天|半个?月|半年|月[初底末中]|年[初底末]|[上下]半年|[上中下]旬|春节|除夕|大年三十|元宵|清明|端午|中秋|重阳|[母父]亲节"
)


def _may_hold_time(text: str) -> bool:
    """Whether `text` holds a word some time expression starts from (a fast test before the patterns)."""
    for word in set(_WORD.findall(text)):
        if word in _MONTHS or word.lower() in _EN_TRIGGERS or (word.isdigit() and word[:2] in ("19", "20")):
            return True
    return _ZH_TRIGGER.search(text) is not None


def spans(text: str, anchor: datetime) -> list[Span]:
    """The spans of time `text` names, resolved against `anchor`, in the order they are written; an expression
    that overlaps one read before it ("in July" of "in July 2023") is skipped: the patterns go from the most
    specific to the least."""
    return [span for _s, _e, span in expressions(text, anchor)]


def without_times(text: str, anchor: datetime) -> str:
    """`text` with the time expressions `spans` reads taken out ("What did we talk about on May 3?" → "What did
    we talk about  ?")."""
    out, at = [], 0
    for start, end, _ in expressions(text, anchor):
        out.append(text[at:start])
        at = end
    return " ".join([*out, text[at:]])


def expressions(text: str, anchor: datetime) -> list[tuple[int, int, Span]]:
    """(start, end, span) of every time expression of `text`, in the order written (see `spans`)."""
    return [(start, end, span) for start, end, span, _relative in _expressions(text, anchor)]


# Expressions of a time before the one they are written at, whose words a text written in that time does not use:
# the memory of yesterday says "today", not "yesterday" ("last week", 上个月, 前天, "two days ago", 上周三). Words of
# the current time (today, 这个月) or ahead (明天) are what a memory written then, or announcing it, says too.
_PAST_KINDS = frozenset({
    "week2", "month2", "year2", "day1", "day2", "day3", "few_days", "half_month", "half_year", "ago", "weekend",
    "weekend_before_last",
    "weekday", "week1", "month1", "year1", "year_ago_now",
})


def without_relative_past(text: str) -> str:
    """`text` without its expressions of a time before it was written (`_PAST_KINDS`; "the end of last month",
    上个月底, 上个月5号 too), which a text written in that time does not hold: a question's "yesterday" is not a
    memory's."""
    out, at = [], 0
    for start, end, _span, past in _expressions(text, datetime.now(UTC)):
        if past:
            out.append(text[at:start])
            at = end
    return " ".join([*out, text[at:]]) if out else text


def _is_past(kind: str, m: re.Match[str]) -> bool:
    g = m.groupdict()
    if kind in _PAST_KINDS:
        return True
    if kind in ("part_of", "this_last"):
        return g["which"].lower() != "this"
    if kind in ("zh_month_part", "zh_month_day"):
        return (g.get("rel") or "").startswith("上")
    return False


def _expressions(text: str, anchor: datetime) -> list[tuple[int, int, Span, bool]]:
    """`expressions`, each with whether it names a time before the text's own (`_is_past`)."""
    found: list[tuple[int, int, Span, bool]] = []
    if not _may_hold_time(text):
        return []
    for pattern, kind in _EN + _ZH:
        for m in pattern.finditer(text):
            if any(m.start() < e and s < m.end() for s, e, _, _ in found):
                continue
            span = _resolve(kind, m, anchor)
            if span is not None:
                found.append((m.start(), m.end(), span, _is_past(kind, m)))
    return sorted(found, key=lambda f: f[0])
