"""Run a bash snippet that sources the publish scripts' libraries with a fake ``engram-eval``
and a fake ``python`` that only log their arguments (tests/repository/test_rerank_lib.py,
test_default_gate_lib.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

#: A fake command: appends "NAME ARGS" to the file $CALLS.
LOG = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
"""


def logged_calls(tmp_path: Path, script: str) -> list[str]:
    """``tmp_path/engram-eval`` and ``tmp_path/python`` written as :data:`LOG`, ``script`` run
    by bash in ``tmp_path`` (it must succeed), and the calls they logged, in order (skipped
    where bash is absent)."""
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    for name in ("engram-eval", "python"):
        (tmp_path / name).write_text(LOG)
        (tmp_path / name).chmod(0o755)
    p = subprocess.run(["bash", "-c", script], cwd=tmp_path, text=True, capture_output=True,
                       env={**os.environ, "CALLS": str(tmp_path / "calls")}, timeout=60)
    assert p.returncode == 0, p.stderr
    calls = tmp_path / "calls"
    return calls.read_text().splitlines() if calls.exists() else []
