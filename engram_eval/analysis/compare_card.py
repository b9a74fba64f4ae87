"""Compare a retrained cross-encoder's card with the published card of the same model.

    python -m engram_eval.analysis.compare_card PUBLISHED.card.json RETRAINED.card.json

(``scripts/compare_card.py``, the command the rerank publications recorded, runs this module
with the same arguments.)

Used by the rerank publications, which retrain a model (its weights are never committed)
instead of overwriting its published card. Exit 1 when the two were trained on other pairs
(the pairs' sha256 differ): then the retrained model is not the published one. Otherwise exit
0 and one line: every output file hash reproduced, or which files differ and the largest
difference between the two loss curves (CPU float summation can differ between machines; see
PROVENANCE.md section 6). sentence-transformers' generated ``README.md`` is left out: it states
the training wall time, and no run hashes it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Output files left out of the comparison (sentence-transformers' README states wall time).
UNHASHED_OUTPUTS = ("README.md",)
USAGE = "python -m engram_eval.analysis.compare_card PUBLISHED.card.json RETRAINED.card.json"


@dataclass(frozen=True)
class CardComparison:
    """``same_pairs``: trained on the same pairs (else the rest is empty); ``differ``: output
    files whose hashes differ; ``loss_gap``: the largest step-wise loss-curve difference
    (0.0 when no file differs)."""

    same_pairs: bool
    differ: list[str]
    loss_gap: float


def compare_cards(old: dict[str, Any], new: dict[str, Any]) -> CardComparison:
    """Compare two ``train-reranker`` cards (see the module docstring)."""
    if old["pairs_sha256"] != new["pairs_sha256"]:
        return CardComparison(False, [], 0.0)
    files = [{k: h for k, h in c["output_files"].items() if k not in UNHASHED_OUTPUTS}
             for c in (old, new)]
    diff = sorted(k for k in set(files[0]) | set(files[1]) if files[0].get(k) != files[1].get(k))
    if not diff:
        return CardComparison(True, [], 0.0)
    curves = [[x["loss"] for x in c["training"]["loss_curve"]] for c in (old, new)]
    gap = max((abs(a - b) for a, b in zip(*curves, strict=True)), default=0.0)
    return CardComparison(True, diff, gap)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print(USAGE, file=sys.stderr)
        return 2
    old_path, new_path = args
    old, new = (json.loads(Path(p).read_text(encoding="utf-8")) for p in args)
    c = compare_cards(old, new)
    if not c.same_pairs:
        print(f"{new_path}: trained on other pairs than {old_path}", file=sys.stderr)
        return 1
    if not c.differ:
        print(f"{new_path}: same pairs as {old_path}; every file hash reproduced")
        return 0
    print(f"{new_path}: same pairs as {old_path}, but files {c.differ} differ (largest "
          f"loss-curve difference {c.loss_gap:.2e}); runs made with it record its own file "
          "hashes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
