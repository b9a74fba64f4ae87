"""Fit the production confidence calibration on the dev fixture (see
engram_eval/production/calibrate.py), write the versioned package file and a report + plot.

    python benchmarks/production_retrieval/calibrate.py --fixture fixtures/production/dev.json \
        --output engram_eval/production/calibration_v2.json

``calibration_v1.json`` (the published runs') was fitted under
``--settings engram_eval/production/settings_v1.json``; ``calibration_v2.json`` (the default)
under the package defaults.
"""

from __future__ import annotations

import argparse
import json
import sys

import _common


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--fixture", required=True)
    p.add_argument("--output", required=True, help="calibration JSON (the package file)")
    p.add_argument("--report", help="also write this report JSON and a .png reliability plot "
                   "beside it")
    p.add_argument("--embedding-model")
    p.add_argument("--settings", metavar="RECORD", help="fit under these recorded settings "
                   "(see run.py --settings); default: the package defaults")
    p.add_argument("--l2", type=float, default=1e-3)
    args = p.parse_args(argv)
    _common.offline()
    from engram_eval.errors import EngramEvalError
    from engram_eval.production import calibrate as C
    from engram_eval.production.search import Engine

    try:
        settings = _common.settings_from(args)
        doc = C.fit(args.fixture, Engine(settings), l2=args.l2)
        C.write_calibration(doc, args.output)
        if args.report:
            from engram_eval.io import atomic_write, sha256_file

            rep = {**doc, "calibration_file": args.output,
                   "calibration_file_sha256": sha256_file(args.output),
                   "command": sys.argv}
            atomic_write(args.report, json.dumps(rep, indent=2) + "\n")
            png = args.report.removesuffix(".json") + ".png"
            C.reliability_plot(doc, png)
    except EngramEvalError as e:
        print(f"calibrate: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"coefficients": doc["coefficients"], "data": doc["data"],
                      "ece_10_bins": doc["in_sample"]["ece_10_bins"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
