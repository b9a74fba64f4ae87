"""Result rows (JSON lines): append-only writing and strict reading.

A row is written with one ``write`` of ``json + "\\n"`` followed by flush and fsync, so a
crash can leave at most one partial (torn) last line. Reading is strict: every line must
be a JSON object with the required fields; the only thing that may be repaired is a torn
last line (no trailing newline, not valid JSON), and only when the caller allows it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.errors import ProvenanceError

REQUIRED_FIELDS = ("question_id", "question_type", "ranked_session_ids", "scores", "metrics")
#: Row fields that are measurements (may differ between identical runs).
MEASUREMENT_FIELDS = ("timing",)


@dataclass(frozen=True)
class RowScan:
    rows: list[dict[str, Any]]
    torn_bytes: int  # size of a torn last line (0 when the file ends cleanly)


def scan_rows(path: str | Path, *, allowed_ids: Iterable[str] | None = None) -> RowScan:
    """Parse every row; raise ProvenanceError for a malformed row (other than a torn last
    line), a duplicate question id, or a question id outside ``allowed_ids``."""
    data = Path(path).read_bytes()
    allowed = set(allowed_ids) if allowed_ids is not None else None
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    lines = data.split(b"\n")
    tail = lines.pop()  # bytes after the last newline ("" when the file ends cleanly)
    torn = 0
    if tail:
        try:
            obj = json.loads(tail)
            ok = isinstance(obj, dict)
        except ValueError:
            ok = False
        torn = len(tail)
        if ok:
            # A complete row whose newline was lost: still treated as torn (rewritten).
            pass
    for n, raw in enumerate(lines, start=1):
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise ProvenanceError(f"{path}: line {n} is not valid JSON ({e}); the file is "
                                  "corrupt beyond a torn last line, refusing") from None
        if not isinstance(obj, dict):
            raise ProvenanceError(f"{path}: line {n} is not a JSON object")
        for f in REQUIRED_FIELDS:
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
    return RowScan(rows, torn)


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
        self._f = open(self.path, "ab")  # append to our own claimed file only

    def write(self, row: Mapping[str, Any]) -> None:
        line = json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n"
        self._f.write(line.encode("utf-8"))
        self._f.flush()
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
    by_id = {r["question_id"]: r for r in rows}
    return [by_id[i] for i in ids if i in by_id]
