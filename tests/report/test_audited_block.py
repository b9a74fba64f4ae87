"""The report page's "Audited labels" block: changed items and each run's verdict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engram_eval.errors import ConfigError
from engram_eval.report.build import build_report
from engram_eval.report.page import render
from engram_eval.runs import runner
from engram_eval.runs.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"
AUDIT = ROOT / "fixtures" / "locomo_tiny_audit.json"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("rep")
    a, b = d / "a.jsonl", d / "b.jsonl"
    runner.run(RunConfig(retriever="dummy", dummy_salt="a", progress=False), LOCOMO, a,
               echo=lambda m: None)
    runner.run(RunConfig(retriever="flat-bm25", progress=False), LOCOMO, b,
               echo=lambda m: None, gold_overlay=AUDIT)
    return a, b


def test_block_from_the_run_and_verified(runs: tuple[Path, Path]) -> None:
    doc = build_report(runs[1], against=runs[0], dataset=LOCOMO, gold_overlay=AUDIT,
                       n_boot=200)
    assert doc["verify"]["verified"] and doc["verify_against"]["verified"]
    view = doc["audited"]
    assert [it["question_id"] for it in view["items"]] == [
        "tiny-1:q0", "tiny-1:q3", "tiny-1:q5", "tiny-2:q3", "tiny-2:q4"]  # dataset order
    item = view["items"][0]
    assert (item["gold"], item["gold_audited"]) == (["tiny-1:session_1"],
                                                    ["tiny-1:session_2"])
    assert len(item["verdicts"]) == 2  # this run and the one compared against
    gone = next(it for it in view["items"] if it["question_id"] == "tiny-1:q5")
    assert all(v[1] is None for v in gone["verdicts"])  # out of the audited denominator
    assert set(view["verdict_moved"]) >= {"recall_any@1"}
    html = render(doc)
    assert '<section id="audited">' in html and 'href="#audited"' in html
    section = html[html.index('<section id="audited">'):]
    section = section[:section.index("</section>")]
    assert section.count('<tr data-q="') == 5
    assert "locomo_tiny_audit.json" in section and "D1:3 → D2:1" in section
    assert re.search(r"(hit|miss) → (hit|miss|–)", section)


def test_block_only_with_an_overlay(runs: tuple[Path, Path]) -> None:
    assert "audited" not in build_report(runs[0], dataset=LOCOMO)
    doc = build_report(runs[0], dataset=LOCOMO, gold_overlay=AUDIT)  # computed from the file
    assert len(doc["audited"]["items"]) == 5 and doc["verify"]["verified"]
    doc = build_report(runs[1])  # from the run's summary, without the dataset
    assert len(doc["audited"]["items"]) == 5
    with pytest.raises(ConfigError, match="needs --dataset"):
        build_report(runs[0], gold_overlay=AUDIT)
