"""The confidence features computed once (engram_eval.retrieval.gate_features): each feature
on a hand-built question and trace (expected values as formulas), the spread of the gate's
view, and the pipeline writing the kept features into its traces as the functions compute
them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from gate_sessions import NEW, S1, S2, S3, TRACES

from engram_eval.data.records import Session
from engram_eval.retrieval import gate_features as G


def _view(text: str = "How many books did Alice buy in Paris?",
          date: str = "2023/05/10 (Wed) 10:00",
          sessions: tuple[Session, ...] = (S1, S2, S3), spread: int | None = None
          ) -> G.QuestionView:
    return G.make_view(text, date, sessions, ["s1", "s2", "s3"], TRACES, NEW, spread)


def test_the_question_terms_come_from_the_analyser() -> None:
    v = _view()
    assert v.terms == frozenset(NEW.analyze(v.text))
    assert v.terms == {"mani", "book", "alic", "buy", "pari"}  # stemmed, stopwords out


def test_reranker_features() -> None:
    v = _view()
    assert G.rerank_logit(v, 0) == 3.0 and G.rerank_logit(v, 2) is None
    mean, sd = (3.0 + 1.0) / 2, math.sqrt(((3.0 - 2.0) ** 2 + (1.0 - 2.0) ** 2) / 2)
    assert G.rerank_z(v, 0) == pytest.approx((3.0 - mean) / sd)
    assert G.rerank_z(v, 2) is None
    assert G.first_stage_rank(v, 0) == pytest.approx(math.log(2))
    assert G.first_stage_rank(v, 1) == 0.0  # log(1): the first stage agrees
    # fused ranks (2, 1) vs rerank ranks (1, 2): every pair discordant
    assert G.rerank_agreement(v, 0) == pytest.approx(-1.0)
    # the first result's probability and margin over the second: the question's context
    for i in (0, 1, 2):
        assert G.rerank_prob_first(v, i) == pytest.approx(1.0 / (1.0 + math.exp(-3.0)))
        assert G.rerank_margin_first(v, i) == pytest.approx(3.0 - 1.0)
    one = G.make_view(v.text, v.question_date, (S1, S2, S3), ["s1", "s2", "s3"],
                      TRACES[:1], NEW, None)
    assert G.rerank_prob_first(one, 0) is not None and G.rerank_margin_first(one, 0) is None


def test_score_spread_features() -> None:
    v = _view()
    d = [0.5, 0.2, 0.1]
    assert G.dense(v, 1) == 0.2
    assert G.dense_z(v, 0) == pytest.approx((0.5 - np.mean(d)) / np.std(d))
    assert G.dense_max(v, 2) == 0.5
    f = [2.0, 1.0, 0.0]
    assert G.fused_z(v, 1) == pytest.approx((1.0 - np.mean(f)) / np.std(f))  # = 0
    assert G.fusion_margin(v, 0) == 2.0 - 1.0


def test_term_shares_and_agreement() -> None:
    v = _view()
    terms = {"mani", "book", "alic", "buy", "pari"}
    # s1's best turn is the cross-encoder's (rerank_turn 0): "I bought two books with Alice."
    assert G.terms_turn(v, 0) == pytest.approx(len(terms & {"bought", "two", "book", "alic"})
                                                / len(terms))
    # s1's user document holds both user turns: book, alic, pari, buy
    assert G.terms_session(v, 0) == pytest.approx(4 / 5)
    # s3 is not reranked: its user turn sharing the most terms ("Books, books and more books.")
    assert G.best_turn_text(v, 2) == "Books, books and more books."
    assert G.terms_turn(v, 2) == pytest.approx(1 / 5)
    assert G.lex_dense_agree(v, 0) == 1.0 and G.lex_dense_agree(v, 1) == 0.0


def test_question_cues() -> None:
    v = _view()
    assert G.query_terms(v, 0) == 5.0
    assert G.count_or_compare(v, 0) == 1.0
    assert G.time_expression(v, 0) == 0.0
    # "Paris" (analysed "pari") is in s1; "Berlin" is in no session
    assert G.absent_entity(v, 0) == 0.0
    w = _view("What did Alice buy in Berlin last week?")
    assert G.question_entities(w) == {"alic", "berlin"}
    assert G.absent_entity(w, 0) == 1.0
    assert G.time_expression(w, 0) == 1.0
    assert G.count_or_compare(w, 0) == 0.0
    # no question date (LoCoMo): the window is still looked for, at REFERENCE_DATE
    assert G.time_expression(_view("What did Alice paint in 2022?", date=""), 0) == 1.0


def test_feature_row_holds_every_feature_nan_where_undefined() -> None:
    v = _view()
    row = G.feature_row(v, 2)
    assert len(row) == len(G.FEATURES)
    assert math.isnan(row[G.FEATURE_NAMES.index("rerank_logit")])
    assert row[G.FEATURE_NAMES.index("dense")] == 0.1




def test_the_spread_limits_every_spread_feature_to_the_first_results() -> None:
    """spread 2: the best dense score, the z-scores and the margin are over the first two
    results only, for every candidate (the third's own value standardised by theirs)."""
    v = _view(spread=2)
    assert G.dense_max(v, 2) == 0.5
    d, f = [0.5, 0.2], [2.0, 1.0]
    assert G.dense_z(v, 2) == pytest.approx((0.1 - np.mean(d)) / np.std(d))
    assert G.fused_z(v, 2) == pytest.approx((0.0 - np.mean(f)) / np.std(f))
    assert G.fusion_margin(v, 0) == 2.0 - 1.0
    assert G.rerank_z(v, 0) == pytest.approx(1.0)  # (3 - 2) / 1 over the two reranked
    # spread 1: no z-score or margin from one session
    w = _view(spread=1)
    assert G.fused_z(w, 0) is None and G.fusion_margin(w, 0) is None


def test_gate_rows_hold_the_kept_features_of_the_first_candidates() -> None:
    v = _view(spread=G.GATE_SPREAD)
    rows = G.gate_rows(v, 2)
    assert len(rows) == 2 and all(tuple(r) == G.GATE_FEATURES for r in rows)
    terms = {"mani", "book", "alic", "buy", "pari"}
    assert rows[0]["terms_turn"] == pytest.approx(2 / len(terms))  # book, alic
    assert rows[1]["dense"] == 0.2 and rows[1]["dense_max"] == 0.5
    assert rows[0]["lex_dense_agree"] == 1.0 and rows[1]["lex_dense_agree"] == 0.0
    assert rows[0]["query_terms"] == rows[1]["query_terms"] == 5.0
    assert rows[0]["fusion_margin"] == rows[1]["fusion_margin"] == 1.0
    f = [2.0, 1.0, 0.0]
    assert rows[1]["fused_z"] == pytest.approx((1.0 - np.mean(f)) / np.std(f))
    assert len(G.gate_rows(v, 10)) == 3  # never more than the ranking holds


def test_a_run_traces_the_features_the_functions_compute_from_its_own_traces(
        tmp_path: Path) -> None:
    """A run's rows hold ``gate_features`` for the first GATE_DEPTH results, and they are
    what the functions give on the view of the row's traces (spread GATE_SPREAD): the trace
    and the study read the same numbers."""
    from engram_eval.data.datasets import load_questions
    from engram_eval.retrieval.analyzer import analyzer_of
    from engram_eval.runs import runner
    from engram_eval.runs.config import RunConfig
    from engram_eval.runs.reader import read_run

    data = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_tiny.json"
    cfg = RunConfig(use_dense=False, use_dense_rocchio=False, rerank=False, progress=False,
                    cache_dir=str(tmp_path / "cache"))
    out = tmp_path / "run.jsonl"
    runner.run(cfg, data, out, echo=lambda m: None)
    _, qs = load_questions(data, "longmemeval")
    by_id = {q.question_id: q for q in qs}
    rows = read_run(out).rows
    assert rows
    for row in rows:
        q = by_id[row["question_id"]]
        traces = row["trace"]["sessions"]
        k = min(G.GATE_DEPTH, len(traces))
        assert all("gate_features" in t for t in traces[:k])
        assert not any("gate_features" in t for t in traces[k:])
        v = G.make_view(q.question, q.question_date, q.sessions, row["ranked_session_ids"],
                        traces[:k], analyzer_of(cfg), G.GATE_SPREAD)
        assert [t["gate_features"] for t in traces[:k]] == G.gate_rows(v, k)
        assert traces[0]["gate_features"]["dense"] is None  # the dense signal is off
