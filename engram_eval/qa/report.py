"""The judged-accuracy report: overall accuracy, task-averaged accuracy (the mean of the
per-type means), abstention accuracy (``_abs`` questions, which also count in their own type),
per-type accuracy with counts, and accuracy split by whether retrieval found the evidence —
``recall_all@k`` of that question's context (``found`` = 1, ``missed`` = 0, ``no gold`` for
questions without answerable gold, e.g. ``_abs``) — the table that separates retrieval
failures from reading failures. One report holds one judge model: rows from two are refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engram_eval.errors import ProvenanceError
from engram_eval.io import printable

SPLITS = ("found", "missed", "no gold")


def _acc(labels: Sequence[bool]) -> dict[str, Any]:
    return {"n": len(labels), "correct": sum(labels),
            "accuracy": round(sum(labels) / len(labels), 4) if labels else None}


def build_report(rows: Sequence[Mapping[str, Any]],
                 evidence: Mapping[str, float | None] | None, *, k: int | None,
                 judge_model: str) -> dict[str, Any]:
    models = sorted({r["judge_model"] for r in rows})
    if models and models != [judge_model]:
        raise ProvenanceError(f"judged rows come from judge model(s) {models}, not only "
                              f"{judge_model!r}; one table never mixes judge models")
    by_type: dict[str, list[bool]] = {}
    for r in rows:
        by_type.setdefault(r["question_type"], []).append(bool(r["label"]))
    types = {t: _acc(v) for t, v in sorted(by_type.items())}
    means = [v["accuracy"] for v in types.values() if v["accuracy"] is not None]
    report: dict[str, Any] = {
        "judge_model": judge_model,
        "n": len(rows),
        "overall_accuracy": _acc([bool(r["label"]) for r in rows])["accuracy"],
        "task_averaged_accuracy": round(sum(means) / len(means), 4) if means else None,
        "abstention_accuracy": _acc([bool(r["label"]) for r in rows if r["abstention"]]),
        "by_type": types,
    }
    if evidence is not None:
        split: dict[str, list[bool]] = {s: [] for s in SPLITS}
        split_type: dict[str, dict[str, list[bool]]] = {}
        for r in rows:
            value = evidence.get(r["question_id"])
            s = "no gold" if value is None else ("found" if value >= 1.0 else "missed")
            split[s].append(bool(r["label"]))
            split_type.setdefault(r["question_type"], {x: [] for x in SPLITS})[s].append(
                bool(r["label"]))
        report["by_evidence"] = {
            "metric": f"recall_all@{k}", "protocol": "answerable",
            "overall": {s: _acc(v) for s, v in split.items()},
            "by_type": {t: {s: _acc(v) for s, v in d.items()}
                        for t, d in sorted(split_type.items())}}
    return report


def _pct(a: Any) -> str:
    return "   -  " if a is None else f"{100 * a:5.1f}%"


def format_report(report: Mapping[str, Any]) -> str:
    lines = [f"judge model: {report['judge_model']}   questions: {report['n']}",
             f"overall accuracy        {_pct(report['overall_accuracy'])}",
             f"task-averaged accuracy  {_pct(report['task_averaged_accuracy'])}",
             f"abstention accuracy     {_pct(report['abstention_accuracy']['accuracy'])} "
             f"(n={report['abstention_accuracy']['n']})", ""]
    ev = report.get("by_evidence")
    head = f"{'question type':<28}{'n':>5}{'accuracy':>10}"
    if ev:
        head += "".join(f"{s + ' (n)':>18}" for s in SPLITS)
    lines.append(head)
    rows = list(report["by_type"].items()) + [("all", {"n": report["n"],
                                                       "accuracy": report["overall_accuracy"]})]
    for t, v in rows:
        line = f"{printable(t):<28}{v['n']:>5}{_pct(v['accuracy']):>10}"
        if ev:
            cells = ev["overall"] if t == "all" else ev["by_type"][t]
            line += "".join(f"{_pct(cells[s]['accuracy']):>12} ({cells[s]['n']:>3})"
                            for s in SPLITS)
        lines.append(line)
    if ev:
        lines.append(f"(evidence split by {ev['metric']} of each question's context, "
                     f"{ev['protocol']} gold: a wrong answer under 'missed' is a retrieval failure, "
                     "under 'found' a reading failure)")
    return "\n".join(lines)
