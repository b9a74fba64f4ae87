"""``scripts/_publish_lib.sh``: ``verify_all`` stops with a non-zero status at *any* failed
verify (not only the last one), tested with a fake ``engram-eval``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "scripts" / "_publish_lib.sh"

FAKE = """#!/bin/sh
# fake engram-eval: `verify FILE --dataset D` fails for files named bad*, logs every call
echo "$2" >> "$CALLS"
case "$(basename "$2")" in bad*) echo "[FAIL] something"; exit 1;; esac
echo VERIFIED
"""


def _fake_engram(tmp_path: Path, body: str) -> Path:
    """An executable stand-in for engram-eval (``body``: a sh script) in ``tmp_path``."""
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    fake = tmp_path / "engram-eval"
    fake.write_text(body)
    fake.chmod(0o755)
    return fake


def _run(tmp_path: Path, names: list[str], *args: str) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    for n in names:
        (out / n).write_text("{}\n")
    fake = _fake_engram(tmp_path, FAKE)
    script = (f'set -euo pipefail\nDATA=d.json CACHE=c OUT="{out}" BENCH=b.py\n'
              f'source "{LIB}"\nverify_all {" ".join(args)}\necho PUBLISHED\n')
    env = {**os.environ, "ENGRAM_EVAL": str(fake), "CALLS": str(tmp_path / "calls")}
    return subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=60)


def calls(tmp_path: Path) -> list[str]:
    p = tmp_path / "calls"
    return [Path(x).name for x in p.read_text().split()] if p.exists() else []


def test_all_good_results_verify(tmp_path: Path) -> None:
    p = _run(tmp_path, ["a.jsonl", "b.jsonl", "c.jsonl.gz"])
    assert p.returncode == 0, p.stderr
    assert "PUBLISHED" in p.stdout and "3 result(s) verified" in p.stdout
    assert calls(tmp_path) == ["a.jsonl", "b.jsonl", "c.jsonl.gz"]


def test_a_failed_verify_that_is_not_the_last_stops_the_publication(tmp_path: Path) -> None:
    p = _run(tmp_path, ["a.jsonl", "bad.jsonl", "c.jsonl"])
    assert p.returncode != 0
    assert "PUBLISHED" not in p.stdout
    assert "bad.jsonl did not verify" in p.stderr and "[FAIL] something" in p.stderr
    assert calls(tmp_path) == ["a.jsonl", "bad.jsonl"]  # stopped at the first failure


def test_explicit_result_list_and_empty_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = _run(tmp_path, ["a.jsonl", "bad.jsonl"], str(out / "a.jsonl"))
    assert p.returncode == 0 and calls(tmp_path) == ["a.jsonl"]
    empty = tmp_path / "e"
    empty.mkdir()
    q = _run(empty, [])
    assert q.returncode != 0 and "no result files" in q.stderr


# -- publish (run -> verify -> compress), overrides, refusal ----------------------------------
FAKE_FULL = """#!/bin/sh
# fake engram-eval: logs every call; `run ... --output F` creates F (+ sidecar, summary);
# `run ... --validate-only --freeze-source M` creates M (refused for manifests named refused*);
# `verify F` fails for files named bad*; `compress F` renames F (+ companions) to F.gz
echo "$*" >> "$CALLS"
cmd="$1"; shift
case "$cmd" in
  run) out=""; frz=""
       while [ "$#" -gt 0 ]; do
         case "$1" in --output) out="$2";; --freeze-source) frz="$2";; esac; shift
       done
       if [ -n "$frz" ]; then
         case "$(basename "$frz")" in refused*) echo "error: refused" >&2; exit 2;; esac
         echo '{}' > "$frz"; echo frozen; exit 0
       fi
       for s in "" .metadata.json .summary.json; do echo '{}' > "$out$s"; done; echo ran;;
  verify) case "$(basename "$1")" in bad*) echo "[FAIL] x"; exit 1;; esac; echo VERIFIED;;
  compress) for s in "" .metadata.json .summary.json; do mv "$1$s" "$1.gz$s"; done;;
  compare) while [ "$#" -gt 0 ]; do [ "$1" = --output ] && echo '{}' > "$2"; shift; done;;
  *) echo "unexpected $cmd" >&2; exit 9;;
esac
"""


def _publish(tmp_path: Path, body: str, **env: str) -> subprocess.CompletedProcess:
    fake = _fake_engram(tmp_path, FAKE_FULL)
    out = tmp_path / "out"
    script = (f'set -euo pipefail\nDATA=d.json CACHE=c OUT="{out}" FORMAT=longmemeval\n'
              f'source "{LIB}"\n{body}\necho PUBLISHED\n')
    full_env = {**os.environ, "ENGRAM_EVAL": str(fake), "CALLS": str(tmp_path / "calls"), **env}
    for k in ("PUBLISH_RETRIEVER", "PUBLISH_EXTRA_ARGS"):
        if k not in env:
            full_env.pop(k, None)
    return subprocess.run(["bash", "-c", script], cwd=tmp_path, env=full_env, text=True,
                          capture_output=True, timeout=60)


def all_calls(tmp_path: Path) -> list[str]:
    p = tmp_path / "calls"
    return p.read_text().splitlines() if p.exists() else []


def test_publish_runs_verifies_against_the_dataset_then_compresses(tmp_path: Path) -> None:
    p = _publish(tmp_path, 'refuse_existing $(run_files a)\npublish a --retriever bm25 --x')
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out"
    assert all_calls(tmp_path) == [
        f"run d.json --cache-dir c --no-progress --dataset-format longmemeval --output {out}/a.jsonl "
        "--retriever bm25 --x",
        f"verify {out}/a.jsonl --dataset d.json --rerun 3",
        f"compress {out}/a.jsonl"]
    assert sorted(x.name for x in out.iterdir()) == [
        "a.jsonl.gz", "a.jsonl.gz.metadata.json", "a.jsonl.gz.summary.json"]


def test_retriever_and_extra_args_overrides(tmp_path: Path) -> None:
    p = _publish(tmp_path, "publish a --retriever bm25 --temporal\npublish b",
                 PUBLISH_RETRIEVER="dummy", PUBLISH_EXTRA_ARGS="--limit 3")
    assert p.returncode == 0, p.stderr
    runs = [c.split(".jsonl ", 1)[1] for c in all_calls(tmp_path) if c.startswith("run ")]
    assert runs == ["--temporal --retriever dummy --limit 3", "--retriever dummy --limit 3"]


def test_a_failed_verify_stops_before_compress_and_later_runs(tmp_path: Path) -> None:
    p = _publish(tmp_path, "publish a\npublish bad\npublish c")
    assert p.returncode != 0 and "PUBLISHED" not in p.stdout
    assert "bad.jsonl did not verify" in p.stderr
    def short(call: str) -> str:  # "run a.jsonl", "verify a.jsonl", "compress a.jsonl"
        words = call.split()
        target = words[words.index("--output") + 1] if words[0] == "run" else words[1]
        return f"{words[0]} {Path(target).name}"

    assert [short(c) for c in all_calls(tmp_path)] == [
        "run a.jsonl", "verify a.jsonl", "compress a.jsonl", "run bad.jsonl", "verify bad.jsonl"]
    assert not (tmp_path / "out" / "bad.jsonl.gz").exists()


def test_refuse_existing_names_one_file_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.jsonl.gz.summary.json").write_text("{}")
    p = _publish(tmp_path, "refuse_existing $(run_files a) $(run_files b)\npublish a")
    assert p.returncode != 0 and "PUBLISHED" not in p.stdout
    assert all_calls(tmp_path) == []  # nothing ran
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to publish" in lines[0]
    assert "a.jsonl.gz.summary.json" in lines[0] and "move or delete" in lines[0]


# -- freeze_then_run: the held-out protocol of one configuration ------------------------------
def test_freeze_then_run_freezes_runs_once_verifies_and_compresses(tmp_path: Path) -> None:
    body = ("COMMON=(--cache-dir c --no-progress)\n"
            "freeze_then_run held.json h --retriever bm25 --x\n"
            "freeze_then_run held.json h --retriever bm25 --x  # done: nothing runs\n")
    p = _publish(tmp_path, body)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out"
    assert all_calls(tmp_path) == [
        f"run held.json --validate-only --freeze-source {out}/h.frozen.json --retriever bm25 --x",
        f"run held.json --frozen-source {out}/h.frozen.json --output {out}/h.jsonl "
        "--retriever bm25 --x --cache-dir c --no-progress",
        f"verify {out}/h.jsonl --dataset held.json --rerun 3 --rerun-seed 0",
        f"compress {out}/h.jsonl"]
    assert sorted(x.name for x in out.iterdir()) == [
        "h.frozen.json", "h.jsonl.gz", "h.jsonl.gz.metadata.json", "h.jsonl.gz.summary.json"]


def test_every_configuration_frozen_before_any_run(tmp_path: Path) -> None:
    """--freeze-only for each configuration first; the runs after find their manifests (an
    existing manifest is never frozen again: a stopped publication resumes)."""
    body = ("for n in a b; do freeze_then_run --freeze-only held.json $n --x; done\n"
            "for n in a b; do freeze_then_run held.json $n --x; done\n")
    p = _publish(tmp_path, body)
    assert p.returncode == 0, p.stderr

    def step(call: str) -> str:  # "freeze a.frozen.json", "run a.jsonl", "verify a.jsonl"
        w = call.split()
        if w[0] != "run":
            return f"{w[0]} {Path(w[1]).name}"
        freeze = "--validate-only" in w
        return ("freeze " if freeze else "run ") + Path(
            w[w.index("--freeze-source" if freeze else "--output") + 1]).name

    assert [step(c) for c in all_calls(tmp_path)] == [
        "freeze a.frozen.json", "freeze b.frozen.json",
        "run a.jsonl", "verify a.jsonl", "compress a.jsonl",
        "run b.jsonl", "verify b.jsonl", "compress b.jsonl"]
    assert f"--frozen-source {tmp_path}/out/b.frozen.json" in all_calls(tmp_path)[5]


def test_freeze_all_then_run_takes_each_part_and_arguments_from_the_callers_arrays(
        tmp_path: Path) -> None:
    """freeze_all_then_run PREFIX NAME...: the same order as the loop above, each run named
    PREFIX+NAME, on PART[NAME] with CFG[NAME] split into words."""
    body = ("declare -A PART CFG\n"
            "PART[a]=held.json; CFG[a]='--config c.yaml --no-rerank'\n"
            "PART[b]=other.json; CFG[b]='--retriever bm25'\n"
            "freeze_all_then_run pre_ a b\n")
    p = _publish(tmp_path, body)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out"
    calls = all_calls(tmp_path)
    assert calls[:2] == [
        f"run held.json --validate-only --freeze-source {out}/pre_a.frozen.json --config c.yaml "
        "--no-rerank",
        f"run other.json --validate-only --freeze-source {out}/pre_b.frozen.json --retriever bm25"]
    assert calls[2] == (f"run held.json --frozen-source {out}/pre_a.frozen.json --output "
                        f"{out}/pre_a.jsonl --config c.yaml --no-rerank")
    assert [c.split()[0] for c in calls[2:]] == ["run", "verify", "compress"] * 2
    assert calls[5].startswith(f"run other.json --frozen-source {out}/pre_b.frozen.json")


def test_compare_pairs_names_outputs_clusters_locomo_and_keeps_what_exists(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "cmp_kept.json").write_text("{}")
    body = ('compare_pairs held_ cmp_ "old/a.jsonl.gz lme_x lme_vs_a" '
            '"old/b.jsonl.gz locomo_y locomo_vs_b" "old/c.jsonl.gz lme_x kept"\n')
    p = _publish(tmp_path, body)
    assert p.returncode == 0, p.stderr
    assert all_calls(tmp_path) == [
        f"compare old/a.jsonl.gz {out}/held_lme_x.jsonl.gz --output {out}/cmp_lme_vs_a.json "
        f"--plot {out}/cmp_lme_vs_a.png",
        f"compare old/b.jsonl.gz {out}/held_locomo_y.jsonl.gz --cluster id-prefix --output "
        f"{out}/cmp_locomo_vs_b.json --plot {out}/cmp_locomo_vs_b.png"]


def test_freeze_then_run_takes_the_run_command_from_heldout_run(tmp_path: Path) -> None:
    p = _publish(tmp_path, 'HELDOUT_RUN=("$ENGRAM_EVAL" run --via-benchmark)\n'
                           "freeze_then_run held.json h --x")
    assert p.returncode == 0, p.stderr
    calls = all_calls(tmp_path)
    assert calls[0].startswith("run held.json --validate-only")  # the freeze: engram-eval
    assert calls[1].startswith("run --via-benchmark held.json --frozen-source")


@pytest.mark.parametrize("name,stops_after", [("refused", 1), ("bad", 3)])
def test_a_refused_freeze_or_failed_verify_stops_the_publication(
        tmp_path: Path, name: str, stops_after: int) -> None:
    p = _publish(tmp_path, f"freeze_then_run held.json {name}\nfreeze_then_run held.json c")
    assert p.returncode != 0 and "PUBLISHED" not in p.stdout
    calls = all_calls(tmp_path)
    assert len(calls) == stops_after and not any(c.startswith("compress") for c in calls)
    assert not (tmp_path / "out" / f"{name}.jsonl.gz").exists()


#: Publish scripts whose held-out runs are production fixture runs or confidence
#: measurements (benchmarks/production_retrieval/*.py: other options, no verify): they freeze
#: and run those tools themselves.
OWN_FREEZE = {"publish_production.sh", "publish_confidence.sh", "publish_confidence_v4.sh",
              "publish_confidence_v5.sh", "publish_confidence_v6.sh"}


ENGRAM_RUN_SCRIPTS = sorted(p for p in (ROOT / "scripts").glob("publish_*.sh")
                            if p.name not in OWN_FREEZE)


@pytest.mark.parametrize("script", ENGRAM_RUN_SCRIPTS, ids=lambda p: p.name)
def test_held_out_runs_go_through_freeze_then_run(script: Path) -> None:
    """No publish script of `engram-eval run` held-out runs hand-writes the freeze and the
    frozen run: they call freeze_then_run."""
    text = script.read_text()
    assert "--freeze-source" not in text and "--frozen-source" not in text, script.name


def test_the_nine_held_out_publications_use_freeze_then_run() -> None:
    users = sorted(p.name for p in ENGRAM_RUN_SCRIPTS
                   if re.search(r"freeze_(all_)?then_run ", p.read_text()))
    assert users == ["publish_lexical.sh", "publish_prior.sh", "publish_rerank.sh",
                     "publish_rerank_locomo.sh", "publish_rerank_unit.sh", "publish_shipped.sh",
                     "publish_structure.sh", "publish_topm.sh", "publish_tuning.sh"]


def test_freeze_then_run_with_the_real_engram_eval(tmp_path: Path, monkeypatch) -> None:
    """On a real held-out part (a split of the tiny fixture): frozen, then the one run is a
    held-out measurement in the ledger, verified and compressed; a second call does nothing."""
    import json

    exe = Path(sys.executable).parent / "engram-eval"
    if shutil.which("bash") is None or not exe.is_file():
        pytest.skip("bash or the engram-eval entry point is not available")
    monkeypatch.setenv("ENGRAM_EVAL_LEDGER", str(tmp_path / "ledger.json"))
    split = tmp_path / "split"
    from engram_eval.data.split import split_dataset

    held = split_dataset(ROOT / "fixtures" / "longmemeval_tiny.json", holdout=0.5, salt="lib",
                         output_dir=split, compress="none").part_paths["heldout"]
    out = tmp_path / "out"
    script = (f'set -euo pipefail\nOUT="{out}"\nsource "{LIB}"\nCOMMON=(--no-progress)\n'
              f'freeze_then_run "{held}" heldout_x --retriever dummy\n'
              f'freeze_then_run "{held}" heldout_x --retriever dummy\necho PUBLISHED\n')
    env = {**os.environ, "ENGRAM_EVAL": str(exe), "PUBLISH_PYTHON": sys.executable}
    p = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, text=True,
                       capture_output=True, timeout=300)
    assert p.returncode == 0 and "PUBLISHED" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    result = out / "heldout_x.jsonl.gz"
    summ = json.loads(Path(str(result) + ".summary.json").read_text())
    assert summ["frozen_source"]["label"] == "held-out measurement"
    assert not (out / "heldout_x.jsonl").exists()
    ledger = json.loads((tmp_path / "ledger.json").read_text())
    assert len(next(iter(ledger["inputs"].values()))["runs"]) == 1  # run once


@pytest.mark.parametrize("script,existing", [
    ("publish_longmemeval_dev.sh", "hybrid_temporal_flip.jsonl.gz"),
    ("publish_longmemeval_dev.sh", "ABLATIONS.md"),
    ("publish_longmemeval_dev.sh", "curves_hybrid_default.png.metadata.json"),
    ("publish_locomo.sh", "flat_bm25.jsonl"),
    ("publish_locomo.sh", "compare_hybrid_default_vs_bm25_only.png"),
])
def test_publish_scripts_refuse_an_outdir_holding_their_files(tmp_path: Path, script: str,
                                                              existing: str) -> None:
    fake = _fake_engram(tmp_path, FAKE_FULL)
    out = tmp_path / "out"
    out.mkdir()
    (out / existing).write_text("old")
    env = {**os.environ, "ENGRAM_EVAL": str(fake), "CALLS": str(tmp_path / "calls"),
           "PUBLISH_PYTHON": "false"}  # nothing may run, not even python
    p = subprocess.run(["bash", str(ROOT / "scripts" / script), "d.json", "c", str(out)],
                       cwd=tmp_path, env=env, text=True, capture_output=True, timeout=60)
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and "refusing to publish" in p.stderr, p.stderr
    assert existing in p.stderr
    assert all_calls(tmp_path) == [] and (out / existing).read_text() == "old"
    q = subprocess.run(["bash", str(ROOT / "scripts" / script), "d.json"], cwd=tmp_path,
                       env=env, text=True, capture_output=True, timeout=60)
    assert q.returncode == 2 and "usage" in q.stderr


# -- end to end on the tiny fixtures (real engram-eval, lexical retriever) ---------------------
@pytest.fixture(scope="module")
def tiny_publications(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both publish scripts run on the tiny fixtures with every run's retriever replaced by
    flat-bm25 (no model is loaded), so everything but the ranking itself is the real thing:
    runs, verify --dataset, compress, tables, analyze, plot, compare, sidecars."""
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    exe = Path(sys.executable).parent / "engram-eval"
    if not exe.is_file():
        pytest.skip("engram-eval entry point not installed beside the interpreter")
    pytest.importorskip("matplotlib")
    base = tmp_path_factory.mktemp("publish")
    env = {**os.environ, "ENGRAM_EVAL": str(exe), "PUBLISH_PYTHON": sys.executable,
           "PUBLISH_RETRIEVER": "flat-bm25", "PUBLISH_SKIP_DENSE_PIECES": "1",
           "PUBLISH_EXTRA_ARGS": ""}
    env.pop("TEMPORAL_FLIP_ARGS", None)
    outs = {}
    for script, data in (("publish_longmemeval_dev.sh", "longmemeval_tiny.json"),
                         ("publish_locomo.sh", "locomo_tiny.json")):
        out = base / script.removesuffix(".sh")
        p = subprocess.run(["bash", str(ROOT / "scripts" / script),
                            str(ROOT / "fixtures" / data), str(base / "cache"), str(out)],
                           cwd=base, env=env, text=True, capture_output=True, timeout=600)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        outs[script] = out
    return outs


LME_RUNS = ["bm25_only", "dense_only", "flat_bm25", "hybrid_default", "hybrid_rrf_landed",
            "hybrid_temporal_flip"]
LOCOMO_RUNS = ["bm25_only", "dense_only", "flat_bm25", "hybrid_default", "hybrid_temporal_flip"]


@pytest.mark.slow
@pytest.mark.parametrize("script,data,runs,derived", [
    ("publish_longmemeval_dev.sh", "longmemeval_tiny.json", LME_RUNS,
     ["ABLATIONS.md", "MISSES_hybrid_default.md", "analyze_hybrid_default.json",
      "curves_hybrid_default.png"]),
    ("publish_locomo.sh", "locomo_tiny.json", LOCOMO_RUNS,
     ["ABLATIONS.md", "analyze_hybrid_default.json", "compare_hybrid_default_vs_bm25_only.json",
      "compare_hybrid_default_vs_bm25_only.png", "curves_hybrid_default.png"]),
])
def test_publication_on_tiny_fixtures_passes_the_published_results_checks(
        tiny_publications: dict[str, Path], script: str, data: str, runs: list[str],
        derived: list[str]) -> None:
    from published_checks import (
        check_every_file_carries_provenance,
        check_scores_non_increasing,
        check_verifies,
        discover_runs,
    )

    out = tiny_publications[script]
    results = discover_runs(out)
    assert [r.name for r in results] == [f"{n}.jsonl.gz" for n in runs]  # only compressed
    for r in results:
        check_verifies(r, ROOT / "fixtures" / data)
        check_scores_non_increasing(r)
    assert sorted(p.name for p in check_every_file_carries_provenance(out)) == sorted(derived)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{n}.jsonl.gz{s}" for n in runs for s in ("", ".metadata.json", ".summary.json")]
        + [f"{d}{s}" for d in derived for s in ("", ".metadata.json")])


@pytest.mark.slow
def test_ablation_table_shows_denominators_dataset_and_flip(
        tiny_publications: dict[str, Path]) -> None:
    import json

    from engram_eval.io import sha256_file

    lme = (tiny_publications["publish_longmemeval_dev.sh"] / "ABLATIONS.md").read_text()
    assert "development split" in lme
    assert sha256_file(ROOT / "fixtures" / "longmemeval_tiny.json") in lme
    for proto in ("answerable", "official", "official_nonempty_gold", "all"):
        s = json.loads((tiny_publications["publish_longmemeval_dev.sh"]
                        / "hybrid_default.jsonl.gz.summary.json").read_text())["protocols"][proto]
        assert f"## protocol `{proto}`: n = {s['n']}" in lme
        assert f"Denominator: {s['denominator']}." in lme
    # the flip is the package default's temporal step reversed
    from engram_eval.runs.config import RunConfig

    assert f"`temporal={json.dumps(not RunConfig().temporal)}`" in lme
    loc = (tiny_publications["publish_locomo.sh"] / "ABLATIONS.md").read_text()
    assert "## protocol `locomo`: n = " in loc and "LoCoMo10" in loc
    assert sha256_file(ROOT / "fixtures" / "locomo_tiny.json") in loc


@pytest.mark.slow
def test_a_second_publication_into_the_same_outdir_is_refused(
        tiny_publications: dict[str, Path]) -> None:
    out = tiny_publications["publish_locomo.sh"]
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    p = subprocess.run(["bash", str(ROOT / "scripts" / "publish_locomo.sh"),
                        str(ROOT / "fixtures" / "locomo_tiny.json"), str(out.parent / "cache"),
                        str(out)], env={**os.environ, "PUBLISH_RETRIEVER": "flat-bm25"},
                       text=True, capture_output=True, timeout=60)
    assert p.returncode == 1 and "refusing to publish" in p.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


# -- every publish script: one preamble, one refusal -----------------------------------------
PUBLISH_SCRIPTS = sorted((ROOT / "scripts").glob("publish_*.sh"))


@pytest.mark.parametrize("script", PUBLISH_SCRIPTS, ids=lambda p: p.name)
def test_every_publish_script_takes_its_preamble_from_the_lib(script: Path) -> None:
    """The engram-eval command and Python come from scripts/_publish_lib.sh (ENGRAM_EVAL/E,
    PUBLISH_PYTHON/PY) and the refuse-existing check is its refuse_existing: no script sets
    them itself or hand-writes the loop."""
    import re

    text = script.read_text()
    assert re.search(r'^source "?(\$\(dirname "\$0"\)|scripts)/_publish_lib\.sh"?', text, re.M)
    assert not re.search(r"^\s*(E|PY|ENGRAM_EVAL|PUBLISH_PYTHON)=", text, re.M), script.name
    assert "move the old publication away" not in text


def _script(tmp_path: Path, name: str, args: list[str], cwd: Path | None = None,
            python: str = "false") -> subprocess.CompletedProcess:
    """Run a publish script with the fake engram-eval; PUBLISH_PYTHON ``false`` by default, so
    that nothing at all may run."""
    fake = _fake_engram(tmp_path, FAKE_FULL)
    env = {**os.environ, "ENGRAM_EVAL": str(fake), "CALLS": str(tmp_path / "calls"),
           "PUBLISH_PYTHON": python}
    return subprocess.run(["bash", str(ROOT / "scripts" / name), *args], cwd=cwd or tmp_path,
                          env=env, text=True, capture_output=True, timeout=60)


# script, its arguments (OUT and SCRATCH under tmp), a file it refuses to overwrite
REFUSING = [
    ("publish_tuning.sh", ["d.json", "c", "{out}", "{scratch}"], "tuned.yaml"),
    ("publish_structure.sh", ["l.json", "lo.json", "c", "{out}", "{scratch}"],
     "locomo_tuning_run.jsonl.gz"),
    ("publish_rerank.sh", ["d.json", "c", "{out}", "{scratch}"], "heldout_rerank.frozen.json"),
    ("publish_rerank_unit.sh", ["d.json", "c", "{out}", "{scratch}"], "rerank_unit_choice.json"),
]


@pytest.mark.parametrize("script,args,existing", REFUSING, ids=[r[0] for r in REFUSING])
def test_publish_scripts_refuse_before_anything_runs(tmp_path: Path, script: str,
                                                     args: list[str], existing: str) -> None:
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    out.mkdir()
    (out / existing).write_text("old")
    argv = [a.format(out=out, scratch=scratch) for a in args]
    p = _script(tmp_path, script, argv, cwd=ROOT)  # run from the root, as they are
    assert p.returncode == 1, p.stderr
    assert "refusing to publish" in p.stderr and existing in p.stderr
    assert all_calls(tmp_path) == [] and (out / existing).read_text() == "old"
    # with nothing in the way the script goes on, and calls the ENGRAM_EVAL the lib set
    (out / existing).unlink()
    q = _script(tmp_path, script, argv, cwd=ROOT, python=sys.executable)
    assert "refusing to publish" not in q.stderr
    assert all_calls(tmp_path) and all_calls(tmp_path)[0].split()[0] == "split", q.stderr


def test_publish_memo_refuses_the_published_files(tmp_path: Path) -> None:
    """Run from a checkout whose results/ hold the memo publication (the repository's, read
    back from git history where the retention rule archived it): refused with nothing run
    and nothing created (the check names companions too)."""
    from published_files import published_bytes

    checkout = tmp_path / "checkout"
    for rel in ("results/longmemeval_s_dev/memo_lexical.jsonl.gz",
                "results/locomo10/memo_lexical.jsonl.gz"):
        for name in (rel, rel + ".metadata.json", rel + ".summary.json"):
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            (checkout / name).write_bytes(published_bytes(name))
    before = sorted(p.name for p in (checkout / "results" / "longmemeval_s_dev").iterdir())
    p = _script(tmp_path, "publish_memo.sh", ["l.json", "lo.json", "c", str(tmp_path / "s")],
                cwd=checkout)
    assert p.returncode == 1 and "refusing to publish" in p.stderr, p.stderr
    assert "memo_lexical" in p.stderr and all_calls(tmp_path) == []
    assert sorted(p.name for p in (checkout / "results" / "longmemeval_s_dev").iterdir()) == before


def test_production_measurements_are_all_frozen_before_any_runs(tmp_path: Path) -> None:
    """production_freeze_all_then_measure: every manifest frozen (with the gate options) before
    the first measurement; then each measured once under its own manifest, a fixture run with
    its own work directory, a `measure` part with its label."""
    body = ('declare -A WHAT LABEL\nSCRATCH=s\nWHAT[a]="measure part.json --run r.jsonl.gz"\n'
            'LABEL[a]="Part A"\nWHAT[b]="run --fixture f.json"\nGATE=(--cutoff calibrated)\n'
            'production_freeze_all_then_measure a b')
    fake = _fake_engram(tmp_path, '#!/bin/sh\necho "$*" >> "$CALLS"\n')
    out = tmp_path / "out"
    script = f'set -euo pipefail\nOUT="{out}"\nsource "{LIB}"\n{body}\necho PUBLISHED\n'
    env = {**os.environ, "ENGRAM_EVAL": str(fake), "CALLS": str(tmp_path / "calls")}
    p = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, text=True,
                       capture_output=True, timeout=60)
    assert p.returncode == 0 and "PUBLISHED" in p.stdout, p.stderr
    calls = all_calls(tmp_path)
    assert len(calls) == 4
    assert all("--validate-only" in c and "--cutoff calibrated" in c for c in calls[:2])
    assert calls[0].startswith("production measure part.json") and "a.frozen.json" in calls[0]
    assert calls[1].startswith("production run --fixture f.json")
    assert f"--frozen-source {out}/a.frozen.json" in calls[2] and "--dataset-label Part A" in calls[2]
    assert f"--output {out}/a.json" in calls[2] and "--work-dir" not in calls[2]
    assert f"--frozen-source {out}/b.frozen.json" in calls[3] and "--work-dir s/work_b" in calls[3]
    assert "--cutoff calibrated" in calls[3]
