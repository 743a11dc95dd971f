"""Spans of calendar time, resolved against an anchor: days, weeks, months, years, seasons, holidays and their
parts (the arithmetic `times` resolves its expressions with). Half-open UTC spans; a month, a date or a holiday
without its year is the latest one at or before the anchor. Pure."""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from .lunar_dates import festival

YEARS_BACK = {"今": 0, "去": 1, "前": 2, "大前": 3}
"""今年 / 去年 / 前年 / 大前年: years before the anchor's."""


@dataclass(frozen=True)
class Span:
    """[start, end) in UTC."""

    start: datetime
    end: datetime

    def holds(self, moment: datetime) -> bool:
        return self.start <= utc(moment) < self.end

    def within(self, other: Span) -> bool:
        return other.start <= self.start and self.end <= other.end


def utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def day_span(anchor: datetime, back: int = 0, days: int = 1) -> Span:
    start = utc(anchor).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=back)
    return Span(start, start + timedelta(days=days))


def week_span(anchor: datetime, back: int) -> Span:
    """The calendar week (Monday first) `back` weeks before the anchor's."""
    monday = day_span(anchor).start - timedelta(days=utc(anchor).weekday()) - timedelta(weeks=back)
    return Span(monday, monday + timedelta(weeks=1))


def days_of_week(anchor: datetime, back: int, weekday: int, days: int = 1) -> Span:
    """`days` days from the `weekday` (Monday 0) of the calendar week `back` weeks before the anchor's (−1: the
    next week): 上周三 (1, 2), 这周五 (0, 4), next weekend (−1, 5, 2 days)."""
    start = week_span(anchor, back).start + timedelta(days=weekday)
    return Span(start, start + timedelta(days=days))


def month_span(year: int, month: int) -> Span:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return Span(start, end)


def months_back(anchor: datetime, back: int) -> Span:
    a = utc(anchor)
    index = a.year * 12 + a.month - 1 - back
    return month_span(index // 12, index % 12 + 1)


def year_span(year: int) -> Span:
    return Span(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))


def latest_month(anchor: datetime, month: int, year: int | None) -> Span:
    """The month of that year, or the latest such month at or before the anchor."""
    a = utc(anchor)
    return month_span(year if year is not None else (a.year if month <= a.month else a.year - 1), month)


def date_span(anchor: datetime, month: int, day: int, year: int | None) -> Span | None:
    """That day, or the latest such day at or before the anchor; None when it does not exist."""
    a = utc(anchor)
    y = year if year is not None else (a.year if (month, day) <= (a.month, a.day) else a.year - 1)
    if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(y, month)[1]:
        return None
    start = datetime(y, month, day, tzinfo=UTC)
    return Span(start, start + timedelta(days=1))


def ago(anchor: datetime, n: int, unit: str) -> Span:
    if unit in ("day", "天"):
        return day_span(anchor, back=n + 1, days=3)  # a day either side: "three days ago" is rarely exact
    if unit == "fortnight":
        n, unit = 2 * n, "week"
    if unit in ("week", "周", "个星期", "个礼拜"):
        return Span(day_span(anchor, back=7 * n + 3).start, day_span(anchor, back=7 * n - 4).start)
    if unit in ("month", "个月"):
        return months_back(anchor, n)
    return year_span(utc(anchor).year - n)


SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12,
            "春天": 3, "夏天": 6, "秋天": 9, "冬天": 12, "春季": 3, "夏季": 6, "秋季": 9, "冬季": 12}


S = TypeVar("S", Span, Span | None)


def latest(anchor: datetime, of: Callable[[int], S]) -> S:
    """`of` the anchor's year if it has begun by the anchor, else of the year before (None where `of` has none)."""
    a = utc(anchor)
    this = of(a.year)
    return this if this is not None and this.start <= a else of(a.year - 1)


def season(anchor: datetime, first_month: int, which: str | None, year: int | None) -> Span:
    """Three months from `first_month` (northern seasons; a winter runs into the next year): of that year, this
    year's (this), the last one ended before the anchor (last / previous / past), else the latest one begun at or
    before the anchor."""
    a = utc(anchor)
    which = (which or "").lower()

    def of(y: int) -> Span:
        return Span(month_span(y, first_month).start, months_back(datetime(y, first_month, 1, tzinfo=UTC), -3).start)

    if year is not None:
        return of(year)
    if which == "this":
        return of(a.year)
    found = latest(a, of)
    if which in ("last", "previous", "past") and found.end > a:
        return of(found.start.year - 1)
    return found


# Holidays on a fixed day: (month, first day, days); names lower case, without apostrophes.
HOLIDAYS: dict[str, tuple[int, int, int]] = {
    "christmas eve": (12, 24, 1), "christmas": (12, 24, 3), "new years eve": (12, 31, 1),
    "new years day": (1, 1, 1), "new years": (12, 31, 2), "valentines day": (2, 14, 1), "halloween": (10, 31, 1),
    "independence day": (7, 4, 1), "fourth of july": (7, 4, 1), "4th of july": (7, 4, 1),
    "元旦": (1, 1, 1), "情人节": (2, 14, 1), "五一": (5, 1, 5), "劳动节": (5, 1, 5), "儿童节": (6, 1, 1),
    "教师节": (9, 10, 1), "国庆": (10, 1, 7), "国庆节": (10, 1, 7), "万圣节": (10, 31, 1), "平安夜": (12, 24, 1),
    "圣诞": (12, 24, 3), "圣诞节": (12, 24, 3),
}
# Holidays on the nth weekday of a month (US): (month, weekday, n; -1 the last).
WEEKDAY_HOLIDAYS: dict[str, tuple[int, int, int]] = {
    "thanksgiving": (11, 3, 4), "感恩节": (11, 3, 4), "mothers day": (5, 6, 2), "母亲节": (5, 6, 2),
    "fathers day": (6, 6, 3), "父亲节": (6, 6, 3), "memorial day": (5, 0, -1), "labor day": (9, 0, 1),
    "labour day": (9, 0, 1),
}
# Lunisolar festivals (text/lunar_dates.py): (festival, days from it to the first day, days).
LUNAR_HOLIDAYS: dict[str, tuple[str, int, int]] = {
    "春节": ("lunar_new_year", -1, 8), "chinese new year": ("lunar_new_year", -1, 8),
    "lunar new year": ("lunar_new_year", -1, 8), "spring festival": ("lunar_new_year", -1, 8),
    "除夕": ("lunar_new_year", -1, 1), "大年三十": ("lunar_new_year", -1, 1),
    "元宵节": ("lunar_new_year", 14, 1), "lantern festival": ("lunar_new_year", 14, 1),
    "清明": ("qingming", 0, 1),
    "端午": ("dragon_boat", 0, 1), "端午节": ("dragon_boat", 0, 1), "dragon boat festival": ("dragon_boat", 0, 1),
    "中秋": ("mid_autumn", 0, 1), "中秋节": ("mid_autumn", 0, 1), "mid-autumn festival": ("mid_autumn", 0, 1),
    "重阳": ("double_ninth", 0, 1), "重阳节": ("double_ninth", 0, 1),
}


def nth_weekday(year: int, month: int, weekday: int, n: int) -> datetime:
    """The nth `weekday` (Monday 0) of the month; n = -1 the last."""
    if n < 0:
        last = datetime(year, month, calendar.monthrange(year, month)[1], tzinfo=UTC)
        return last - timedelta(days=(last.weekday() - weekday) % 7)
    first = datetime(year, month, 1, tzinfo=UTC)
    return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))


def easter(year: int) -> datetime:
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


def holiday_of(key: str, year: int) -> Span | None:
    """The holiday's span in `year`; None for a lunisolar festival outside the table's years."""
    if key == "easter":
        start, days = easter(year), 1
    elif key in WEEKDAY_HOLIDAYS:
        start, days = nth_weekday(year, *WEEKDAY_HOLIDAYS[key]), 1
    elif key in LUNAR_HOLIDAYS:
        name, offset, days = LUNAR_HOLIDAYS[key]
        day = festival(name, year)
        if day is None:
            return None
        start = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=offset)
    else:
        month, first, days = HOLIDAYS[key]
        start = datetime(year, month, first, tzinfo=UTC)
    return Span(start, start + timedelta(days=days))


def holiday(anchor: datetime, name: str, year: int | None) -> Span | None:
    """The holiday of that year, or the latest one begun at or before the anchor."""
    key = re.sub(r"['’]", "", name.lower())
    return holiday_of(key, year) if year is not None else latest(anchor, lambda y: holiday_of(key, y))


# Thirds of a month (days 1–10, 11–20, 21–end) and of a year (January–April, May–August, September–December).
PARTS = {"early": 0, "beginning": 0, "start": 0, "初": 0, "上旬": 0, "mid": 1, "middle": 1, "中": 1, "中旬": 1,
          "late": 2, "end": 2, "底": 2, "末": 2, "下旬": 2}


def month_part(month: Span, part: str) -> Span:
    third = PARTS[part.lower()]
    start = month.start + timedelta(days=10 * third)
    return Span(start, month.end if third == 2 else start + timedelta(days=10))


def year_part(year: int, part: str) -> Span:
    if part.endswith("半年"):
        first, months = (1 if part == "上半年" else 7), 6
    else:
        first, months = 1 + 4 * PARTS[part.lstrip("年").lower()], 4
    return Span(month_span(year, first).start, month_span(year, first + months - 1).end)


def last_weekday(anchor: datetime, weekday: int) -> Span:
    back = (utc(anchor).weekday() - weekday - 1) % 7 + 1  # strictly before the anchor's day
    return day_span(anchor, back=back)
