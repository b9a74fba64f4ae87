"""Every published run in results/ (discovered: every ``*.jsonl`` / ``*.jsonl.gz``, plain
or compressed by ``engram-eval compress``) has its sidecar and summary, is listed in
the catalogue (``results/catalog.yaml``, whose folders each have their PROVENANCE.md section),
passes ``verify`` (metrics recomputed from rows, fingerprint, schema, row
set, summary) and publishes rankings whose scores never increase; every other file in
results/ carries a provenance sidecar or is an exempt document (PROVENANCE.md, README*.md).

Recorded source hashes are checked against the commit that added each run to git (``verify
--sources-at``), so a later code change cannot hide a run whose recorded sources match no
commit; where that commit cannot be known (no git, a shallow clone, not yet committed) the
installed-package source check is allowed to be stale. With the real data present, the
opt-in tier (``pytest -m data``) also re-hashes the dataset, re-derives gold from it and
re-executes ``RERUN_QUESTIONS`` seeded-sampled questions of every run (``verify --rerun``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from published_checks import (
    RERUN_QUESTIONS,
    check_every_file_carries_provenance,
    check_run_files,
    check_scores_non_increasing,
    check_verifies,
    discover_runs,
    publishing_commit,
)
from real_data import data_dir

from engram_eval.io import sha256_file
from engram_eval.runs.reproduce import BATCH_DEPENDENT_ENCODER, batch_defect_applies

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "results"
RESULTS = discover_runs(RESULTS_DIR)


def _catalogued() -> dict[str, list[str]]:
    """``results/``-relative path -> the PROVENANCE.md sections of its catalogue entry: the
    catalogue is what lists every published file (PROVENANCE.md's tables are generated from
    it, and each folder has its section there)."""
    from engram_eval.provenance import catalog as C

    cat = C.load(ROOT / C.CATALOG)
    return {e["path"]: list(e.get("sections") or []) for e in cat["entries"]}


def test_results_directory_holds_published_runs() -> None:
    assert RESULTS, "results/ holds no published run (*.jsonl or *.jsonl.gz)"


@pytest.mark.parametrize("result", RESULTS, ids=lambda p: p.relative_to(RESULTS_DIR).as_posix())
def test_published_run_has_sidecar_and_is_documented(result: Path) -> None:
    check_run_files(result)
    rel = result.relative_to(ROOT).as_posix()
    listed = _catalogued()
    assert rel in listed, f"{rel} is not listed in results/catalog.yaml"
    assert listed[rel], f"{rel}: its folder has no section in PROVENANCE.md's contents table"


@pytest.mark.parametrize("result", RESULTS, ids=lambda p: p.relative_to(RESULTS_DIR).as_posix())
def test_published_run_verifies(result: Path) -> None:
    check_verifies(result, sources_at=publishing_commit(result))


@pytest.fixture(scope="session")
def split_parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tuning/held-out parts of every published split, re-created with ``engram-eval
    split`` from the source data and the manifest's salt and fraction; each part's sha256
    must equal the published manifest's (the split is deterministic)."""
    from engram_eval.data.split import split_dataset

    parts: dict[str, Path] = {}
    for manifest in sorted(RESULTS_DIR.rglob("*split_manifest.json")):
        m = json.loads(manifest.read_text())
        hits = sorted(data_dir().rglob(m["source"]["name"])) if data_dir().is_dir() else []
        if not hits:
            continue
        out = tmp_path_factory.mktemp("split")
        split_dataset(hits[0], holdout=m["holdout"], salt=m["salt"], output_dir=out)
        for part in m["parts"].values():
            path = out / part["file"]
            assert sha256_file(path) == part["sha256"], f"{manifest}: {part['file']} differs"
            parts[part["file"]] = path
    return parts


def _dataset_of(result: Path, split_parts: dict[str, Path]) -> Path:
    """The file a published run was made on: a re-created split part or a file under the
    data directory (skip when absent)."""
    name = json.loads(Path(str(result) + ".metadata.json").read_text())["dataset"]["name"]
    if name in split_parts:
        return split_parts[name]
    hits = sorted(data_dir().rglob(name)) if data_dir().is_dir() else []
    if not hits:
        pytest.skip(f"dataset {name} not available under {data_dir()}")
    return hits[0]


def _overlay_of(result: Path) -> Path | None:
    """The gold overlay a published run recorded (``selection.gold_overlay``), found by name
    under the data directory with the recorded sha256 (skip when absent); None for a run
    without one."""
    from engram_eval.io import sha256_file

    meta = json.loads(Path(str(result) + ".metadata.json").read_text())
    recorded = meta["selection"].get("gold_overlay")
    if recorded is None:
        return None
    hits = [p for p in (sorted(data_dir().rglob(recorded["name"])) if data_dir().is_dir()
                        else []) if sha256_file(p) == recorded["sha256"]]
    if not hits:
        pytest.skip(f"gold overlay {recorded['name']} not available under {data_dir()}")
    return hits[0]


@pytest.mark.data
@pytest.mark.parametrize("result", RESULTS, ids=lambda p: p.relative_to(RESULTS_DIR).as_posix())
def test_published_run_verifies_against_the_dataset(result: Path,
                                                    split_parts: dict[str, Path]) -> None:
    check_verifies(result, _dataset_of(result, split_parts), publishing_commit(result),
                   gold_overlay=_overlay_of(result))


@pytest.mark.data
@pytest.mark.parametrize("result", RESULTS, ids=lambda p: p.relative_to(RESULTS_DIR).as_posix())
def test_published_run_reexecutes(result: Path, split_parts: dict[str, Path]) -> None:
    """``verify --rerun``: RERUN_QUESTIONS seeded questions re-ranked by today's code give the
    recorded rankings and scores. A run whose recorded cross-encoder is not on this machine,
    or is there with other file hashes (one trained by a publication: weights are never
    committed, and retraining on another machine may differ in float noise, PROVENANCE.md
    section 6), is skipped, naming the path and how to re-create it."""
    from engram_eval.io import sha256_file

    dataset = _dataset_of(result, split_parts)
    meta = json.loads(Path(str(result) + ".metadata.json").read_text())
    cfg = meta["config"]
    model = Path(cfg.get("reranker_model") or "")
    if cfg.get("rerank") and model.is_absolute():
        how = ("re-create it with the train-reranker command of the publication named in "
               "PROVENANCE.md")
        if not model.exists():
            pytest.skip(f"the run's cross-encoder {model} is not on this machine ({how})")
        recorded = next((m["files_sha256"] for m in meta["models"]
                         if m["role"] == "reranker"), {})
        differ = sorted(f for f, h in recorded.items()
                        if f != "README.md" and (not (model / f).is_file()
                                                 or sha256_file(model / f) != h))
        if differ:
            pytest.skip(f"the cross-encoder at {model} is not the run's ({differ} differ "
                        f"from the recorded hashes; {how})")
    archived = _archived_model_of(result)
    if archived is not None:  # its model left the tree: re-executed at its commit, which holds it
        from engram_eval.runs.reproduce import reproduce

        entry_id = result.relative_to(RESULTS_DIR).as_posix().removesuffix(".gz")
        out = reproduce(ROOT, entry_id.removesuffix(".jsonl"), data=[dataset],
                        questions=RERUN_QUESTIONS)
        assert out.ok, "\n".join(out.lines)
        return
    try:
        check_verifies(result, dataset, publishing_commit(result), RERUN_QUESTIONS,
                       gold_overlay=_overlay_of(result))
    except AssertionError:
        if batch_defect_applies(meta):
            pytest.xfail(f"known defect (PROVENANCE.md section 22, 'Known defect'): "
                         f"{BATCH_DEPENDENT_ENCODER}'s int8 vectors depend on their batch, so "
                         "a re-execution can swap sessions deep in a ranking")
        raise


def _archived_model_of(result: Path) -> str | None:
    """The archived shipped model a published run recorded (issue 46's retention rule), or
    None."""
    from engram_eval.retrieval.models import archived_model

    meta = json.loads(Path(str(result) + ".metadata.json").read_text())
    names = [str(m.get("name") or "") for m in meta["models"]]
    return next((n for n in names if n and "/" not in n and archived_model(n)), None)


@pytest.mark.parametrize("result", RESULTS, ids=lambda p: p.relative_to(RESULTS_DIR).as_posix())
def test_published_scores_never_increase_down_a_ranking(result: Path) -> None:
    check_scores_non_increasing(result)


def test_every_file_in_results_carries_provenance() -> None:
    """Runs have sidecar + summary; every derived file (tables, analyses, figures) has a
    ``<file>.metadata.json`` whose recorded sha256 matches the file and whose inputs match,
    and is listed in the catalogue under a folder that has its PROVENANCE.md section;
    documents (PROVENANCE.md, README*.md) are exempt."""
    derived = check_every_file_carries_provenance(RESULTS_DIR)
    listed = _catalogued()
    undocumented = [p.relative_to(ROOT).as_posix() for p in derived
                    if not listed.get(p.relative_to(ROOT).as_posix())]
    assert not undocumented, f"not catalogued with a PROVENANCE.md section: {undocumented}"


# --------------------------------------------------------------------------- context exports
CONTEXTS = sorted(p for p in RESULTS_DIR.rglob("*") if p.name.endswith(
    (".context.jsonl", ".context.jsonl.gz")))


@pytest.mark.parametrize("export", CONTEXTS, ids=lambda p: p.relative_to(RESULTS_DIR).as_posix())
def test_published_context_export_names_its_run_and_sources(export: Path) -> None:
    """A published context export (``engram-eval export-context``): its sidecar's fingerprint
    and rows hash hold (read_context), the run it names is the published one (fingerprint
    and rows hash), and its recorded sources are those of the commit that added it."""
    from engram_eval.provenance.sidecar import git_source_hashes
    from engram_eval.qa.context import read_context
    from engram_eval.runs.reader import read_run

    rows, meta, _ = read_context(export)
    run = read_run(export.parent / meta["run"]["path"], require_sidecar=True)
    assert meta["run"]["fingerprint"] == run.fingerprint
    assert meta["run"]["rows_sha256"] == run.rows_sha256
    assert [r["question_id"] for r in rows] == [r["question_id"] for r in run.rows]
    assert all(len(r["retrieved_session_ids"]) == meta["top_k"] for r in rows)
    commit = publishing_commit(export)
    if commit is not None:
        _, at = git_source_hashes(list(meta["sources"]), commit)
        assert at == meta["sources"], f"{export}: recorded sources differ from {commit}"


@pytest.mark.data
@pytest.mark.parametrize("export", CONTEXTS, ids=lambda p: p.relative_to(RESULTS_DIR).as_posix())
def test_published_context_export_is_reproduced_byte_for_byte(export: Path,
                                                              tmp_path: Path) -> None:
    """Re-exported from the published run and the dataset by today's code, the file is the
    same bytes (gzip with mtime 0)."""
    from engram_eval.qa.context import ContextConfig, export_context

    meta = json.loads(Path(str(export) + ".metadata.json").read_text())
    hits = sorted(data_dir().rglob(meta["dataset"]["name"])) if data_dir().is_dir() else []
    if not hits:
        pytest.skip(f"dataset {meta['dataset']['name']} not available under {data_dir()}")
    out = tmp_path / export.name
    export_context(export.parent / meta["run"]["path"], hits[0], out,
                   ContextConfig(meta["top_k"]), echo=lambda m: None, progress=False)
    assert sha256_file(out) == sha256_file(export)


@pytest.mark.parametrize("result", RESULTS, ids=lambda p: p.relative_to(RESULTS_DIR).as_posix())
def test_published_run_rebuilds_from_its_recorded_settings(result: Path) -> None:
    """Whatever today's defaults (the rerank stage on by default, the shipped cross-encoder),
    ``verify --rerun`` rebuilds every published run from its sidecar's recorded settings: the
    rebuilt retriever describes exactly what the run recorded (``rerun_retriever`` refuses
    otherwise) and reranks exactly when the run did. A run whose cross-encoder was a scratch
    directory that is not on this machine is skipped (the data tier says how to re-create it)."""
    from engram_eval.errors import ModelUnavailableError, ProvenanceError
    from engram_eval.retrieval.systems import SystemUnavailableError
    from engram_eval.runs.verify import rerun_retriever

    meta = json.loads(Path(str(result) + ".metadata.json").read_text())
    try:
        retriever = rerun_retriever(meta)
    except ModelUnavailableError as e:
        pytest.skip(f"a recorded model is not on this machine: {e}"[:300])
    except SystemUnavailableError as e:  # examples/systems/*: pip install them to re-execute
        pytest.skip(str(e)[:300])
    except ProvenanceError as e:
        if "cross-encoder" not in str(e) and "reranker model" not in str(e):
            raise
        pytest.skip(f"a scratch cross-encoder here has other file hashes: {e}"[:300])
    settings = getattr(retriever, "settings", None)
    if settings is not None and hasattr(settings, "rerank"):
        assert settings.rerank == bool(meta["config"].get("rerank"))
        assert settings.reranker_model == meta["config"].get("reranker_model",
                                                             settings.reranker_model)


# ------------------------------------------------------------- configs tuned over several parts
#: Published multi-run tune configs (archived by the retention rule with their runs: read from
#: git history): (config, its runs in order), each tuned with section 14's command (grid, protocols, worst-ratio, folds by
#: conversation, 5 folds, seed 0).
RETUNED = [
    ("lexical/tuned_first_stage.yaml",
     ("lexical/tune_lme_stem.jsonl.gz", "lexical/tune_loc_stem_prefix.jsonl.gz")),
    ("turn_top_m/topm_people_first_stage.yaml",
     ("lexical/tune_lme_stem.jsonl.gz", "turn_top_m/topm_loc_d3b1.jsonl.gz")),
]


@pytest.mark.slow
@pytest.mark.parametrize("config,runs", RETUNED, ids=[c for c, _ in RETUNED])
def test_published_multi_part_config_is_retuned_byte_for_byte(
        config: str, runs: tuple[str, ...], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-tuning the published runs writes the published config, byte for byte: in particular
    runs recorded before a field existed (section 14's, without the turn top-m fields) give no
    people_overrides entry for it (their legacy value on both structures)."""
    from published_files import published_bytes

    from engram_eval.analysis.tune_parts import tune_parts
    from engram_eval.provenance.catalog import companions

    # the runs at their published paths, from the tree or, archived, from git history
    stage = tmp_path / "checkout"
    for r in runs:
        for name in (f"results/{r}", *companions(f"results/{r}")):
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            (stage / name).write_bytes(published_bytes(name))
    grid = "benchmarks/longmemeval/tune_grid.yaml"
    (stage / grid).parent.mkdir(parents=True)
    (stage / grid).write_bytes((ROOT / grid).read_bytes())
    monkeypatch.chdir(stage)  # the config's header names the runs as given
    out = tmp_path / Path(config).name
    tune_parts([f"results/{r}" for r in runs], grid, out, protocols=["answerable", "locomo"], rule="worst-ratio", folds=5, seed=0,
               cluster="id-prefix")
    assert out.read_bytes() == published_bytes(f"results/{config}")


@pytest.mark.data
def test_a_published_run_reproduces_by_id_from_its_commit(split_parts: dict[str, Path]) -> None:
    """``engram-eval reproduce ID`` (issue 46) on a tuning run of §18, whose sources are those
    of an earlier commit than the one that published it: re-ranked by that commit's code in a
    clean worktree, its data found by sha256 among the re-created split parts."""
    import subprocess

    from engram_eval.runs.reproduce import reproduce

    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True, check=False).stdout.strip()
    if shallow != "false":
        pytest.skip("needs the repository's git history (a full clone)")
    if "locomo10.tune.json" not in split_parts:
        pytest.skip("the LoCoMo tune part cannot be re-created here (no locomo10 data)")
    out = reproduce(ROOT, "turn_top_m/topm_loc_d3b1", data=list(split_parts.values()),
                    questions=1)
    assert out.ok, "\n".join(out.lines)
