"""The production confidence on real sessions (issue 18): fit calibration v3 on tuning parts,
then measure it as selective retrieval (held-out parts only under a frozen manifest).

Fit (tuning parts only; a held-out part is refused), writing the package's calibration file,
the recorded settings that use it (its chosen cut-off as ``min_confidence``) and a report:

    python benchmarks/production_retrieval/confidence.py fit \\
        --part lme_tune=TUNE.json.gz --part locomo_tune=locomo10.tune.json \\
        --output engram_eval/production/calibration_v3.json \\
        --settings-output engram_eval/production/settings_v3.json \\
        --report results/confidence/calibration_v3.report.json --cache-dir CACHE

Measure (freeze first; outputs are never overwritten):

    python benchmarks/production_retrieval/confidence.py measure PART --source-root . \\
        --settings engram_eval/production/settings_v3.json --validate-only \\
        --freeze-source results/confidence/X.frozen.json
    python benchmarks/production_retrieval/confidence.py measure PART --source-root . \\
        --settings engram_eval/production/settings_v3.json \\
        --frozen-source results/confidence/X.frozen.json --dataset-label "..." \\
        --output results/confidence/X.selective.json --cache-dir CACHE

Exit status: 0 done, 2 refused or bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import _common

RUNNER = "confidence_measure"


def _engine(args):  # type: ignore[no-untyped-def]
    from engram_eval.production.search import Engine

    cache = None
    if not args.no_cache:
        from engram_eval.retrieval.cache import VectorCache, default_cache_dir

        cache = VectorCache(args.cache_dir or default_cache_dir())
    settings = _common.settings_from(args)
    if getattr(args, "no_excerpt_retry", False):
        settings = settings.replace(excerpt_retry=False)
    return Engine(settings, vector_cache=cache)


def _progress(label: str):  # type: ignore[no-untyped-def]
    t0 = time.time()

    def tick(n: int) -> None:
        if n % 100 == 0:
            print(f"  {label}: {n} questions, {time.time() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    return tick


def cmd_fit(args) -> int:  # type: ignore[no-untyped-def]
    from engram_eval.errors import ConfigError
    from engram_eval.io import atomic_write, dump_json, exclusive_write, sha256_file
    from engram_eval.production import calibrate_real as C

    outs = [Path(args.report), Path(args.report).with_suffix(".png")] if args.report else []
    for f in outs:
        if f.exists():
            raise ConfigError(f"{f} already exists; refusing to overwrite")
    engine = _engine(args)
    parts = []
    t0 = time.time()
    every = dict(e.split("=", 1) for e in args.every)
    for spec in args.part:
        label, _, path = spec.partition("=")
        if not path:
            raise ConfigError(f"--part {spec}: give LABEL=PATH")
        parts.append(C.extract(engine, label, path, max_questions=args.max_questions,
                               every=int(every[label]) if label in every else None,
                               on_question=_progress(label)))
    doc = C.fit(parts, engine, folds=args.folds, C=args.C, mapping=args.mapping,
                calibrate_on=args.calibrate_on, target_precision=args.target_precision,
                min_returned=args.min_returned)
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    atomic_write(args.output, text)
    if args.settings_output:
        s = engine.settings.replace(calibration=args.output,
                                    min_confidence=doc["cutoff"]["value"]).to_json()
        atomic_write(args.settings_output, json.dumps(s, indent=2, sort_keys=True) + "\n")
    if args.report:
        rep = {**doc, "calibration_file": args.output,
               "calibration_file_sha256": sha256_file(args.output),
               "settings_file": args.settings_output,
               "settings_file_sha256": (sha256_file(args.settings_output)
                                        if args.settings_output else None),
               "command": sys.argv, "wall_seconds": round(time.time() - t0, 1)}
        exclusive_write(outs[1], _fit_plot(doc))  # one reliability panel per tuning part
        exclusive_write(outs[0], dump_json(rep))
    print(json.dumps({"cutoff": doc["cutoff"]["value"],
                      "met_on_tuning_parts": doc["cutoff"]["met_on_tuning_parts"],
                      "tuning_parts_out_of_fold": {
                          k: {m: v[m] for m in ("n", "ece", "brier", "auroc", "aurc")}
                          for k, v in doc["tuning_parts_out_of_fold"].items()},
                      "at_cutoff": doc["cutoff"]["at_cutoff"]}, indent=2))
    return 0


def _fit_plot(doc) -> bytes:  # type: ignore[no-untyped-def]
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = doc["tuning_parts_out_of_fold"]
    fig, axes = plt.subplots(1, len(parts), figsize=(5 * len(parts), 4.6), squeeze=False)
    for ax, (label, s) in zip(axes[0], parts.items(), strict=True):
        ax.plot([0, 1], [0, 1], "--", color="grey", lw=1)
        b = [r for r in s["reliability"] if r["n"]]
        ax.plot([r["mean_confidence"] for r in b], [r["fraction_correct"] for r in b], "o-")
        for r in b:
            ax.annotate(str(r["n"]), (r["mean_confidence"], r["fraction_correct"]), fontsize=7,
                        textcoords="offset points", xytext=(3, -9))
        ax.axvline(doc["cutoff"]["value"], color="grey", ls=":", lw=1)
        ax.set_title(f"{label} (tuning part, out-of-fold): n={s['n']}, ECE {s['ece']:.3f}",
                     fontsize=9)
        ax.set_xlabel("confidence of the top result")
        ax.set_ylabel("fraction whose top result is right")
    fig.suptitle(f"Calibration v3 on tuning parts; chosen cut-off {doc['cutoff']['value']}",
                 fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _sources(root: Path) -> dict[str, str]:
    from engram_eval.provenance import frozen as F
    from engram_eval.provenance.sources import confidence_sources
    from engram_eval.retrieval.sources import PIPELINE_SOURCES

    return F.hash_sources(confidence_sources(PIPELINE_SOURCES), root)


def cmd_measure(args) -> int:  # type: ignore[no-untyped-def]
    from engram_eval.errors import ConfigError, ProvenanceError
    from engram_eval.io import dump_json, exclusive_write
    from engram_eval.production import calibrate_real as C
    from engram_eval.production.confidence import ContextCalibration
    from engram_eval.production.runner import effective_settings
    from engram_eval.provenance import frozen as F
    from engram_eval.provenance.guard import gate_heldout

    root = _common.check_source_root(args.source_root)
    engine = _engine(args)
    cal = engine.calibration()
    if not isinstance(cal, ContextCalibration):
        raise ConfigError(f"{cal.path}: measure needs a version-3 calibration")
    params = {"bins": args.bins, "resamples": args.resamples, "seed": args.seed,
              "cutoff": engine.settings.min_confidence, "max_questions": args.max_questions}
    manifest = F.build_manifest(runner=RUNNER, input_path=args.dataset, input_kind="dataset",
                                sources=_sources(root), models=engine.models(),
                                settings={**effective_settings(engine, root), "measure": params},
                                purpose="selective-retrieval measurement of the production "
                                        "confidence")
    if args.validate_only:
        if args.freeze_source:
            F.freeze(args.freeze_source, manifest)
            print(f"froze {args.freeze_source} (fingerprint {manifest['fingerprint']})")
        else:
            print(f"valid; manifest fingerprint {manifest['fingerprint']}")
        return 0
    if not args.output or not args.dataset_label:
        raise ConfigError("a measurement needs --output and --dataset-label")
    out = Path(args.output)
    png = Path(str(out).removesuffix(".json") + ".png")
    for f in (out, png):
        if f.exists():
            raise ProvenanceError(f"{f} already exists; refusing to overwrite")
    # the one guard: a subset or mixture of a held-out part is refused outright
    finding = gate_heldout(args.dataset)
    match = None if finding is None else finding.match
    frozen = None
    if finding is not None and not args.frozen_source:
        raise ProvenanceError(f"{finding.describe()}; it runs only under a frozen manifest "
                              "(--validate-only --freeze-source M, then --frozen-source M)")
    if args.frozen_source:
        frozen = F.check_frozen(args.frozen_source, manifest)
    started = F._now()
    if finding is not None:
        assert frozen is not None
        key = match.key if match is not None else frozen["input"]["sha256"]
        label = F.ledger_record(args.ledger or F.default_ledger(root), frozen,
                                output=str(out), started_at=started, key=key)
    else:
        label = "development measurement (not a held-out part)"
    doc = C.measure(engine, args.dataset, cutoff=engine.settings.min_confidence,
                    bins=args.bins, resamples=args.resamples, seed=args.seed,
                    max_questions=args.max_questions,
                    on_question=_progress(Path(args.dataset).name))
    after = F.build_manifest(runner=RUNNER, input_path=args.dataset, input_kind="dataset",
                             sources=_sources(root), models=engine.models(),
                             settings={**effective_settings(engine, root), "measure": params})
    changed = F.differences(manifest, after)
    if changed:
        raise ProvenanceError("sources, models, settings or the data changed during the "
                              "measurement; nothing was written:\n  " + "\n  ".join(changed))
    doc = {"kind": "engram-eval/selective-retrieval", "dataset_label": args.dataset_label,
           "label": label,
           "frozen_manifest": (None if frozen is None else
                               {"path": args.frozen_source, "fingerprint": frozen["fingerprint"],
                                "created_at": frozen["created_at"]}),
           "heldout_match": (None if match is None else
                             {"key": match.key, "name": match.name, "how": match.how}),
           "manifest": manifest, "calibration": {"path": cal.path,
                                                 "model_sha256": (cal.record or {}).get(
                                                     "model_sha256"),
                                                 "recorded_cutoff": cal.cutoff},
           "started_at": started, "command": sys.argv, **doc}
    exclusive_write(png, C.plot(doc, png, f"{args.dataset_label}: {label}\n"
                                f"{doc['dataset']['name']} sha256 "
                                f"{doc['dataset']['sha256'][:12]}…"))
    exclusive_write(out, dump_json(doc))
    s, c = doc["summary"], doc["at_cutoff"]
    print(json.dumps({"label": label, "n": s["n"], "ece": s["ece"], "brier": s["brier"],
                      "auroc": s["auroc"], "aurc": s["aurc"], "at_cutoff": c,
                      "intervals": {k: [v["lo"], v["hi"]]
                                    for k, v in doc["intervals"].items()}}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit", help="fit calibration v3 on tuning parts")
    f.add_argument("--part", action="append", required=True, metavar="LABEL=PATH")
    f.add_argument("--output", required=True, help="calibration JSON (the package file)")
    f.add_argument("--settings-output", help="also write the recorded settings that use it")
    f.add_argument("--report", help="report JSON (must not exist); .png beside it")
    f.add_argument("--every", action="append", default=[], metavar="LABEL=K",
                   help="for that part: every unanswerable question and every K-th other one "
                        "(file order)")
    f.add_argument("--folds", type=int, default=5)
    f.add_argument("--C", type=float, default=1.0)
    f.add_argument("--mapping", choices=("isotonic", "platt"), default="isotonic")
    f.add_argument("--calibrate-on", choices=("top", "pairs"), default="top")
    f.add_argument("--target-precision", type=float, default=0.9)
    f.add_argument("--min-returned", type=int, default=20)
    f.add_argument("--no-excerpt-retry", action="store_true",
                   help="fit with the excerpt retry off (calibration v3 needs it off)")
    m = sub.add_parser("measure", help="selective-retrieval measurement of one part")
    m.add_argument("dataset")
    m.add_argument("--source-root", required=True)
    m.add_argument("--dataset-label")
    m.add_argument("--output", help="JSON (must not exist); .png beside it")
    m.add_argument("--validate-only", action="store_true")
    m.add_argument("--freeze-source", metavar="MANIFEST")
    m.add_argument("--frozen-source", metavar="MANIFEST")
    m.add_argument("--ledger")
    m.add_argument("--bins", type=int, default=15)
    m.add_argument("--resamples", type=int, default=2000)
    m.add_argument("--seed", type=int, default=0)
    for q in (f, m):
        q.add_argument("--max-questions", type=int, help="first N questions (wiring checks)")
        q.add_argument("--cache-dir")
        q.add_argument("--no-cache", action="store_true")
        _common.add_settings_arguments(q)
    args = p.parse_args(argv)
    _common.offline()
    from engram_eval.errors import EngramEvalError

    try:
        return cmd_fit(args) if args.cmd == "fit" else cmd_measure(args)
    except EngramEvalError as e:
        print(f"confidence: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
