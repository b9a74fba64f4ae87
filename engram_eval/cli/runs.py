"""Commands that make a result: ``run`` (rank and score a dataset), ``merge`` (join the
shards of one run) and ``compress`` (gzip a finished result)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engram_eval.cli._common import add_overlay_arg, output_file
from engram_eval.errors import EngramEvalError


def add_run(sub: Any) -> None:
    from engram_eval.runs.config import add_arguments

    r = sub.add_parser("run", help="rank every selected question and score it")
    r.add_argument("dataset", help="LongMemEval (.json/.json.gz) or LoCoMo file")
    r.add_argument("--output", type=output_file, help="result JSONL (must not exist unless --resume; required "
                   "unless --validate-only)")
    r.add_argument("--frozen-source", metavar="MANIFEST",
                   help="run only if this frozen manifest (sources, models, settings, dataset) "
                        "matches; required for the held-out part of a split")
    r.add_argument("--validate-only", action="store_true",
                   help="load and check the dataset and settings, write nothing but "
                        "--freeze-source, load no model")
    r.add_argument("--freeze-source", metavar="MANIFEST", type=output_file,
                   help="with --validate-only: write the frozen manifest (exclusive creation)")
    r.add_argument("--resume", action="store_true",
                   help="continue an interrupted run after verifying its provenance and "
                   "re-checking every row already written as `verify` does (nothing is "
                   "written when one fails)")
    r.add_argument("--config", help="YAML file of config fields (never auto-loaded)")
    add_overlay_arg(r)
    add_arguments(r)


def cmd_run(args: argparse.Namespace) -> int:
    from engram_eval.runs.config import config_from_args
    from engram_eval.runs.runner import format_summary, run

    config = config_from_args(args)
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    if not args.output and not args.validate_only:
        raise EngramEvalError("run: --output is required (unless --validate-only)")
    if args.freeze_source and not args.validate_only:
        raise EngramEvalError("run: --freeze-source goes with --validate-only")
    out = run(config, args.dataset, args.output or "(validate-only)", resume=args.resume,
              echo=lambda m: print(m, file=sys.stderr), command=sys.argv,
              frozen_source=args.frozen_source, freeze_source=args.freeze_source,
              validate_only=args.validate_only, gold_overlay=args.gold_overlay)
    if args.validate_only:
        print(f"{args.dataset}: valid; run fingerprint {out.fingerprint}")
        if out.summary.get("frozen_source"):
            print(f"frozen manifest: {out.summary['frozen_source']}")
        return 0
    if config.retriever in ("hybrid", "dense", "bm25"):
        from engram_eval.retrieval.settings import pipeline_line

        print(pipeline_line(config, config.settings_sources))
    print(f"wrote {out.n_written} row(s); {out.n_total} in {out.output}")
    print(f"fingerprint {out.fingerprint}")
    print(f"dataset {out.summary['dataset']} sha256 {out.summary['dataset_sha256']}")
    print(format_summary(out.summary))
    label = out.summary.get("heldout_questions")
    if label:
        print(f"labelled: {label['label']} ({label['n_heldout_questions']} of its "
              f"{label['n_questions']} questions are from the held-out {label['heldout_part']}; "
              "commands that choose settings refuse this run; `engram-eval heldout list` "
              "shows the registered parts)")
    return 0


def add_merge(sub: Any) -> None:
    g = sub.add_parser("merge", help="join the shards (--shard I/N runs) of one run into "
                       "one result that `verify` accepts")
    g.add_argument("shards", nargs="+", help="every shard's result file")
    g.add_argument("--output", required=True, type=output_file, help="merged result JSONL (must not exist)")
    g.add_argument("--dataset", required=True,
                   help="the dataset file the shards were run on: every shard must pass "
                   "`verify` against it (every check ran and passed) before it is merged")
    g.add_argument("--sources-at", metavar="COMMIT",
                   help="as verify --sources-at: compare the shards' recorded source hashes "
                   "with this git revision instead of the installed package")
    g.add_argument("--questions", metavar="FILE",
                   help="shards made with `run --questions FILE`: that file, as verify "
                   "--questions (without it they do not verify, and are not merged)")
    g.add_argument("--gold-overlay", metavar="FILE",
                   help="shards made with `run --gold-overlay FILE`: that file, as verify "
                   "--gold-overlay (without it they do not verify, and are not merged)")


def cmd_merge(args: argparse.Namespace) -> int:
    from engram_eval.runs.merge import merge
    from engram_eval.scoring.summary import format_summary

    summary = merge(args.shards, args.output, command=sys.argv, dataset=args.dataset,
                    sources_at=args.sources_at, questions_file=args.questions,
                    gold_overlay=args.gold_overlay)
    print(f"merged {len(args.shards)} shard(s), {summary['n_questions']} questions, into "
          f"{args.output}")
    print(f"fingerprint {summary['fingerprint']}")
    print(format_summary(summary))
    return 0


def add_compress(sub: Any) -> None:
    c = sub.add_parser("compress", help="gzip a finished result (RESULT.gz, sidecar and "
                       "summary renamed with it), verify it, then remove the uncompressed files")
    c.add_argument("result")


def cmd_compress(args: argparse.Namespace) -> int:
    from engram_eval.runs.export import compress_result

    dst = compress_result(args.result)
    print(f"wrote {dst} (verified); removed {args.result} and its sidecar and summary")
    return 0


COMMANDS = {"run": (add_run, cmd_run), "merge": (add_merge, cmd_merge),
            "compress": (add_compress, cmd_compress)}
