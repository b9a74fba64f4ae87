"""The catalogue of published results (issue 46): built from a results tree's sidecars, checked
against it (a file not listed, a listed file absent, a hash or a command that differs), and
refused when malformed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import ConfigError
from engram_eval.provenance import catalog as C

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "fixtures" / "longmemeval_tiny.json"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A checkout-shaped folder (no git) with one run and one derived comparison of it."""
    root = tmp_path / "checkout"
    folder = root / "results" / "demo"
    folder.mkdir(parents=True)
    for name, retriever in (("a", "bm25"), ("b", "bm25")):
        assert cli.main(["run", str(DATA), "--retriever", retriever, "--no-rerank",
                         "--no-progress", "--limit", "4" if name == "a" else "5",
                         "--output", str(folder / f"{name}.jsonl")]) == 0
    (root / "PROVENANCE.md").write_text("| [7](#s7) | `results/demo/` | a demo | none |\n")
    return root


def test_build_lists_every_published_file_with_its_record(tree: Path) -> None:
    cat = C.build(tree)
    ids = [e["id"] for e in cat["entries"]]
    assert ids == ["demo/a", "demo/b"]  # sidecars and summaries are companions, not entries
    a = cat["entries"][0]
    meta = json.loads((tree / "results/demo/a.jsonl.metadata.json").read_text())
    assert a["type"] == "run" and a["role"] == "run" and a["sections"] == ["7"]
    assert a["command"] == meta["runs"][-1]["command"]
    assert a["inputs"]["data"] == {"name": DATA.name, "sha256": meta["dataset"]["sha256"]}
    assert a["commit"] is None  # no git history here


def test_check_names_what_differs(tree: Path) -> None:
    path = tree / C.CATALOG
    path.write_text(C.dump(C.build(tree)))
    assert C.check(tree, C.load(path)) == []
    shutil.copy(tree / "results/demo/a.jsonl", tree / "results/demo/c.jsonl")
    for suffix in (".metadata.json", ".summary.json"):
        shutil.copy(tree / f"results/demo/a.jsonl{suffix}", tree / f"results/demo/c.jsonl{suffix}")
    (tree / "results/demo/b.jsonl").unlink()
    with (tree / "results/demo/a.jsonl").open("a") as f:
        f.write("\n")
    problems = C.check(tree, C.load(path))
    assert any("results/demo/c.jsonl: published but not in the catalogue" in p for p in problems)
    assert any("results/demo/b.jsonl: in the catalogue but not under results/" in p
               for p in problems)
    assert any(p.startswith("results/demo/a.jsonl: sha256") for p in problems)
    assert cli.main(["catalog", "--check", "--root", str(tree)]) == 1
    assert cli.main(["catalog", "--write", "--root", str(tree)]) == 0
    assert cli.main(["catalog", "--check", "--root", str(tree)]) == 0


def test_a_malformed_catalogue_is_one_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "catalog.yaml"
    p.write_text("kind: something-else\nversion: 1\nentries: []\n")
    with pytest.raises(ConfigError, match="not an engram-eval/catalog version 1"):
        C.load(p)
    p.write_text(f"kind: {C.KIND}\nversion: 1\nentries:\n- id: x\n- id: x\n")
    with pytest.raises(ConfigError, match=r"entries\[1\]: id 'x' is listed twice"):
        C.load(p)
    with pytest.raises(ConfigError, match="did you mean demo/run"):
        C.find({"entries": [{"id": "demo/run"}]}, "demo/rum")


def test_entry_ids() -> None:
    assert C.entry_id("a/run.jsonl.gz") == "a/run"
    assert C.entry_id("a/run.jsonl") == "a/run"
    assert C.entry_id("a/ctx.context.jsonl.gz") == "a/ctx.context.jsonl.gz"
    assert C.entry_id("a/compare.json") == "a/compare.json"
