"""The Gregorian dates of the Chinese lunisolar festivals, 2000–2040.

Taken from python-holidays 0.109 (MIT licence), `holidays.calendars.chinese._ChineseLunisolar`: one line a year,
month and day of the lunar new year (春节), Qingming (清明), the Dragon Boat festival (端午), Mid-Autumn (中秋) and
the Double Ninth (重阳). A table, not the package: five dates a year are all search needs of it.
"""

from __future__ import annotations

from datetime import date

_TABLE = """
2000 0205 0404 0606 0912 1006
2001 0124 0405 0625 1001 1025
2002 0212 0405 0615 0921 1014
2003 0201 0405 0604 0911 1004
2004 0122 0404 0622 0928 1022
2005 0209 0405 0611 0918 1011
2006 0129 0405 0531 1006 1030
2007 0218 0405 0619 0925 1019
2008 0207 0404 0608 0914 1007
2009 0126 0404 0528 1003 1026
2010 0214 0405 0616 0922 1016
2011 0203 0405 0606 0912 1005
2012 0123 0404 0623 0930 1023
2013 0210 0404 0612 0919 1013
2014 0131 0405 0602 0908 1002
2015 0219 0405 0620 0927 1021
2016 0208 0404 0609 0915 1009
2017 0128 0404 0530 1004 1028
2018 0216 0405 0618 0924 1017
2019 0205 0405 0607 0913 1007
2020 0125 0404 0625 1001 1025
2021 0212 0404 0614 0921 1014
2022 0201 0405 0603 0910 1004
2023 0122 0405 0622 0929 1023
2024 0210 0404 0610 0917 1011
2025 0129 0404 0531 1006 1029
2026 0217 0405 0619 0925 1018
2027 0206 0405 0609 0915 1008
2028 0126 0404 0528 1003 1026
2029 0213 0404 0616 0922 1016
2030 0203 0405 0605 0912 1005
2031 0123 0405 0624 1001 1024
2032 0211 0404 0612 0919 1012
2033 0131 0404 0601 0908 1001
2034 0219 0405 0620 0927 1020
2035 0208 0405 0610 0916 1009
2036 0128 0404 0530 1004 1027
2037 0215 0404 0618 0924 1017
2038 0204 0405 0607 0913 1007
2039 0124 0405 0527 1002 1026
2040 0212 0404 0614 0920 1014
"""

FESTIVALS: tuple[str, ...] = ("lunar_new_year", "qingming", "dragon_boat", "mid_autumn", "double_ninth")


def _parse() -> dict[int, dict[str, date]]:
    out: dict[int, dict[str, date]] = {}
    for line in _TABLE.split("\n"):
        if line.strip():
            year, *days = line.split()
            y = int(year)
            out[y] = {name: date(y, int(d[:2]), int(d[2:])) for name, d in zip(FESTIVALS, days, strict=True)}
    return out


DATES: dict[int, dict[str, date]] = _parse()


def festival(name: str, year: int) -> date | None:
    """The date of festival `name` (one of `FESTIVALS`) in `year`; None outside 2000–2040."""
    return DATES.get(year, {}).get(name)
