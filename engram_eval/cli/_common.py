"""Helpers shared by the command modules: the ``--no-sidecar`` flag of commands that write
derived files, and the refusal to overwrite an output before any work is done."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engram_eval.io import already_exists
from engram_eval.provenance.sidecar import sidecar_path
from engram_eval.retrieval.flags import (
    count_int,
    finite_float,
    output_file,
    positive_float,
    seed_int,
)

__all__ = ["add_sidecar_arg", "check_free", "count_int", "finite_float", "output_file",
           "positive_float", "seed_int"]


def add_sidecar_arg(p: Any) -> None:
    p.add_argument("--no-sidecar", action="store_true",
                   help="do not write <output>.metadata.json (derived-file provenance: file "
                   "and input hashes, generator module hashes, command)")


def check_free(args: argparse.Namespace, *paths: str | None) -> None:
    """Refuse before any work when an output (or, unless --no-sidecar, its sidecar) exists."""
    for p in paths:
        if not p:
            continue
        for q in (Path(p), *(() if args.no_sidecar else (sidecar_path(p),))):
            if q.exists():
                raise FileExistsError(already_exists(q))
