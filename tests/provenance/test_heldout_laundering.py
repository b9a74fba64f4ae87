"""Laundering held-out data past the guard (issue 43), on real files:

* ``run --questions FILE`` over a held-out part whose question texts were replaced by
  placeholders, the real texts in the questions file: still the held-out part (refused
  without a frozen manifest; under one, a held-out run that ``tune`` and
  ``confidence-study`` refuse);
* a production held-out fixture copied with its memory ids renamed consistently, or with a
  trailing space added per case, or one held-out question moved into another case: still
  held out (matched on normalised content, not on ids or exact bytes).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from frozen_runs import run_dummy

from engram_eval.cli import main as cli
from engram_eval.errors import ProvenanceError
from engram_eval.io import sha256_file
from engram_eval.production_eval import calibrate_real as CR
from engram_eval.production_eval.runner import heldout_match
from engram_eval.provenance import frozen as F
from engram_eval.provenance import guard as G

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "fixtures" / "longmemeval_tiny.json"
GRID = REPO / "benchmarks" / "longmemeval" / "tune_grid.yaml"
HOLDOUT = REPO / "fixtures" / "production" / "holdout.json"
DEV = REPO / "fixtures" / "production" / "dev.json"


@pytest.fixture()
def split(tmp_path, monkeypatch):
    """`engram-eval split` of the tiny fixture into tmp/D (known through the registry
    only). Yields (tmp, manifest, held-out part, tuning part)."""
    monkeypatch.setenv("ENGRAM_EVAL_LEDGER", str(tmp_path / "ledger.json"))
    monkeypatch.delenv("ENGRAM_EVAL_HELDOUT_ROOTS", raising=False)
    assert cli.main(["split", str(TINY), "--holdout", "0.5", "--salt", "launder",
                     "--output-dir", str(tmp_path / "D"), "--compress", "none"]) == 0
    manifest = json.loads((tmp_path / "D" / "split_manifest.json").read_text())
    d = tmp_path / "D"
    yield (tmp_path, manifest, d / manifest["parts"]["heldout"]["file"],
           d / manifest["parts"]["tune"]["file"])


def _placeholders(tmp: Path, part: Path, n: int | None = None) -> tuple[Path, Path]:
    """The part (its first ``n`` records) with every question text replaced by a
    placeholder, and the questions file holding the real texts."""
    records = json.loads(part.read_text())[:n]
    lines = []
    for i, r in enumerate(records):
        lines.append(json.dumps({"question_id": r["question_id"], "question": r["question"]}))
        r["question"] = f"placeholder {i}"
    data = tmp / "innocent.json"
    data.write_text(json.dumps(records))
    texts = tmp / "texts.jsonl"
    texts.write_text("\n".join(lines) + "\n")
    return data, texts


def test_placeholder_texts_with_the_real_ones_in_questions_are_the_part(split, capsys):
    tmp, manifest, held, tune = split
    data, texts = _placeholders(tmp, held)
    assert G.inspect_dataset(data) is None  # the placeholders alone are other questions
    out = tmp / "r.jsonl"
    assert run_dummy(str(data), "--questions", str(texts), "--output", str(out)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert f"{data}: is the held-out part {held.name}" in err
    assert "with the question texts the run replaces (--questions)" in err
    assert "frozen manifest" in err and not out.exists()
    assert not (tmp / "ledger.json").exists()


def test_a_frozen_laundered_run_is_a_heldout_run_that_choosing_commands_refuse(split, capsys):
    tmp, manifest, held, tune = split
    data, texts = _placeholders(tmp, held)
    frozen = tmp / "f.json"
    result = tmp / "r.jsonl"
    assert run_dummy(str(data), "--questions", str(texts), "--validate-only",
                     "--freeze-source", str(frozen)) == 0
    assert run_dummy(str(data), "--questions", str(texts), "--output", str(result),
                     "--frozen-source", str(frozen)) == 0
    side = json.loads(Path(f"{result}.metadata.json").read_text())
    key = manifest["parts"]["heldout"]["sha256"]
    assert side["frozen_source"]["label"] == F.HELDOUT
    assert side["frozen_source"]["heldout_match"]["key"] == key
    assert list(json.loads((tmp / "ledger.json").read_text())["inputs"]) == [key]
    capsys.readouterr()
    for argv in (["tune", str(result), "--grid", str(GRID), "--output", str(tmp / "t.yaml")],
                 ["confidence-study", str(result), "--dataset", str(tune), "--output",
                  str(tmp / "cs.json")]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert f"{result}: a run of a held-out part" in err and len(err.splitlines()) == 1
    assert not (tmp / "t.yaml").exists() and not (tmp / "cs.json").exists()
    # a second run of the laundered part is recorded in the part's own ledger entry
    again = tmp / "r2.jsonl"
    assert run_dummy(str(data), "--questions", str(texts), "--output", str(again),
                     "--frozen-source", str(frozen)) == 0
    ledger = json.loads((tmp / "ledger.json").read_text())["inputs"]
    assert list(ledger) == [key] and len(ledger[key]["runs"]) == 2


def test_a_laundered_subset_is_refused_even_frozen(split, capsys):
    tmp, manifest, held, tune = split
    data, texts = _placeholders(tmp, held, n=3)
    assert run_dummy(str(data), "--questions", str(texts), "--validate-only",
                     "--freeze-source", str(tmp / "f.json")) == 2
    err = capsys.readouterr().err
    assert "holds 3 of its 3 question(s)" in err and "only the held-out part itself" in err
    assert not (tmp / "f.json").exists()


def test_the_tuning_part_with_translated_texts_still_runs(split, capsys):
    """--questions itself stays usable: the tuning part with other texts holds no
    held-out question."""
    tmp, manifest, held, tune = split
    data, texts = _placeholders(tmp, tune)
    assert run_dummy(str(data), "--questions", str(texts), "--output", str(tmp / "t.jsonl")) \
        == 0


# --------------------------------------------------------------------------- production fixtures


def _copy(tmp: Path, change: str) -> Path:
    doc = json.loads(HOLDOUT.read_text())
    doc["heldout"], doc["name"] = False, "my_fixture"
    for n, case in enumerate(doc["cases"]):
        case["case_id"] = f"case-{n}"
        if change == "renamed_ids":  # every memory id renamed, consistently in the gold
            new = {m["id"]: f"mem-{n}-{i}" for i, m in enumerate(case["memories"])}
            for m in case["memories"]:
                m["id"] = new[m["id"]]
            for i, q in enumerate(case["questions"]):
                q["question_id"] = f"q-{n}-{i}"
                q["gold"] = [new[g] for g in q["gold"]]
        elif change == "trailing_space":  # one trailing space per case
            case["memories"][0]["text"] += " "
    if change == "moved_question":  # one held-out question (with its gold memory) moved
        dev = json.loads(DEV.read_text())
        case = next(c for c in doc["cases"] if any(q["gold"] for q in c["questions"]))
        q = next(q for q in case["questions"] if q["gold"])
        mems = [m for m in case["memories"] if m["id"] in q["gold"]]
        target = dev["cases"][0]
        target["memories"] += [dict(m, id=f"x-{m['id']}") for m in mems]
        target["questions"].append(dict(q, question_id="x-q", gold=[f"x-{g}" for g in q["gold"]]))
        doc = dev
    p = tmp / f"{change}.json"
    p.write_text(json.dumps(doc, indent=1))
    return p


@pytest.mark.parametrize("change,how", [("renamed_ids", "case memories and questions"),
                                        ("trailing_space", "case memories and questions"),
                                        ("moved_question", "question query and gold memories")])
def test_a_copied_heldout_fixture_is_still_heldout(tmp_path, change, how):
    fx = _copy(tmp_path, change)
    assert sha256_file(fx) != sha256_file(HOLDOUT)
    m = heldout_match(fx, REPO)  # what `production run` asks before any search
    assert m is not None and m.key == sha256_file(HOLDOUT) and m.how == how
    assert "holdout.json" in m.describe()
    with pytest.raises(ProvenanceError) as e:  # the calibration's guard
        CR.refuse_heldout_fixture(fx)
    assert str(fx) in str(e.value) and "holdout.json" in str(e.value)


def test_other_fixtures_and_a_real_edit_are_not_heldout(tmp_path):
    """The normalisation does not over-reach: the tuning fixtures stay usable, and a case
    whose memory text is edited is another case (the documented limit)."""
    assert heldout_match(DEV, REPO) is None
    assert heldout_match(REPO / "fixtures" / "production" / "train_short.json", REPO) is None
    doc = json.loads(HOLDOUT.read_text())
    doc["heldout"] = False
    for case in doc["cases"]:
        for m in case["memories"]:
            m["text"] = "Edited: " + m["text"]
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(doc))
    assert heldout_match(p, REPO) is None
