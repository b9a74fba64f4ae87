"""``benchmarks/longmemeval/run.py --rerank`` end to end in a subprocess, on tiny models."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_models import offline_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "longmemeval" / "run.py"
DATASET = ROOT / "fixtures" / "longmemeval_tiny.json"


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli-cache")


@pytest.mark.parametrize("backend", ["sentence_transformers", "flag_embedding"])
def test_rerank_run_with_local_models(backend: str, tiny_cross_encoder: str,
                                      tiny_embedding_model: str, shared_cache: Path,
                                      tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    cmd = [sys.executable, str(SCRIPT), str(DATASET), "--rerank",
           "--reranker-model", tiny_cross_encoder, "--embedding-model", tiny_embedding_model,
           "--cache-dir", str(shared_cache), "--output", str(out),
           "--reranker-backend", backend]
    proc = subprocess.run(cmd, cwd=ROOT, env=offline_env(tmp_path), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12
    meta = json.loads(Path(str(out) + ".metadata.json").read_text())
    roles = {m["role"]: m for m in meta["models"]}
    assert set(roles) == {"embedding", "embedding-onnx", "reranker"}  # onnx: the default
    assert "model.onnx" in roles["embedding-onnx"]["files_sha256"]
    assert roles["reranker"]["source"] == "path"
    assert "model.safetensors" in roles["reranker"]["files_sha256"]


def test_rerank_model_missing_stops_before_output(tiny_embedding_model: str,
                                                  tmp_path: Path) -> None:
    """A named cross-encoder that is neither shipped, nor a directory, nor in the Hugging Face
    cache (a BGE model on a machine that never downloaded it)."""
    out = tmp_path / "o.jsonl"
    cmd = [sys.executable, str(SCRIPT), str(DATASET), "--rerank",
           "--reranker-model", "BAAI/bge-reranker-base",
           "--embedding-model", tiny_embedding_model,
           "--cache-dir", str(tmp_path / "cache"), "--output", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=offline_env(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    assert not out.exists()
    assert not Path(str(out) + ".metadata.json").exists()
    msg = proc.stderr + proc.stdout
    assert "BAAI/bge-reranker-base" in msg
    assert "--reranker-model" in msg  # how to provide it: a local directory ...
    assert "Hugging Face cache" in msg  # ... or the HF cache
    assert "Traceback" not in msg
