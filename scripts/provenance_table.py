#!/usr/bin/env python
"""List every published result under results/ with its command, fingerprint and dataset
hash, read from the sidecars (Markdown, for PROVENANCE.md)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path


def main(root: str = "results") -> int:
    for side in sorted(Path(root).rglob("*.jsonl.metadata.json")):
        meta = json.loads(side.read_text())
        result = str(side)[: -len(".metadata.json")]
        fresh = [r for r in meta["runs"] if r.get("command")]
        cmd = fresh[0]["command"] if fresh else None
        if cmd:
            cmd = ["python", *cmd] if cmd[0].endswith(".py") else cmd
            cmd = ["CACHE_DIR" if prev == "--cache-dir" else a
                   for prev, a in zip(["", *cmd[:-1]], cmd, strict=True)]
            cmd = [a if not a.startswith("/") else Path(a).name for a in cmd]
        print(f"### `{result}`\n")
        print(f"- dataset: `{meta['dataset']['name']}` sha256 `{meta['dataset']['sha256']}`")
        print(f"- fingerprint: `{meta['fingerprint']}`")
        print(f"- retriever: `{meta['retriever']['retriever']}`; models: " + (", ".join(
            f"{m['name']} ({m['source']}, sha256 {m['sha256'][:16]}…)" for m in meta["models"])
            or "none"))
        if cmd:
            print(f"- command: `{shlex.join(cmd)}`")
        walls = [r.get("wall_seconds") for r in meta["runs"]]
        print(f"- runs recorded: {len(meta['runs'])} (wall seconds {walls})")
        print(f"- verify: `engram-eval verify {result} --dataset DATA`\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
