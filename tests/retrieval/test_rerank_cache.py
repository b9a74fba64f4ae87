"""The cross-encoder score cache: reused where a pair's score is the pair's alone, never where
the score depends on the batch it was computed in (an int8 graph's dynamic quantisation)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from engram_eval.retrieval.cache import VectorCache
from engram_eval.retrieval.rerank import CachedCrossEncoder


class BatchModel:
    """Scores a pair by its text length plus the size of the batch it came in: like an int8
    graph, the same pair scores differently in another batch."""

    def __init__(self) -> None:
        self.ref = SimpleNamespace(sha256="0" * 64)
        self.calls: list[int] = []

    def raw_scores(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        self.calls.append(len(pairs))
        return [len(q) + len(d) + 0.01 * len(pairs) for q, d in pairs]


PAIRS_A = [("q", "one"), ("q", "two"), ("q", "three")]
PAIRS_B = [("q", "one")]


def fresh(pairs: Sequence[tuple[str, str]]) -> list[float]:
    return BatchModel().raw_scores(pairs)


def test_a_batch_dependent_model_scores_every_call_afresh(tmp_path: Path) -> None:
    model = BatchModel()
    ce = CachedCrossEncoder(model, VectorCache(tmp_path), "onnx", 128, batch_dependent=True)
    ce.raw_scores(PAIRS_A)
    # the pair scored before, now alone: what a fresh run (verify --rerun) computes
    assert ce.raw_scores(PAIRS_B) == fresh(PAIRS_B)
    assert model.calls == [len(PAIRS_A), len(PAIRS_B)]
    # and a later run over the same cache directory does not read another run's batch
    again = CachedCrossEncoder(BatchModel(), VectorCache(tmp_path), "onnx", 128,
                               batch_dependent=True)
    assert again.raw_scores(PAIRS_B) == fresh(PAIRS_B)
    assert again.n_cached == 0


def test_a_pair_only_model_reuses_its_cache(tmp_path: Path) -> None:
    model = BatchModel()
    ce = CachedCrossEncoder(model, VectorCache(tmp_path), "onnx", 128)
    first = ce.raw_scores(PAIRS_A)
    assert ce.raw_scores(PAIRS_B) == first[:1]  # from memory, as computed in the batch of 3
    later = CachedCrossEncoder(BatchModel(), VectorCache(tmp_path), "onnx", 128)
    assert later.raw_scores(PAIRS_B) == first[:1]  # from disk
    assert later.n_cached == 1 and later.n_model == 0
