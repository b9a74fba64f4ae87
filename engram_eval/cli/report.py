"""``report``: one self-contained HTML page per finished run, or per comparison of two runs
(:mod:`engram_eval.report`)."""

from __future__ import annotations

import argparse
from typing import Any

from engram_eval.cli._common import (
    add_overlay_arg,
    add_sidecar_arg,
    bootstrap_count,
    check_free,
    output_file,
    seed_int,
)
from engram_eval.provenance.sources import derived_sources


def add_report(sub: Any) -> None:
    r = sub.add_parser("report", help="a self-contained HTML report of a finished run (header, "
                       "verify, metrics, comparison, misses, every question drillable); "
                       "opens from disk, loads nothing")
    r.add_argument("run", help="result rows (.jsonl or .jsonl.gz), sidecar and summary beside it")
    r.add_argument("--against", metavar="RUN2", help="a run over the same questions to compare "
                   "with (paired, as `compare RUN2 RUN`: delta = RUN - RUN2, gained/lost "
                   "questions)")
    r.add_argument("--dataset", help="the dataset file the run used: runs verify (without it "
                   "the page says 'not verified') and shows question and turn texts")
    r.add_argument("--output", required=True, type=output_file,
                   help="HTML file to write (must not exist)")
    r.add_argument("--k", type=int, default=5, help="cut-off of hit/miss (recall_all@k), of "
                   "gained/lost and of the miss analysis (default 5)")
    r.add_argument("--protocol", default=None,
                   help="protocol of the per-question views (default: answerable for "
                   "LongMemEval, locomo for LoCoMo); the metrics tables show every protocol")
    r.add_argument("--trace-depth", type=int, default=10, metavar="K",
                   help="sessions listed per question with their traces (default 10; 0: every "
                   "traced session); gold sessions below them are always listed. Bounds the "
                   "page's size")
    r.add_argument("--turn-chars", type=int, default=None, metavar="N",
                   help="with --dataset: a best or evidence turn's text is cut after N "
                   "characters (default 600; 0: never)")
    r.add_argument("--sources-at", metavar="COMMIT", help="passed to verify: compare the "
                   "recorded source hashes with this git revision")
    r.add_argument("--against-sources-at", metavar="COMMIT", help="the same for RUN2 "
                   "(default: --sources-at), when the two runs were published by different "
                   "commits")
    r.add_argument("--note", metavar="TEXT", help="a line shown under the title, as text "
                   "(e.g. what the dataset is: 'a development split of LongMemEval_S')")
    r.add_argument("--bootstrap", type=bootstrap_count, default=10000, help="comparison: "
                   "bootstrap resamples (default 10000, at most 100000, as compare)")
    r.add_argument("--seed", type=seed_int, default=0, help="comparison: bootstrap seed")
    r.add_argument("--cluster", choices=("question", "id-prefix"), default="question",
                   help="comparison: unit of resampling and testing (as compare --cluster)")
    add_overlay_arg(r, "; the page's 'Audited labels' block (needs --dataset); a run made "
                    "with `run --gold-overlay FILE` verifies only with it")
    add_sidecar_arg(r)


def cmd_report(args: argparse.Namespace) -> int:
    from engram_eval.io import exclusive_write
    from engram_eval.provenance.derived import write_derived_sidecar
    from engram_eval.report.build import build_report
    from engram_eval.report.page import render
    from engram_eval.runs.reader import read_run

    check_free(args, args.output)
    runs = [read_run(args.run)] + ([read_run(args.against)] if args.against else [])
    doc = build_report(runs[0], against=runs[1] if args.against else None,
                       dataset=args.dataset, k=args.k, protocol=args.protocol, depth=args.trace_depth,
                       sources_at=args.sources_at,
                       against_sources_at=args.against_sources_at, note=args.note, n_boot=args.bootstrap, seed=args.seed,
                       cluster=args.cluster, turn_chars=args.turn_chars,
                       gold_overlay=args.gold_overlay)
    data = render(doc).encode("utf-8", errors="replace")
    exclusive_write(args.output, data)
    if not args.no_sidecar:
        write_derived_sidecar(args.output, generators=list(derived_sources("report")),
                              dataset=runs[0].dataset(), runs=runs,
                              files=[args.gold_overlay] if args.gold_overlay else [])
    v = doc["verify"]
    print(f"{v['verdict']}")
    print(f"wrote {args.output} ({len(data) / 1e6:.2f} MB, "
          f"{len(doc['questions'])} questions, built in {doc['build_seconds']} s)")
    return 0


COMMANDS = {"report": (add_report, cmd_report)}
