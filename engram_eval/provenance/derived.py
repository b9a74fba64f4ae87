"""Sidecars of derived files (reports, figures, TREC files, split manifests): what made them
and from what."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.provenance.sidecar import sidecar_path


def write_derived_sidecar(out: str | os.PathLike[str], *, generators: list[str],
                          dataset: dict[str, Any] | None, runs: Sequence[Any] = (),
                          files: Sequence[str | os.PathLike[str]] = ()) -> Path:
    """``<out>.metadata.json`` in the layout of ``engram_eval.analysis.derived_sidecars``: the
    file's sha256, the generating module(s) and their sha256, the dataset, and the inputs
    (paths relative to the output's directory, with sha256 and, for runs, fingerprint and rows
    hash)."""
    from engram_eval.io import dump_json, exclusive_write, package_root, sha256_file

    o = Path(out)
    inputs: list[dict[str, Any]] = []
    for r in runs:
        inputs.append({"file": os.path.relpath(r.path, o.parent), "sha256": sha256_file(r.path),
                       "rows_sha256": r.rows_sha256, "run_fingerprint": r.fingerprint})
    for f in files:
        inputs.append({"file": os.path.relpath(f, o.parent), "sha256": sha256_file(Path(f))})
    gens = [{"path": g, "sha256": sha256_file(package_root() / g)} for g in generators]
    meta = {"kind": "engram-eval/derived", "file": o.name, "sha256": sha256_file(o),
            "generator": gens[0], "generators": gens, "dataset": dataset, "inputs": inputs,
            "command": ["engram-eval", *sys.argv[1:]] if Path(sys.argv[0]).name.startswith(
                "engram-eval") else list(sys.argv),
            "created_at": datetime.now(UTC).isoformat(timespec="seconds")}
    side = sidecar_path(o)
    exclusive_write(side, dump_json(meta))
    return side
