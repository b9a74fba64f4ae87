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

__all__ = ["add_overlay_arg", "add_sidecar_arg", "bootstrap_count", "check_free", "count_int", "finite_float", "output_file",
           "positive_float", "seed_int"]


def bootstrap_count(text: str) -> int:
    """``argparse`` type of ``--bootstrap``: a count from 1 to
    :data:`engram_eval.analysis.compare.MAX_BOOTSTRAP`; anything else is one usage error
    stating the bound, before any run is read."""
    from engram_eval.analysis.compare import check_bootstrap
    from engram_eval.errors import ConfigError

    value = count_int(text)
    try:
        check_bootstrap(value)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--bootstrap ")) from None
    return value


bootstrap_count.__name__ = "integer"


def add_sidecar_arg(p: Any) -> None:
    p.add_argument("--no-sidecar", action="store_true",
                   help="do not write <output>.metadata.json (derived-file provenance: file "
                   "and input hashes, generator module hashes, command)")


def add_overlay_arg(p: Any, extra: str = "") -> None:
    """``--gold-overlay FILE`` (run, score, compare, verify, report, merge)."""
    p.add_argument("--gold-overlay", metavar="FILE",
                   help="LoCoMo gold corrections: the public audit's list "
                   "(locomo_<conversation>_qa<item> -> correct_evidence) or a JSON map "
                   "{question_id: [dia_id, ...]}; metrics are reported on the dataset's "
                   "evidence and on the corrected one (protocols_audited), the file's sha256 "
                   "recorded" + extra)


def check_free(args: argparse.Namespace, *paths: str | None) -> None:
    """Refuse before any work when an output (or, unless --no-sidecar, its sidecar) exists."""
    for p in paths:
        if not p:
            continue
        for q in (Path(p), *(() if args.no_sidecar else (sidecar_path(p),))):
            if q.exists():
                raise FileExistsError(already_exists(q))
