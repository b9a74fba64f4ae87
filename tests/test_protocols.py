"""Tests for engram_eval.protocols: gold and skip rules, summaries, JSON shape, tables."""

from __future__ import annotations

import json
import math

import pytest

from engram_eval.data.records import Question, Session, Turn
from engram_eval.metrics import KS, question_metrics
from engram_eval.protocols import (
    LONGMEMEVAL_PROTOCOLS,
    ProtocolSummary,
    format_table,
    gold_for,
    score_question,
    summarize,
    summary_to_json,
)


def _session(
    sid: str, user_answer: bool = False, assistant_answer: bool = False
) -> Session:
    return Session(
        session_id=sid,
        date="2023/05/20 (Sat) 02:21",
        turns=(
            Turn(
                role="user",
                content=f"user text of {sid}",
                index=0,
                has_answer=user_answer,
            ),
            Turn(
                role="assistant",
                content=f"assistant text of {sid}",
                index=1,
                has_answer=assistant_answer,
            ),
        ),
    )


def _question(
    qid: str,
    qtype: str,
    sessions: tuple[Session, ...],
    answers: tuple[str, ...],
) -> Question:
    return Question(
        question_id=qid,
        question_type=qtype,
        question="q?",
        answer="a",
        question_date="2023/06/01 (Thu) 10:00",
        sessions=sessions,
        answer_session_ids=answers,
    )


# single-session-user: evidence on a user turn
Q_USER = _question(
    "q_user",
    "single-session-user",
    (_session("h1"), _session("ans_1", user_answer=True), _session("h2")),
    ("ans_1",),
)
# single-session-assistant: evidence only on the assistant turn
Q_SSA = _question(
    "q_ssa",
    "single-session-assistant",
    (_session("h1"), _session("ans_2", assistant_answer=True), _session("h2")),
    ("ans_2",),
)
# multi-session: one answer session with user evidence, one without, one listed twice
Q_MULTI = _question(
    "q_multi",
    "multi-session",
    (
        _session("ans_a", user_answer=True),
        _session("h1"),
        _session("ans_b", assistant_answer=True),
        _session("ans_c", user_answer=True),
    ),
    ("ans_c", "ans_a", "ans_b", "ans_a"),
)
# abstention
Q_ABS = _question(
    "q_user_abs",
    "single-session-user",
    (_session("h1"), _session("ans_9", user_answer=True)),
    ("ans_9",),
)
# answer id listed but missing from the haystack
Q_MISSING = _question(
    "q_missing",
    "knowledge-update",
    (_session("h1"), _session("h2")),
    ("ghost",),
)
# no answer sessions at all
Q_NONE = _question("q_none", "temporal-reasoning", (_session("h1"),), ())


def test_protocol_names() -> None:
    assert LONGMEMEVAL_PROTOCOLS == ("answerable", "official", "all")


def test_unknown_protocol() -> None:
    with pytest.raises(ValueError):
        gold_for(Q_USER, "everything")
    with pytest.raises(ValueError):
        score_question(Q_USER, ["h1"], "nope")


def test_user_evidence_question_in_every_protocol() -> None:
    for p in LONGMEMEVAL_PROTOCOLS:
        assert gold_for(Q_USER, p) == ("ans_1",)


def test_ssa_question_answerable_not_official() -> None:
    assert gold_for(Q_SSA, "answerable") == ("ans_2",)
    assert gold_for(Q_SSA, "official") is None
    assert gold_for(Q_SSA, "all") == ("ans_2",)


def test_multi_session_gold() -> None:
    assert gold_for(Q_MULTI, "answerable") == ("ans_c", "ans_a", "ans_b")
    assert gold_for(Q_MULTI, "all") == ("ans_c", "ans_a", "ans_b")
    # ans_b has has_answer only on an assistant turn -> relabelled noans by the reference
    assert gold_for(Q_MULTI, "official") == ("ans_c", "ans_a")


def test_abstention_only_in_all() -> None:
    assert gold_for(Q_ABS, "answerable") is None
    assert gold_for(Q_ABS, "official") is None
    assert gold_for(Q_ABS, "all") == ("ans_9",)


def test_missing_and_empty_gold() -> None:
    assert gold_for(Q_MISSING, "answerable") == ("ghost",)
    assert gold_for(Q_MISSING, "official") is None
    assert gold_for(Q_MISSING, "all") == ("ghost",)
    assert gold_for(Q_NONE, "answerable") is None
    assert gold_for(Q_NONE, "official") is None
    assert gold_for(Q_NONE, "all") == ()


def test_locomo_protocol() -> None:
    q = _question(
        "conv-1_qa3",
        "multi-hop",
        (_session("S1"), _session("S2"), _session("S3")),
        ("S2", "S9", "S2", "S1"),
    )
    assert gold_for(q, "locomo") == ("S2", "S1")
    unresolved = _question("conv-1_qa4", "single-hop", (_session("S1"),), ("S7",))
    assert gold_for(unresolved, "locomo") is None
    empty = _question("conv-1_qa5", "single-hop", (_session("S1"),), ())
    assert gold_for(empty, "locomo") is None


def test_score_question() -> None:
    ranking = ["h1", "ans_b", "ans_a", "h2", "ans_c"]
    assert score_question(Q_SSA, ranking, "official") is None
    row = score_question(Q_MULTI, ranking, "official", ks=(1, 3))
    assert row == question_metrics(("ans_c", "ans_a"), ranking, (1, 3))
    assert row is not None
    assert row["ndcg_any@3"] == pytest.approx(
        (1 / math.log2(3)) / (1 + 1 / math.log2(2))
    )
    all_row = score_question(Q_NONE, ["h1"], "all")
    assert all_row is not None
    assert all_row["recall_all@1"] == 1.0 and all_row["recall_any@1"] == 0.0
    assert set(all_row) == set(question_metrics((), ["h1"], KS))


QUESTIONS = (Q_USER, Q_SSA, Q_MULTI, Q_ABS, Q_MISSING, Q_NONE)
RANKINGS = {
    "q_user": ["ans_1", "h1", "h2"],
    "q_ssa": ["h1", "ans_2", "h2"],
    "q_multi": ["h1", "ans_b", "ans_a", "ans_c"],
    "q_user_abs": ["h1", "ans_9"],
    "q_missing": ["h2", "h1"],
    "q_none": ["h1"],
}


def _per_question(protocol: str) -> list[tuple[str, str, dict[str, float] | None]]:
    return [
        (
            q.question_id,
            q.question_type,
            score_question(q, RANKINGS[q.question_id], protocol),
        )
        for q in QUESTIONS
    ]


def test_summaries_counts() -> None:
    answerable = summarize(_per_question("answerable"), "answerable")
    official = summarize(_per_question("official"), "official")
    everything = summarize(_per_question("all"), "all")
    # answerable: user, ssa, multi, missing
    assert (answerable.n, answerable.n_skipped) == (4, 2)
    # official: user, multi
    assert (official.n, official.n_skipped) == (2, 4)
    assert (everything.n, everything.n_skipped) == (6, 0)
    assert answerable.by_type["single-session-assistant"][0] == 1
    assert "single-session-assistant" not in official.by_type
    assert everything.by_type["single-session-user"][0] == 2
    assert list(everything.by_type) == sorted(everything.by_type)
    # recall_any@1 under answerable: user 1, ssa 0, multi 0, missing 0
    assert answerable.metrics["recall_any@1"] == pytest.approx(1 / 4)
    # mrr under official: user 1, multi (ans_a at rank 3) 1/3
    assert official.metrics["mrr"] == pytest.approx((1 + 1 / 3) / 2)
    # all: q_none has no gold -> recall_all 1 enters the mean
    n_all_at_1 = 1 + 0 + 0 + 0 + 0 + 1  # q_user, ssa, multi, abs, missing, none
    assert everything.metrics["recall_all@1"] == pytest.approx(n_all_at_1 / 6)
    ssu_n, ssu_m = everything.by_type["single-session-user"]
    assert ssu_m["recall_any@1"] == pytest.approx((1 + 0) / ssu_n)


def test_summarize_rejects_duplicates_and_empty() -> None:
    row = question_metrics(["a"], ["a"])
    with pytest.raises(ValueError):
        summarize([("q1", "t", row), ("q1", "t", row)], "all")
    empty = summarize([("q1", "t", None)], "official")
    assert (empty.n, empty.n_skipped, empty.metrics, empty.by_type) == (0, 1, {}, {})


def test_summary_to_json_shape() -> None:
    summaries = {p: summarize(_per_question(p), p) for p in LONGMEMEVAL_PROTOCOLS}
    out = summary_to_json(summaries)
    assert set(out) == {"protocols"}
    assert set(out["protocols"]) == set(LONGMEMEVAL_PROTOCOLS)
    for name, body in out["protocols"].items():
        assert set(body) == {"n", "n_skipped", "metrics", "by_type"}
        assert body["n"] == summaries[name].n
        assert body["n_skipped"] == summaries[name].n_skipped
        assert body["n"] + body["n_skipped"] == len(QUESTIONS)
        assert sum(t["n"] for t in body["by_type"].values()) == body["n"]
        for t in body["by_type"].values():
            assert set(t) == {"n", "metrics"}
            assert set(t["metrics"]) == set(body["metrics"])
    assert out["protocols"]["official"]["n"] == 2
    # JSON-serialisable and a copy (editing it leaves the summary alone)
    json.dumps(out)
    out["protocols"]["all"]["metrics"]["mrr"] = -1.0
    assert summaries["all"].metrics["mrr"] != -1.0


def test_format_table() -> None:
    summary = summarize(_per_question("answerable"), "answerable")
    table = format_table(summary, ["recall_any@1", "ndcg_any@5"])
    lines = table.splitlines()
    assert lines[0].startswith("protocol=answerable  n=4")
    assert "skipped=2" in lines[0]
    assert lines[1].split() == ["type", "n", "recall_any@1", "ndcg_any@5"]
    body = [line.split()[0] for line in lines[2:]]
    assert body == sorted(summary.by_type) + ["overall"]
    overall = lines[-1].split()
    assert overall[1] == "4"
    assert overall[2] == f"{summary.metrics['recall_any@1']:.4f}"
    with pytest.raises(ValueError):
        format_table(summary, ["no_such@1"])
    empty = ProtocolSummary("official", 0, {}, {}, 3)
    assert format_table(empty, ["mrr"]).splitlines()[-1].split() == [
        "overall",
        "0",
        "-",
    ]
