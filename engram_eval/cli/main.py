"""Command line: ``engram-eval run|verify|score|export``.

Only this module configures logging and process-wide settings (offline mode for the
Hugging Face libraries, torch threads); the library never does so at import.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from engram_eval.errors import EngramEvalError


def set_offline_env() -> None:
    """No model or dataset is ever downloaded at run time (also used by the benchmark
    scripts)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_parser() -> argparse.ArgumentParser:
    from engram_eval.runs.config import add_arguments

    parser = argparse.ArgumentParser(prog="engram-eval", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="rank every selected question and score it")
    r.add_argument("dataset", help="LongMemEval (.json/.json.gz) or LoCoMo file")
    r.add_argument("--output", help="result JSONL (must not exist unless --resume; required "
                   "unless --validate-only)")
    r.add_argument("--frozen-source", metavar="MANIFEST",
                   help="run only if this frozen manifest (sources, models, settings, dataset) "
                        "matches; required for the held-out part of a split")
    r.add_argument("--validate-only", action="store_true",
                   help="load and check the dataset and settings, write nothing but "
                        "--freeze-source, load no model")
    r.add_argument("--freeze-source", metavar="MANIFEST",
                   help="with --validate-only: write the frozen manifest (exclusive creation)")
    r.add_argument("--resume", action="store_true",
                   help="continue an interrupted run after verifying its provenance")
    r.add_argument("--config", help="YAML file of config fields (never auto-loaded)")
    add_arguments(r)

    v = sub.add_parser("verify", help="recompute and re-check a published result")
    v.add_argument("result")
    v.add_argument("--dataset", help="dataset file to re-hash and re-derive gold from "
                   "(without it nothing is VERIFIED and the exit status is 3)")
    v.add_argument("--sources-at", metavar="COMMIT",
                   help="compare the recorded source hashes with the files committed at this "
                   "git revision (the commit that published the run) instead of the installed "
                   "package, so a run published before later code changes stays checkable")

    s = sub.add_parser("score", help="score any system's rankings on identical definitions")
    s.add_argument("rankings", help="JSONL of {question_id, ranked_session_ids}")
    s.add_argument("--dataset", required=True)
    s.add_argument("--protocol", action="append", dest="protocols")
    s.add_argument("--strict", action="store_true", help="error if a question has no ranking")
    s.add_argument("--output", help="write the summary JSON here (must not exist)")

    e = sub.add_parser("export", help="export rankings without conversation text")
    e.add_argument("result")
    e.add_argument("--public", help="write ids + scores JSONL here (must not exist)")
    e.add_argument("--official-log", help="write a LongMemEval reference-layout log here")
    e.add_argument("--dataset", help="needed for --official-log")

    c = sub.add_parser("compress", help="gzip a finished result (RESULT.gz, sidecar and "
                       "summary renamed with it), verify it, then remove the uncompressed files")
    c.add_argument("result")
    from engram_eval.cli.analysis import add_parsers as add_analysis_parsers

    add_analysis_parsers(sub)  # split, compare, analyze, plot, trec
    from engram_eval.cli.scale import add_parsers as add_scale_parsers

    add_scale_parsers(sub)  # make-stress, merge
    tn = sub.add_parser("tune", help="choose fusion/temporal settings offline from a run's "
                        "traces (no re-encoding)")
    tn.add_argument("run", help="result JSONL(.gz) of a hybrid run that traced its signals")
    tn.add_argument("--grid", required=True, help="grid YAML (see engram_eval.analysis.tune.load_grid)")
    tn.add_argument("--output", required=True, help="config YAML to write (must not exist); "
                    "the report goes to OUTPUT.tuning.json")
    tn.add_argument("--objective", default=None, help="comma-separated metrics averaged "
                    "per question (default: recall_any@1,recall_all@5,ndcg_any@5)")
    tn.add_argument("--protocol", default="answerable", help="gold protocol (default: "
                    "answerable)")
    tn.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    tn.add_argument("--seed", type=int, default=0, help="fold assignment seed (default 0)")
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
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
              validate_only=args.validate_only)
    if args.validate_only:
        print(f"{args.dataset}: valid; run fingerprint {out.fingerprint}")
        if out.summary.get("frozen_source"):
            print(f"frozen manifest: {out.summary['frozen_source']}")
        return 0
    print(f"wrote {out.n_written} row(s); {out.n_total} in {out.output}")
    print(f"fingerprint {out.fingerprint}")
    print(f"dataset {out.summary['dataset']} sha256 {out.summary['dataset_sha256']}")
    print(format_summary(out.summary))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from engram_eval.provenance.sidecar import summary_path
    from engram_eval.runs.audit import verify
    from engram_eval.runs.runner import format_summary, read_json

    rep = verify(args.result, args.dataset, sources_at=args.sources_at)
    sp = summary_path(args.result)
    if rep.ok and sp.exists():
        summ = read_json(sp)
        print(f"fingerprint {summ['fingerprint']}")
        print(format_summary(summ))
    print(rep.format())
    print(rep.verdict())
    return rep.exit_code


def _cmd_score(args: argparse.Namespace) -> int:
    from engram_eval.runs.audit import score_rankings, side_by_side, write_json_new
    from engram_eval.runs.runner import TABLE_METRICS, format_summary

    summary, counts = score_rankings(args.rankings, args.dataset, args.protocols,
                                     strict=args.strict)
    print(", ".join(f"{k}={v}" for k, v in counts.items()))
    print(side_by_side(summary, TABLE_METRICS))
    print()
    print(format_summary(summary))
    if args.output:
        write_json_new(args.output, {"counts": counts, **summary})
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from engram_eval.runs.audit import export_official_log, export_public

    if not args.public and not args.official_log:
        raise EngramEvalError("export: give --public PATH and/or --official-log PATH")
    if args.public:
        print(f"wrote {export_public(args.result, args.public)} rows to {args.public}")
    if args.official_log:
        if not args.dataset:
            raise EngramEvalError("export --official-log needs --dataset")
        n = export_official_log(args.result, args.official_log, args.dataset)
        print(f"wrote {n} rows to {args.official_log}")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from engram_eval.analysis.tune import DEFAULT_OBJECTIVE, tune

    objective = args.objective.split(",") if args.objective else list(DEFAULT_OBJECTIVE)
    res = tune(args.run, args.grid, args.output, objective=objective, protocol=args.protocol,
               folds=args.folds, seed=args.seed)
    r = res.report
    cv = r["cross_validation"]
    print(f"{r['n_candidates']} candidates, {r['n_questions']} questions ({r['protocol']}); "
          f"objective mean of {', '.join(r['objective']['metrics'])}")
    print(f"run's own settings {r['run_settings_score']:.4f}; chosen in-sample "
          f"{r['in_sample_score']:.4f}; {cv['folds']}-fold CV estimate {cv['estimate']:.4f}")
    print(f"chosen {r['chosen']}")
    print(f"wrote {res.config_path} and {res.report_path}")
    return 0


def _cmd_compress(args: argparse.Namespace) -> int:
    from engram_eval.runs.audit import compress_result

    dst = compress_result(args.result)
    print(f"wrote {dst} (verified); removed {args.result} and its sidecar and summary")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    set_offline_env()
    handlers = {"run": _cmd_run, "verify": _cmd_verify, "score": _cmd_score,
                "export": _cmd_export, "compress": _cmd_compress, "tune": _cmd_tune}
    from engram_eval.cli.analysis import HANDLERS as analysis_handlers

    handlers.update(analysis_handlers)
    from engram_eval.cli.scale import HANDLERS as scale_handlers

    handlers.update(scale_handlers)
    try:
        return handlers[args.command](args)
    except (EngramEvalError, FileNotFoundError, FileExistsError, PermissionError) as e:
        msg = str(e).strip()
        print(f"engram-eval {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"engram-eval {args.command}: interrupted; rows written so far are kept "
              "(continue with --resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
