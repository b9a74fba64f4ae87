"""Commands that study finished runs: ``compare`` (paired comparison of two runs),
``analyze`` (where the missed gold sessions were lost), ``plot`` (recall curves), ``tune``
(fusion/temporal settings chosen offline from a run's traces) and ``confidence-study``
(which traced signals say that the answer is there, out of fold on a tuning part).

Heavy libraries (numpy, scipy, matplotlib) are imported inside the handlers.
"""

from __future__ import annotations

import argparse
from typing import Any

from engram_eval.cli._common import (
    add_overlay_arg,
    add_sidecar_arg,
    bootstrap_count,
    check_free,
    finite_float,
    output_file,
    seed_int,
)
from engram_eval.errors import EngramEvalError
from engram_eval.provenance.sources import derived_sources


def _label_args(p: Any) -> None:
    p.add_argument("--split-label", help="split named on the figure (default: from the "
                   "dataset file name: tuning part / held-out part / full file)")
    p.add_argument("--settings-label", help="settings named on the figure (default: retriever "
                   "and fingerprint from the run's summary)")


def add_compare(sub: Any) -> None:
    c = sub.add_parser("compare", help="paired comparison of two runs over the same questions "
                       "(bootstrap intervals, exact McNemar or, with --cluster id-prefix, a "
                       "sign-flip test on clusters; flips, segment consistency)")
    c.add_argument("a", help="baseline run A (.jsonl or .jsonl.gz)")
    c.add_argument("b", help="run B; deltas are B - A")
    c.add_argument("--protocol", default=None,
                   help="default: answerable (LongMemEval) or locomo (LoCoMo rows)")
    c.add_argument("--metrics", nargs="+", help="metric names (default: every stored metric)")
    c.add_argument("--bootstrap", type=bootstrap_count, default=10000,
                   help="bootstrap resamples (default 10000, at most 100000)")
    c.add_argument("--seed", type=seed_int, default=0)
    c.add_argument("--alpha", type=finite_float, default=0.05, help="1 - confidence level")
    c.add_argument("--segments", type=int, default=5)
    c.add_argument("--segment-by", choices=("hash", "order"), default="hash",
                   help="segments of sha256(question_id) order (default) or row order")
    c.add_argument("--segment-size", type=int, default=None, metavar="S",
                   help="also the segmented check (Memo's falsifier): fixed consecutive "
                   "segments of S questions in row order, per-segment deltas and an 'every "
                   "segment positive' verdict per metric")
    c.add_argument("--cluster", choices=("question", "id-prefix"), default="question",
                   help="unit of resampling and testing: question (default: paired bootstrap "
                   "over questions, exact McNemar for binary metrics) or id-prefix (questions "
                   "grouped by their id before the first ':', e.g. a LoCoMo conversation: "
                   "cluster bootstrap, and a sign-flip test on cluster sums decides every "
                   "metric; an id without ':' is refused)")
    c.add_argument("--output", type=output_file,
                   help="write the report JSON here (must not exist)")
    add_overlay_arg(c, "; the comparison is also made on the corrected gold (report keys "
                    "gold_overlay, audited, verdict_moved). Needs --dataset")
    c.add_argument("--dataset", help="with --gold-overlay: the dataset both runs were made "
                   "over (sha256 checked), against which the overlay is resolved")
    c.add_argument("--plot", type=output_file, help="write the per-type delta chart here (.png/.svg/.pdf)")
    c.add_argument("--plot-metrics", nargs="+",
                   default=["recall_any@1", "recall_any@5", "recall_all@5", "ndcg_any@5"])
    _label_args(c)
    add_sidecar_arg(c)


def cmd_compare(args: argparse.Namespace) -> int:
    from engram_eval.analysis.compare import compare_runs, format_report
    from engram_eval.io import dump_json, exclusive_write
    from engram_eval.provenance.derived import write_derived_sidecar
    from engram_eval.runs.reader import read_run

    check_free(args, args.output, args.plot)
    a, b = read_run(args.a), read_run(args.b)
    protocol = a.protocol(args.protocol)
    b.protocol(protocol)  # both runs scored under it
    settings = {"protocol": protocol, "metrics": args.metrics, "n_boot": args.bootstrap,
                "seed": args.seed, "segments": args.segments, "segment_by": args.segment_by,
                "alpha": args.alpha, "cluster": args.cluster,
                "segment_size": args.segment_size}
    if args.gold_overlay:
        from engram_eval.analysis.compare_audited import compare_audited, format_audited

        if not args.dataset:
            raise EngramEvalError("compare: --gold-overlay needs --dataset (the file both "
                                  "runs were made over)")
        rep = compare_audited(a, b, args.gold_overlay, args.dataset, **settings)
    elif args.dataset:
        raise EngramEvalError("compare: --dataset goes with --gold-overlay")
    else:
        rep = compare_runs(a, b, **settings)
    print(format_report(rep))
    if args.gold_overlay:
        print(format_audited(rep))
    if args.plot:
        from engram_eval.analysis.plots import (
            FigureLabels,
            compare_stats_label,
            delta_chart,
            denominator_label,
            run_settings_label,
            split_label,
        )

        conf = int(round(rep["settings"]["confidence"] * 100))
        labels = FigureLabels(
            dataset=f"{rep['dataset']['name']} (sha256 {str(rep['dataset']['sha256'])[:12]}…)",
            split=args.split_label or split_label(rep["dataset"]["name"]),
            denominator=denominator_label(a, protocol) + f"; n={rep['n']}",
            settings=args.settings_label or (
                f"A = {run_settings_label(a)}; B = {run_settings_label(b)}; "
                f"{compare_stats_label(rep, conf)}"))
        delta_chart(rep, args.plot_metrics, labels, args.plot,
                    title=f"{b.retriever} vs {a.retriever}: delta (B - A) per question type")
        if not args.no_sidecar:
            write_derived_sidecar(args.plot, generators=list(derived_sources("compare-plot")),
                                  dataset=a.dataset(), runs=[a, b])
        print(f"wrote {args.plot}")
    if args.output:
        exclusive_write(args.output, dump_json(rep))
        if not args.no_sidecar:
            write_derived_sidecar(args.output, generators=list(derived_sources(
                "compare-audited" if args.gold_overlay else "compare")),
                dataset=a.dataset(), runs=[a, b],
                files=[args.gold_overlay] if args.gold_overlay else [])
        print(f"wrote {args.output}")
    return 0


def add_plot(sub: Any) -> None:
    pl = sub.add_parser("plot", help="recall_any@k and recall_all@k curves per question type "
                        "with the random baseline")
    pl.add_argument("run", help="result rows (.jsonl or .jsonl.gz)")
    pl.add_argument("--output", required=True, type=output_file, help="figure path (.png/.svg/.pdf; must not exist)")
    pl.add_argument("--protocol", default=None,
                    help="default: answerable (LongMemEval) or locomo (LoCoMo rows)")
    _label_args(pl)
    add_sidecar_arg(pl)


def cmd_plot(args: argparse.Namespace) -> int:
    from engram_eval.analysis.plots import (
        FigureLabels,
        curves_from_rows,
        denominator_label,
        recall_curves,
        run_settings_label,
        split_label,
    )
    from engram_eval.provenance.derived import write_derived_sidecar
    from engram_eval.runs.reader import read_run
    from engram_eval.scoring.metrics import KS

    check_free(args, args.output)
    run = read_run(args.run)
    protocol = run.protocol(args.protocol)
    curves = curves_from_rows(run.rows, protocol, KS)
    labels = FigureLabels(
        dataset=f"{run.dataset_name} (sha256 {str(run.dataset_sha256)[:12]}…)",
        split=args.split_label or split_label(run.dataset_name),
        denominator=denominator_label(run, protocol) + f"; n={curves['overall']['n']}",
        settings=args.settings_label or run_settings_label(run))
    recall_curves(curves, KS, labels, args.output,
                  title=f"{run.retriever}: recall@k per question type (dashed: random ranking)")
    if not args.no_sidecar:
        write_derived_sidecar(args.output, generators=list(derived_sources("plot")),
                              dataset=run.dataset(), runs=[run])
    print(f"wrote {args.output}")
    return 0


def add_analyze(sub: Any) -> None:
    an = sub.add_parser("analyze", help="where the gold sessions outside the top k were lost "
                        "(signals, fusion, temporal step, rerank, cut-off)")
    an.add_argument("run", help="result rows with session traces (.jsonl or .jsonl.gz)")
    an.add_argument("--k", type=int, default=5)
    an.add_argument("--protocol", default=None,
                    help="default: answerable (LongMemEval) or locomo (LoCoMo rows)")
    an.add_argument("--window", type=int, default=None,
                    help="candidate window (default: the run's rerank_candidates, else 35)")
    an.add_argument("--output", type=output_file,
                    help="write the report JSON here (must not exist)")
    add_sidecar_arg(an)


def cmd_analyze(args: argparse.Namespace) -> int:
    from engram_eval.analysis.analyze import analyze_run, format_report
    from engram_eval.io import dump_json, exclusive_write
    from engram_eval.provenance.derived import write_derived_sidecar

    check_free(args, args.output)
    rep = analyze_run(args.run, k=args.k, protocol=args.protocol, window=args.window)
    print(format_report(rep))
    if args.output:
        exclusive_write(args.output, dump_json(rep))
        if not args.no_sidecar:
            r = rep["run"]
            write_derived_sidecar(args.output, generators=list(derived_sources("analyze")),
                                  dataset={"name": r["dataset"], "sha256": r["dataset_sha256"]},
                                  files=[r["path"]])
        print(f"wrote {args.output}")
    return 0


def add_tune(sub: Any) -> None:
    tn = sub.add_parser("tune", help="choose fusion/temporal settings offline from a run's "
                        "traces (no re-encoding)")
    tn.add_argument("run", nargs="+", help="result JSONL(.gz) of a hybrid run that traced its "
                    "signals; several runs (tuning parts, e.g. LongMemEval and LoCoMo) are "
                    "tuned together, separately per chat structure "
                    "(engram_eval.analysis.tune_parts)")
    tn.add_argument("--grid", required=True, help="grid YAML (see engram_eval.analysis.tune.load_grid)")
    tn.add_argument("--output", required=True, type=output_file, help="config YAML to write (must not exist); "
                    "the report goes to OUTPUT.tuning.json")
    tn.add_argument("--objective", default=None, help="comma-separated metrics averaged "
                    "per question (default: recall_any@1,recall_all@5,ndcg_any@5)")
    tn.add_argument("--protocol", action="append", default=None, help="gold protocol "
                    "(default: answerable; with several runs: once for all, or once per run "
                    "in order; default per run: answerable / locomo_no_adversarial)")
    tn.add_argument("--combine", default="worst-ratio", choices=["worst-ratio", "mean"],
                    help="several runs: how the parts' scores combine (default worst-ratio: "
                    "the smallest ratio of a part's score to its best)")
    tn.add_argument("--cluster", default="id-prefix", choices=["id-prefix", "none"],
                    help="cross-validation unit, for one run or several (default "
                    "id-prefix: the question id before ':', a LoCoMo conversation; an id "
                    "without ':' is its own unit; none: the question)")
    tn.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    tn.add_argument("--seed", type=seed_int, default=0, help="fold assignment seed (default 0)")


def cmd_tune(args: argparse.Namespace) -> int:
    from engram_eval.analysis.tune import DEFAULT_OBJECTIVE, tune

    objective = args.objective.split(",") if args.objective else list(DEFAULT_OBJECTIVE)
    if len(args.run) > 1:
        from engram_eval.analysis.tune_parts import tune_parts

        res = tune_parts(args.run, args.grid, args.output, protocols=args.protocol,
                         objective=objective, rule=args.combine, folds=args.folds,
                         seed=args.seed, cluster=None if args.cluster == "none" else args.cluster)
        for s, c in res.report["structures"].items():
            print(f"{s}: chosen {c['chosen']} ({c['n_candidates']} candidates, combined "
                  f"{c['combined_score']:.4f})")
            for p in c["parts"]:
                print(f"  {p['path']}: in-sample {p['in_sample_score']:.4f}, own settings "
                      f"{p['run_settings_score']:.4f}, CV {p['cv_estimate']:.4f}")
        print(f"wrote {res.config_path} and {res.report_path}")
        return 0
    protocol = args.protocol[0] if args.protocol else "answerable"
    res = tune(args.run[0], args.grid, args.output, objective=objective, protocol=protocol,
               folds=args.folds, seed=args.seed,
               cluster=None if args.cluster == "none" else args.cluster)
    r = res.report
    cv = r["cross_validation"]
    print(f"{r['n_candidates']} candidates, {r['n_questions']} questions ({r['protocol']}); "
          f"objective mean of {', '.join(r['objective']['metrics'])}")
    print(f"run's own settings {r['run_settings_score']:.4f}; chosen in-sample "
          f"{r['in_sample_score']:.4f}; {cv['folds']}-fold CV estimate {cv['estimate']:.4f}")
    print(f"chosen {r['chosen']}")
    print(f"wrote {res.config_path} and {res.report_path}")
    return 0


def _training_inputs(tr: Any) -> None:
    """The inputs ``train-reranker`` and ``train-encoder`` share: parts, runs, output."""
    tr.add_argument("part", help="dataset part to train on (a tuning part: never held-out)")
    tr.add_argument("--run", required=True, help="a finished run on that part (its rankings "
                    "give the hard negatives)")
    tr.add_argument("--also", nargs=2, action="append", default=[], metavar=("PART", "RUN"),
                    help="another tuning part and its run, trained into the same model (for "
                    "example the tune parts of two datasets); repeatable")
    tr.add_argument("--output", required=True, help="model directory to write (must not "
                    "exist); the card goes to OUTPUT.card.json")


def add_train_reranker(sub: Any) -> None:
    from engram_eval.analysis.train_reranker import TrainSettings

    d = TrainSettings()
    tr = sub.add_parser("train-reranker", help="train a cross-encoder on a tuning part from a "
                        "run's candidates (writes DIR and DIR.card.json; refuses a held-out "
                        "part)")
    _training_inputs(tr)
    tr.add_argument("--base-model", default=d.base_model, help="base model: name (bundled or "
                    f"HF cache) or path (default {d.base_model}: a new one-logit head)")
    for name, kind, text in (
            ("max_length", int, "tokens of a (question, turn) pair"),
            ("hard_negatives", int, "non-gold sessions of the run's ranking giving their most "
             "question-like user turn"),
            ("negative_depth", int, "depth of the run's ranking searched for hard negatives"),
            ("random_negatives", int, "random non-gold user turns per question"),
            ("epochs", int, "training epochs"), ("batch_size", int, "batch size"),
            ("learning_rate", float, "learning rate"), ("warmup_ratio", float, "warm-up share"),
            ("max_steps", int, "stop after this many steps (0: the epochs decide)"),
            ("time_budget_s", float, "stop after this many seconds (0: no budget)"),
            ("seed", int, "seed of the head, the data order and the random negatives"),
            ("exclude_shard", str, "I/N: leave out the questions 'run --shard I/N' selects, "
             "so that fold's run scores questions this reranker never saw ('': none)"),
            ("exclude_fold", str, "I/N: leave out the questions whose fold unit (the id's "
             "part before ':', a LoCoMo conversation) falls in fold I of N, the rule of "
             "train-encoder --exclude-fold ('': none; not with --exclude-shard)"),
            ("max_questions", int, "at most this many questions of each part give pairs, in "
             "a fixed order by sha256(seed:question_id) (0: all)"),
            ("unanswerable_negatives", int, "each unanswerable question (LongMemEval _abs) "
             "gives its first N ranked sessions' most question-like user turns as negatives, "
             "an all-negative 'nothing here' group (0: no pair)")):
        tr.add_argument("--" + name.replace("_", "-"), type=kind, default=getattr(d, name),
                        help=f"{text} (default {getattr(d, name)})")


def cmd_train_reranker(args: argparse.Namespace) -> int:
    import sys

    from engram_eval.analysis.train_reranker import TrainSettings, train

    def progress(message: str) -> None:  # a plain line per ~5% of the steps (stderr)
        print(message, file=sys.stderr, flush=True)

    fields = {k: getattr(args, k) for k in TrainSettings.__dataclass_fields__}
    card = train(args.part, args.run, args.output, TrainSettings(**fields), log=progress,
                 also=[tuple(x) for x in args.also])
    pc = card["pairs"]
    absent = f", {pc['absent']} 'nothing here'" if "absent" in pc else ""
    print(f"{pc['pairs']} pairs ({pc['positive']} positive, {pc['hard']} hard, {pc['random']} "
          f"random{absent}) from {pc['questions_used']} questions; skipped "
          f"{pc['questions_skipped']}")
    print(f"{card['training']['steps']} steps in {card['wall_seconds']} s; wrote "
          f"{args.output} and {args.output}.card.json")
    print(f"use: engram-eval {card['usage']}")
    return 0


#: Help text of each ``train-encoder`` flag (one per :class:`EncoderTrainSettings` field).
ENCODER_HELP = {
    "base_model": "base bi-encoder: name (bundled, shipped or HF cache) or path",
    "loss": "training loss: mnrl (MultipleNegativesRankingLoss: in-batch + hard negatives)",
    "max_seq_length": "tokens of a question or a turn while training",
    "hard_negatives": "negative columns per triplet: the most question-like turn of each of "
                      "the run's first non-gold sessions (seeded random turns fill the rest)",
    "negative_depth": "depth of the run's ranking searched for hard negatives",
    "unmarked_positives": "positives of a question whose answer sessions mark no evidence "
                          "turn: their most question-like user turns",
    "epochs": "training epochs", "batch_size": "batch size (in-batch negatives)",
    "learning_rate": "learning rate", "warmup_ratio": "warm-up share",
    "max_steps": "stop after this many steps (0: the epochs decide)",
    "time_budget_s": "stop after this many seconds (0: no budget)",
    "seed": "seed of the data order, the random negatives and the weights' updates",
    "exclude_fold": "I/N: leave out the questions whose fold unit (the id before ':', a LoCoMo "
                    "conversation) falls in fold I of N ('': none)",
    "max_questions": "at most this many questions of each part give triplets, in a fixed "
                     "order by sha256(seed:question_id) (0: all)",
}


def add_train_encoder(sub: Any) -> None:
    import dataclasses

    from engram_eval.analysis.train_encoder import EncoderTrainSettings

    d = EncoderTrainSettings()
    tr = sub.add_parser("train-encoder", help="fine-tune the dense encoder on tuning parts "
                        "from runs' candidates (writes DIR and DIR.card.json; refuses a "
                        "held-out part)")
    _training_inputs(tr)
    assert set(ENCODER_HELP) == {f.name for f in dataclasses.fields(d)}
    for f in dataclasses.fields(d):
        value = getattr(d, f.name)
        tr.add_argument("--" + f.name.replace("_", "-"), type=type(value), default=value,
                        help=f"{ENCODER_HELP[f.name]} (default {value!r})")


def cmd_train_encoder(args: argparse.Namespace) -> int:
    import sys

    from engram_eval.analysis.train_encoder import EncoderTrainSettings, train_encoder

    def progress(message: str) -> None:  # a plain line per ~5% of the steps (stderr)
        print(message, file=sys.stderr, flush=True)

    fields = {k: getattr(args, k) for k in EncoderTrainSettings.__dataclass_fields__}
    card = train_encoder(args.part, args.run, args.output, EncoderTrainSettings(**fields),
                         log=progress, also=[tuple(x) for x in args.also])
    tc = card["triplets"]
    print(f"{tc['triplets']} triplets ({tc['marked']} marked, {tc['unmarked']} unmarked "
          f"positives; {tc['hard_negatives']} hard, {tc['random_negatives']} random negatives) "
          f"from {tc['questions_used']} questions; skipped {tc['questions_skipped']}")
    print(f"{card['training']['steps']} steps in {card['wall_seconds']} s; wrote "
          f"{args.output} and {args.output}.card.json")
    print(f"use: engram-eval {card['usage']}")
    return 0


def add_confidence_study(sub: Any) -> None:
    from engram_eval.production_eval.confidence_study import StudySettings

    d = StudySettings()
    cs = sub.add_parser("confidence-study", help="feature study for the production confidence: "
                        "per-feature and combined out-of-fold AUROC, with intervals, for 'the "
                        "top result is gold' and 'this candidate is gold' (tuning parts only; "
                        "a held-out part is refused)")
    cs.add_argument("run", nargs="+", help="finished runs over DATASET (e.g. the out-of-fold "
                    "runs of its two halves), each with its sidecar")
    cs.add_argument("--dataset", required=True, help="the tuning part the runs were made on "
                    "(its sha256 must be each run's)")
    cs.add_argument("--output", required=True, type=output_file,
                    help="report JSON (must not exist)")
    cs.add_argument("--plot", type=output_file,
                    help="also write a per-feature AUROC figure here (.png)")
    for name, kind in (("candidates", int), ("folds", int), ("C", finite_float),
                       ("resamples", int), ("seed", seed_int), ("level", finite_float)):
        cs.add_argument("--" + name.replace("_", "-"), type=kind, default=getattr(d, name),
                        help=f"{StudySettings.HELP[name]} (default {getattr(d, name)})")
    add_sidecar_arg(cs)


def cmd_confidence_study(args: argparse.Namespace) -> int:
    from engram_eval.io import dump_json, exclusive_write
    from engram_eval.production_eval.confidence_study import StudySettings, plot, study
    from engram_eval.provenance.derived import write_derived_sidecar
    from engram_eval.runs.reader import read_run

    check_free(args, args.output, args.plot)
    s = StudySettings(**{k: getattr(args, k) for k in StudySettings.__dataclass_fields__})
    rep = study(args.run, args.dataset, s)
    for lab, r in rep["labels"].items():
        c = r["combined"]
        print(f"{lab}: n={r['n']} positives={r['positives']} combined out-of-fold AUROC "
              f"{c['auroc']:.3f} [{c['interval']['lo']:.3f}, {c['interval']['hi']:.3f}]")
    for name, v in rep["verdicts"].items():
        print(f"  {name}: {v['verdict']}")
    runs = [read_run(p) for p in args.run]
    gens = list(derived_sources("confidence-study"))
    if args.plot:
        exclusive_write(args.plot, plot(rep))
        if not args.no_sidecar:
            write_derived_sidecar(args.plot, generators=gens, dataset=rep["dataset"], runs=runs)
        print(f"wrote {args.plot}")
    exclusive_write(args.output, dump_json(rep))
    if not args.no_sidecar:
        write_derived_sidecar(args.output, generators=gens, dataset=rep["dataset"], runs=runs)
    print(f"wrote {args.output}")
    return 0


COMMANDS = {"compare": (add_compare, cmd_compare), "plot": (add_plot, cmd_plot),
            "analyze": (add_analyze, cmd_analyze), "tune": (add_tune, cmd_tune),
            "train-reranker": (add_train_reranker, cmd_train_reranker),
            "train-encoder": (add_train_encoder, cmd_train_encoder),
            "confidence-study": (add_confidence_study, cmd_confidence_study)}
