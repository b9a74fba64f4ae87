"""The production-retrieval scripts are thin wrappers over ``engram-eval production``
(:mod:`engram_eval.cli.production`): each passes its arguments, unchanged, to one
subcommand, so the commands that published results record still run. This helper puts the
repository root first on ``sys.path`` (the scripts run from a checkout) and runs it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def production(subcommand: str, argv: Sequence[str] | None, script: str) -> int:
    """``engram-eval production SUBCOMMAND ARGV`` (``argv`` None: this process's)."""
    from engram_eval.cli.production import main

    args = list(sys.argv[1:] if argv is None else argv)
    return main([subcommand, *args], prog=f"{Path(script).name} (engram-eval production)")
