"""Every published run in results/ has its sidecar and summary, is listed in PROVENANCE.md,
and passes `verify` (metrics recomputed from rows, fingerprint, schema, row set).

Source-hash staleness is not asserted here (a later code change legitimately makes an old
artifact stale; `verify` reports it). With the real data present, the opt-in tier
(`pytest -m data`) also re-hashes the dataset and re-derives gold from it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from real_data import data_dir

from engram_eval.audit import verify

ROOT = Path(__file__).resolve().parents[1]
RESULTS = sorted((ROOT / "results").rglob("*.jsonl"))


def test_results_directory_holds_published_runs() -> None:
    assert RESULTS, "results/ holds no published run"


@pytest.mark.parametrize("result", RESULTS, ids=lambda p: p.name)
def test_published_run_has_sidecar_and_is_documented(result: Path) -> None:
    assert Path(str(result) + ".metadata.json").is_file()
    assert Path(str(result) + ".summary.json").is_file()
    rel = result.relative_to(ROOT).as_posix()
    assert rel in (ROOT / "PROVENANCE.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("result", RESULTS, ids=lambda p: p.name)
def test_published_run_verifies(result: Path) -> None:
    report = verify(result)
    failed = [(n, d) for n, ok, d in report.checks
              if not ok and n != "source hashes match the installed package"]
    assert not failed, failed


@pytest.mark.data
@pytest.mark.parametrize("result", RESULTS, ids=lambda p: p.name)
def test_published_run_verifies_against_the_dataset(result: Path) -> None:
    import json

    meta = json.loads(Path(str(result) + ".metadata.json").read_text())
    name = meta["dataset"]["name"]
    hits = list(data_dir().rglob(name))
    if not hits:
        pytest.skip(f"dataset {name} not available")
    report = verify(result, hits[0])
    assert report.ok, report.format()


def test_every_file_in_results_carries_provenance() -> None:
    """Runs have sidecar + summary; every derived file (tables, measurements) has a
    `<file>.metadata.json` whose recorded sha256 matches the file and whose inputs match."""
    import json

    from engram_eval.io import sha256_file

    for p in sorted((ROOT / "results").rglob("*")):
        if p.is_dir() or p.name.endswith(".metadata.json"):
            continue
        if p.name.endswith(".jsonl"):
            assert Path(str(p) + ".metadata.json").is_file(), p
            continue
        if p.name.endswith(".jsonl.summary.json"):
            assert Path(str(p).removesuffix(".summary.json")).is_file(), p
            continue
        side = Path(str(p) + ".metadata.json")
        assert side.is_file(), f"{p} has no sidecar"
        meta = json.loads(side.read_text())
        assert meta["sha256"] == sha256_file(p), f"{p} changed after its sidecar was written"
        for inp in meta["inputs"]:
            assert sha256_file(p.parent / inp["file"]) == inp["sha256"], (p, inp["file"])
        assert p.relative_to(ROOT).name in (ROOT / "PROVENANCE.md").read_text() or \
            p.name in (ROOT / "PROVENANCE.md").read_text(), p
