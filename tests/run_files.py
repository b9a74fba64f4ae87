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
