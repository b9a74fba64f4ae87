"""Reading a finished run: ``read_run(path) -> FinishedRun``.

Every command that reads a finished result (``verify``, ``export``, ``trec``, ``compare``,
``analyze``, ``plot``, ``tune``) reads it here, so they agree on what a finished run is:

* the rows, parsed strictly by :func:`engram_eval.runs.rows.scan_rows` (plain or gzipped; a
  malformed row, a duplicate question id, or a torn last line is refused) and their hash
  (sha256 of the uncompressed bytes);
* the metadata sidecar ``<result>.metadata.json``: with ``require_sidecar`` it must exist and
  pass the schema (:func:`engram_eval.provenance.sidecar.read_sidecar`); without, it is read
  when present as plain JSON (the analysis commands need only a few of its fields, and accept
  runs published with a summary alone);
* the summary ``<result>.summary.json``, when present; a summary that records a rows hash
  other than the rows' is refused, and so is a summary and sidecar naming different dataset
  hashes.

``verify`` reports each of these as a check instead of stopping at the first, so it calls
the steps (:func:`read_metadata`, :func:`read_rows`, :func:`read_summary`) one by one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import read_json_document
from engram_eval.errors import ProvenanceError
from engram_eval.io import link_problem
from engram_eval.provenance.sidecar import read_sidecar, sidecar_path, summary_path
from engram_eval.runs.rows import RowScan, scan_rows


@dataclass(frozen=True)
class FinishedRun:
    """A finished result file and what its sidecar and summary say about it."""

    path: Path
    rows: list[dict[str, Any]]
    rows_sha256: str  # sha256 of the uncompressed rows bytes
    sidecar: dict[str, Any] | None  # the metadata sidecar (None: absent and not required)
    summary: dict[str, Any] | None  # the summary (None: absent)
    dataset_name: str | None
    dataset_sha256: str | None
    fingerprint: str | None
    retriever: str | None

    @property
    def metadata(self) -> dict[str, Any]:
        """The sidecar, for a run read with ``require_sidecar`` (else ProvenanceError when
        the run has none)."""
        if self.sidecar is None:
            raise ProvenanceError(f"{sidecar_path(self.path)}: metadata sidecar is missing")
        return self.sidecar

    @property
    def label(self) -> str:
        return self.path.name

    def protocol(self, requested: str | None) -> str:
        """``requested`` (``--protocol``), or the run's default when None; a protocol the
        rows are not scored under is one :class:`~engram_eval.errors.ConfigError` naming
        the run and the protocols it holds (the views would otherwise count no question and
        print zeros)."""
        from engram_eval.errors import ConfigError

        protocol = requested or self.default_protocol
        held = sorted({p for r in self.rows for p in (r.get("metrics") or {})})
        if self.rows and protocol not in held:
            raise ConfigError(f"--protocol {protocol!r}: {self.path} is not scored under it "
                              f"(its rows hold {', '.join(held) or 'no protocol'})")
        return protocol

    @property
    def default_protocol(self) -> str:
        """``locomo`` when the rows are scored under it, else ``answerable``."""
        return default_protocol(self.rows)

    def dataset(self) -> dict[str, Any]:
        """``{"name", "sha256"}`` of the dataset the run was made over."""
        return {"name": self.dataset_name, "sha256": self.dataset_sha256}

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), "label": self.label, "rows_sha256": self.rows_sha256,
                "fingerprint": self.fingerprint, "retriever": self.retriever,
                "dataset": self.dataset_name, "dataset_sha256": self.dataset_sha256,
                "n_rows": len(self.rows)}


def default_protocol(rows: list[dict[str, Any]]) -> str:
    first = rows[0]["metrics"] if rows else {}
    return "locomo" if isinstance(first, dict) and "locomo" in first else "answerable"


def _read_json_object(path: Path, what: str) -> dict[str, Any] | None:
    if not path.exists():
        link = link_problem(path)
        if link is not None:  # a dangling link is not an absent file
            raise ProvenanceError(f"{path}: the {what} {link}")
        return None
    try:
        obj = read_json_document(path, what=f"a {what}", strict=True)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ProvenanceError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ProvenanceError(f"{path}: the {what} is not a JSON object")
    return obj


def _refuse_unfinished(p: Path, scan: RowScan, sidecar: dict[str, Any] | None,
                       summary: dict[str, Any] | None) -> None:
    """Refuse a run that never finished (interrupted, killed, or cut short by hand): it has
    a sidecar but no summary (the summary is written last, only when every selected
    question has its row), fewer rows than its selection, and the sidecar's last run entry
    does not record these rows as the end of a completed run. A partial run exported, scored or tuned would silently
    stand for the whole selection. A summary present is checked against the rows by the
    caller (its ``rows_sha256``); a run with neither sidecar nor summary cannot say."""
    if summary is not None or sidecar is None:
        return
    runs = sidecar.get("runs")
    last = runs[-1] if isinstance(runs, list) and runs else None
    if isinstance(last, dict) and last.get("rows_sha256") == scan.sha256:
        return
    selection = sidecar.get("selection")
    n = selection.get("n") if isinstance(selection, dict) else None
    if not isinstance(n, int) or len(scan.rows) >= n:
        return  # every selected question has a row (whether they are the recorded ones is
        # verify's question)
    raise ProvenanceError(f"{p}: the run is unfinished: {len(scan.rows)} of the {n} selected "
                          "questions have rows, there is no summary and its sidecar records "
                          "no completed run over these rows (finish it with --resume first)")


def _refuse_unreadable(p: Path, rows: list[dict[str, Any]],
                       summary: dict[str, Any] | None) -> None:
    """One :class:`ProvenanceError` naming the file, the line, the question and the field of
    the first row that is not of the types readers rely on
    (:func:`~engram_eval.runs.row_checks.row_shape_problems`), or whose metrics are keyed
    otherwise than the other rows' (:func:`~engram_eval.runs.row_checks.metric_key_problems`),
    or the summary field of another type
    (:func:`~engram_eval.runs.known_fields.summary_shape_problems`): the commands that read a
    run stop there instead of failing inside their arithmetic."""
    from engram_eval.runs.known_fields import summary_shape_problems
    from engram_eval.runs.row_checks import metric_key_problems, row_shape_problems

    hint = f"; the run cannot be read (see `engram-eval verify {p}`)"
    for n, row in enumerate(rows, start=1):
        bad = row_shape_problems(row)
        if bad:
            raise ProvenanceError(f"{p}: line {n}: {bad[0]}" + (
                f" (+{len(bad) - 1} more)" if len(bad) > 1 else "") + hint)
    bad = metric_key_problems(rows)
    if bad:
        raise ProvenanceError(f"{p}: {bad[0]}{hint}")
    bad = summary_shape_problems(summary or {})
    if bad:
        raise ProvenanceError(f"{summary_path(p)}: {bad[0]}{hint}")


def read_metadata(result: str | Path) -> dict[str, Any]:
    """The run's metadata sidecar, which must exist and pass the schema."""
    return read_sidecar(result)


def read_summary(result: str | Path) -> dict[str, Any] | None:
    """The run's summary (``None`` when absent; ProvenanceError when unreadable)."""
    return _read_json_object(summary_path(result), "summary")


def read_rows(result: str | Path, *, allowed_ids: Iterable[str] | None = None) -> RowScan:
    """Every row and the rows hash; a torn last line (an unfinished run) is refused."""
    scan = scan_rows(result, allowed_ids=allowed_ids)
    if scan.torn_bytes:
        raise ProvenanceError(f"{result}: the last line is torn ({scan.torn_bytes} bytes); the "
                              "run is incomplete (finish it with --resume first)")
    return scan


def read_run(path: str | Path, *, require_sidecar: bool = False,
             within_selection: bool = False) -> FinishedRun:
    """Read a finished run (see the module docstring).

    ``require_sidecar``: the sidecar must exist and pass the schema. ``within_selection``
    (implies ``require_sidecar``): a row whose question is outside the sidecar's selection is
    refused."""
    p = Path(path)
    if not p.exists():
        link = link_problem(p)  # a dangling link or a loop says what it is
        raise FileNotFoundError(f"{p}: no such result file" + (f" ({link})" if link else ""))
    sidecar = (read_metadata(p) if require_sidecar or within_selection
               else _read_json_object(sidecar_path(p), "sidecar"))
    allowed = sidecar["selection"]["ids"] if within_selection and sidecar else None
    scan = read_rows(p, allowed_ids=allowed)
    summary = read_summary(p)
    recorded = (summary or {}).get("rows_sha256")
    if recorded and recorded != scan.sha256:
        raise ProvenanceError(f"{summary_path(p)}: records rows_sha256 {recorded} but the rows "
                              f"of {p} hash to {scan.sha256}; the summary does not describe "
                              "them")
    _refuse_unfinished(p, scan, sidecar, summary)
    _refuse_unreadable(p, scan.rows, summary)
    shas: dict[str, str] = {}
    name = None
    if summary and summary.get("dataset_sha256"):
        shas["summary"] = summary["dataset_sha256"]
        name = summary.get("dataset")
    ds = (sidecar or {}).get("dataset")
    if isinstance(ds, dict) and ds.get("sha256"):
        shas["sidecar"] = ds["sha256"]
        name = name or ds.get("name")
    if len(set(shas.values())) > 1:
        raise ProvenanceError(f"{p}: its summary and sidecar name different dataset hashes "
                              f"({shas['summary']} vs {shas['sidecar']})")
    fp = (summary or {}).get("fingerprint") or (sidecar or {}).get("fingerprint")
    retr = (summary or {}).get("retriever")
    described = (sidecar or {}).get("retriever")
    if retr is None and isinstance(described, dict):
        retr = described.get("retriever")
    return FinishedRun(p, scan.rows, scan.sha256, sidecar, summary, name,
                       next(iter(shas.values()), None), fp, retr)
