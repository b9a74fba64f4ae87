"""Evaluation protocols: which questions count and which sessions are gold.

A protocol fixes the *denominator* (the questions that are scored) and the *gold* of each
question. Results from different protocols are never mixed: every summary, JSON file and
table names its protocol and its ``n``.

LongMemEval protocols (:data:`LONGMEMEVAL_PROTOCOLS`), counts on full LongMemEval_S:

==============  =====  ===========================================================
protocol        n      rule
==============  =====  ===========================================================
``answerable``  470    Engram protocol. Skip ``_abs`` questions and questions with
                       no ``answer_session_ids``; gold = ``answer_session_ids``.
``official``    419    The reference scorer's gold. Skip ``_abs``; gold = answer
                       sessions present in the haystack that have at least one
                       *user* turn with ``has_answer`` (the reference relabels the
                       others ``noans``); skip questions left with no gold.
``all``         500    Every question; gold = ``answer_session_ids`` (possibly
                       empty, scored with the no-gold convention: recall_any 0,
                       recall_all 1, ndcg 0).
==============  =====  ===========================================================

``locomo`` (not a LongMemEval protocol): gold = the evidence sessions the LoCoMo loader put in
``answer_session_ids``, restricted to sessions of the conversation; items with no resolvable
evidence are skipped.

Note on ``official``: the reference script (``run_retrieval.py``) averages over every
non-``_abs`` question, so questions whose answer sessions were all relabelled ``noans`` enter
its mean with recall_any 0 / recall_all 1 / ndcg 0. This package's ``official`` protocol
drops them instead and says so through ``n`` and ``n_skipped``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engram_eval.data.records import Question, Session
from engram_eval.metrics import KS, mean_metrics, question_metrics

__all__ = [
    "LONGMEMEVAL_PROTOCOLS",
    "PROTOCOLS",
    "ProtocolSummary",
    "format_table",
    "gold_for",
    "score_question",
    "summarize",
    "summary_to_json",
]

LONGMEMEVAL_PROTOCOLS: tuple[str, ...] = ("answerable", "official", "all")
"""The three LongMemEval denominators (see the module docstring's table)."""

PROTOCOLS: tuple[str, ...] = LONGMEMEVAL_PROTOCOLS + ("locomo",)
"""Every protocol :func:`gold_for` knows."""


def _dedupe(ids: Sequence[str]) -> tuple[str, ...]:
    seen: set[str] = set()
    out: list[str] = []
    for sid in ids:
        if sid not in seen:
            seen.add(sid)
            out.append(sid)
    return tuple(out)


def _has_user_evidence(session: Session) -> bool:
    return any(t.role == "user" and t.has_answer for t in session.turns)


def _check_protocol(protocol: str) -> None:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {PROTOCOLS}")


def gold_for(question: Question, protocol: str) -> tuple[str, ...] | None:
    """The gold session ids of ``question`` under ``protocol``, or None when it is skipped.

    None means "not in this protocol's denominator". A returned tuple is duplicate-free and
    keeps the order of ``answer_session_ids``; only ``all`` can return an empty tuple.
    Raises ``ValueError`` for an unknown protocol.
    """
    _check_protocol(protocol)
    answers = _dedupe(question.answer_session_ids)
    if protocol == "all":
        return answers
    if protocol == "answerable":
        if question.is_abstention or not answers:
            return None
        return answers
    if protocol == "official":
        if question.is_abstention:
            return None
        by_id = {s.session_id: s for s in question.sessions}
        gold = tuple(
            sid for sid in answers if sid in by_id and _has_user_evidence(by_id[sid])
        )
        return gold or None
    # locomo
    present = set(question.session_ids)
    gold = tuple(sid for sid in answers if sid in present)
    return gold or None


def score_question(
    question: Question, ranking: Sequence[str], protocol: str, ks: Sequence[int] = KS
) -> dict[str, float] | None:
    """:func:`~engram_eval.metrics.question_metrics` under ``protocol``'s gold, or None if skipped."""
    gold = gold_for(question, protocol)
    if gold is None:
        return None
    return question_metrics(gold, ranking, ks)


@dataclass(frozen=True)
class ProtocolSummary:
    """Mean metrics of one protocol.

    ``n`` scored questions (the denominator), ``n_skipped`` questions outside it;
    ``metrics`` is the plain mean over the ``n`` scored questions; ``by_type`` maps each
    question type with at least one scored question to ``(count, mean metrics)``.
    """

    protocol: str
    n: int
    metrics: dict[str, float]
    by_type: dict[str, tuple[int, dict[str, float]]]
    n_skipped: int


def summarize(
    per_question: Sequence[tuple[str, str, Mapping[str, float] | None]], protocol: str
) -> ProtocolSummary:
    """Aggregate per-question rows ``(question_id, question_type, metrics or None)``.

    None marks a question skipped by the protocol. Raises ``ValueError`` for a repeated
    question id or scored rows with different metric keys. ``by_type`` is sorted by type.
    """
    seen: set[str] = set()
    scored: list[Mapping[str, float]] = []
    per_type: dict[str, list[Mapping[str, float]]] = {}
    n_skipped = 0
    for qid, qtype, row in per_question:
        if qid in seen:
            raise ValueError(f"question id {qid!r} appears more than once")
        seen.add(qid)
        if row is None:
            n_skipped += 1
            continue
        scored.append(row)
        per_type.setdefault(qtype, []).append(row)
    by_type = {
        t: (len(rows), mean_metrics(rows)) for t, rows in sorted(per_type.items())
    }
    return ProtocolSummary(
        protocol=protocol,
        n=len(scored),
        metrics=mean_metrics(scored),
        by_type=by_type,
        n_skipped=n_skipped,
    )


def summary_to_json(summaries: Mapping[str, ProtocolSummary]) -> dict[str, Any]:
    """JSON-ready form: ``{"protocols": {NAME: {"n", "n_skipped", "metrics", "by_type"}}}``.

    ``by_type`` is ``{TYPE: {"n": int, "metrics": {...}}}``. All dicts are fresh copies.
    """
    out: dict[str, Any] = {}
    for name, s in summaries.items():
        out[name] = {
            "n": s.n,
            "n_skipped": s.n_skipped,
            "metrics": dict(s.metrics),
            "by_type": {
                t: {"n": count, "metrics": dict(m)}
                for t, (count, m) in sorted(s.by_type.items())
            },
        }
    return {"protocols": out}


def format_table(summary: ProtocolSummary, metric_names: Sequence[str]) -> str:
    """A plain-text table: one row per question type (sorted), then an ``overall`` row.

    The header line names the protocol and its denominator, e.g.
    ``protocol=answerable  n=470  skipped=30``. Values print with 4 decimals; a metric
    absent from a row with no scored questions prints ``-``. Raises ``ValueError`` for a
    metric name that the (non-empty) summary does not have.
    """
    names = list(metric_names)
    if summary.n > 0:
        unknown = [m for m in names if m not in summary.metrics]
        if unknown:
            raise ValueError(f"unknown metric names for this summary: {unknown}")

    def cell(metrics: Mapping[str, float], name: str) -> str:
        return f"{metrics[name]:.4f}" if name in metrics else "-"

    rows: list[list[str]] = [["type", "n", *names]]
    for qtype, (count, m) in sorted(summary.by_type.items()):
        rows.append([qtype, str(count), *(cell(m, name) for name in names)])
    rows.append(
        ["overall", str(summary.n), *(cell(summary.metrics, name) for name in names)]
    )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"protocol={summary.protocol}  n={summary.n}  skipped={summary.n_skipped}"]
    for r in rows:
        first = r[0].ljust(widths[0])
        rest = [v.rjust(w) for v, w in zip(r[1:], widths[1:], strict=True)]
        lines.append("  ".join([first, *rest]).rstrip())
    return "\n".join(lines)
