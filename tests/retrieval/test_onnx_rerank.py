"""The ONNX Runtime cross-encoder backend (export, caching, parity with
sentence-transformers, int8, a CLI run) on the tiny local cross-encoder; nothing is
downloaded.

Tolerances: an fp32 export computes the same function as torch, so raw logits agree within
1e-4; int8 (dynamic quantisation) perturbs them, so it is held to a Pearson correlation
>= 0.95 with fp32 over the test pairs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_models import offline_env

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from engram_eval.errors import ConfigError  # noqa: E402
from engram_eval.retrieval import onnx_export as ox  # noqa: E402
from engram_eval.retrieval.hybrid import HybridRetriever  # noqa: E402
from engram_eval.retrieval.models import hash_model_dir, resolve_model  # noqa: E402
from engram_eval.retrieval.rerank import OnnxCrossEncoder, make_cross_encoder  # noqa: E402
from engram_eval.retrieval.settings import RetrievalSettings, describe_settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "longmemeval" / "run.py"
DATASET = ROOT / "fixtures" / "longmemeval_tiny.json"
MAX_LENGTH = 64
FP32_ATOL = 1e-4
INT8_MIN_CORRELATION = 0.95
LONG = " ".join(["i volunteer at the shelter four hours a week with my golden retriever"] * 12)
PAIRS = [
    ("what breed is the puppy i adopted", "i adopted a border collie puppy from the shelter"),
    ("a", "b"),  # short
    ("which pan is best", LONG),  # the document is truncated
    (LONG, "my sister bought a wedding cake at the bakery"),  # the question is truncated
    (LONG, LONG),  # both
    ("denver concert trip", "i bought concert tickets and a hotel for the denver trip"),
    ("what podcast do i listen to", "we listen to music podcasts on the train commute"),
    ("which pan is best", "the cast iron skillet is the best pan for a steak"),
]


@pytest.fixture(scope="module")
def src(tiny_cross_encoder: str):  # type: ignore[no-untyped-def]
    return resolve_model(tiny_cross_encoder, "reranker")


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-rerank-cache")


@pytest.fixture(scope="module")
def torch_scores(src) -> list[float]:  # type: ignore[no-untyped-def]
    return make_cross_encoder("sentence_transformers", src, MAX_LENGTH).raw_scores(PAIRS)


def test_fp32_matches_sentence_transformers(src, cache_root: Path,  # type: ignore[no-untyped-def]
                                            torch_scores: list[float]) -> None:
    ref = ox.prepare_reranker_backend("onnx", src, "fp32", cache_root)
    assert ref is not None and ref.role == "reranker-onnx"
    assert "model.onnx" in ref.files_sha256 and "tokenizer.json" in ref.files_sha256
    assert Path(ref.path).parent.name == src.sha256  # keyed by the source model hash
    # batch size 3 over 8 pairs of mixed lengths: sorting and order restoring are exercised
    onnx = make_cross_encoder("onnx", src, MAX_LENGTH, 3, onnx_ref=ref)
    assert isinstance(onnx, OnnxCrossEncoder)
    got = onnx.raw_scores(PAIRS)
    assert all(isinstance(x, float) for x in got)
    np.testing.assert_allclose(got, torch_scores, rtol=0, atol=FP32_ATOL)
    assert len(set(np.round(got, 3))) > 4  # the tiny model tells the pairs apart
    # the long pairs really were truncated to the limit, the short one was not
    lengths = [len(onnx._tok.encode(q, d).ids) for q, d in PAIRS]
    assert lengths[2] == lengths[3] == lengths[4] == MAX_LENGTH
    assert lengths[1] == 5  # [CLS] a [SEP] b [SEP]
    assert onnx.raw_scores([]) == []
    # one pair at a time gives the same logits as a padded batch
    single = [onnx.raw_scores([p])[0] for p in PAIRS]
    np.testing.assert_allclose(single, got, rtol=0, atol=FP32_ATOL)


def test_int8_runs_and_correlates(src, cache_root: Path,  # type: ignore[no-untyped-def]
                                  torch_scores: list[float]) -> None:
    ref = ox.prepare_reranker_backend("onnx", src, "int8", cache_root)
    assert ref is not None and ref.role == "reranker-onnx"
    assert f"int8-{ox.int8_scheme()}" in ref.name
    fp32 = ox.export_reranker_onnx(src, "fp32", cache_root)
    assert ref.sha256 != fp32.sha256
    got = make_cross_encoder("onnx", src, MAX_LENGTH, 4, onnx_ref=ref).raw_scores(PAIRS)
    assert len(got) == len(PAIRS) and np.isfinite(got).all()
    assert np.corrcoef(got, torch_scores)[0, 1] >= INT8_MIN_CORRELATION


def test_export_is_cached(src, cache_root: Path) -> None:  # type: ignore[no-untyped-def]
    first = ox.prepare_reranker_backend("onnx", src, "fp32", cache_root)
    assert first is not None
    model = Path(first.path) / "model.onnx"
    mtime = model.stat().st_mtime_ns
    again = ox.prepare_reranker_backend("onnx", src, "fp32", cache_root)
    assert again == first and again.path == first.path
    assert model.stat().st_mtime_ns == mtime  # not re-exported
    assert (hash_model_dir(Path(first.path))) == (first.files_sha256, first.sha256)
    info = json.loads((Path(first.path) / "export.json").read_text())
    assert info["source_sha256"] == src.sha256
    assert info["task"] == "sequence-classification"
    assert info["recipe"]["precision"] == "fp32"
    assert info["recipe"]["task"] == "sequence-classification"
    assert not [p for p in Path(first.path).parent.iterdir() if p.name.startswith(".")]
    # a cross-encoder export never shares a directory with an embedding export of a model
    assert ox.export_dir(src, "fp32", cache_root) != Path(first.path)


def test_settings_and_retriever_wiring(tiny_cross_encoder: str, cache_root: Path) -> None:
    # the defaults are the shipped reranker's stored form (ONNX int8)
    assert RetrievalSettings().reranker_backend == "onnx"
    assert RetrievalSettings().reranker_precision == "int8"
    with pytest.raises(ConfigError, match="reranker_precision"):
        RetrievalSettings(reranker_precision="bf16")
    on = RetrievalSettings(rerank=True, reranker_backend="onnx", reranker_precision="int8")
    assert describe_settings(on)["rerank"]["reranker_precision"] == "int8"
    off = RetrievalSettings(rerank=False, people_overrides={})
    assert "reranker_precision" not in describe_settings(off)["rerank"]
    torch = dict(reranker_backend="sentence_transformers", reranker_precision="fp32")
    with pytest.raises(ConfigError, match="reranker_precision=int8"):
        HybridRetriever(RetrievalSettings(rerank=True, reranker_model=tiny_cross_encoder,
                                          reranker_backend="sentence_transformers",
                                          reranker_precision="int8", use_dense=False, use_dense_rocchio=False,
                                          cache_dir=str(cache_root)))
    r = HybridRetriever(RetrievalSettings(rerank=True, reranker_model=tiny_cross_encoder,
                                          reranker_backend="onnx", reranker_precision="fp32",
                                          use_dense=False, use_dense_rocchio=False, cache_dir=str(cache_root)))
    assert [m.role for m in r.models()] == ["reranker", "reranker-onnx"]
    assert isinstance(r.cross_encoder().model, OnnxCrossEncoder)
    plain = HybridRetriever(RetrievalSettings(rerank=True, reranker_model=tiny_cross_encoder,
                                              use_dense=False, use_dense_rocchio=False, cache_dir=str(cache_root),
                                              **torch))
    assert [m.role for m in plain.models()] == ["reranker"]


def test_cli_run_with_onnx_reranker(tiny_cross_encoder: str, tiny_embedding_model: str,
                                    tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    cmd = [sys.executable, str(SCRIPT), str(DATASET), "--rerank",
           "--reranker-backend", "onnx", "--reranker-model", tiny_cross_encoder,
           "--embedding-model", tiny_embedding_model, "--rerank-max-length", "128",
           "--cache-dir", str(tmp_path / "cache"), "--output", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=offline_env(tmp_path), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12
    assert any(t.get("reranked") for r in rows for t in r["trace"]["sessions"])
    meta = json.loads(Path(str(out) + ".metadata.json").read_text())
    roles = {m["role"]: m for m in meta["models"]}
    assert set(roles) == {"embedding", "embedding-onnx", "reranker", "reranker-onnx"}
    assert "model.onnx" in roles["reranker-onnx"]["files_sha256"]
    assert "cross-fp32" in roles["reranker-onnx"]["name"]
    assert meta["config"]["reranker_backend"] == "onnx"
    assert meta["config"]["reranker_precision"] == "fp32"
