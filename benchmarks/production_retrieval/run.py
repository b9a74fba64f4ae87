"""Production-confidence check: gated search over a persisted store per case.

Validate a fixture and freeze a manifest (exclusive creation):

    python benchmarks/production_retrieval/run.py --fixture fixtures/production/holdout.json \
        --source-root . --validate-only --freeze-source /abs/holdout.frozen.json

Run (held-out fixtures need --frozen-source; outputs are never overwritten):

    python benchmarks/production_retrieval/run.py --fixture fixtures/production/holdout.json \
        --source-root . --frozen-source /abs/holdout.frozen.json \
        --output results/production/holdout.json --work-dir /tmp/prod-work

The gate's cut-off (--min-confidence, default 0.6) is a relevance threshold, not a
probability of correctness. Exit status: 0 done, 2 refused or bad input.
"""

from __future__ import annotations

import argparse
import json
import sys

import _common


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--fixture", required=True, help="production fixture JSON")
    p.add_argument("--source-root", required=True,
                   help="repository root whose sources are hashed (must hold the running "
                        "engram_eval package)")
    p.add_argument("--validate-only", action="store_true",
                   help="validate the fixture (and calibration) and stop")
    p.add_argument("--freeze-source", metavar="MANIFEST",
                   help="with --validate-only: write the frozen manifest here (exclusive)")
    p.add_argument("--frozen-source", metavar="MANIFEST",
                   help="run only if this frozen manifest matches (required for held-out "
                        "fixtures)")
    p.add_argument("--output", help="result JSON (must not exist); summary and .metadata.json "
                   "sidecar are written beside it")
    p.add_argument("--work-dir", help="directory for the per-case stores (one per case)")
    p.add_argument("--ledger", help="held-out ledger (default: SOURCE_ROOT/results/"
                   "heldout_ledger.json, or $ENGRAM_EVAL_LEDGER)")
    _common.add_settings_arguments(p)
    args = p.parse_args(argv)
    _common.offline()
    from engram_eval.errors import EngramEvalError
    from engram_eval.io import NotRegularFileError, UnsafePathError
    from engram_eval.production import runner as R
    from engram_eval.production.search import Engine

    try:
        root = _common.check_source_root(args.source_root)
        if args.freeze_source and not args.validate_only:
            raise EngramEvalError("--freeze-source goes with --validate-only")
        engine = Engine(_common.settings_from(args))
        if args.validate_only:
            m = R.validate_only(args.fixture, engine, root, args.freeze_source)
            print(f"{args.fixture}: valid; manifest fingerprint {m['fingerprint']} "
                  f"(source fingerprint {m['source_fingerprint']})")
            if args.freeze_source:
                print(f"froze {args.freeze_source}")
            return 0
        if not args.output or not args.work_dir:
            raise EngramEvalError("a run needs --output and --work-dir")
        doc = R.run_fixture(args.fixture, args.output, args.work_dir, engine, root,
                            frozen_source=args.frozen_source, ledger=args.ledger,
                            command=sys.argv)
    except (EngramEvalError, FileNotFoundError, FileExistsError, NotRegularFileError,
            UnsafePathError) as e:
        print(f"production run: error: {e}", file=sys.stderr)
        return 2
    s = doc["summary"]
    print(f"{doc['fixture_name']}: {doc['label']}")
    print(f"answerable hits {s['answerable_hits']}/{s['answerable']}, absent-answer abstentions "
          f"{s['absent_answer_abstentions']}/{s['absent_answer']}, non-gold memories returned "
          f"{s['non_gold_memories_returned']}, precision "
          + ("n/a" if s["precision"] is None else f"{s['precision']:.3f}"))
    print(json.dumps({"output": args.output, "manifest_fingerprint": doc["manifest_fingerprint"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
