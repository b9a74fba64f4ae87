"""Tests for engram_eval.scoring.protocols: gold and skip rules, summaries, JSON shape, tables."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from engram_eval.data.records import Question, Session, Turn
from engram_eval.errors import ConfigError
from engram_eval.runs.config import RunConfig
from engram_eval.scoring.metrics import KS, question_metrics
from engram_eval.scoring.protocols import (
    LOCOMO_PROTOCOLS,
    LONGMEMEVAL_PROTOCOLS,
    PROTOCOLS,
    ProtocolSummary,
    check_protocols,
    default_protocols,
    entry_counts,
    format_table,
    gold_for,
    is_adversarial,
    reference_corpus_id,
    reference_gold,
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
    (_session("h1"), _session("answer_1", user_answer=True), _session("h2")),
    ("answer_1",),
)
# single-session-assistant: evidence only on the assistant turn
Q_SSA = _question(
    "q_ssa",
    "single-session-assistant",
    (_session("h1"), _session("answer_2", assistant_answer=True), _session("h2")),
    ("answer_2",),
)
# multi-session: one answer session with user evidence, one without, one listed twice
Q_MULTI = _question(
    "q_multi",
    "multi-session",
    (
        _session("answer_a", user_answer=True),
        _session("h1"),
        _session("answer_b", assistant_answer=True),
        _session("answer_c", user_answer=True),
    ),
    ("answer_c", "answer_a", "answer_b", "answer_a"),
)
# abstention
Q_ABS = _question(
    "q_user_abs",
    "single-session-user",
    (_session("h1"), _session("answer_9", user_answer=True)),
    ("answer_9",),
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
    assert LONGMEMEVAL_PROTOCOLS == ("answerable", "official", "official_nonempty_gold", "all")


def test_unknown_protocol() -> None:
    with pytest.raises(ValueError):
        gold_for(Q_USER, "everything")
    with pytest.raises(ValueError):
        score_question(Q_USER, ["h1"], "nope")


def test_user_evidence_question_in_every_protocol() -> None:
    for p in LONGMEMEVAL_PROTOCOLS:
        assert gold_for(Q_USER, p) == ("answer_1",)


def test_ssa_question_answerable_not_official() -> None:
    assert gold_for(Q_SSA, "answerable") == ("answer_2",)
    # relabelled noans: no gold left; official keeps the question (scored 0/1/0), the
    # _nonempty_gold view skips it
    assert gold_for(Q_SSA, "official") == ()
    assert gold_for(Q_SSA, "official_nonempty_gold") is None
    assert gold_for(Q_SSA, "all") == ("answer_2",)


def test_multi_session_gold() -> None:
    assert gold_for(Q_MULTI, "answerable") == ("answer_c", "answer_a", "answer_b")
    assert gold_for(Q_MULTI, "all") == ("answer_c", "answer_a", "answer_b")
    # answer_b has has_answer only on an assistant turn -> relabelled noans by the reference
    # reference gold: haystack order, each id once
    assert gold_for(Q_MULTI, "official") == ("answer_a", "answer_c")
    assert gold_for(Q_MULTI, "official_nonempty_gold") == ("answer_a", "answer_c")


def test_abstention_only_in_all() -> None:
    assert gold_for(Q_ABS, "answerable") is None
    assert gold_for(Q_ABS, "official") is None
    assert gold_for(Q_ABS, "official_nonempty_gold") is None
    assert gold_for(Q_ABS, "all") == ("answer_9",)


def test_missing_and_empty_gold() -> None:
    assert gold_for(Q_MISSING, "answerable") == ("ghost",)
    assert gold_for(Q_MISSING, "official") == ()
    assert gold_for(Q_MISSING, "official_nonempty_gold") is None
    assert gold_for(Q_MISSING, "all") == ("ghost",)
    assert gold_for(Q_NONE, "answerable") is None
    assert gold_for(Q_NONE, "official") == ()
    assert gold_for(Q_NONE, "official_nonempty_gold") is None
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
    ranking = ["h1", "answer_b", "answer_a", "h2", "answer_c"]
    assert score_question(Q_SSA, ranking, "official_nonempty_gold") is None
    no_gold = score_question(Q_SSA, ranking, "official")
    assert no_gold == question_metrics((), ranking)
    assert (no_gold["recall_any@5"], no_gold["recall_all@5"], no_gold["ndcg_any@5"]) == (
        0.0, 1.0, 0.0)
    row = score_question(Q_MULTI, ranking, "official", ks=(1, 3))
    assert row == question_metrics(("answer_c", "answer_a"), ranking, (1, 3))
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
    "q_user": ["answer_1", "h1", "h2"],
    "q_ssa": ["h1", "answer_2", "h2"],
    "q_multi": ["h1", "answer_b", "answer_a", "answer_c"],
    "q_user_abs": ["h1", "answer_9"],
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
    nonempty = summarize(_per_question("official_nonempty_gold"), "official_nonempty_gold")
    everything = summarize(_per_question("all"), "all")
    # answerable: user, ssa, multi, missing
    assert (answerable.n, answerable.n_skipped) == (4, 2)
    # official: every non-_abs question (user, ssa, multi, missing, none)
    assert (official.n, official.n_skipped) == (5, 1)
    # official_nonempty_gold: user, multi
    assert (nonempty.n, nonempty.n_skipped) == (2, 4)
    assert (everything.n, everything.n_skipped) == (6, 0)
    assert answerable.by_type["single-session-assistant"][0] == 1
    assert official.by_type["single-session-assistant"][0] == 1
    assert "single-session-assistant" not in nonempty.by_type
    assert everything.by_type["single-session-user"][0] == 2
    assert list(everything.by_type) == sorted(everything.by_type)
    # recall_any@1 under answerable: user 1, ssa 0, multi 0, missing 0
    assert answerable.metrics["recall_any@1"] == pytest.approx(1 / 4)
    # mrr under official_nonempty_gold: user 1, multi (answer_a at rank 3) 1/3
    assert nonempty.metrics["mrr"] == pytest.approx((1 + 1 / 3) / 2)
    # official: the three no-gold questions score mrr 0, recall_all 1, ndcg 0
    assert official.metrics["mrr"] == pytest.approx((1 + 0 + 1 / 3 + 0 + 0) / 5)
    assert official.metrics["recall_all@1"] == pytest.approx((1 + 1 + 0 + 1 + 1) / 5)
    assert official.metrics["ndcg_any@1"] == pytest.approx((1 + 0 + 0 + 0 + 0) / 5)
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
    assert out["protocols"]["official"]["n"] == 5
    assert out["protocols"]["official_nonempty_gold"]["n"] == 2
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


# -- the reference printer's rules, hand-built ---------------------------------------------
def test_no_gold_non_abs_question_counts_in_official_like_the_reference() -> None:
    """An answer session whose evidence sits on the assistant side only is relabelled noans:
    the question keeps its place in ``official`` and scores recall_any 0, recall_all 1,
    ndcg 0 at every k (``evaluate_retrieval`` on an empty gold list)."""
    row = score_question(Q_SSA, ["answer_2", "h1", "h2"], "official")
    assert row is not None
    for k in KS:
        assert (row[f"recall_any@{k}"], row[f"recall_all@{k}"], row[f"ndcg_any@{k}"]) == (
            0.0, 1.0, 0.0)


def test_reference_gold_is_the_id_rule_not_answer_session_ids() -> None:
    """Gold = haystack sessions whose id contains 'answer' and hold a user has_answer turn,
    whether or not they are listed in answer_session_ids (the reference never reads it)."""
    q = _question("q_ids", "multi-session",
                  (_session("answer_other", user_answer=True), _session("h1"),
                   _session("evidence_x", user_answer=True)),
                  ("evidence_x",))
    assert reference_gold(q) == ("answer_other",)
    assert gold_for(q, "official") == ("answer_other",)
    assert gold_for(q, "answerable") == ("evidence_x",)
    assert reference_corpus_id(_session("answer_z", assistant_answer=True)) == "noans_z"
    assert reference_corpus_id(_session("answer_y", user_answer=True)) == "answer_y"


def _with_entries(q: Question, entries: dict[str, int]) -> Question:
    return dataclasses.replace(q, extra=(("haystack_entries", tuple(entries.items())),))


def test_repeated_haystack_entry_takes_one_position_per_entry() -> None:
    """The reference indexes every haystack entry: a distractor listed twice pushes the
    gold one further down, and a gold session listed twice counts twice in the ideal DCG."""
    base = _question("q_rep", "single-session-user",
                     (_session("h1"), _session("answer_1", user_answer=True), _session("h2")),
                     ("answer_1",))
    ranking = ["h1", "answer_1", "h2"]
    twice_h1 = _with_entries(base, {"h1": 2})  # entries h1 h1 answer_1 h2
    off = score_question(twice_h1, ranking, "official", ks=(1, 2, 3))
    distinct = score_question(twice_h1, ranking, "official_nonempty_gold", ks=(1, 2, 3))
    assert off is not None and distinct is not None
    assert (off["recall_any@2"], distinct["recall_any@2"]) == (0.0, 1.0)
    assert off["recall_any@3"] == 1.0
    assert off["ndcg_any@3"] == pytest.approx(1 / math.log2(3))
    assert off["mrr"] == pytest.approx(1 / 3)
    twice_gold = _with_entries(base, {"answer_1": 2})  # entries h1 answer_1 answer_1 h2
    g = score_question(twice_gold, ranking, "official", ks=(1, 2, 3))
    assert g is not None
    # relevances 0 1 1 -> dcg@3 = 1/log2(2) + 1/log2(3); ideal (two relevant) = 1 + 1
    assert g["ndcg_any@3"] == pytest.approx((1 + 1 / math.log2(3)) / 2)
    assert g["ndcg_any@2"] == pytest.approx(1 / 2)
    # without repeats official equals the distinct-session metrics
    assert score_question(base, ranking, "official") == question_metrics(("answer_1",), ranking)


def test_loader_records_repeated_entries(tmp_path) -> None:
    from engram_eval.data.longmemeval import load_longmemeval

    turns = [{"role": "user", "content": "hi", "has_answer": False}]
    gold_turns = [{"role": "user", "content": "it is blue", "has_answer": True}]
    rec = {"question_id": "r1", "question_type": "single-session-user", "question": "q?",
           "answer": "blue", "question_date": "2023/05/20 (Sat) 02:21",
           "haystack_dates": ["2023/05/01 (Mon) 10:00"] * 3,
           "haystack_session_ids": ["s1", "answer_1", "s1"],
           "haystack_sessions": [turns, gold_turns, turns],
           "answer_session_ids": ["answer_1"]}
    path = tmp_path / "rep.json"
    path.write_text(json.dumps([rec]))
    (q,) = load_longmemeval(path).questions
    assert q.session_ids == ("s1", "answer_1")
    assert entry_counts(q) == {"s1": 2}
    row = score_question(q, ["s1", "answer_1"], "official", ks=(2,))
    assert row is not None and row["recall_any@2"] == 0.0


# -- LoCoMo: locomo (every scored item) and locomo_no_adversarial (category 5 left out) ------
LOCOMO_TINY = Path(__file__).resolve().parents[2] / "fixtures" / "locomo_tiny.json"


def _tiny_locomo():
    from engram_eval.data.locomo import load_locomo

    return load_locomo(LOCOMO_TINY)


def _category(q: Question) -> int:
    return int(str(q.get_extra("category")))


def test_locomo_protocol_names_and_defaults() -> None:
    assert LOCOMO_PROTOCOLS == ("locomo", "locomo_no_adversarial")
    assert PROTOCOLS == LONGMEMEVAL_PROTOCOLS + LOCOMO_PROTOCOLS
    assert default_protocols("locomo") == ["locomo", "locomo_no_adversarial"]
    assert default_protocols("longmemeval") == list(LONGMEMEVAL_PROTOCOLS)
    check_protocols("locomo", ["locomo"])  # what LoCoMo runs published before it record
    check_protocols("locomo", ["locomo_no_adversarial"])
    for fmt, protos in (("locomo", ["locomo", "answerable"]),
                        ("longmemeval", ["answerable", "locomo_no_adversarial"]),
                        ("longmemeval", ["locomo"])):
        with pytest.raises(ConfigError, match="protocols"):
            check_protocols(fmt, protos)
    with pytest.raises(ConfigError, match="unknown protocol"):
        RunConfig(protocols=["locomo_no_adversaria"])
    assert RunConfig(protocols=["locomo_no_adversarial"]).protocols == ["locomo_no_adversarial"]


def test_locomo_no_adversarial_gold_and_denominator_on_the_fixture() -> None:
    ds = _tiny_locomo()
    qs = ds.questions
    for q in qs:
        full = gold_for(q, "locomo")
        assert full == (tuple(q.answer_session_ids) or None)  # the loader's evidence sessions
        expect = None if _category(q) == 5 else full
        assert gold_for(q, "locomo_no_adversarial") == expect
        assert is_adversarial(q) == (_category(q) == 5) == bool(q.get_extra("adversarial"))
    n_all = len(qs)
    n_locomo = n_all - len(ds.report.items_without_gold)
    n_adv_scored = sum(_category(q) == 5 and bool(q.answer_session_ids) for q in qs)
    n_cat_1_4 = sum(n for c, n in ds.report.by_category if c in (1, 2, 3, 4))
    n_cat_1_4_no_gold = sum(_category(q) != 5 and q.question_id in ds.report.items_without_gold
                            for q in qs)
    counts = {p: sum(gold_for(q, p) is not None for q in qs) for p in LOCOMO_PROTOCOLS}
    assert counts["locomo"] == n_locomo
    assert counts["locomo_no_adversarial"] == n_locomo - n_adv_scored
    assert counts["locomo_no_adversarial"] == n_cat_1_4 - n_cat_1_4_no_gold
    # the fixture's own numbers: 12 items, 2 without evidence, 2 adversarial (both with gold)
    assert (n_all, n_locomo, n_adv_scored, counts["locomo_no_adversarial"]) == (12, 10, 2, 8)


def test_locomo_no_adversarial_summary_is_the_locomo_summary_without_category_5() -> None:
    from engram_eval.scoring.summary import summarize_rows

    qs = _tiny_locomo().questions
    rows = []
    for q in qs:
        ranking = list(reversed(q.session_ids))  # any fixed ranking over the corpus
        rows.append({"question_id": q.question_id, "question_type": q.question_type,
                     "ranked_session_ids": ranking,
                     "gold": {p: (list(g) if (g := gold_for(q, p)) is not None else None)
                              for p in LOCOMO_PROTOCOLS},
                     "metrics": {p: score_question(q, ranking, p) for p in LOCOMO_PROTOCOLS}})
    out = summarize_rows(rows, LOCOMO_PROTOCOLS)["protocols"]
    full, no_adv = out["locomo"], out["locomo_no_adversarial"]
    scored = [(q, list(reversed(q.session_ids))) for q in qs if q.answer_session_ids]
    kept = [(q, r) for q, r in scored if _category(q) != 5]
    adv = [(q, r) for q, r in scored if _category(q) == 5]
    assert (full["n"], no_adv["n"]) == (len(scored), len(kept))
    assert no_adv["n_skipped"] == len(qs) - len(kept)
    assert set(no_adv["by_type"]) == set(full["by_type"]) - {"5"}
    assert no_adv["denominator"] != full["denominator"]
    for m in ("recall_any@1", "recall_all@5", "ndcg_any@5", "mrr"):
        per_q = {q.question_id: question_metrics(q.answer_session_ids, r)[m] for q, r in scored}
        expect = sum(per_q[q.question_id] for q, _ in kept) / len(kept)
        assert no_adv["metrics"][m] == pytest.approx(expect)
        # n_locomo * mean_locomo = n_kept * mean_kept + n_adversarial * mean_adversarial
        adv_sum = sum(per_q[q.question_id] for q, _ in adv)
        assert full["n"] * full["metrics"][m] == pytest.approx(
            no_adv["n"] * no_adv["metrics"][m] + adv_sum)
        for t, block in no_adv["by_type"].items():
            assert block == full["by_type"][t]


def test_a_run_recording_only_locomo_still_verifies(tmp_path: Path) -> None:
    """A LoCoMo run whose sidecar records ``protocols: [locomo]`` (as every run published
    before ``locomo_no_adversarial`` does) keeps verifying: verify recomputes the recorded
    list, not today's defaults."""
    from engram_eval.runs import runner
    from engram_eval.runs.verify import verify

    out = tmp_path / "old.jsonl"
    runner.run(RunConfig(retriever="dummy", protocols=["locomo"], progress=False),
               LOCOMO_TINY, out, echo=lambda m: None)
    meta = json.loads((tmp_path / "old.jsonl.metadata.json").read_text(encoding="utf-8"))
    assert meta["protocols"] == ["locomo"]
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert all(set(r["metrics"]) == {"locomo"} for r in rows)
    rep = verify(out, LOCOMO_TINY)
    assert rep.verified, rep.format()


def test_a_default_locomo_run_reports_both_protocols_and_verifies(tmp_path: Path) -> None:
    from engram_eval.runs import runner
    from engram_eval.runs.verify import verify

    out = tmp_path / "new.jsonl"
    outcome = runner.run(RunConfig(retriever="dummy", progress=False), LOCOMO_TINY, out,
                         echo=lambda m: None)
    meta = json.loads((tmp_path / "new.jsonl.metadata.json").read_text(encoding="utf-8"))
    assert meta["protocols"] == list(LOCOMO_PROTOCOLS)
    assert list(outcome.summary["protocols"]) == list(LOCOMO_PROTOCOLS)
    rep = verify(out, LOCOMO_TINY)
    assert rep.verified, rep.format()
