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
from datetime import UTC, datetime, timedelta

from . import calendar_spans as cal
from .calendar_spans import Span

__all__ = ["Span", "expressions", "spans", "without_relative_past", "without_times"]


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
            "a couple": 2, "a few": 3, "few": 3, "several": 4}
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
    (r"\b(?:a|one) year and a half (?:ago|back)\b", re.I, "year_and_half"),
    (rf"\b{_NUMBER} (?P<unit>day|week|fortnight|month|year)s?(?: or so)? (?:ago|back)\b", re.I, "ago"),
    (r"\ba (?:little |good )?while (?:ago|back)\b|\bsome time ago\b", re.I, "while_ago"),
    (r"\bthe weekend before last\b", re.I, "weekend_before_last"),
    (r"\b(?:last|this past|the past|over the) weekend\b", re.I, "weekend"),
    (r"\bthis weekend\b", re.I, "this_weekend"),
    (rf"\b(?P<season>spring|summer|autumn|fall|winter),? (?:of )?{_YEAR}\b", re.I, "season"),
    (r"\b(?P<which>last|this|past|previous) (?P<season>spring|summer|autumn|fall|winter)\b", re.I, "season"),
    (r"\b(?:in|during|over)(?: the)? (?P<season>spring|summer|autumn|fall|winter)\b", re.I, "season"),
    (r"\b(?P<part>early|late)(?: in)? (?P<which>this|last) (?P<unit>month|year)\b", re.I, "part_of"),
    (r"\b(?:the )?(?P<part>beginning|start|middle|end) of (?P<which>this|last) (?P<unit>month|year)\b", re.I,
     "part_of"),
    (r"\b(?P<which>this|last|past|previous) (?P<unit>week|month|year)\b", re.I, "this_last"),
    (r"\b(?:last|this past|the past) (?P<weekday>" + "|".join(_WEEKDAYS) + r")\b", re.I, "weekday"),
    (r"\bon (?P<weekday>" + "|".join(_WEEKDAYS) + r")\b", re.I, "on_weekday"),
    (rf"\b{_MONTH} (?P<day>\d{{1,2}})(?:st|nd|rd|th)?\b(?:,? {_YEAR}\b)?", 0, "month_day"),
    (rf"\b(?P<day>\d{{1,2}})(?:st|nd|rd|th)? (?:of )?{_MONTH}(?:,? {_YEAR}\b)?", 0, "day_month"),
    (rf"\b(?P<part>[Ee]arly|[Mm]id|[Ll]ate)[- ]?{_FULL_MONTH}(?:,? {_YEAR}\b)?", 0, "month_part"),
    (rf"\b(?:the )?(?P<part>beginning|start|middle|end) of {_FULL_MONTH}(?:,? {_YEAR}\b)?", re.I, "month_part"),
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
# 月初 / 上旬 …, and 月中 only where 中 ends the word (月中旬, 月中的, not 5月中国…)
_ZH_PART = r"(?P<part>初|上旬|中旬|下旬|底|末|中(?=[的时左，。,.？?！!\s]|$))"
_ZH_WHICH_YEAR = r"(?P<which>大前|去|今|前)年"  # 大前年 / 去年 / 今年 / 前年: cal.YEARS_BACK
_ZH_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_SATURDAY = 5  # a weekend: Saturday and Sunday

_ZH: list[tuple[re.Pattern[str], str]] = [(re.compile(p), kind) for p, kind in [
    (r"(?:(?:(?P<year>(?:19|20)\d\d)年|" + _ZH_WHICH_YEAR + r")的?)?"
     r"(?P<holiday>元旦|情人节|五一|劳动节|儿童节|教师节|国庆节?|万圣节|平安夜|圣诞节?|感恩节|春节|除夕|大年三十|元宵节|清明(?=节|假)|端午节?|中秋节?|重阳节?|母亲节|父亲节)",
     "holiday"),
    (_ZH_WHICH_YEAR + r"的?(?<![个\d一二两三四五六七八九十])" + _ZH_MONTH + "月份?" + _ZH_PART, "zh_month_part"),
    (_ZH_WHICH_YEAR + r"的?" + _ZH_DATE, "zh_date"),
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
    (r"[一1]年半(?:以|之)?前", "year_and_half"),
    (r"前一?段(?:时间|日子)|前一?阵子?|前些(?:日子|时候)", "while_ago"),
    (r"前些天", "few_days"),
    (r"半年(?:以|之)?前", "half_year"),
    (r"前天", "day2"),
    (r"昨(?:天|晚|日|夜)", "day1"),
    (r"今(?:天|晚|早|日)", "day0"),
    (rf"{_ZH_NUM}(?P<unit>天|周|个星期|个礼拜|个月|年)(?:以|之)?前", "ago"),
    (r"上(?:个)?(?:周|星期|礼拜)末", "weekend"),
    (r"(?:这|本)(?:个)?(?:周|星期|礼拜)末", "this_weekend"),
    (r"(?:(?P<year>(?:19|20)\d\d)年|" + _ZH_WHICH_YEAR + r")?的?(?P<season>春天|夏天|秋天|冬天|春季|夏季|秋季|冬季)",
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
    (r"(?:(?P<year>(?:19|20)\d\d)年|" + _ZH_WHICH_YEAR + r")(?P<part>年?初|年?底|年?末|上半年|下半年)", "zh_year_part"),
    (r"(?<![\d去今前明])(?P<part>年初|年底|年末|上半年|下半年)", "zh_year_part"),
    (r"上上个月", "month2"),
    (r"上(?:个)?月", "month1"),
    (r"(?:这个|本)月", "month0"),
    (r"大前年", "year3"),
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


def _resolve(kind: str, m: re.Match[str], anchor: datetime) -> Span | None:  # noqa: PLR0911 - one case a kind
    g = m.groupdict()
    year = int(g["year"]) if g.get("year") else None
    if g.get("which") in cal.YEARS_BACK:  # 今年 / 去年 / 前年 / 大前年 before a month, date, season or holiday
        year = cal.utc(anchor).year - cal.YEARS_BACK[g["which"]]
    if kind.startswith(("day", "week", "month", "year")) and kind[-1].isdigit():
        back = int(kind[-1])
        return {"day": lambda: cal.day_span(anchor, back=back), "week": lambda: cal.week_span(anchor, back),
                "month": lambda: cal.months_back(anchor, back),
                "year": lambda: cal.year_span(cal.utc(anchor).year - back)}[kind[:-1]]()
    if kind == "iso":
        return cal.date_span(anchor, int(g["m"]), int(g["d"]), int(g["y"]))
    if kind == "ago":
        n = _number(g["n"])
        return cal.ago(anchor, n, g["unit"].lower()) if n is not None and 0 < n < 100 else None
    if kind.startswith("ahead_day"):
        return cal.day_span(anchor, back=-int(kind[-1]))
    if kind == "next":
        return cal.months_back(anchor, -1) if g["unit"].lower() in ("month", "月") else (
            cal.year_span(cal.utc(anchor).year + 1) if g["unit"].lower() == "year" else cal.week_span(anchor, -1))
    if kind == "next_year":
        return cal.year_span(cal.utc(anchor).year + 1)
    if kind == "next_weekend":
        return cal.days_of_week(anchor, -1, _SATURDAY, days=2)
    if kind == "next_weekday":
        return cal.days_of_week(anchor, -1, _ZH_WEEKDAYS[g["weekday"]])
    if kind == "year_ago_now":  # the same days a year before, give or take a fortnight
        a = cal.day_span(anchor).start
        then = a.replace(year=a.year - 1, day=min(a.day, 28))
        return Span(then - timedelta(days=14), then + timedelta(days=15))
    if kind == "day_of_month":
        a, day = cal.utc(anchor), int(g["d"])
        month = cal.months_back(anchor, 0 if day <= a.day else 1).start
        return cal.date_span(anchor, month.month, day, month.year)
    if kind == "weekend_before_last":
        return cal.days_of_week(anchor, 2, _SATURDAY, days=2)
    if kind == "this_weekday":  # 这周三: that day of this calendar week, before or after the anchor
        return cal.days_of_week(anchor, 0, _ZH_WEEKDAYS[g["weekday"]])
    if kind == "this_weekend":
        return cal.days_of_week(anchor, 0, _SATURDAY, days=2)
    if kind == "few_days":
        return Span(cal.day_span(anchor, back=7).start, cal.day_span(anchor).end)
    if kind == "half_month":
        return Span(cal.day_span(anchor, back=20).start, cal.day_span(anchor, back=10).start)
    if kind == "half_year":
        return cal.months_back(anchor, 6)
    if kind == "year_and_half":
        return Span(cal.months_back(anchor, 20).start, cal.months_back(anchor, 16).end)
    if kind == "while_ago":  # vaguer than a few days: from a week to two months back
        return Span(cal.day_span(anchor, back=60).start, cal.day_span(anchor, back=7).start)
    if kind == "part_of":
        back = 0 if g["which"].lower() == "this" else 1
        if g["unit"].lower() == "month":
            return cal.month_part(cal.months_back(anchor, back), g["part"])
        return cal.year_part(cal.utc(anchor).year - back, g["part"])
    if kind == "month_of_year":
        which_year = cal.utc(anchor).year - (g["which"].lower() == "last")
        day = g.get("day") or g.get("day2")
        month = _MONTHS[g["month"]]
        return cal.date_span(anchor, month, int(day), which_year) if day else cal.month_span(which_year, month)
    if kind == "zh_month_day":
        back = {"上上": 2, "上": 1}.get(g["rel"].rstrip("个"), 0)
        month = cal.months_back(anchor, back).start
        day = _zh_number(g["d"])
        return cal.date_span(anchor, month.month, day, month.year) if day else None
    if kind == "month_part":
        return cal.month_part(cal.latest_month(anchor, _MONTHS[g["month"]], year), g["part"])
    if kind == "zh_month_part":
        if g.get("m"):
            month = _zh_number(g["m"])
            if month is None or not 1 <= month <= 12:
                return None
            return cal.month_part(cal.latest_month(anchor, month, year), g["part"])
        back = {"上上": 2, "上": 1}.get((g.get("rel") or "").rstrip("个"), 0)
        return cal.month_part(cal.months_back(anchor, back), g["part"])
    if kind == "zh_year_part":
        return cal.year_part(year if year is not None else cal.utc(anchor).year, g["part"])
    if kind == "on_weekday":
        w = g["weekday"]
        weekday = _ZH_WEEKDAYS[w] if w in _ZH_WEEKDAYS else _WEEKDAYS[w.lower()]
        return cal.day_span(anchor, back=(cal.utc(anchor).weekday() - weekday) % 7)
    if kind == "season":
        return cal.season(anchor, cal.SEASONS[g["season"].lower()], g.get("which"), year)
    if kind == "weekend":
        return cal.days_of_week(anchor, 1, _SATURDAY, days=2)
    if kind == "this_last":
        back = 0 if g["which"].lower() == "this" else 1
        unit = g["unit"].lower()
        if unit == "week":
            return cal.week_span(anchor, back)
        return cal.months_back(anchor, back) if unit == "month" else cal.year_span(cal.utc(anchor).year - back)
    if kind == "weekday":
        w = g["weekday"]
        if w in _ZH_WEEKDAYS:  # 上周三: that day of the previous calendar week
            return cal.days_of_week(anchor, 1, _ZH_WEEKDAYS[w])
        return cal.last_weekday(anchor, _WEEKDAYS[w.lower()])
    if kind in ("month_day", "day_month"):
        return cal.date_span(anchor, _MONTHS[g["month"]], int(g["day"]), year)
    if kind == "month":
        return cal.latest_month(anchor, _MONTHS[g["month"]], year)
    if kind in ("year", "zh_year"):
        return cal.year_span(int(g["year"]))
    if kind == "holiday":
        return cal.holiday(anchor, g["holiday"], year)
    if kind == "zh_date":
        month = _zh_number(g["m"])
        if month is None or not 1 <= month <= 12:
            return None
        if g.get("d"):
            day = _zh_number(g["d"])
            return cal.date_span(anchor, month, day, year) if day else None
        return cal.latest_month(anchor, month, year)
    return None


# A word every expression above holds: most texts have none, and looking for one costs a twentieth of all the
# patterns (search reads the times of a few dozen candidates when a question names one).
_WORD = re.compile(r"[A-Za-z]+|\d{4}")
_EN_TRIGGERS = frozenset(
    {"yesterday", "today", "tonight", "ago", "last", "this", "past", "previous", "weekend",
     "spring", "summer", "autumn", "fall", "winter", "christmas", "halloween", "thanksgiving", "valentine", "year",
     "independence", "other", "early", "mid", "late", "beginning", "start", "middle", "end", "easter", "mother",
     "mothers", "father", "fathers", "memorial", "labor", "labour", "lunar", "chinese", "lantern", "dragon",
     "fortnight", "fortnights", "tomorrow", "next", "st", "nd", "rd", "th", "back", "while"}
    | set(_WEEKDAYS)
)
_ZH_TRIGGER = re.compile(
    r"昨|今[天晚早日年]|去年|前[天年几段阵些一]|年半|(?:天|周|星期|礼拜|月|年)(?:以|之)?前|[上这本]个?(?:周|星期|礼拜|月)"
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
    "weekend_before_last", "year3", "year_and_half", "while_ago",
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
