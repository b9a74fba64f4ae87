"""A run made with ``run --questions FILE`` (texts replaced, haystack kept): ``verify
--dataset`` without that file says what it could not check and exits 3, never VERIFIED; with
the file it verifies; with another file it fails. ``merge`` takes the file the same way
(issue 43)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from run_files import copy_run

from engram_eval.cli import main as cli
from engram_eval.errors import ProvenanceError
from engram_eval.runs import runner
from engram_eval.runs import verify as V
from engram_eval.runs.config import RunConfig
from engram_eval.runs.merge import merge

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "longmemeval_tiny.json"
ZH = ROOT / "fixtures" / "longmemeval_tiny.questions_zh.jsonl"


def zh_run(out: Path, **kw: object) -> Path:
    runner.run(RunConfig(retriever="bm25", rerank=False, progress=False, questions=str(ZH),
                         **kw), FIXTURE, out, echo=lambda m: None)  # type: ignore[arg-type]
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return zh_run(tmp_path_factory.mktemp("zh") / "zh.jsonl")


def test_without_the_file_the_cli_says_what_was_not_checked_and_exits_3(
        pristine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", str(pristine), "--dataset", str(FIXTURE)]) == 3
    out = capsys.readouterr().out
    assert f"[not checked] {V.TEXTS}: the run replaced question texts from " \
           f"{ZH.name} (sha256 " in out
    assert "without that file (--questions) the time windows its traces record are not " \
           "re-derived" in out
    assert out.rstrip().endswith(f"NOT VERIFIED (nothing failed, but not checked: {V.TEXTS})")
    assert "\nVERIFIED" not in out


def test_with_the_file_it_verifies(pristine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", str(pristine), "--dataset", str(FIXTURE), "--questions",
                     str(ZH)]) == 0
    out = capsys.readouterr().out
    assert f"[ok] {V.TEXTS}: {ZH} (sha256 " in out and out.rstrip().endswith("VERIFIED")


def test_with_another_file_it_fails(pristine: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text(ZH.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    rep = V.verify(pristine, FIXTURE, questions_file=other)
    bad = {n: d for n, s, d in rep.checks if s == "FAIL"}
    assert list(bad) == [V.TEXTS] and bad[V.TEXTS].startswith(f"{other} has sha256 ")
    assert rep.exit_code == 1


def test_without_the_dataset_the_texts_are_not_mentioned_twice(pristine: Path) -> None:
    rep = V.verify(pristine)
    assert V.TEXTS not in [n for n, _, _ in rep.checks] and rep.exit_code == 3


def test_merge_of_replaced_text_shards_needs_the_file(tmp_path: Path) -> None:
    shards = [zh_run(tmp_path / f"s{i}.jsonl", shard=f"{i}/2") for i in range(2)]
    out = tmp_path / "merged.jsonl"
    with pytest.raises(ProvenanceError, match=r"merge: shard 0/2 .* \[not checked\] "
                       + re.escape(f"{V.TEXTS}: the run replaced question texts")):
        merge(shards, out, dataset=FIXTURE)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for s in shards for p in (s, Path(f"{s}.metadata.json"),
                                         Path(f"{s}.summary.json")))
    merge(shards, out, dataset=FIXTURE, questions_file=ZH)
    assert V.verify(out, FIXTURE, questions_file=ZH).verified
    assert V.verify(out, FIXTURE).exit_code == 3
    assert json.loads(Path(f"{out}.metadata.json").read_text())["selection"]["questions"][
        "name"] == ZH.name


def test_a_copy_verifies_the_same(pristine: Path, tmp_path: Path) -> None:
    copy = copy_run(pristine, tmp_path / "copy.jsonl")
    assert V.verify(copy, FIXTURE).exit_code == 3
