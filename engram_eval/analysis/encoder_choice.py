"""Out-of-fold choice of a dense encoder together with its fusion (issue 42 items 3-4).

``python -m engram_eval.analysis.encoder_choice --baseline RUN ... --candidate RUN ...
--grid GRID.yaml --output REPORT.json`` compares two first stages on the same tuning
questions, each with its fusion re-chosen out of fold, and says whether the candidate is
adopted:

* **Runs.** Tuning runs that traced every signal (``engram-eval tune``'s input). The baseline
  runs use the encoder of today; each candidate run was made with an encoder that never saw
  its questions (``train-encoder --exclude-fold I/N`` and the run of fold I), so the
  candidate's dense signal is out of fold. Runs are grouped by chat structure; within a
  structure the runs of each side are pooled (questions sorted by id) and must cover the
  same questions.
* **Fusion, out of fold.** Per side and structure, :func:`engram_eval.analysis.tune.search`
  over ``GRID`` (few free weights): ``folds``-fold cross-validation by unit (the question id
  before ``:``: a LoCoMo conversation; a LongMemEval question), the choice made on the other
  folds and scored on the held-out one. Both sides use the same folds (same units, same
  order, same seed).
* **Per question** the held-out objective (the mean of ``recall_any@1``, ``recall_all@5``,
  ``ndcg_any@5`` under the structure's protocol) and each metric under the fold's choice;
  the paired difference candidate - baseline with a percentile interval from a bootstrap
  that resamples units (conversations on LoCoMo, questions on LongMemEval; 10,000 replicates,
  seed 0); dense alone (the dense signal with every other weight 0) beside it.
* **Rule** (fixed here, before any run): a structure adopts the candidate when the interval's
  lower end is above 0; otherwise it keeps the baseline. The report gives every number the
  rule reads.

The report (never overwritten) has a derived sidecar naming every run by hash.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engram_eval.analysis import tune as T
from engram_eval.errors import ConfigError, EngramEvalError, ProvenanceError
from engram_eval.retrieval import fusion as F

GENERATOR = "engram_eval/analysis/encoder_choice.py"
DEFAULT_PROTOCOL = {"chat": "answerable", "people": "locomo"}
REPORTED = ("recall_any@1", "recall_any@5", "recall_all@5", "ndcg_any@5")


def pooled(parts: Sequence[T.TunedPart]) -> T.TunedPart:
    """One part of the questions of ``parts`` (runs of one side and structure), sorted by id;
    the parts must share fusion settings and signals."""
    first = parts[0]
    for p in parts[1:]:
        if p.own != first.own or p.signals != first.signals:
            raise ProvenanceError(f"{p.path}: its fusion settings or traced signals differ "
                                  f"from {first.path}'s; pool runs of one configuration")
    qs = sorted((q for p in parts for q in p.questions), key=lambda q: q.question_id)
    ids = [q.question_id for q in qs]
    if len(set(ids)) != len(ids):
        raise ProvenanceError(f"{', '.join(p.path for p in parts)}: a question is in two "
                              "runs; give each question once")
    return dataclasses.replace(first, questions=qs)


def _load(path: Path) -> T.TunedPart:
    """A run as a tuning part under its structure's protocol (a LoCoMo-shaped run is not
    scored under ``answerable``)."""
    try:
        part = T.load_part(path, DEFAULT_PROTOCOL["chat"])
    except ConfigError:
        return T.load_part(path, DEFAULT_PROTOCOL["people"])
    if part.chat_roles:
        return part
    return T.load_part(path, DEFAULT_PROTOCOL["people"])


def dense_alone(own: F.FusionSetting) -> F.FusionSetting:
    return dataclasses.replace(own, weights=(("dense", 1.0),))


def held_metrics(part: T.TunedPart, found: T.Search) -> dict[str, np.ndarray]:
    """Per question, each reported metric under its fold's out-of-fold choice."""
    fold = found.folds[0]
    out: dict[str, np.ndarray] = {}
    for m in REPORTED:
        ev = T.Evaluator(part.questions, [m])
        vals = np.zeros(len(part.questions))
        for f, pick in enumerate(found.picks):
            test = fold == f
            if test.any():
                vals[test] = ev.per_question(found.candidates[pick])[test]
        out[m] = vals
    return out


def paired_interval(diff: np.ndarray, units: Sequence[str], n_boot: int, seed: int
                    ) -> list[float]:
    """95% percentile interval of the mean of ``diff`` under resampling of units."""
    from engram_eval.analysis.compare import draw_counts

    keys = list(dict.fromkeys(units))
    pos = {k: g for g, k in enumerate(keys)}
    sums = np.zeros(len(keys))
    sizes = np.zeros(len(keys))
    for d, u in zip(diff, units, strict=True):
        sums[pos[u]] += d
        sizes[pos[u]] += 1
    reps = np.concatenate([(counts @ sums) / (counts @ sizes)
                           for counts in draw_counts(len(keys), n_boot, seed)])
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return [float(lo), float(hi)]


def _side(part: T.TunedPart, grid: dict[str, Any], objective: Sequence[str], folds: int,
          seed: int) -> tuple[T.Search, dict[str, Any]]:
    found = T.search([part], grid, objective, "worst-ratio", folds, seed, "id-prefix")
    held = held_metrics(part, found)
    dense = T.Evaluator(part.questions, list(REPORTED)).metric_means(dense_alone(part.own))
    return found, {
        "runs": [],  # filled by the caller
        "n": len(part.questions),
        "in_sample_choice": found.candidates[found.best].to_json(),
        "in_sample_objective": float(found.per_part[0, found.best]),
        "out_of_fold_objective": float(found.held[0].mean()),
        "out_of_fold_metrics": {m: float(v.mean()) for m, v in held.items()},
        "fold_choices": [found.candidates[p].to_json() for p in found.picks],
        "dense_alone": dense,
    }


def choose(baseline: Sequence[Path], candidate: Sequence[Path], grid_path: Path, *,
           folds: int = 5, seed: int = 0, n_boot: int = 10000,
           objective: Sequence[str] = T.DEFAULT_OBJECTIVE) -> dict[str, Any]:
    """The report of the module docstring."""
    grid = T.load_grid(grid_path)
    by: dict[str, dict[str, list[T.TunedPart]]] = {}
    for side, paths in (("baseline", baseline), ("candidate", candidate)):
        for path in paths:
            part = _load(path)
            structure = "chat" if part.chat_roles else "people"
            by.setdefault(structure, {}).setdefault(side, []).append(part)
    report: dict[str, Any] = {"kind": "engram-eval/encoder-choice", "grid": grid,
                              "objective": list(objective), "folds": folds, "seed": seed,
                              "bootstrap": {"replicates": n_boot, "seed": 0,
                                            "unit": "the question id before ':'"},
                              "rule": "adopt the candidate in a structure when the 95% "
                                      "interval of the paired out-of-fold objective "
                                      "difference (candidate - baseline) is above 0",
                              "structures": {}}
    for structure, sides in sorted(by.items()):
        if set(sides) != {"baseline", "candidate"}:
            raise ConfigError(f"encoder-choice: structure {structure} has runs on one side "
                              "only; give baseline and candidate runs of each structure")
        parts = {s: pooled(sides[s]) for s in ("baseline", "candidate")}
        ids = {s: [q.question_id for q in p.questions] for s, p in parts.items()}
        if ids["baseline"] != ids["candidate"]:
            raise ProvenanceError(f"encoder-choice: {structure}: the candidate runs cover "
                                  "other questions than the baseline runs")
        entry: dict[str, Any] = {"protocol": parts["baseline"].protocol}
        held = {}
        for s, part in parts.items():
            found, entry[s] = _side(part, grid, objective, folds, seed)
            entry[s]["runs"] = [{"path": p.path, "fingerprint": p.meta.get("fingerprint"),
                                 "rows_sha256": p.rows_sha256} for p in sides[s]]
            held[s] = found.held[0]
        diff = held["candidate"] - held["baseline"]
        units = T.units_of(ids["baseline"], "id-prefix")
        interval = paired_interval(diff, units, n_boot, 0)
        entry["paired"] = {"difference": float(diff.mean()), "interval_95": interval,
                           "units": len(set(units)),
                           "questions_better": int((diff > 0).sum()),
                           "questions_worse": int((diff < 0).sum())}
        entry["adopt_candidate"] = bool(interval[0] > 0)
        report["structures"][structure] = entry
    return report


def format_report(report: dict[str, Any]) -> str:
    lines = []
    for structure, e in report["structures"].items():
        for s in ("baseline", "candidate"):
            m = e[s]["out_of_fold_metrics"]
            d = e[s]["dense_alone"]
            lines.append(f"{structure} {s:>9} n={e[s]['n']} out-of-fold objective "
                         f"{e[s]['out_of_fold_objective']:.4f}  "
                         + "  ".join(f"{k}={v:.4f}" for k, v in m.items())
                         + f"  | dense alone R@1 {d['recall_any@1']:.4f} Rall@5 "
                         f"{d['recall_all@5']:.4f}")
        p = e["paired"]
        lines.append(f"{structure} paired difference {p['difference']:+.4f} "
                     f"[{p['interval_95'][0]:+.4f}, {p['interval_95'][1]:+.4f}] over "
                     f"{p['units']} units ({p['questions_better']} better, "
                     f"{p['questions_worse']} worse): "
                     + ("adopt the candidate" if e["adopt_candidate"] else "keep the baseline"))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from engram_eval.io import dump_json, exclusive_write
    from engram_eval.provenance.derived import write_derived_sidecar
    from engram_eval.retrieval.flags import ArgumentParser, output_file

    ap = ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--baseline", nargs="+", required=True, help="tuning runs, today's encoder")
    ap.add_argument("--candidate", nargs="+", required=True,
                    help="tuning runs, each made with an encoder that never saw its questions")
    ap.add_argument("--grid", required=True, help="fusion grid YAML (engram-eval tune's)")
    ap.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    ap.add_argument("--seed", type=int, default=0, help="fold seed (default 0)")
    ap.add_argument("--output", required=True, type=output_file,
                    help="report JSON (never overwritten)")
    a = ap.parse_args(argv)
    if Path(a.output).exists() or Path(a.output).is_symlink():
        print(f"error: {a.output} exists; refusing to overwrite", file=sys.stderr)
        return 2
    try:
        report = choose([Path(x) for x in a.baseline], [Path(x) for x in a.candidate],
                        Path(a.grid), folds=a.folds, seed=a.seed)
        from engram_eval.runs.reader import read_run

        runs = [read_run(x) for x in [*a.baseline, *a.candidate]]
        exclusive_write(a.output, dump_json(report))
        write_derived_sidecar(a.output, generators=[GENERATOR], dataset=None, runs=runs,
                              files=[a.grid])
    except (EngramEvalError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_report(report))
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
