"""The ONNX Runtime embedding backend (export, int8 scheme, caching, ranking parity with
torch) on the tiny local model; nothing is downloaded.

Tolerances: an fp32 export computes the same function as torch, so vectors agree to
cosine >= 1 - 1e-4 and rankings are identical; int8 (dynamic quantisation) perturbs
vectors, so it is held to cosine >= 0.9 on the tiny random model and to the same top
document on a fixture whose relevant document is lexically obvious.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from engram_eval.data.records import Question, Session, Turn  # noqa: E402
from engram_eval.errors import ConfigError  # noqa: E402
from engram_eval.retrieval import onnx_export as ox  # noqa: E402
from engram_eval.retrieval.embeddings import make_embedder  # noqa: E402
from engram_eval.retrieval.models import hash_model_dir, resolve_model  # noqa: E402
from engram_eval.runs.config import RunConfig  # noqa: E402

FP32_MIN_COSINE = 1 - 1e-4
INT8_MIN_COSINE = 0.9
DOCS = [
    "i adopted a border collie puppy from the shelter",
    "my sister bought a wedding cake at the bakery",
    "we listen to music podcasts on the train commute",
    "the cast iron skillet is the best pan for a steak",
    "i bought concert tickets and a hotel for the denver trip",
    "i volunteer at the shelter four hours a week",
]
QUERIES = ["what breed is the puppy i adopted", "which pan is best", "denver concert trip"]


@pytest.fixture(scope="module")
def src(tiny_embedding_model: str):  # type: ignore[no-untyped-def]
    return resolve_model(tiny_embedding_model, "embedding")


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


def _rank(emb, queries, docs):  # type: ignore[no-untyped-def]
    q = emb.encode(queries)
    d = emb.encode(docs)
    return [list(np.argsort(-(d @ v), kind="stable")) for v in q]


def test_fp32_export_matches_torch(src, cache_root: Path) -> None:  # type: ignore[no-untyped-def]
    ref = ox.export_onnx(src, "fp32", cache_root)
    assert ref.role == "embedding-onnx" and "model.onnx" in ref.files_sha256
    assert Path(ref.path).parent.name == src.sha256  # keyed by the source model hash
    torch_emb = make_embedder("sentence_transformers", src, "fp32", 4)
    onnx_emb = make_embedder("onnx", src, "fp32", 4, onnx_ref=ref)
    a, b = torch_emb.encode(DOCS + QUERIES), onnx_emb.encode(DOCS + QUERIES)
    assert b.dtype == np.float32 and b.shape == a.shape
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    assert (np.sum(a * b, axis=1) >= FP32_MIN_COSINE).all()
    assert _rank(torch_emb, QUERIES, DOCS) == _rank(onnx_emb, QUERIES, DOCS)


def test_export_is_cached_and_hashed(src, cache_root: Path) -> None:  # type: ignore[no-untyped-def]
    first = ox.export_onnx(src, "fp32", cache_root)
    mtime = (Path(first.path) / "model.onnx").stat().st_mtime_ns
    again = ox.export_onnx(src, "fp32", cache_root)
    assert again == first
    assert (Path(first.path) / "model.onnx").stat().st_mtime_ns == mtime  # not re-exported
    files, combined = hash_model_dir(Path(first.path))
    assert (files, combined) == (first.files_sha256, first.sha256)
    info = json.loads((Path(first.path) / "export.json").read_text())
    assert info["source_sha256"] == src.sha256 and info["recipe"]["precision"] == "fp32"
    assert not [p for p in Path(first.path).parent.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("scheme", sorted(ox.QUANT_SETTINGS))
def test_int8_variants_close_to_fp32(src, cache_root: Path, scheme: str) -> None:  # type: ignore[no-untyped-def]
    fp = make_embedder("onnx", src, "fp32", 4, onnx_ref=ox.export_onnx(src, "fp32", cache_root))
    ref = ox.export_onnx(src, "int8", cache_root, scheme=scheme)
    assert Path(ref.path).name.startswith(f"int8-{scheme}-")
    q = make_embedder("onnx", src, "int8", 4, onnx_ref=ref)
    a, b = fp.encode(DOCS + QUERIES), q.encode(DOCS + QUERIES)
    assert (np.sum(a * b, axis=1) >= INT8_MIN_COSINE).all()
    info = json.loads((Path(ref.path) / "export.json").read_text())
    assert info["recipe"]["int8_scheme"] == scheme
    assert info["recipe"]["quantization"]["weight_type"] == ox.QUANT_SETTINGS[scheme]["weight_type"]
    assert ref.sha256 != ox.export_onnx(src, "fp32", cache_root).sha256


def test_int8_scheme_follows_cpu_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENGRAM_EVAL_INT8_SCHEME", raising=False)
    assert ox.int8_scheme(frozenset({"avx2", "avx512_vnni"})) == "vnni"
    assert ox.int8_scheme(frozenset({"avx2", "avx_vnni"})) == "vnni"
    assert ox.int8_scheme(frozenset({"avx2", "fma"})) == "avx2"
    assert ox.int8_scheme(frozenset({"sse4_2"})) == "generic"
    monkeypatch.setenv("ENGRAM_EVAL_INT8_SCHEME", "generic")
    assert ox.int8_scheme(frozenset({"avx512_vnni"})) == "generic"
    monkeypatch.setenv("ENGRAM_EVAL_INT8_SCHEME", "bogus")
    with pytest.raises(ConfigError, match="ENGRAM_EVAL_INT8_SCHEME"):
        ox.int8_scheme()


def test_int8_needs_onnx_backend(src) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="int8"):
        ox.prepare_embedding_backend("sentence_transformers", src, "int8")
    with pytest.raises(ConfigError, match="int8"):
        make_embedder("sentence_transformers", src, "int8", 4)
    with pytest.raises(ConfigError, match="onnx backend supports"):
        ox.export_onnx(src, "bf16")


def _session(sid: str, text: str) -> Session:
    return Session(sid, "2023/05/01 (Mon) 10:00",
                   (Turn("user", text, 0), Turn("assistant", "ok", 1)))


def test_hybrid_onnx_records_export_and_ranks_like_torch(src, tiny_embedding_model: str,
                                                         cache_root: Path) -> None:  # type: ignore[no-untyped-def]
    from engram_eval.retrieval.hybrid import HybridRetriever

    sessions = [_session(f"s{i}", d) for i, d in enumerate(DOCS)]
    q = Question("q1", "single-session-user", QUERIES[0], "golden", "2023/06/01 (Thu) 10:00",
                 tuple(sessions), ("s0",))
    common = dict(embedding_model=tiny_embedding_model, use_bm25_user=False,
                  use_bm25_assistant=False, temporal=False, cache_dir=str(cache_root),
                  use_cache=False, rerank=False)
    rankings = {}
    for backend in ("sentence_transformers", "onnx"):
        r = HybridRetriever(RunConfig(embedding_backend=backend, **common))
        roles = [m.role for m in r.models()]
        # the chat encoder (and its export under onnx), then people's chats' shipped encoder
        assert roles == (["embedding", "embedding-onnx"] if backend == "onnx"
                         else ["embedding"]) + ["embedding"]
        r.index(sessions)
        rankings[backend] = r.rank(q)
    a, b = rankings["sentence_transformers"], rankings["onnx"]
    assert a.session_ids == b.session_ids
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-4)


LONG = " ".join(DOCS * 3)  # a longer text: its batch pads the short ones and shifts the int8 scale


def test_int8_vector_depends_on_its_batch_unless_isolated(src, cache_root: Path) -> None:  # type: ignore[no-untyped-def]
    """A dynamically quantised graph scales activations per call, so a text encoded beside a
    longer one gets another vector (the defect of PROVENANCE §22); ``isolated`` encodes one
    text per call and gives the text's own vector whatever its companions."""
    from engram_eval.retrieval.embeddings import CachedEncoder

    ref = ox.export_onnx(src, "int8", cache_root)
    batched = make_embedder("onnx", src, "int8", 4, onnx_ref=ref)
    alone = batched.encode([DOCS[0]])[0]
    beside = batched.encode([DOCS[0], LONG])[0]
    assert not np.array_equal(alone, beside)
    iso = make_embedder("onnx", src, "int8", 4, onnx_ref=ref, isolated=True)
    assert np.array_equal(iso.encode([DOCS[0]])[0], iso.encode([DOCS[0], LONG])[0])
    assert np.array_equal(iso.encode([DOCS[0]])[0], alone)  # alone, a batch of one either way
    # the isolated vectors are cached under their own keys; fp32 ignores the flag
    assert CachedEncoder(iso, None, "onnx").key("x") != CachedEncoder(batched, None, "onnx").key("x")
    fp = make_embedder("onnx", src, "fp32", 4, onnx_ref=ox.export_onnx(src, "fp32", cache_root),
                       isolated=True)
    assert not fp.isolated  # type: ignore[attr-defined]


def test_batch_isolation_is_recorded_and_legacy_runs_keep_batches() -> None:
    from engram_eval.retrieval.settings import RetrievalSettings, describe_settings, recorded_values

    assert RetrievalSettings().embedding_batch_isolated is True
    assert describe_settings(RetrievalSettings())["dense"]["embedding_batch_isolated"] is True
    assert recorded_values({"config": {"embedding_precision": "int8"}})[
        "embedding_batch_isolated"] is False
