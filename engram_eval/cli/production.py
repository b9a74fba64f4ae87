"""``engram-eval production store|search|run|calibrate|sweep|calibrate-sessions|measure``:
production search (a persisted memory store and its confidence-gated search,
:mod:`engram_eval.production`) and its evaluation (:mod:`engram_eval.production_eval`).

Every subcommand that builds a search engine takes the production settings the way ``run``
takes the retrieval settings: ``--settings RECORD`` (a JSON settings mapping, or a production
output holding one; default: the package defaults) and then one option per field of
:class:`~engram_eval.production.settings.ProductionSettings` (generated from the fields by
:func:`engram_eval.retrieval.flags.add_field_arguments`: same names, help and shown defaults
as the fields; an explicit value overrides the record). The runtime fields (batch size,
cache) are not options: a command that caches takes ``--cache-dir`` / ``--no-cache``.

The scripts in ``benchmarks/production_retrieval/`` are thin wrappers over these subcommands
(:func:`main` with the subcommand name first) and accept the same arguments as before.
This module imports nothing from the other command groups, so what a production run executes
stays the production closure (its manifest hashes it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from engram_eval.errors import EngramEvalError
from engram_eval.io import NotRegularFileError, UnsafePathError
from engram_eval.retrieval.flags import (
    ArgumentParser,
    count_int,
    finite_float,
    output_file,
    seed_int,
)

#: The settings groups that get options (every group of ProductionSettings but runtime).
SETTINGS_GROUPS = {
    "dense": "dense retrieval over memory pieces",
    "lexical": "BM25 signals and pseudo-relevance feedback",
    "fusion": "how the signals are combined",
    "temporal": "the query's time window",
    "rerank": "cross-encoder rerank (in production, with a calibration of versions 1-3, its "
              "sigmoid is the confidence)",
    "coverage": "prior-leader coverage after a rerank",
    "gate": "the confidence gate: candidates, excerpt retry, limit, cut-off, calibration",
}


def add_settings_arguments(p: argparse.ArgumentParser) -> None:
    from engram_eval.production.settings import (
        RECORDED_SETTINGS_V1,
        RECORDED_SETTINGS_V4,
        RECORDED_SETTINGS_V5,
        RECORDED_SETTINGS_V6,
        ProductionSettings,
    )
    from engram_eval.retrieval.flags import add_field_arguments

    p.add_argument("--settings", metavar="RECORD",
                   help="start from these recorded settings (a JSON settings mapping, or a "
                        "production output whose 'settings' it holds) instead of the package "
                        f"defaults; the published runs' settings are {RECORDED_SETTINGS_V1}, "
                        f"calibration v4's {RECORDED_SETTINGS_V4}, calibration v5's "
                        f"{RECORDED_SETTINGS_V5}, calibration v6's {RECORDED_SETTINGS_V6}. A "
                        "field the record lacks takes the value production used before it "
                        "was recorded. The options "
                        "below override it.")
    add_field_arguments(p, ProductionSettings, SETTINGS_GROUPS)


def add_cache_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-dir", help="embedding cache (default ~/.cache/engram-eval)")
    p.add_argument("--no-cache", action="store_true", help="no embedding cache")


def settings_from(args: argparse.Namespace) -> Any:
    """The settings of ``args``: ``--settings`` (else the package defaults), then every
    settings option given."""
    import dataclasses
    import json
    from pathlib import Path

    from engram_eval.errors import ConfigError
    from engram_eval.production.settings import ProductionSettings, data_file
    from engram_eval.retrieval.flags import given_fields

    base = ProductionSettings()
    if getattr(args, "settings", None):
        given = Path(args.settings)
        path = given if given.exists() else data_file(given)  # (a package file's old place)
        try:
            from engram_eval.io import read_regular_text

            record = json.loads(read_regular_text(path))
        except (OSError, ValueError) as e:
            raise ConfigError(f"--settings {args.settings}: {e}") from None
        if isinstance(record, dict) and isinstance(record.get("settings"), dict):
            record = record["settings"]
        if not isinstance(record, dict):
            raise ConfigError(f"--settings {args.settings}: not a settings mapping")
        base = ProductionSettings.from_recorded(record)
    try:
        return dataclasses.replace(base, **given_fields(args, ProductionSettings))
    except TypeError as e:  # pragma: no cover - every option is a field
        raise ConfigError(str(e)) from e


def engine_from(args: argparse.Namespace, *, cache: bool = False) -> Any:
    """The search engine of ``args``' settings; with ``cache``, the embedding cache of
    ``--cache-dir`` unless ``--no-cache``."""
    from engram_eval.production.search import Engine

    vector_cache = None
    if cache and not args.no_cache:
        from engram_eval.retrieval.cache import VectorCache, default_cache_dir

        vector_cache = VectorCache(args.cache_dir or default_cache_dir())
    return Engine(settings_from(args), vector_cache=vector_cache)


# --------------------------------------------------------------------------- store, search
def read_memories(path: str) -> list[Any]:
    """Memories from a JSON file: a list of ``{"id", "text", "date"?}``, or a mapping whose
    ``memories`` is one, checked (:func:`engram_eval.production.store.memories_from`: one
    DataError naming the file, the memory and the field or key)."""
    from engram_eval.data._jsonio import read_json_document
    from engram_eval.production.store import memories_from

    doc = read_json_document(path)
    return memories_from(path, doc.get("memories") if isinstance(doc, dict) else doc)


def cmd_store(args: argparse.Namespace) -> int:
    from engram_eval.production.store import add_to_store

    memories = read_memories(args.memories)  # checked before a store is created
    added, total = add_to_store(args.store, engine_from(args), memories)
    print(f"{args.store}: added {added} memor{'y' if added == 1 else 'ies'}; {total} stored")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    import json

    from engram_eval.production.store import MemoryStore

    engine = engine_from(args)
    with MemoryStore.open(args.store, engine) as store:
        resp = store.search(args.query, now=args.now)
    doc: dict[str, Any] = {"question": resp.question,
                           "results": [{"id": r.id, "confidence": r.confidence,
                                        "date": r.date, "text": r.text} for r in resp.results]}
    if args.trace:
        doc["candidates"] = list(resp.candidates)
    print(json.dumps(doc, indent=2, ensure_ascii=False))
    return 0


# --------------------------------------------------------------------------- the parsers
def _evaluation(name: str) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        from engram_eval.production_eval import commands

        engine = engine_from(args, cache=name in ("sweep", "calibrate_sessions", "measure"))
        return int(getattr(commands, name)(args, engine))

    return handler


def add_subcommands(sub: Any) -> None:
    """Every production subcommand, on ``sub`` (an ``add_subparsers`` result)."""
    raw = argparse.RawDescriptionHelpFormatter
    s = sub.add_parser("store", formatter_class=raw,
                       help="add memories to a store (created when absent)",
                       description="Add the memories of a JSON file to a persisted store "
                       "(SQLite: records and their vectors), creating it when absent. A store "
                       "is searched only with the embedding model and piece settings it was "
                       "written with.")
    s.add_argument("store", type=output_file, help="store file (SQLite)")
    s.add_argument("--memories", required=True,
                   help='JSON: [{"id": ..., "text": ..., "date": "YYYY-MM-DD"}, ...]')
    add_settings_arguments(s)
    s.set_defaults(production_handler=cmd_store)

    q = sub.add_parser("search", formatter_class=raw,
                       help="confidence-gated search of a store",
                       description="Search a store: the retrieval pipeline, then the gate "
                       "(results with confidence >= --min-confidence, best first, at most "
                       "--limit; possibly none). The cut-off is a relevance threshold, not a "
                       "probability of correctness. Prints JSON.")
    q.add_argument("store", help="store file (SQLite), written by `production store`")
    q.add_argument("--query", required=True)
    q.add_argument("--now", default="", help="the date the query is asked (YYYY-MM-DD; "
                   "resolves relative time expressions)")
    q.add_argument("--trace", action="store_true", help="also print every candidate's trace")
    add_settings_arguments(q)
    q.set_defaults(production_handler=cmd_search)

    r = sub.add_parser("run", formatter_class=raw,
                       help="production-confidence check of a fixture (validate, freeze, run)",
                       description="Gated search over a persisted store per case of a "
                       "production fixture, scored against its gold.\n\n"
                       "Validate a fixture and freeze a manifest (exclusive creation):\n"
                       "  engram-eval production run --fixture fixtures/production/holdout.json"
                       " \\\n      --source-root . --validate-only --freeze-source "
                       "/abs/holdout.frozen.json\n"
                       "Run (held-out fixtures need --frozen-source; outputs are never "
                       "overwritten):\n"
                       "  engram-eval production run --fixture fixtures/production/holdout.json"
                       " \\\n      --source-root . --frozen-source /abs/holdout.frozen.json \\\n"
                       "      --output results/production/holdout.json --work-dir "
                       "/tmp/prod-work\n\nExit status: 0 done, 2 refused or bad input.")
    r.add_argument("--fixture", required=True, help="production fixture JSON")
    r.add_argument("--source-root", required=True,
                   help="repository root whose sources are hashed (must hold the running "
                        "engram_eval package)")
    r.add_argument("--validate-only", action="store_true",
                   help="validate the fixture (and calibration) and stop")
    r.add_argument("--freeze-source", metavar="MANIFEST", type=output_file,
                   help="with --validate-only: write the frozen manifest here (exclusive)")
    r.add_argument("--frozen-source", metavar="MANIFEST",
                   help="run only if this frozen manifest matches (required for held-out "
                        "fixtures)")
    r.add_argument("--output", type=output_file, help="result JSON (must not exist); summary and .metadata.json "
                   "sidecar are written beside it")
    r.add_argument("--work-dir", help="directory for the per-case stores (one per case)")
    r.add_argument("--ledger", type=output_file, help="held-out ledger (default: SOURCE_ROOT/results/"
                   "heldout_ledger.json, or $ENGRAM_EVAL_LEDGER)")
    add_settings_arguments(r)
    r.set_defaults(production_handler=_evaluation("run"))

    c = sub.add_parser("calibrate", formatter_class=raw,
                       help="fit the offline calibration on a development fixture",
                       description="Fit the offline confidence calibration (logistic "
                       "regression of dense, terms and time) on every (question, memory) pair "
                       "of a development fixture; write the calibration file and, with "
                       "--report, a report and a reliability plot beside it. The published "
                       "runs' calibration_v1.json was fitted under --settings "
                       "engram_eval/production/data/settings_v1.json; "
                       "calibration_v2.json under engram_eval/production/data/settings_v2.json "
                       "(the defaults until calibration v4).")
    c.add_argument("--fixture", required=True, help="development fixture JSON")
    c.add_argument("--output", required=True, type=output_file,
                   help="calibration JSON (the package file)")
    c.add_argument("--report", type=output_file, help="also write this report JSON and a .png reliability plot "
                   "beside it")
    c.add_argument("--l2", type=finite_float, default=1e-3, help="L2 penalty (default 1e-3)")
    add_settings_arguments(c)
    c.set_defaults(production_handler=_evaluation("calibrate"))

    w = sub.add_parser("sweep", formatter_class=raw,
                       help="abstention on real data: the gate at session level, every cut-off",
                       description="For every question of a dataset, its haystack sessions are "
                       "the memories (user text for LongMemEval; every turn for LoCoMo), "
                       "searched by production search. Unanswerable: LongMemEval _abs "
                       "questions, LoCoMo category 5. For each cut-off from 0.05 to 0.95: "
                       "answerable acceptance rate, top-accepted-is-gold rate (over all "
                       "answerable questions), unanswerable abstention rate. A held-out part "
                       "is refused. Writes JSON and a PNG beside it (neither may exist).")
    w.add_argument("dataset")
    w.add_argument("--dataset-label", required=True,
                   help='e.g. "LongMemEval S cleaned, development split"')
    w.add_argument("--output", required=True, type=output_file,
                   help="JSON (must not exist); PNG written beside")
    w.add_argument("--max-questions", type=count_int,
                   help="first N questions only (wiring checks)")
    add_cache_arguments(w)
    add_settings_arguments(w)
    w.set_defaults(production_handler=_evaluation("sweep"))

    f = sub.add_parser("calibrate-sessions", formatter_class=raw,
                       help="fit calibration v3 on real sessions of tuning parts, or v4 "
                            "per memory shape",
                       description="Fit calibration v3 (per-question context features, "
                       "out-of-fold isotonic or Platt mapping, a cut-off chosen for a target "
                       "precision) on tuning parts only (a held-out part is refused); write "
                       "the calibration, the recorded settings that use it and a report.\n\n"
                       "With --per-shape: calibration v4, one such model per memory shape "
                       "(chat, people, short), each fitted on the parts whose data has that "
                       "shape (read from the data: LongMemEval sessions are chat, LoCoMo "
                       "conversations people, a production fixture of isolated memories "
                       "short); production fixtures are given with --fixture (a held-out "
                       "fixture is refused). Its recorded settings keep min_confidence. "
                       "With --feature-set v4, finished runs can stand for a part "
                       "(--run LABEL=RUN, repeated for a part's runs, with --run-data "
                       "LABEL=DATASET): calibration reads the features their traces hold, "
                       "or, for a run made before the pipeline traced them, computes them "
                       "from its traces with the same functions.")
    f.add_argument("--part", action="append", metavar="LABEL=PATH",
                   help="a tuning part of a dataset (LongMemEval or LoCoMo)")
    f.add_argument("--fixture", action="append", metavar="LABEL=PATH",
                   help="with --per-shape: a training production fixture (train_short.json)")
    f.add_argument("--run", action="append", default=[], metavar="LABEL=RUN",
                   help="with --per-shape --feature-set v4: a finished run of a tuning part "
                        "(several with one label form one part: disjoint questions)")
    f.add_argument("--run-data", action="append", default=[], metavar="LABEL=DATASET",
                   help="the dataset (tuning part) the runs of LABEL were made on")
    f.add_argument("--per-shape", action="store_true",
                   help="calibration v4: one model per memory shape read from the data")
    f.add_argument("--feature-set", default="v3",
                   help="with --per-shape: the named feature set "
                        "(engram_eval.production.features.FEATURE_SETS; default v3)")
    f.add_argument("--shape-target", action="append", default=[], metavar="SHAPE=X",
                   help="with --per-shape: that shape's target precision (others: "
                        "--target-precision)")
    f.add_argument("--nested-cv", action="store_true",
                   help="with --per-shape and --report: judge each shape's whole fit (score "
                        "model, mapping, cut-off) by nested cross-validation -- an outer "
                        "GroupKFold(--folds) whose folds are scored by the fit on the others "
                        "-- and report AUROC, ECE, answered precision and unanswerable "
                        "abstention with bootstrap intervals (the choosing evidence)")
    f.add_argument("--output", required=True, type=output_file,
                   help="calibration JSON (the package file)")
    f.add_argument("--settings-output", type=output_file,
                   help="also write the recorded settings that use it")
    f.add_argument("--report", type=output_file, help="report JSON (must not exist); .png beside it")
    f.add_argument("--every", action="append", default=[], metavar="LABEL=K",
                   help="for that part: every unanswerable question and every K-th other one "
                        "(file order)")
    f.add_argument("--folds", type=count_int, default=5)
    f.add_argument("--C", type=finite_float, default=1.0)
    f.add_argument("--shape-C", action="append", default=[], metavar="SHAPE=C",
                   help="with --per-shape: that shape's C (others: --C)")
    f.add_argument("--mapping", choices=("isotonic", "platt"), default="isotonic")
    f.add_argument("--calibrate-on", choices=("top", "pairs"), default="top")
    f.add_argument("--target-precision", type=finite_float, default=0.9)
    f.add_argument("--min-returned", type=int, default=20)
    f.set_defaults(production_handler=_evaluation("calibrate_sessions"))

    m = sub.add_parser("measure", formatter_class=raw,
                       help="selective-retrieval measurement of the confidence on one part",
                       description="Measure a version-3 or version-4 calibration as "
                       "selective retrieval on one part (held-out parts only under a frozen "
                       "manifest: --validate-only --freeze-source M first, then "
                       "--frozen-source M), at the gate's cut-off for the part's memory shape "
                       "(--cutoff, --min-confidence). The part is searched by production "
                       "search, or, with --run (version 4), read from finished runs of it: "
                       "the features their traces hold, the model of the part's shape. "
                       "Outputs are never overwritten.")
    m.add_argument("dataset")
    m.add_argument("--run", action="append", metavar="RUN",
                   help="a finished run of DATASET whose traced candidates (the first "
                        "--candidates) and features are measured (repeat for the runs of one "
                        "part: disjoint questions); its sha256 is in the manifest")
    m.add_argument("--source-root", required=True)
    m.add_argument("--dataset-label")
    m.add_argument("--output", type=output_file, help="JSON (must not exist); .png beside it")
    m.add_argument("--validate-only", action="store_true")
    m.add_argument("--freeze-source", metavar="MANIFEST", type=output_file)
    m.add_argument("--frozen-source", metavar="MANIFEST")
    m.add_argument("--ledger", type=output_file)
    m.add_argument("--bins", type=count_int, default=15)
    m.add_argument("--resamples", type=count_int, default=2000)
    m.add_argument("--seed", type=seed_int, default=0)
    m.set_defaults(production_handler=_evaluation("measure"))
    for p in (f, m):
        p.add_argument("--max-questions", type=count_int,
                       help="first N questions (wiring checks)")
        add_cache_arguments(p)
        add_settings_arguments(p)


def add_production(sub: Any) -> None:
    p = sub.add_parser("production", help="production search: store, search, and its "
                       "evaluation (run, calibrate, sweep, calibrate-sessions, measure)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_subcommands(p.add_subparsers(dest="production_command", required=True,
                                     metavar="{store,search,run,calibrate,sweep,"
                                     "calibrate-sessions,measure}"))


def cmd_production(args: argparse.Namespace) -> int:
    return int(args.production_handler(args))


COMMANDS = {"production": (add_production, cmd_production)}


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """``engram-eval production ARGV`` on its own (the benchmark wrappers call it with the
    subcommand first): the same parsing, offline mode and one-line errors (exit status 2)
    as ``engram-eval``, without loading the other command groups."""
    from engram_eval.retrieval.models import set_offline_env

    parser = ArgumentParser(prog=prog or "engram-eval production",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_subcommands(parser.add_subparsers(dest="production_command", required=True))
    args = parser.parse_args(argv)
    set_offline_env()
    try:
        return cmd_production(args)
    except (EngramEvalError, FileNotFoundError, FileExistsError, PermissionError,
            NotRegularFileError, UnsafePathError) as e:
        print(f"{parser.prog} {args.production_command}: error: {str(e).strip()}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
