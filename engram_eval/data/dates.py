"""Dates as the datasets and fixtures write them: the one reader of a date string, and the
one check of a record's date field.

* :func:`parse_date` reads the session/question date formats the datasets use
  (LongMemEval ``2023/05/20 (Sat) 02:21``, LoCoMo ``1:56 pm on 8 May, 2023``, ISO
  ``2023-05-20`` and ``May 20, 2023`` / ``20 May 2023``); :func:`unparsable` says a date is
  written but cannot be read. The temporal step (:mod:`engram_eval.retrieval.temporal`)
  resolves question time windows against what it returns and reuses its month vocabulary.
* :func:`read_date` is the check of a record's date field, one :class:`DataError` naming
  file, record and field: a required date that is missing (LoCoMo's
  ``session_N_date_time``), or a date that must be readable and is not (a production
  fixture's memory ``date`` and question ``now``, a memory added to a store, a search's
  ``now``: the temporal step would silently ignore it).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from datetime import date
from pathlib import Path

from engram_eval.errors import DataError

#: Years accepted in dates and time expressions.
YEARS = range(1900, 2101)

MONTH_NUMBERS: dict[str, int] = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6,
    "july": 7, "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8,
    "sep": 9, "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip

# Full names only where a bare month name stands alone ("in May"); abbreviations are
# accepted only next to a day number, where they cannot be ordinary words.
FULL_MONTH_NAMES = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
#: Regular-expression alternatives: full month names; any month name or abbreviation.
MONTH_FULL = "|".join(FULL_MONTH_NAMES)
MONTH_ANY = MONTH_FULL + "|sept|sep|jan|feb|mar|apr|jun|jul|aug|oct|nov|dec"
#: An optional ordinal suffix after a day number ("3rd").
ORDINAL = r"(?:st|nd|rd|th)?"

#: The forms a date may be written in, for messages.
FORMS = "2024-03-02, 2024/03/02, 'March 2, 2024'"

_NUMERIC_DATE = re.compile(r"(?<!\d)(\d{4})[/-](\d{1,2})[/-](\d{1,2})(?!\d)")
_DAY_MONTH_YEAR = re.compile(
    rf"\b(\d{{1,2}}){ORDINAL}\s+(?:of\s+)?({MONTH_ANY})\.?,?\s+(\d{{4}})(?!\d)",
    re.IGNORECASE,
)
_MONTH_DAY_YEAR = re.compile(
    rf"\b({MONTH_ANY})\.?\s+(\d{{1,2}}){ORDINAL},?\s+(\d{{4}})(?!\d)", re.IGNORECASE
)


def _date_matches(text: str) -> Iterator[tuple[int, date | None]]:
    """Every date-shaped match in ``text`` as (start offset, date or None when invalid)."""
    for m in _NUMERIC_DATE.finditer(text):
        yield m.start(), safe_date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    for m in _DAY_MONTH_YEAR.finditer(text):
        month = MONTH_NUMBERS[m.group(2).lower()]
        yield m.start(), safe_date(int(m.group(3)), month, int(m.group(1)))
    for m in _MONTH_DAY_YEAR.finditer(text):
        month = MONTH_NUMBERS[m.group(1).lower()]
        yield m.start(), safe_date(int(m.group(3)), month, int(m.group(2)))


def safe_date(year: int, month: int, day: int) -> date | None:
    """The date, or None for an impossible one or a year outside :data:`YEARS`."""
    if year not in YEARS:
        return None
    try:
        return date(year, month, day)
    except ValueError:
        return None


def parse_date(text: str) -> date | None:
    """The calendar date written in ``text``, or None when there is no valid one.

    Accepted forms (case-insensitive, anywhere in the text; time of day is ignored):
    ``2023/05/20 (Sat) 02:21`` (LongMemEval), ``1:56 pm on 8 May, 2023`` (LoCoMo),
    ``2023-05-20`` / ``2023-05-20T08:30:00`` (ISO), ``May 20, 2023`` and ``20 May 2023``
    (full or abbreviated month names, optional ordinal suffix). When several dates occur,
    the first valid one in the text wins. Impossible dates (``2023/02/29``) are not dates.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    found = sorted(
        ((start, day) for start, day in _date_matches(text) if day is not None),
        key=lambda item: item[0],
    )
    return found[0][1] if found else None


def unparsable(text: object) -> bool:
    """True for a date string that is not empty but that :func:`parse_date` cannot read (an
    empty or missing date is absent, not unparsable)."""
    return isinstance(text, str) and bool(text.strip()) and _unreadable(text)


@functools.lru_cache(maxsize=4096)
def _unreadable(text: str) -> bool:
    # LoCoMo questions share their conversation's sessions: each date is parsed once
    return parse_date(text) is None


def read_date(path: str | Path, record: str, field: str, value: object, *,
              required: bool = False, readable: bool = False, of: str = "",
              instead: str = "leave it out for none") -> str:
    """The date string ``value`` of ``field`` in ``record`` of ``path``, checked; every
    failure is one :class:`DataError` naming the three.

    A date that is absent (None) is ``""`` -- unless ``required``: "missing date (for
    ``of``)". A value that is not a string is refused. With ``readable``, a date that is
    written but that :func:`parse_date` cannot read (an impossible day such as
    ``2024-02-30``, or another format) is refused, the message listing the forms read and
    saying what to do instead (``instead``); an empty string is no date."""
    if value is None:
        if required:
            raise DataError(path, record, field, "missing date" + (f" for {of}" if of else ""))
        return ""
    if not isinstance(value, str):
        raise DataError(path, record, field,
                        f"a date must be a string, got {type(value).__name__}")
    if readable and unparsable(value):
        raise DataError(path, record, field, f"{value[:80]!r} is not a calendar date (an "
                        f"impossible day, or no date this package reads: {FORMS}); {instead}")
    return value
