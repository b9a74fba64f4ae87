#!/usr/bin/env python
"""Write a sidecar ``<file>.metadata.json`` for every derived file in a results directory
(ablation tables, misses analyses, dense-piece measurements), so every file in results/
carries its provenance: its own sha256, the script that generated it (and that script's
sha256), the dataset hash, and the runs it was computed from (with fingerprints and
summary/row hashes). Runs may be plain (``X.jsonl``) or compressed (``X.jsonl.gz``).

Files that already have a sidecar (written by their generator, e.g. ``engram-eval analyze``,
``plot``, ``compare``, or by an earlier run of this script) are checked (the recorded sha256
must match the file) and left as they are; a sidecar that does not match is refused, never
overwritten.

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
from engram_eval.provenance.sources import file_generator  # noqa: E402
from engram_eval.runs.rows import rows_sha256  # noqa: E402

#: derived file -> glob patterns of its inputs in the same directory (none: not derived from
#: the runs here). Its generator: engram_eval.provenance.sources.FILE_GENERATORS.
INPUTS: dict[str, tuple[str, ...]] = {
    "ABLATIONS.md": ("*.jsonl.summary.json", "*.jsonl.gz.summary.json"),
    "MISSES_hybrid_default.md": ("hybrid_default.jsonl", "hybrid_default.jsonl.gz"),
    # results/longmemeval_s_dev_split (scripts/publish_tuning.sh)
    "tuned.yaml": ("tuning_run.jsonl.gz",),
    "tuned.yaml.tuning.json": ("tuning_run.jsonl.gz",),
    # results/lexical (scripts/publish_lexical.sh): the chosen variants' tuning runs are
    # published; the others stay in scratch (their rows sha256 is in each tuning report)
    "tune_lme_stem.yaml": ("tune_lme_stem.jsonl.gz",),
    "tune_lme_stem.yaml.tuning.json": ("tune_lme_stem.jsonl.gz",),
    "tune_loc_stem_prefix.yaml": ("tune_loc_stem_prefix.jsonl.gz",),
    "tune_loc_stem_prefix.yaml.tuning.json": ("tune_loc_stem_prefix.jsonl.gz",),
    "tuned_first_stage.yaml": ("tune_lme_stem.jsonl.gz", "tune_loc_stem_prefix.jsonl.gz"),
    "tuned_first_stage.yaml.tuning.json": ("tune_lme_stem.jsonl.gz",
                                           "tune_loc_stem_prefix.jsonl.gz"),
}


def generator_of(name: str) -> tuple[str, tuple[str, ...]] | None:
    """(generator, input patterns) of a derived file name, None when nothing generates it
    (:func:`engram_eval.provenance.sources.file_generator`)."""
    gen = file_generator(name)
    return None if gen is None else (gen, INPUTS.get(name, ()))


RUN_SUFFIXES = (".jsonl", ".jsonl.gz")


def is_run_file(p: Path) -> bool:
    n = p.name
    if ".context.jsonl" in n:  # a context export: derived, with its own sidecar
        return False
    return n.endswith(tuple(s + e for s in RUN_SUFFIXES
                            for e in ("", ".metadata.json", ".summary.json")))


def run_sidecars(d: Path) -> list[Path]:
    return sorted([*d.glob("*.jsonl.metadata.json"), *d.glob("*.jsonl.gz.metadata.json")])


def describe(path: Path) -> dict:
    found = generator_of(path.name)
    assert found is not None
    gen, patterns = found
    inputs = []
    for inp in sorted({q for pat in patterns for q in path.parent.glob(pat)}):
        run = Path(str(inp).removesuffix(".summary.json"))
        side = json.loads(Path(str(run) + ".metadata.json").read_text())
        entry = {"file": inp.name, "sha256": sha256_file(inp),
                 "run_fingerprint": side["fingerprint"]}
        if inp == run:
            entry["rows_sha256"] = rows_sha256(run)
        inputs.append(entry)
    dataset = None
    sides = run_sidecars(path.parent)
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


#: Files in results/ that document rather than measure, and the held-out ledger (itself a
#: provenance record, appended to by every held-out run): no sidecar needed.
EXEMPT = ("PROVENANCE.md", "README.md", "heldout_ledger.json")


def is_exempt(p: Path) -> bool:
    return p.name in EXEMPT or (p.name.startswith("README") and p.suffix == ".md")


def main(directory: str) -> int:
    """Check every file first; write the missing sidecars only when all are accounted for."""
    d = Path(directory)
    todo: list[Path] = []
    for p in sorted(d.iterdir()):
        if p.is_dir() or is_run_file(p) or p.name.endswith(".metadata.json") or is_exempt(p):
            continue
        side = Path(str(p) + ".metadata.json")
        if p.name.endswith(".summary.json") and Path(
                str(p).removesuffix(".summary.json") + ".metadata.json").exists():
            continue  # a production run's summary, beside its output and sidecar
        if side.exists() and "output_sha256" in json.loads(side.read_text()):
            if json.loads(side.read_text())["output_sha256"] != sha256_file(p):
                print(f"{p} does not match its run sidecar {side}", file=sys.stderr)
                return 1
            print(f"kept {side} (a production run's sidecar)")
            continue
        if side.exists():
            recorded = json.loads(side.read_text()).get("sha256")
            if recorded != sha256_file(p):
                print(f"{side} already exists" + ("" if recorded == sha256_file(p) else
                      f" and does not match {p.name}") + "; move the old sidecar away",
                      file=sys.stderr)
                return 1
            print(f"kept {side} (it matches the file)")
            continue
        if generator_of(p.name) is None:
            print(f"unknown derived file {p}; add its generator to FILE_GENERATORS in "
                  "engram_eval/provenance/sources.py", file=sys.stderr)
            return 1
        todo.append(p)
    for p in todo:
        exclusive_write(str(p) + ".metadata.json", json.dumps(describe(p), indent=2) + "\n")
        print(f"wrote {p}.metadata.json")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
