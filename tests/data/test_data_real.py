"""Opt-in checks against the real evaluation data (``pytest -m data``).

The data directory is ``$ENGRAM_EVAL_DATA_DIR`` when set, else ``../shared/data`` beside the
repository; every test skips cleanly when its file is absent. Loading S takes ~15 s.
"""

from __future__ import annotations

from collections import Counter

import pytest
from real_data import require

from engram_eval.data import LocomoDataset, LongMemEvalDataset, load_locomo, load_longmemeval

pytestmark = pytest.mark.data


@pytest.fixture(scope="module")
def s_dev() -> LongMemEvalDataset:
    return load_longmemeval(require("longmemeval/longmemeval_s_cleaned.dev.json.gz"))


@pytest.fixture(scope="module")
def oracle_dev() -> LongMemEvalDataset:
    return load_longmemeval(require("longmemeval/longmemeval_oracle.dev.json.gz"))


@pytest.fixture(scope="module")
def locomo() -> LocomoDataset:
    return load_locomo(require("locomo/locomo10.json"))


S_TYPES = {
    "multi-session": 106,
    "temporal-reasoning": 105,
    "knowledge-update": 62,
    "single-session-user": 56,
    "single-session-assistant": 44,
    "single-session-preference": 24,
}


def test_s_dev_counts(s_dev: LongMemEvalDataset) -> None:
    r = s_dev.report
    assert r.n_questions == len(s_dev.questions) == 397
    assert dict(r.by_type) == S_TYPES
    assert Counter(q.question_type for q in s_dev) == S_TYPES
    assert r.n_abstention == 25
    assert r.n_without_answer_session_ids == 0
    assert r.n_answer_ids_not_in_haystack == 0
    assert r.n_sessions == 18860
    assert r.n_turns == 195614
    assert r.n_answer_sessions_without_has_answer == 90


def test_s_dev_duplicate_sessions(s_dev: LongMemEvalDataset) -> None:
    r = s_dev.report
    assert r.n_duplicate_session_entries == 10
    # every real repeat has identical turns but a different date
    assert r.n_duplicate_entries_with_different_dates == 10
    assert len(r.questions_with_duplicates) == 10
    assert set(r.questions_with_duplicates) == {
        "gpt4_76048e76",
        "gpt4_c27434e8_abs",
        "18bc8abd",
        "c7dc5443",
        "caf03d32",
        "1d4da289",
        "58bf7951",
        "gpt4_4929293b",
        "91b15a6e",
        "078150f1",
    }
    by_id = s_dev.by_id()
    for qid in r.questions_with_duplicates:
        q = by_id[qid]
        assert len(set(q.session_ids)) == len(q.session_ids)


def test_s_dev_haystack_sizes(s_dev: LongMemEvalDataset) -> None:
    sizes = [len(q.sessions) for q in s_dev]
    assert min(sizes) >= 37 and max(sizes) <= 58
    assert all(isinstance(q.answer, str) for q in s_dev)


def test_oracle_dev_counts(oracle_dev: LongMemEvalDataset) -> None:
    r = oracle_dev.report
    assert r.n_questions == 399
    assert r.n_abstention == 25
    assert r.n_duplicate_session_entries == 0
    assert r.n_answer_ids_not_in_haystack == 0
    assert sum(n for _, n in r.by_type) == 399


def test_locomo_counts(locomo: LocomoDataset) -> None:
    r = locomo.report
    assert r.n_conversations == 10
    assert r.n_sessions == 272
    assert r.n_turns == 5882
    assert r.n_questions == len(locomo.questions) == 1986
    assert r.by_category == ((1, 282), (2, 321), (3, 96), (4, 841), (5, 446))
    assert r.n_with_adversarial_answer == 446


def test_locomo_evidence_counts(locomo: LocomoDataset) -> None:
    r = locomo.report
    # README: "6 are malformed, 9 do not resolve, and 4 QA items have no evidence"
    assert r.n_malformed_evidence_ids == 6
    assert r.n_evidence_ids_unmatched_verbatim == 9
    assert r.n_items_empty_evidence == 4
    # after lenient repair
    assert r.n_noncanonical_evidence_ids == 1
    assert r.n_unresolvable_evidence_ids == 3
    assert set(r.unresolvable_evidence) == {
        ("conv-42:q58", "D10:19"),
        ("conv-42:q88", "D"),
        ("conv-47:q38", "D4:36"),
    }
    assert r.n_items_no_resolved_evidence == 0
    assert r.n_items_without_gold == 4
    assert r.n_items_with_unresolvable_evidence == 3
    assert ("conv-26:q37", "D8:6; D9:17") in r.malformed_evidence


def test_locomo_repairs(locomo: LocomoDataset) -> None:
    by_id = locomo.by_id()
    q = by_id["conv-26:q37"]
    assert q.answer_session_ids == ("conv-26:session_8", "conv-26:session_9")
    assert by_id["conv-50:q69"].get_extra("evidence_dia_ids") == ("D30:5",)
    assert by_id["conv-43:q18"].get_extra("evidence_dia_ids") is not None
    assert "D11:26" in by_id["conv-43:q18"].get_extra("evidence_dia_ids")  # type: ignore[operator]
    ids = [s.session_id for c in locomo.conversations for s in c.sessions]
    assert len(set(ids)) == len(ids) == 272
