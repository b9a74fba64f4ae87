"""Result rows (JSON lines): building, append-only writing, locking and strict reading.

A row is written with one ``write`` of ``json + "\\n"`` followed by flush and fsync, so a
crash can leave at most one partial (torn) last line. Reading is strict: every line must
be a JSON object with the required fields; the only thing that may be repaired is a torn
last line (no trailing newline, not valid JSON), and only when the caller allows it.

Result files may be gzip-compressed (``x.jsonl.gz``, written by ``engram-eval compress``);
every reader goes through :func:`open_rows` / :func:`scan_rows`, which accept both. The rows
hash (:attr:`RowScan.sha256`, :func:`rows_sha256`) is the sha256 of the *uncompressed* bytes,
so compressing a result does not change it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.data import _jsonio
from engram_eval.data._jsonio import (
    MAX_LINES_BYTES,
    is_gzip,
    open_binary,
    open_capped,
    parse_json_line,
)
from engram_eval.data.records import Question
from engram_eval.errors import InputError, ProvenanceError, StorageError
from engram_eval.io import storage_errors
from engram_eval.scoring import protocols as P

#: What to do after an operating-system failure (disk full, ...) while appending rows.
RESUME_HINT = ("the rows written so far are kept; free space (or fix the file system), then "
               "continue with --resume")

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
TIMING_FIELDS = ("seconds",)
#: Row fields that are measurements (may differ between identical runs).
MEASUREMENT_FIELDS = ("timing",)


@dataclass(frozen=True)
class RowScan:
    rows: list[dict[str, Any]]
    torn_bytes: int  # size of a torn last line (0 when the file ends cleanly)
    sha256: str = ""  # sha256 of the uncompressed bytes that were scanned


def is_compressed(path: str | Path) -> bool:
    """True for a gzip-compressed result file (sniffed by magic bytes)."""
    return is_gzip(path)


def open_rows(path: str | Path) -> Any:
    """A binary stream of the (uncompressed) rows of a plain or gzipped result file."""
    return open_binary(path)


def read_rows_bytes(path: str | Path) -> bytes:
    """The uncompressed rows bytes, as they are (what the rows hash covers), read through the
    bounded reader: a regular file only, at most :data:`MAX_LINES_BYTES` bytes (decompressed,
    counted while reading). A missing file is ``FileNotFoundError``; any other failure one
    :class:`InputError` naming the file."""
    with open_capped(path, MAX_LINES_BYTES, "a result file") as f:
        return f.read()


def rows_sha256(path: str | Path) -> str:
    """sha256 of the uncompressed rows bytes (the same for ``x.jsonl`` and ``x.jsonl.gz``)."""
    return hashlib.sha256(read_rows_bytes(path)).hexdigest()


def scan_rows(path: str | Path, *, allowed_ids: Iterable[str] | None = None,
              required: Sequence[str] = REQUIRED_FIELDS) -> RowScan:
    """Parse every row (plain or gzipped file); raise ProvenanceError for a malformed row
    (other than a torn last line), a duplicate question id, or a question id outside
    ``allowed_ids``. ``required``: the fields every row must have (a result row's by
    default; the answer and judge files of :mod:`engram_eval.qa` name their own)."""
    data = read_rows_bytes(path)
    digest = hashlib.sha256(data).hexdigest()
    allowed = set(allowed_ids) if allowed_ids is not None else None
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    lines = data.split(b"\n")
    tail = lines.pop()  # bytes after the last newline ("" when the file ends cleanly)
    torn = len(tail)  # a complete row whose newline was lost is torn too (rewritten)
    if torn > _jsonio.MAX_LINE_BYTES:  # longer than any row: not one cut short by an interruption
        raise InputError(path, f"line {len(lines) + 1}", "(root)", f"a last line of more "
                         f"than {_jsonio.MAX_LINE_BYTES} bytes with no newline: no row is that long, "
                         "so it is not a row cut short by an interruption; refusing")
    for n, raw in enumerate(lines, start=1):
        try:
            obj = parse_json_line(path, n, raw)
        except InputError as e:
            raise InputError(e.path, e.record, e.field, f"{e.reason}; the file is corrupt "
                             "beyond a torn last line, refusing") from None
        if not isinstance(obj, dict):
            raise ProvenanceError(f"{path}: line {n} is not a JSON object")
        for f in required:
            if f not in obj:
                raise ProvenanceError(f"{path}: line {n}: row is missing field {f!r}")
        qid = obj["question_id"]
        if not isinstance(qid, str):
            raise ProvenanceError(f"{path}: line {n}: field 'question_id' must be a string")
        if qid in seen:
            raise ProvenanceError(f"{path}: line {n}: duplicate question_id {qid!r} "
                                  f"(first on line {seen[qid]})")
        if allowed is not None and qid not in allowed:
            raise ProvenanceError(f"{path}: line {n}: question_id {qid!r} is not in the "
                                  "run's selection")
        seen[qid] = n
        rows.append(obj)
    return RowScan(rows, torn, digest)


def truncate_torn_tail(path: str | Path, torn_bytes: int) -> None:
    """Drop a torn last line of ``torn_bytes`` bytes (after scan_rows reported it)."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - torn_bytes)
        f.flush()
        os.fsync(f.fileno())


class RowWriter:
    """Append rows to a claimed result file, durably, one line per row."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.exists() and is_compressed(self.path):
            raise ProvenanceError(f"{self.path} is gzip-compressed; rows cannot be appended "
                                  "to it (a compressed result is final)")
        with storage_errors(self.path, "append rows to", RESUME_HINT, cls=StorageError):
            # unbuffered: a failed write leaves nothing pending that close() would retry
            self._f = open(self.path, "ab", buffering=0)  # our own claimed file only

    def write(self, row: Mapping[str, Any]) -> None:
        """Append one row durably. An operating-system failure (disk full, read-only file
        system) is one :class:`StorageError` naming the file; a partly written line is the
        torn last line that ``--resume`` repairs."""
        data = memoryview((json.dumps(row, ensure_ascii=False, allow_nan=False)
                           + "\n").encode("utf-8"))
        with storage_errors(self.path, "append rows to", RESUME_HINT, cls=StorageError):
            while data:
                n = self._f.write(data)
                data = data[n or 0:]
            os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def strip_measurements(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in MEASUREMENT_FIELDS}


def order_rows(rows: Sequence[Mapping[str, Any]], ids: Sequence[str]) -> list[Mapping[str, Any]]:
    """``rows`` in the order of ``ids`` (ids without a row are left out)."""
    by_id = {r["question_id"]: r for r in rows}
    return [by_id[i] for i in ids if i in by_id]


def make_row(question: Question, ranking: Any, protocols: Sequence[str],
             question_trace: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    """One result row: ids, scores, per-protocol gold and metrics, traces, timing.

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
    row["timing"] = {"seconds": round(seconds, 6)}
    return row


class OutputLock:
    """An exclusive advisory lock on a result file, held for a whole run, so two processes
    (two resumes, or a resume beside a live run) never append to one file."""

    def __init__(self, output: str | Path) -> None:
        import fcntl

        self._f = open(output, "rb")  # read-only handle, used only to hold the lock
        try:
            fcntl.flock(self._f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._f.close()
            raise ProvenanceError(f"{output} is being written by another running process; "
                                  "refusing to write to it at the same time") from None

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> OutputLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
