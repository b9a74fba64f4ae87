"""Parity with the LongMemEval reference scorer's definitions.

The reference (github.com/xiaowu0162/LongMemEval, ``src/retrieval/eval_utils.py``) scores a
ranking given as a permutation of corpus *indices*, with relevance derived from the corpus
ids. Below is a small independent re-derivation in that style (index rankings, sets, a DCG
over a relevance list, ``ndcg = dcg / idcg`` with 0 when the ideal is 0, and the turn→session
``effective_k`` widening with ids stripped of their last ``_`` component). Every case ranks
the whole corpus and has its gold inside the corpus, which is the setting the reference runs
in; there ``engram_eval.scoring.metrics`` must agree for every k in KS.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from engram_eval.scoring.metrics import KS, question_metrics, session_metrics_from_turns

# ----------------------------------------------------------------------------- reference style


def ref_dcg(relevances: Sequence[float], k: int) -> float:
    rel = np.asarray(relevances, dtype=float)[:k]
    if rel.size == 0:
        return 0.0
    discounts = np.log2(
        np.arange(2, rel.size + 1)
    )  # ranks 2.. -> log2(2), log2(3), ...
    return float(rel[0] + np.sum(rel[1:] / discounts))


def ref_ndcg(
    rankings: Sequence[int], correct: set[str], corpus_ids: list[str], k: int
) -> float:
    relevance = [1 if cid in correct else 0 for cid in corpus_ids]
    got = [relevance[i] for i in rankings[:k]]
    ideal = ref_dcg(sorted(relevance, reverse=True), k)
    if ideal == 0:
        return 0.0
    return ref_dcg(got, k) / ideal


def ref_eval(
    rankings: Sequence[int], correct: set[str], corpus_ids: list[str], k: int
) -> tuple[float, float, float]:
    top = {corpus_ids[i] for i in rankings[:k]}
    any_ = float(any(c in top for c in correct))
    all_ = float(all(c in top for c in correct))
    return any_, all_, ref_ndcg(rankings, correct, corpus_ids, k)


def strip_turn(turn_id: str) -> str:
    return "_".join(turn_id.split("_")[:-1])


def ref_eval_turn2session(
    rankings: Sequence[int], correct_turns: set[str], turn_ids: list[str], k: int
) -> tuple[float, float, float]:
    correct = {strip_turn(t) for t in correct_turns}
    sess_ids = [strip_turn(t) for t in turn_ids]
    eff = k
    while eff <= len(sess_ids) and len({sess_ids[i] for i in rankings[:eff]}) < k:
        eff += 1
    return ref_eval(rankings, correct, sess_ids, eff)


# ----------------------------------------------------------------------------- cases

SESSION_CASES: list[tuple[list[str], list[int], set[str]]] = [
    # (corpus ids, ranking as a permutation of indices, gold ids)
    (["a", "b", "c", "d", "e"], [0, 1, 2, 3, 4], {"a"}),
    (["a", "b", "c", "d", "e"], [4, 3, 2, 1, 0], {"a"}),
    (["a", "b", "c", "d", "e"], [1, 0, 2, 3, 4], {"a", "b"}),
    (["a", "b", "c", "d", "e"], [2, 4, 0, 1, 3], {"a", "b", "e"}),
    (["a", "b", "c", "d", "e"], [0, 1, 2, 3, 4], set()),  # no gold
    ([f"s{i}" for i in range(60)], list(range(59, -1, -1)), {"s0", "s7", "s31"}),
    (
        [f"s{i}" for i in range(60)],
        [(i * 7) % 60 for i in range(60)],
        {f"s{i}" for i in range(12)},
    ),
    (["x", "y"], [1, 0], {"x", "y"}),
]


@pytest.mark.parametrize(("corpus", "rankings", "gold"), SESSION_CASES)
def test_session_level_parity(
    corpus: list[str], rankings: list[int], gold: set[str]
) -> None:
    ranking = [corpus[i] for i in rankings]
    ours = question_metrics(gold, ranking, KS)
    for k in KS:
        any_, all_, nd = ref_eval(rankings, gold, corpus, k)
        assert ours[f"recall_any@{k}"] == any_, k
        assert ours[f"recall_all@{k}"] == all_, k
        assert ours[f"ndcg_any@{k}"] == pytest.approx(nd, abs=1e-12), k


def test_no_gold_reference_convention() -> None:
    corpus = ["a", "b", "c"]
    for k in KS:
        assert ref_eval([0, 1, 2], set(), corpus, k) == (0.0, 1.0, 0.0)
    ours = question_metrics(set(), corpus)
    for k in KS:
        assert (
            ours[f"recall_any@{k}"],
            ours[f"recall_all@{k}"],
            ours[f"ndcg_any@{k}"],
        ) == (
            0.0,
            1.0,
            0.0,
        )


def _turn_corpus(spec: dict[str, int]) -> list[str]:
    return [f"{sid}_{j}" for sid, n in spec.items() for j in range(1, n + 1)]


TURN_CASES: list[tuple[list[str], list[int], set[str]]] = []


def _add_turn_case(
    spec: dict[str, int], order: list[int] | int | None, gold_sessions: set[str]
) -> None:
    """``order``: explicit index permutation, a stride (``i * stride % n``), or None (identity)."""
    turns = _turn_corpus(spec)
    n = len(turns)
    if order is None:
        rankings = list(range(n))
    elif isinstance(order, int):
        rankings = [(i * order) % n for i in range(n)]
    else:
        rankings = order
    # reference gold is turn ids; every turn of a gold session counts as evidence here
    correct = {t for t in turns if strip_turn(t) in gold_sessions}
    TURN_CASES.append((turns, rankings, correct))


# first 5 turns cover only 3 sessions
_add_turn_case(
    {"ans_a": 3, "s_b": 1, "s_c": 1, "s_d": 2}, [0, 1, 3, 2, 4, 5, 6], {"ans_a"}
)
_add_turn_case(
    {"ans_a": 3, "s_b": 1, "s_c": 1, "s_d": 2}, [0, 1, 3, 2, 4, 5, 6], {"s_d"}
)
_add_turn_case(
    {"ans_a": 2, "ans_b": 2, "s_c": 3, "s_d": 1},
    [4, 5, 0, 6, 2, 7, 1, 3],
    {"ans_a", "ans_b"},
)
_add_turn_case({"s_a": 2, "s_b": 2}, None, set())  # no gold
_add_turn_case(
    {f"s_{i}": 1 + i % 3 for i in range(40)},
    11,  # 79 turns; 11 is coprime with 79
    {"s_3", "s_17", "s_38"},
)
# a single session: fewer sessions than every k > 1
_add_turn_case({"only_a": 4}, [3, 2, 1, 0], {"only_a"})

# run_retrieval.py's labelling: non-evidence turns of an answer session become ``noans_…``,
# a distinct pseudo-session that is neither gold nor merged with the evidence turns.
TURN_CASES.append(
    (
        [
            "answer_x_1",
            "noans_x_3",
            "s_y_1",
            "s_y_3",
            "noans_z_1",
            "answer_z_3",
            "s_w_1",
        ],
        [1, 2, 0, 4, 3, 6, 5],
        {"answer_x_1", "answer_z_3"},
    )
)


def test_turn_cases_are_permutations() -> None:
    for turns, rankings, _ in TURN_CASES:
        assert sorted(rankings) == list(range(len(turns)))


@pytest.mark.parametrize(("turns", "rankings", "correct"), TURN_CASES)
def test_turn_to_session_parity(
    turns: list[str], rankings: list[int], correct: set[str]
) -> None:
    turn_ranking = [turns[i] for i in rankings]
    gold_sessions = {strip_turn(t) for t in correct}
    ours = session_metrics_from_turns(gold_sessions, turn_ranking, strip_turn, KS)
    for k in KS:
        any_, all_, nd = ref_eval_turn2session(rankings, correct, turns, k)
        assert ours[f"recall_any@{k}"] == any_, k
        assert ours[f"recall_all@{k}"] == all_, k
        assert ours[f"ndcg_any@{k}"] == pytest.approx(nd, abs=1e-12), k
