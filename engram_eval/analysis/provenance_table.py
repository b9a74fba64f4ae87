"""List every published result under results/ with its command, fingerprint and dataset
hash, read from the sidecars (Markdown, for PROVENANCE.md).

Results may be plain (``X.jsonl``) or compressed by ``engram-eval compress``
(``X.jsonl.gz``, sidecar ``X.jsonl.gz.metadata.json``): the recorded command wrote
``X.jsonl``, so a compressed result lists the compress step after it. The rows hash is
the sha256 of the uncompressed rows (the same before and after compression). Context exports
(``X.context.jsonl.gz``, derived files with their own sidecar) are not results and are left
out.

    python -m engram_eval.analysis.provenance_table [results]

(``scripts/provenance_table.py``, the command PROVENANCE.md names, runs this module with the
same arguments.)
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

SIDECARS = ("*.jsonl.metadata.json", "*.jsonl.gz.metadata.json")


def display_command(cmd: Sequence[str]) -> list[str]:
    """The recorded argv, made portable: python for scripts, `engram-eval` for the venv
    entry point, CACHE_DIR for the cache, file names for absolute paths."""
    cmd = list(cmd)
    if cmd[0].endswith(".py"):
        cmd = ["python", *cmd]
    elif Path(cmd[0]).name == "engram-eval":
        cmd = ["engram-eval", *cmd[1:]]
    cmd = ["CACHE_DIR" if prev == "--cache-dir" else a
           for prev, a in zip(["", *cmd[:-1]], cmd, strict=True)]
    return [a if not a.startswith("/") else Path(a).name for a in cmd]


def result_entry(side: Path) -> str:
    """The Markdown entry of the result whose run sidecar is ``side`` (ends with a blank
    line)."""
    meta = json.loads(side.read_text())
    result = str(side)[: -len(".metadata.json")]
    fresh = [r for r in meta["runs"] if r.get("command")]
    cmd = display_command(fresh[0]["command"]) if fresh else None
    lines = [f"### `{result}`\n",
             f"- dataset: `{meta['dataset']['name']}` sha256 `{meta['dataset']['sha256']}`",
             f"- fingerprint: `{meta['fingerprint']}`",
             f"- retriever: `{meta['retriever']['retriever']}`; models: " + (", ".join(
                 f"{m['name']} ({m['source']}, sha256 {m['sha256'][:16]}…)"
                 for m in meta["models"] if "sha256" in m)
                 or ", ".join(m["name"] for m in meta["models"]) or "none")]
    if cmd:
        lines.append(f"- command: `{shlex.join(cmd)}`")
    if result.endswith(".gz"):
        lines.append(f"- then: `engram-eval compress {result.removesuffix('.gz')}`")
    summary = Path(result + ".summary.json")
    if summary.is_file():
        lines.append("- rows sha256 (uncompressed): "
                     f"`{json.loads(summary.read_text())['rows_sha256']}`")
    walls = [r.get("wall_seconds") for r in meta["runs"]]
    lines.append(f"- runs recorded: {len(meta['runs'])} (wall seconds {walls})")
    lines.append(f"- verify: `engram-eval verify {result} --dataset DATA`\n")
    return "\n".join(lines) + "\n"


def is_context_export_sidecar(side: Path) -> bool:
    """The sidecar of a context export (``X.context.jsonl[.gz]``, ``engram-eval
    export-context``): a derived file, not a run."""
    return ".context.jsonl" in side.name


def provenance_table(root: str | Path = "results") -> str:
    """Every result under ``root`` (found by its run sidecar; context exports are derived
    files, left out), one entry each, sorted."""
    sides = sorted({p for pat in SIDECARS for p in Path(root).rglob(pat)
                    if not is_context_export_sidecar(p)})
    return "".join(result_entry(side) for side in sides)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(provenance_table(*args[:1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
