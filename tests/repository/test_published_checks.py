"""``tests/published_checks.check_verifies``: a failed re-execution is skipped only when it is
the one failure and ``verify`` says the run's int8 cross-encoder ran on a CPU with other
vector instructions; any other failure fails."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import published_checks as PC
import pytest

from engram_eval.runs.verify import FAIL

RERUN = "rerun K=3 (seed 0, cache off): same rankings, scores within 0.0001"
CROSS = f"question 'q': rank 3: recorded 0.7732, rerun 0.7736 (... {PC.CROSS_CPU_NOTE})"


def _check(monkeypatch: pytest.MonkeyPatch, checks: list[tuple[str, str, str]]) -> None:
    report = SimpleNamespace(checks=checks, not_checked=[], format=lambda: "")
    monkeypatch.setattr(PC, "verify", lambda *a, **k: report)
    PC.check_verifies(Path("x.jsonl.gz"), Path("d.json"), "abc", rerun=3)


def test_a_cross_cpu_int8_rerun_is_skipped_with_verifys_words(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pytest.skip.Exception, match="re-check on a CPU with the run's"):
        _check(monkeypatch, [("fingerprint", "ok", ""), (RERUN, FAIL, CROSS)])


@pytest.mark.parametrize("checks", [
    [(RERUN, FAIL, "question 'q': rank 3 differs")],  # no CPU note: a real difference
    [("fingerprint", FAIL, "differs"), (RERUN, FAIL, CROSS)],  # another failure too
])
def test_any_other_failure_fails(monkeypatch: pytest.MonkeyPatch,
                                 checks: list[tuple[str, str, str]]) -> None:
    with pytest.raises(AssertionError):
        _check(monkeypatch, checks)
