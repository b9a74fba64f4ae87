"""Unit tests for engram_eval.scoring.metrics: expected values written as formulas."""

from __future__ import annotations

import copy
import math
from fractions import Fraction
from itertools import combinations

import pytest

from engram_eval.scoring.metrics import (
    KS,
    hit,
    mean_metrics,
    mrr,
    ndcg_any,
    question_metrics,
    random_baseline,
    recall_all,
    recall_any,
    rollup_turns,
    session_metrics_from_turns,
    turn_cutoff_for_sessions,
)

RANKING = ["s1", "s2", "s3", "s4", "s5", "s6"]


def test_ks() -> None:
    assert KS == (1, 3, 5, 10, 30, 50)


def test_recall_basic() -> None:
    gold = {"s2", "s5"}
    assert recall_any(gold, RANKING, 1) == 0.0
    assert recall_any(gold, RANKING, 2) == 1.0
    assert recall_all(gold, RANKING, 2) == 0.0
    assert recall_all(gold, RANKING, 5) == 1.0
    assert hit(gold, RANKING, 2) == 1.0
    assert hit(gold, RANKING, 1) == 0.0


def test_no_gold() -> None:
    for k in KS:
        assert recall_any([], RANKING, k) == 0.0
        assert recall_all([], RANKING, k) == 1.0
        assert ndcg_any([], RANKING, k) == 0.0
        assert hit([], RANKING, k) == 0.0
    assert mrr([], RANKING) == 0.0
    row = question_metrics((), RANKING)
    assert row["recall_all@5"] == 1.0 and row["recall_any@5"] == 0.0
    assert row["ndcg_any@5"] == 0.0 and row["mrr"] == 0.0


def test_empty_ranking() -> None:
    assert recall_any({"a"}, [], 5) == 0.0
    assert recall_all({"a"}, [], 5) == 0.0
    assert recall_all(set(), [], 5) == 1.0
    assert ndcg_any({"a"}, [], 5) == 0.0
    assert mrr({"a"}, []) == 0.0
    assert rollup_turns([], {}) == []
    assert turn_cutoff_for_sessions([], {}, 3) == 0


def test_gold_absent_from_corpus() -> None:
    gold = {"s2", "zz"}  # "zz" is not in the ranking/corpus
    assert recall_any(gold, RANKING, 6) == 1.0
    assert recall_all(gold, RANKING, 6) == 0.0
    # ideal counts both gold ids: 1 + 1/log2(2) = 2; actual: rank 2 -> 1/log2(2) = 1
    assert ndcg_any(gold, RANKING, 6) == pytest.approx(
        (1 / math.log2(2)) / (1 + 1 / math.log2(2))
    )
    assert mrr(gold, RANKING) == pytest.approx(1 / 2)


def test_ndcg_formula() -> None:
    gold = {"s3", "s5"}
    actual = 1 / math.log2(3) + 1 / math.log2(5)
    ideal = 1 + 1 / math.log2(2)
    assert ndcg_any(gold, RANKING, 5) == pytest.approx(actual / ideal)
    assert ndcg_any(gold, RANKING, 3) == pytest.approx((1 / math.log2(3)) / ideal)
    # k = 1: ideal holds min(2, 1) = 1 relevant item
    assert ndcg_any(gold, RANKING, 1) == 0.0
    assert ndcg_any({"s1"}, RANKING, 1) == 1.0


def test_ranks_one_and_two_weigh_the_same() -> None:
    # a single gold at rank 1 or at rank 2 has the same DCG (1/log2(2) == 1)
    assert ndcg_any({"s1"}, RANKING, 5) == ndcg_any({"s2"}, RANKING, 5) == 1.0
    # two gold at ranks 1 and 2 vs ranks 2 and 1: identical and perfect
    assert ndcg_any({"s1", "s2"}, RANKING, 5) == 1.0
    assert ndcg_any({"s1", "s2"}, ["s2", "s1", "s3"], 5) == 1.0
    # rank 3 is the first to be discounted
    assert ndcg_any({"s3"}, RANKING, 5) == pytest.approx(1 / math.log2(3))


def test_more_gold_than_k() -> None:
    gold = {"s1", "s2", "s3", "s4"}
    assert recall_all(gold, RANKING, 3) == 0.0
    assert recall_any(gold, RANKING, 3) == 1.0
    # ideal has min(4, 3) = 3 items, all retrieved -> 1.0
    assert ndcg_any(gold, RANKING, 3) == pytest.approx(1.0)
    # gold at ranks 2, 3 only, k=3: ideal 3 items
    gold2 = {"s2", "s3", "x", "y"}
    ideal = 1 + 1 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_any(gold2, RANKING, 3) == pytest.approx(
        (1 / math.log2(2) + 1 / math.log2(3)) / ideal
    )


def test_gold_never_retrieved_counts() -> None:
    # corpus ranking is truncated; the second gold is never in it
    gold = {"s1", "s9"}
    assert ndcg_any(gold, ["s1", "s2"], 10) == pytest.approx(1 / (1 + 1 / math.log2(2)))


def test_mrr() -> None:
    assert mrr({"s4", "s6"}, RANKING) == pytest.approx(1 / 4)
    assert mrr({"s1"}, RANKING) == 1.0
    assert mrr({"nope"}, RANKING) == 0.0


def test_k_beyond_ranking() -> None:
    assert recall_all({"s1", "s6"}, RANKING, 50) == 1.0
    assert ndcg_any({"s6"}, RANKING, 50) == pytest.approx(1 / math.log2(6))


@pytest.mark.parametrize("k", [0, -1])
def test_bad_k(k: int) -> None:
    with pytest.raises(ValueError):
        recall_any({"s1"}, RANKING, k)
    with pytest.raises(ValueError):
        recall_all({"s1"}, RANKING, k)
    with pytest.raises(ValueError):
        ndcg_any({"s1"}, RANKING, k)
    with pytest.raises(ValueError):
        hit({"s1"}, RANKING, k)
    with pytest.raises(ValueError):
        question_metrics({"s1"}, RANKING, ks=(k,))
    with pytest.raises(ValueError):
        turn_cutoff_for_sessions(["t"], {"t": "s"}, k)
    with pytest.raises(ValueError):
        random_baseline(1, 5, k)


def test_duplicate_ranking_rejected() -> None:
    dup = ["s1", "s2", "s1"]
    for fn in (recall_any, recall_all, ndcg_any, hit):
        with pytest.raises(ValueError, match="duplicate"):
            fn({"s1"}, dup, 3)
    with pytest.raises(ValueError, match="duplicate"):
        mrr({"s1"}, dup)
    with pytest.raises(ValueError, match="duplicate"):
        question_metrics({"s1"}, dup)
    with pytest.raises(ValueError, match="duplicate"):
        rollup_turns(["t1", "t1"], {"t1": "a"})
    with pytest.raises(ValueError, match="duplicate"):
        session_metrics_from_turns({"a"}, ["t1", "t1"], {"t1": "a"})


def test_question_metrics_keys_and_values() -> None:
    gold = ["s2", "s5"]
    row = question_metrics(gold, RANKING)
    expected_keys = [
        f"{m}@{k}" for k in KS for m in ("recall_any", "recall_all", "ndcg_any", "hit")
    ]
    assert list(row) == expected_keys + ["mrr"]
    for k in KS:
        assert row[f"recall_any@{k}"] == recall_any(gold, RANKING, k)
        assert row[f"recall_all@{k}"] == recall_all(gold, RANKING, k)
        assert row[f"ndcg_any@{k}"] == ndcg_any(gold, RANKING, k)
        assert row[f"hit@{k}"] == hit(gold, RANKING, k)
    assert row["mrr"] == pytest.approx(1 / 2)
    assert row["ndcg_any@5"] == pytest.approx((1 / math.log2(2) + 1 / math.log2(5)) / 2)


def test_question_metrics_bad_ks() -> None:
    with pytest.raises(ValueError):
        question_metrics({"s1"}, RANKING, ks=())
    with pytest.raises(ValueError):
        question_metrics({"s1"}, RANKING, ks=(1, 1))


def test_inputs_not_mutated() -> None:
    gold = ["s2", "s5", "s2"]
    gold_set = {"s2", "s5"}
    ranking = list(RANKING)
    turns = ["a_1", "b_1", "a_2", "c_1"]
    session_of = {"a_1": "a", "a_2": "a", "b_1": "b", "c_1": "c"}
    snapshot = copy.deepcopy((gold, gold_set, ranking, turns, session_of))
    question_metrics(gold, ranking)
    question_metrics(gold_set, ranking)
    ndcg_any(gold, ranking, 3)
    mrr(gold, ranking)
    rollup_turns(turns, session_of)
    turn_cutoff_for_sessions(turns, session_of, 2)
    session_metrics_from_turns(["a"], turns, session_of)
    rows = [{"x": 1.0}, {"x": 0.0}]
    rows_snapshot = copy.deepcopy(rows)
    mean_metrics(rows)
    assert (gold, gold_set, ranking, turns, session_of) == snapshot
    assert rows == rows_snapshot


# ----------------------------------------------------------------------------- turns

# Turn ranking whose first 5 turns cover only 3 sessions (A, B, C); D appears at turn 6.
TURNS = ["A_1", "A_2", "B_1", "A_3", "C_1", "D_1", "B_2", "E_1"]


def _sess(turn_id: str) -> str:
    return turn_id.split("_")[0]


def test_rollup_turns() -> None:
    assert rollup_turns(TURNS, _sess) == ["A", "B", "C", "D", "E"]
    mapping = {t: _sess(t) for t in TURNS}
    assert rollup_turns(TURNS, mapping) == ["A", "B", "C", "D", "E"]
    with pytest.raises(ValueError):
        rollup_turns(["A_1", "zz"], {"A_1": "A"})


def test_turn_cutoff_widening() -> None:
    assert turn_cutoff_for_sessions(TURNS, _sess, 1) == 1
    assert turn_cutoff_for_sessions(TURNS, _sess, 2) == 3
    assert turn_cutoff_for_sessions(TURNS, _sess, 3) == 5
    # the first 5 turns cover only 3 sessions, so session@4 needs 6 turns
    assert turn_cutoff_for_sessions(TURNS, _sess, 4) == 6
    assert turn_cutoff_for_sessions(TURNS, _sess, 5) == 8
    assert turn_cutoff_for_sessions(TURNS, _sess, 10) == len(TURNS)


def test_session_metrics_from_turns_widening() -> None:
    gold = {"D"}
    row = session_metrics_from_turns(gold, TURNS, _sess, ks=(3, 4, 5))
    # k=3: window = 5 turns (A, B, C) -> D absent
    assert row["recall_any@3"] == 0.0
    assert row["ndcg_any@3"] == 0.0
    # k=4: window widened to 6 turns, D at turn rank 6
    assert row["recall_any@4"] == 1.0
    assert row["recall_all@4"] == 1.0
    assert row["hit@4"] == 1.0
    assert row["ndcg_any@4"] == pytest.approx(1 / math.log2(6))
    assert row["mrr"] == pytest.approx(1 / 4)  # D is the 4th session


def test_session_metrics_from_turns_turn_level_gain() -> None:
    # gold session A has 3 turns: at turn ranks 1, 2, 4 -> each adds gain (reference style)
    row = session_metrics_from_turns({"A"}, TURNS, _sess, ks=(1, 2, 3))
    # k=1: c=1, ideal = min(3 relevant turns, 1) = 1 item
    assert row["ndcg_any@1"] == pytest.approx(1.0)
    # k=2: c=3 turns [A, A, B]; ideal = min(3, 3) = 3 items
    ideal3 = 1 + 1 / math.log2(2) + 1 / math.log2(3)
    assert row["ndcg_any@2"] == pytest.approx((1 + 1 / math.log2(2)) / ideal3)
    # k=3: c=5 turns [A, A, B, A, C]; ideal = 3 items
    assert row["ndcg_any@3"] == pytest.approx(
        (1 + 1 / math.log2(2) + 1 / math.log2(4)) / ideal3
    )
    assert row["recall_all@1"] == 1.0 and row["mrr"] == 1.0


def test_session_metrics_from_turns_fewer_sessions_than_k() -> None:
    turns = ["A_1", "B_1", "A_2"]
    row = session_metrics_from_turns({"B", "Z"}, turns, _sess, ks=(10,))
    # Z never appears: it counts as one more relevant item in the ideal list (uncut)
    ideal = 1 + 1 / math.log2(2)
    assert row["ndcg_any@10"] == pytest.approx((1 / math.log2(2)) / ideal)
    assert row["recall_any@10"] == 1.0 and row["recall_all@10"] == 0.0


def test_session_metrics_from_turns_no_gold_and_empty() -> None:
    row = session_metrics_from_turns([], TURNS, _sess)
    for k in KS:
        assert row[f"recall_any@{k}"] == 0.0
        assert row[f"recall_all@{k}"] == 1.0
        assert row[f"ndcg_any@{k}"] == 0.0
    empty = session_metrics_from_turns({"A"}, [], _sess)
    assert all(v == 0.0 for v in empty.values())
    assert list(row) == list(question_metrics([], []))


def test_session_level_ranking_equals_turn_ranking_with_one_turn_per_session() -> None:
    gold = {"s2", "s5"}
    turns = [f"{s}_1" for s in RANKING]
    assert session_metrics_from_turns(
        gold, turns, lambda t: t.split("_")[0]
    ) == pytest.approx(question_metrics(gold, RANKING))


# ----------------------------------------------------------------------------- aggregation


def test_mean_metrics() -> None:
    rows = [
        {"a@1": 1.0, "mrr": 0.5},
        {"a@1": 0.0, "mrr": 0.25},
        {"mrr": 0.0, "a@1": 1.0},
    ]
    assert mean_metrics(rows) == pytest.approx({"a@1": 2 / 3, "mrr": 0.75 / 3})
    assert mean_metrics([]) == {}
    with pytest.raises(ValueError):
        mean_metrics([{"a@1": 1.0}, {"b@1": 1.0}])
    with pytest.raises(ValueError):
        mean_metrics([{"a@1": 1.0}, {"a@1": 1.0, "mrr": 1.0}])


def _brute_force_baseline(n_gold: int, pool: int, k: int) -> tuple[Fraction, Fraction]:
    items = range(pool)
    gold = set(range(n_gold))
    subsets = list(combinations(items, min(k, pool)))
    any_ = Fraction(sum(1 for s in subsets if gold & set(s)), len(subsets))
    all_ = Fraction(sum(1 for s in subsets if gold <= set(s)), len(subsets))
    return any_, all_


@pytest.mark.parametrize(
    ("n_gold", "pool", "k"),
    [(1, 5, 1), (2, 6, 3), (3, 7, 5), (0, 4, 2), (2, 4, 10), (3, 8, 2)],
)
def test_random_baseline_matches_brute_force(n_gold: int, pool: int, k: int) -> None:
    any_, all_ = _brute_force_baseline(n_gold, pool, k)
    got = random_baseline(n_gold, pool, k)
    assert got == pytest.approx(
        {f"recall_any@{k}": float(any_), f"recall_all@{k}": float(all_)}
    )


def test_random_baseline_formulas() -> None:
    got = random_baseline(1, 50, 5)
    assert got["recall_any@5"] == pytest.approx(5 / 50)
    assert got["recall_all@5"] == pytest.approx(5 / 50)
    got = random_baseline(2, 50, 5)
    assert got["recall_any@5"] == pytest.approx(1 - math.comb(48, 5) / math.comb(50, 5))
    assert got["recall_all@5"] == pytest.approx(math.comb(48, 3) / math.comb(50, 5))
    assert random_baseline(0, 10, 3) == {"recall_any@3": 0.0, "recall_all@3": 1.0}
    with pytest.raises(ValueError):
        random_baseline(3, 2, 1)
    with pytest.raises(ValueError):
        random_baseline(-1, 2, 1)
