"""Metrics on corrected gold: the ``gold_overlay`` and ``protocols_audited`` blocks.

With ``--gold-overlay FILE`` (:mod:`engram_eval.data.gold_overlay`) a summary carries, beside
``protocols`` (the dataset's gold, unchanged):

* ``gold_overlay``: the overlay's record (``name``, ``sha256``, ``format``, ``n_entries``;
  the sidecar's ``selection.gold_overlay``) and, over the selected questions,
  ``n_selected_entries`` (entries naming a selected question), ``n_evidence_changed`` and
  ``n_gold_changed`` (see the overlay module), ``unresolved`` (question id -> corrected
  pieces naming no turn), ``no_gold`` (question ids left with no corrected gold: out of
  every audited denominator) and ``items``: for each selected question whose evidence
  changed, ``{key, evidence, evidence_audited, gold_changed, gold_audited: {protocol: gold
  or None}}``, the corrected gold per protocol as :func:`engram_eval.scoring.protocols.gold_for`
  gives it on the corrected question.
* ``protocols_audited``: the same block as ``protocols``
  (:func:`engram_eval.scoring.summary.summarize_rows`) computed from the rows with each listed
  item's gold replaced by ``gold_audited`` and its metrics recomputed from the row's ranking
  (:func:`engram_eval.scoring.protocols.metrics_for_gold`, the one scorer); every other row
  counts as it is.

Because ``items`` holds the corrected gold, ``verify`` recomputes ``protocols_audited`` from
the rows and the summary alone, and with the dataset and the overlay file re-derives
``gold_overlay`` itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engram_eval.data.gold_overlay import GoldOverlay
from engram_eval.data.records import Question
from engram_eval.scoring import protocols as P

OVERLAY_KEY = "gold_overlay"
AUDITED_KEY = "protocols_audited"


def overlay_block(overlay: GoldOverlay, questions: Iterable[Question],
                  protocols: Sequence[str]) -> dict[str, Any]:
    """The summary's ``gold_overlay`` block over ``questions`` (the selected ones, in
    selection order)."""
    items: dict[str, Any] = {}
    unresolved: dict[str, list[str]] = {}
    no_gold: list[str] = []
    n_selected = n_gold_changed = 0
    for q in questions:
        item = overlay.items.get(q.question_id)
        if item is None:
            continue
        n_selected += 1
        if not item.evidence_changed:
            continue
        fixed = overlay.corrected(q)
        gold = {p: (list(g) if (g := P.gold_for(fixed, p)) is not None else None)
                for p in protocols}
        items[q.question_id] = {"key": item.key, "evidence": list(item.evidence),
                                "evidence_audited": list(item.evidence_audited),
                                "gold_changed": item.gold_changed, "gold_audited": gold}
        n_gold_changed += item.gold_changed
        if item.unresolved:
            unresolved[q.question_id] = list(item.unresolved)
        if not item.gold_audited:
            no_gold.append(q.question_id)
    return {**overlay.record(), "n_selected_entries": n_selected,
            "n_evidence_changed": len(items), "n_gold_changed": n_gold_changed,
            "unresolved": unresolved, "no_gold": no_gold, "items": items}


def audited_rows(rows: Sequence[Mapping[str, Any]], items: Mapping[str, Any],
                 protocols: Sequence[str]) -> list[dict[str, Any]]:
    """``rows`` with each listed item's gold replaced by its ``gold_audited`` and its
    metrics recomputed from the row's ranking (other rows copied unchanged)."""
    out = []
    for r in rows:
        item = items.get(r["question_id"])
        if item is None:
            out.append(dict(r))
            continue
        entries = {str(k): int(v) for k, v in (r.get("haystack_entries") or {}).items()}
        gold = {p: item["gold_audited"].get(p) for p in protocols}
        metrics = {p: (None if g is None else
                       P.metrics_for_gold(p, g, r["ranked_session_ids"], entries))
                   for p, g in gold.items()}
        out.append({**r, "gold": gold, "metrics": metrics})
    return out


def audited_protocols(rows: Sequence[Mapping[str, Any]], block: Mapping[str, Any],
                      protocols: Sequence[str]) -> dict[str, Any]:
    """The summary's ``protocols_audited`` from the rows and a ``gold_overlay`` block."""
    from engram_eval.scoring.summary import summarize_rows

    fixed = audited_rows(rows, block.get("items") or {}, protocols)
    return summarize_rows(fixed, protocols)["protocols"]


def audited_summary(rows: Sequence[Mapping[str, Any]], overlay: GoldOverlay,
                    questions: Iterable[Question], protocols: Sequence[str]
                    ) -> dict[str, Any]:
    """``{gold_overlay, protocols_audited}`` for a summary (see the module docstring)."""
    block = overlay_block(overlay, questions, protocols)
    return {OVERLAY_KEY: block, AUDITED_KEY: audited_protocols(rows, block, protocols)}


def verdict_moves(rows: Sequence[Mapping[str, Any]], block: Mapping[str, Any],
                  protocol: str, metric: str) -> list[dict[str, Any]]:
    """For each item of ``block`` whose gold changed: its ``metric`` under ``protocol`` on
    the dataset's gold and on the corrected gold (None where the question is outside the
    denominator), from ``rows`` (a run's); what the report page lists."""
    by_id = {r["question_id"]: r for r in rows}
    items = block.get("items") or {}
    fixed = {r["question_id"]: r for r in audited_rows(
        [by_id[q] for q in items if q in by_id], items, [protocol])}
    out = []
    for qid, item in items.items():
        if not item.get("gold_changed") or qid not in by_id:
            continue
        before = (by_id[qid].get("metrics") or {}).get(protocol)
        after = fixed[qid]["metrics"].get(protocol)
        out.append({"question_id": qid, "key": item.get("key"),
                    "gold": (by_id[qid].get("gold") or {}).get(protocol),
                    "gold_audited": item["gold_audited"].get(protocol),
                    "before": None if before is None else before.get(metric),
                    "after": None if after is None else after.get(metric)})
    return out
