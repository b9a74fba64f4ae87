#!/usr/bin/env python
"""Write a sidecar ``<file>.metadata.json`` for every derived file in a results directory
(ablation tables, misses analyses, speed and dense-piece measurements), so every file in
results/ carries its provenance: its own sha256, the script that generated it (and that
script's sha256), the dataset hash, and the runs it was computed from (with fingerprints
and summary/row hashes). Existing sidecars are refused, never overwritten.

    python scripts/derived_sidecars.py results/longmemeval_s_dev
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engram_eval.io import exclusive_write, sha256_file  # noqa: E402

GENERATORS = {
    "ABLATIONS.md": ("scripts/ablation_table.py", "*.jsonl.summary.json"),
    "MISSES_hybrid_default.md": ("scripts/misses.py", "hybrid_default.jsonl"),
    "dense_pieces.json": ("benchmarks/longmemeval/dense_pieces.py", None),
    "speed_default.json": ("benchmarks/longmemeval/speed.py", None),
    "speed_fp32_first8.json": ("benchmarks/longmemeval/speed.py", None),
    "speed_bf16_first8.json": ("benchmarks/longmemeval/speed.py", None),
}


def is_run_file(p: Path) -> bool:
    n = p.name
    return n.endswith((".jsonl", ".jsonl.metadata.json", ".jsonl.summary.json"))


def describe(path: Path) -> dict:
    gen, pattern = GENERATORS[path.name]
    inputs = []
    if pattern:
        for inp in sorted(path.parent.glob(pattern)):
            run = Path(str(inp).removesuffix(".summary.json"))
            side = json.loads(Path(str(run) + ".metadata.json").read_text())
            inputs.append({"file": inp.name, "sha256": sha256_file(inp),
                           "run_fingerprint": side["fingerprint"]})
    dataset = None
    sides = sorted(path.parent.glob("*.jsonl.metadata.json"))
    if sides:
        dataset = json.loads(sides[0].read_text())["dataset"]
        dataset = {"name": dataset["name"], "sha256": dataset["sha256"]}
    if path.suffix == ".json":
        content = json.loads(path.read_text())
        if "dataset_sha256" in content:
            dataset = {"name": content.get("dataset"), "sha256": content["dataset_sha256"]}
    return {"kind": "engram-eval/derived", "file": path.name, "sha256": sha256_file(path),
            "generator": {"path": gen, "sha256": sha256_file(ROOT / gen)},
            "dataset": dataset, "inputs": inputs,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "note": "derived from the runs in this directory; see PROVENANCE.md for the command"}


def main(directory: str) -> int:
    d = Path(directory)
    for p in sorted(d.iterdir()):
        if is_run_file(p) or p.name.endswith(".metadata.json"):
            continue
        if p.name not in GENERATORS:
            print(f"unknown derived file {p}; add its generator to GENERATORS", file=sys.stderr)
            return 1
        exclusive_write(str(p) + ".metadata.json", json.dumps(describe(p), indent=2) + "\n")
        print(f"wrote {p}.metadata.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
