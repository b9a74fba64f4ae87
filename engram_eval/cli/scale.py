"""CLI subcommands for scale work: ``make-stress`` and ``merge`` (added to ``engram-eval``
by :mod:`engram_eval.cli.main`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parsers(sub: Any) -> None:
    m = sub.add_parser("make-stress", help="pad a LongMemEval file's haystacks with other "
                       "questions' non-evidence sessions (a SYNTHETIC M-like stress set)")
    m.add_argument("source", help="LongMemEval file (.json or .json.gz)")
    m.add_argument("--sessions", type=int, required=True,
                   help="sessions per question after padding (e.g. 500)")
    m.add_argument("--seed", type=int, required=True, help="sampling seed")
    m.add_argument("--limit", type=int, help="write only the first N questions (fillers are "
                   "still drawn from every question)")
    m.add_argument("--output", required=True,
                   help="output file (.json, or .json.gz for gzip); must not exist; its "
                   "sidecar is OUTPUT.meta.json")

    g = sub.add_parser("merge", help="join the shards (--shard I/N runs) of one run into "
                       "one result that `verify` accepts")
    g.add_argument("shards", nargs="+", help="every shard's result file")
    g.add_argument("--output", required=True, help="merged result JSONL (must not exist)")


def _cmd_make_stress(args: argparse.Namespace) -> int:
    from engram_eval.data.stress import make_stress, meta_path

    meta = make_stress(args.source, args.output, sessions=args.sessions, seed=args.seed,
                       limit=args.limit,
                       echo=lambda m: print(m, file=sys.stderr))
    s = meta["sessions_per_question"]
    print(f"wrote {meta['n_questions']} questions to {args.output} (synthetic; sessions per "
          f"question min {s['min']}, max {s['max']}); sidecar {meta_path(args.output)}")
    print(f"sha256 {meta['output']['sha256']}")
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    from engram_eval.runs.merge import merge
    from engram_eval.scoring.summary import format_summary

    summary = merge(args.shards, args.output, command=sys.argv)
    print(f"merged {len(args.shards)} shard(s), {summary['n_questions']} questions, into "
          f"{args.output}")
    print(f"fingerprint {summary['fingerprint']}")
    print(format_summary(summary))
    return 0


HANDLERS = {"make-stress": _cmd_make_stress, "merge": _cmd_merge}
