"""Date parsing and question time windows, shared by the benchmark and production search.

Three pure pieces:

* :func:`parse_date` reads the session/question date formats the datasets use
  (LongMemEval ``2023/05/20 (Sat) 02:21``, LoCoMo ``1:56 pm on 8 May, 2023``, ISO
  ``2023-05-20`` and ``May 20, 2023`` / ``20 May 2023``); it lives with the data
  (:mod:`engram_eval.data.dates`, which checks a record's date fields with it) and is
  re-exported here.
* :func:`resolve_time_window` turns the question's time expression ("3 weeks ago",
  "last Saturday", "in March", ...) into an inclusive :class:`TimeWindow` relative to the
  question date.
* :func:`temporal_multiplier` says how much a session whose date falls in the window is
  boosted. The retriever applies it exactly once per session.

Window rules (``qd`` = question date; every window is inclusive on both ends):

* ``N days/weeks/months/years ago`` -> a window centred on the target date
  ``qd - N units`` (months and years by calendar, the day clamped to the month's end) with a
  slack of +-1 day (days), +-4 days (weeks), +-15 days (months), +-183 days (years). Vague
  counts ("a couple of" = 2, "a few"/"few" = 3) widen the slack to at least one whole unit
  (1, 7, 30, 365 days). ``N`` is digits, one..twelve, "a"/"an" (= 1).
  A unit with ``ago`` but no count ("How many days ago did I ...?") asks for a duration,
  not a window, and yields no window.
* ``yesterday`` -> ``[qd-1, qd-1]``; ``the day before yesterday`` -> ``[qd-2, qd-2]``;
  ``today`` -> ``[qd, qd]``.
* ``last week`` -> from the Monday of the previous calendar week through ``qd-1`` (tolerant:
  covers both "the previous calendar week" and "about a week ago"); ``last month`` /
  ``last year`` -> the previous calendar month / year.
* ``this week/month/year`` -> from the start of the current calendar week (Monday) / month /
  year through ``qd``; ``earlier this week/month/year`` -> the same start through ``qd-1``
  (through the start itself when ``qd`` is the first day).
* ``last/past/on <weekday>`` -> the single day of the most recent such weekday strictly
  before ``qd``: "last Saturday" asked on a Saturday is the Saturday seven days earlier,
  asked on a Sunday it is yesterday.
* ``over the weekend`` / ``last weekend`` / ``past weekend`` -> the most recent Saturday
  strictly before ``qd`` and its Sunday, widened by a day on each side (Friday..Monday) and
  clipped so it never ends after ``qd``.
* ``in/during/of <Month>`` -> that calendar month ("the last week of March" is March);
  without a year, the most recent such month not after ``qd`` (the current month counts;
  "in December" asked in February is the previous year's December).
  ``in <Month> <year>`` -> that month; ``in <year>`` -> that year.
* Only plausible years count (:data:`YEARS`, 1900-2100): "in 0000" or "in 3001" names no
  window. A number followed by what it counts is not a year: "in 2000 steps", "in 1500
  calories" (a following word ending in "s" other than "was/has/is/this/does", or a unit
  such as "kg", "km", "feet", "%") gives no window.
* ``on <date>`` (e.g. "on May 3", "on 3 May 2023") -> that single day; without a year, the
  most recent such day not after ``qd``.
* ``past N days/weeks/months/years``, ``(in) the last/past N ...``, ``last N ...`` ->
  ``[qd - N units, qd]``; without a count ("the past week") N = 1; vague counts add one unit
  ("the past few days" -> ``[qd-4, qd]``).
* ``since <Month>`` / ``since <date>`` / ``since last <weekday>`` / ``since yesterday`` /
  ``since last week|month|year`` -> from the start of what follows ``since`` through ``qd``.

When several expressions occur, the one starting earliest in the question wins; at the same
start the longest match wins ("since last Tuesday" beats "last Tuesday", "in the last week"
beats "last week"); remaining ties go to the rule listed first above.

:func:`safe_time_window` is what retrievers call: it never raises, and says why there is
no window (:data:`STATUSES`: ``window``, ``no_expression``, ``no_question_date``,
``parse_error``), so one odd question can never abort a run.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from engram_eval.data.dates import (
    MONTH_ANY,
    MONTH_FULL,
    MONTH_NUMBERS,
    ORDINAL,
    YEARS,
    parse_date,
    safe_date,
    unparsable,
)

__all__ = [
    "STATUSES",
    "YEARS",
    "TimeWindow",
    "parse_date",
    "resolve_time_window",
    "safe_time_window",
    "temporal_multiplier",
    "unparsable",
]

#: What :func:`safe_time_window` reports for a question.
STATUSES = ("window", "no_expression", "no_question_date", "parse_error")


@dataclass(frozen=True)
class TimeWindow:
    """An inclusive date window resolved from a question's time expression.

    ``start <= end`` always holds. ``expression`` is the matched question text (original
    case, stripped) and ``kind`` names the rule that produced the window: ``"ago"``,
    ``"yesterday"``, ``"day_before_yesterday"``, ``"today"``, ``"last_week"``,
    ``"last_month"``, ``"last_year"``, ``"this_week"``, ``"this_month"``, ``"this_year"``,
    ``"earlier_this_week"``, ``"earlier_this_month"``, ``"earlier_this_year"``,
    ``"weekday"``, ``"weekend"``, ``"month"``, ``"year"``, ``"date"``, ``"rolling"`` or
    ``"since"``.
    """

    start: date
    end: date
    expression: str
    kind: str

    def __post_init__(self) -> None:
        if self.start > self.end:
            raise ValueError(f"TimeWindow start {self.start} is after end {self.end}")

    def contains(self, day: date) -> bool:
        """True when ``day`` (a date; a datetime is reduced to its date) lies in the window."""
        return self.start <= _as_date(day) <= self.end


# --------------------------------------------------------------------------- vocabulary

_WEEKDAYS: dict[str, int] = {
    "monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3,
    "friday": 4, "saturday": 5, "sunday": 6,
}  # fmt: skip
_WEEKDAY_RE = "|".join(_WEEKDAYS)

_NUMBER_WORDS: dict[str, int] = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip

# Vague quantities: value and whether the reading is vague (widens the window).
_VAGUE_QUANTITIES: dict[str, int] = {"a couple of": 2, "a couple": 2, "couple of": 2,
                                     "a few": 3, "few": 3}  # fmt: skip

_QTY = (
    r"\d{1,3}|a\s+couple\s+of|a\s+couple|couple\s+of|a\s+few|few|"
    + "|".join(_NUMBER_WORDS)
    + r"|an|a"
)
_UNIT = r"day|week|month|year"

_UNIT_DAYS: dict[str, int] = {"day": 1, "week": 7, "month": 30, "year": 365}
_AGO_SLACK_DAYS: dict[str, int] = {"day": 1, "week": 4, "month": 15, "year": 183}

_FLAGS = re.IGNORECASE


# --------------------------------------------------------------------------- date helpers


def _as_date(value: date) -> date:
    """A datetime reduced to its calendar date; a plain date unchanged."""
    return value.date() if isinstance(value, datetime) else value


def _month_end(year: int, month: int) -> date:
    return date(year, month, calendar.monthrange(year, month)[1])


def _add_months(day: date, months: int) -> date:
    """``day`` shifted by ``months`` calendar months, the day clamped to the month's end."""
    index = day.year * 12 + (day.month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _previous_weekday(qd: date, weekday: int) -> date:
    """The most recent ``weekday`` strictly before ``qd`` (7 days back when ``qd`` is one)."""
    delta = (qd.weekday() - weekday) % 7 or 7
    return qd - timedelta(days=delta)


def _recent_month(qd: date, month: int) -> int:
    """Year of the most recent ``month`` that does not start after ``qd``."""
    return qd.year if month <= qd.month else qd.year - 1


def _recent_day(qd: date, month: int, day: int) -> date | None:
    """The most recent ``month``/``day`` not after ``qd`` (Feb 29 goes back to a leap year)."""
    year = qd.year
    for _ in range(9):  # a leap day exists within any 8 consecutive years
        try:
            candidate = date(year, month, day)
        except ValueError:
            year -= 1
            continue
        if candidate <= qd:
            return candidate
        year -= 1
    return None


def _shift(qd: date, unit: str, amount: int) -> date:
    """``qd`` moved back by ``amount`` units (calendar months / years for those units)."""
    if unit == "month":
        return _add_months(qd, -amount)
    if unit == "year":
        return _add_months(qd, -12 * amount)
    return qd - timedelta(days=amount * _UNIT_DAYS[unit])


def _quantity(text: str | None) -> tuple[int, bool]:
    """(value, vague) of a matched quantity; a missing quantity reads as 1."""
    if text is None:
        return 1, False
    key = " ".join(text.lower().split())
    if key in _VAGUE_QUANTITIES:
        return _VAGUE_QUANTITIES[key], True
    if key in ("a", "an"):
        return 1, False
    if key in _NUMBER_WORDS:
        return _NUMBER_WORDS[key], False
    return int(key), False


def unparsable_dates(question: object) -> tuple[int, int]:
    """``(1 if the question's question_date is unparsable else 0, the number of its haystack
    sessions whose date is unparsable)`` (see :func:`unparsable`); a run counts these in its
    summary so a date the temporal step silently could not use is said, not swallowed."""
    sessions = getattr(question, "sessions", ())
    return (int(unparsable(getattr(question, "question_date", None))),
            sum(unparsable(getattr(s, "date", None)) for s in sessions))


def unparsable_date_counts(per_question: Iterable[tuple[int, int]]) -> dict[str, int]:
    """A run summary's ``unparsable_dates`` from :func:`unparsable_dates` of its questions."""
    pairs = list(per_question)
    return {"question_date": sum(q for q, _ in pairs), "session_dates": sum(s for _, s in pairs)}


# --------------------------------------------------------------------------- window rules

# A rule takes a regex match and the question date and returns (start, end, kind) or None.
_Resolver = Callable[[re.Match[str], date], tuple[date, date, str] | None]


def _r_ago(m: re.Match[str], qd: date) -> tuple[date, date, str] | None:
    unit = m.group("unit").lower()
    amount, vague = _quantity(m.group("qty"))
    if amount <= 0:
        return None
    target = _shift(qd, unit, amount)
    slack = _AGO_SLACK_DAYS[unit]
    if vague:
        slack = max(slack, _UNIT_DAYS[unit])
    return target - timedelta(days=slack), target + timedelta(days=slack), "ago"


def _r_day_before_yesterday(m: re.Match[str], qd: date) -> tuple[date, date, str]:
    day = qd - timedelta(days=2)
    return day, day, "day_before_yesterday"


def _r_yesterday(m: re.Match[str], qd: date) -> tuple[date, date, str]:
    day = qd - timedelta(days=1)
    return day, day, "yesterday"


def _r_today(m: re.Match[str], qd: date) -> tuple[date, date, str]:
    return qd, qd, "today"


def _last_period(period: str, qd: date) -> tuple[date, date]:
    """The tolerant window of ``last week|month|year`` (see the module docstring)."""
    if period == "week":
        return _monday(qd) - timedelta(days=7), qd - timedelta(days=1)
    if period == "month":
        first = _add_months(qd.replace(day=1), -1)
        return first, _month_end(first.year, first.month)
    return date(qd.year - 1, 1, 1), date(qd.year - 1, 12, 31)


def _period_start(period: str, qd: date) -> date:
    """First day of the current calendar week (Monday), month or year containing ``qd``."""
    if period == "week":
        return _monday(qd)
    if period == "month":
        return qd.replace(day=1)
    return date(qd.year, 1, 1)


def _r_last_period(m: re.Match[str], qd: date) -> tuple[date, date, str]:
    period = m.group("period").lower()
    start, end = _last_period(period, qd)
    return start, end, f"last_{period}"


def _r_this_period(m: re.Match[str], qd: date) -> tuple[date, date, str]:
    period = m.group("period").lower()
    return _period_start(period, qd), qd, f"this_{period}"


def _r_earlier_this(m: re.Match[str], qd: date) -> tuple[date, date, str]:
    period = m.group("period").lower()
    start = _period_start(period, qd)
    return start, max(start, qd - timedelta(days=1)), f"earlier_this_{period}"


def _r_weekday(m: re.Match[str], qd: date) -> tuple[date, date, str]:
    day = _previous_weekday(qd, _WEEKDAYS[m.group("weekday").lower()])
    return day, day, "weekday"


def _r_weekend(m: re.Match[str], qd: date) -> tuple[date, date, str]:
    saturday = _previous_weekday(qd, 5)
    return (
        saturday - timedelta(days=1),
        min(saturday + timedelta(days=2), qd),
        "weekend",
    )


def _r_month(m: re.Match[str], qd: date) -> tuple[date, date, str] | None:
    month = MONTH_NUMBERS[m.group("month").lower()]
    year_text = m.group("year")
    year = int(year_text) if year_text else _recent_month(qd, month)
    if year not in YEARS:
        return None
    return date(year, month, 1), _month_end(year, month), "month"


def _r_year(m: re.Match[str], qd: date) -> tuple[date, date, str] | None:
    year = int(m.group("year"))
    if year not in YEARS:
        return None
    return date(year, 1, 1), date(year, 12, 31), "year"


def _explicit_day(m: re.Match[str], qd: date) -> date | None:
    """The date named by the ``_DATE_BODY`` groups of ``m`` (year optional)."""
    if m.group("iso_y"):
        return safe_date(
            int(m.group("iso_y")), int(m.group("iso_m")), int(m.group("iso_d"))
        )
    if m.group("md_month"):
        month, day, year = m.group("md_month"), m.group("md_day"), m.group("md_year")
    else:
        month, day, year = m.group("dm_month"), m.group("dm_day"), m.group("dm_year")
    month_number = MONTH_NUMBERS[month.lower().rstrip(".")]
    if year:
        return safe_date(int(year), month_number, int(day))
    return _recent_day(qd, month_number, int(day))


def _r_on_date(m: re.Match[str], qd: date) -> tuple[date, date, str] | None:
    day = _explicit_day(m, qd)
    return None if day is None else (day, day, "date")


def _r_rolling(m: re.Match[str], qd: date) -> tuple[date, date, str] | None:
    if m.group("kw").lower() == "last" and not m.group("the") and not m.group("qty"):
        return None  # bare "last week/month/year" is the calendar rule
    unit = m.group("unit").lower()
    amount, vague = _quantity(m.group("qty"))
    if amount <= 0:
        return None
    if vague:
        amount += 1
    return _shift(qd, unit, amount), qd, "rolling"


def _r_since(m: re.Match[str], qd: date) -> tuple[date, date, str] | None:
    start: date | None
    if m.group("s_weekday"):
        start = _previous_weekday(qd, _WEEKDAYS[m.group("s_weekday").lower()])
    elif m.group("s_period"):
        start = _last_period(m.group("s_period").lower(), qd)[0]
    elif m.group("s_yesterday"):
        start = qd - timedelta(days=1)
    elif m.group("iso_y") or m.group("md_month") or m.group("dm_month"):
        start = _explicit_day(m, qd)
    else:
        month = MONTH_NUMBERS[m.group("s_month").lower()]
        year = int(m.group("s_year")) if m.group("s_year") else _recent_month(qd, month)
        if year not in YEARS:
            return None
        start = date(year, month, 1)
    if start is None or start > qd:
        return None
    return start, qd, "since"


# A date with an optional year, used after "on" and "since"; named groups feed _explicit_day.
_DATE_BODY = (
    r"(?:(?P<iso_y>\d{4})[/-](?P<iso_m>\d{1,2})[/-](?P<iso_d>\d{1,2})(?!\d)"
    rf"|(?P<md_month>{MONTH_ANY})\.?\s+(?P<md_day>\d{{1,2}}){ORDINAL}(?!\d)"
    r"(?:,?\s+(?P<md_year>\d{4})(?!\d))?"
    rf"|(?P<dm_day>\d{{1,2}}){ORDINAL}\s+(?:of\s+)?(?P<dm_month>{MONTH_ANY})\b\.?"
    r"(?:,?\s+(?P<dm_year>\d{4})(?!\d))?)"
)

# After a bare year: not a count of something ("in 2000 steps", "in 1500 kcal", "in 2000%").
_NOT_A_COUNT = (
    r"(?!\s*%)(?!\s+(?!(?:was|has|is|this|does|as|us|its|yes)\b)[a-z]+s\b)"
    r"(?!\s+(?:kg|km|kcal|cal|lb|lbs|mg|ml|mph|rpm|usd|eur|feet|foot|k|m|ft)\b)"
)

# Rules in priority order (only used to break ties of equal start and length).
_RULES: tuple[tuple[re.Pattern[str], _Resolver], ...] = (
    (
        re.compile(
            r"\bsince\s+(?:(?:last|this\s+past|past)\s+(?P<s_weekday>"
            + _WEEKDAY_RE
            + r")\b"
            r"|last\s+(?P<s_period>week|month|year)\b"
            r"|(?P<s_yesterday>yesterday)\b"
            rf"|{_DATE_BODY}"
            rf"|(?P<s_month>{MONTH_FULL})\b(?:,?\s+(?:of\s+)?(?P<s_year>\d{{4}})(?!\d))?)",
            _FLAGS,
        ),
        _r_since,
    ),
    (re.compile(rf"\b(?P<qty>{_QTY})\s+(?P<unit>{_UNIT})s?\s+ago\b", _FLAGS), _r_ago),
    (
        re.compile(r"\bthe\s+day\s+before\s+yesterday\b", _FLAGS),
        _r_day_before_yesterday,
    ),
    (re.compile(r"\byesterday\b", _FLAGS), _r_yesterday),
    (re.compile(r"\btoday\b", _FLAGS), _r_today),
    (
        re.compile(r"\bearlier\s+this\s+(?P<period>week|month|year)\b", _FLAGS),
        _r_earlier_this,
    ),
    (
        re.compile(
            r"\b(?:(?:over|during)\s+the\s+(?:last\s+|past\s+)?weekend"
            r"|(?:this\s+)?(?:last|past)\s+weekend)\b",
            _FLAGS,
        ),
        _r_weekend,
    ),
    (
        re.compile(
            r"\b(?:(?:in|during|over|within)\s+)?(?P<the>the\s+)?(?P<kw>past|last)\s+"
            rf"(?:(?P<qty>{_QTY})\s+)?(?P<unit>{_UNIT})s?\b(?!\s+of\b)",
            _FLAGS,
        ),
        _r_rolling,
    ),
    (
        re.compile(r"\blast\s+(?P<period>week|month|year)\b(?!\s+of\b)", _FLAGS),
        _r_last_period,
    ),
    (re.compile(r"\bthis\s+(?P<period>week|month|year)\b", _FLAGS), _r_this_period),
    (
        re.compile(
            r"\b(?:last|on|(?:this\s+)?past)\s+(?P<weekday>" + _WEEKDAY_RE + r")\b",
            _FLAGS,
        ),
        _r_weekday,
    ),
    (re.compile(rf"\bon\s+(?:the\s+)?{_DATE_BODY}", _FLAGS), _r_on_date),
    (
        re.compile(
            r"\b(?:in|during|of)\s+(?:(?:early|mid|late)[\s-]+)?(?:the\s+month\s+of\s+)?"
            rf"(?P<month>{MONTH_FULL})\b(?:,?\s+(?:of\s+)?(?P<year>\d{{4}})(?!\d))?",
            _FLAGS,
        ),
        _r_month,
    ),
    (re.compile(r"\b(?:in|during)\s+(?P<year>\d{4})(?!\d)" + _NOT_A_COUNT, _FLAGS), _r_year),
)


def resolve_time_window(question: str, question_date: date) -> TimeWindow | None:
    """The inclusive date window named by the question's time expression, or None.

    ``question_date`` is the date the question is asked (a datetime is reduced to its date).
    The rules and their tolerances are listed in the module docstring. Returns None when the
    question has no supported time expression, including duration questions such as
    "How many days ago did I buy X?" ("days ago" without a count asks *how long*, it does not
    name a window). When several expressions occur, the earliest wins, then the longest.
    """
    qd = _as_date(question_date)
    best: tuple[int, int, int, TimeWindow] | None = None
    for priority, (pattern, resolve) in enumerate(_RULES):
        for m in pattern.finditer(question):
            resolved = resolve(m, qd)
            if resolved is None:
                continue
            start, end, kind = resolved
            window = TimeWindow(start, end, m.group(0).strip(), kind)
            key = (m.start(), -(m.end() - m.start()), priority, window)
            if best is None or key[:3] < best[:3]:
                best = key
            break  # later matches of the same rule start later and cannot win
    return None if best is None else best[3]


# --------------------------------------------------------------------------- multiplier


def temporal_multiplier(
    session_date: date | None, window: TimeWindow | None, *, boost: float = 1.25
) -> float:
    """``boost`` when ``session_date`` lies in ``window`` (inclusive), else 1.0.

    Unknown session dates and questions without a window give 1.0. A datetime session date
    is reduced to its date. ``boost`` must be a finite positive number (ValueError otherwise).
    Pure: the caller applies the result once per session, however many of the session's
    documents (user and assistant text) matched.
    """
    if not (isinstance(boost, (int, float)) and math.isfinite(boost) and boost > 0):
        raise ValueError(f"boost must be a finite positive number, got {boost!r}")
    if session_date is None or window is None:
        return 1.0
    return float(boost) if window.contains(session_date) else 1.0


def safe_time_window(question: str, question_date: str | date | None
                     ) -> tuple[TimeWindow | None, str]:
    """``(window or None, status)``; never raises.

    ``question_date`` is the dataset's date string (or a date). Status is ``window`` when a
    window was resolved, ``no_question_date`` when the question has no parseable date (e.g.
    LoCoMo, whose questions carry none), ``no_expression`` when the question names no
    supported time expression, ``parse_error`` when parsing failed unexpectedly (counted, the
    question simply gets no window).
    """
    try:
        if isinstance(question_date, date):
            qd: date | None = _as_date(question_date)
        else:
            qd = parse_date(question_date or "")
        if qd is None:
            return None, "no_question_date"
        window = resolve_time_window(question or "", qd)
    except Exception:  # noqa: BLE001 - the point: one question never aborts a run
        return None, "parse_error"
    return (window, "window") if window is not None else (None, "no_expression")
