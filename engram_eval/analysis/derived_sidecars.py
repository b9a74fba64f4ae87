"""Write a sidecar ``<file>.metadata.json`` for every derived file in a results directory
(ablation tables, misses analyses, dense-piece measurements), so every file in results/
carries its provenance: its own sha256, the module that generated it (and that module's
sha256), the dataset hash, and the runs it was computed from (with fingerprints and
summary/row hashes). Runs may be plain (``X.jsonl``) or compressed (``X.jsonl.gz``).

Files that already have a sidecar (written by their generator, e.g. ``engram-eval analyze``,
``plot``, ``compare``, or by an earlier run of this module) are checked (the recorded sha256
must match the file) and left as they are; a sidecar that does not match is refused, never
overwritten.

    python -m engram_eval.analysis.derived_sidecars results/longmemeval_s_dev

(``scripts/derived_sidecars.py``, the command the catalogue records, runs this module
with the same argument.)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.io import exclusive_write, package_root, sha256_file
from engram_eval.provenance.sources import file_generator
from engram_eval.runs.rows import rows_sha256

#: derived file -> glob patterns of its inputs in the same directory (none: not derived from
#: the runs here). Its generator: engram_eval.provenance.sources.FILE_GENERATORS.
INPUTS: dict[str, tuple[str, ...]] = {
    "ABLATIONS.md": ("*.jsonl.summary.json", "*.jsonl.gz.summary.json"),
    "MISSES_hybrid_default.md": ("hybrid_default.jsonl", "hybrid_default.jsonl.gz"),
    # results/longmemeval_s_dev_split (its catalogue entries)
    "tuned.yaml": ("tuning_run.jsonl.gz",),
    "tuned.yaml.tuning.json": ("tuning_run.jsonl.gz",),
    # results/lexical (its catalogue entries): the chosen variants' tuning runs are
    # published; the others stay in scratch (their rows sha256 is in each tuning report)
    "tune_lme_stem.yaml": ("tune_lme_stem.jsonl.gz",),
    "tune_lme_stem.yaml.tuning.json": ("tune_lme_stem.jsonl.gz",),
    "tune_loc_stem_prefix.yaml": ("tune_loc_stem_prefix.jsonl.gz",),
    "tune_loc_stem_prefix.yaml.tuning.json": ("tune_loc_stem_prefix.jsonl.gz",),
    "tuned_first_stage.yaml": ("tune_lme_stem.jsonl.gz", "tune_loc_stem_prefix.jsonl.gz"),
    "tuned_first_stage.yaml.tuning.json": ("tune_lme_stem.jsonl.gz",
                                           "tune_loc_stem_prefix.jsonl.gz"),
    # results/turn_top_m (its catalogue entries): the chosen variants' runs are published
    # (topm_lme_V, topm_loc_V), the others stay in scratch
    "topm_d1b1.yaml": ("topm_lme_d1b1.jsonl.gz", "topm_loc_d1b1.jsonl.gz"),
    "topm_d1b1.yaml.tuning.json": ("topm_lme_d1b1.jsonl.gz", "topm_loc_d1b1.jsonl.gz"),
    "topm_d2b1.yaml": ("topm_lme_d2b1.jsonl.gz", "topm_loc_d2b1.jsonl.gz"),
    "topm_d2b1.yaml.tuning.json": ("topm_lme_d2b1.jsonl.gz", "topm_loc_d2b1.jsonl.gz"),
    "topm_d3b1.yaml": ("topm_lme_d3b1.jsonl.gz", "topm_loc_d3b1.jsonl.gz"),
    "topm_d3b1.yaml.tuning.json": ("topm_lme_d3b1.jsonl.gz", "topm_loc_d3b1.jsonl.gz"),
    "topm_d1b2.yaml": ("topm_lme_d1b2.jsonl.gz", "topm_loc_d1b2.jsonl.gz"),
    "topm_d1b2.yaml.tuning.json": ("topm_lme_d1b2.jsonl.gz", "topm_loc_d1b2.jsonl.gz"),
    "topm_d1b3.yaml": ("topm_lme_d1b3.jsonl.gz", "topm_loc_d1b3.jsonl.gz"),
    "topm_d1b3.yaml.tuning.json": ("topm_lme_d1b3.jsonl.gz", "topm_loc_d1b3.jsonl.gz"),
    "topm_first_stage.yaml": ("topm_lme_*.jsonl.gz", "topm_loc_*.jsonl.gz"),
    "topm_first_stage.yaml.tuning.json": ("topm_lme_*.jsonl.gz", "topm_loc_*.jsonl.gz"),
    "topm_loc_d1b1.yaml": ("topm_loc_d1b1.jsonl.gz",),
    "topm_loc_d1b1.yaml.tuning.json": ("topm_loc_d1b1.jsonl.gz",),
    "topm_loc_d2b1.yaml": ("topm_loc_d2b1.jsonl.gz",),
    "topm_loc_d2b1.yaml.tuning.json": ("topm_loc_d2b1.jsonl.gz",),
    "topm_loc_d3b1.yaml": ("topm_loc_d3b1.jsonl.gz",),
    "topm_loc_d3b1.yaml.tuning.json": ("topm_loc_d3b1.jsonl.gz",),
    "topm_loc_d1b2.yaml": ("topm_loc_d1b2.jsonl.gz",),
    "topm_loc_d1b2.yaml.tuning.json": ("topm_loc_d1b2.jsonl.gz",),
    "topm_loc_d1b3.yaml": ("topm_loc_d1b3.jsonl.gz",),
    "topm_loc_d1b3.yaml.tuning.json": ("topm_loc_d1b3.jsonl.gz",),
    "topm_people_first_stage.yaml": ("topm_loc_*.jsonl.gz",),
    "topm_people_first_stage.yaml.tuning.json": ("topm_loc_*.jsonl.gz",),
}

RUN_SUFFIXES = (".jsonl", ".jsonl.gz")

#: Files in results/ that document rather than measure, and the held-out ledger (itself a
#: provenance record, appended to by every held-out run): no sidecar needed.
EXEMPT = ("PROVENANCE.md", "README.md", "heldout_ledger.json")


def generator_of(name: str) -> tuple[str, tuple[str, ...]] | None:
    """(generator, input patterns) of a derived file name, None when nothing generates it
    (:func:`engram_eval.provenance.sources.file_generator`)."""
    gen = file_generator(name)
    return None if gen is None else (gen, INPUTS.get(name, ()))


def is_run_file(p: Path) -> bool:
    """A run's result, sidecar or summary (a context export is a derived file)."""
    n = p.name
    if ".context.jsonl" in n:  # a context export: derived, with its own sidecar
        return False
    return n.endswith(tuple(s + e for s in RUN_SUFFIXES
                            for e in ("", ".metadata.json", ".summary.json")))


def run_sidecars(d: Path) -> list[Path]:
    """The run sidecars in ``d``, sorted."""
    return sorted([*d.glob("*.jsonl.metadata.json"), *d.glob("*.jsonl.gz.metadata.json")])


def is_exempt(p: Path) -> bool:
    return p.name in EXEMPT or (p.name.startswith("README") and p.suffix == ".md")


def describe(path: Path) -> dict[str, Any]:
    """The sidecar of the derived file ``path``: its sha256, its generator (path relative to
    the repository root, and sha256), the dataset of its input runs (``datasets``, all of
    them, when they are several; with no input run, the dataset of the runs beside it; the
    one the file names wins), its inputs in the same directory and the time."""
    found = generator_of(path.name)
    if found is None:
        raise ValueError(f"unknown derived file {path}")
    gen, patterns = found
    inputs = []
    datasets: dict[str, dict[str, str]] = {}  # sha256 -> dataset, of the input runs
    for inp in sorted({q for pat in patterns for q in path.parent.glob(pat)}):
        run = Path(str(inp).removesuffix(".summary.json"))
        side = json.loads(Path(str(run) + ".metadata.json").read_text())
        entry = {"file": inp.name, "sha256": sha256_file(inp),
                 "run_fingerprint": side["fingerprint"]}
        if inp == run:
            entry["rows_sha256"] = rows_sha256(run)
        inputs.append(entry)
        if side.get("dataset"):
            ds = {"name": side["dataset"]["name"], "sha256": side["dataset"]["sha256"]}
            datasets.setdefault(ds["sha256"], ds)
    extra: dict[str, Any] = {}
    dataset = None
    if len(datasets) == 1:  # the inputs' one dataset
        dataset = next(iter(datasets.values()))
    elif datasets:  # inputs over several datasets (tuning parts tuned together): all named
        extra["datasets"] = sorted(datasets.values(), key=lambda d: d["name"])
    elif sides := run_sidecars(path.parent):  # no input runs: the directory's runs' dataset
        dataset = json.loads(sides[0].read_text())["dataset"]
        dataset = {"name": dataset["name"], "sha256": dataset["sha256"]}
    if path.suffix == ".json":
        content = json.loads(path.read_text())
        if "dataset_sha256" in content:
            dataset = {"name": content.get("dataset"), "sha256": content["dataset_sha256"]}
            extra.pop("datasets", None)
    return {"kind": "engram-eval/derived", "file": path.name, "sha256": sha256_file(path),
            "generator": {"path": gen, "sha256": sha256_file(package_root() / gen)},
            "dataset": dataset, **extra, "inputs": inputs,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "note": "derived from the runs in this directory; see PROVENANCE.md for the command"}


def write_missing_sidecars(directory: str | Path,
                           echo: Callable[[str], None] = print,
                           warn: Callable[[str], None] | None = None) -> int:
    """Check every file of ``directory`` first; write the missing sidecars only when all are
    accounted for. 0, or 1 (nothing written, the reason told to ``warn``, default stderr)
    when a sidecar does not match its file or a file has no known generator."""
    if warn is None:
        def warn(msg: str) -> None:
            print(msg, file=sys.stderr)
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
                warn(f"{p} does not match its run sidecar {side}")
                return 1
            echo(f"kept {side} (a production run's sidecar)")
            continue
        if side.exists():
            recorded = json.loads(side.read_text()).get("sha256")
            if recorded != sha256_file(p):
                warn(f"{side} already exists and does not match {p.name}; move the old "
                     "sidecar away")
                return 1
            echo(f"kept {side} (it matches the file)")
            continue
        if generator_of(p.name) is None:
            warn(f"unknown derived file {p}; add its generator to FILE_GENERATORS in "
                 "engram_eval/provenance/sources.py")
            return 1
        todo.append(p)
    for p in todo:
        exclusive_write(str(p) + ".metadata.json", json.dumps(describe(p), indent=2) + "\n")
        echo(f"wrote {p}.metadata.json")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m engram_eval.analysis.derived_sidecars DIRECTORY",
              file=sys.stderr)
        return 2
    return write_missing_sidecars(args[0])


if __name__ == "__main__":
    raise SystemExit(main())
