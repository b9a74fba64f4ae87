"""Dense retrieval pieces and session aggregation (engram_eval.retrieval.dense)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engram_eval.data.records import Session, Turn
from engram_eval.retrieval.dense import (
    Piece,
    fit_to_tokens,
    session_scores,
    user_pieces,
    word_windows,
)


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


# --------------------------------------------------------------------------- word_windows


def test_word_windows_short_and_empty() -> None:
    assert word_windows("", 4, 1) == []
    assert word_windows("   \n ", 4, 1) == []
    assert word_windows("a  b\nc", 4, 1) == ["a b c"]  # whitespace normalised
    assert word_windows("a b c d", 4, 1) == ["a b c d"]  # exactly size: one window


def test_word_windows_exact_splits_with_overlap() -> None:
    text = "a b c d e f g h i j"
    assert word_windows(text, 4, 1) == ["a b c d", "d e f g", "g h i j"]
    assert word_windows(text, 4, 0) == ["a b c d", "e f g h", "i j"]
    assert word_windows(text, 5, 2) == ["a b c d e", "d e f g h", "g h i j"]
    assert word_windows(text, 9, 3) == ["a b c d e f g h i", "g h i j"]


def test_word_windows_cover_every_word_with_bounded_size() -> None:
    text = words(300)
    wins = word_windows(text, 128, 16)
    assert all(len(w.split()) <= 128 for w in wins)
    seen = [x for w in wins for x in w.split()]
    assert set(seen) == set(text.split())
    # consecutive windows share exactly `overlap` words
    for a, b in zip(wins, wins[1:], strict=False):
        assert a.split()[-16:] == b.split()[:16]


# --------------------------------------------------------------------------- fit_to_tokens


def two_tokens_per_word(text: str) -> int:
    return 2 * len(text.split())


def test_fit_to_tokens_without_counter_or_within_limit() -> None:
    assert fit_to_tokens("a b c", None, 1) == ["a b c"]
    assert fit_to_tokens("a b c", two_tokens_per_word, 6) == ["a b c"]


def test_fit_to_tokens_halves_until_it_fits() -> None:
    text = "a b c d e f g h"  # 16 tokens
    assert fit_to_tokens(text, two_tokens_per_word, 8) == ["a b c d", "e f g h"]
    assert fit_to_tokens(text, two_tokens_per_word, 5) == ["a b", "c d", "e f", "g h"]
    # odd lengths: the first half is the shorter one
    assert fit_to_tokens("a b c d e", two_tokens_per_word, 6) == ["a b", "c d e"]
    assert fit_to_tokens("a b c d e", two_tokens_per_word, 4) == ["a b", "c", "d e"]


def test_fit_to_tokens_single_word_over_limit_is_kept() -> None:
    def huge(text: str) -> int:
        return 1000

    assert fit_to_tokens("supercalifragilistic", huge, 10) == ["supercalifragilistic"]
    parts = fit_to_tokens("x y", huge, 10)
    assert parts == ["x", "y"]


def test_fit_to_tokens_calls_counter_with_the_parts() -> None:
    calls: list[str] = []

    def counter(text: str) -> int:
        calls.append(text)
        return len(text.split())

    assert fit_to_tokens("a b c d", counter, 2) == ["a b", "c d"]
    assert calls == ["a b c d", "a b", "c d"]


# --------------------------------------------------------------------------- user_pieces


def session(sid: str, turns: list[tuple[str, str]]) -> Session:
    return Session(sid, "2023/05/20 (Sat) 02:21",
                   tuple(Turn(role, content, i) for i, (role, content) in enumerate(turns)))


def test_user_pieces_skip_assistant_turns() -> None:
    sessions = [
        session("s0", [("user", "hello there"), ("assistant", "assistant words here"),
                       ("user", "second user turn")]),
        session("s1", [("assistant", "only the assistant speaks")]),
        session("s2", [("user", ""), ("user", "x")]),
    ]
    pieces = user_pieces(sessions, 8, 2)
    assert pieces == [Piece(0, 0, "hello there"), Piece(0, 2, "second user turn"),
                      Piece(2, 1, "x")]
    assert not any("assistant" in p.text for p in pieces)


@pytest.mark.parametrize("counter", [None, two_tokens_per_word])
def test_user_pieces_never_truncate(counter) -> None:  # type: ignore[no-untyped-def]
    long_turn = words(300, "u")
    sessions = [
        session("s0", [("user", long_turn), ("assistant", words(50, "a")),
                       ("user", words(5, "v"))]),
        session("s1", [("user", words(130, "x"))]),
    ]
    pieces = user_pieces(sessions, 128, 16, counter, token_limit=100)
    in_pieces = {w for p in pieces for w in p.text.split()}
    for s in sessions:
        for t in s.turns:
            if t.role == "user":
                assert set(t.content.split()) <= in_pieces
    assert not any(w.startswith("a") for w in in_pieces)
    assert all(len(p.text.split()) <= 128 for p in pieces)
    if counter is not None:
        assert all(counter(p.text) <= 100 for p in pieces)
    # pieces of a turn point at that turn
    assert {(p.session_index, p.turn_index) for p in pieces} == {(0, 0), (0, 2), (1, 0)}


# --------------------------------------------------------------------------- session_scores


def unit(cos: float) -> list[float]:
    """A unit vector whose cosine with e1 is ``cos``."""
    return [cos, math.sqrt(1.0 - cos * cos), 0.0]


@pytest.fixture()
def scored_case() -> tuple[list[Piece], np.ndarray, np.ndarray]:
    # session 0: 0.9 (turn 2), 0.5 (turn 0), 0.1 (turn 4)
    # session 1: 0.2 (turn 0), 0.8 (turn 1), 0.7 (turn 3), 0.6 (turn 5)
    # session 2: no user text; session 3: one piece at -0.3
    spec = [(0, 0, 0.5), (1, 0, 0.2), (0, 2, 0.9), (1, 1, 0.8), (1, 3, 0.7), (0, 4, 0.1),
            (1, 5, 0.6), (3, 0, -0.3)]
    pieces = [Piece(s, t, f"p{k}") for k, (s, t, _) in enumerate(spec)]
    vectors = np.array([unit(c) for _, _, c in spec], dtype=np.float32)
    query = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    return pieces, vectors, query


def test_session_scores_max(scored_case) -> None:  # type: ignore[no-untyped-def]
    pieces, vectors, query = scored_case
    ds = session_scores(pieces, vectors, query, 4, "max")
    np.testing.assert_allclose(ds.scores, [0.9, 0.8, 0.0, -0.3], atol=1e-6)
    assert ds.best_turn == [2, 1, -1, 0]
    assert ds.n_pieces == [3, 4, 0, 1]
    assert ds.scores.dtype == np.float64


def test_session_scores_max_mean(scored_case) -> None:  # type: ignore[no-untyped-def]
    pieces, vectors, query = scored_case
    ds = session_scores(pieces, vectors, query, 4, "max_mean")
    expected = [
        0.8 * 0.9 + 0.2 * (0.9 + 0.5 + 0.1) / 3,  # 0.82
        0.8 * 0.8 + 0.2 * (0.8 + 0.7 + 0.6) / 3,  # 0.78 (the 0.2 piece is not in the top 3)
        0.0,
        0.8 * -0.3 + 0.2 * -0.3,  # a single piece: max_mean == max
    ]
    np.testing.assert_allclose(ds.scores, expected, atol=1e-6)
    assert ds.best_turn == [2, 1, -1, 0]


def test_session_scores_empty_and_unknown_aggregate(scored_case) -> None:  # type: ignore[no-untyped-def]
    pieces, vectors, query = scored_case
    ds = session_scores([], np.zeros((0, 3), dtype=np.float32), query, 2)
    assert ds.scores.tolist() == [0.0, 0.0] and ds.best_turn == [-1, -1]
    assert ds.n_pieces == [0, 0]
    with pytest.raises(ValueError, match="aggregate"):
        session_scores(pieces, vectors, query, 4, "mean")
