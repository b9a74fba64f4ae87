"""File helpers shared by the tests that tamper with a finished run or an answer/judge file,
and a minimal scored run (:func:`write_run`) for the comparison tests."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram_eval.provenance.sidecar import sidecar_path, summary_path


def copy_run(src: Path, dst: Path) -> Path:
    """A private copy of the finished run ``src`` (result, sidecar, summary) at ``dst``."""
    for a, b in ((src, dst), (sidecar_path(src), sidecar_path(dst)),
                 (summary_path(src), summary_path(dst))):
        shutil.copyfile(a, b)
    return dst


def edit_line(path: Path, n: int, fn: Callable[[dict[str, Any]], Any]) -> None:
    """Apply ``fn`` to the JSON row on line ``n`` (0-based) of ``path``, in place."""
    ls = path.read_text().splitlines(keepends=True)
    row = json.loads(ls[n])
    fn(row)
    ls[n] = json.dumps(row, ensure_ascii=False) + "\n"
    path.write_text("".join(ls))


#: The dataset sha256 :func:`write_run` records.
SHA = "a" * 64


def write_run(path: Path, values: list[dict[str, float]], *, types: list[str] | None = None,
              ids: list[str] | None = None, sha: str | None = SHA, retriever: str = "x",
              gold: list[list[str]] | None = None, summary: bool = True) -> Path:
    ids = ids or [f"q{i:02d}" for i in range(len(values))]
    types = types or ["t"] * len(values)
    with open(path, "w", encoding="utf-8") as f:
        for i, (qid, qt, m) in enumerate(zip(ids, types, values, strict=True)):
            g = gold[i] if gold else ["s1"]
            f.write(json.dumps({"question_id": qid, "question_type": qt,
                                "ranked_session_ids": ["s1", "s2"], "scores": [1.0, 0.5],
                                "gold": {"answerable": g}, "metrics": {"answerable": m}}) + "\n")
    if summary:
        Path(str(path) + ".summary.json").write_text(json.dumps(
            {"dataset": "d.json", "dataset_sha256": sha, "retriever": retriever,
             "fingerprint": retriever * 8}))
    return path


def binary(vals: list[int], name: str = "recall_any@1") -> list[dict[str, float]]:
    return [{name: float(v), "mrr": float(v)} for v in vals]


def reseal(result: Path, rows: list[dict[str, Any]] | None = None,
           edit_meta: Callable[[dict[str, Any]], Any] | None = None) -> Path:
    """Forge the finished run ``result`` as a careful forger would, with the package's own
    functions: write ``rows`` (default: the rows as they are) as the runner serialises them,
    apply ``edit_meta`` to the sidecar, then recompute the fingerprint
    (:func:`~engram_eval.provenance.sidecar.fingerprint_of`), the rows hash
    (:func:`~engram_eval.provenance.records.rows_sha256`, in the sidecar's last run entry and
    the summary) and the summary from the rows
    (:func:`~engram_eval.scoring.summary.build_summary`; ``n_questions`` follows the rows).
    Whatever verify then catches, it catches from the content, not from a stale hash."""
    from engram_eval.provenance.records import rows_sha256
    from engram_eval.provenance.sidecar import fingerprint_of
    from engram_eval.runs.rows import row_line, scan_rows
    from engram_eval.scoring.summary import GOLD_ABSENT, build_summary

    if rows is None:
        rows = scan_rows(result).rows
    result.write_bytes(b"".join(row_line(r) for r in rows))
    meta = json.loads(sidecar_path(result).read_text(encoding="utf-8"))
    if edit_meta is not None:
        edit_meta(meta)
    meta["fingerprint"] = fingerprint_of(meta)
    digest = rows_sha256(result)
    meta["runs"][-1]["rows_sha256"] = digest
    sidecar_path(result).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    old = json.loads(summary_path(result).read_text(encoding="utf-8"))
    summary = build_summary(rows, meta["protocols"], fingerprint=meta["fingerprint"],
                            dataset=meta["dataset"]["name"],
                            dataset_sha256=meta["dataset"]["sha256"],
                            retriever=meta["config"]["retriever"], rows_sha256=digest,
                            unparsable_dates=old.get("unparsable_dates"),
                            gold_absent_from_haystack=old.get(GOLD_ABSENT),
                            frozen_source=meta.get("frozen_source"))
    summary_path(result).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return result
