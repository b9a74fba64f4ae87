"""The held-out guard keyed by content (engram_eval.provenance.heldout).

A renamed, gzipped or symlinked copy of a held-out part (no marker beside it) and a copy of
a held-out production fixture with ``"heldout": false`` are still held out: refused without
a frozen manifest, and when run under one, recorded in the ledger under the original's hash.
Nothing outside the test's own directories is created or changed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import ProvenanceError
from engram_eval.io import sha256_file
from engram_eval.provenance import frozen as F
from engram_eval.provenance import heldout as H

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "fixtures" / "longmemeval_tiny.json"
HOLDOUT_FIXTURE = REPO / "fixtures" / "production" / "holdout.json"


def _repo_state() -> dict[str, str]:
    """sha256 of every file under the repository's results/ and fixtures/ (where the guard
    reads manifests, ledgers and fixtures)."""
    out = {}
    for top in ("results", "fixtures"):
        for p in sorted((REPO / top).rglob("*")):
            if p.is_file():
                out[str(p.relative_to(REPO))] = sha256_file(p)
    return out


@pytest.fixture()
def env(tmp_path, monkeypatch):
    """A tiny split in tmp/split (visible to the guard through ENGRAM_EVAL_HELDOUT_ROOTS),
    a ledger in tmp; yields (tmp, split outcome manifest dict, held-out part path)."""
    monkeypatch.setenv("ENGRAM_EVAL_LEDGER", str(tmp_path / "ledger.json"))
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.setenv(k, "1")
    split = tmp_path / "split"
    assert cli.main(["split", str(TINY), "--holdout", "0.5", "--salt", "guard",
                     "--output-dir", str(split), "--compress", "none"]) == 0
    monkeypatch.setenv(H.ENV_ROOTS, str(split))
    manifest = json.loads((split / "split_manifest.json").read_text())
    part = split / manifest["parts"]["heldout"]["file"]
    before = _repo_state()
    yield tmp_path, manifest, part
    assert _repo_state() == before, "the guard changed a file outside the test's directories"


def _run(*args: str) -> int:
    return cli.main(["run", *args, "--retriever", "dummy", "--no-progress"])


def _copies(tmp: Path, part: Path) -> dict[str, Path]:
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    renamed = elsewhere / "my_dev_questions.json"
    shutil.copy(part, renamed)
    gz = elsewhere / "questions.json.gz"
    gz.write_bytes(gzip.compress(part.read_bytes(), compresslevel=9, mtime=12345))
    link = elsewhere / "linked.json"
    link.symlink_to(part)
    return {"renamed": renamed, "gzip": gz, "symlink": link}


@pytest.mark.parametrize("kind", ["renamed", "gzip", "symlink"])
def test_copy_of_heldout_part_refused_without_frozen_manifest(env, capsys, kind):
    tmp, manifest, part = env
    copy = _copies(tmp, part)[kind]
    assert not Path(str(copy) + ".split.json").exists()  # no marker travels with the copy
    out = tmp / "r.jsonl"
    assert _run(str(copy), "--output", str(out)) == 2
    err = capsys.readouterr().err
    assert "held-out part" in err and "frozen manifest" in err
    assert str(tmp / "split" / "split_manifest.json") in err  # names the matching manifest
    assert not out.exists() and not Path(str(out) + ".metadata.json").exists()
    assert not (tmp / "ledger.json").exists()
    desc = H.is_heldout(copy)
    assert desc is not None and "split_manifest.json" in desc


def test_copy_runs_under_frozen_manifest_and_shares_the_ledger_entry(env, capsys):
    tmp, manifest, part = env
    copy = _copies(tmp, part)["gzip"]
    frozen = tmp / "frozen.json"
    assert _run(str(copy), "--validate-only", "--freeze-source", str(frozen)) == 0
    out = tmp / "r.jsonl"
    assert _run(str(copy), "--output", str(out), "--frozen-source", str(frozen)) == 0
    summ = json.loads(Path(str(out) + ".summary.json").read_text())
    side = json.loads(Path(str(out) + ".metadata.json").read_text())
    assert summ["frozen_source"]["label"] == F.HELDOUT
    key = manifest["parts"]["heldout"]["sha256"]
    assert side["frozen_source"]["heldout_match"]["key"] == key
    ledger = json.loads((tmp / "ledger.json").read_text())
    assert list(ledger["inputs"]) == [key]  # kept under the part's hash, not the copy's
    assert ledger["inputs"][key]["runs"][0]["input_sha256"] == sha256_file(copy)
    # the marked original, under a manifest frozen after the copy ran: a regression check
    later = tmp / "frozen_part.json"
    assert _run(str(part), "--validate-only", "--freeze-source", str(later)) == 0
    out2 = tmp / "r2.jsonl"
    assert _run(str(part), "--output", str(out2), "--frozen-source", str(later)) == 0
    summ2 = json.loads(Path(str(out2) + ".summary.json").read_text())
    assert summ2["frozen_source"]["label"] == F.REGRESSION


def test_tuning_part_copy_and_unrelated_data_still_run(env):
    tmp, manifest, part = env
    tune = tmp / "split" / manifest["parts"]["tune"]["file"]
    copy = tmp / "tune_copy.json"
    shutil.copy(tune, copy)
    assert H.is_heldout(copy) is None and H.is_heldout(TINY) is None
    out = tmp / "t.jsonl"
    assert _run(str(copy), "--output", str(out)) == 0
    assert not (tmp / "ledger.json").exists()


def test_legacy_gzip_manifest_without_content_hash(tmp_path, monkeypatch):
    """A manifest that records only the gzipped part's bytes (as the published one does),
    with the part file nowhere near it: a plain or re-gzipped copy is recognised by
    re-compressing its content as the split does."""
    monkeypatch.setenv("ENGRAM_EVAL_LEDGER", str(tmp_path / "ledger.json"))
    split = tmp_path / "gzsplit"
    assert cli.main(["split", str(TINY), "--holdout", "0.5", "--salt", "guard",
                     "--output-dir", str(split), "--compress", "gzip"]) == 0
    m = json.loads((split / "split_manifest.json").read_text())
    held = m["parts"]["heldout"]
    assert held["content_sha256"] == hashlib.sha256(
        gzip.decompress((split / held["file"]).read_bytes())).hexdigest()
    for part in m["parts"].values():
        del part["content_sha256"]
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "split_manifest.json").write_text(json.dumps(m))
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress((split / held["file"]).read_bytes()))
    regz = tmp_path / "regz.json.gz"
    regz.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1, mtime=7))
    for copy in (plain, regz):
        match = H.find_heldout(copy, roots=[legacy])
        assert match is not None and match.key == held["sha256"]
        assert match.where == (str(legacy / "split_manifest.json"),)
        # with the dataset's ids the same check runs; other ids skip the re-compression
        assert H.find_heldout(copy, roots=[legacy], ids=held["question_ids"]) is not None
        assert H.find_heldout(copy, roots=[legacy], ids=["other"]) is None
    assert H.find_heldout(TINY, roots=[legacy]) is None


def test_published_split_manifest_is_seen():
    """The repository's published split lists its held-out part; its ledger entry matches."""
    parts = H.heldout_parts()
    published = json.loads((REPO / "results" / "longmemeval_s_dev_split" /
                            "split_manifest.json").read_text())["parts"]["heldout"]
    assert published["sha256"] in parts
    assert any(w.endswith("split_manifest.json") for w in parts[published["sha256"]].where)


# --------------------------------------------------------------------------- production


def _reflagged_copy(tmp_path: Path, *, only_one_case: bool = False) -> Path:
    doc = json.loads(HOLDOUT_FIXTURE.read_text())
    assert doc["heldout"] is True
    doc["heldout"] = False
    doc["name"] = "my_fixture"
    if only_one_case:
        dev = json.loads((REPO / "fixtures" / "production" / "dev.json").read_text())
        doc["cases"] = dev["cases"][:2] + [dict(doc["cases"][3], case_id="renamed")]
    p = tmp_path / "copy.json"
    p.write_text(json.dumps(doc, indent=1))
    return p


def test_fixture_heldout_by_content(tmp_path):
    key = sha256_file(HOLDOUT_FIXTURE)
    for only_one in (False, True):
        d = tmp_path / f"only_one_{only_one}"
        d.mkdir()
        m = H.fixture_heldout(_reflagged_copy(d, only_one_case=only_one))
        assert m is not None and m.key == key and "holdout.json" in m.describe()
        assert m.how == "case memories and questions"
    same = tmp_path / "renamed_holdout.json"
    shutil.copy(HOLDOUT_FIXTURE, same)
    assert H.fixture_heldout(same).how == "file bytes"
    assert H.fixture_heldout(REPO / "fixtures" / "production" / "dev.json") is None


def test_reflagged_production_fixture_refused(tmp_path, monkeypatch, tiny_embedding_model):
    from engram_eval.production.runner import run_fixture
    from engram_eval.production.search import Engine
    from engram_eval.production.settings import ProductionSettings

    monkeypatch.setenv("ENGRAM_EVAL_LEDGER", str(tmp_path / "ledger.json"))
    before = _repo_state()
    fx = _reflagged_copy(tmp_path)
    engine = Engine(ProductionSettings(embedding_model=tiny_embedding_model))
    out = tmp_path / "o.json"
    with pytest.raises(ProvenanceError) as e:
        run_fixture(fx, out, tmp_path / "w", engine, REPO)
    msg = str(e.value)
    assert "held out" in msg and "frozen manifest" in msg
    assert str(HOLDOUT_FIXTURE) in msg  # names the known held-out fixture it matches
    assert not out.exists() and not (tmp_path / "w").exists()
    assert not (tmp_path / "ledger.json").exists()
    assert _repo_state() == before
