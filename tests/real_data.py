"""Where the opt-in real-data tier finds its files: ``$ENGRAM_EVAL_DATA_DIR`` when set,
else ``../shared/data`` beside the repository."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def data_dir() -> Path:
    env = os.environ.get("ENGRAM_EVAL_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def require(relative: str) -> Path:
    """The data file ``relative`` to the data directory, or skip the test cleanly."""
    path = data_dir() / relative
    if not path.is_file():
        pytest.skip(f"real data not available: {path}")
    return path
