"""Shared pytest configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

TINY_LONGMEMEVAL = Path(__file__).resolve().parents[1] / "fixtures" / "longmemeval_tiny.json"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "data: needs the real evaluation data (../shared/data or $ENGRAM_EVAL_DATA_DIR); "
        "skips when it is absent",
    )


@pytest.fixture(autouse=True)
def _private_heldout_registry(tmp_path_factory: pytest.TempPathFactory,
                              monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty held-out registry (``engram-eval split`` registers the
    held-out part it writes there), never the user's."""
    from engram_eval.provenance.heldout import ENV_REGISTRY

    path = tmp_path_factory.mktemp("registry") / "heldout_registry.json"
    monkeypatch.setenv(ENV_REGISTRY, str(path))
    return path


# --------------------------------------------------------------------------- tiny models
# Built once per test session from random weights (tests/tiny_models.py); nothing is
# downloaded. Heavy libraries are imported only when a test asks for one of these.


@pytest.fixture(scope="session")
def tiny_embedding_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Directory of a tiny sentence-transformers model (BERT, mean pooling, 64 tokens)."""
    from tiny_models import build_embedding_model

    return str(build_embedding_model(tmp_path_factory.mktemp("tiny-models") / "embedding"))


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Directory of a tiny BertForSequenceClassification cross-encoder (one logit)."""
    from tiny_models import build_cross_encoder

    return str(build_cross_encoder(tmp_path_factory.mktemp("tiny-models") / "cross-encoder"))


# --------------------------------------------------------------------------- a finished run
# One flat-bm25 run of fixtures/longmemeval_tiny.json per test module (result, sidecar,
# summary); tests that change files work on ``result``, a private copy.


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A good run of the tiny LongMemEval fixture; never modified by tests."""
    from engram_eval.runs import runner
    from engram_eval.runs.config import RunConfig

    out = tmp_path_factory.mktemp("pristine") / "out.jsonl"
    runner.run(RunConfig(retriever="flat-bm25", progress=False), TINY_LONGMEMEVAL, out,
               echo=lambda m: None)
    return out


@pytest.fixture
def result(pristine: Path, tmp_path: Path) -> Path:
    """A private copy of a good run (result, sidecar, summary) to tamper with."""
    from run_files import copy_run

    return copy_run(pristine, tmp_path / "out.jsonl")
