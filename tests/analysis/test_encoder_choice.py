"""The out-of-fold encoder choice (issue 42 item 4): pooled fold runs against a baseline on the
same questions, the paired interval by unit, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engram_eval.analysis import encoder_choice as C
from engram_eval.cli import main as cli
from engram_eval.errors import ConfigError, ProvenanceError

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "fixtures" / "longmemeval_tiny.json"
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"
GRID = """
fusion: [convex]
normalisation: [zscore, minmax]
weights:
  dense: [1.0]
  bm25_user: [0.5, 1.0]
  bm25_turn: [0.0, 1.0]
"""


def test_the_paired_interval_resamples_units() -> None:
    # one unit: every replicate draws it, the interval is its mean difference
    assert C.paired_interval(np.array([1.0, 0.0, 0.5]), ["a", "a", "a"], 200, 0) == [0.5, 0.5]
    # two units, each replicate's mean = (sum of drawn units' sums) / (their sizes): with unit
    # a (sum 2 over 2 questions) and unit b (sum 0 over 1), replicates take values in
    # {2/2, 4/4, 0/1, 0/2 ...}: between 0 and 1
    lo, hi = C.paired_interval(np.array([1.0, 1.0, 0.0]), ["a", "a", "b"], 2000, 0)
    assert lo == 0.0 and hi == 1.0


@pytest.fixture(scope="module")
def runs(tiny_embedding_model: str, tmp_path_factory: pytest.TempPathFactory
         ) -> dict[str, Path]:
    from engram_eval.data.datasets import load_questions

    d = tmp_path_factory.mktemp("ec")
    out: dict[str, Path] = {}
    common = ["--embedding-model", tiny_embedding_model, "--embedding-backend",
              "sentence_transformers", "--no-rerank", "--no-progress", "--use-bm25-turn"]
    for name, data in (("lme", TINY), ("loc", LOCOMO)):
        out[f"{name}_base"] = d / f"{name}_base.jsonl"
        assert cli.main(["run", str(data), *common, "--output", str(out[f"{name}_base"])]) == 0
        _, qs = load_questions(data)
        ids = [q.question_id for q in qs]
        for k, half in enumerate((ids[: len(ids) // 2], ids[len(ids) // 2:])):
            out[f"{name}_f{k}"] = d / f"{name}_f{k}.jsonl"
            sel = [x for i in half for x in ("--question-id", i)]
            assert cli.main(["run", str(data), *common, "--dense-turn-top-m", "1", *sel,
                             "--output", str(out[f"{name}_f{k}"])]) == 0
    (d / "grid.yaml").write_text(GRID)
    out["grid"] = d / "grid.yaml"
    return out


def test_choose_pools_the_fold_runs_and_reports_both_sides(runs: dict[str, Path],
                                                           tmp_path: Path) -> None:
    report = C.choose([runs["lme_base"], runs["loc_base"]],
                      [runs["lme_f0"], runs["lme_f1"], runs["loc_f0"], runs["loc_f1"]],
                      runs["grid"], folds=2, n_boot=500)
    assert set(report["structures"]) == {"chat", "people"}
    for structure, e in report["structures"].items():
        assert e["protocol"] == C.DEFAULT_PROTOCOL[structure]
        assert e["baseline"]["n"] == e["candidate"]["n"] > 0
        assert len(e["candidate"]["runs"]) == 2 and len(e["baseline"]["runs"]) == 1
        lo, hi = e["paired"]["interval_95"]
        assert lo <= e["paired"]["difference"] <= hi
        assert e["adopt_candidate"] == (lo > 0)
        diff = e["candidate"]["out_of_fold_objective"] - e["baseline"]["out_of_fold_objective"]
        assert e["paired"]["difference"] == pytest.approx(diff)
        assert len(e["candidate"]["fold_choices"]) == 2
    out = tmp_path / "choice.json"
    assert C.main(["--baseline", str(runs["lme_base"]), str(runs["loc_base"]),
                   "--candidate", str(runs["lme_f0"]), str(runs["lme_f1"]),
                   str(runs["loc_f0"]), str(runs["loc_f1"]), "--grid", str(runs["grid"]),
                   "--folds", "2", "--output", str(out)]) == 0
    side = json.loads(Path(str(out) + ".metadata.json").read_text())
    assert len(side["inputs"]) == 7  # six runs and the grid, by hash
    assert C.main(["--baseline", str(runs["lme_base"]), "--candidate", str(runs["lme_f0"]),
                   str(runs["lme_f1"]), "--grid", str(runs["grid"]), "--folds", "2",
                   "--output", str(out)]) == 2  # never overwritten


def test_other_questions_or_one_side_only_are_refused(runs: dict[str, Path]) -> None:
    with pytest.raises(ProvenanceError, match="other questions"):
        C.choose([runs["lme_base"]], [runs["lme_f0"]], runs["grid"], folds=2, n_boot=10)
    with pytest.raises(ProvenanceError, match="a question is in two runs"):
        C.choose([runs["lme_base"]], [runs["lme_f0"], runs["lme_f0"], runs["lme_f1"]],
                 runs["grid"], folds=2, n_boot=10)
    with pytest.raises(ConfigError, match="one side only"):
        C.choose([runs["lme_base"]], [runs["lme_f0"], runs["lme_f1"], runs["loc_f0"]],
                 runs["grid"], folds=2, n_boot=10)
