"""Command-line wiring of the analysis tools: ``split``, ``compare``, ``analyze``, ``plot``,
``trec``.

Kept out of :mod:`engram_eval.cli.main` so that module only needs two small hooks
(``add_parsers(sub)`` in ``build_parser`` and ``HANDLERS`` merged into its dispatch table).
Heavy libraries (numpy, scipy, matplotlib) are imported inside the handlers.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def add_parsers(sub: Any) -> None:
    sp = sub.add_parser("split", help="deterministic stratified tuning/held-out split of a "
                        "dataset (LongMemEval by question type, LoCoMo by conversation)")
    sp.add_argument("dataset", help="LongMemEval (.json/.json.gz) or LoCoMo file")
    sp.add_argument("--holdout", type=float, required=True,
                    help="fraction held out, 0 < f < 1 (per question type; LoCoMo: of "
                    "conversations), rounded half up")
    sp.add_argument("--salt", required=True, help="salt of the sha256 ordering (recorded)")
    sp.add_argument("--output-dir", required=True,
                    help="directory for the parts, split_manifest.json and markers "
                    "(existing files are never overwritten)")
    sp.add_argument("--compress", choices=("auto", "gzip", "none"), default="auto",
                    help="gzip the parts (auto: when the source is gzipped)")

    c = sub.add_parser("compare", help="paired comparison of two runs over the same questions "
                       "(bootstrap intervals, exact McNemar or, with --cluster id-prefix, a "
                       "sign-flip test on clusters; flips, segment consistency)")
    c.add_argument("a", help="baseline run A (.jsonl or .jsonl.gz)")
    c.add_argument("b", help="run B; deltas are B - A")
    c.add_argument("--protocol", default=None,
                   help="default: answerable (LongMemEval) or locomo (LoCoMo rows)")
    c.add_argument("--metrics", nargs="+", help="metric names (default: every stored metric)")
    c.add_argument("--bootstrap", type=int, default=10000, help="bootstrap resamples")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--alpha", type=float, default=0.05, help="1 - confidence level")
    c.add_argument("--segments", type=int, default=5)
    c.add_argument("--segment-by", choices=("hash", "order"), default="hash",
                   help="segments of sha256(question_id) order (default) or row order")
    c.add_argument("--cluster", choices=("question", "id-prefix"), default="question",
                   help="unit of resampling and testing: question (default: paired bootstrap "
                   "over questions, exact McNemar for binary metrics) or id-prefix (questions "
                   "grouped by their id before the first ':', e.g. a LoCoMo conversation: "
                   "cluster bootstrap, and a sign-flip test on cluster sums decides every "
                   "metric; an id without ':' is refused)")
    c.add_argument("--output", help="write the report JSON here (must not exist)")
    c.add_argument("--plot", help="write the per-type delta chart here (.png/.svg/.pdf)")
    c.add_argument("--plot-metrics", nargs="+",
                   default=["recall_any@1", "recall_any@5", "recall_all@5", "ndcg_any@5"])
    _label_args(c)

    pl = sub.add_parser("plot", help="recall_any@k and recall_all@k curves per question type "
                        "with the random baseline")
    pl.add_argument("run", help="result rows (.jsonl or .jsonl.gz)")
    pl.add_argument("--output", required=True, help="figure path (.png/.svg/.pdf; must not exist)")
    pl.add_argument("--protocol", default=None,
                    help="default: answerable (LongMemEval) or locomo (LoCoMo rows)")
    _label_args(pl)

    an = sub.add_parser("analyze", help="where the gold sessions outside the top k were lost "
                        "(signals, fusion, temporal step, rerank, cut-off)")
    an.add_argument("run", help="result rows with session traces (.jsonl or .jsonl.gz)")
    an.add_argument("--k", type=int, default=5)
    an.add_argument("--protocol", default=None,
                    help="default: answerable (LongMemEval) or locomo (LoCoMo rows)")
    an.add_argument("--window", type=int, default=None,
                    help="candidate window (default: the run's rerank_candidates, else 35)")
    an.add_argument("--output", help="write the report JSON here (must not exist)")

    tr = sub.add_parser("trec", help="export a run as a TREC run file and its gold as TREC "
                        "qrels (for trec_eval / ir_measures / ranx)")
    tr.add_argument("run", help="result rows (.jsonl or .jsonl.gz)")
    tr.add_argument("--trec-run", help="write the run file here (must not exist)")
    tr.add_argument("--trec-qrels", help="write the qrels here (must not exist)")
    tr.add_argument("--protocol", default=None,
                    help="gold and question selection (default: answerable, or locomo)")
    tr.add_argument("--tag", help="run tag (default: the retriever name)")
    tr.add_argument("--scores", choices=("auto", "stored", "rank"), default="auto",
                    help="score column: stored scores (must strictly decrease), n - rank + 1, "
                    "or auto (stored when possible)")
    for parser in (sp, c, pl, an, tr):
        _sidecar_arg(parser)


def _sidecar_arg(p: Any) -> None:
    p.add_argument("--no-sidecar", action="store_true",
                   help="do not write <output>.metadata.json (derived-file provenance: file "
                   "and input hashes, generator module hashes, command)")


def _label_args(p: Any) -> None:
    p.add_argument("--split-label", help="split named on the figure (default: from the "
                   "dataset file name: tuning part / held-out part / full file)")
    p.add_argument("--settings-label", help="settings named on the figure (default: retriever "
                   "and fingerprint from the run's summary)")


def split_label(dataset_name: str | None) -> str:
    name = dataset_name or ""
    if ".heldout." in name:
        return "held-out part (engram-eval split)"
    if ".tune." in name:
        return "tuning part (engram-eval split)"
    return "full file"


def denominator_label(run: Any, protocol: str) -> str:
    summ = (run.summary or {}).get("protocols", {}).get(protocol, {})
    den = summ.get("denominator")
    if den is None:
        try:
            from engram_eval.runs.runner import DENOMINATORS

            den = DENOMINATORS.get(protocol)
        except ImportError:  # pragma: no cover - runner being reorganised
            den = None
    return f"{protocol}: {den}" if den else protocol


def _run_settings(run: Any) -> str:
    fp = (run.fingerprint or "?")[:12]
    return f"{run.retriever or '?'} (fingerprint {fp}…, {run.path.name})"


# -- derived-file sidecars ---------------------------------------------------------------------
def _sidecar_of(path: str | os.PathLike[str]) -> Path:
    return Path(str(path) + ".metadata.json")


def _check_free(args: argparse.Namespace, *paths: str | None) -> None:
    """Refuse before any work when an output (or, unless --no-sidecar, its sidecar) exists."""
    for p in paths:
        if not p:
            continue
        for q in (Path(p), *(() if args.no_sidecar else (_sidecar_of(p),))):
            if q.exists():
                raise FileExistsError(f"{q} already exists; refusing to overwrite")


def write_derived_sidecar(out: str | os.PathLike[str], *, generators: list[str],
                          dataset: dict[str, Any] | None, runs: Sequence[Any] = (),
                          files: Sequence[str | os.PathLike[str]] = ()) -> Path:
    """``<out>.metadata.json`` in the layout of scripts/derived_sidecars.py: the file's sha256,
    the generating module(s) and their sha256, the dataset, and the inputs (paths relative to
    the output's directory, with sha256 and, for runs, fingerprint and rows hash)."""
    from engram_eval.io import dump_json, exclusive_write, package_root, sha256_file

    o = Path(out)
    inputs: list[dict[str, Any]] = []
    for r in runs:
        inputs.append({"file": os.path.relpath(r.path, o.parent), "sha256": sha256_file(r.path),
                       "rows_sha256": r.rows_sha256, "run_fingerprint": r.fingerprint})
    for f in files:
        inputs.append({"file": os.path.relpath(f, o.parent), "sha256": sha256_file(Path(f))})
    gens = [{"path": g, "sha256": sha256_file(package_root() / g)} for g in generators]
    meta = {"kind": "engram-eval/derived", "file": o.name, "sha256": sha256_file(o),
            "generator": gens[0], "generators": gens, "dataset": dataset, "inputs": inputs,
            "command": ["engram-eval", *sys.argv[1:]] if Path(sys.argv[0]).name.startswith(
                "engram-eval") else list(sys.argv),
            "created_at": datetime.now(UTC).isoformat(timespec="seconds")}
    side = _sidecar_of(o)
    exclusive_write(side, dump_json(meta))
    return side


def _run_dataset(run: Any) -> dict[str, Any]:
    return {"name": run.dataset_name, "sha256": run.dataset_sha256}


def _cmd_compare(args: argparse.Namespace) -> int:
    from engram_eval.analysis.compare import compare_runs, format_report, load_run
    from engram_eval.io import dump_json, exclusive_write

    _check_free(args, args.output, args.plot)
    a, b = load_run(args.a), load_run(args.b)
    protocol = args.protocol or _default_protocol(a)
    rep = compare_runs(a, b, protocol=protocol, metrics=args.metrics,
                       n_boot=args.bootstrap, seed=args.seed, segments=args.segments,
                       segment_by=args.segment_by, alpha=args.alpha, cluster=args.cluster)
    print(format_report(rep))
    if args.plot:
        from engram_eval.analysis.plots import FigureLabels, delta_chart

        conf = int(round(rep["settings"]["confidence"] * 100))
        labels = FigureLabels(
            dataset=f"{rep['dataset']['name']} (sha256 {str(rep['dataset']['sha256'])[:12]}…)",
            split=args.split_label or split_label(rep["dataset"]["name"]),
            denominator=denominator_label(a, protocol) + f"; n={rep['n']}",
            settings=args.settings_label or (
                f"A = {_run_settings(a)}; B = {_run_settings(b)}; {_stats_label(rep, conf)}"))
        delta_chart(rep, args.plot_metrics, labels, args.plot,
                    title=f"{b.retriever} vs {a.retriever}: delta (B - A) per question type")
        if not args.no_sidecar:
            write_derived_sidecar(args.plot, generators=["engram_eval/analysis/plots.py",
                                                         "engram_eval/analysis/compare.py"],
                                  dataset=_run_dataset(a), runs=[a, b])
        print(f"wrote {args.plot}")
    if args.output:
        exclusive_write(args.output, dump_json(rep))
        if not args.no_sidecar:
            write_derived_sidecar(args.output, generators=["engram_eval/analysis/compare.py"],
                                  dataset=_run_dataset(a), runs=[a, b])
        print(f"wrote {args.output}")
    return 0


def _stats_label(rep: Any, conf: int) -> str:
    """The statistics named on the delta chart: what the report says was used."""
    st = rep["settings"]
    if "resampling_unit" not in st:  # question mode
        return (f"{conf}% paired bootstrap, {st['bootstrap']} resamples, seed {st['seed']}; "
                "exact McNemar")
    methods = {e["cluster_test"]["method"] for gv in rep["groups"].values()
               for e in gv["metrics"].values()}
    test = ("exact sign-flip test" if methods == {"exact sign-flip"} else
            "Monte-Carlo sign-flip test" if methods == {"monte-carlo sign-flip"} else
            "sign-flip test (exact, or Monte-Carlo above 16 clusters)")
    return (f"{conf}% cluster bootstrap by conversation (id prefix), {st['clusters']} clusters; "
            f"{test}; {st['bootstrap']} resamples, seed {st['seed']}")


def _default_protocol(run: Any) -> str:
    first = run.rows[0]["metrics"] if run.rows else {}
    return "locomo" if isinstance(first, dict) and "locomo" in first else "answerable"


def _cmd_plot(args: argparse.Namespace) -> int:
    from engram_eval.analysis.compare import load_run
    from engram_eval.analysis.plots import FigureLabels, curves_from_rows, recall_curves
    from engram_eval.scoring.metrics import KS

    _check_free(args, args.output)
    run = load_run(args.run)
    protocol = args.protocol or _default_protocol(run)
    curves = curves_from_rows(run.rows, protocol, KS)
    labels = FigureLabels(
        dataset=f"{run.dataset_name} (sha256 {str(run.dataset_sha256)[:12]}…)",
        split=args.split_label or split_label(run.dataset_name),
        denominator=denominator_label(run, protocol) + f"; n={curves['overall']['n']}",
        settings=args.settings_label or _run_settings(run))
    recall_curves(curves, KS, labels, args.output,
                  title=f"{run.retriever}: recall@k per question type (dashed: random ranking)")
    if not args.no_sidecar:
        write_derived_sidecar(args.output, generators=["engram_eval/analysis/plots.py"],
                              dataset=_run_dataset(run), runs=[run])
    print(f"wrote {args.output}")
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from engram_eval.analysis.analyze import analyze_run, format_report
    from engram_eval.io import dump_json, exclusive_write

    _check_free(args, args.output)
    rep = analyze_run(args.run, k=args.k, protocol=args.protocol, window=args.window)
    print(format_report(rep))
    if args.output:
        exclusive_write(args.output, dump_json(rep))
        if not args.no_sidecar:
            r = rep["run"]
            write_derived_sidecar(args.output, generators=["engram_eval/analysis/analyze.py"],
                                  dataset={"name": r["dataset"], "sha256": r["dataset_sha256"]},
                                  files=[r["path"]])
        print(f"wrote {args.output}")
    return 0


def _cmd_trec(args: argparse.Namespace) -> int:
    from engram_eval.analysis.compare import load_run
    from engram_eval.runs.trec import export_run

    _check_free(args, args.trec_run, args.trec_qrels)
    out = export_run(args.run, run_out=args.trec_run, qrels_out=args.trec_qrels,
                     protocol=args.protocol, tag=args.tag, scores=args.scores)
    print(f"{out.n_questions} questions; score column: {out.score_source} ({out.reason})")
    run = load_run(args.run) if not args.no_sidecar else None
    for path in (args.trec_run, args.trec_qrels):
        if path and run is not None:
            write_derived_sidecar(path, generators=["engram_eval/runs/trec.py"],
                                  dataset=_run_dataset(run), runs=[run])
    if args.trec_run:
        print(f"wrote {args.trec_run}")
    if args.trec_qrels:
        print(f"wrote {args.trec_qrels} ({out.n_qrels} judgements)")
    return 0


def _cmd_split(args: argparse.Namespace) -> int:
    from engram_eval.data.split import MANIFEST_NAME, split_dataset

    _check_free(args, os.path.join(args.output_dir, MANIFEST_NAME))
    out = split_dataset(args.dataset, holdout=args.holdout, salt=args.salt,
                        output_dir=args.output_dir, compress=args.compress)
    if not args.no_sidecar:
        write_derived_sidecar(out.manifest_path, generators=["engram_eval/data/split.py"],
                              dataset={"name": out.manifest["source"]["name"],
                                       "sha256": out.manifest["source"]["sha256"]},
                              files=[args.dataset, *out.part_paths.values()])
    m = out.manifest
    print(f"split {m['source']['name']} (sha256 {m['source']['sha256']}) "
          f"format={m['format']} unit={m['unit']} salt={m['salt']!r} holdout={m['holdout']}")
    for name, path in out.part_paths.items():
        part = m["parts"][name]
        types = ", ".join(f"{t}={n}" for t, n in part["by_type"].items())
        print(f"  {name}: {path} ({part['n_records']} records, {part['n_questions']} "
              f"questions; {types}) sha256 {part['sha256']}")
    print(f"manifest {out.manifest_path}")
    return 0


HANDLERS = {"split": _cmd_split, "compare": _cmd_compare, "plot": _cmd_plot,
            "analyze": _cmd_analyze, "trec": _cmd_trec}
