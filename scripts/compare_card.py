#!/usr/bin/env python
"""Compare a retrained cross-encoder's card with the published card of the same model.

    python scripts/compare_card.py PUBLISHED.card.json RETRAINED.card.json

Used by the rerank publish scripts, which retrain a model (its weights are never committed)
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


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    old, new = (json.load(open(p, encoding="utf-8")) for p in argv)
    if old["pairs_sha256"] != new["pairs_sha256"]:
        print(f"{argv[1]}: trained on other pairs than {argv[0]}", file=sys.stderr)
        return 1
    files = [{k: h for k, h in c["output_files"].items() if k != "README.md"} for c in (old, new)]
    diff = sorted(k for k in set(files[0]) | set(files[1]) if files[0].get(k) != files[1].get(k))
    if not diff:
        print(f"{argv[1]}: same pairs as {argv[0]}; every file hash reproduced")
        return 0
    curves = [[x["loss"] for x in c["training"]["loss_curve"]] for c in (old, new)]
    gap = max((abs(a - b) for a, b in zip(*curves, strict=True)), default=0.0)
    print(f"{argv[1]}: same pairs as {argv[0]}, but files {diff} differ (largest loss-curve "
          f"difference {gap:.2e}); runs made with it record its own file hashes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
