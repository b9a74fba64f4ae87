"""Command line: ``engram-eval run|verify|score|export|...|heldout|answer|judge|production``.

Only this module configures logging and process-wide settings (offline mode for the
Hugging Face libraries, torch threads); the library never does so at import.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from engram_eval.errors import EngramEvalError
from engram_eval.retrieval.flags import ArgumentParser
from engram_eval.retrieval.models import set_offline_env

# The commands live in one module per group: cli.runs (run, merge, compress), cli.audit
# (verify, score, export, trec, catalog, reproduce, publish), cli.analysis (compare, analyze, plot, tune, train-reranker,
# train-encoder, confidence-study), cli.data (split, heldout, make-stress), cli.qa (export-context,
# answer, judge),
# cli.report (report), cli.production (production store|search|run|calibrate|sweep|...). Each exposes
# COMMANDS = {name: (add_parser, handler)}.
Command = tuple[Callable[[Any], None], Callable[[argparse.Namespace], int]]

#: The subcommands in the order ``engram-eval --help`` lists them.
ORDER = ("run", "verify", "reproduce", "publish", "catalog", "score", "export", "compress", "split",
         "heldout", "compare", "plot",
         "analyze", "trec", "make-stress", "merge", "tune", "train-reranker", "train-encoder",
         "confidence-study",
         "export-context", "answer", "judge", "report", "production")


def commands() -> dict[str, Command]:
    from engram_eval.cli import analysis, audit, data, production, qa, report, runs

    table: dict[str, Command] = {}
    for group in (runs, audit, analysis, data, qa, report, production):
        table.update(group.COMMANDS)
    assert set(table) == set(ORDER), sorted(set(table) ^ set(ORDER))
    return {name: table[name] for name in ORDER}


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="engram-eval", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for add_parser, _ in commands().values():
        add_parser(sub)
    return parser


def _redact_logs(args: argparse.Namespace) -> None:
    """Every log line leaves with its URLs stripped of credentials and the command's API key
    (``--api-key-env``) redacted: a library's debug output (the HTTP client logs each
    request's URL, user info included, at INFO) must not carry a secret to the terminal."""
    import os

    from engram_eval.net.secrets import RedactingFilter

    key_env = getattr(args, "api_key_env", None)
    secret = os.environ.get(key_env) if isinstance(key_env, str) else None
    for handler in logging.getLogger().handlers:
        for old in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
            handler.removeFilter(old)
        handler.addFilter(RedactingFilter(secret))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    _redact_logs(args)
    set_offline_env()
    _, handler = commands()[args.command]
    try:
        return handler(args)
    except (EngramEvalError, FileNotFoundError, FileExistsError, PermissionError) as e:
        msg = str(e).strip()
        if isinstance(e, FileNotFoundError) and e.filename and msg.startswith("[Errno"):
            from engram_eval.io import link_problem

            link = link_problem(e.filename)  # a dangling link says where it points
            msg = f"{e.filename}: file not found" + (f" ({link})" if link else "")
        print(f"engram-eval {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except OSError as e:  # an operating-system failure not named where it happened: one line
        from engram_eval.io import describe_os_error

        msg = (f"{e.filename}: {describe_os_error(e, e.filename)}"
               if getattr(e, "filename", None) and not isinstance(getattr(e, "message", None), str)
               else str(e).strip())
        print(f"engram-eval {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"engram-eval {args.command}: interrupted; rows written so far are kept "
              "(continue with --resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
