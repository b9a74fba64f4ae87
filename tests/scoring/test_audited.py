"""Metrics on corrected gold (``gold_overlay`` / ``protocols_audited``), computed by hand on
the tiny LoCoMo fixture and its audit-layout overlay (fixtures/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_eval.data.datasets import load_questions
from engram_eval.scoring.audited import audited_rows, verdict_moves
from engram_eval.scoring.score import score

ROOT = Path(__file__).resolve().parents[2]
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"
AUDIT = ROOT / "fixtures" / "locomo_tiny_audit.json"


@pytest.fixture(scope="module")
def scored() -> dict:
    """Every question ranks its conversation's sessions 1, 2, 3."""
    _, qs = load_questions(LOCOMO)
    ranks = {q.question_id: [f"{q.question_id.split(':')[0]}:session_{n}" for n in (1, 2, 3)]
             for q in qs}
    return score(ranks, LOCOMO, gold_overlay=AUDIT)


def test_overlay_block(scored: dict) -> None:
    block = scored["gold_overlay"]
    assert {k: block[k] for k in ("name", "format", "n_entries", "n_selected_entries",
                                  "n_evidence_changed", "n_gold_changed")} == {
        "name": AUDIT.name, "format": "locomo-audit", "n_entries": 7,
        "n_selected_entries": 7, "n_evidence_changed": 6, "n_gold_changed": 5}
    assert block["unresolved"] == {"tiny-2:q3": ["D3:9"]}
    assert block["no_gold"] == ["tiny-1:q5"]
    assert "tiny-2:q0" not in block["items"]  # an entry that corrects nothing
    assert block["items"]["tiny-1:q1"]["gold_changed"] is False
    # the corrected gold per protocol: the adversarial item leaves locomo_no_adversarial
    assert block["items"]["tiny-2:q3"]["gold_audited"] == {
        "locomo": ["tiny-2:session_2"], "locomo_no_adversarial": None}
    assert block["items"]["tiny-1:q5"]["gold_audited"] == {
        "locomo": None, "locomo_no_adversarial": None}


def test_metrics_both_ways_by_hand(scored: dict) -> None:
    """Gold sessions (s1..s3 of each conversation), ranking s1, s2, s3 everywhere.

    dataset's evidence, locomo (10 items: tiny-1:q3 has no evidence, tiny-2:q5 none that
    resolves): t1 q0 {1} q1 {2} q2 {2,3} q4 {2} q5 {3}; t2 q0 {1} q1 {2} q2 {1,3} q3 {3}
    q4 {3}. Audited: t1 q0 -> {2}, q3 -> {1} (enters), q5 -> none (leaves); t2 q3 -> {2},
    q4 -> {1,3}; still 10 items."""
    orig = scored["protocols"]["locomo"]
    aud = scored["protocols_audited"]["locomo"]
    assert orig["n"] == 10 and aud["n"] == 10
    # hit@1 = recall_any@1: gold holds s1 (t1q0, t2q0, t2q2) -> (t1q3, t2q0, t2q2, t2q4)
    assert orig["metrics"]["recall_any@1"] == pytest.approx(3 / 10)
    assert aud["metrics"]["recall_any@1"] == pytest.approx(4 / 10)
    # mrr: 1 / rank of the first gold session
    assert orig["metrics"]["mrr"] == pytest.approx(
        (1 + 1 / 2 + 1 / 2 + 1 / 2 + 1 / 3 + 1 + 1 / 2 + 1 + 1 / 3 + 1 / 3) / 10)
    assert aud["metrics"]["mrr"] == pytest.approx(
        (1 / 2 + 1 / 2 + 1 / 2 + 1 + 1 / 2 + 1 + 1 / 2 + 1 + 1 / 2 + 1) / 10)
    # ndcg_any@3 of t2q4 audited {1,3}: (1 + 1/log2(3)) / (1 + 1) (ranks 1, 2 weigh the same)
    # every other item has one gold session at rank r: 1 for r <= 2, 1/log2(3) for r = 3
    import math

    third = 1 / math.log2(3)
    assert orig["metrics"]["ndcg_any@3"] == pytest.approx(
        (1 + 1 + (1 + third) / 2 + 1 + third + 1 + 1 + (1 + third) / 2 + third + third) / 10)
    assert aud["metrics"]["ndcg_any@3"] == pytest.approx(
        (1 + 1 + (1 + third) / 2 + 1 + 1 + 1 + 1 + (1 + third) / 2 + 1 + (1 + third) / 2)
        / 10)
    # without the adversarial items (t1q4 and t2q3 are category 5): 8 items both ways
    o8 = scored["protocols"]["locomo_no_adversarial"]
    a8 = scored["protocols_audited"]["locomo_no_adversarial"]
    assert (o8["n"], a8["n"]) == (8, 8)
    assert o8["metrics"]["recall_any@1"] == pytest.approx(3 / 8)
    assert a8["metrics"]["recall_any@1"] == pytest.approx(4 / 8)


def test_verdict_moves_and_rows() -> None:
    rows = [{"question_id": "a", "question_type": "1", "ranked_session_ids": ["s1", "s2"],
             "gold": {"locomo": ["s2"]},
             "metrics": {"locomo": {"recall_any@1": 0.0, "recall_all@1": 0.0}}},
            {"question_id": "b", "question_type": "1", "ranked_session_ids": ["s1", "s2"],
             "gold": {"locomo": ["s1"]},
             "metrics": {"locomo": {"recall_any@1": 1.0, "recall_all@1": 1.0}}}]
    block = {"items": {"a": {"key": "k", "gold_changed": True,
                             "gold_audited": {"locomo": ["s1"]}}}}
    fixed = audited_rows(rows, block["items"], ["locomo"])
    assert fixed[0]["gold"] == {"locomo": ["s1"]}
    assert fixed[0]["metrics"]["locomo"]["recall_any@1"] == 1.0
    assert fixed[1] == rows[1]
    assert rows[0]["gold"] == {"locomo": ["s2"]}  # the input is not changed
    assert verdict_moves(rows, block, "locomo", "recall_any@1") == [
        {"question_id": "a", "key": "k", "gold": ["s2"], "gold_audited": ["s1"],
         "before": 0.0, "after": 1.0}]
