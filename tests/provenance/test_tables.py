"""PROVENANCE.md's generated blocks (issue 46, point 3): read from the catalogue and the
published files, rewritten by ``engram-eval catalog --tables`` (and by ``--write`` /
``--archive``), named stale by ``--check``; archiving an entry changes generated lines only."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.cli.audit import table_sources
from engram_eval.errors import ConfigError
from engram_eval.provenance import catalog as C
from engram_eval.provenance import tables as T

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "fixtures" / "longmemeval_tiny.json"

DOC = """# Provenance

| § | results folder | what | history |
|---|---|---|---|
| [1](#s1) | `results/demo/` | demo | none |

<a id="s1"></a>
## 1. Demo — `results/demo/`

Written by hand, kept byte for byte.
<!-- generated: fig demo/a answerable:recall_any@1
  n=answerable:n -->
<!-- end generated -->
<!-- generated: fig demo/cmp.json cmp:recall_all@5 -->
<!-- end generated -->
<!-- generated: setting chat reranker_model rerank_candidates -->
<!-- end generated -->

<!-- generated: files -->
<!-- end generated -->
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git checkout with two runs, a comparison of them and a PROVENANCE.md with blocks."""
    repo = tmp_path / "repo"
    demo = repo / "results" / "demo"
    demo.mkdir(parents=True)
    for name, extra in (("a", []), ("b", ["--no-use-bm25-turn"])):
        assert cli.main(["run", str(DATA), "--retriever", "bm25", "--no-rerank", "--no-progress",
                         *extra, "--output", str(demo / f"{name}.jsonl")]) == 0
    subprocess.run([str(Path(sys.executable).parent / "engram-eval"), "compare",
                    "results/demo/a.jsonl", "results/demo/b.jsonl", "--output",
                    "results/demo/cmp.json"], cwd=repo, check=True, capture_output=True)
    (repo / "PROVENANCE.md").write_text(DOC)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "publish")
    return repo


def _outside(text: str) -> list[str]:
    return [line for _, line in T.outside_blocks(text)]


def test_blocks_are_written_from_the_files_and_checked(repo: Path) -> None:
    assert cli.main(["catalog", "--write", "--root", str(repo)]) == 0  # rewrites the blocks
    text = (repo / "PROVENANCE.md").read_text()
    assert _outside(text) == _outside(DOC)  # what a person wrote is kept
    summary = json.loads((repo / "results/demo/a.jsonl.summary.json").read_text())
    r1 = summary["protocols"]["answerable"]["metrics"]["recall_any@1"]
    n = summary["protocols"]["answerable"]["n"]
    assert f"- `demo/a`: recall_any@1 {r1:.4f}, n {n} (run; `{DATA.name}`" in text
    cmp = json.loads((repo / "results/demo/cmp.json").read_text())
    row = cmp["groups"]["overall"]["metrics"]["recall_all@5"]
    assert f"recall_all@5 {row['a']:.4f} -> {row['b']:.4f} ({row['delta']:+.4f}" in text
    assert "A `a`, B `b`" in text
    assert "`reranker_model` `engram-ce-minilm-v4`, `rerank_candidates` `20`" in text
    # the runs' command as recorded (here the test process's argv: python -m pytest)
    assert re.search(r"- run · `[^`]+` · `[0-9a-f]{7}` \(2\): `demo/a`, `demo/b`", text)
    assert "- derived · `engram-eval compare` · " in text and "(1): `demo/cmp.json`" in text
    assert cli.main(["catalog", "--check", "--root", str(repo)]) == 0
    # a figure typed over by hand is stale, and --tables writes it back
    (repo / "PROVENANCE.md").write_text(text.replace(f"recall_any@1 {r1:.4f}", "recall_any@1 1"))
    assert cli.main(["catalog", "--check", "--root", str(repo)]) == 1
    src = table_sources(repo, C.load(repo / C.CATALOG))
    problems = T.stale((repo / "PROVENANCE.md").read_text(), src)
    assert len(problems) == 1 and "PROVENANCE.md:11: generated block 'fig demo/a" in problems[0]
    assert cli.main(["catalog", "--tables", "--root", str(repo)]) == 0
    assert (repo / "PROVENANCE.md").read_text() == text


def test_archiving_changes_generated_lines_only(repo: Path) -> None:
    assert cli.main(["catalog", "--write", "--root", str(repo)]) == 0
    before = (repo / "PROVENANCE.md").read_text()
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "catalogue")
    assert cli.main(["catalog", "--archive", "demo/a", "demo/cmp.json",
                     "--root", str(repo)]) == 0
    after = (repo / "PROVENANCE.md").read_text()
    assert _outside(after) == _outside(before) and after != before
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=7", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the archived run's figures are read back from git history, the same numbers
    fig = next(b for b in T.blocks(after) if b.spec.startswith("fig demo/a"))
    old = next(b for b in T.blocks(before) if b.spec.startswith("fig demo/a"))
    assert " ".join(fig.body).startswith(" ".join(old.body)[:-1].split(" (run;")[0])
    assert f"archived at `{head}`" in " ".join(fig.body)
    assert f"- at `{head}` (2): `demo/a`, `demo/cmp.json`" in after
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "archive")
    assert cli.main(["catalog", "--check", "--root", str(repo)]) == 0


def test_marker_errors_name_the_line() -> None:
    with pytest.raises(ConfigError, match=r"P.md:3: generated block 'files' is never closed"):
        T.blocks("a\nb\n<!-- generated: files -->\n", "P.md")
    with pytest.raises(ConfigError, match=r"P.md:2: a generated block opens inside"):
        T.blocks("<!-- generated: files -->\n<!-- generated: files -->\n", "P.md")
    with pytest.raises(ConfigError, match=r"P.md:1: .* without its marker"):
        T.blocks(f"{T.END}\n", "P.md")
    src = T.Sources(".", {"entries": [], "archive": []}, {})
    with pytest.raises(ConfigError, match=r"P.md:1: .*no catalogue entry 'demo/x'"):
        T.rewrite(f"<!-- generated: fig demo/x a:b -->\n{T.END}\n", src, "P.md")
    with pytest.raises(ConfigError, match="unknown kind 'table'"):
        T.render(src, "table x")


def test_values_are_read_by_path() -> None:
    doc = {"protocols": {"answerable": {"n": 3, "metrics": {"hit@1": 0.5}}},
           "chosen": "a0.8", "candidates": [{"name": "a0.7", "objective": 0.1},
                                            {"name": "a0.8", "objective": 0.2}],
           "shapes": {"chosen": "c0.1", "candidates": {"c0.1": {"auroc": 0.7}}}, "ci": [1, 2]}
    assert T._value(doc, "answerable:hit@1", "f") == 0.5
    assert T._value(doc, "answerable:n", "f") == 3
    assert T._value(doc, "candidates[name=@chosen].objective", "f") == 0.2
    assert T._value(doc, "candidates[name=a0.7].objective", "f") == 0.1
    assert T._value(doc, "shapes.candidates[@chosen].auroc", "f") == 0.7
    assert T._value(doc, "ci.1", "f") == 2
    with pytest.raises(ConfigError, match=r"f: no field 'answerable:mrr'"):
        T._value(doc, "answerable:mrr", "f")
    assert T.fmt(0.123456) == "0.1235" and T.fmt(True) == "true" and T.fmt(7) == "7"
    assert T.folded(["d/a.json", "d/a.png", "d/b", "d/c.frozen.json", "d/b.yaml", "d/f_a0.5",
                     "d/f_a0.6"]) == ["d/a.{json,png}", "d/b", "d/c.frozen.json", "d/b.yaml",
                                      "d/f_a0.5", "d/f_a0.6"]
