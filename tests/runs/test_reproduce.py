"""``engram-eval reproduce ID`` (issue 46): a catalogued result re-executed from a clean
worktree of its commit (or with today's code, ``--here``) and compared with the published
file; data found by its sha256; the recorded command read back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import ConfigError
from engram_eval.io import sha256_file
from engram_eval.runs.reproduce import (
    engram_args,
    find_data,
    json_differences,
    python_args,
    reproduce,
)

ROOT = Path(__file__).resolve().parents[2]
#: A published comparison whose inputs are published runs (no data needed).
DERIVED = "dense_encoder/compare_conv_v1_vs_bm25_only.json"


def _history() -> bool:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                          capture_output=True, text=True, check=False)
    return done.returncode == 0 and done.stdout.strip() == "false"


needs_history = pytest.mark.skipif(not _history(), reason="needs the repository's git history "
                                   "(a full clone)")


def test_the_recorded_command_is_read_back() -> None:
    assert engram_args(["engram-eval", "compare", "a", "b"]) == ["compare", "a", "b"]
    assert engram_args([".venv/bin/engram-eval", "run", "d"]) == ["run", "d"]
    assert engram_args(["python", "-m", "engram_eval.cli.main", "plot", "x"]) == ["plot", "x"]
    assert engram_args(["/wt/engram_eval/cli/main.py", "compare", "a"]) == ["compare", "a"]
    assert engram_args(["bash", "scripts/publish.sh"]) is None
    assert engram_args(None) is None


def test_a_recorded_python_command_is_read_back() -> None:
    """A script's command, its path in another checkout read as this repository's."""
    assert python_args(["python", "scripts/misses.py", "r.jsonl.gz", "--output", "m.md"]) == [
        "scripts/misses.py", "r.jsonl.gz", "--output", "m.md"]
    assert python_args(["/wt/main/engram_eval/analysis/encoder_choice.py", "--baseline", "b"]) \
        == ["engram_eval/analysis/encoder_choice.py", "--baseline", "b"]
    assert python_args([".venv/bin/python", "-m", "engram_eval.analysis.first_stage", "a"]) == \
        ["-m", "engram_eval.analysis.first_stage", "a"]
    assert python_args(["bash", "x.sh"]) is None and python_args(["/tmp/x.py"]) is None


def test_a_script_made_file_reproduces_by_its_catalogued_command() -> None:
    """A derived file a script made (its sidecar records no command; the catalogue names the
    script's): made again with today's code, byte for byte."""
    out = reproduce(ROOT, "longmemeval_s_dev/MISSES_hybrid_default.md", here=True)
    assert out.ok, out.lines
    assert "equals the published one" in out.lines[-1]


def test_json_differences_name_their_paths(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"generator": {"sha256": "1"}, "rows": [1, 2], "x": {"y": 3}}))
    b.write_text(json.dumps({"generator": {"sha256": "2"}, "rows": [1, 5], "x": {"z": 3}}))
    assert json_differences(a, b) == ["/generator/sha256", "/rows[1]", "/x/y", "/x/z"]
    a.write_text("not json")
    assert json_differences(a, b) is None


def test_data_is_found_by_its_hash(tmp_path: Path) -> None:
    data = ROOT / "fixtures" / "longmemeval_tiny.json"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "renamed.json").write_bytes(data.read_bytes())
    (tmp_path / "d" / "other.json").write_text("{}")
    assert find_data(sha256_file(data), data.name, [tmp_path / "d"]).name == "renamed.json"
    with pytest.raises(ConfigError, match="needs the data file 'x.json' .*none of the --data"):
        find_data("0" * 64, "x.json", [tmp_path / "d"])


def test_an_unknown_id_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="no catalogue entry"):
        reproduce(ROOT, "dense_encoder/nothing_like_it.json", here=True)


@needs_history
def test_a_published_comparison_reproduces_from_git_history(capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    """At its commit (a clean worktree, that commit's code) byte for byte; with today's code
    equal but for the recorded hash of the code that made it."""
    at_commit = reproduce(ROOT, DERIVED)
    assert at_commit.ok, at_commit.lines
    assert "equals the published one" in at_commit.lines[-1]
    here = reproduce(ROOT, DERIVED, here=True)
    assert here.ok, here.lines
    assert cli.main(["reproduce", DERIVED, "--here", "--root", str(ROOT)]) == 0
    assert "REPRODUCED" in capsys.readouterr().out
    worktrees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"],
                               capture_output=True, text=True, check=True).stdout
    assert "engram-reproduce-" not in worktrees  # the clean worktree is removed


def test_the_repository_catalogue_agrees_with_the_tree() -> None:
    """Every published file listed, every listed file present, hashes, commands, inputs,
    roles and sections as the tree records them (``engram-eval catalog --check``)."""
    from engram_eval.provenance import catalog as C

    problems = C.check(ROOT, C.load(ROOT / C.CATALOG))
    assert not problems, "\n".join(problems[:20])


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


def test_archived_entries_reproduce_from_git_history(tmp_path: Path) -> None:
    """Two entries, a run and a comparison of it, archived (their files removed from the tree,
    the catalogue naming the commit that holds them): the catalogue still checks, each is read
    back from git history by id and re-executed with today's code; a file changed before
    archiving is refused."""
    from engram_eval.provenance import catalog as C

    repo = tmp_path / "repo"
    demo = repo / "results" / "demo"
    demo.mkdir(parents=True)
    data = ROOT / "fixtures" / "longmemeval_tiny.json"
    for name, extra in (("a", []), ("b", ["--no-use-bm25-turn"])):
        assert cli.main(["run", str(data), "--retriever", "bm25", "--no-rerank", "--no-progress",
                         *extra, "--output", str(demo / f"{name}.jsonl")]) == 0
    (repo / "PROVENANCE.md").write_text("| [1](#s1) | `results/demo/` | demo | none |\n")
    _git(repo, "init", "-q")
    import sys

    # made as a maintainer makes it: the console script, in the checkout, results/ paths
    subprocess.run([str(Path(sys.executable).parent / "engram-eval"), "compare",
                    "results/demo/a.jsonl", "results/demo/b.jsonl", "--output",
                    "results/demo/cmp.json"], cwd=repo, check=True, capture_output=True)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "publish")
    assert cli.main(["catalog", "--write", "--root", str(repo)]) == 0
    with (demo / "b.jsonl").open("a") as f:
        f.write("\n")
    with pytest.raises(ConfigError, match="not committed as it is"):
        C.archive(repo, C.build(repo), ["demo/b"])
    _git(repo, "checkout", "--", "results/demo/b.jsonl")
    assert cli.main(["catalog", "--archive", "demo/a", "demo/cmp.json", "--root", str(repo)]) == 0
    assert not (demo / "a.jsonl").exists() and not (demo / "cmp.json").exists()
    assert not (demo / "a.jsonl.metadata.json").exists()
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "archive")
    cat = C.load(repo / C.CATALOG)
    assert [a["id"] for a in cat["archive"]] == ["demo/a", "demo/cmp.json"]
    assert C.check(repo, cat) == []
    run = reproduce(repo, "demo/a", data=[data.parent], here=True)
    assert run.ok, run.lines
    derived = reproduce(repo, "demo/cmp.json", here=True)
    assert derived.ok, derived.lines
    # a forged archive entry (another hash) is named by the check
    cat["archive"][0]["sha256"] = "0" * 64
    assert any("archived at" in p and "another sha256" in p for p in C.check(repo, cat))


@needs_history
@pytest.mark.data
def test_a_run_made_with_a_gold_overlay_reproduces_with_it(tmp_path: Path) -> None:
    """A run that recorded ``--gold-overlay`` verifies only with that file: reproduce finds it
    among the data by its recorded sha256 and passes it to verify (the corrected gold
    re-derived); without it under ``--data`` it is one clear error naming the file."""
    from real_data import require

    dataset = require("locomo/locomo10.json")
    audit = require("locomo/audit/locomo_audit_errors.json")
    out = reproduce(ROOT, "locomo_audited/bm25_only", data=[dataset, audit], here=True,
                    questions=1)
    assert out.ok, out.lines
    assert any(line.startswith("[ok] corrected gold re-derived") for line in out.lines)
    with pytest.raises(ConfigError, match="locomo_audit_errors.json"):
        reproduce(ROOT, "locomo_audited/bm25_only", data=[dataset], here=True, questions=1)


def test_an_input_file_outside_the_results_is_found_by_its_hash(tmp_path: Path) -> None:
    """A recorded command's input file (``compare --gold-overlay /elsewhere/audit.json``)
    absent here is found among the data by the sha256 the entry records for it."""
    from engram_eval.runs.reproduce import _data_arg

    audit = ROOT / "fixtures" / "locomo_tiny_audit.json"
    (tmp_path / "d").mkdir()
    copy = tmp_path / "d" / audit.name
    copy.write_bytes(audit.read_bytes())
    entry = {"inputs": {"files": [{"file": f"../../elsewhere/{audit.name}",
                                   "sha256": sha256_file(audit)}]}}
    assert _data_arg(f"/elsewhere/{audit.name}", tmp_path, entry, [tmp_path / "d"]) == \
        str(copy.resolve())
    assert _data_arg("--gold-overlay", tmp_path, entry, []) == "--gold-overlay"
    copy.write_text("[]")  # another file under the same name: not taken
    with pytest.raises(ConfigError, match=audit.name):
        _data_arg(f"/elsewhere/{audit.name}", tmp_path, entry, [tmp_path / "d"])


#: Two published comparisons the retention rule archived (issue 46 point 4), whose inputs are
#: archived runs too: no data needed to make them again.
ARCHIVED = ("lexical/compare_default_vs_first_stage.json",
            "systems_leak/compare_bm25s_real_vs_opaque.json")


@needs_history
def test_two_archived_entries_reproduce_from_git_history_by_id() -> None:
    """Out of the tree, with their input runs, each is re-executed by id from git history: one
    in a clean worktree of its commit (byte for byte), one with today's code, its inputs staged
    from the commit the archive names."""
    from engram_eval.provenance import catalog as C

    cat = C.load(ROOT / C.CATALOG)
    archived = {a["id"]: a for a in cat["archive"]}
    for entry_id in ARCHIVED:
        entry = archived[entry_id]
        assert not (ROOT / entry["path"]).exists()
        for inp in entry["inputs"]["files"]:
            assert not (ROOT / inp["file"]).exists()  # its runs left the tree too
    at_commit = reproduce(ROOT, ARCHIVED[0])
    assert at_commit.ok, at_commit.lines
    assert "equals the published one" in at_commit.lines[-1]
    here = reproduce(ROOT, ARCHIVED[1], here=True)
    assert here.ok, here.lines


def test_the_batch_defect_excuses_only_a_batched_run_of_the_int8_encoder() -> None:
    """A run that used the int8 people's encoder in batches (made before
    ``embedding_batch_isolated``: its sidecar lacks the field) may fail a re-execution for the
    known defect; an isolated run, or one with another encoder, never is excused."""
    from engram_eval.runs.reproduce import BATCH_DEPENDENT_ENCODER, batch_defect_applies

    used = {"models": [{"name": BATCH_DEPENDENT_ENCODER, "role": "embedding"}]}
    assert batch_defect_applies({**used, "config": {}})
    assert batch_defect_applies({**used, "config": {"embedding_batch_isolated": False}})
    assert not batch_defect_applies({**used, "config": {"embedding_batch_isolated": True}})
    assert not batch_defect_applies({"models": [{"name": "all-MiniLM-L6-v2"}], "config": {}})
