"""The bodies of ``engram-eval production run|calibrate|sweep|calibrate-sessions|measure``
(:mod:`engram_eval.cli.production` parses; the scripts in ``benchmarks/production_retrieval/``
are thin wrappers over the same commands). Each takes the parsed arguments and a built
:class:`~engram_eval.production.search.Engine`, writes what it writes (never overwriting),
prints a short report on stdout and returns the exit status; refusals and bad input raise
:class:`~engram_eval.errors.EngramEvalError` (the command line prints one line, status 2).

The cut-off (``min_confidence``) is a relevance threshold, not a probability of correctness.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from engram_eval.io import already_exists
from engram_eval.production.search import Engine

#: The cut-offs of the abstention sweep.
CUTS = [round(0.05 * i, 2) for i in range(1, 20)]
#: The runner name of a selective-retrieval measurement's manifest.
MEASURE_RUNNER = "confidence_measure"


def check_source_root(root: str) -> Path:
    """The sources hashed must be the code that runs: ``ROOT/engram_eval`` must be the
    imported package."""
    from engram_eval.errors import ConfigError

    r = Path(root).resolve()
    pkg = Path(__file__).resolve().parents[1]  # the imported engram_eval package
    if (r / "engram_eval").resolve() != pkg:
        raise ConfigError(f"--source-root {root}: its engram_eval is not the imported package "
                          f"({pkg}); run from that tree or set PYTHONPATH to it")
    return r


# --------------------------------------------------------------------------- run
def run(args: argparse.Namespace, engine: Engine) -> int:
    """Validate a fixture (and freeze its manifest), or run it: a production-confidence
    check (:mod:`.runner`)."""
    from engram_eval.errors import EngramEvalError
    from engram_eval.production_eval import runner as R

    root = check_source_root(args.source_root)
    if args.freeze_source and not args.validate_only:
        raise EngramEvalError("--freeze-source goes with --validate-only")
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
    s = doc["summary"]
    print(f"{doc['fixture_name']}: {doc['label']}")
    print(f"answerable hits {s['answerable_hits']}/{s['answerable']}, absent-answer abstentions "
          f"{s['absent_answer_abstentions']}/{s['absent_answer']}, non-gold memories returned "
          f"{s['non_gold_memories_returned']}, precision "
          + ("n/a" if s["precision"] is None else f"{s['precision']:.3f}"))
    print(json.dumps({"output": args.output, "manifest_fingerprint": doc["manifest_fingerprint"]}))
    return 0


# --------------------------------------------------------------------------- calibrate
def calibrate(args: argparse.Namespace, engine: Engine) -> int:
    """Fit the offline calibration on a (development) fixture (:mod:`.calibrate`), write it,
    and with ``--report`` a report and a reliability plot beside it."""
    from engram_eval.production_eval import calibrate as C

    doc = C.fit(args.fixture, engine, l2=args.l2)
    C.write_calibration(doc, args.output)
    if args.report:
        from engram_eval.io import atomic_write, sha256_file

        rep = {**doc, "calibration_file": args.output,
               "calibration_file_sha256": sha256_file(args.output),
               "command": sys.argv}
        atomic_write(args.report, json.dumps(rep, indent=2) + "\n")
        png = args.report.removesuffix(".json") + ".png"
        C.reliability_plot(doc, png)
    print(json.dumps({"coefficients": doc["coefficients"], "data": doc["data"],
                      "ece_10_bins": doc["in_sample"]["ece_10_bins"]}, indent=2))
    return 0


# --------------------------------------------------------------------------- sweep
def sweep(args: argparse.Namespace, engine: Engine) -> int:
    """The production gate at session level over a dataset, for every cut-off in
    :data:`CUTS` (see ``engram-eval production sweep --help``)."""
    from engram_eval.data.datasets import load_questions, resolve_format
    from engram_eval.errors import EngramEvalError
    from engram_eval.io import dump_json, exclusive_write, sha256_file
    from engram_eval.production_eval.sessions import search_all, session_questions
    from engram_eval.provenance.guard import refuse_heldout

    out = Path(args.output)
    png = out.with_suffix(".png")
    for f in (out, png):
        if f.exists():
            raise EngramEvalError(already_exists(f))
    # the one held-out guard: a sweep chooses a cut-off, so it never reads held-out data
    refuse_heldout(args.dataset, "the abstention sweep chooses settings, on tuning data only")
    fmt = resolve_format(args.dataset, "auto")
    _, loaded = load_questions(args.dataset, fmt)
    questions = list(loaded)[: args.max_questions] if args.max_questions else list(loaded)
    applied = engine.applies_calibration()
    if applied:
        engine.calibration()
    t0 = time.time()
    per_q: list[dict[str, Any]] = []
    for sq in session_questions(engine, questions, fmt):
        resp = search_all(engine, sq)
        confs = sorted(((c["confidence"], -c["fused_rank"], c["id"]) for c in resp.candidates),
                       reverse=True)
        per_q.append({"question_id": sq.question.question_id,
                      "unanswerable": sq.unanswerable, "gold": list(sq.gold),
                      "ranked": [[cid, round(cf, 6)] for cf, _, cid in confs]})
    table: list[dict[str, Any]] = []
    ans = [r for r in per_q if not r["unanswerable"]]
    una = [r for r in per_q if r["unanswerable"]]
    for c in CUTS:
        acc = [r for r in ans if r["ranked"] and r["ranked"][0][1] >= c]
        top_gold = [r for r in acc if r["ranked"][0][0] in r["gold"]]
        abst = [r for r in una if not (r["ranked"] and r["ranked"][0][1] >= c)]
        table.append({"cutoff": c,
                      "answerable_acceptance_rate": len(acc) / len(ans) if ans else None,
                      "top_accepted_gold_rate": len(top_gold) / len(ans) if ans else None,
                      "unanswerable_abstention_rate": len(abst) / len(una) if una else None})
    doc = {"kind": "engram-eval/abstention-sweep", "dataset_label": args.dataset_label,
           "dataset": {"name": Path(args.dataset).name,
                       "sha256": sha256_file(args.dataset), "format": fmt},
           "split_note": ("LongMemEval file is a development split: a development "
                          "measurement, not held-out" if fmt != "locomo" else
                          "LoCoMo10, whole file"),
           "denominators": {"answerable": len(ans), "unanswerable": len(una),
                            "rule_unanswerable": ("question id ends with _abs" if fmt !=
                                                  "locomo" else "category 5 (adversarial)"),
                            "rule_answerable": ("answerable protocol gold sessions" if fmt
                                                != "locomo" else "evidence sessions "
                                                "resolved, categories 1-4 "
                                                "(locomo_no_adversarial protocol)"),
                            "top_accepted_gold_rate": "over all answerable questions"},
           "max_questions": args.max_questions, "settings": engine.settings.to_json(),
           "models": [m.to_json(with_path=False) for m in engine.models()],
           "calibration": (None if not applied else
                           {"path": str(engine.calibration_path()),
                            "sha256": sha256_file(engine.calibration_path())}),
           "production_cutoff": engine.settings.min_confidence,
           "threshold_note": "the cut-off is a relevance threshold, not a probability of "
                             "correctness; the offline calibration was fitted on a small "
                             "synthetic fixture of short memories",
           "sweep": table, "wall_seconds": round(time.time() - t0, 2),
           "command": sys.argv, "questions": per_q}
    _sweep_plot(doc, png)
    exclusive_write(out, dump_json(doc))
    at = next(r for r in table if abs(r["cutoff"] - engine.settings.min_confidence) < 1e-9)
    print(json.dumps({"denominators": doc["denominators"], "at_production_cutoff": at}, indent=2))
    return 0


def _sweep_plot(doc: dict[str, Any], path: Path) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from engram_eval.io import exclusive_write

    t = doc["sweep"]
    x = [r["cutoff"] for r in t]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    d = doc["denominators"]
    ax.plot(x, [r["answerable_acceptance_rate"] for r in t], "o-",
            label=f"answerable accepted (n={d['answerable']})")
    ax.plot(x, [r["top_accepted_gold_rate"] for r in t], "s-",
            label=f"top accepted session is gold (n={d['answerable']})")
    ax.plot(x, [r["unanswerable_abstention_rate"] for r in t], "^-",
            label=f"unanswerable abstained (n={d['unanswerable']})")
    ax.axvline(doc["production_cutoff"], color="grey", ls="--", lw=1, label="production cut-off")
    ax.set_xlabel("confidence cut-off (relevance threshold, not a probability of correctness)",
                  fontsize=8)
    ax.set_ylabel("rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{doc['dataset_label']}: session-level gate sweep\n"
                 f"{doc['dataset']['name']} sha256 {doc['dataset']['sha256'][:12]}…"
                 + (f", first {doc['max_questions']} questions" if doc["max_questions"] else ""), fontsize=9)
    ax.legend(fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    exclusive_write(path, buf.getvalue())


# --------------------------------------------------------------------------- calibrate-sessions
def _progress(label: str) -> Any:
    t0 = time.time()

    def tick(n: int) -> None:
        if n % 100 == 0:
            print(f"  {label}: {n} questions, {time.time() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    return tick


def calibrate_sessions(args: argparse.Namespace, engine: Engine) -> int:
    """Fit calibration v3 on real sessions of tuning parts (:mod:`.calibrate_real`; a
    held-out part is refused), or with ``--per-shape`` calibration v4, one model per memory
    shape read from the parts' data (production fixtures given with ``--fixture``); write
    it, the recorded settings that use it (v3: its chosen cut-off as ``min_confidence``;
    v4: the cut-off left as it is) and, with ``--report``, a report and a plot."""
    from engram_eval.errors import ConfigError
    from engram_eval.io import atomic_write, dump_json, exclusive_write, sha256_file
    from engram_eval.production_eval import calibrate_real as C

    outs = [Path(args.report), Path(args.report).with_suffix(".png")] if args.report else []
    for f in outs:
        if f.exists():
            raise ConfigError(already_exists(f))
    per_shape = bool(getattr(args, "per_shape", False))
    fixtures = list(getattr(args, "fixture", None) or [])
    feature_set = getattr(args, "feature_set", None) or "v3"
    shape_targets = _pairs_of(getattr(args, "shape_target", None) or [], "--shape-target",
                              "SHAPE=X")
    run_specs = list(getattr(args, "run", None) or [])
    run_data = _pairs_of(getattr(args, "run_data", None) or [], "--run-data",
                         "LABEL=DATASET")
    if not per_shape and (fixtures or shape_targets or feature_set != "v3" or run_specs):
        raise ConfigError("--fixture, --run, --shape-target and --feature-set go with "
                          "--per-shape (calibration v3 is one pooled model of the v3 "
                          "features)")
    if run_specs and feature_set != "v4":
        raise ConfigError("--run goes with --feature-set v4 (the features runs trace)")
    nested = bool(getattr(args, "nested_cv", False))
    if nested and not (per_shape and args.report):
        raise ConfigError("--nested-cv goes with --per-shape and --report")
    parts = []
    t0 = time.time()
    every = _pairs_of(args.every, "--every", "LABEL=K")
    for spec in args.part or []:
        label, path = _label_path(spec, "--part")
        parts.append(C.extract(engine, label, path, max_questions=args.max_questions,
                               every=int(every[label]) if label in every else None,
                               on_question=_progress(label), features=feature_set))
    for spec in fixtures:
        label, path = _label_path(spec, "--fixture")
        parts.append(C.extract_fixture(engine, label, path, on_question=_progress(label),
                                       features=feature_set))
    run_parts: dict[str, list[str]] = {}
    for spec in run_specs:
        label, path = _label_path(spec, "--run")
        run_parts.setdefault(label, []).append(path)
    if set(run_data) != set(run_parts):
        raise ConfigError(f"--run labels {sorted(run_parts)} and --run-data labels "
                          f"{sorted(run_data)} must be the same")
    for label, paths in run_parts.items():
        parts.append(C.extract_runs(label, paths, run_data[label]))
    if not parts:
        raise ConfigError("give at least one --part (or, with --per-shape, --fixture or "
                          "--run)")
    if per_shape:
        target: float | dict[str, float] = float(args.target_precision)
        if shape_targets:
            target = {sh.shape: float(args.target_precision) for sh in parts
                      if sh.shape is not None}
            target.update({k: float(v) for k, v in shape_targets.items()})
        shape_c = {k: _number(v, "--shape-C") for k, v in _pairs_of(
            getattr(args, "shape_C", None) or [], "--shape-C", "SHAPE=C").items()}
        cs: float | dict[str, float] = float(args.C)
        if shape_c:
            cs = {sh.shape: float(args.C) for sh in parts if sh.shape is not None}
            cs.update(shape_c)
        doc = C.fit_shapes(parts, engine, features=feature_set, folds=args.folds, C=cs,
                           mapping=args.mapping, calibrate_on=args.calibrate_on,
                           target_precision=target, min_returned=args.min_returned)
        nested_doc: dict[str, Any] = {}
        if nested:
            for sh in sorted(doc["shapes"]):
                mine = [p for p in parts if p.shape == sh]
                tp = target[sh] if isinstance(target, dict) else target
                nested_doc[sh] = C.nested_cv(
                    mine, features=feature_set, folds=args.folds,
                    C=cs[sh] if isinstance(cs, dict) else cs,
                    mapping=args.mapping, calibrate_on=args.calibrate_on,
                    target_precision=tp, min_returned=args.min_returned,
                    order=engine.settings.result_order)
        oof = {f"{sh}/{k}": v for sh, m in doc["shapes"].items()
               for k, v in m["tuning_parts_out_of_fold"].items()}
        selective = {f"{sh}/{k}": v for sh, m in doc["shapes"].items()
                     for k, v in m["selective_out_of_fold"].items()}
        cutoffs = {sh: m["cutoff"] for sh, m in doc["shapes"].items()}
    else:
        doc = C.fit(parts, engine, folds=args.folds, C=args.C, mapping=args.mapping,
                    calibrate_on=args.calibrate_on, target_precision=args.target_precision,
                    min_returned=args.min_returned)
        oof = doc["tuning_parts_out_of_fold"]
        cutoffs = {"": doc["cutoff"]}
        selective = None
    # the calibration file holds the numbers search applies and their summaries; the
    # report (below) also the per-question risk-coverage curves
    text = json.dumps(C.without_curves(doc) if per_shape else doc, indent=2,
                      sort_keys=True) + "\n"
    atomic_write(args.output, text)
    if args.settings_output:
        changes: dict[str, Any] = {"calibration": args.output}
        if not per_shape:
            changes["min_confidence"] = doc["cutoff"]["value"]
        s = engine.settings.replace(**changes).to_json()
        atomic_write(args.settings_output, json.dumps(s, indent=2, sort_keys=True) + "\n")
    if args.report:
        rep = {**doc, "calibration_file": args.output,
               "calibration_file_sha256": sha256_file(args.output),
               "settings_file": args.settings_output,
               "settings_file_sha256": (sha256_file(args.settings_output)
                                        if args.settings_output else None),
               "command": sys.argv, "wall_seconds": round(time.time() - t0, 1)}
        if per_shape and nested:
            rep["nested_cv"] = nested_doc
        title = ("Calibration v4 per memory shape; cut-offs "
                 + ", ".join(f"{k} {v['value']}" for k, v in cutoffs.items())
                 if per_shape else
                 f"Calibration v3 on tuning parts; chosen cut-off {doc['cutoff']['value']}")
        lines = {k: cutoffs[k.split("/")[0] if per_shape else ""]["value"] for k in oof}
        exclusive_write(outs[1], _fit_plot(oof, lines, title, selective))  # a column per part
        exclusive_write(outs[0], dump_json(rep))
    summary = {k: {m: v[m] for m in ("n", "ece", "brier", "auroc", "aurc")}
               for k, v in oof.items()}
    if per_shape:
        print(json.dumps({"cutoffs": {k: {"value": v["value"],
                                          "met_on_tuning_parts": v["met_on_tuning_parts"],
                                          "at_cutoff": v["at_cutoff"]}
                                      for k, v in cutoffs.items()},
                          "tuning_parts_out_of_fold": summary,
                          "nested_cv": {sh: {k: v for k, v in n["all"].items()
                                             if k != "intervals"}
                                        for sh, n in nested_doc.items()}}, indent=2))
    else:
        print(json.dumps({"cutoff": doc["cutoff"]["value"],
                          "met_on_tuning_parts": doc["cutoff"]["met_on_tuning_parts"],
                          "tuning_parts_out_of_fold": summary,
                          "at_cutoff": doc["cutoff"]["at_cutoff"]}, indent=2))
    return 0


def _label_path(spec: str, flag: str) -> tuple[str, str]:
    from engram_eval.errors import ConfigError

    label, _, path = spec.partition("=")
    if not label or not path:
        raise ConfigError(f"{flag} {spec}: give LABEL=PATH")
    return label, path


def _number(value: str, flag: str) -> float:
    from engram_eval.errors import ConfigError

    try:
        x = float(value)
    except ValueError:
        raise ConfigError(f"{flag}: {value!r} is not a number") from None
    if not x > 0 or x == float("inf"):
        raise ConfigError(f"{flag}: {value!r} must be a positive finite number")
    return x


def _pairs_of(specs: list[str], flag: str, form: str) -> dict[str, str]:
    from engram_eval.errors import ConfigError

    out = {}
    for spec in specs:
        k, sep, v = spec.partition("=")
        if not k or not sep or not v:
            raise ConfigError(f"{flag} {spec}: give {form}")
        out[k] = v
    return out


def _fit_plot(parts: dict[str, Any], cutoffs: dict[str, float], title: str,
              selective: dict[str, Any] | None = None) -> bytes:
    """One reliability panel per tuning part (``label -> out-of-fold summary``), each with
    its cut-off (``label -> cut-off``); with ``selective`` (``label -> selective report``,
    calibration v4) a second row: each part's risk-coverage curve, with AURC and AUROC."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = 2 if selective else 1
    fig, axes = plt.subplots(rows, len(parts), figsize=(5 * len(parts), 4.6 * rows),
                             squeeze=False)
    for ax, (label, s) in zip(axes[0], parts.items(), strict=True):
        ax.plot([0, 1], [0, 1], "--", color="grey", lw=1)
        b = [r for r in s["reliability"] if r["n"]]
        ax.plot([r["mean_confidence"] for r in b], [r["fraction_correct"] for r in b], "o-")
        for r in b:
            ax.annotate(str(r["n"]), (r["mean_confidence"], r["fraction_correct"]), fontsize=7,
                        textcoords="offset points", xytext=(3, -9))
        ax.axvline(cutoffs[label], color="grey", ls=":", lw=1)
        ax.set_title(f"{label} (tuning part, out-of-fold): n={s['n']}, ECE {s['ece']:.3f}",
                     fontsize=9)
        ax.set_xlabel("confidence of the top result")
        ax.set_ylabel("fraction whose top result is right")
    for ax, label in zip(axes[1] if selective else (), parts, strict=True):
        rep = (selective or {})[label]["all"]
        rc = rep["risk_coverage"]
        ax.plot([p["coverage"] for p in rc], [p["risk"] for p in rc], "-")
        auroc = "n/a" if rep["auroc"] is None else f"{rep['auroc']:.3f}"
        ax.set_title(f"{label}: risk-coverage, AURC {rep['aurc']:.3f}, AUROC {auroc}",
                     fontsize=9)
        ax.set_xlabel("coverage (questions answered, most confident first)")
        ax.set_ylabel("risk (top result not right)")
        ax.set_ylim(-0.02, 1.02)
    fig.suptitle(title, fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


# --------------------------------------------------------------------------- measure
def _calibration_record(cal: Any) -> dict[str, Any]:
    """What a measurement records of its calibration (v4: each shape's model and cut-off)."""
    from engram_eval.production.confidence import ShapeCalibration

    if isinstance(cal, ShapeCalibration):
        return {"path": cal.path, "version": 4,
                "model_sha256": {k: (m.record or {}).get("model_sha256")
                                 for k, m in cal.models.items()},
                "recorded_cutoff": cal.cutoffs}
    return {"path": cal.path, "model_sha256": (cal.record or {}).get("model_sha256"),
            "recorded_cutoff": cal.cutoff}


def _sources(root: Path) -> dict[str, str]:
    from engram_eval.provenance import frozen as F
    from engram_eval.provenance.sources import confidence_sources
    from engram_eval.retrieval.sources import SEARCH_SOURCES

    return F.hash_sources(confidence_sources(SEARCH_SOURCES), root)


def measure(args: argparse.Namespace, engine: Engine) -> int:
    """The selective-retrieval measurement of the production confidence on one part
    (held-out parts only under a frozen manifest; outputs are never overwritten)."""
    from engram_eval.data.datasets import load_questions
    from engram_eval.data.records import corpus_shape
    from engram_eval.errors import ConfigError, ProvenanceError
    from engram_eval.io import dump_json, exclusive_write, sha256_file
    from engram_eval.production.confidence import ContextCalibration, ShapeCalibration
    from engram_eval.production_eval import calibrate_real as C
    from engram_eval.production_eval.runner import effective_settings
    from engram_eval.provenance import frozen as F
    from engram_eval.provenance.guard import gate_heldout

    root = check_source_root(args.source_root)
    cal = engine.calibration()
    if not isinstance(cal, ContextCalibration | ShapeCalibration):
        raise ConfigError(f"{cal.path}: measure needs a version-3 or version-4 calibration")
    runs = list(args.run or [])
    if runs and not isinstance(cal, ShapeCalibration):
        raise ConfigError(f"{cal.path}: --run needs a version-4 calibration (its models read "
                          "the features the runs traced)")
    if not engine.applies_calibration():
        raise ConfigError(f"{cal.path}: with the rerank stage on, the gate applies only a "
                          "per-shape (version-4) calibration; this one leaves the confidence "
                          "to the cross-encoder's sigmoid, which measure does not measure")
    if runs and args.max_questions:
        raise ConfigError("--run measures every question of the runs: drop --max-questions")
    # the cut-off the gate applies to this data's memory shape (one per part)
    shapes = {corpus_shape(q.sessions) for q in load_questions(args.dataset)[1]}
    cuts = {engine.cutoff_for(sh) for sh in shapes}
    if len(cuts) != 1:
        raise ConfigError(f"{args.dataset}: memory shapes {sorted(shapes)} with cut-offs "
                          f"{sorted(cuts)}: measure one shape per part")
    cutoff = cuts.pop()
    params = {"bins": args.bins, "resamples": args.resamples, "seed": args.seed,
              "cutoff": cutoff, "max_questions": args.max_questions}
    if runs:  # the runs are the measured input as much as the data: their hashes are frozen
        params["runs"] = {Path(r).name: sha256_file(r) for r in runs}
    manifest = F.build_manifest(runner=MEASURE_RUNNER, input_path=args.dataset, input_kind="dataset",
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
            raise ProvenanceError(already_exists(f))
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
    if runs:
        assert isinstance(cal, ShapeCalibration)
        doc = C.measure_runs(cal, runs, args.dataset, cutoff=cutoff,
                             candidates=engine.settings.candidates, bins=args.bins,
                             resamples=args.resamples, seed=args.seed,
                             order=engine.settings.result_order)
    else:
        doc = C.measure(engine, args.dataset, cutoff=cutoff, bins=args.bins,
                        resamples=args.resamples, seed=args.seed,
                        max_questions=args.max_questions,
                        on_question=_progress(Path(args.dataset).name))
    after = F.build_manifest(runner=MEASURE_RUNNER, input_path=args.dataset, input_kind="dataset",
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
           "manifest": manifest, "calibration": _calibration_record(cal),
           "started_at": started, "command": sys.argv, **doc}
    exclusive_write(png, C.plot(doc, png, f"{args.dataset_label}: {label}\n"
                                f"{doc['dataset']['name']} sha256 "
                                f"{doc['dataset']['sha256'][:12]}…"))
    exclusive_write(out, dump_json(doc))
    s, c = doc["summary"], doc["at_cutoff"]
    print(json.dumps({"label": label, "result_order": doc["result_order"], "n": s["n"],
                      "ece": s["ece"], "brier": s["brier"],
                      "auroc": s["auroc"], "aurc": s["aurc"], "at_cutoff": c,
                      "order_comparison": doc["order_comparison"],
                      "intervals": {k: [v["lo"], v["hi"]]
                                    for k, v in doc["intervals"].items()}}, indent=2))
    return 0
