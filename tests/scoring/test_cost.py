"""The summary's per-question cost (engram_eval.scoring.summary.cost_summary), by hand."""

from __future__ import annotations

from engram_eval.scoring.summary import cost_summary


def test_cost_percentiles_by_hand() -> None:
    rows = [{"timing": {"seconds": s, "requests": r, "bytes_sent": 10 * r}}
            for s, r in ((1.0, 2), (2.0, 2), (3.0, 2), (4.0, 4), (10.0, 2))]
    rows.append({"timing": {"seconds": 5.0}})  # a row without the HTTP counts
    rows.append({"question_id": "no timing"})
    cost = cost_summary(rows)
    assert set(cost) == {"seconds", "requests", "bytes_sent"}
    # seconds 1, 2, 3, 4, 5, 10: numpy's linear interpolation at (n-1)q/100
    assert cost["seconds"] == {"n": 6, "total": 25.0, "mean": 4.166667,
                               "p50": 3.5, "p90": 7.5, "p99": 9.75, "max": 10.0}
    # requests 2, 2, 2, 4, 2
    assert cost["requests"] == {"n": 5, "total": 12.0, "mean": 2.4, "p50": 2.0, "p90": 3.2,
                                "p99": 3.92, "max": 4.0}
    assert cost_summary([]) == {}
