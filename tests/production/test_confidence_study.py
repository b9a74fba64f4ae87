"""The confidence feature study (engram_eval.production_eval.confidence_study): the study's
report shape on runs of the tiny fixtures, candidate rows where a run stopped tracing, and
the refusal of a held-out part (each feature on a hand-built question:
tests/retrieval/test_gate_features.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gate_sessions import NEW, S1, S2, S3, TRACES

from engram_eval.cli import main as cli
from engram_eval.data.records import Question
from engram_eval.errors import ProvenanceError
from engram_eval.production_eval import confidence_study as CS
from engram_eval.retrieval.gate_features import QuestionView

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "fixtures" / "longmemeval_tiny.json"
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"


QUESTION = Question("q1", "multi-session", "How many books did Alice buy in Paris?", "2",
                    "2023/05/10 (Wed) 10:00", (S1, S2, S3), ("s1",))


def _view() -> QuestionView:
    row = {"ranked_session_ids": ["s1", "s2", "s3"],
           "trace": {"sessions": [dict(t) for t in TRACES]}}
    return CS.view(QUESTION, row, NEW)


# --------------------------------------------------------------------------- the study


def _run(tmp: Path, data: Path, name: str) -> Path:
    from engram_eval.runs import runner
    from engram_eval.runs.config import RunConfig

    out = tmp / f"{name}.jsonl"
    cfg = RunConfig(use_dense=False, use_dense_rocchio=False, rerank=False, progress=False,
                    cache_dir=str(tmp / "cache"))
    runner.run(cfg, data, out, echo=lambda m: None)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("study")
    return {"lme": _run(tmp, TINY, "lme"), "locomo": _run(tmp, LOCOMO, "locomo")}


def test_the_study_reports_both_labels_with_intervals(runs: dict[str, Path]) -> None:
    rep = CS.study([runs["lme"]], TINY, CS.StudySettings(resamples=20, candidates=3))
    assert rep["kind"] == CS.KIND
    d = rep["denominators"]
    # 12 questions, 2 of them _abs; every answerable one has gold in the tiny fixture
    assert d["questions"] + d["left_out"]["no_gold"] == 12
    assert d["unanswerable"] == 2 and d["answerable"] == d["questions"] - 2
    assert d["candidate_rows"] == 3 * d["questions"]
    assert rep["settings"]["resampling_unit"] == "question"
    for lab, n in (("top", d["questions"]), ("candidate", d["candidate_rows"])):
        r = rep["labels"][lab]
        assert r["n"] == n and set(r["per_feature"]) == set(CS.FEATURE_NAMES)
        assert r["per_feature"]["rerank_logit"]["auroc"] is None  # no rerank in this run
        c = r["combined"]
        assert 0.0 <= c["auroc"] <= 1.0 and c["interval"]["resamples"] == 20
        assert set(r["ablation"]) == set(c["features"])
        assert "rerank_logit" not in c["features"]
    assert rep["labels"]["top"]["positives"] == d["top_correct"]
    assert set(rep["verdicts"]) == set(CS.FEATURE_NAMES)
    assert rep["verdicts"]["rerank_logit"]["verdict"] == "not traced"
    assert rep["dataset"]["sha256"] == rep["runs"][0]["dataset_sha256"]


def test_locomo_resamples_and_folds_by_conversation(runs: dict[str, Path]) -> None:
    rep = CS.study([runs["locomo"]], LOCOMO, CS.StudySettings(resamples=10, candidates=2))
    assert rep["settings"]["resampling_unit"] == "conversation"
    top = rep["labels"]["top"]
    assert top["groups"] == 2 and top["combined"]["folds"] == 2
    assert top["combined"]["interval"]["unit"] == "group"


def test_a_run_over_other_data_is_refused(runs: dict[str, Path]) -> None:
    with pytest.raises(ProvenanceError, match="dataset.sha256"):
        CS.study([runs["lme"]], LOCOMO, CS.StudySettings(resamples=5))


def test_a_heldout_part_is_refused(runs: dict[str, Path], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from engram_eval.provenance import heldout as H

    split = tmp_path / "split"
    assert cli.main(["split", str(TINY), "--holdout", "0.5", "--salt", "study",
                     "--output-dir", str(split), "--compress", "none"]) == 0
    monkeypatch.setenv(H.ENV_ROOTS, str(split))
    manifest = json.loads((split / "split_manifest.json").read_text())
    held = split / manifest["parts"]["heldout"]["file"]
    with pytest.raises(ProvenanceError, match="tuning parts only"):
        CS.study([runs["lme"]], held, CS.StudySettings(resamples=5))
    out = tmp_path / "study.json"
    assert cli.main(["confidence-study", str(runs["lme"]), "--dataset", str(held),
                     "--output", str(out)]) == 2
    assert not out.exists()


def test_the_command_writes_report_figure_and_sidecars(runs: dict[str, Path],
                                                      tmp_path: Path) -> None:
    out, png = tmp_path / "study.json", tmp_path / "study.png"
    args = ["confidence-study", str(runs["lme"]), "--dataset", str(TINY), "--output", str(out),
            "--plot", str(png), "--resamples", "10", "--candidates", "3"]
    assert cli.main(args) == 0
    rep = json.loads(out.read_text())
    assert rep["settings"]["resamples"] == 10 and rep["settings"]["candidates"] == 3
    side = json.loads(Path(str(out) + ".metadata.json").read_text())
    assert side["generator"]["path"] == "engram_eval/production_eval/confidence_study.py"
    assert side["dataset"]["sha256"] == rep["dataset"]["sha256"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Path(str(png) + ".metadata.json").is_file()
    assert cli.main(args) == 2  # never overwritten


def test_candidate_rows_stop_where_the_run_stopped_tracing() -> None:
    """A run made with --trace-sessions 2 gives two candidate rows per question, whatever
    ``candidates`` asks."""
    v = _view()
    row = {"question_id": "q1", "ranked_session_ids": list(v.ranked),
           "trace": {"sessions": [dict(t) for t in v.traces[:2]]}}
    recs, left = CS.extract([row], {"q1": QUESTION}, "longmemeval", NEW, candidates=20)
    assert left == {"no_gold": 0} and len(recs) == 1
    r = recs[0]
    assert r.candidates == ("s1", "s2") and r.labels == (1, 0) and r.top_correct == 1
    assert r.x.shape == (2, len(CS.FEATURES))
