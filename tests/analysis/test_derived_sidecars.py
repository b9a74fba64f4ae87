"""``engram_eval.analysis.derived_sidecars`` (run by ``scripts/derived_sidecars.py``, the last
step of every publish script): a sidecar for every derived file in a results directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from run_files import copy_run

from engram_eval.analysis import derived_sidecars as D
from engram_eval.analysis.ablation_table import render
from engram_eval.analysis.misses import misses_markdown
from engram_eval.io import package_root, sha256_file
from engram_eval.runs.rows import rows_sha256

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "derived_sidecars.py"


@pytest.fixture
def published(pristine: Path, tmp_path: Path) -> Path:
    """A results directory: one run, its ablation table and misses analysis, a README."""
    d = tmp_path / "pub"
    d.mkdir()
    run = copy_run(pristine, d / "hybrid_default.jsonl")
    (d / "ABLATIONS.md").write_text(render(d, "tiny"))
    (d / "MISSES_hybrid_default.md").write_text(misses_markdown(run))
    (d / "README.md").write_text("a document\n")
    return d


def test_writes_each_derived_files_sidecar_with_its_generator_and_inputs(
        published: Path) -> None:
    logs: list[str] = []
    assert D.write_missing_sidecars(published, echo=logs.append) == 0
    assert sorted(logs) == [f"wrote {published}/ABLATIONS.md.metadata.json",
                            f"wrote {published}/MISSES_hybrid_default.md.metadata.json"]
    run = published / "hybrid_default.jsonl"
    fp = json.loads((published / "hybrid_default.jsonl.metadata.json").read_text())["fingerprint"]
    for name, module, inputs in (
            ("ABLATIONS.md", "engram_eval/analysis/ablation_table.py",
             [{"file": "hybrid_default.jsonl.summary.json",
               "sha256": sha256_file(published / "hybrid_default.jsonl.summary.json"),
               "run_fingerprint": fp}]),
            ("MISSES_hybrid_default.md", "engram_eval/analysis/misses.py",
             [{"file": "hybrid_default.jsonl", "sha256": sha256_file(run),
               "run_fingerprint": fp, "rows_sha256": rows_sha256(run)}])):
        side = json.loads((published / f"{name}.metadata.json").read_text())
        assert side["sha256"] == sha256_file(published / name)
        assert side["generator"] == {"path": module,
                                     "sha256": sha256_file(package_root() / module)}
        assert side["inputs"] == inputs
        assert side["dataset"]["sha256"] == json.loads(
            (published / "hybrid_default.jsonl.metadata.json").read_text())["dataset"]["sha256"]
    assert not (published / "README.md.metadata.json").exists()
    # a second pass keeps what matches
    logs.clear()
    assert D.write_missing_sidecars(published, echo=logs.append) == 0
    assert all(line.startswith("kept ") for line in logs) and len(logs) == 2


def test_refuses_a_stale_sidecar_and_an_unknown_file_before_writing(published: Path) -> None:
    warned: list[str] = []
    assert D.write_missing_sidecars(published, echo=lambda m: None) == 0
    (published / "ABLATIONS.md").write_text("edited\n")
    assert D.write_missing_sidecars(published, echo=lambda m: None, warn=warned.append) == 1
    assert "does not match ABLATIONS.md" in warned[-1]
    other = published.parent / "other"
    other.mkdir()
    (other / "ABLATIONS.md").write_text("x\n")
    (other / "mystery.txt").write_text("?\n")
    assert D.write_missing_sidecars(other, echo=lambda m: None, warn=warned.append) == 1
    assert "unknown derived file" in warned[-1] and "FILE_GENERATORS" in warned[-1]
    assert not (other / "ABLATIONS.md.metadata.json").exists()  # nothing written


def test_run_files_and_exempt_documents() -> None:
    assert D.is_run_file(Path("a.jsonl.gz.summary.json")) and D.is_run_file(Path("a.jsonl"))
    assert not D.is_run_file(Path("a.k5.context.jsonl.gz"))
    assert D.is_exempt(Path("README_tables.md")) and D.is_exempt(Path("heldout_ledger.json"))
    assert D.generator_of("ABLATIONS.md") == (
        "engram_eval/analysis/ablation_table.py", D.INPUTS["ABLATIONS.md"])
    assert D.generator_of("x.frozen.json") == ("engram_eval/provenance/frozen.py", ())
    assert D.generator_of("x.txt") is None


def test_the_recorded_script_writes_the_same_sidecars(published: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), str(published)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    side = json.loads((published / "ABLATIONS.md.metadata.json").read_text())
    want = D.describe(published / "ABLATIONS.md")
    assert {**side, "created_at": ""} == {**want, "created_at": ""}
    bad = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2 and "usage" in bad.stderr


def _with_dataset(run: Path, name: str, sha: str) -> None:
    side = Path(str(run) + ".metadata.json")
    meta = json.loads(side.read_text())
    meta["dataset"] = {**meta["dataset"], "name": name, "sha256": sha}
    side.write_text(json.dumps(meta))


def test_the_dataset_is_the_input_runs_not_the_first_run_beside_it(
        pristine: Path, tmp_path: Path) -> None:
    """A tune config names the dataset of the run it was tuned from, though another run of
    another dataset sorts first in its directory; one tuned from runs of two datasets names
    both (``datasets``) and no single ``dataset``."""
    d = tmp_path / "lexical"
    d.mkdir()
    lme, loc = d / "tune_lme_stem.jsonl.gz", d / "tune_loc_stem_prefix.jsonl.gz"
    for run, name, sha in ((lme, "lme.tune.json", "1" * 64), (loc, "loc.tune.json", "2" * 64)):
        copy_run(pristine, run)
        _with_dataset(run, name, sha)
    for f in ("tune_loc_stem_prefix.yaml", "tuned_first_stage.yaml"):
        (d / f).write_text("fusion: rrf\n")
    assert D.describe(d / "tune_loc_stem_prefix.yaml")["dataset"] == {"name": "loc.tune.json",
                                                                      "sha256": "2" * 64}
    both = D.describe(d / "tuned_first_stage.yaml")
    assert both["dataset"] is None
    assert both["datasets"] == [{"name": "lme.tune.json", "sha256": "1" * 64},
                                {"name": "loc.tune.json", "sha256": "2" * 64}]
