#!/usr/bin/env python
"""List every published result under results/ with its command, fingerprint and dataset
hash, read from the sidecars (Markdown, for PROVENANCE.md).

Results may be plain (``X.jsonl``) or compressed by ``engram-eval compress``
(``X.jsonl.gz``, sidecar ``X.jsonl.gz.metadata.json``): the recorded command wrote
``X.jsonl``, so a compressed result lists the compress step after it. The rows hash is
the sha256 of the uncompressed rows (the same before and after compression).

    python scripts/provenance_table.py [results]
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

SIDECARS = ("*.jsonl.metadata.json", "*.jsonl.gz.metadata.json")


def display_command(cmd: list[str]) -> list[str]:
    """The recorded argv, made portable: python for scripts, `engram-eval` for the venv
    entry point, CACHE_DIR for the cache, file names for absolute paths."""
    if cmd[0].endswith(".py"):
        cmd = ["python", *cmd]
    elif Path(cmd[0]).name == "engram-eval":
        cmd = ["engram-eval", *cmd[1:]]
    cmd = ["CACHE_DIR" if prev == "--cache-dir" else a
           for prev, a in zip(["", *cmd[:-1]], cmd, strict=True)]
    return [a if not a.startswith("/") else Path(a).name for a in cmd]


def main(root: str = "results") -> int:
    sides = sorted({p for pat in SIDECARS for p in Path(root).rglob(pat)})
    for side in sides:
        meta = json.loads(side.read_text())
        result = str(side)[: -len(".metadata.json")]
        fresh = [r for r in meta["runs"] if r.get("command")]
        cmd = display_command(fresh[0]["command"]) if fresh else None
        print(f"### `{result}`\n")
        print(f"- dataset: `{meta['dataset']['name']}` sha256 `{meta['dataset']['sha256']}`")
        print(f"- fingerprint: `{meta['fingerprint']}`")
        print(f"- retriever: `{meta['retriever']['retriever']}`; models: " + (", ".join(
            f"{m['name']} ({m['source']}, sha256 {m['sha256'][:16]}…)" for m in meta["models"]
            if "sha256" in m) or ", ".join(m["name"] for m in meta["models"]) or "none"))
        if cmd:
            print(f"- command: `{shlex.join(cmd)}`")
        if result.endswith(".gz"):
            print(f"- then: `engram-eval compress {result.removesuffix('.gz')}`")
        summary = Path(result + ".summary.json")
        if summary.is_file():
            print(f"- rows sha256 (uncompressed): `{json.loads(summary.read_text())['rows_sha256']}`")
        walls = [r.get("wall_seconds") for r in meta["runs"]]
        print(f"- runs recorded: {len(meta['runs'])} (wall seconds {walls})")
        print(f"- verify: `engram-eval verify {result} --dataset DATA`\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
