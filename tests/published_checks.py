"""Checks of a published results directory (tests/repository/test_published_results.py, over
the repository's results/).

A published run is any ``*.jsonl`` / ``*.jsonl.gz`` under the directory (discovered, never
listed by hand); every other file is a derived file that carries a ``<file>.metadata.json``
sidecar (sha256 of the file and of its inputs) or is exempt (documentation).
"""

from __future__ import annotations

import json
from pathlib import Path

from engram_eval.io import sha256_file
from engram_eval.provenance.catalog import SOURCES_AT as CATALOG_SOURCES_AT
from engram_eval.retrieval.systems import NOT_INSTALLED
from engram_eval.runs.rows import is_compressed, scan_rows
from engram_eval.runs.verify import FAIL, SOURCES_INSTALLED, verify

#: The installed-package source check, allowed to fail only when the commit that published a
#: run cannot be found (no git, a shallow clone, a file not yet committed): a later code change
#: legitimately makes the installed package differ from the recorded sources.
STALENESS = SOURCES_INSTALLED
#: Files in results/ that document rather than measure, and the held-out ledger (itself a
#: provenance record: every held-out run with its manifest and source fingerprints): no
#: sidecar.
EXEMPT_NAMES = ("PROVENANCE.md", "heldout_ledger.json", "catalog.yaml")


def is_exempt(p: Path) -> bool:
    return p.name in EXEMPT_NAMES or (p.name.upper().startswith("README") and p.suffix == ".md")


#: Context exports (``engram-eval export-context``) are JSON lines too, but derived files,
#: not runs: their sidecar names the run they were made from (checked as a derived file).
CONTEXT_SUFFIXES = (".context.jsonl", ".context.jsonl.gz")


def is_context_export(p: Path) -> bool:
    return p.is_file() and p.name.endswith(CONTEXT_SUFFIXES)


def is_result(p: Path) -> bool:
    return (p.is_file() and p.name.endswith((".jsonl", ".jsonl.gz"))
            and not is_context_export(p))


def discover_runs(results: Path) -> list[Path]:
    return sorted(p for p in results.rglob("*") if is_result(p)) if results.is_dir() else []


def run_companions(result: Path) -> tuple[Path, Path]:
    return Path(str(result) + ".metadata.json"), Path(str(result) + ".summary.json")


def check_run_files(result: Path) -> None:
    """Sidecar and summary beside the run; a ``.gz`` is really gzip and a plain one is not;
    a run is published once (not both plain and compressed)."""
    side, summ = run_companions(result)
    assert side.is_file(), f"{result} has no sidecar {side.name}"
    assert summ.is_file(), f"{result} has no summary {summ.name}"
    assert is_compressed(result) == result.name.endswith(".gz"), result
    twin = (Path(str(result).removesuffix(".gz")) if result.name.endswith(".gz")
            else Path(str(result) + ".gz"))
    assert not twin.exists(), f"{result.name} is published twice ({twin.name} too)"
    summary = json.loads(summ.read_text())
    assert summary["fingerprint"] == json.loads(side.read_text())["fingerprint"], result


#: Runs whose package sources are those of a commit before the one that added them: the
#: catalogue's record (engram_eval.provenance.catalog.SOURCES_AT), one copy.
SOURCES_AT = CATALOG_SOURCES_AT


def publishing_commit(path: Path) -> str | None:
    """The commit whose package sources a published run hashes: its entry in
    :data:`SOURCES_AT`, else the commit that (last) added ``path`` to git; ``None`` where that
    cannot be known: git missing, not a checkout, a shallow clone, or the file not committed
    yet."""
    import fnmatch
    import subprocess


    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(path.parent), *args], capture_output=True,
                                  text=True, check=False)
        except OSError:
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if git("rev-parse", "--is-shallow-repository") != "false":
        return None
    rel = "/".join(path.resolve().parts[-2:])
    for pattern, commit in SOURCES_AT.items():
        if fnmatch.fnmatch(rel, pattern):
            return commit
    return git("log", "--diff-filter=A", "--format=%H", "-1", "--", path.name) or None


#: ``verify --rerun`` on the data tier: this many questions of every published run are
#: re-ranked with the recorded settings and models, cache off, sampled with this seed
#: (PROVENANCE.md states both).
RERUN_QUESTIONS = 3
RERUN_SEED = 0
#: What ``verify`` adds to a failed re-execution of an int8-reranked run made on a CPU with
#: other vector instructions (``engram_eval.runs.verify._int8_cpu_note``).
CROSS_CPU_NOTE = "re-check on a CPU with the run's"


def check_verifies(result: Path, dataset: Path | None = None,
                   sources_at: str | None = None, rerun: int = 0,
                   gold_overlay: Path | None = None) -> None:
    """``verify`` finds no failure; with the dataset, the dataset hash and the gold were
    re-derived (every other check ran and passed). With ``sources_at`` (the publishing
    commit) the recorded sources must equal that commit's; without it, the installed-package
    source check may fail (staleness) and nothing else. ``rerun`` K > 0 (needs the dataset):
    K questions sampled with :data:`RERUN_SEED` are re-executed by today's code and must give
    the recorded rankings and scores; when that re-execution is the only failure and the run
    reranked with an int8 cross-encoder on a CPU with other vector instructions than this
    one's (``verify`` then says so), or the run's system from outside the package is not
    installed here (``pip install ./examples/systems/...``), the run cannot be judged here and
    is skipped with verify's words (every other check still had to pass). ``gold_overlay``:
    the overlay file of a run that recorded one (``run --gold-overlay``), which verify needs
    to re-derive the corrected gold."""
    import pytest

    report = verify(result, dataset, sources_at=sources_at, rerun=rerun,
                    rerun_seed=RERUN_SEED if rerun else None, gold_overlay=gold_overlay)
    failed = [(n, d) for n, status, d in report.checks
              if status == FAIL and (sources_at is not None or n != STALENESS)]
    if (rerun and len(failed) == 1 and failed[0][0].startswith("rerun ")
            and (CROSS_CPU_NOTE in failed[0][1] or NOT_INSTALLED in failed[0][1])):
        pytest.skip(f"{result.name}: {failed[0][1]}")  # another CPU, or the system absent
    assert not failed, failed
    if dataset is not None:
        assert not report.not_checked, report.format()


def check_scores_non_increasing(result: Path) -> None:
    """trec_eval, ranx and ir_measures re-sort by score: a published ranking whose scores go
    up somewhere would be silently re-ordered by them."""
    bad = []
    rows = scan_rows(result).rows
    assert rows, f"{result} holds no rows"
    for row in rows:
        scores = row["scores"]
        assert len(scores) == len(row["ranked_session_ids"]), row["question_id"]
        ups = [i for i in range(1, len(scores)) if scores[i] > scores[i - 1]]
        if ups:
            i = ups[0]
            bad.append(f"{row['question_id']}: rank {i + 1} scores {scores[i]!r} > rank {i} "
                       f"{scores[i - 1]!r}")
    assert not bad, f"{len(bad)} row(s), e.g. " + "; ".join(bad[:3])


def _external_input(path: Path, meta: dict, inp: dict) -> bool:
    """Inputs that are data, not publications: the source dataset itself (named by the
    sidecar's dataset sha256) and, for a split manifest, the parts it lists (re-created
    byte for byte by ``engram-eval split``; the data tier re-creates and hash-checks them)."""
    if inp["sha256"] == (meta.get("dataset") or {}).get("sha256"):
        return True
    if path.name.endswith("split_manifest.json"):  # e.g. locomo_split_manifest.json
        parts = json.loads(path.read_text())["parts"].values()
        return inp["sha256"] in {part["sha256"] for part in parts}
    return False


def check_every_file_carries_provenance(results: Path) -> list[Path]:
    """Every file is a run (with sidecar + summary), a run's sidecar/summary (with its run),
    an exempt document, or a derived file whose sidecar records its current sha256 and the
    current sha256 of every input. Returns the derived files."""
    derived = []
    for p in sorted(results.rglob("*")):
        if p.is_dir() or p.suffix == ".lock":  # a ledger's lock file (git-ignored, unpublished)
            continue
        if is_result(p):
            check_run_files(p)
            continue
        if p.name.endswith((".jsonl.summary.json", ".jsonl.gz.summary.json",
                            ".jsonl.metadata.json", ".jsonl.gz.metadata.json")) and not (
                is_context_export(Path(str(p).removesuffix(".metadata.json")))):
            run = Path(str(p).removesuffix(".summary.json").removesuffix(".metadata.json"))
            assert run.is_file(), f"{p} has no run {run.name} beside it"
            continue
        if p.name.endswith(".metadata.json"):
            owner = Path(str(p).removesuffix(".metadata.json"))
            assert owner.is_file(), f"{p} describes a file that is not there"
            continue
        if is_exempt(p):
            continue
        if p.name.endswith(".summary.json"):
            # a production run's summary: its output and that output's sidecar beside it
            out = Path(str(p).removesuffix(".summary.json"))
            out_side = Path(str(out) + ".metadata.json")
            assert out.is_file() and out_side.is_file(), f"{p} has no run beside it"
            assert json.loads(out_side.read_text()).get("output_sha256"), p
            continue
        side = Path(str(p) + ".metadata.json")
        assert side.is_file(), f"{p} has no sidecar and is not an exempt document"
        meta = json.loads(side.read_text())
        if "output_sha256" in meta:  # a production run's own sidecar (its output's sha256)
            assert meta["output_sha256"] == sha256_file(p), f"{p} changed after its run"
            continue
        assert meta["sha256"] == sha256_file(p), f"{p} changed after its sidecar was written"
        for inp in meta["inputs"]:
            src = p.parent / inp["file"]
            if not src.is_file() and _external_input(p, meta, inp):
                continue
            assert src.is_file(), f"{p}: input {inp['file']} is not published beside it"
            assert sha256_file(src) == inp["sha256"], (p, inp["file"])
        derived.append(p)
    return derived
