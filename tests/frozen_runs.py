"""The held-out protocol in the tests: freeze a manifest for a dataset, then run it once under
that manifest (``engram-eval run --validate-only --freeze-source M``, then ``engram-eval run
--output R --frozen-source M``), with the dummy retriever (no model is loaded). The guard and
the ledger are whatever the calling test set up (``ENGRAM_EVAL_LEDGER``, split markers)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.cli import main as cli


def run_dummy(*args: str) -> int:
    """``engram-eval run ARGS`` with the dummy retriever and no progress display."""
    return cli.main(["run", *args, "--retriever", "dummy", "--no-progress"])


@dataclass(frozen=True)
class FrozenRun:
    """The manifest, the result file and the result's summary and sidecar (parsed)."""

    manifest: Path
    result: Path
    summary: dict[str, Any]
    sidecar: dict[str, Any]


def freeze_and_run(data: Path, tmp: Path, name: str = "r") -> FrozenRun:
    """Freeze ``tmp/NAME.frozen.json`` for ``data``, then run ``data`` once under it into
    ``tmp/NAME.jsonl``; both steps must succeed (exit status 0)."""
    manifest = tmp / f"{name}.frozen.json"
    result = tmp / f"{name}.jsonl"
    assert run_dummy(str(data), "--validate-only", "--freeze-source", str(manifest)) == 0
    assert run_dummy(str(data), "--output", str(result), "--frozen-source", str(manifest)) == 0
    return FrozenRun(manifest, result,
                     json.loads(Path(str(result) + ".summary.json").read_text()),
                     json.loads(Path(str(result) + ".metadata.json").read_text()))
