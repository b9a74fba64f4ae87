"""Result rows (JSON lines): building, ordering, and the row-file machinery a run uses.

Writing, locking and strict reading of a rows file are the record kernel's
(:mod:`engram_eval.provenance.records`: :class:`RowWriter`, :class:`OutputLock`,
:func:`scan_rows`, :func:`truncate_torn_tail`, ...), re-exported here; this module adds what
a *result* row is: its fields (:data:`ROW_FIELDS`), :func:`make_row`, and :func:`scan_rows`
requiring a result row's fields by default.

Result files may be gzip-compressed (``x.jsonl.gz``, written by ``engram-eval compress``);
every reader goes through :func:`open_rows` / :func:`scan_rows`, which accept both. The rows
hash (:attr:`RowScan.sha256`, :func:`rows_sha256`) is the sha256 of the *uncompressed* bytes,
so compressing a result does not change it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from engram_eval.data.records import Question
from engram_eval.provenance import records
from engram_eval.provenance.records import (  # noqa: F401  (the row-file machinery, re-exported)
    RESUME_HINT,
    OutputLock,
    RowScan,
    RowWriter,
    is_compressed,
    open_rows,
    read_rows_bytes,
    row_line,
    rows_sha256,
    truncate_torn_tail,
)
from engram_eval.scoring import protocols as P

REQUIRED_FIELDS = ("question_id", "question_type", "ranked_session_ids", "scores", "metrics")
#: Every field :func:`make_row` writes, in its order: the allow-list ``verify`` and
#: ``--resume`` hold each row to (a key outside it was not written by the package).
#: ``haystack_entries`` is the only one a row may lack (written only for a haystack that
#: lists a session id more than once).
ROW_FIELDS = ("question_id", "question_type", "question_date", "n_sessions",
              "ranked_session_ids", "scores", "gold", "metrics", "haystack_entries", "trace",
              "timing")
OPTIONAL_ROW_FIELDS = ("haystack_entries",)
#: The keys of a row's ``trace`` and ``timing`` objects (the per-question and per-session
#: traces inside are the retriever's own, documented in :mod:`engram_eval.retrieval.hybrid`).
TRACE_FIELDS = ("question", "sessions")
#: (``requests`` and the bytes: counted by a system behind HTTP,
#: :mod:`engram_eval.retrieval.http_system`; all summarised in the summary's ``cost``,
#: :func:`engram_eval.scoring.summary.cost_summary`).
TIMING_FIELDS = ("seconds", "requests", "bytes_sent", "bytes_received")
#: Row fields that are measurements (may differ between identical runs).
MEASUREMENT_FIELDS = ("timing",)


def scan_rows(path: str | Path, *, allowed_ids: Iterable[str] | None = None,
              required: Sequence[str] = REQUIRED_FIELDS) -> RowScan:
    """:func:`engram_eval.provenance.records.scan_rows` requiring ``required`` (a result
    row's fields by default; the answer and judge files of :mod:`engram_eval.qa` name their
    own)."""
    return records.scan_rows(path, allowed_ids=allowed_ids, required=required)


def strip_measurements(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in MEASUREMENT_FIELDS}


def order_rows(rows: Sequence[Mapping[str, Any]], ids: Sequence[str]) -> list[Mapping[str, Any]]:
    """``rows`` in the order of ``ids`` (ids without a row are left out)."""
    by_id = {r["question_id"]: r for r in rows}
    return [by_id[i] for i in ids if i in by_id]


def make_row(question: Question, ranking: Any, protocols: Sequence[str],
             question_trace: Mapping[str, Any], seconds: float,
             cost: Mapping[str, int] | None = None) -> dict[str, Any]:
    """One result row: ids, scores, per-protocol gold and metrics, traces, timing (wall
    seconds and, where the retriever counts them, ``cost``: requests and bytes).

    ``haystack_entries`` (only when the haystack lists a session id more than once) maps
    such ids to their number of entries, so the ``official`` metrics can be recomputed from
    the row alone."""
    ids = ranking.session_ids
    gold = {p: (list(g) if (g := P.gold_for(question, p)) is not None else None)
            for p in protocols}
    metrics = {p: P.score_question(question, ids, p) for p in protocols}
    row: dict[str, Any] = {
        "question_id": question.question_id,
        "question_type": question.question_type,
        "question_date": question.question_date,
        "n_sessions": len(ids),
        "ranked_session_ids": ids,
        "scores": ranking.scores,
        "gold": gold,
        "metrics": metrics,
    }
    entries = P.entry_counts(question)
    if entries:
        row["haystack_entries"] = entries
    row["trace"] = {"question": dict(question_trace),
                    "sessions": [dict(r.trace) for r in ranking.results]}
    row["timing"] = {"seconds": round(seconds, 6),
                     **{k: int(v) for k, v in (cost or {}).items() if k in TIMING_FIELDS}}
    return row
