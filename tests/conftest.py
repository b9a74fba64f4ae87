"""Shared pytest configuration."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "data: needs the real evaluation data (../shared/data or $ENGRAM_EVAL_DATA_DIR); "
        "skips when it is absent",
    )


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
