"""The run discipline of the answer and judge files, on the package's own machinery.

A fresh run claims its JSONL output and sidecar with exclusive creation
(:func:`engram_eval.provenance.sidecar.claim_output`); rows are appended one durable line at a
time (:class:`engram_eval.runs.rows.RowWriter`) under an exclusive lock
(:class:`~engram_eval.runs.rows.OutputLock`). ``--resume`` rebuilds the metadata, refuses any
difference in its defining fields (naming them) and any sidecar key this version does not
write, re-reads every row strictly (:func:`~engram_eval.runs.rows.scan_rows`: malformed rows,
duplicate or unexpected ids are refused), holds every kept row to exactly its writer's fields
and to the caller's content check (a row whose content no longer matches its recorded hashes,
or what the inputs give, is refused naming the file, line, question and field), and repairs
only a torn last line, saying so.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import read_json_document
from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.io import link_problem, sha256_json
from engram_eval.provenance.sidecar import claim_output, diff, record_run, sidecar_path
from engram_eval.runs.rows import OutputLock, RowScan, is_compressed, scan_rows, truncate_torn_tail

#: ``check_row(row)`` on resume: ``None`` for a row that may be kept, else ``(field, what is
#: wrong)``. The row already holds exactly the writer's fields.
RowCheck = Callable[[Mapping[str, Any]], "tuple[str, str] | None"]
#: Why a kept row lacks a field its writer always writes.
OLD_ROW = ("missing: rows written before engram-eval recorded content hashes lack it, and "
           "an edit to them cannot be detected; such a file cannot be resumed, start a new "
           "output (another --output name)")


def row_refusal(path: str | Path, line: int, qid: Any, field: str, what: str
                ) -> ProvenanceError:
    """The one error of a kept row that may not be kept: file, line, question and field."""
    return ProvenanceError(f"{path}: line {line} (question {qid!r}): field {field!r}: {what}. "
                           "Refusing to resume; nothing was written")


def row_key_problem(row: Mapping[str, Any], fields: Sequence[str]) -> tuple[str, str] | None:
    """``(field, what)`` for the first field of ``fields`` the row lacks, or the first key
    it holds beyond them; ``None`` when its keys are exactly ``fields``."""
    for f in fields:
        if f not in row:
            return f, OLD_ROW
    for k in row:
        if k not in fields:
            return str(k), "not a field engram-eval writes in this file"
    return None


def fingerprint_view(meta: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """The defining part of a sidecar: ``fields``, with any ``path`` key of a nested input
    dropped (where a file lies does not define the run)."""
    def strip(v: Any) -> Any:
        return {k: x for k, x in v.items() if k != "path"} if isinstance(v, Mapping) else v
    return {k: strip(meta.get(k)) for k in fields}


def fingerprint(meta: Mapping[str, Any], fields: Sequence[str]) -> str:
    return sha256_json(fingerprint_view(meta, fields))


def read_plain_sidecar(output: str | Path) -> dict[str, Any]:
    side = sidecar_path(output)
    if not side.exists():
        link = link_problem(side)
        raise ProvenanceError(f"{side}: sidecar is missing{f' ({link})' if link else ''}; "
                              f"{output} cannot be resumed or checked without it")
    try:
        meta = read_json_document(side, what="a sidecar")
    except OSError as e:
        raise ProvenanceError(f"{side}: not readable JSON ({e})") from None
    if not isinstance(meta, dict):
        raise ProvenanceError(f"{side}: the sidecar is not a JSON object")
    return meta


@dataclass
class Opened:
    """An output claimed (fresh) or verified (resume), locked until :meth:`close`."""

    output: Path
    fingerprint: str
    done: set[str]
    repaired: bool
    lock: OutputLock

    def close(self) -> None:
        self.lock.close()


def open_output(output: str | Path, meta: dict[str, Any], *, resume: bool,
                allowed_ids: Iterable[str], required: Sequence[str], check_row: RowCheck,
                echo: Callable[[str], None]) -> Opened:
    """Claim ``output`` with ``meta`` (which holds ``fingerprint_fields``), or verify a resume
    against the recorded sidecar; see the module docstring. ``required``: exactly the fields
    of a row; ``check_row``: the content check of each kept row (:data:`RowCheck`)."""
    out = Path(output)
    if out.name.endswith(".gz"):
        raise ConfigError(f"--output {out}: written uncompressed (gzip it afterwards)")
    fields = meta["fingerprint_fields"]
    meta["fingerprint"] = fingerprint(meta, fields)
    if not resume:
        claim_output(out, meta)  # refuses an existing output, sidecar or summary
        return Opened(out, meta["fingerprint"], set(), False, OutputLock(out))
    if not out.exists():
        raise ProvenanceError(f"{out}: nothing to resume (file does not exist)")
    if is_compressed(out):
        raise ProvenanceError(f"{out} is gzip-compressed; a compressed file is final")
    lock = OutputLock(out)
    try:
        old = read_plain_sidecar(out)
        diffs = diff(fingerprint_view(old, old.get("fingerprint_fields", fields)),
                     fingerprint_view(meta, fields))
        if diffs:
            shown = "\n  ".join(diffs[:40])
            raise ProvenanceError(f"{sidecar_path(out)}: cannot resume, this is not the run "
                                  f"recorded ({len(diffs)} field(s) differ, old -> new):\n"
                                  f"  {shown}")
        if old.get("fingerprint") != fingerprint(old, old.get("fingerprint_fields", fields)):
            raise ProvenanceError(f"{sidecar_path(out)}: the recorded fingerprint does not "
                                  "match the recorded fields (the sidecar was edited)")
        unknown = [k for k in old if k not in meta]  # meta: every key this version writes
        if unknown:
            raise ProvenanceError(f"{sidecar_path(out)}: field {unknown[0]!r} is not one "
                                  "engram-eval writes in this sidecar; refusing to resume, "
                                  "nothing was written")
        scan = scan_rows(out, allowed_ids=allowed_ids, required=("question_id",))
        for line, row in enumerate(scan.rows, start=1):
            bad = row_key_problem(row, required) or check_row(row)
            if bad is not None:
                raise row_refusal(out, line, row["question_id"], *bad)
        repaired = False
        if scan.torn_bytes:
            truncate_torn_tail(out, scan.torn_bytes)
            repaired = True
            echo(f"repaired {out}: removed a torn last line ({scan.torn_bytes} bytes) left by "
                 "an interrupted run")
    except BaseException:
        lock.close()
        raise
    done = {r["question_id"] for r in scan.rows}
    echo(f"resuming {out}: {len(done)} row(s) already written (fingerprint "
         f"{old['fingerprint'][:16]}…)")
    return Opened(out, old["fingerprint"], done, repaired, lock)


def finish(opened: Opened, *, resume: bool, started: float, command: Sequence[str] | None,
           written: int, finished: bool, extra: Mapping[str, Any], ids: Sequence[str],
           required: Sequence[str]) -> RowScan | None:
    """Record the run entry in the sidecar; when ``finished``, check the file now holds one
    row per selected id and return its scan."""
    scan = None
    entry: dict[str, Any] = {
        "mode": "resume" if resume else "fresh", "host": socket.gethostname(),
        "command": list(command) if command is not None else None,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_seconds": round(time.time() - started, 3), "rows_written": written,
        "repaired_torn_line": opened.repaired, "completed": finished, **extra}
    if finished:
        scan = scan_rows(opened.output, allowed_ids=ids, required=required)
        entry["rows_sha256"] = scan.sha256
    record_run(opened.output, entry)
    if scan is not None and (len(scan.rows) != len(ids) or scan.torn_bytes):
        raise ProvenanceError(f"{opened.output}: expected {len(ids)} rows, found "
                              f"{len(scan.rows)}")
    return scan
