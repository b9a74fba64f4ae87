"""Cross-encoder backends, score conversion and caching (engram_eval.retrieval.rerank)."""

from __future__ import annotations

import math

import pytest

from engram_eval.retrieval.cache import VectorCache
from engram_eval.retrieval.models import resolve_model
from engram_eval.retrieval.rerank import CachedCrossEncoder, make_cross_encoder, sigmoid

PAIRS = [
    ("what breed is the puppy i adopted", "i adopted a border collie puppy last month"),
    ("what breed is the puppy i adopted", "the weather in denver was cold"),
    ("how many hours do i volunteer", "i volunteer at the shelter six hours a week"),
    ("what did i buy", " ".join(["i bought a cast iron skillet and a coffee machine."] * 80)),
]
EMPTY_DOC = ("what breed is my cat", "")


def test_sigmoid_values_and_stability() -> None:
    assert sigmoid(0.0) == 0.5
    assert sigmoid(2.0) == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert sigmoid(-2.0) == pytest.approx(1 - sigmoid(2.0))
    assert sigmoid(1000.0) == 1.0
    assert sigmoid(-1000.0) == 0.0  # no OverflowError
    assert 0.0 < sigmoid(-700.0) < 1e-300
    assert sigmoid(-745.0) >= 0.0
    xs = [-50.0, -5.0, -0.1, 0.0, 0.1, 5.0, 50.0]
    ys = [sigmoid(x) for x in xs]
    assert ys == sorted(ys)
    assert all(0.0 <= y <= 1.0 for y in ys)


@pytest.fixture(scope="module")
def ce_ref(tiny_cross_encoder: str):  # type: ignore[no-untyped-def]
    return resolve_model(tiny_cross_encoder, "reranker")


@pytest.fixture(scope="module")
def backend_scores(ce_ref) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    return {b: make_cross_encoder(b, ce_ref, 512).raw_scores(PAIRS)
            for b in ("sentence_transformers", "flag_embedding")}


@pytest.mark.parametrize("backend", ["sentence_transformers", "flag_embedding"])
def test_backend_raw_scores(backend_scores, backend: str) -> None:  # type: ignore[no-untyped-def]
    scores = backend_scores[backend]
    assert len(scores) == len(PAIRS)
    assert all(isinstance(s, float) and math.isfinite(s) for s in scores)
    assert len(set(scores)) > 1  # the tiny model tells inputs apart


@pytest.mark.parametrize("backend", ["sentence_transformers", "flag_embedding"])
def test_backend_single_pair_and_empty(ce_ref, backend_scores, backend: str) -> None:  # type: ignore[no-untyped-def]
    ce = make_cross_encoder(backend, ce_ref, 512)
    assert ce.raw_scores([]) == []
    one = ce.raw_scores(PAIRS[:1])
    assert len(one) == 1
    assert one[0] == pytest.approx(backend_scores[backend][0], abs=1e-5)


def test_backends_agree(backend_scores) -> None:  # type: ignore[no-untyped-def]
    """Same model, same pairs: the two backends give the same logits (the last pair is
    longer than max_length, so both truncate the document the same way)."""
    st, fe = backend_scores["sentence_transformers"], backend_scores["flag_embedding"]
    for a, b in zip(st, fe, strict=True):
        assert abs(a - b) < 1e-3, (st, fe)


def test_backends_agree_at_a_short_max_length(ce_ref) -> None:  # type: ignore[no-untyped-def]
    st = make_cross_encoder("sentence_transformers", ce_ref, 32).raw_scores(PAIRS)
    fe = make_cross_encoder("flag_embedding", ce_ref, 32).raw_scores(PAIRS)
    for a, b in zip(st, fe, strict=True):
        assert abs(a - b) < 1e-3, (st, fe)


@pytest.mark.xfail(strict=True, reason="known backend difference: for an empty document "
                   "CrossEncoder encodes [CLS] q [SEP] [SEP], FlagReranker [CLS] q [SEP]")
def test_backends_agree_on_an_empty_document(ce_ref) -> None:  # type: ignore[no-untyped-def]
    st = make_cross_encoder("sentence_transformers", ce_ref, 512).raw_scores([EMPTY_DOC])
    fe = make_cross_encoder("flag_embedding", ce_ref, 512).raw_scores([EMPTY_DOC])
    assert abs(st[0] - fe[0]) < 1e-3


def test_unknown_backend(ce_ref) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="unknown reranker backend"):
        make_cross_encoder("tensorrt", ce_ref, 512)


class CountingModel:
    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.ref = inner.ref
        self.calls: list[list[tuple[str, str]]] = []

    def raw_scores(self, pairs):  # type: ignore[no-untyped-def]
        self.calls.append(list(pairs))
        return self.inner.raw_scores(pairs)


def test_cached_cross_encoder_memory_and_disk(ce_ref, backend_scores, tmp_path) -> None:  # type: ignore[no-untyped-def]
    inner = make_cross_encoder("sentence_transformers", ce_ref, 512)
    model = CountingModel(inner)
    cached = CachedCrossEncoder(model, VectorCache(tmp_path), "sentence_transformers", 512)
    pairs = [PAIRS[0], PAIRS[1], PAIRS[0]]
    out = cached.raw_scores(pairs)
    assert out[0] == out[2]
    assert out == pytest.approx([backend_scores["sentence_transformers"][i] for i in (0, 1, 0)],
                                abs=1e-5)
    assert cached.n_model == 2 and model.calls == [[PAIRS[0], PAIRS[1]]]
    again = cached.raw_scores([PAIRS[1], PAIRS[2]])
    assert model.calls[-1] == [PAIRS[2]]
    assert cached.n_model == 3
    assert again[0] == out[1]

    # a second instance on the same directory scores nothing anew
    model2 = CountingModel(inner)
    cached2 = CachedCrossEncoder(model2, VectorCache(tmp_path), "sentence_transformers", 512)
    assert cached2.raw_scores(PAIRS[:3]) == pytest.approx(out[:2] + again[1:])
    assert model2.calls == [] and cached2.n_model == 0 and cached2.n_cached == 3

    # another max_length or backend is another key
    model3 = CountingModel(inner)
    cached3 = CachedCrossEncoder(model3, VectorCache(tmp_path), "sentence_transformers", 256)
    cached3.raw_scores(PAIRS[:1])
    assert cached3.n_model == 1
    model4 = CountingModel(inner)
    cached4 = CachedCrossEncoder(model4, VectorCache(tmp_path), "flag_embedding", 512)
    cached4.raw_scores(PAIRS[:1])
    assert cached4.n_model == 1


def test_cached_cross_encoder_without_disk(ce_ref) -> None:  # type: ignore[no-untyped-def]
    model = CountingModel(make_cross_encoder("sentence_transformers", ce_ref, 512))
    cached = CachedCrossEncoder(model, None, "sentence_transformers", 512)
    a = cached.raw_scores(PAIRS)
    b = cached.raw_scores(list(reversed(PAIRS)))
    assert b == list(reversed(a))
    assert len(model.calls) == 1 and cached.n_model == len(PAIRS)
    assert cached.raw_scores([]) == []
