"""Prior-leader coverage (engram_eval.retrieval.coverage.preserve_prior_leader)."""

from __future__ import annotations

import pytest

from engram_eval.retrieval.coverage import preserve_prior_leader

RANKING = ["a", "b", "c", "d", "e", "f", "g"]


@pytest.mark.parametrize("leader", ["a", "c", "e"])
def test_leader_already_inside_window_is_unchanged(leader: str) -> None:
    out, moved = preserve_prior_leader(RANKING, leader, 5)
    assert out == RANKING and moved is False


def test_leader_outside_window_moves_to_last_slot() -> None:
    out, moved = preserve_prior_leader(RANKING, "f", 5)
    assert moved is True
    assert out == ["a", "b", "c", "d", "f", "e", "g"]
    out, moved = preserve_prior_leader(RANKING, "f", 3)
    assert out == ["a", "b", "f", "c", "d", "e", "g"] and moved


def test_leader_last() -> None:
    out, moved = preserve_prior_leader(RANKING, "g", 2)
    assert out == ["a", "g", "b", "c", "d", "e", "f"] and moved
    assert out[0] == "a"  # the rerank winner keeps rank 1


def test_result_k_one_or_less_changes_nothing() -> None:
    for k in (1, 0):
        out, moved = preserve_prior_leader(RANKING, "g", k)
        assert out == RANKING and moved is False


def test_short_list_window_larger_than_ranking() -> None:
    out, moved = preserve_prior_leader(["x", "y", "z"], "z", 5)
    assert out == ["x", "y", "z"] and moved is False
    out, moved = preserve_prior_leader(["x"], "x", 5)
    assert out == ["x"] and moved is False
    out, moved = preserve_prior_leader([], "x", 5)
    assert out == [] and moved is False


def test_leader_not_in_ranking_and_input_untouched() -> None:
    original = list(RANKING)
    out, moved = preserve_prior_leader(RANKING, "zz", 3)
    assert out == RANKING and moved is False
    out, _ = preserve_prior_leader(RANKING, "g", 3)
    assert RANKING == original and out is not RANKING  # returns a new list
    out, _ = preserve_prior_leader(tuple(RANKING), "g", 3)
    assert isinstance(out, list) and sorted(out) == sorted(RANKING)


def test_works_with_indices() -> None:
    out, moved = preserve_prior_leader([3, 1, 4, 0, 2], 0, 2)
    assert out == [3, 0, 1, 4, 2] and moved
