"""The run discipline of the answer and judge files, on the record kernel.

A fresh run claims its JSONL output and sidecar with exclusive creation and holds an
exclusive lock on it (:func:`engram_eval.provenance.records.claim_rows`); rows are appended
one durable line at a time (:class:`~engram_eval.provenance.records.RowWriter`).
``--resume`` (:func:`~engram_eval.provenance.records.resume_rows`) rebuilds the metadata,
refuses any difference in its defining fields (naming them) and any sidecar key this version
does not write, re-reads every row strictly (malformed rows, duplicate or unexpected ids are
refused), holds every kept row to exactly its writer's fields and to the caller's content
check (a row whose content no longer matches its recorded hashes, or what the inputs give, is
refused naming the file, line, question and field), and repairs only a torn last line, saying
so. What these files record (their fields and fingerprints) is defined here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.io import sha256_json
from engram_eval.provenance.records import (
    RowRecord,
    RowScan,
    claim_rows,
    diff,
    finish_rows,
    read_meta,
    refuse_other_run,
    resume_rows,
    run_entry,
    sidecar_path,
)

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
    """The sidecar of ``output`` as a JSON object
    (:func:`engram_eval.provenance.records.read_meta`)."""
    return read_meta(output)


#: An output claimed (fresh) or verified (resume), locked until ``close()``: the record
#: kernel's :class:`~engram_eval.provenance.records.RowRecord`.
Opened = RowRecord


def open_output(output: str | Path, meta: dict[str, Any], *, resume: bool,
                allowed_ids: Iterable[str], required: Sequence[str], check_row: RowCheck,
                echo: Callable[[str], None]) -> RowRecord:
    """Claim ``output`` with ``meta`` (which holds ``fingerprint_fields``), or verify a resume
    against the recorded sidecar; see the module docstring. ``required``: exactly the fields
    of a row; ``check_row``: the content check of each kept row (:data:`RowCheck`)."""
    out = Path(output)
    if out.name.endswith(".gz"):
        raise ConfigError(f"--output {out}: written uncompressed (gzip it afterwards)")
    fields = meta["fingerprint_fields"]
    meta["fingerprint"] = fingerprint(meta, fields)
    if not resume:
        return claim_rows(out, meta)  # refuses an existing output, sidecar or summary

    def check_meta(path: Path) -> dict[str, Any]:
        old = read_meta(path)
        old_fields = old.get("fingerprint_fields", fields)
        refuse_other_run(sidecar_path(path),
                         diff(fingerprint_view(old, old_fields), fingerprint_view(meta, fields)),
                         recorded=old.get("fingerprint"), recomputed=fingerprint(old, old_fields))
        unknown = [k for k in old if k not in meta]  # meta: every key this version writes
        if unknown:
            raise ProvenanceError(f"{sidecar_path(path)}: field {unknown[0]!r} is not one "
                                  "engram-eval writes in this sidecar; refusing to resume, "
                                  "nothing was written")
        return old

    def check_rows(rows: list[dict[str, Any]]) -> None:
        for line, row in enumerate(rows, start=1):
            bad = row_key_problem(row, required) or check_row(row)
            if bad is not None:
                raise row_refusal(out, line, row["question_id"], *bad)

    record = resume_rows(out, check_meta=check_meta, allowed_ids=allowed_ids,
                         required=("question_id",), check_rows=check_rows, echo=echo)
    echo(f"resuming {out}: {len(record.done)} row(s) already written (fingerprint "
         f"{record.fingerprint[:16]}…)")
    return record


def finish(opened: RowRecord, *, resume: bool, started: float, command: Sequence[str] | None,
           written: int, finished: bool, extra: Mapping[str, Any], ids: Sequence[str],
           required: Sequence[str]) -> RowScan | None:
    """Record the run entry in the sidecar; when ``finished``, check the file now holds one
    row per selected id and return its scan (:func:`engram_eval.provenance.records.finish_rows`)."""
    entry: dict[str, Any] = {
        **run_entry(resume=resume, command=command, started=started), "rows_written": written,
        "repaired_torn_line": opened.repaired, "completed": finished, **extra}
    return finish_rows(opened, entry, finished=finished, ids=ids, required=required)
