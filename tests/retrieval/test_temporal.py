"""Tests for engram_eval.retrieval.temporal (expected dates worked out by hand)."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from engram_eval.retrieval.temporal import (
    TimeWindow,
    parse_date,
    resolve_time_window,
    temporal_multiplier,
)

SAT = date(2023, 5, 20)  # a Saturday (LongMemEval-style "2023/05/20 (Sat)")
SUN = date(2023, 5, 21)
MON = date(2023, 5, 22)

D = date

WINDOW_CASES = [
    # --- N units ago: target +- slack (days 1, weeks 4, months 15, years 183)
    ("What did I buy 3 days ago?", SAT, D(2023, 5, 16), D(2023, 5, 18)),
    ("Where did I eat ten days ago?", SAT, D(2023, 5, 9), D(2023, 5, 11)),
    ("What did I do two weeks ago?", SAT, D(2023, 5, 2), D(2023, 5, 10)),
    ("Who did I meet a week ago?", SAT, D(2023, 5, 9), D(2023, 5, 17)),
    (
        "What was the first thing I did 4 weeks ago?",
        SAT,
        D(2023, 4, 18),
        D(2023, 4, 26),
    ),
    ("What did I plant 3 months ago?", SAT, D(2023, 2, 5), D(2023, 3, 7)),
    (
        "What did I order 3 months ago?",
        D(2024, 1, 31),
        D(2023, 10, 16),
        D(2023, 11, 15),
    ),
    ("What happened a month ago?", D(2024, 3, 31), D(2024, 2, 14), D(2024, 3, 15)),
    ("Where did I travel a year ago?", SAT, D(2021, 11, 18), D(2022, 11, 19)),
    # vague counts: slack widened to a whole unit
    ("What did I cook a couple of days ago?", SAT, D(2023, 5, 17), D(2023, 5, 19)),
    ("What did I buy a few days ago?", SAT, D(2023, 5, 16), D(2023, 5, 18)),
    ("Which concert did I attend a few weeks ago?", SAT, D(2023, 4, 22), D(2023, 5, 6)),
    # --- single days
    ("What did I have for dinner yesterday?", SAT, D(2023, 5, 19), D(2023, 5, 19)),
    ("What did I do yesterday?", D(2024, 3, 1), D(2024, 2, 29), D(2024, 2, 29)),
    ("Who called me the day before yesterday?", SAT, D(2023, 5, 18), D(2023, 5, 18)),
    ("What is on my plan today?", SAT, D(2023, 5, 20), D(2023, 5, 20)),
    # --- calendar periods
    ("What did I read last week?", SAT, D(2023, 5, 8), D(2023, 5, 19)),
    ("What did I read last week?", MON, D(2023, 5, 15), D(2023, 5, 21)),
    ("What did I buy last month?", SAT, D(2023, 4, 1), D(2023, 4, 30)),
    ("What did I buy last month?", D(2024, 1, 10), D(2023, 12, 1), D(2023, 12, 31)),
    ("What did I buy last month?", D(2024, 3, 15), D(2024, 2, 1), D(2024, 2, 29)),
    ("Where did I go last year?", SAT, D(2022, 1, 1), D(2022, 12, 31)),
    ("How much have I run this week?", SAT, D(2023, 5, 15), D(2023, 5, 20)),
    ("How much have I run this week?", MON, D(2023, 5, 22), D(2023, 5, 22)),
    ("What did I spend this month?", SAT, D(2023, 5, 1), D(2023, 5, 20)),
    ("What did I mention earlier this month?", SAT, D(2023, 5, 1), D(2023, 5, 19)),
    ("Which book did I finish earlier this year?", SAT, D(2023, 1, 1), D(2023, 5, 19)),
    # --- weekdays: most recent such weekday strictly before the question date
    ("Where did I go last Saturday?", SAT, D(2023, 5, 13), D(2023, 5, 13)),
    ("Where did I go last Saturday?", SUN, D(2023, 5, 20), D(2023, 5, 20)),
    ("What did I eat last Friday?", SAT, D(2023, 5, 19), D(2023, 5, 19)),
    ("Whom did I meet on Monday?", SAT, D(2023, 5, 15), D(2023, 5, 15)),
    ("What did I bake this past Sunday?", SAT, D(2023, 5, 14), D(2023, 5, 14)),
    # --- weekends: Saturday..Sunday widened to Friday..Monday, clipped at the question date
    ("What did I do over the weekend?", SAT, D(2023, 5, 12), D(2023, 5, 15)),
    ("What did I do last weekend?", MON, D(2023, 5, 19), D(2023, 5, 22)),
    ("What did I do over the weekend?", SUN, D(2023, 5, 19), D(2023, 5, 21)),
    # --- months and years
    ("What did I plant in March?", SAT, D(2023, 3, 1), D(2023, 3, 31)),
    ("What did I plant in May?", SAT, D(2023, 5, 1), D(2023, 5, 31)),
    ("Where did I go in June?", SAT, D(2022, 6, 1), D(2022, 6, 30)),
    (
        "What gifts did I buy in December?",
        D(2024, 2, 10),
        D(2023, 12, 1),
        D(2023, 12, 31),
    ),
    ("What did I do in February 2024?", SAT, D(2024, 2, 1), D(2024, 2, 29)),
    ("What did I buy in February?", D(2023, 3, 10), D(2023, 2, 1), D(2023, 2, 28)),
    ("What did I do in the last week of March?", SAT, D(2023, 3, 1), D(2023, 3, 31)),
    ("Which trips did I take in 2022?", SAT, D(2022, 1, 1), D(2022, 12, 31)),
    # --- explicit days
    ("What did I do on May 3?", SAT, D(2023, 5, 3), D(2023, 5, 3)),
    ("What did I do on May 30?", SAT, D(2022, 5, 30), D(2022, 5, 30)),
    ("What did I do on February 29?", D(2025, 3, 1), D(2024, 2, 29), D(2024, 2, 29)),
    # --- rolling windows ending at the question date
    ("What did I eat in the past 10 days?", SAT, D(2023, 5, 10), D(2023, 5, 20)),
    (
        "Which films did I watch in the past two weeks?",
        SAT,
        D(2023, 5, 6),
        D(2023, 5, 20),
    ),
    ("How often did I swim in the last 3 months?", SAT, D(2023, 2, 20), D(2023, 5, 20)),
    ("What did I say during the last 5 days?", SAT, D(2023, 5, 15), D(2023, 5, 20)),
    ("What did I buy in the past week?", SAT, D(2023, 5, 13), D(2023, 5, 20)),
    ("What did I cook in the past few days?", SAT, D(2023, 5, 16), D(2023, 5, 20)),
    (
        "What did I learn over the last couple of weeks?",
        SAT,
        D(2023, 4, 29),
        D(2023, 5, 20),
    ),
    # --- since
    ("How many books have I read since March?", SAT, D(2023, 3, 1), D(2023, 5, 20)),
    ("What changed since May 3?", SAT, D(2023, 5, 3), D(2023, 5, 20)),
    ("What have I eaten since last Tuesday?", SAT, D(2023, 5, 16), D(2023, 5, 20)),
    ("What happened since 2023-04-01?", SAT, D(2023, 4, 1), D(2023, 5, 20)),
    ("What have I fixed since last week?", SAT, D(2023, 5, 8), D(2023, 5, 20)),
    ("What have I saved since May 2022?", SAT, D(2022, 5, 1), D(2023, 5, 20)),
]


@pytest.mark.parametrize(("question", "asked", "start", "end"), WINDOW_CASES)
def test_resolve_time_window_table(
    question: str, asked: date, start: date, end: date
) -> None:
    window = resolve_time_window(question, asked)
    assert window is not None, question
    assert (window.start, window.end) == (start, end)
    assert window.expression.lower() in question.lower()


@pytest.mark.parametrize(
    "question",
    [
        "How many days ago did I buy the blender?",
        "How many weeks ago did I start yoga?",
        "How many months ago did I move to Berlin?",
        "How long ago did I adopt my cat?",
        "What is my favourite colour?",
        "What did I do an hour ago?",
        "What do I usually do on Saturdays?",
        "What may I bring to the party?",
        "",
    ],
)
def test_no_time_expression_gives_none(question: str) -> None:
    assert resolve_time_window(question, SAT) is None


@pytest.mark.parametrize(
    ("question", "expression", "kind"),
    [
        ("What did I buy 3 weeks ago at the mall?", "3 weeks ago", "ago"),
        ("What have I eaten since last Tuesday?", "since last Tuesday", "since"),
        ("What did I buy in the last week?", "in the last week", "rolling"),
        ("What did I read last week?", "last week", "last_week"),
        ("Where did I go Last Saturday?", "Last Saturday", "weekday"),
        ("What did I do over the weekend?", "over the weekend", "weekend"),
        ("What did I plant in March 2021?", "in March 2021", "month"),
        (
            "What did I mention earlier this month?",
            "earlier this month",
            "earlier_this_month",
        ),
    ],
)
def test_expression_and_kind(question: str, expression: str, kind: str) -> None:
    window = resolve_time_window(question, SAT)
    assert window is not None
    assert window.expression == expression
    assert window.kind == kind


def test_earliest_expression_wins() -> None:
    window = resolve_time_window("Yesterday or last Saturday, which was busier?", SAT)
    assert window is not None and window.kind == "yesterday"
    assert (window.start, window.end) == (D(2023, 5, 19), D(2023, 5, 19))


def test_duration_question_still_finds_a_real_window() -> None:
    window = resolve_time_window("How many days ago did I buy the lamp in March?", SAT)
    assert window is not None
    assert (window.start, window.end) == (D(2023, 3, 1), D(2023, 3, 31))


def test_ago_windows_contain_exact_target() -> None:
    asked = D(2023, 5, 20)
    exact = {
        "5 days ago": D(2023, 5, 15),
        "2 weeks ago": D(2023, 5, 6),
        "6 months ago": D(2022, 11, 20),
        "2 years ago": D(2021, 5, 20),
    }
    for text, target in exact.items():
        window = resolve_time_window(f"What did I do {text}?", asked)
        assert window is not None and window.contains(target), text
        assert window.end < asked


def test_datetime_question_date_accepted() -> None:
    window = resolve_time_window(
        "What did I do yesterday?", datetime(2023, 5, 20, 2, 21)
    )
    assert window is not None
    assert (window.start, window.end) == (D(2023, 5, 19), D(2023, 5, 19))


def test_time_window_rejects_reversed_bounds() -> None:
    with pytest.raises(ValueError):
        TimeWindow(D(2023, 5, 2), D(2023, 5, 1), "x", "date")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023/05/20 (Sat) 02:21", D(2023, 5, 20)),
        ("2024/02/29 (Thu) 10:00", D(2024, 2, 29)),
        ("1:56 pm on 8 May, 2023", D(2023, 5, 8)),
        ("7:00 pm on 29 February, 2024", D(2024, 2, 29)),
        ("10:37 am on 27 June, 2023", D(2023, 6, 27)),
        ("2023-05-20", D(2023, 5, 20)),
        ("2023-05-20T08:30:00", D(2023, 5, 20)),
        ("May 20, 2023", D(2023, 5, 20)),
        ("Sept. 3rd, 2022", D(2022, 9, 3)),
        ("20 May 2023", D(2023, 5, 20)),
        ("1st of January 2020", D(2020, 1, 1)),
        ("2023/02/29 (Wed) 10:00", None),
        ("31 April 2023", None),
        ("", None),
        ("not a date at all", None),
        ("2:00 pm", None),
    ],
)
def test_parse_date(text: str, expected: date | None) -> None:
    assert parse_date(text) == expected


WINDOW = TimeWindow(D(2023, 5, 2), D(2023, 5, 10), "two weeks ago", "ago")


@pytest.mark.parametrize(
    ("session_date", "window", "expected"),
    [
        (D(2023, 5, 6), WINDOW, 1.25),
        (D(2023, 5, 2), WINDOW, 1.25),  # inclusive start
        (D(2023, 5, 10), WINDOW, 1.25),  # inclusive end
        (datetime(2023, 5, 10, 23, 59), WINDOW, 1.25),  # datetime reduced to its date
        (D(2023, 5, 1), WINDOW, 1.0),
        (D(2023, 5, 11), WINDOW, 1.0),
        (None, WINDOW, 1.0),  # unknown session date
        (D(2023, 5, 6), None, 1.0),  # no time expression
    ],
)
def test_temporal_multiplier(
    session_date: date | None, window: TimeWindow | None, expected: float
) -> None:
    assert temporal_multiplier(session_date, window) == expected


def test_temporal_multiplier_custom_boost_and_validation() -> None:
    assert temporal_multiplier(D(2023, 5, 6), WINDOW, boost=2.0) == 2.0
    assert temporal_multiplier(D(2023, 6, 6), WINDOW, boost=2.0) == 1.0
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            temporal_multiplier(D(2023, 5, 6), WINDOW, boost=bad)


def test_multiplier_with_parsed_dates_end_to_end() -> None:
    asked = parse_date("2023/05/20 (Sat) 02:21")
    assert asked is not None
    window = resolve_time_window("What did I buy last Saturday?", asked)
    assert temporal_multiplier(parse_date("2023/05/13 (Sat) 18:02"), window) == 1.25
    assert temporal_multiplier(parse_date("2023/05/20 (Sat) 01:00"), window) == 1.0


# --------------------------------------------------------------------------- plausible years


@pytest.mark.parametrize("question", [
    "What did I do in 0000?", "What happened in 3001?", "How far did I walk in 2000 steps?",
    "I burned in 1500 calories?", "A discount in 2000%?", "What did I buy in March 0000?",
    "What happened on May 3, 0000?", "Anything since March 0000?",
])
def test_implausible_years_give_no_window_and_never_raise(question: str) -> None:
    from engram_eval.retrieval.temporal import safe_time_window

    assert resolve_time_window(question, SAT) is None
    assert safe_time_window(question, "2023/05/20 (Sat) 02:21") == (None, "no_expression")


def test_plausible_years_still_resolve() -> None:
    assert resolve_time_window("What did I buy in 2020?", SAT) == TimeWindow(
        D(2020, 1, 1), D(2020, 12, 31), "in 2020", "year")
    w = resolve_time_window("in 2019 was it raining?", SAT)
    assert w is not None and w.start == D(2019, 1, 1)


def test_safe_time_window_statuses(monkeypatch: pytest.MonkeyPatch) -> None:
    from engram_eval.retrieval import temporal
    from engram_eval.retrieval.temporal import STATUSES, safe_time_window

    w, status = safe_time_window("What did I buy yesterday?", "2023/05/20 (Sat) 02:21")
    assert status == "window" and w == TimeWindow(D(2023, 5, 19), D(2023, 5, 19),
                                                  "yesterday", "yesterday")
    assert safe_time_window("What did I buy?", "2023/05/20") == (None, "no_expression")
    assert safe_time_window("What did I buy yesterday?", "") == (None, "no_question_date")
    assert safe_time_window("What did I buy yesterday?", None) == (None, "no_question_date")

    def boom(question: str, qd: date) -> None:
        raise ValueError("year 0 is out of range")

    monkeypatch.setattr(temporal, "resolve_time_window", boom)
    assert safe_time_window("in 2020", "2023/05/20") == (None, "parse_error")
    assert set(STATUSES) == {"window", "no_expression", "no_question_date", "parse_error"}
