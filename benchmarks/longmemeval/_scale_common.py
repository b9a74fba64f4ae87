"""Shared pieces of the scale benchmarks (speed_variants.py, speed_rerank.py, speed_memo.py,
scale.py): one measured run in a fresh subprocess (``speed.one_pass``), the provenance header,
and the record kernel's whole-document discipline (:mod:`engram_eval.provenance.records`):
every output refused before any work if it exists, then the progress so far in
``OUTPUT.partial`` after each step and the final file written atomically (:func:`claim`)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from speed import CHILD, PEAK_RSS, one_pass  # noqa: E402,F401  (re-exported)


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                                "engram_eval", "benchmarks"], capture_output=True,
                               text=True).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def provenance_header(script: str, datasets: dict[str, str], settings: dict[str, Any]
                      ) -> dict[str, Any]:
    """Dataset hashes, settings, commit, and the sha256 of this script, the shared module
    and every package source a run hashes (core + hybrid retriever)."""
    from engram_eval.io import sha256_file
    from engram_eval.provenance.sidecar import package_versions, source_hashes
    from engram_eval.provenance.sources import run_sources
    from engram_eval.retrieval.sources import PIPELINE_SOURCES

    return {
        "kind": "engram-eval/benchmark",
        "script": {"path": os.path.relpath(script, ROOT), "sha256": sha256_file(script)},
        "helpers": {os.path.relpath(p, ROOT): sha256_file(p)
                    for p in (HERE / "_scale_common.py", HERE / "speed.py")},
        "git_commit": git_commit(),
        "sources": source_hashes(run_sources(PIPELINE_SOURCES)
                                 + ["engram_eval/data/stress.py"]),
        "packages": package_versions(),
        "datasets": {name: {"path": os.path.abspath(p), "sha256": sha256_file(p),
                            "size": os.path.getsize(p)} for name, p in datasets.items()},
        "settings": settings,
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "processor": platform.processor(), "cpu_flags_int8_scheme": _scheme()},
        "command": [sys.executable, *sys.argv],
    }


def _scheme() -> str:
    from engram_eval.retrieval.onnx_export import int8_scheme

    return int8_scheme()


def claim(output: str | Path, *also: str | Path) -> Any:
    """Claim the measurement document ``output`` (and ``also``: a plot) before any work: stop
    (SystemExit naming it) when one exists, is a symbolic link (dangling or not), or cannot be
    created (:func:`engram_eval.provenance.records.refuse_existing`). Returns its
    :class:`~engram_eval.provenance.records.Checkpoint`: ``.save(doc)`` after each step (into
    ``OUTPUT.partial``), ``.finish(doc)`` once (atomic; the partial file removed)."""
    from engram_eval.errors import EngramEvalError
    from engram_eval.provenance.records import Checkpoint, refuse_existing

    try:
        refuse_existing((output, *also), hint="choose a new output name")
    except (EngramEvalError, OSError) as e:
        raise SystemExit(str(e)) from None
    return Checkpoint(output)


def remove_file(path: str | Path) -> None:
    """Remove this script's own file ``path`` (a scratch file), inside its own directory and
    never through a link (absent: nothing to do)."""
    from engram_eval.io import remove_contained

    remove_contained(path, Path(path).parent, recursive=False)


def measure_python(code: str, args: list[str]) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (argv[1:] = args), returning its JSON stdout's last
    line plus wall time and peak RSS."""
    wrapper = PEAK_RSS + (
        "import json, sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "t = time.perf_counter()\n"
        "ns = {}\n"
        "exec(compile(sys.argv[1], '<measured>', 'exec'), ns)\n"
        "res = ns['main'](*sys.argv[2:])\n"
        "rss, source = _peak_rss()\n"
        "print(json.dumps({'result': res, 'wall_seconds': time.perf_counter() - t,\n"
        "  'peak_rss_bytes': rss, 'peak_rss_source': source}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", wrapper, code, *args], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"measured step failed:\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out
