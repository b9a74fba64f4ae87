"""compare --segment-size: Memo's segmented check (fixed consecutive segments, per-segment
deltas, an "every segment positive" verdict)."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_files import binary, write_run

from engram_eval.analysis.compare import compare_runs, format_report
from engram_eval.cli import main as cli
from engram_eval.errors import ConfigError
from engram_eval.runs.reader import read_run


def test_fixed_segments_and_every_segment_positive_verdict(tmp_path: Path) -> None:
    a = [0, 0, 0, 0] + [0, 0, 0, 0] + [1, 0]
    b = [1, 1, 0, 0] + [1, 0, 0, 0] + [1, 1]
    ra = read_run(write_run(tmp_path / "a.jsonl", binary(a)))
    rb = read_run(write_run(tmp_path / "b.jsonl", binary(b)))
    rep = compare_runs(ra, rb, n_boot=20, segment_size=4)
    sc = rep["segmented_check"]
    assert [s["n"] for s in sc["segments"]] == [4, 4, 2]
    assert [s["questions"] for s in sc["segments"]] == [[1, 4], [5, 8], [9, 10]]
    assert (sc["segments"][0]["first"], sc["segments"][2]["last"]) == ("q00", "q09")
    m = sc["by_metric"]["recall_any@1"]
    assert m["deltas"] == pytest.approx([0.5, 0.25, 0.5])
    assert m["every_segment_positive"] and m["verdict"] == "every segment positive"
    assert not m["falsified"]
    assert sc["segments"][1]["metrics"]["recall_any@1"] == {"a": 0.0, "b": 0.25, "delta": 0.25}
    text = format_report(rep, ["recall_any@1"])
    assert "segmented check (3 fixed segments of 4 questions" in text
    # a zero segment is not positive: the gain is falsified
    b2 = [1, 1, 0, 0] + [0, 0, 0, 0] + [1, 1]
    rb2 = read_run(write_run(tmp_path / "b2.jsonl", binary(b2)))
    m2 = compare_runs(ra, rb2, n_boot=20, segment_size=4)["segmented_check"]["by_metric"][
        "recall_any@1"]
    assert m2["positive"] == 2 and m2["verdict"] == "not every segment positive (2 of 3)"
    assert m2["falsified"]
    # without the option the report has no such key (published reports stay as they were)
    assert "segmented_check" not in compare_runs(ra, rb, n_boot=20)
    with pytest.raises(ConfigError, match="segment-size"):
        compare_runs(ra, rb, n_boot=20, segment_size=0)


def test_cli_segment_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_run(tmp_path / "a.jsonl", binary([0, 1, 0, 1]))
    b = write_run(tmp_path / "b.jsonl", binary([1, 1, 1, 1]))
    assert cli.main(["compare", str(a), str(b), "--bootstrap", "10", "--segment-size", "2",
                     "--metrics", "recall_any@1"]) == 0
    assert "every segment positive" in capsys.readouterr().out
