"""``engram-eval publish ID`` (issue 46 point 2) on a checkout made for the test: planned
entries made, verified, moved into results/ and catalogued; refusals before anything runs;
a failed verify leaves results/ as it was; a held-out run goes through the freeze; the
Makefile Make publishes them with, in the order of their inputs."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.io import sha256_file
from engram_eval.provenance import catalog as C
from engram_eval.provenance.makefile import MAKEFILE, makefile
from engram_eval.provenance.publish import publish

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "fixtures" / "longmemeval_tiny.json"


def _run(name: str, data: Path, *extra: str, role: str = "run") -> dict[str, Any]:
    return {"id": f"demo/{name}", "path": f"results/demo/{name}.jsonl.gz", "type": "run",
            "role": role,
            "command": ["engram-eval", "run", "{data}", "--retriever", "bm25", "--no-rerank",
                        "--no-progress", *extra, "--output", f"results/demo/{name}.jsonl"],
            "inputs": {"data": {"name": data.name, "sha256": sha256_file(data)}},
            "sections": ["1"]}


def _compare(a: str, b: str) -> list[dict[str, Any]]:
    cmd = ["engram-eval", "compare", f"results/demo/{a}.jsonl.gz", f"results/demo/{b}.jsonl.gz",
           "--output", "results/demo/cmp.json", "--plot", "results/demo/cmp.png"]
    return [{"id": f"demo/cmp.{s}", "path": f"results/demo/cmp.{s}", "type": "derived",
             "role": "derived", "command": cmd,
             "inputs": {"entries": [f"demo/{a}", f"demo/{b}"]}, "sections": ["1"]}
            for s in ("json", "png")]


def _checkout(tmp: Path, planned: list[dict[str, Any]]) -> Path:
    repo = tmp / "repo"
    (repo / "results").mkdir(parents=True)
    cat = {"kind": C.KIND, "version": C.VERSION, "entries": [], "archive": [],
           "planned": planned}
    (repo / C.CATALOG).write_text(C.dump(cat))
    return repo


def _tree(repo: Path) -> dict[str, str]:
    """Every file under results/ with its sha256."""
    return {p.relative_to(repo).as_posix(): sha256_file(p)
            for p in sorted((repo / "results").rglob("*")) if p.is_file()}


def test_new_entries_are_published_end_to_end(tmp_path: Path) -> None:
    """Two runs, then their comparison (.json and .png, one command): made at HEAD, each run
    verified and compressed, the files moved into results/ (mode 644), catalogued from their
    sidecars, out of planned; the comparison is refused until its runs are published."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(TINY, data / TINY.name)
    table = {"id": "demo/ABLATIONS.md", "path": "results/demo/ABLATIONS.md", "type": "derived",
             "role": "derived", "inputs": {"entries": ["demo/bm25", "demo/flat"]},
             "command": ["python", "scripts/ablation_table.py", "results/demo", "--label", "tiny",
                         "--output", "results/demo/ABLATIONS.md"]}
    repo = _checkout(tmp_path, [_run("bm25", TINY), _run("flat", TINY, "--no-use-bm25-turn"),
                                *_compare("bm25", "flat"), table])
    with pytest.raises(ConfigError, match="input entry 'demo/bm25' is not published yet"):
        publish(repo, ["demo/cmp.json"], data=[data])
    assert _tree(repo) == {"results/catalog.yaml": sha256_file(repo / C.CATALOG)}
    lines: list[str] = []
    out = publish(repo, ["demo/bm25", "demo/flat"], data=[data], echo=lines.append)
    assert out.ids == ("demo/bm25", "demo/flat")
    assert any("demo/bm25: verify" in x for x in lines)
    # the comparison with its figure: one command, both planned entries
    assert cli.main(["publish", "demo/cmp.png", "--root", str(repo), "--data", str(data)]) == 0
    # a script's table, which writes no sidecar: the derived sidecar is written for it
    publish(repo, ["demo/ABLATIONS.md"], echo=lines.append)
    assert any("demo/ABLATIONS.md: sidecars" in x for x in lines)
    demo = repo / "results" / "demo"
    assert sorted(p.name for p in demo.iterdir()) == sorted(
        [f"{n}.jsonl.gz{s}" for n in ("bm25", "flat") for s in ("", ".metadata.json",
                                                                ".summary.json")]
        + [f"cmp.{s}{m}" for s in ("json", "png") for m in ("", ".metadata.json")]
        + ["ABLATIONS.md", "ABLATIONS.md.metadata.json"])
    side = json.loads((demo / "ABLATIONS.md.metadata.json").read_text())
    assert sorted(i["file"] for i in side["inputs"]) == [
        "bm25.jsonl.gz.summary.json", "flat.jsonl.gz.summary.json"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in demo.iterdir())
    assert not list((repo / ".publish").iterdir())  # the scratch folder is gone
    cat = C.load(repo / C.CATALOG)
    assert cat["planned"] == []
    entries = {e["id"]: e for e in cat["entries"]}
    assert set(entries) == {"demo/bm25", "demo/flat", "demo/cmp.json", "demo/cmp.png",
                            "demo/ABLATIONS.md"}
    run = entries["demo/bm25"]
    assert run["type"] == "run" and run["inputs"]["data"]["sha256"] == sha256_file(TINY)
    assert run["command"][1:3] == ["run", str((data / TINY.name).resolve())]
    assert run["command"][-2:] == ["--output", "results/demo/bm25.jsonl"]  # the published path
    files = {f["file"] for f in entries["demo/cmp.json"]["inputs"]["files"]}
    assert files == {"results/demo/bm25.jsonl.gz", "results/demo/flat.jsonl.gz"}
    assert C.check(repo, cat) == []  # the catalogue agrees with the tree
    from engram_eval.runs.verify import verify

    assert verify(demo / "flat.jsonl.gz", data / TINY.name, rerun=2, rerun_seed=0).verified


def test_a_published_file_is_never_overwritten(tmp_path: Path) -> None:
    """A published id is refused by name; a planned entry whose file (or a companion) is
    already under results/ is refused before anything runs, the file untouched."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(TINY, data / TINY.name)
    repo = _checkout(tmp_path, [_run("bm25", TINY), _run("again", TINY)])
    publish(repo, ["demo/bm25"], data=[data], echo=lambda _: None)
    with pytest.raises(ConfigError, match="already published .*engram-eval reproduce demo/bm25"):
        publish(repo, ["demo/bm25"], data=[data])
    stray = repo / "results" / "demo" / "again.jsonl.gz.summary.json"
    stray.write_text("old")
    before = _tree(repo)
    with pytest.raises(ConfigError, match="refusing to publish.*again.jsonl.gz.summary.json"):
        publish(repo, ["demo/again"], data=[data])
    assert _tree(repo) == before and stray.read_text() == "old"
    assert not list((repo / ".publish").iterdir())


def test_a_failed_verify_leaves_results_untouched(tmp_path: Path) -> None:
    """A run whose rows change after it was written (the recipe's second command drops its
    last row) does not verify: nothing is moved, the catalogue is as it was, the scratch
    folder is removed."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(TINY, data / TINY.name)
    bad = _run("bad", TINY)
    drop = ("import pathlib; p = pathlib.Path('results/demo/bad.jsonl'); "
            "p.write_text(''.join(p.read_text().splitlines(True)[:-1]))")
    bad["command"] = [bad["command"], ["python", "-c", drop]]
    repo = _checkout(tmp_path, [bad])
    before = _tree(repo)
    with pytest.raises(ProvenanceError, match="demo/bad: verify failed .*nothing was published"):
        publish(repo, ["demo/bad"], data=[data], echo=lambda _: None)
    assert _tree(repo) == before
    assert not list((repo / ".publish").iterdir())


def test_a_run_on_a_gold_overlay_is_verified_with_it(tmp_path: Path) -> None:
    """A LoCoMo run made with ``--gold-overlay`` records the overlay by name and sha256;
    publish finds that file under the --data paths and gives it to ``verify``, which re-derives
    the audited figures with it (without it the run does not verify)."""
    locomo = ROOT / "fixtures" / "locomo_tiny.json"
    audit = ROOT / "fixtures" / "locomo_tiny_audit.json"
    data = tmp_path / "data"
    data.mkdir()
    for f in (locomo, audit):
        shutil.copy(f, data / f.name)
    run = _run("audited", locomo, "--gold-overlay", str(audit))
    repo = _checkout(tmp_path, [run])
    lines: list[str] = []
    publish(repo, ["demo/audited"], data=[data], echo=lines.append)
    assert (repo / "results" / "demo" / "audited.jsonl.gz").is_file()
    side = json.loads((repo / "results" / "demo" / "audited.jsonl.gz.metadata.json").read_text())
    assert side["selection"]["gold_overlay"]["sha256"] == sha256_file(audit)


def test_a_held_out_part_goes_through_the_freeze(tmp_path: Path) -> None:
    """A run planned as a held-out measurement on the held-out part of a split: its manifest
    frozen first (validate-only), the run made once under it, both published; the sidecar and
    the ledger name the published paths and the label."""
    parts = tmp_path / "parts"
    assert cli.main(["split", str(TINY), "--holdout", "0.5", "--salt", "s", "--output-dir",
                     str(parts)]) == 0
    heldout = next(p for p in parts.iterdir() if ".heldout." in p.name
                   and not p.name.endswith(".split.json"))
    repo = _checkout(tmp_path, [_run("heldout", heldout, role="held-out measurement")])
    lines: list[str] = []
    publish(repo, ["demo/heldout"], data=[parts], echo=lines.append)
    assert [x.split(": ")[1] for x in lines if x.startswith("== demo/")][:2] == ["freeze",
                                                                                 "make"]
    demo = repo / "results" / "demo"
    assert (demo / "heldout.frozen.json").is_file()
    meta = json.loads((demo / "heldout.jsonl.gz.metadata.json").read_text())
    assert meta["frozen_source"]["path"] == "results/demo/heldout.frozen.json"
    assert meta["frozen_source"]["label"] == "held-out measurement"
    ledger = json.loads((repo / "results" / "heldout_ledger.json").read_text())
    (entry,) = ledger["inputs"].values()
    assert [r["output"] for r in entry["runs"]] == ["results/demo/heldout.jsonl"]
    cat = C.load(repo / C.CATALOG)
    entries = {e["id"]: e for e in cat["entries"]}
    assert entries["demo/heldout"]["role"] == "held-out measurement"
    manifest = entries["demo/heldout.frozen.json"]  # its command: the freeze
    assert manifest["command"][-3:] == ["--validate-only", "--freeze-source",
                                        "results/demo/heldout.frozen.json"]
    assert "--output" not in manifest["command"]


def test_a_production_measurement_is_frozen_the_same_way() -> None:
    """The freeze of a held-out production measurement: its command without --output, with
    --validate-only --freeze-source NAME.frozen.json (beside NAME.json)."""
    from engram_eval.provenance.publish import _freezable, _freeze_args, frozen_path, outputs

    argv = ["engram-eval", "production", "measure", "p.json", "--source-root", ".",
            "--output", "results/c/heldout.json", "--dataset-label", "P"]
    entry = {"id": "c/heldout.json", "path": "results/c/heldout.json", "type": "derived",
             "role": "held-out measurement", "command": argv}
    assert _freezable(argv) and not _freezable(["engram-eval", "compare", "a", "b"])
    assert frozen_path(entry) == "results/c/heldout.frozen.json"
    assert "results/c/heldout.frozen.json" in outputs(entry)
    assert _freeze_args(argv, frozen_path(entry)) == [
        "engram-eval", "production", "measure", "p.json", "--source-root", ".",
        "--dataset-label", "P", "--validate-only", "--freeze-source",
        "results/c/heldout.frozen.json"]


def test_planned_entries_are_checked() -> None:
    cat = {"entries": [{"id": "a/x"}], "planned": [
        {"id": "a/x", "path": "results/a/x.jsonl.gz", "type": "run", "role": "run",
         "command": ["engram-eval", "run"]},
        {"id": "a/y", "path": "results/a/z.json", "type": "derived", "role": "derived",
         "command": ["engram-eval", "compare"], "inputs": {"entries": ["a/none"]}},
        {"id": "a/w", "path": "results/a/w.json", "type": "derived"},
        {"id": "a/v.json", "path": "results/a/v.json", "type": "derived", "role": "derived",
         "command": ["engram-eval", "plot"]},
        {"id": "a/v.json", "path": "results/a/v.json", "type": "derived", "role": "derived",
         "command": ["engram-eval", "plot"]}]}
    problems = C.check_planned(cat)
    assert any("planned[0] (a/x): already published" in p for p in problems)
    assert any("planned[1] (a/y): field id must be its path" in p for p in problems)
    assert any("input entry 'a/none' is neither catalogued nor planned" in p for p in problems)
    assert any("planned[2] (a/w): field(s) role, command missing" in p for p in problems)
    assert any("planned[4] (a/v.json): planned twice" in p for p in problems)


def test_the_makefile_orders_the_publications_by_their_inputs(tmp_path: Path) -> None:
    """The checkout's Makefile over the rules written from the catalogue: planned entries are
    targets with their inputs as order-only prerequisites and `engram-eval publish ID` as
    recipe (a comparison's two files one grouped target); Make publishes the runs before the
    comparison, then has nothing left to do; the rules are remade from the newer catalogue."""
    if shutil.which("make") is None:
        pytest.skip("GNU make not available")
    import sys

    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(TINY, data / TINY.name)
    repo = _checkout(tmp_path, [*_compare("a", "b"), _run("a", TINY), _run("b", TINY)])
    shutil.copy(ROOT / "Makefile", repo / "Makefile")
    assert cli.main(["catalog", "--makefile", "--root", str(repo)]) == 0
    text = (repo / MAKEFILE).read_text()
    assert text == makefile(C.load(repo / C.CATALOG))
    assert ("results/demo/cmp.json results/demo/cmp.png &: | results/demo/a.jsonl.gz "
            "results/demo/b.jsonl.gz\n\t$(PUBLISH) demo/cmp.json demo/cmp.png") in text

    def make(*args: str) -> list[str]:
        done = subprocess.run(["make", *args, f"DATA={data}",
                               f"ENGRAM_EVAL={Path(sys.executable).parent / 'engram-eval'}"],
                              cwd=repo, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return [" ".join(x.split(" publish ")[1].split()[2:]) for x in done.stdout.splitlines()
                if " publish " in x and "engram-eval" in x.split(" publish ")[0]]

    assert make("-n", "results/demo/cmp.png") == ["demo/a", "demo/b",
                                                  "demo/cmp.json demo/cmp.png"]
    assert make("planned") == ["demo/a", "demo/b", "demo/cmp.json demo/cmp.png"]
    cat = C.load(repo / C.CATALOG)
    assert cat["planned"] == [] and len(cat["entries"]) == 4
    assert make("-n", "planned") == []  # nothing left to make
    assert (repo / MAKEFILE).read_text() == makefile(cat)  # remade from the newer catalogue
    assert "demo/cmp.json &:" not in makefile(cat)
    assert make("-n", "results/demo/cmp.json") == []  # a published file: made once, kept


def test_the_repository_makefile_includes_the_catalogues_rules() -> None:
    """The checkout's Makefile includes the rules written from the catalogue and remakes them
    when the catalogue is newer; those rules show what each published file was made from (a
    published comparison's runs are its prerequisites) and make none of them again."""
    text = (ROOT / "Makefile").read_text()
    assert f"\n{MAKEFILE}: results/catalog.yaml\n\t$(ENGRAM_EVAL) catalog --makefile\n" in text
    assert f"\ninclude {MAKEFILE}\n" in text
    assert text.index("planned:") < text.index(f"{MAKEFILE}:")  # the default goal
    cat = C.load(ROOT / C.CATALOG)
    rules = makefile(cat)
    published = {e["path"] for e in cat["entries"]}
    cmp_line = next(x for x in rules.splitlines()
                    if x.startswith("results/dense_encoder/compare_conv_v1_vs_bm25_only.json:"))
    deps = cmp_line.split("|", 1)[1].split()
    assert deps and set(deps) <= published
    listed = rules.split("PUBLISHED =", 1)[1].split("$(PUBLISHED):")[0]
    assert set(listed.replace("\\", " ").split()) == published


def test_held_out_runs_on_one_part_are_frozen_together() -> None:
    """Two held-out runs planned on one part are one grouped target: one publish call, which
    freezes both manifests before either runs."""
    a = _run("h1", TINY, role="held-out measurement")
    b = _run("h2", TINY, "--no-use-bm25-turn", role="held-out measurement")
    text = makefile({"entries": [], "planned": [a, b]})
    assert ("results/demo/h1.jsonl.gz results/demo/h2.jsonl.gz results/demo/h1.frozen.json "
            "results/demo/h2.frozen.json &:\n\t$(PUBLISH) demo/h1 demo/h2") in text


def test_script_made_files_have_their_commands_in_the_catalogue() -> None:
    """A derived file a script made (its sidecar names no command) is catalogued with the
    command that made it: each names a script or module of this checkout and writes the file
    (or, a module writing into its folder, names the folder)."""
    from engram_eval.runs.reproduce import python_args

    entries = {e["id"]: e for e in C.load(ROOT / C.CATALOG)["entries"]}
    for rid, command in C.SCRIPT_COMMANDS.items():
        if rid not in entries:  # archived since: its command is kept with it
            continue
        assert entries[rid]["command"] == command, rid
        args = python_args(command)
        assert args is not None, rid
        target = (ROOT / args[0]) if args[0] != "-m" else \
            ROOT / (args[1].replace(".", "/") + ".py")
        assert target.is_file(), (rid, target)
        folder = f"results/{rid.split('/')[0]}/"
        assert any(a.startswith(folder) or a == folder.rstrip("/") for a in command), rid
