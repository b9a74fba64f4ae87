"""The confidence feature study (engram_eval.production_eval.confidence_study): each feature
on a hand-built question and trace (expected values as formulas), the study's report shape
on runs of the tiny fixtures, and the refusal of a held-out part."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram_eval.cli import main as cli
from engram_eval.data.records import Question, Session, Turn
from engram_eval.errors import ProvenanceError
from engram_eval.production_eval import confidence_study as CS
from engram_eval.retrieval.analyzer import Analyzer

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "fixtures" / "longmemeval_tiny.json"
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"
NEW = Analyzer("word", "snowball-english", "en-v1")


def _session(sid: str, *texts: str) -> Session:
    turns = []
    for k, t in enumerate(texts):
        turns.append(Turn("user", t, 2 * k))
        turns.append(Turn("assistant", "ok, noted", 2 * k + 1))
    return Session(sid, "2023/05/01 (Mon) 10:00", tuple(turns))


S1 = _session("s1", "I bought two books with Alice.", "Alice went to Paris to buy books.")
S2 = _session("s2", "We talked about gardening.")
S3 = _session("s3", "Nothing about that here.", "Books, books and more books.")


def _view(text: str = "How many books did Alice buy in Paris?",
          date: str = "2023/05/10 (Wed) 10:00",
          sessions: tuple[Session, ...] = (S1, S2, S3)) -> CS.QuestionView:
    q = Question("q1", "multi-session", text, "2", date, sessions, ("s1",))
    traces: list[dict[str, Any]] = [
        {"dense": 0.5, "dense_rank": 1, "bm25_turn_rank": 1, "fused": 2.0, "fused_rank": 2,
         "reranked": True, "rerank_rank": 1, "base_raw_score": 3.0, "rerank_turn": 0},
        {"dense": 0.2, "dense_rank": 2, "bm25_turn_rank": 2, "fused": 1.0, "fused_rank": 1,
         "reranked": True, "rerank_rank": 2, "base_raw_score": 1.0, "rerank_turn": 0},
        {"dense": 0.1, "dense_rank": 3, "bm25_turn_rank": None, "fused": 0.0, "fused_rank": 3,
         "reranked": False, "rerank_rank": None},
    ]
    row = {"ranked_session_ids": ["s1", "s2", "s3"], "trace": {"sessions": traces}}
    return CS.view(q, row, NEW)


def test_the_question_terms_come_from_the_analyser() -> None:
    v = _view()
    assert v.terms == frozenset(NEW.analyze(v.question.question))
    assert v.terms == {"mani", "book", "alic", "buy", "pari"}  # stemmed, stopwords out


def test_reranker_features() -> None:
    v = _view()
    assert CS.rerank_logit(v, 0) == 3.0 and CS.rerank_logit(v, 2) is None
    mean, sd = (3.0 + 1.0) / 2, math.sqrt(((3.0 - 2.0) ** 2 + (1.0 - 2.0) ** 2) / 2)
    assert CS.rerank_z(v, 0) == pytest.approx((3.0 - mean) / sd)
    assert CS.rerank_z(v, 2) is None
    assert CS.first_stage_rank(v, 0) == pytest.approx(math.log(2))
    assert CS.first_stage_rank(v, 1) == 0.0  # log(1): the first stage agrees
    # fused ranks (2, 1) vs rerank ranks (1, 2): every pair discordant
    assert CS.rerank_agreement(v, 0) == pytest.approx(-1.0)


def test_score_spread_features() -> None:
    v = _view()
    d = [0.5, 0.2, 0.1]
    assert CS.dense(v, 1) == 0.2
    assert CS.dense_z(v, 0) == pytest.approx((0.5 - np.mean(d)) / np.std(d))
    assert CS.dense_max(v, 2) == 0.5
    f = [2.0, 1.0, 0.0]
    assert CS.fused_z(v, 1) == pytest.approx((1.0 - np.mean(f)) / np.std(f))  # = 0
    assert CS.fusion_margin(v, 0) == 2.0 - 1.0


def test_term_shares_and_agreement() -> None:
    v = _view()
    terms = {"mani", "book", "alic", "buy", "pari"}
    # s1's best turn is the cross-encoder's (rerank_turn 0): "I bought two books with Alice."
    assert CS.terms_turn(v, 0) == pytest.approx(len(terms & {"bought", "two", "book", "alic"})
                                                / len(terms))
    # s1's user document holds both user turns: book, alic, pari, buy
    assert CS.terms_session(v, 0) == pytest.approx(4 / 5)
    # s3 is not reranked: its user turn sharing the most terms ("Books, books and more books.")
    assert CS.best_turn_text(v, 2) == "Books, books and more books."
    assert CS.terms_turn(v, 2) == pytest.approx(1 / 5)
    assert CS.lex_dense_agree(v, 0) == 1.0 and CS.lex_dense_agree(v, 1) == 0.0


def test_question_cues() -> None:
    v = _view()
    assert CS.query_terms(v, 0) == 5.0
    assert CS.count_or_compare(v, 0) == 1.0
    assert CS.time_expression(v, 0) == 0.0
    # "Paris" (analysed "pari") is in s1; "Berlin" is in no session
    assert CS.absent_entity(v, 0) == 0.0
    w = _view("What did Alice buy in Berlin last week?")
    assert CS.question_entities(w) == {"alic", "berlin"}
    assert CS.absent_entity(w, 0) == 1.0
    assert CS.time_expression(w, 0) == 1.0
    assert CS.count_or_compare(w, 0) == 0.0
    # no question date (LoCoMo): the window is still looked for, at REFERENCE_DATE
    assert CS.time_expression(_view("What did Alice paint in 2022?", date=""), 0) == 1.0


def test_feature_row_holds_every_feature_nan_where_undefined() -> None:
    v = _view()
    row = CS.feature_row(v, 2)
    assert len(row) == len(CS.FEATURES)
    assert math.isnan(row[CS.FEATURE_NAMES.index("rerank_logit")])
    assert row[CS.FEATURE_NAMES.index("dense")] == 0.1


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
    recs, left = CS.extract([row], {"q1": v.question}, "longmemeval", NEW, candidates=20)
    assert left == {"no_gold": 0} and len(recs) == 1
    r = recs[0]
    assert r.candidates == ("s1", "s2") and r.labels == (1, 0) and r.top_correct == 1
    assert r.x.shape == (2, len(CS.FEATURES))
