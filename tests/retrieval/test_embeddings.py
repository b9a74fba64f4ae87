"""Embedding backends and the caching encoder, on a tiny local model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engram_eval.retrieval.cache import VectorCache
from engram_eval.retrieval.embeddings import CachedEncoder, make_embedder
from engram_eval.retrieval.models import resolve_model

BACKENDS = ["sentence_transformers", "flag_embedding"]
TEXTS = [
    "what breed is the puppy i adopted",
    "i volunteer at the shelter four hours a week",
    "my sister's wedding cake comes from a bakery",
]


@pytest.fixture(scope="module")
def emb_ref(tiny_embedding_model: str):  # type: ignore[no-untyped-def]
    return resolve_model(tiny_embedding_model, "embedding")


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_returns_normalised_float32(emb_ref, backend: str) -> None:  # type: ignore[no-untyped-def]
    emb = make_embedder(backend, emb_ref, "fp32", 8)
    vecs = emb.encode(TEXTS)
    assert vecs.dtype == np.float32
    assert vecs.shape == (len(TEXTS), 32)
    assert vecs.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    # different texts, different vectors
    assert not np.allclose(vecs[0], vecs[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_is_deterministic(emb_ref, backend: str) -> None:  # type: ignore[no-untyped-def]
    a = make_embedder(backend, emb_ref, "fp32", 8).encode(TEXTS)
    b = make_embedder(backend, emb_ref, "fp32", 2).encode(list(reversed(TEXTS)))[::-1]
    np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_runs_and_is_close_to_fp32(emb_ref, backend: str) -> None:  # type: ignore[no-untyped-def]
    fp32 = make_embedder(backend, emb_ref, "fp32", 8).encode(TEXTS)
    bf16 = make_embedder(backend, emb_ref, "bf16", 8).encode(TEXTS)
    assert bf16.dtype == np.float32 and bf16.shape == fp32.shape
    np.testing.assert_allclose(np.linalg.norm(bf16, axis=1), 1.0, atol=1e-5)
    cos = np.sum(fp32 * bf16, axis=1)
    assert (cos > 0.99).all(), cos


class CountingEmbedder:
    """Wraps an embedder and records every batch it is asked to encode."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.ref = inner.ref
        self.precision = inner.precision
        self.calls: list[list[str]] = []

    def encode(self, texts):  # type: ignore[no-untyped-def]
        self.calls.append(list(texts))
        return self.inner.encode(texts)


def test_cached_encoder_encodes_each_distinct_text_once(emb_ref) -> None:  # type: ignore[no-untyped-def]
    inner = make_embedder("sentence_transformers", emb_ref, "fp32", 8)
    counting = CountingEmbedder(inner)
    enc = CachedEncoder(counting, None, "sentence_transformers")
    texts = [TEXTS[0], TEXTS[1], TEXTS[0], TEXTS[2], TEXTS[1]]
    out = enc.encode(texts)
    assert out.shape == (5, 32)
    assert enc.n_model == 3 and enc.n_disk == 0
    assert counting.calls == [[TEXTS[0], TEXTS[1], TEXTS[2]]]
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_array_equal(out[1], out[4])
    np.testing.assert_allclose(out[[0, 1, 3]], inner.encode(TEXTS), atol=1e-6)
    again = enc.encode([TEXTS[2], TEXTS[0]])
    assert enc.n_model == 3 and enc.n_memory == 2
    assert len(counting.calls) == 1
    np.testing.assert_array_equal(again, out[[3, 0]])
    assert enc.encode([]).shape[0] == 0


def test_cached_encoder_reuses_disk_cache_across_instances(emb_ref, tmp_path) -> None:  # type: ignore[no-untyped-def]
    first = CachedEncoder(make_embedder("sentence_transformers", emb_ref, "fp32", 8),
                          VectorCache(tmp_path), "sentence_transformers")
    a = first.encode(TEXTS)
    assert first.n_model == 3
    second = CachedEncoder(make_embedder("sentence_transformers", emb_ref, "fp32", 8),
                           VectorCache(tmp_path), "sentence_transformers")
    b = second.encode(TEXTS)
    assert second.n_model == 0 and second.n_disk == 3
    assert second.model_seconds == 0.0
    np.testing.assert_array_equal(a, b)
    assert b.dtype == np.float32


def test_cache_key_depends_on_precision_model_hash_and_backend(emb_ref) -> None:  # type: ignore[no-untyped-def]
    def key(ref, precision: str, backend: str = "sentence_transformers") -> str:  # type: ignore[no-untyped-def]
        return CachedEncoder(make_embedder(backend, ref, precision, 8), None, backend).key("x")

    base = key(emb_ref, "fp32")
    assert key(emb_ref, "fp32") == base
    assert key(emb_ref, "bf16") != base
    other_weights = dataclasses.replace(emb_ref, sha256="0" * 64)
    assert key(other_weights, "fp32") != base
    assert key(emb_ref, "fp32", "flag_embedding") != base
    enc = CachedEncoder(make_embedder("sentence_transformers", emb_ref, "fp32", 8), None)
    assert enc.key("x") != enc.key("y")


def test_flag_backend_follows_the_declared_pooling(tmp_path) -> None:
    from engram_eval.retrieval.embeddings import pooling_method

    assert pooling_method(str(tmp_path)) == "cls"  # BGE-style directory: no pooling file
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    assert pooling_method(str(tmp_path)) == "mean"
    (tmp_path / "1_Pooling" / "config.json").write_text(
        '{"pooling_mode_mean_tokens": false, "pooling_mode_cls_token": true}')
    assert pooling_method(str(tmp_path)) == "cls"


def test_both_backends_agree_on_the_bundled_mean_pooled_model() -> None:
    """all-MiniLM-L6-v2 declares mean pooling; FlagModel must not fall back to CLS."""
    import numpy as np

    from engram_eval.retrieval.embeddings import make_embedder
    from engram_eval.retrieval.models import resolve_model

    ref = resolve_model("all-MiniLM-L6-v2", "embedding")
    texts = ["the dog ran home", "a cat sat on the mat"]
    a = make_embedder("sentence_transformers", ref, "fp32", 8).encode(texts)
    b = make_embedder("flag_embedding", ref, "fp32", 8).encode(texts)
    assert np.allclose((a * b).sum(axis=1), 1.0, atol=1e-4)
