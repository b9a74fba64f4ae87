"""The record kernel: how every provenance-locked writer claims, writes, resumes and finishes
its files.

Two kinds of record use it:

* **row files** (a benchmark run, :mod:`engram_eval.runs.runner`; the answer and judge files,
  :mod:`engram_eval.qa.files`): JSON lines beside a metadata sidecar ``<output>.metadata.json``
  (and, once finished, a summary). A fresh run :func:`claim_rows` its output (every path
  refused if it exists or is a symbolic link, :func:`refuse_existing`; the rows file created
  empty with exclusive creation, then the sidecar: :func:`claim_output`) and holds an
  exclusive lock on it (:class:`OutputLock`); a resume (:func:`resume_rows`) takes the lock,
  lets the caller check the recorded sidecar and every kept row, and only then repairs a torn
  last line (:func:`repair_torn_tail`, the one repair ever made). Rows are appended one
  durable line at a time (:class:`RowWriter`); :func:`finish_rows` appends the run's entry to
  the sidecar's ``runs`` list (:func:`run_entry`, :func:`record_run`) with the hash of the
  rows, and checks the file holds one row per selected id.
* **whole documents** (a production run, :mod:`engram_eval.production_eval.runner`; the scale
  benchmarks, ``benchmarks/longmemeval/_scale_common.py``): every output path is refused
  before any work (:func:`refuse_existing`); the files appear complete or not at all, by
  exclusive creation of all of them (:func:`publish`: what was created is removed again when
  one fails) or by atomic replacement with the progress so far kept in ``<output>.partial``
  (:class:`Checkpoint`).

What a record *says* (its sidecar's fields, its fingerprint, which differences refuse a
resume) is each writer's own (:mod:`engram_eval.provenance.sidecar` for a run); how its files
are written is this module's.

Rows files may be gzip-compressed (``x.jsonl.gz``, written by ``engram-eval compress``); every
reader goes through :func:`open_rows` / :func:`scan_rows`, which accept both. The rows hash
(:attr:`RowScan.sha256`, :func:`rows_sha256`) is the sha256 of the *uncompressed* bytes, so
compressing a result does not change it. A row is written with one ``write`` of
``json + "\\n"`` (:func:`row_line`) followed by fsync, so a crash can leave at most one
partial (torn) last line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.data import _jsonio
from engram_eval.data._jsonio import (
    MAX_LINES_BYTES,
    is_gzip,
    open_binary,
    open_capped,
    parse_json_line,
    read_json_document,
)
from engram_eval.errors import InputError, ProvenanceError, StorageError
from engram_eval.io import (
    already_exists,
    atomic_write,
    blocking_file,
    canonical_json,
    check_name_lengths,
    exclusive_write,
    link_problem,
    make_parent,
    refuse_links,
    remove_contained,
    storage_errors,
)

#: What to do after an operating-system failure (disk full, ...) while appending rows.
RESUME_HINT = ("the rows written so far are kept; free space (or fix the file system), then "
               "continue with --resume")
#: How an existing output is refused by a writer that can resume it.
RESUMABLE_HINT = "use --resume to continue that run, or choose a new output name"


# -- paths -----------------------------------------------------------------------------------
def sidecar_path(output: str | Path) -> Path:
    return Path(str(output) + ".metadata.json")


def summary_path(output: str | Path) -> Path:
    return Path(str(output) + ".summary.json")


def refuse_existing(paths: Sequence[str | Path], *, hint: str,
                    length_hint: str = "choose a shorter output name") -> None:
    """Refuse, before anything is written, what would keep ``paths`` (the first is the
    output, the others its companions) from being created fresh: a file name longer than
    its file system allows or a parent that is a file (one :class:`StorageError` naming the
    output), a symbolic link at any of them (:func:`engram_eval.io.refuse_links`), or one
    that exists (``"P already exists; refusing to overwrite (HINT)"``, or that it is a
    directory: :func:`engram_eval.io.already_exists`)."""
    ps = [Path(p) for p in paths]
    out = ps[0]
    with storage_errors(out, "create", cls=StorageError):
        check_name_lengths(ps, hint=length_hint)
        blocker = blocking_file(out)
        if blocker is not None:
            raise StorageError(out, f"cannot create {out}: {blocker} is a file, not a directory")
    refuse_links(*ps)
    for p in ps:
        if p.exists():
            raise ProvenanceError(already_exists(p, f"refusing to overwrite ({hint})"))


# -- the sidecar -----------------------------------------------------------------------------
def meta_text(meta: Mapping[str, Any]) -> str:
    """A sidecar's bytes: indented JSON, non-ASCII kept, one final newline."""
    return json.dumps(meta, indent=2, ensure_ascii=False) + "\n"


def claim_output(output: str | Path, meta: Mapping[str, Any]) -> None:
    """Fresh run: refuse any existing result, sidecar or summary, and a symbolic link at any
    of them (dangling or not: :func:`refuse_existing`); claim the result file with exclusive
    creation, then create the sidecar exclusively. Operating-system failures (read-only file
    system, disk full, a parent that is a file, a name too long) are one StorageError naming
    the path; nothing is left behind."""
    out = Path(output)
    side = sidecar_path(out)
    refuse_existing((out, side, summary_path(out)), hint=RESUMABLE_HINT,
                    length_hint="choose a shorter output name (the sidecar adds "
                    "'.metadata.json' to it)")
    with storage_errors(out, "create", cls=StorageError):
        make_parent(out)
        try:
            fd = os.open(out, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            raise ProvenanceError(already_exists(out, f"refusing to overwrite "
                                                 f"({RESUMABLE_HINT})")) from None
        os.close(fd)
    try:
        with storage_errors(side, "create", cls=StorageError):
            exclusive_write(side, meta_text(meta))
    except FileExistsError:
        remove_contained(out, out.parent, recursive=False)  # ours: created empty just now
        raise ProvenanceError(already_exists(side, f"refusing to overwrite "
                                             f"({RESUMABLE_HINT})")) from None
    except BaseException:
        remove_contained(out, out.parent, recursive=False)
        raise


def read_meta(output: str | Path) -> dict[str, Any]:
    """The sidecar of ``output`` as a JSON object; a missing one (a dangling link says where
    it points), one that is not JSON and one that is not an object are one
    :class:`ProvenanceError` naming it."""
    side = sidecar_path(output)
    if not side.exists():
        link = link_problem(side)
        raise ProvenanceError(f"{side}: metadata sidecar is missing"
                              f"{f' ({link})' if link else ''}; {output} cannot be resumed or "
                              "checked without it")
    try:
        meta = read_json_document(side, what="a metadata sidecar", strict=True)
    except OSError as e:
        raise ProvenanceError(f"{side}: sidecar is not readable JSON: {e}") from None
    if not isinstance(meta, dict):
        raise ProvenanceError(f"{side}: the sidecar is not a JSON object")
    return meta


def diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Human-readable differences ``field: old -> new`` between two JSON values."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out = []
        for k in sorted(set(old) | set(new)):
            name = f"{prefix}.{k}" if prefix else str(k)
            if k not in old:
                out.append(f"{name}: (absent) -> {_short(new[k])}")
            elif k not in new:
                out.append(f"{name}: {_short(old[k])} -> (absent)")
            else:
                out.extend(diff(old[k], new[k], name))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=False)):
            out.extend(diff(a, b, f"{prefix}[{i}]"))
        return out
    if canonical_json(old) != canonical_json(new):
        return [f"{prefix}: {_short(old)} -> {_short(new)}"]
    return []


def _short(v: Any, n: int = 80) -> str:
    s = json.dumps(v, sort_keys=True)
    return s if len(s) <= n else s[: n - 3] + "..."


def refuse_other_run(path: str | Path, diffs: Sequence[str], *, recorded: str | None,
                     recomputed: str) -> None:
    """The resume check's verdict: refuse (naming every differing defining field, ``diffs``
    as :func:`diff` words them, old -> new) unless this run's defining fields are the
    recorded ones, and refuse a sidecar whose ``recorded`` fingerprint is not the one its
    recorded fields give (``recomputed``: the sidecar was edited)."""
    if diffs:
        shown = "\n  ".join(diffs[:40]) + ("\n  ..." if len(diffs) > 40 else "")
        raise ProvenanceError(f"{path}: cannot resume, the run is not the same as the one "
                              f"recorded ({len(diffs)} field(s) differ, old -> new):\n  {shown}")
    if recorded != recomputed:
        raise ProvenanceError(f"{path}: recorded fingerprint does not match the recorded "
                              "fields (the sidecar was edited)")


def record_run(output: str | Path, entry: Mapping[str, Any]) -> None:
    """Append a measurement entry (host, times, counts) to the sidecar's ``runs`` list.

    ``runs`` is not part of the fingerprint; the sidecar is replaced atomically."""
    side = sidecar_path(output)
    meta = read_json_document(side, what="a metadata sidecar")
    meta.setdefault("runs", []).append(dict(entry))
    atomic_write(side, meta_text(meta))


def run_entry(*, resume: bool, command: Sequence[str] | None, started: float,
              started_at: str | None = None) -> dict[str, Any]:
    """The head of a ``runs`` entry: ``mode`` (fresh or resume), ``host``, ``command``,
    ``started_at`` (when given), ``finished_at`` (now) and ``wall_seconds`` since
    ``started`` (``time.time()``); the writer adds its counts after them."""
    entry: dict[str, Any] = {"mode": "resume" if resume else "fresh",
                             "host": socket.gethostname(),
                             "command": list(command) if command is not None else None}
    if started_at is not None:
        entry["started_at"] = started_at
    entry["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    entry["wall_seconds"] = round(time.time() - started, 3)
    return entry


# -- rows ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RowScan:
    rows: list[dict[str, Any]]
    torn_bytes: int  # size of a torn last line (0 when the file ends cleanly)
    sha256: str = ""  # sha256 of the uncompressed bytes that were scanned


def is_compressed(path: str | Path) -> bool:
    """True for a gzip-compressed rows file (sniffed by magic bytes)."""
    return is_gzip(path)


def open_rows(path: str | Path) -> Any:
    """A binary stream of the (uncompressed) rows of a plain or gzipped rows file."""
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


#: A row's question id as its bytes show it (for naming a row that does not parse).
_QUESTION_ID = re.compile(rb'"question_id"\s*:\s*"([^"\\]{1,200})"')


def scan_rows(path: str | Path, *, required: Sequence[str],
              allowed_ids: Iterable[str] | None = None) -> RowScan:
    """Parse every row (plain or gzipped file); raise ProvenanceError for a malformed row
    (other than a torn last line), a row lacking one of the ``required`` fields, a duplicate
    question id, or a question id outside ``allowed_ids``."""
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
            obj = parse_json_line(path, n, raw, strict=True)  # only this package writes rows
        except InputError as e:
            qid = _QUESTION_ID.search(raw)  # name the row's question where it can be seen
            record = e.record + (f" (question {qid.group(1).decode('utf-8', 'replace')!r})"
                                 if qid else "")
            raise InputError(e.path, record, e.field, f"{e.reason}; the file is corrupt "
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


def repair_torn_tail(path: str | Path, scan: RowScan, echo: Callable[[str], None]) -> bool:
    """Drop the torn last line ``scan`` found (saying so through ``echo``); whether there
    was one. Called only once every kept row has been checked."""
    if not scan.torn_bytes:
        return False
    truncate_torn_tail(path, scan.torn_bytes)
    echo(f"repaired {path}: removed a torn last line ({scan.torn_bytes} bytes) left by an "
         "interrupted run")
    return True


def row_line(row: Mapping[str, Any]) -> bytes:
    """The bytes of one row as every writer serialises it: JSON (non-ASCII kept, no NaN) and
    a newline."""
    return (json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


class RowWriter:
    """Append rows to a claimed rows file, durably, one line per row."""

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
        data = memoryview(row_line(row))
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


class OutputLock:
    """An exclusive advisory lock on a rows file, held for a whole run, so two processes
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


@dataclass
class RowRecord:
    """A rows file claimed (fresh) or verified (resume), locked until :meth:`close`:
    ``done`` the question ids already written, ``repaired`` whether a torn last line was
    removed, ``fingerprint`` the recorded one."""

    output: Path
    fingerprint: str
    resume: bool
    lock: OutputLock
    done: set[str] = field(default_factory=set)
    repaired: bool = False

    def writer(self) -> RowWriter:
        return RowWriter(self.output)

    def close(self) -> None:
        self.lock.close()


def claim_rows(output: str | Path, meta: Mapping[str, Any]) -> RowRecord:
    """A fresh rows file: :func:`claim_output` with ``meta`` (which holds its
    ``fingerprint``), then locked."""
    out = Path(output)
    claim_output(out, meta)
    return RowRecord(out, meta["fingerprint"], False, OutputLock(out))


def resume_rows(output: str | Path, *, check_meta: Callable[[Path], Mapping[str, Any]],
                allowed_ids: Iterable[str] | None, required: Sequence[str],
                check_rows: Callable[[list[dict[str, Any]]], None],
                echo: Callable[[str], None]) -> RowRecord:
    """Verify a resume of ``output`` before anything is written, then repair its torn last
    line: the file must exist uncompressed; under its lock, ``check_meta(output)`` returns
    the recorded sidecar once it has checked it against this run (raising otherwise), every
    row is read strictly (:func:`scan_rows`) and ``check_rows(rows)`` checks the rows kept
    (raising to refuse). A refusal releases the lock and changes nothing."""
    out = Path(output)
    if not out.exists():
        raise ProvenanceError(f"{out}: nothing to resume (file does not exist)")
    if is_compressed(out):
        raise ProvenanceError(f"{out} is gzip-compressed; a compressed file is final")
    lock = OutputLock(out)
    try:
        old = check_meta(out)
        scan = scan_rows(out, allowed_ids=allowed_ids, required=required)
        check_rows(scan.rows)
        repaired = repair_torn_tail(out, scan, echo)
    except BaseException:
        lock.close()
        raise
    return RowRecord(out, old["fingerprint"], True, lock,
                     {r["question_id"] for r in scan.rows}, repaired)


def finish_rows(record: RowRecord, entry: dict[str, Any], *, finished: bool,
                ids: Sequence[str], required: Sequence[str]) -> RowScan | None:
    """Record the run's ``entry`` (:func:`run_entry` and the writer's counts) in the sidecar;
    when ``finished``, with the rows hash, and check the file now holds one row per selected
    id (returning its scan). A failure to record an unfinished run is not raised: the error
    that stopped the run is the one reported, once."""
    scan = None
    if finished:
        scan = scan_rows(record.output, allowed_ids=ids, required=required)
        entry["rows_sha256"] = scan.sha256
    try:
        with storage_errors(sidecar_path(record.output), "record the run in", RESUME_HINT,
                            cls=StorageError):
            record_run(record.output, entry)
    except StorageError:
        if finished:
            raise
    if scan is not None and (len(scan.rows) != len(ids) or scan.torn_bytes):
        raise ProvenanceError(f"{record.output}: expected {len(ids)} rows, found "
                              f"{len(scan.rows)}")
    return scan


# -- whole documents -------------------------------------------------------------------------
def publish(files: Sequence[tuple[str | Path, str | bytes]], *, hint: str) -> None:
    """Create every ``(path, data)`` exclusively, in order: each file appears complete or not
    at all, and when one cannot be created (it exists: :class:`ProvenanceError`; the disk is
    full: :class:`StorageError` with ``hint``) the ones this call created are removed again
    (inside their own directory, never through a link)."""
    written: list[Path] = []
    try:
        for p, data in files:
            p = Path(p)
            with storage_errors(p, "create", hint, cls=StorageError):
                make_parent(p)
                exclusive_write(p, data)
            written.append(p)
    except FileExistsError as e:
        _remove(written)
        raise ProvenanceError(str(e)) from None
    except BaseException:
        _remove(written)
        raise


def _remove(written: Sequence[Path]) -> None:
    for p in written:
        remove_contained(p, p.parent, recursive=False)


def json_text(doc: Any) -> str:
    """A measurement document's bytes: indented JSON and one final newline."""
    return json.dumps(doc, indent=2) + "\n"


class Checkpoint:
    """A JSON document written whole at the end (:meth:`finish`, atomic), its progress so far
    kept in ``<path>.partial`` after each step (:meth:`save`) and removed once it is final."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.partial = Path(str(path) + ".partial")

    def save(self, doc: Any) -> None:
        self._write(self.partial, doc)

    def finish(self, doc: Any) -> None:
        self._write(self.path, doc)
        remove_contained(self.partial, self.partial.parent, recursive=False)

    @staticmethod
    def _write(path: Path, doc: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json_text(doc))
