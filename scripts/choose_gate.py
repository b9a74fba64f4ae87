#!/usr/bin/env python
"""Choose the gate's fit per memory shape from calibrate-sessions reports made with --nested-cv.

    python scripts/choose_gate.py --candidate NAME=REPORT [--candidate ...] --output CHOICE.json

Per shape every report holds, the candidates' nested cross-validated AUROC and ECE, and the
paired bootstrap interval of each one's AUROC minus the first listed
(engram_eval.production_eval.calibrate_real.compare_nested); the highest nested AUROC is
chosen (ties: the first listed). Refuses an existing output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engram_eval.errors import ConfigError
from engram_eval.io import dump_json, exclusive_write, sha256_file
from engram_eval.production_eval.calibrate_real import compare_nested
from engram_eval.retrieval.flags import ArgumentParser


def main(argv: list[str]) -> int:
    ap = ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--candidate", action="append", required=True, metavar="NAME=REPORT")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", required=True)
    a = ap.parse_args(argv)
    reports = {}
    for spec in a.candidate:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--candidate {spec!r}: expected NAME=REPORT")
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        if "nested_cv" not in doc:
            raise ConfigError(f"{path}: no nested_cv (make it with calibrate-sessions "
                              "--nested-cv)")
        reports[name] = (path, doc)
    shapes = sorted(set.intersection(*(set(d["nested_cv"]) for _, d in reports.values())))
    out = {"kind": "engram-eval/gate-choice",
           "candidates": {n: {"report": Path(p).name, "sha256": sha256_file(p),
                              "command": d.get("command")} for n, (p, d) in reports.items()},
           "shapes": {sh: compare_nested({n: d["nested_cv"][sh]
                                          for n, (_, d) in reports.items()},
                                         resamples=a.resamples, seed=a.seed)
                      for sh in shapes}}
    exclusive_write(a.output, dump_json(out))
    for sh, c in out["shapes"].items():
        print(sh, "chosen:", c["chosen"], {n: round(r["auroc"] or 0, 4)
                                          for n, r in c["candidates"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
