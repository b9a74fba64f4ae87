"""Evaluation protocols: which questions count and which sessions are gold.

A protocol fixes the *denominator* (the questions that are scored) and the *gold* of each
question. Results from different protocols are never mixed: every summary, JSON file and
table names its protocol and its ``n``.

LongMemEval protocols (:data:`LONGMEMEVAL_PROTOCOLS`), counts on full LongMemEval_S (on the
S dev split: answerable 372, official 372, official_nonempty_gold 333, all 397):

==========================  =====  ==================================================
protocol                    n      rule
==========================  =====  ==================================================
``answerable``              470    Engram protocol. Skip ``_abs`` questions and
                                   questions with no ``answer_session_ids``; gold =
                                   ``answer_session_ids``.
``official``                470    Exactly what LongMemEval's reference printer
                                   (``src/evaluation/print_retrieval_metrics.py``)
                                   averages: every question whose id does not contain
                                   ``_abs``; gold = :func:`reference_gold`; a question
                                   left with no gold stays in and scores recall_any 0,
                                   recall_all 1, ndcg 0 (``evaluate_retrieval`` on an
                                   empty gold list); a session id repeated in the
                                   haystack takes one ranking position per entry
                                   (:func:`~engram_eval.scoring.metrics.reference_entry_metrics`).
``official_nonempty_gold``  419    The same gold, questions with no gold skipped, one
                                   position per distinct session (what this package
                                   called ``official`` before it matched the printer).
``all``                     500    Every question; gold = ``answer_session_ids``
                                   (possibly empty, scored with the no-gold convention).
==========================  =====  ==================================================

LoCoMo protocols (:data:`LOCOMO_PROTOCOLS`, not LongMemEval protocols), counts on
``locomo10.json`` (1986 QA items; categories 1/2/3/4/5: 282/321/96/841/446):

=========================  =====  ===================================================
protocol                   n      rule
=========================  =====  ===================================================
``locomo``                 1982   Every QA item with at least one evidence session
                                  resolved, the adversarial category 5 included; gold
                                  = the evidence sessions the LoCoMo loader put in
                                  ``answer_session_ids``, restricted to sessions of the
                                  conversation. Skipped: the 4 items with no evidence.
``locomo_no_adversarial``  1536   The same items and gold without category 5
                                  (adversarial: the answer is not in the conversation),
                                  i.e. categories 1-4 only.
=========================  =====  ===================================================

The reference rule for gold (``run_retrieval.py``, session granularity) lives here once:
:func:`has_user_evidence`, :func:`reference_corpus_id` (an ``answer`` session without a user
``has_answer`` turn is relabelled ``noans``) and :func:`reference_gold`. Gold does not come from
``answer_session_ids`` there: it is every haystack session whose (relabelled) id contains
``answer``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engram_eval.data.records import Question, Session, has_user_evidence
from engram_eval.errors import ConfigError
from engram_eval.io import printable
from engram_eval.scoring.metrics import KS, mean_metrics, question_metrics, reference_entry_metrics

__all__ = [
    "LOCOMO_PROTOCOLS",
    "LONGMEMEVAL_PROTOCOLS",
    "PROTOCOLS",
    "ProtocolSummary",
    "entry_counts",
    "format_table",
    "gold_for",
    "has_user_evidence",
    "is_adversarial",
    "metrics_for_gold",
    "reference_corpus_id",
    "reference_gold",
    "score_question",
    "summarize",
    "summary_to_json",
]

LONGMEMEVAL_PROTOCOLS: tuple[str, ...] = (
    "answerable", "official", "official_nonempty_gold", "all")
"""The LongMemEval denominators (see the module docstring's table)."""

LOCOMO_PROTOCOLS: tuple[str, ...] = ("locomo", "locomo_no_adversarial")
"""The LoCoMo denominators (see the module docstring's second table)."""

ADVERSARIAL_CATEGORY = 5
"""The LoCoMo category whose questions ask about things the conversation never says."""

PROTOCOLS: tuple[str, ...] = LONGMEMEVAL_PROTOCOLS + LOCOMO_PROTOCOLS
"""Every protocol :func:`gold_for` knows."""


def _dedupe(ids: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(ids))


def reference_corpus_id(session: Session) -> str:
    """The id the reference indexer gives ``session``: ``answer`` -> ``noans`` in the id of a
    session whose id contains ``answer`` but which has no user ``has_answer`` turn."""
    sid = session.session_id
    if "answer" in sid and not has_user_evidence(session):
        return sid.replace("answer", "noans")
    return sid


def reference_gold(question: Question) -> tuple[str, ...]:
    """The reference's ``correct_docs``: haystack sessions whose relabelled id still contains
    ``answer``, in haystack order, each once (possibly empty)."""
    return tuple(s.session_id for s in question.sessions
                 if "answer" in reference_corpus_id(s))


def is_reference_abstention(question_id: str) -> bool:
    """The printer's filter: ``'_abs' in question_id``."""
    return "_abs" in question_id


def is_adversarial(question: Question) -> bool:
    """A LoCoMo QA item of the adversarial category 5 (its ``category`` extra)."""
    category = question.get_extra("category")
    return category is not None and int(str(category)) == ADVERSARIAL_CATEGORY


def entry_counts(question: Question) -> dict[str, int]:
    """Session ids listed more than once in the haystack -> number of entries (else empty)."""
    raw: Any = question.get_extra("haystack_entries", ())
    return {str(sid): int(n) for sid, n in raw}


def _check_protocol(protocol: str) -> None:
    """A :class:`~engram_eval.errors.ConfigError` (a ``ValueError`` too) for a name that is
    not one of :data:`PROTOCOLS` (``--protocol bogus``: one clear error, not a traceback)."""
    if protocol not in PROTOCOLS:
        from engram_eval.errors import ConfigError

        raise ConfigError(f"unknown protocol {protocol!r}; expected one of "
                          f"{', '.join(PROTOCOLS)}")


def gold_for(question: Question, protocol: str) -> tuple[str, ...] | None:
    """The gold session ids of ``question`` under ``protocol``, or None when it is skipped.

    None means "not in this protocol's denominator". A returned tuple is duplicate-free;
    ``all`` and ``official`` can return an empty tuple (scored with the no-gold convention).
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
    if protocol in ("official", "official_nonempty_gold"):
        if is_reference_abstention(question.question_id):
            return None
        gold = reference_gold(question)
        if protocol == "official_nonempty_gold" and not gold:
            return None
        return gold
    # locomo, locomo_no_adversarial
    if protocol == "locomo_no_adversarial" and is_adversarial(question):
        return None
    present = set(question.session_ids)
    gold = tuple(sid for sid in answers if sid in present)
    return gold or None


def metrics_for_gold(
    protocol: str,
    gold: Sequence[str],
    ranking: Sequence[str],
    entries: Mapping[str, int] | None = None,
    ks: Sequence[int] = KS,
) -> dict[str, float]:
    """The per-question metrics of ``protocol`` for known gold: ``official`` counts haystack
    entries (``entries``: repeated id -> count), every other protocol distinct sessions."""
    if protocol == "official":
        return reference_entry_metrics(gold, ranking, entries, ks)
    return question_metrics(gold, ranking, ks)


def score_question(
    question: Question, ranking: Sequence[str], protocol: str, ks: Sequence[int] = KS
) -> dict[str, float] | None:
    """Metrics of ``ranking`` under ``protocol``'s gold, or None if the question is skipped."""
    gold = gold_for(question, protocol)
    if gold is None:
        return None
    return metrics_for_gold(protocol, gold, ranking, entry_counts(question), ks)


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
        rows.append([printable(str(qtype)), str(count), *(cell(m, name) for name in names)])
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


def default_protocols(fmt: str) -> list[str]:
    """The protocols a run of a ``fmt`` dataset (``longmemeval`` / ``locomo``) reports when
    its config names none. A run records the list it used (sidecar ``protocols``), and
    ``verify`` recomputes that list, so changing these defaults never touches a finished run
    (LoCoMo runs published before ``locomo_no_adversarial`` existed record ``["locomo"]``)."""
    return list(LOCOMO_PROTOCOLS) if fmt == "locomo" else list(LONGMEMEVAL_PROTOCOLS)


def check_protocols(fmt: str, protocols: Sequence[str]) -> None:
    """A LoCoMo dataset is scored with LoCoMo protocols only, LongMemEval never with them."""
    if fmt == "locomo" and any(p not in LOCOMO_PROTOCOLS for p in protocols):
        raise ConfigError("protocols: a LoCoMo dataset is scored with the LoCoMo protocols "
                          f"{', '.join(LOCOMO_PROTOCOLS)}")
    if fmt == "longmemeval" and any(p in LOCOMO_PROTOCOLS for p in protocols):
        raise ConfigError(f"protocols: {', '.join(LOCOMO_PROTOCOLS)} apply to LoCoMo "
                          "datasets only")
