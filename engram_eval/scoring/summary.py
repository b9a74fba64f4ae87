"""Summaries of result rows: per-protocol means, denominators, baselines, tables.

Everything here is computed from rows alone (``verify`` recomputes it the same way). A
summary file ``<output>.summary.json`` holds the run's fingerprint, dataset name and hash,
retriever, ``n_questions``, ``rows_sha256`` (sha256 of the uncompressed rows bytes), the
per-protocol blocks and, when the retriever traces it, ``temporal_windows`` (how many
questions got each temporal-parsing status). The runner also gives ``unparsable_dates``
(``question_date`` / ``session_dates`` that are not empty but cannot be parsed, over the
selected questions) and ``gold_absent_from_haystack`` (how many selected questions name
answer session ids that are not in their haystack: :func:`gold_absent_message`), both
counted from the dataset rather than the rows, for a LoCoMo run ``evidence_unresolved``
(the selected items whose evidence names no turn, by question id with their raw evidence:
:func:`evidence_unresolved`), and, for a run under a frozen manifest, ``frozen_source``. :data:`SUMMARY_FIELDS` lists every key; summaries written before a key
existed simply lack it (``verify`` re-derives a key only when it is there).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from engram_eval.data.records import Question
from engram_eval.scoring import protocols as P
from engram_eval.scoring.metrics import KS, mean_metrics, random_baseline

TABLE_METRICS = ("recall_any@1", "recall_any@3", "recall_any@5", "recall_any@10",
                 "recall_all@5", "recall_all@10", "ndcg_any@5", "ndcg_any@10")

DENOMINATORS = {
    "answerable": "questions with answer_session_ids, excluding _abs (Engram protocol)",
    "official": "LongMemEval reference printer (print_retrieval_metrics.py): every non-_abs "
                "question; gold = answer sessions with a user has_answer turn; a question "
                "with no gold scores recall_any 0, recall_all 1, ndcg 0; a session id "
                "repeated in the haystack takes one position per entry",
    "official_nonempty_gold": "reference gold, questions with no gold skipped, one position "
                              "per distinct session",
    "all": "every question (no-gold questions score recall_all=1, recall_any=0)",
    "locomo": "QA items with at least one evidence session resolved",
    "locomo_no_adversarial": "QA items with at least one evidence session resolved, "
                             "adversarial category 5 left out (categories 1-4)",
}


def summarize_rows(rows: Sequence[Mapping[str, Any]], protocols: Sequence[str]) -> dict[str, Any]:
    """Per-protocol means, per-type tables and random baselines, from rows alone."""
    summaries = {}
    for p in protocols:
        per_q = [(r["question_id"], r["question_type"], r["metrics"].get(p)) for r in rows]
        summaries[p] = P.summarize(per_q, p)
    out = P.summary_to_json(summaries)
    for p in protocols:
        base = []
        for r in rows:
            g = r.get("gold", {}).get(p)
            if r["metrics"].get(p) is None or g is None:
                continue
            n_gold = len(set(g) & set(r["ranked_session_ids"]))
            pool = len(r["ranked_session_ids"])
            row = {}
            for k in KS:
                rb = random_baseline(n_gold, pool, k) if pool else {
                    f"recall_any@{k}": 0.0, f"recall_all@{k}": 1.0 if n_gold == 0 else 0.0}
                row.update(rb)
            base.append(row)
        out["protocols"][p]["random_baseline"] = mean_metrics(base) if base else {}
        out["protocols"][p]["denominator"] = DENOMINATORS.get(p, p)
    windows = temporal_windows(rows)
    if windows:
        out["temporal_windows"] = windows
    return out


def temporal_windows(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """``{status: number of questions}`` over rows whose ``trace.question`` has a
    ``temporal_status`` (written by the retriever's temporal step); ``{}`` when none has."""
    counts: Counter[str] = Counter()
    for r in rows:
        q = (r.get("trace") or {}).get("question") or {}
        status = q.get("temporal_status") if isinstance(q, Mapping) else None
        if status is not None:
            counts[str(status)] += 1
    return dict(sorted(counts.items()))


#: Every top-level key :func:`build_summary` writes: the allow-list ``verify`` holds a
#: summary to (a key outside it was not written by the package).
SUMMARY_FIELDS = ("fingerprint", "dataset", "dataset_sha256", "retriever", "n_questions",
                  "rows_sha256", "protocols", "temporal_windows", "unparsable_dates",
                  "gold_absent_from_haystack", "evidence_unresolved", "frozen_source",
                  "heldout_questions", "cost", "system_ids", "gold_overlay",
                  "protocols_audited")
#: The per-row ``timing`` fields :func:`cost_summary` summarises (wall seconds; requests and
#: bytes where the retriever counts them: a system behind HTTP).
COST_FIELDS = ("seconds", "requests", "bytes_sent", "bytes_received")
#: The percentiles of :func:`cost_summary` (numpy's linear interpolation).
COST_PERCENTILES = (50, 90, 99)


def cost_summary(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per question cost over ``rows`` (their ``timing``): for each of :data:`COST_FIELDS`
    the rows record, ``{"n", "total", "mean", "p50", "p90", "p99", "max"}`` (a measurement:
    it differs between identical runs; ``verify`` recomputes it from the rows)."""
    import numpy as np

    values: dict[str, list[float]] = {k: [] for k in COST_FIELDS}
    for r in rows:
        timing = r.get("timing")
        if not isinstance(timing, Mapping):
            continue
        for k in COST_FIELDS:
            v = timing.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                values[k].append(float(v))
    out: dict[str, Any] = {}
    for k, vs in values.items():
        if not vs:
            continue
        a = np.asarray(vs, dtype=np.float64)
        out[k] = {"n": len(vs), "total": round(float(a.sum()), 6),
                  "mean": round(float(a.mean()), 6),
                  **{f"p{q}": round(float(np.percentile(a, q)), 6) for q in COST_PERCENTILES},
                  "max": round(float(a.max()), 6)}
    return out
#: The summary key (and ``engram-eval score``'s count) of questions whose answer session ids
#: are not all in their haystack.
GOLD_ABSENT = "gold_absent_from_haystack"


def gold_absent(questions: Iterable[Question]) -> dict[str, tuple[str, ...]]:
    """``{question id: its answer session ids absent from its haystack}`` over
    ``questions``, for those that have any (:attr:`Question.gold_absent`)."""
    return {q.question_id: gone for q in questions if (gone := q.gold_absent)}


def gold_absent_message(dataset: str | Path, absent: Mapping[str, Sequence[str]]) -> str:
    """The one warning for the selected questions ``absent`` (:func:`gold_absent`) of
    ``dataset``; ``""`` when there are none. ``engram-eval run`` and ``score`` give it, and
    a run's summary counts them (:data:`GOLD_ABSENT`)."""
    if not absent:
        return ""
    qid, gone = next(iter(absent.items()))
    return (f"{dataset}: {len(absent)} selected question(s) name answer session ids that "
            f"are not in their haystack (e.g. {qid}: {', '.join(gone[:3])}); no retriever "
            "can rank them, so they count as missed in every protocol whose gold is "
            f"answer_session_ids ({GOLD_ABSENT} in the summary)")


#: The summary key (and ``engram-eval score``'s) naming the selected LoCoMo items whose
#: evidence resolves to no turn of their conversation (:func:`evidence_unresolved`).
EVIDENCE_UNRESOLVED = "evidence_unresolved"


def evidence_unresolved(questions: Iterable[Question]) -> dict[str, list[str]]:
    """``{question id: its raw evidence}`` over ``questions`` for the LoCoMo items (those
    with an ``evidence`` list) whose evidence resolves to no turn of their conversation: an
    empty list, ``"D99:1"`` (no such turn), ``"D1-3"`` (not a turn id). They have no gold,
    so every LoCoMo protocol leaves them out of its denominator; like the gold-absent case of
    LongMemEval they are named, never only counted."""
    out: dict[str, list[str]] = {}
    for q in questions:
        evidence = q.get_extra("evidence")
        if isinstance(evidence, tuple | list) and not q.answer_session_ids:
            out[q.question_id] = [str(e) for e in evidence]
    return out


def evidence_unresolved_message(dataset: str | Path,
                                items: Mapping[str, Sequence[str]]) -> str:
    """The one warning naming the items of :func:`evidence_unresolved` (``""`` when none):
    the first five by question id with their raw evidence, and the count."""
    if not items:
        return ""
    shown = "; ".join(f"{qid} {list(ev)!r}" for qid, ev in list(items.items())[:5])
    more = f" and {len(items) - 5} more" if len(items) > 5 else ""
    return (f"{dataset}: {len(items)} selected QA item(s) have evidence that resolves to no "
            f"turn of their conversation ({shown}{more}); they have no gold and are left out "
            f"of every locomo protocol's denominator (listed in the summary's "
            f"{EVIDENCE_UNRESOLVED})")


def build_summary(rows: Sequence[Mapping[str, Any]], protocols: Sequence[str], *,
                  fingerprint: str, dataset: str, dataset_sha256: str, retriever: str,
                  rows_sha256: str, unparsable_dates: Mapping[str, int] | None = None,
                  gold_absent_from_haystack: int | None = None,
                  evidence_unresolved: Mapping[str, Sequence[str]] | None = None,
                  frozen_source: Mapping[str, Any] | None = None,
                  heldout_questions: Mapping[str, Any] | None = None,
                  system_ids: str | None = None,
                  audited: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The summary file's content (see the module docstring); ``unparsable_dates``,
    ``gold_absent_from_haystack`` and ``evidence_unresolved`` (from the dataset, by the
    runner and by merge), ``frozen_source`` (the sidecar's record of a frozen manifest) and
    ``heldout_questions`` (the sidecar's label of a run of a split's source: "contains
    held-out questions: not a measurement", :func:`engram_eval.provenance.guard.source_label`)
    are written when given, and so is ``system_ids`` (a system from outside the package:
    "opaque ids" or "ids visible", :mod:`engram_eval.retrieval.systems`). ``cost``: the rows'
    per-question cost (:func:`cost_summary`). ``audited``: ``{gold_overlay, protocols_audited}``
    of a run with ``--gold-overlay`` (:func:`engram_eval.scoring.audited.audited_summary`)."""
    out = {"fingerprint": fingerprint, "dataset": dataset, "dataset_sha256": dataset_sha256,
           "retriever": retriever, "n_questions": len(rows), "rows_sha256": rows_sha256,
           **summarize_rows(rows, protocols)}
    if unparsable_dates is not None:
        out["unparsable_dates"] = dict(unparsable_dates)
    if gold_absent_from_haystack is not None:
        out[GOLD_ABSENT] = int(gold_absent_from_haystack)
    if evidence_unresolved is not None:
        out[EVIDENCE_UNRESOLVED] = {k: list(v) for k, v in evidence_unresolved.items()}
    if frozen_source is not None:
        out["frozen_source"] = dict(frozen_source)
    if heldout_questions is not None:
        out["heldout_questions"] = dict(heldout_questions)
    if system_ids is not None:
        out["system_ids"] = system_ids
    out["cost"] = cost_summary(rows)
    if audited is not None:
        out.update(audited)
    return out


def format_summary(summary: Mapping[str, Any], metric_names: Sequence[str] = TABLE_METRICS) -> str:
    """One table per protocol (header names protocol, n and skipped), with its denominator;
    for a system from outside the package, first what ids it saw; the cost per question."""
    lines = []
    if summary.get("system_ids"):
        lines.append(f"system: {summary['retriever']} ({summary['system_ids']})")
        lines.append("")
    for p, s in summary["protocols"].items():
        ps = P.ProtocolSummary(p, s["n"], s["metrics"],
                               {t: (v["n"], v["metrics"]) for t, v in s["by_type"].items()},
                               s.get("n_skipped", 0))
        lines.append(P.format_table(ps, metric_names))
        lines.append(f"  denominator: {s.get('denominator', DENOMINATORS.get(p, p))}")
        lines.append("")
    windows = summary.get("temporal_windows")
    if windows:
        lines.append("temporal windows: " + ", ".join(f"{k}={v}" for k, v in windows.items()))
        lines.append("")
    dates = summary.get("unparsable_dates")
    if dates and any(dates.values()):
        lines.append("unparsable dates: " + ", ".join(f"{k}={v}" for k, v in dates.items()))
        lines.append("")
    absent = summary.get(GOLD_ABSENT)
    if absent:
        lines.append(f"gold absent from the haystack: {absent} question(s), scored as missed")
        lines.append("")
    cost = summary.get("cost")
    if isinstance(cost, Mapping) and cost:
        lines.append("cost per question: " + "; ".join(
            f"{k} p50 {v['p50']:g}, p90 {v['p90']:g}, p99 {v['p99']:g}, max {v['max']:g}"
            for k, v in cost.items() if isinstance(v, Mapping)))
        lines.append("")
    overlay = summary.get("gold_overlay")
    if overlay and summary.get("protocols_audited"):
        lines.append(f"audited gold ({overlay['name']}, sha256 {overlay['sha256'][:12]}…): "
                     f"{overlay['n_evidence_changed']} selected item(s) with corrected "
                     f"evidence, {overlay['n_gold_changed']} with changed gold sessions, "
                     f"{len(overlay['no_gold'])} left with no gold "
                     f"{overlay['no_gold'][:5] if overlay['no_gold'] else ''}".rstrip())
        lines.append("")
        lines.append(format_summary({"protocols": summary["protocols_audited"]},
                                    metric_names).replace("protocol=", "audited protocol="))
    return "\n".join(lines)
