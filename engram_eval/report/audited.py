"""The report page's "Audited labels" block: which items a gold overlay changed and how each
run's verdict moved (:func:`audited_view` -> the document's ``audited`` part, rendered by
:func:`engram_eval.report.page.audited_section`).

The overlay block comes from the run's summary (a run made with ``--gold-overlay``, whose
re-derivation ``verify --gold-overlay`` checks), or is computed from ``report --gold-overlay
FILE --dataset D`` (:func:`engram_eval.scoring.audited.overlay_block`). Every number is the
package's: the metrics on both golds by :func:`engram_eval.scoring.audited.audited_protocols`
and :func:`engram_eval.scoring.summary.summarize_rows`, each changed item's metric before and
after by :func:`engram_eval.scoring.audited.verdict_moves`, the comparison on both golds by
:func:`engram_eval.analysis.compare_audited.with_block`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engram_eval.runs.reader import FinishedRun

COUNTS = ("name", "sha256", "format", "n_entries", "n_selected_entries", "n_evidence_changed",
          "n_gold_changed", "no_gold", "unresolved")


def shown_metrics(k: int) -> list[str]:
    return list(dict.fromkeys(["recall_any@1", f"recall_any@{k}", f"recall_all@{k}",
                               f"ndcg_any@{k}"]))


def _run_part(run: FinishedRun, block: Mapping[str, Any], protocol: str,
              k: int) -> dict[str, Any]:
    from engram_eval.scoring.audited import audited_protocols, verdict_moves
    from engram_eval.scoring.summary import summarize_rows

    before = summarize_rows(run.rows, [protocol])["protocols"][protocol]
    after = audited_protocols(run.rows, block, [protocol])[protocol]
    names = shown_metrics(k)
    return {"label": run.label, "n": before["n"], "n_audited": after["n"],
            "metrics": {m: before["metrics"].get(m) for m in names},
            "metrics_audited": {m: after["metrics"].get(m) for m in names},
            "moves": {m["question_id"]: m for m in verdict_moves(
                run.rows, block, protocol, f"recall_all@{k}")}}


def audited_view(run: FinishedRun, other: FinishedRun | None, block: Mapping[str, Any],
                 protocol: str, k: int, compare_report: Mapping[str, Any] | None = None,
                 compare_settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The document part: the overlay's counts, the metrics of each run on both golds, every
    item whose gold changed with each run's ``recall_all@k`` before and after, and (with a
    comparison ``compare_report`` of ``other`` as A and ``run`` as B) the verdicts on both
    golds; ``compare_settings``: the keyword arguments it was made with)."""
    view: dict[str, Any] = {"protocol": protocol, "k": k,
                            "overlay": {c: block.get(c) for c in COUNTS},
                            "runs": [_run_part(run, block, protocol, k)]}
    if other is not None:
        view["runs"].append(_run_part(other, block, protocol, k))
    if other is not None and compare_report is not None:
        from engram_eval.analysis.compare_audited import with_block

        rep = with_block(compare_report, other, run, block, **(compare_settings or {}))
        view["verdict_moved"] = rep["verdict_moved"]
    items = []
    for qid, item in (block.get("items") or {}).items():
        if not item.get("gold_changed"):
            continue
        moves = [part["moves"].get(qid) for part in view["runs"]]
        first = next((m for m in moves if m is not None), None)
        items.append({"question_id": qid, "key": item.get("key"),
                      "evidence": item.get("evidence"),
                      "evidence_audited": item.get("evidence_audited"),
                      "gold": first and first["gold"], "gold_audited":
                      (item.get("gold_audited") or {}).get(protocol),
                      "verdicts": [None if m is None else [m["before"], m["after"]]
                                   for m in moves]})
    view["items"] = items
    for part in view["runs"]:
        del part["moves"]
    return view


def overlay_for_report(run: FinishedRun, gold_overlay: Any, dataset: Any,
                       questions: Sequence[Any] | None, protocol: str
                       ) -> Mapping[str, Any] | None:
    """The overlay block the page shows: computed from ``gold_overlay`` (a file) against
    the dataset's ``questions`` when both are given, else the run's summary's block (a run
    made with ``--gold-overlay``), else None."""
    from engram_eval.errors import ConfigError

    if gold_overlay is not None:
        if not questions:
            raise ConfigError("report: --gold-overlay needs --dataset (the file the run "
                              "used), against which the overlay is resolved")
        from engram_eval.data.gold_overlay import read_gold_overlay
        from engram_eval.scoring.audited import overlay_block

        by_id = {q.question_id: q for q in questions}
        overlay = read_gold_overlay(gold_overlay, list(questions), dataset=dataset)
        return overlay_block(overlay, [by_id[r["question_id"]] for r in run.rows
                                       if r["question_id"] in by_id], [protocol])
    block = (run.summary or {}).get("gold_overlay")
    return block if isinstance(block, Mapping) else None
