"""Executors: the Ray executor gives the local executor's rows (apart from timing).

A local Ray instance with 2 CPUs is started inside the test. Tolerance: with the dummy
retriever rows are identical; with the tiny embedding model the rankings are identical and
scores agree to 1e-6 (float32 embeddings may differ in their last bits with batch
composition, which differs between one process and two actors).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram_eval.errors import ConfigError
from engram_eval.provenance.sidecar import sidecar_path
from engram_eval.runs.config import RunConfig
from engram_eval.runs.executors import LocalExecutor, make_executor, merge_stats
from engram_eval.runs.runner import run

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_tiny.json"
#: The prefix-leak example system, importable by the Ray workers too (their PYTHONPATH).
LEAK_DIR = Path(__file__).resolve().parents[2] / "examples" / "systems" / "prefix_leak"


def _rows(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines()]


def _strip(row: dict) -> dict:  # type: ignore[type-arg]
    return {k: v for k, v in row.items() if k != "timing"}


def test_local_is_default_and_unknown_executor_fails() -> None:
    cfg = RunConfig(retriever="dummy")
    assert isinstance(make_executor(cfg, object(), ["all"], {}), LocalExecutor)
    with pytest.raises(ConfigError, match="executor"):
        RunConfig(retriever="dummy", executor="spark")
    assert merge_stats([{"e": {"n": 1, "s": 0.5, "x": "a"}}, {"e": {"n": 2}}]) == \
        {"e": {"n": 3, "s": 0.5}}


@pytest.fixture(scope="module")
def ray_local():  # type: ignore[no-untyped-def]
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                       "TOKENIZERS_PARALLELISM": "false",
                                       "PYTHONPATH": str(LEAK_DIR)}})
    yield ray
    ray.shutdown()


def test_ray_rows_equal_local_rows_dummy(ray_local, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    run(RunConfig(retriever="dummy", progress=False), FIXTURE, local, echo=lambda m: None)
    run(RunConfig(retriever="dummy", progress=False, executor="ray", ray_workers=2),
        FIXTURE, remote, echo=lambda m: None)
    assert [_strip(r) for r in _rows(remote)] == [_strip(r) for r in _rows(local)]
    a = json.loads(sidecar_path(local).read_text())
    b = json.loads(sidecar_path(remote).read_text())
    assert a["fingerprint"] == b["fingerprint"]  # the executor is not part of it
    assert b["runs"][-1]["executor"] == "ray" and b["runs"][-1]["workers"] == 2
    assert a["runs"][-1]["executor"] == "local"


def test_ray_runs_a_system_from_outside_the_package(ray_local, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(LEAK_DIR))
    name = "py:engram_prefix_leak:make_system"
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    run(RunConfig(retriever=name, progress=False), FIXTURE, local, echo=lambda m: None)
    run(RunConfig(retriever=name, progress=False, executor="ray", ray_workers=2),
        FIXTURE, remote, echo=lambda m: None)
    assert [_strip(r) for r in _rows(remote)] == [_strip(r) for r in _rows(local)]
    a = json.loads(sidecar_path(local).read_text())
    b = json.loads(sidecar_path(remote).read_text())
    assert a["fingerprint"] == b["fingerprint"]
    assert b["retriever"]["system"]["files_sha256"]


def test_ray_resume_and_tiny_model(ray_local, tmp_path: Path,  # type: ignore[no-untyped-def]
                                   tiny_embedding_model: str) -> None:
    common = dict(retriever="hybrid", embedding_model=tiny_embedding_model, progress=False,
                  use_cache=False)
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    run(RunConfig(**common), FIXTURE, local, echo=lambda m: None)  # type: ignore[arg-type]
    # a Ray run interrupted after 5 rows, then resumed on Ray: order and rows kept
    run(RunConfig(**common, limit=None), FIXTURE, remote,  # type: ignore[arg-type]
        echo=lambda m: None)
    lines = remote.read_text().splitlines(keepends=True)
    remote.write_text("".join(lines[:5]))
    run(RunConfig(**common, executor="ray", ray_workers=2), FIXTURE, remote,  # type: ignore[arg-type]
        resume=True, echo=lambda m: None)
    a, b = _rows(local), _rows(remote)
    assert [r["question_id"] for r in b] == [r["question_id"] for r in a]
    for x, y in zip(a, b, strict=True):
        assert y["ranked_session_ids"] == x["ranked_session_ids"]
        assert y["metrics"] == x["metrics"]
        # float32 vectors depend on batch composition (an actor encodes other batches than
        # the local loop); per-question min-max normalisation divides by the score range,
        # so last-bit differences can grow to ~1e-6. Rankings and metrics are identical.
        assert y["scores"] == pytest.approx(x["scores"], abs=1e-5)
    stats = json.loads(sidecar_path(remote).read_text())["runs"][-1]["model_stats"]
    assert stats["embedding"]["texts_encoded"] > 0  # counted on the actors
