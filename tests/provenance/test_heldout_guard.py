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
from frozen_runs import freeze_and_run
from frozen_runs import run_dummy as _run

from engram_eval.cli import main as cli
from engram_eval.errors import ProvenanceError
from engram_eval.io import sha256_file
from engram_eval.provenance import frozen as F
from engram_eval.provenance import heldout as H

REPO = Path(__file__).resolve().parents[2]
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
    first = freeze_and_run(copy, tmp)
    assert first.summary["frozen_source"]["label"] == F.HELDOUT
    key = manifest["parts"]["heldout"]["sha256"]
    assert first.sidecar["frozen_source"]["heldout_match"]["key"] == key
    ledger = json.loads((tmp / "ledger.json").read_text())
    assert list(ledger["inputs"]) == [key]  # kept under the part's hash, not the copy's
    assert ledger["inputs"][key]["runs"][0]["input_sha256"] == sha256_file(copy)
    # the marked original, under a manifest frozen after the copy ran: a regression check
    again = freeze_and_run(part, tmp, "r2")
    assert again.summary["frozen_source"]["label"] == F.REGRESSION


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
    # the library call: no registry entry (which would record the content hash)
    split_dataset(TINY, holdout=0.5, salt="guard", output_dir=split, compress="gzip")
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
    from engram_eval.production.search import Engine
    from engram_eval.production.settings import ProductionSettings
    from engram_eval.production_eval.runner import run_fixture

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


# =========================================================================== the one guard
# (engram_eval.provenance.guard, issue 28 item 4): links resolved before markers are read,
# held-out questions recognised by content in any file, every dataset-reading command asks,
# and `engram-eval split` registers its held-out part. Each bypass the hostile-input report
# listed, on real files, ends in one error naming the file and the held-out part.

import sys  # noqa: E402

from engram_eval.analysis import train_reranker as TR  # noqa: E402
from engram_eval.data.split import split_dataset  # noqa: E402
from engram_eval.production_eval import calibrate_real as CR  # noqa: E402
from engram_eval.provenance import guard as G  # noqa: E402

LOCOMO_TINY = REPO / "fixtures" / "locomo_tiny.json"
SWEEP_DIR = REPO / "benchmarks" / "production_retrieval"


def _repo_stat() -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under results/ and fixtures/ (cheap; see _repo_state)."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
            for top in ("results", "fixtures") for p in sorted((REPO / top).rglob("*"))
            if p.is_file()}


@pytest.fixture()
def reg(tmp_path, monkeypatch):
    """A split of the tiny fixture made by `engram-eval split` in tmp/split -- a directory
    under no search root, so the guard knows it only through the registry the split wrote.
    Yields (tmp, manifest, held-out part, tuning part)."""
    monkeypatch.setenv("ENGRAM_EVAL_LEDGER", str(tmp_path / "ledger.json"))
    monkeypatch.delenv(H.ENV_ROOTS, raising=False)
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(k, "1")
    before = _repo_stat()
    split = tmp_path / "split"
    assert cli.main(["split", str(TINY), "--holdout", "0.5", "--salt", "guard",
                     "--output-dir", str(split), "--compress", "none"]) == 0
    manifest = json.loads((split / "split_manifest.json").read_text())
    held = split / manifest["parts"]["heldout"]["file"]
    tune = split / manifest["parts"]["tune"]["file"]
    yield tmp_path, manifest, held, tune
    assert _repo_stat() == before, "the guard changed a file outside the test's directories"


def _records(path: Path) -> list[dict]:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _write(path: Path, records: list, *, gz: bool = False) -> Path:
    data = json.dumps(records, indent=2, sort_keys=True).encode()
    path.write_bytes(gzip.compress(data, mtime=1) if gz else data)
    return path


def _refusals(path: Path) -> list[str]:
    """The messages of the tuning commands' guards on ``path`` (train-reranker, the
    calibration, make-stress's and the sweep's guard), each expected to refuse."""
    out = []
    for refuse in (TR.refuse_heldout, CR.refuse_heldout,
                   lambda p: G.refuse_heldout(p, "make-stress")):
        with pytest.raises(ProvenanceError) as e:
            refuse(path)
        out.append(str(e.value))
    return out


def _names(msg: str, path: Path, part: Path) -> None:
    """One line naming the input file and the held-out part."""
    assert "\n" not in msg.strip()
    assert str(path) in msg and part.name in msg and "held-out" in msg


# --------------------------------------------------------------------------- links


@pytest.mark.parametrize("how", ["absolute", "relative", "chain"])
def test_link_to_a_marked_part_outside_every_root_is_that_part(tmp_path, monkeypatch, capsys,
                                                                how):
    """A symlink to a split's held-out part whose marker sits beside the target, in a
    directory no root lists and no registry knows: the marker is read beside the target."""
    monkeypatch.setenv("ENGRAM_EVAL_LEDGER", str(tmp_path / "ledger.json"))
    far = split_dataset(TINY, holdout=0.5, salt="links", output_dir=tmp_path / "far",
                        compress="none")  # the library call: nothing registered
    part = far.part_paths["heldout"]
    assert H.find_heldout(part) is None  # invisible to the whole-part index
    links = tmp_path / "links"
    links.mkdir()
    link = links / "dev_questions.json"
    if how == "absolute":
        link.symlink_to(part)
    elif how == "relative":
        link.symlink_to(Path("..") / "far" / part.name)
    else:
        (links / "hop.json").symlink_to(part)
        link.symlink_to("hop.json")
    assert not Path(str(link) + ".split.json").exists()
    out = tmp_path / "r.jsonl"
    assert _run(str(link), "--output", str(out)) == 2
    err = capsys.readouterr().err
    _names(err, link, part)
    assert f"a link to {part}" in err and "split marker" in err and "frozen manifest" in err
    assert not out.exists() and not (tmp_path / "ledger.json").exists()
    for msg in _refusals(link):
        _names(msg, link, part)


def test_frozen_run_through_a_link_still_runs_once(tmp_path, monkeypatch):
    """The sanctioned path works through a link: freeze, then one run, a held-out
    measurement in the ledger."""
    monkeypatch.setenv("ENGRAM_EVAL_LEDGER", str(tmp_path / "ledger.json"))
    part = split_dataset(TINY, holdout=0.5, salt="links", output_dir=tmp_path / "far",
                         compress="none").part_paths["heldout"]
    link = tmp_path / "link.json"
    link.symlink_to(part)
    assert freeze_and_run(link, tmp_path).summary["frozen_source"]["label"] == F.HELDOUT
    assert list(json.loads((tmp_path / "ledger.json").read_text())["inputs"]) == \
        [sha256_file(part)]


# --------------------------------------------------------------------------- registry


def test_split_registers_its_heldout_part_and_copies_anywhere_are_recognised(reg):
    tmp, manifest, held, tune = reg
    registry = json.loads(H.registry_path().read_text())
    entry = registry["parts"][manifest["parts"]["heldout"]["sha256"]]
    assert registry["kind"] == H.REGISTRY_KIND
    assert entry["question_ids"] == manifest["parts"]["heldout"]["question_ids"]
    assert len(entry["question_keys"]) == len(entry["question_ids"])
    assert entry["manifests"] == [str((tmp / "split" / "split_manifest.json").resolve())]
    # the split directory gone: a gzip copy elsewhere is still the part, by the registry
    away = tmp / "away"
    away.mkdir()
    copy = away / "q.json.gz"
    copy.write_bytes(gzip.compress(held.read_bytes(), mtime=3))
    (tmp / "split" / held.name).unlink()
    f = G.inspect_dataset(copy)
    assert f is not None and f.whole and str(H.registry_path()) in f.describe()
    assert G.inspect_dataset(tune) is None  # the tuning part stays usable
    # registering the same split again (same salt and fraction) changes nothing but the list
    assert cli.main(["split", str(TINY), "--holdout", "0.5", "--salt", "guard",
                     "--output-dir", str(tmp / "again"), "--compress", "none"]) == 0
    again = json.loads(H.registry_path().read_text())
    assert list(again["parts"]) == list(registry["parts"])
    assert len(again["parts"][manifest["parts"]["heldout"]["sha256"]]["manifests"]) == 2


# --------------------------------------------------------------------------- laundering


@pytest.mark.parametrize("kind", ["part", "renamed", "gzip"])
def test_split_of_a_heldout_part_is_refused(reg, capsys, kind):
    tmp, manifest, held, tune = reg
    src = {"part": held, "renamed": tmp / "mine.json", "gzip": tmp / "mine.json.gz"}[kind]
    if kind == "renamed":
        shutil.copy(held, src)
    elif kind == "gzip":
        src.write_bytes(gzip.compress(held.read_bytes(), mtime=9))
    out = tmp / "laundered"
    assert cli.main(["split", str(src), "--holdout", "0.5", "--salt", "x",
                     "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    _names(err, src, held)
    assert "tuning part" in err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("salt,holdout", [("other", 0.5), ("guard", 0.25)])
def test_resplitting_the_source_differently_is_refused(reg, capsys, salt, holdout):
    """Another salt or fraction would move held-out questions into a new tuning part."""
    tmp, manifest, held, tune = reg
    out = tmp / "resplit"
    assert cli.main(["split", str(TINY), "--holdout", str(holdout), "--salt", salt,
                     "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    _names(err, TINY, held)
    assert "would land in the tuning part" in err
    assert not out.exists() or not any(out.iterdir())
    # other data splits as before
    assert cli.main(["split", str(LOCOMO_TINY), "--holdout", "0.5", "--salt", salt,
                     "--output-dir", str(tmp / "locomo")]) == 0


@pytest.mark.parametrize("kind", ["part", "mixture", "subset_gz"])
def test_make_stress_refuses_heldout_questions(reg, capsys, kind):
    tmp, manifest, held, tune = reg
    src = {"part": held,
           "mixture": _write(tmp / "mix.json", _records(tune) + _records(held)[:1]),
           "subset_gz": _write(tmp / "sub.json.gz", _records(held)[2:5], gz=True)}[kind]
    out = tmp / "stress.json"
    assert cli.main(["make-stress", str(src), "--sessions", "12", "--seed", "1",
                     "--output", str(out)]) == 2
    err = capsys.readouterr().err
    _names(err, src, held)
    assert "stress set" in err and not out.exists()
    assert cli.main(["make-stress", str(tune), "--sessions", "6", "--seed", "1",
                     "--output", str(tmp / "ok.json")]) == 0


def test_a_stress_set_padded_from_heldout_questions_is_still_heldout(reg, capsys):
    """Padded haystacks (made before the guard, or by hand) keep the questions' content."""
    tmp, manifest, held, tune = reg
    recs = _records(held)
    filler = _records(tune)[0]
    for r in recs:
        r["haystack_session_ids"] = [*r["haystack_session_ids"], "pad-1"]
        r["haystack_dates"] = [*r["haystack_dates"], r["haystack_dates"][-1]]
        r["haystack_sessions"] = [*r["haystack_sessions"], filler["haystack_sessions"][0]]
    padded = _write(tmp / "padded.json", recs)
    assert _run(str(padded), "--output", str(tmp / "p.jsonl")) == 2
    assert "frozen manifest" in capsys.readouterr().err
    for msg in _refusals(padded):
        _names(msg, padded, held)


def test_abstention_sweep_refuses_heldout_questions(reg, capsys, monkeypatch):
    tmp, manifest, held, tune = reg
    monkeypatch.syspath_prepend(str(SWEEP_DIR))
    sweep = __import__("abstention_sweep")
    mix = _write(tmp / "mix.json", _records(tune) + _records(held)[-2:])
    out = tmp / "sweep.json"
    assert sweep.main([str(mix), "--dataset-label", "x", "--output", str(out),
                       "--no-cache"]) == 2
    err = capsys.readouterr().err
    _names(err, mix, held)
    assert "abstention sweep" in err and not out.exists()
    sys.modules.pop("abstention_sweep", None)


# --------------------------------------------------------------------------- subsets, mixtures


def _variants(tmp: Path, held: Path, tune: Path) -> dict[str, Path]:
    h, t = _records(held), _records(tune)
    renamed = [dict(r, question_id=f"mine-{i}") for i, r in enumerate(h[:3])]
    return {
        "subset": _write(tmp / "subset.json", h[:3]),
        "subset_gz": _write(tmp / "subset.json.gz", h[1:4], gz=True),
        "one_question": _write(tmp / "one.json", h[5:6]),
        "mixture": _write(tmp / "mixture.json", t + h[:1]),
        "mixture_gz": _write(tmp / "mixture.json.gz", h[-2:] + t, gz=True),
        "renamed_ids": _write(tmp / "renamed.json", renamed + t),
    }


@pytest.mark.parametrize("kind", ["subset", "subset_gz", "one_question", "mixture",
                                  "mixture_gz", "renamed_ids"])
def test_subsets_and_mixtures_are_refused_even_frozen(reg, capsys, kind):
    """Only the held-out part itself runs (once, frozen): a subset or a mixture is refused
    by run (with or without a manifest to freeze) and by every tuning command."""
    tmp, manifest, held, tune = reg
    path = _variants(tmp, held, tune)[kind]
    out = tmp / "r.jsonl"
    assert _run(str(path), "--output", str(out)) == 2
    frozen = tmp / "frozen.json"
    assert _run(str(path), "--validate-only", "--freeze-source", str(frozen)) == 2
    errs = capsys.readouterr().err.strip().splitlines()
    assert len(errs) == 2
    for err in errs:
        _names(err, path, held)
        assert "only the held-out part itself runs" in err
    assert not out.exists() and not frozen.exists() and not (tmp / "ledger.json").exists()
    for msg in _refusals(path):
        _names(msg, path, held)


def test_the_splits_own_source_now_holds_heldout_questions(reg, capsys):
    """The source of the split holds held-out questions: `run` labels it (issue 43: the
    README main job still runs; tests/provenance/test_heldout_cli.py), and every tuning
    command refuses it."""
    tmp, manifest, held, tune = reg
    assert _run(str(TINY), "--output", str(tmp / "r.jsonl")) == 0
    err = capsys.readouterr().err
    assert f"{G.CONTAINS_HELDOUT}: it holds {manifest['parts']['heldout']['n_questions']} " \
        "of its 12" in err
    for msg in _refusals(TINY):
        _names(msg, TINY, held)
        assert "(the file it was split from)" in msg


def test_a_reserialised_part_is_the_part_and_runs_once_frozen(reg, capsys):
    """The same questions in another order and layout: the part itself, by question
    content; refused without a frozen manifest, run once with one, in the part's ledger
    entry."""
    tmp, manifest, held, tune = reg
    same = _write(tmp / "reordered.json.gz", list(reversed(_records(held))), gz=True)
    assert _run(str(same), "--output", str(tmp / "x.jsonl")) == 2
    err = capsys.readouterr().err
    _names(err, same, held)
    assert "question content" in err and "frozen manifest" in err
    side = freeze_and_run(same, tmp).sidecar
    key = manifest["parts"]["heldout"]["sha256"]
    assert side["frozen_source"]["heldout_match"]["key"] == key
    assert list(json.loads((tmp / "ledger.json").read_text())["inputs"]) == [key]


def test_edited_question_text_is_what_the_guard_cannot_see(reg):
    """The documented limit: a question whose text is edited is another question."""
    tmp, manifest, held, tune = reg
    recs = _records(held)[:2]
    for r in recs:
        r["question"] = r["question"] + " Please answer briefly."
    assert G.inspect_dataset(_write(tmp / "edited.json", recs)) is None
    # whitespace alone is not an edit
    recs = _records(held)[:2]
    for r in recs:
        r["question"] = "  " + r["question"].replace(" ", "\n ") + "\t"
    f = G.inspect_dataset(_write(tmp / "spaced.json", recs))
    assert f is not None and len(f.held_ids) == 2


def test_tune_refuses_a_run_of_a_heldout_part():
    from engram_eval.analysis.tune import load_part

    run = REPO / "results" / "longmemeval_s_dev_split" / "heldout_default.jsonl.gz"
    with pytest.raises(ProvenanceError) as e:
        load_part(run, "answerable")
    assert str(run) in str(e.value) and "held-out" in str(e.value)
    assert G.HELDOUT_RUN_LABELS == (F.HELDOUT, F.REGRESSION)


# --------------------------------------------------------------------------- production cases


@pytest.mark.parametrize("change", ["memories", "questions", "both_and_mixed"])
def test_production_case_with_memories_reordered_is_heldout(tmp_path, change):
    from engram_eval.production_eval.runner import heldout_match

    doc = json.loads(HOLDOUT_FIXTURE.read_text())
    doc["heldout"], doc["name"] = False, "mine"
    for c in doc["cases"]:
        if change in ("memories", "both_and_mixed"):
            c["memories"] = list(reversed(c["memories"]))
        if change in ("questions", "both_and_mixed"):
            c["questions"] = list(reversed(c["questions"]))
        c["case_id"] = "x" + c["case_id"]
    if change == "both_and_mixed":
        dev = json.loads((REPO / "fixtures" / "production" / "dev.json").read_text())
        doc["cases"] = dev["cases"] + doc["cases"][:1]
    fx = tmp_path / "mine.json"
    fx.write_text(json.dumps(doc))
    m = heldout_match(fx, REPO)
    assert m is not None and m.key == sha256_file(HOLDOUT_FIXTURE)
    assert m.how == "case memories and questions" and "holdout.json" in m.describe()
