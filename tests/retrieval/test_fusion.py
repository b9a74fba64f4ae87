"""Fusion functions (engram_eval.retrieval.fusion) on hand-computed cases, no retriever."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engram_eval.retrieval.fusion import (
    Signal,
    convex,
    fuse,
    normalise,
    order,
    prior_scores,
    rrf,
    signal_ranks,
    temporal_scores,
)

A = Signal.of([3.0, 1.0, 2.0])  # every session informative
B = Signal.of([0.0, 5.0, 5.0], [False, True, True])  # a tie, one session uninformative
CONST = Signal.of([4.0, 4.0, 4.0])  # constant over the corpus
NONE = Signal.of([0.0, 0.0, 0.0], [False, False, False])  # no informative session


def test_signal_ranks_ties_by_corpus_order() -> None:
    assert signal_ranks(A.scores, A.informative) == [1, 3, 2]
    assert signal_ranks(B.scores, B.informative) == [None, 1, 2]


def test_rrf_by_hand() -> None:
    fused = rrf({"a": A, "b": B}, {"a": 1.0, "b": 2.0}, k=1.0)
    want = [1 / (1 + 1), 1 / (1 + 3) + 2 / (1 + 1), 1 / (1 + 2) + 2 / (1 + 2)]
    assert fused.tolist() == pytest.approx(want, rel=1e-15)
    # k = 0 is allowed (ranks start at 1); weight 0 and an uninformative signal add nothing
    fused0 = rrf({"a": A, "b": B, "n": NONE}, {"a": 1.0, "b": 0.0, "n": 3.0}, k=0.0)
    assert fused0.tolist() == pytest.approx([1 / 1, 1 / 3, 1 / 2])
    with pytest.raises(ValueError):
        rrf({"a": A}, {"a": 1.0}, k=-1.0)


def test_minmax_by_hand() -> None:
    assert normalise(A, "minmax").tolist() == [1.0, 0.0, 0.5]
    # informative only for some sessions, all equal: informative 1, the rest 0
    assert normalise(B, "minmax").tolist() == [0.0, 1.0, 1.0]
    fused = convex({"a": A, "b": B}, {"a": 1.0, "b": 2.0}, "minmax")
    assert fused.tolist() == pytest.approx([(1 * 1 + 2 * 0) / 3, (1 * 0 + 2 * 1) / 3,
                                            (1 * 0.5 + 2 * 1) / 3], rel=1e-15)


def test_uninformative_session_gets_the_floor() -> None:
    s = Signal.of([0.0, 2.0, 4.0, 9.0], [False, True, True, True])
    assert normalise(s, "minmax").tolist() == pytest.approx([0.0, 0.0, 2 / 7, 1.0])
    sd = math.sqrt(((2 - 5) ** 2 + (4 - 5) ** 2 + (9 - 5) ** 2) / 3)
    z = normalise(s, "zscore")
    assert z.tolist() == pytest.approx([-3 / sd, -3 / sd, -1 / sd, 4 / sd], rel=1e-12)


def test_zscore_by_hand() -> None:
    sd = math.sqrt(((3 - 2) ** 2 + (1 - 2) ** 2 + 0) / 3)
    assert normalise(A, "zscore").tolist() == pytest.approx([1 / sd, -1 / sd, 0.0], rel=1e-12)
    fused = convex({"a": A, "b": B}, {"a": 1.0, "b": 1.0}, "zscore")
    assert fused.tolist() == pytest.approx([(1 / sd + 0) / 2, (-1 / sd + 1) / 2, (0 + 1) / 2])


def test_constant_and_empty_signals_are_dropped() -> None:
    for method in ("minmax", "zscore"):
        assert normalise(CONST, method) is None
        assert normalise(NONE, method) is None
        base = convex({"a": A}, {"a": 1.0}, method)
        with_const = convex({"a": A, "c": CONST, "n": NONE}, {"a": 1.0, "c": 5.0, "n": 2.0},
                            method)
        # they contribute 0; only the denominator (sum of weights) changes
        assert with_const.tolist() == pytest.approx((base * 1.0 / 8.0).tolist())
        assert order(with_const) == order(base)


def test_missing_signal_and_unknown_weights_are_ignored() -> None:
    a = convex({"a": A}, {"a": 1.0, "bm25_assistant": 4.0}, "minmax")
    assert a.tolist() == normalise(A, "minmax").tolist()
    r = rrf({"a": A}, {"a": 1.0, "bm25_assistant": 4.0}, k=60.0)
    assert r.tolist() == pytest.approx([1 / 61, 1 / 63, 1 / 62])


def test_fusion_order_does_not_depend_on_mapping_order() -> None:
    s1 = {"dense": Signal.of([0.1, 0.7, 0.3]), "bm25_user": Signal.of([1.3, 0.0, 2.9])}
    s2 = dict(reversed(list(s1.items())))
    w = {"dense": 0.7, "bm25_user": 0.3}
    for kw in ({"method": "rrf", "k": 10.0}, {"method": "convex", "normalisation": "zscore"},
               {"method": "convex", "normalisation": "minmax"}):
        assert fuse(s1, weights=w, **kw).tolist() == fuse(s2, weights=w, **kw).tolist()
    with pytest.raises(ValueError):
        fuse(s1, weights=w, method="borda")
    with pytest.raises(ValueError):
        normalise(A, "rank")


def test_temporal_step_on_non_negative_scale() -> None:
    assert prior_scores(np.array([0.2, 0.1])).tolist() == [0.2, 0.1]  # unchanged
    assert prior_scores(np.array([-1.0, 0.5])).tolist() == [0.0, 1.5]  # shifted to >= 0
    # a boost never lowers a session, even from a negative fused score
    fused = np.array([-0.5, -1.0, 0.25])
    t = temporal_scores(fused, np.array([1.0, 3.0, 1.0]))
    assert t.tolist() == [0.5, 0.0, 1.25]
    t2 = temporal_scores(fused, np.array([3.0, 1.0, 1.0]))
    assert t2.tolist() == [1.5, 0.0, 1.25] and order(t2) == [0, 2, 1]


def test_order_ties_by_corpus_order() -> None:
    assert order([1.0, 2.0, 2.0]) == [1, 2, 0]
