"""engram-eval split: determinism, stratification, LoCoMo by conversation, markers, refusals."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from collections import Counter
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.data.split import (
    MANIFEST_NAME,
    choose_held_out,
    marker_path,
    part_marker,
    salted_key,
    split_dataset,
    verify_split,
)
from engram_eval.errors import ConfigError, DataError, ProvenanceError

ROOT = Path(__file__).resolve().parents[2]
LME = ROOT / "fixtures" / "longmemeval_tiny.json"
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"

TYPES = {"single-session-user": 7, "multi-session": 10, "temporal-reasoning": 5,
         "knowledge-update": 1, "single-session-preference": 3}


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(k, raising=False)


def synthetic(tmp_path: Path, *, gz: bool = False) -> Path:
    """A LongMemEval-shaped list (only the fields split reads, plus a nested payload), with the
    types interleaved and an unusual layout (newlines and indentation) to test byte fidelity."""
    recs = []
    for t, n in TYPES.items():
        for i in range(n):
            recs.append({"question_id": f"{t}_{i:02d}", "question_type": t,
                         "payload": {"x": [i, 1.50, "é"], "y": None}})
    recs.sort(key=lambda r: hashlib.md5(r["question_id"].encode()).hexdigest())
    text = "[\n  " + ",\n  ".join(json.dumps(r, indent=1, ensure_ascii=False) for r in recs) + "\n]\n"
    p = tmp_path / ("synth.json.gz" if gz else "synth.json")
    raw = text.encode("utf-8")
    p.write_bytes(gzip.compress(raw, mtime=0) if gz else raw)
    return p


def read_part(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def test_same_salt_gives_identical_bytes(tmp_path: Path) -> None:
    src = synthetic(tmp_path)
    a = split_dataset(src, holdout=0.3, salt="s1", output_dir=tmp_path / "a")
    b = split_dataset(src, holdout=0.3, salt="s1", output_dir=tmp_path / "b")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert len(names) == 5  # two parts, two markers, manifest
    for n in names:
        assert (tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes(), n
    assert a.manifest == b.manifest


def test_different_salt_gives_different_split(tmp_path: Path) -> None:
    src = synthetic(tmp_path)
    a = split_dataset(src, holdout=0.3, salt="s1", output_dir=tmp_path / "a").manifest
    b = split_dataset(src, holdout=0.3, salt="s2", output_dir=tmp_path / "b").manifest
    assert a["parts"]["heldout"]["question_ids"] != b["parts"]["heldout"]["question_ids"]
    # ... but the same per-type counts (stratification does not depend on the salt)
    assert a["parts"]["heldout"]["by_type"] == b["parts"]["heldout"]["by_type"]


def test_stratified_counts_and_salted_order(tmp_path: Path) -> None:
    src = synthetic(tmp_path)
    m = split_dataset(src, holdout=0.3, salt="pepper", output_dir=tmp_path / "o").manifest
    held, tune = m["parts"]["heldout"], m["parts"]["tune"]
    for t, n in TYPES.items():
        h = math.floor(0.3 * n + 0.5)  # round half up
        assert held["by_type"].get(t, 0) == h, t
        assert tune["by_type"].get(t, 0) == n - h, t
    # 7 -> 2, 10 -> 3, 5 -> 2 (1.5 rounds up), 1 -> 0, 3 -> 1
    assert sum(held["by_type"].values()) == 2 + 3 + 2 + 0 + 1
    # the held-out ids of a type are exactly the first h in sha256(salt + id) order
    recs = json.loads(src.read_text(encoding="utf-8"))
    for t, n in TYPES.items():
        ids = [r["question_id"] for r in recs if r["question_type"] == t]
        first = sorted(ids, key=lambda i: hashlib.sha256(("pepper" + i).encode()).hexdigest())
        want = set(first[: math.floor(0.3 * n + 0.5)])
        assert {i for i in held["question_ids"] if i in set(ids)} == want
        assert set(choose_held_out(ids, 0.3, "pepper")) == want
    assert salted_key("pepper", "x") == hashlib.sha256(b"pepperx").hexdigest()
    # disjoint, complete, and each part keeps the source order
    src_ids = [r["question_id"] for r in recs]
    assert set(held["question_ids"]) | set(tune["question_ids"]) == set(src_ids)
    assert not set(held["question_ids"]) & set(tune["question_ids"])
    for part in (held, tune):
        assert part["question_ids"] == [i for i in src_ids if i in set(part["question_ids"])]


def test_parts_are_byte_faithful_and_in_source_schema(tmp_path: Path) -> None:
    src = synthetic(tmp_path)
    out = split_dataset(src, holdout=0.3, salt="s", output_dir=tmp_path / "o")
    text = src.read_text(encoding="utf-8")
    recs = json.loads(text)
    by_id = {r["question_id"]: r for r in recs}
    for name, path in out.part_paths.items():
        assert path.name == f"synth.{name}.json"
        part_text = path.read_text(encoding="utf-8")
        part = json.loads(part_text)
        assert [r["question_id"] for r in part] == out.manifest["parts"][name]["question_ids"]
        assert part == [by_id[r["question_id"]] for r in part]
        # each record's text is copied verbatim (indentation and float spelling "1.5" kept),
        # framed by the source's own opening, separator and closing
        want = "[\n  " + ",\n  ".join(json.dumps(r, indent=1, ensure_ascii=False)
                                      for r in part) + "\n]\n"
        assert part_text == want


def test_real_loader_reads_parts(tmp_path: Path) -> None:
    from engram_eval.data.longmemeval import load_longmemeval

    out = split_dataset(LME, holdout=0.3, salt="s", output_dir=tmp_path / "o")
    got = []
    for name, path in out.part_paths.items():
        ids = [q.question_id for q in load_longmemeval(path).questions]
        assert ids == out.manifest["parts"][name]["question_ids"]
        got += ids
    assert sorted(got) == sorted(q["question_id"] for q in json.loads(LME.read_text()))


def test_gzip_source_gives_gzip_parts(tmp_path: Path) -> None:
    src = synthetic(tmp_path, gz=True)
    out = split_dataset(src, holdout=0.3, salt="s", output_dir=tmp_path / "o")
    (tmp_path / "p").mkdir()
    plain = split_dataset(synthetic(tmp_path / "p"), holdout=0.3, salt="s",
                          output_dir=tmp_path / "q")
    for name, path in out.part_paths.items():
        assert path.name == f"synth.{name}.json.gz"
        assert path.read_bytes()[:2] == b"\x1f\x8b"
        assert read_part(path) == plain.part_paths[name].read_bytes()
        assert out.manifest["parts"][name]["compression"] == "gzip"
    none = split_dataset(src, holdout=0.3, salt="s", output_dir=tmp_path / "n", compress="none")
    assert none.part_paths["tune"].name == "synth.tune.json"


def test_locomo_splits_by_conversation(tmp_path: Path) -> None:
    from engram_eval.data.locomo import load_locomo

    convs = json.loads(LOCOMO.read_text(encoding="utf-8"))
    ids = [c["sample_id"] for c in convs]
    out = split_dataset(LOCOMO, holdout=0.3, salt="s", output_dir=tmp_path / "o")
    m = out.manifest
    assert m["format"] == "locomo" and m["unit"] == "conversation"
    first = sorted(ids, key=lambda i: hashlib.sha256(("s" + i).encode()).hexdigest())
    held = first[: math.floor(0.3 * len(ids) + 0.5)]
    assert m["parts"]["heldout"]["conversation_ids"] == held
    assert m["parts"]["tune"]["conversation_ids"] == [i for i in ids if i not in held]
    for name, path in out.part_paths.items():
        qs = load_locomo(path).questions
        assert [q.question_id for q in qs] == m["parts"][name]["question_ids"]
        # every QA item of a conversation lands in that conversation's part
        convs_in = {q.question_id.split(":")[0] for q in qs}
        assert convs_in == set(m["parts"][name]["conversation_ids"])
        cats = Counter(q.question_type for q in qs)
        assert m["parts"][name]["by_type"] == dict(sorted(cats.items()))


def test_manifest_and_markers(tmp_path: Path) -> None:
    src = synthetic(tmp_path)
    out = split_dataset(src, holdout=0.3, salt="s", output_dir=tmp_path / "o")
    mp = tmp_path / "o" / MANIFEST_NAME
    m = json.loads(mp.read_text())
    assert m["salt"] == "s" and m["holdout"] == 0.3
    assert m["source"]["name"] == "synth.json"
    assert m["source"]["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    msha = hashlib.sha256(mp.read_bytes()).hexdigest()
    for name, path in out.part_paths.items():
        assert m["parts"][name]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        marker = part_marker(path)
        assert marker is not None
        assert marker["part"] == name and marker["split_manifest_sha256"] == msha
        assert marker["part_sha256"] == m["parts"][name]["sha256"]
        assert marker["source_sha256"] == m["source"]["sha256"] and marker["salt"] == "s"
        assert marker_path(path).name == path.name + ".split.json"
    assert verify_split(mp, src) == []
    assert part_marker(src) is None  # the source itself has no marker


def test_changed_part_is_refused_by_its_marker(tmp_path: Path) -> None:
    src = synthetic(tmp_path)
    out = split_dataset(src, holdout=0.3, salt="s", output_dir=tmp_path / "o")
    held = out.part_paths["heldout"]
    held.write_bytes(held.read_bytes().replace(b"1.5", b"2.5", 1))
    with pytest.raises(ProvenanceError, match="part_sha256"):
        part_marker(held)
    assert any("sha256" in p for p in verify_split(tmp_path / "o" / MANIFEST_NAME))


def test_refuses_to_overwrite_and_writes_nothing(tmp_path: Path) -> None:
    src = synthetic(tmp_path)
    d = tmp_path / "o"
    d.mkdir()
    (d / "synth.heldout.json.split.json").write_text("keep")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        split_dataset(src, holdout=0.3, salt="s", output_dir=d)
    assert sorted(p.name for p in d.iterdir()) == ["synth.heldout.json.split.json"]
    assert (d / "synth.heldout.json.split.json").read_text() == "keep"
    split_dataset(src, holdout=0.3, salt="s", output_dir=tmp_path / "x")
    with pytest.raises(FileExistsError):
        split_dataset(src, holdout=0.3, salt="s", output_dir=tmp_path / "x")


@pytest.mark.parametrize("holdout", [0.0, 1.0, -0.1, 1.5])
def test_bad_fraction(tmp_path: Path, holdout: float) -> None:
    with pytest.raises(ConfigError, match="holdout"):
        split_dataset(synthetic(tmp_path), holdout=holdout, salt="s", output_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_empty_part_and_bad_records(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="held-?out part .* would be empty|heldout part"):
        split_dataset(LOCOMO, holdout=0.01, salt="s", output_dir=tmp_path / "o")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"question_id": "a", "question_type": "t"}, {"question_id": "a", '
                   '"question_type": "t"}]')
    with pytest.raises(DataError, match="duplicate"):
        split_dataset(bad, holdout=0.5, salt="s", output_dir=tmp_path / "o")
    bad.write_text('[{"question_id": "a"}]')
    with pytest.raises(DataError, match="question_type"):
        split_dataset(bad, holdout=0.5, salt="s", output_dir=tmp_path / "o")
    bad.write_text('{"question_id": "a"}')
    with pytest.raises(DataError, match="JSON list"):
        split_dataset(bad, holdout=0.5, salt="s", output_dir=tmp_path / "o")


def test_cli_split(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["split", str(LME), "--holdout", "0.3", "--salt", "abc",
                   "--output-dir", str(tmp_path / "o")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "heldout:" in out and "tune:" in out and MANIFEST_NAME in out
    rc = cli.main(["split", str(LME), "--holdout", "0.3", "--salt", "abc",
                   "--output-dir", str(tmp_path / "o")])
    assert rc == 2
    assert "refusing to overwrite" in capsys.readouterr().err
