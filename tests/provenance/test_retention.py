"""The retention rule (issue 46 point 4): the tree keeps what backs a current claim, closed over
what it was made from, and the models the current defaults use; everything else moves to the
catalogue's archive; ``catalog --check`` holds the repository to it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import ConfigError
from engram_eval.provenance import catalog as C
from engram_eval.provenance import retention as R

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "fixtures" / "longmemeval_tiny.json"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A checkout (git) with runs a, b, c, d, a comparison of a and b with its plot, a ledger
    that labels d a held-out measurement, a README citing c, and three shipped models."""
    repo = tmp_path / "repo"
    demo = repo / "results" / "demo"
    demo.mkdir(parents=True)
    for name, limit in (("a", "4"), ("b", "4"), ("c", "3"), ("d", "2"), ("e", "6")):
        extra = ["--no-use-bm25-turn"] if name == "b" else []
        assert cli.main(["run", str(DATA), "--retriever", "bm25", "--no-rerank", "--no-progress",
                         *extra, "--limit", limit, "--output", str(demo / f"{name}.jsonl")]) == 0
    import sys

    # made as a maintainer makes it: the console script, in the checkout, results/ paths
    subprocess.run([str(Path(sys.executable).parent / "engram-eval"), "compare",
                    "results/demo/a.jsonl", "results/demo/b.jsonl", "--output",
                    "results/demo/cmp.json", "--plot", "results/demo/cmp.png"], cwd=repo,
                   check=True, capture_output=True)
    ledger = {"kind": "engram-eval/heldout-ledger", "inputs": {"x": {"runs": [
        {"output": "results/demo/d.jsonl", "label": "held-out measurement"},
        {"output": "results/demo/e.jsonl", "label": "regression check"}]}}}
    (repo / "results" / "heldout_ledger.json").write_text(json.dumps(ledger))
    (repo / "README.md").write_text("The figure of `results/demo/c.jsonl` and of demo/cmp.json.\n")
    (repo / "PROVENANCE.md").write_text("| [1](#s1) | `results/demo/` | demo | none |\n")
    models = repo / R.MODELS
    for name, card in (("tiny-base", {}), ("tiny-new", {"weights_from": "tiny-base"}),
                       ("tiny-old", {})):
        (models / name).mkdir(parents=True)
        (models / name / "card.json").write_text(json.dumps({"files": {}, **card}))
        if not card:
            (models / name / "w.bin").write_bytes(name.encode())
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "publish")
    assert cli.main(["catalog", "--write", "--root", str(repo)]) == 0
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "catalogue")
    return repo


CLAIM = R.Claim("a demo default", "the comparison behind it", ("demo/cmp.json",))


def test_the_rule_keeps_each_claim_with_what_it_was_made_from(tree: Path) -> None:
    plan = R.plan(tree, C.load(tree / C.CATALOG), ["tiny-new"], claims=[CLAIM])
    assert sorted(plan.keep) == ["demo/a", "demo/b", "demo/c", "demo/cmp.json", "demo/cmp.png",
                                 "demo/d", "heldout_ledger.json"]
    assert plan.keep["demo/cmp.json"][:2] == ["the README cites it", "behind a demo default"]
    assert "an input of demo/cmp.json" in plan.keep["demo/a"]
    assert "written by the command that made demo/cmp.json" in plan.keep["demo/cmp.png"]
    assert plan.keep["demo/d"] == ["a held-out measurement in the ledger"]
    assert plan.archive == ["demo/e"]  # a regression check no claim names
    assert plan.models_keep == {"tiny-new": "a current default names it",
                                "tiny-base": "tiny-new uses its weights"}
    assert plan.models_archive == ["tiny-old"]
    with pytest.raises(ConfigError, match="no catalogue entry matches demo/gone"):
        R.plan(tree, C.load(tree / C.CATALOG), [], claims=[R.Claim("x", "y", ("demo/gone",))])


def test_applied_the_tree_holds_what_the_rule_keeps_and_the_check_says_when_not(tree: Path
                                                                               ) -> None:
    cat = C.load(tree / C.CATALOG)
    plan = R.plan(tree, cat, ["tiny-new"], claims=[CLAIM])
    cat = R.apply(tree, cat, plan)
    (tree / C.CATALOG).write_text(C.dump(cat))
    assert not (tree / "results/demo/e.jsonl").exists()
    assert not (tree / R.MODELS / "tiny-old").exists() and (tree / R.MODELS / "tiny-base").is_dir()
    index = json.loads((tree / R.ARCHIVED_MODELS).read_text())
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert index["models"] == {"tiny-old": {"at": head, "path": "engram_eval/models/tiny-old"}}
    _git(tree, "add", "-A")
    _git(tree, "commit", "-qm", "archive")
    cat = C.load(tree / C.CATALOG)
    assert C.check(tree, cat) == []  # each archived file, the model's card too, read back

    def problems(c: dict) -> list[str]:
        return R.problems(tree, c, ["tiny-new"], claims=[CLAIM])

    assert problems(cat) == []
    # a kept entry archived, an entry in the tree no claim keeps, a model no default needs
    kept = next(e for e in cat["entries"] if e["id"] == "demo/a")
    broken = {**cat, "entries": [e for e in cat["entries"] if e["id"] != "demo/a"],
              "archive": [*cat["archive"], {**kept, "at": head}]}
    assert any(p.startswith("demo/a: archived, but the retention rule keeps it (an input of")
               for p in problems(broken))
    extra = {**cat, "entries": [*cat["entries"], {"id": "demo/x", "path": "results/demo/x"}]}
    assert any("results/demo/x: in the tree, but no current claim keeps it" in p
               for p in problems(extra))
    (tree / R.MODELS / "tiny-spare").mkdir()
    (tree / R.MODELS / "tiny-spare" / "card.json").write_text("{}")
    assert any("tiny-spare: shipped, but no current default needs it" in p
               for p in problems(cat))
    (tree / R.ARCHIVED_MODELS).write_text(json.dumps({"kind": R.ARCHIVED_MODELS_KIND,
                                                      "models": {}}))
    assert any("does not list the catalogue's archived models (tiny-old)" in p
               for p in problems(cat))
    # a claim that comes to need an archived entry: applied, it is back in the tree as it was
    wanted = [CLAIM, R.Claim("another", "e again", ("demo/e",))]
    (tree / R.MODELS / "tiny-spare" / "card.json").unlink()
    (tree / R.MODELS / "tiny-spare").rmdir()
    again = R.apply(tree, cat, R.plan(tree, cat, ["tiny-new"], claims=wanted))
    assert "demo/e" in {e["id"] for e in again["entries"]}
    assert "demo/e" not in {a["id"] for a in again["archive"]}
    archived_e = next(a for a in cat["archive"] if a["id"] == "demo/e")
    assert C.sha256_file(tree / "results/demo/e.jsonl") == archived_e["sha256"]
    assert (tree / "results/demo/e.jsonl.metadata.json").is_file()


def test_the_readme_cites_ids_and_paths() -> None:
    ids = ["a/run", "a/cmp.json", "b/x.yaml"]
    text = "see `results/a/run.jsonl.gz`, (a/cmp.json). and b/x.yaml.tuning.json"
    assert R.readme_ids(text, ids) == ["a/run", "a/cmp.json"]


def test_the_repository_holds_what_its_claims_keep_and_no_more() -> None:
    """``catalog --check``'s retention half on this repository: every entry in the tree kept
    by a claim, none archived that a claim keeps, the shipped models exactly the ones the
    defaults use, the index of archived models in step. (The tree's size follows from the
    claims: ``catalog --retain`` reports it.)"""
    from engram_eval.cli.audit import default_models

    cat = C.load(ROOT / C.CATALOG)
    assert R.applies(ROOT)
    problems = R.problems(ROOT, cat, default_models())
    assert problems == [], "\n".join(problems[:20])


def test_the_readme_states_the_rule() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "### What the tree keeps" in readme
    assert "engram-eval catalog --retain" in readme

