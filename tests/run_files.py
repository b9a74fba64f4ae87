"""File helpers shared by the tests that tamper with a finished run or an answer/judge file."""

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
