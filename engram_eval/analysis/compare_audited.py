"""``engram-eval compare A B --gold-overlay FILE --dataset D``: the paired comparison on the
dataset's evidence and on the corrected one.

The report is :func:`engram_eval.analysis.compare.compare_runs` on the runs as they are
(every key unchanged), plus:

* ``gold_overlay``: the overlay's block over the compared questions
  (:func:`engram_eval.scoring.audited.overlay_block`: record, counts, the items whose evidence
  changed with their corrected gold);
* ``audited``: ``compare_runs`` on both runs' rows with that corrected gold (rows rescored by
  :func:`engram_eval.scoring.audited.audited_rows`, the package's one scorer), the same
  settings: its ``n``, ``groups``, ``flips``, ``segment_consistency`` and ``verdict``;
* ``verdict_moved``: per metric, the overall delta and significance on both golds, and
  whether the verdict (better / worse / no significant difference) changed.

The dataset must be the one both runs were made over (sha256), since the overlay's keys
and evidence are resolved against it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engram_eval.analysis.compare import compare_runs
from engram_eval.errors import ProvenanceError
from engram_eval.runs.reader import FinishedRun

AUDITED_PARTS = ("n", "groups", "flips", "segment_consistency", "verdict")


def _verdict(entry: Mapping[str, Any]) -> str:
    if not entry["significant"]:
        return "no significant difference"
    return "better" if entry["delta"] > 0 else "worse"


def compare_audited(a: FinishedRun, b: FinishedRun, gold_overlay: str | Path,
                    dataset: str | Path, **kwargs: Any) -> dict[str, Any]:
    """The report of the module docstring; ``kwargs`` go to ``compare_runs`` unchanged."""
    from engram_eval.data.datasets import load_questions
    from engram_eval.data.gold_overlay import read_gold_overlay
    from engram_eval.io import sha256_file
    from engram_eval.scoring.audited import overlay_block

    digest = sha256_file(dataset)
    if digest != a.dataset_sha256:
        raise ProvenanceError(f"--dataset {dataset} has sha256 {digest[:16]}…, the runs used "
                              f"{str(a.dataset_sha256)[:16]}…: the overlay is resolved "
                              "against the runs' dataset")
    rep = compare_runs(a, b, **kwargs)  # refuses runs over different data or questions
    _, questions = load_questions(dataset)
    by_id = {q.question_id: q for q in questions}
    overlay = read_gold_overlay(gold_overlay, questions, dataset=dataset)
    block = overlay_block(overlay, [by_id[r["question_id"]] for r in a.rows
                                    if r["question_id"] in by_id], [rep["protocol"]])
    return with_block(rep, a, b, block, **kwargs)


def with_block(rep: Mapping[str, Any], a: FinishedRun, b: FinishedRun,
               block: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
    """``rep`` (``compare_runs(a, b, **kwargs)``) with ``gold_overlay`` (``block``, an
    overlay block holding the compared protocol), ``audited`` and ``verdict_moved``."""
    from engram_eval.scoring.audited import audited_rows

    protocol = rep["protocol"]
    fixed = [dataclasses.replace(run, rows=audited_rows(run.rows, block["items"], [protocol]))
             for run in (a, b)]
    audited = compare_runs(fixed[0], fixed[1], **kwargs)
    before, after = rep["groups"]["overall"]["metrics"], audited["groups"]["overall"]["metrics"]
    moved = {}
    for name in rep["metrics"]:
        was, now = _verdict(before[name]), _verdict(after[name])
        moved[name] = {"delta": before[name]["delta"], "delta_audited": after[name]["delta"],
                       "verdict": was, "verdict_audited": now, "moved": was != now}
    return {**rep, "gold_overlay": dict(block),
            "audited": {k: audited[k] for k in AUDITED_PARTS}, "verdict_moved": moved}


def format_audited(rep: Mapping[str, Any]) -> str:
    """The lines ``compare`` prints after the report on the dataset's gold (the headline
    metrics, as :func:`engram_eval.analysis.compare.format_report`)."""
    block, aud = rep["gold_overlay"], rep["audited"]
    lines = ["", f"audited gold: {block['name']} (sha256 {block['sha256'][:12]}…): "
             f"{block['n_evidence_changed']} compared item(s) with corrected evidence, "
             f"{block['n_gold_changed']} with changed gold sessions; audited n={aud['n']}"]
    from engram_eval.analysis.compare import HEADLINE

    names = [m for m in HEADLINE if m in rep["verdict_moved"]] or list(rep["verdict_moved"])
    for name in names:
        m = rep["verdict_moved"][name]
        e = aud["groups"]["overall"]["metrics"][name]
        lines.append(f"  {name:<15} delta {m['delta']:+.4f} -> audited {m['delta_audited']:+.4f} "
                     f"[{e['ci'][0]:+.4f}, {e['ci'][1]:+.4f}]  {m['verdict']} -> "
                     f"{m['verdict_audited']}" + ("  (verdict moved)" if m["moved"] else ""))
    moved = [n for n, m in rep["verdict_moved"].items() if m["moved"]]
    lines.append(f"  verdicts moved: {', '.join(moved) or 'none'}")
    return "\n".join(lines)
