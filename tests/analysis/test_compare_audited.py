"""``compare A B --gold-overlay FILE --dataset D``: the paired comparison on both golds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram_eval.analysis.compare import compare_runs
from engram_eval.analysis.compare_audited import compare_audited
from engram_eval.cli import main as cli
from engram_eval.errors import ProvenanceError
from engram_eval.runs import runner
from engram_eval.runs.config import RunConfig
from engram_eval.runs.reader import read_run
from engram_eval.scoring.score import score

ROOT = Path(__file__).resolve().parents[2]
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"
AUDIT = ROOT / "fixtures" / "locomo_tiny_audit.json"
LME = ROOT / "fixtures" / "longmemeval_tiny.json"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("cmp")
    out = []
    for name, cfg in (("a", RunConfig(retriever="dummy", dummy_salt="a", progress=False)),
                      ("b", RunConfig(retriever="flat-bm25", progress=False))):
        out.append(d / f"{name}.jsonl")
        runner.run(cfg, LOCOMO, out[-1], echo=lambda m: None)  # runs without an overlay
    return out[0], out[1]


def test_both_golds(runs: tuple[Path, Path]) -> None:
    a, b = read_run(runs[0]), read_run(runs[1])
    rep = compare_audited(a, b, AUDIT, LOCOMO, protocol="locomo", n_boot=200)
    plain = compare_runs(a, b, protocol="locomo", n_boot=200)
    assert {k: v for k, v in rep.items() if k not in ("gold_overlay", "audited",
                                                      "verdict_moved")} == plain
    assert rep["gold_overlay"]["n_gold_changed"] == 5
    assert rep["audited"]["n"] == 10
    # each side's audited mean is that run's rankings scored on the corrected gold
    for run, side in ((a, "a"), (b, "b")):
        ranks = {r["question_id"]: r["ranked_session_ids"] for r in run.rows}
        want = score(ranks, LOCOMO, ["locomo"], gold_overlay=AUDIT)
        for name in ("recall_any@1", "recall_all@5", "mrr"):
            got = rep["audited"]["groups"]["overall"]["metrics"][name][side]
            assert got == pytest.approx(want["protocols_audited"]["locomo"]["metrics"][name])
    moved = rep["verdict_moved"]["recall_any@1"]
    ov = rep["audited"]["groups"]["overall"]["metrics"]["recall_any@1"]
    assert moved["delta_audited"] == ov["delta"] == pytest.approx(ov["b"] - ov["a"])
    assert moved["moved"] == (moved["verdict"] != moved["verdict_audited"])


def test_refusals(runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = read_run(runs[0]), read_run(runs[1])
    with pytest.raises(ProvenanceError, match="sha256"):
        compare_audited(a, b, AUDIT, LME, protocol="locomo", n_boot=200)
    assert cli.main(["compare", str(runs[0]), str(runs[1]), "--gold-overlay",
                     str(AUDIT)]) != 0
    assert "--gold-overlay needs --dataset" in capsys.readouterr().err


def test_cli(runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
             ) -> None:
    out = tmp_path / "cmp.json"
    assert cli.main(["compare", str(runs[0]), str(runs[1]), "--gold-overlay", str(AUDIT),
                     "--dataset", str(LOCOMO), "--bootstrap", "200", "--cluster",
                     "id-prefix", "--output", str(out)]) == 0
    assert "audited gold: locomo_tiny_audit.json" in capsys.readouterr().out
    rep = json.loads(out.read_text())
    assert rep["settings"]["cluster"] == "id-prefix" and "verdict_moved" in rep
    side = json.loads((tmp_path / "cmp.json.metadata.json").read_text())
    assert any(i["file"].endswith(AUDIT.name) for i in side["inputs"])
    assert side["generator"]["path"] == "engram_eval/analysis/compare_audited.py"
