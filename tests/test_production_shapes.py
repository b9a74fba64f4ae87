"""Issue 30: calibration per memory shape -- the short-memory fixtures (train_short,
validation_v4), the shape read from the data, and the per-shape calibration file (fitted
with scikit-learn out of fold, applied with numpy only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRODUCTION = REPO / "fixtures" / "production"
FROZEN = PRODUCTION / "frozen"


# --------------------------------------------------------------------------- fixtures


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _content(name: str) -> tuple[set[str], set[str]]:
    """(memory texts, question texts) of a production fixture, whitespace and case folded."""
    doc = json.loads((PRODUCTION / f"{name}.json").read_text(encoding="utf-8"))
    mems = {_norm(m["text"]) for c in doc["cases"] for m in c["memories"]}
    qs = {_norm(q["query"]) for c in doc["cases"] for q in c["questions"]}
    return mems, qs


@pytest.mark.parametrize("new", ["train_short", "validation_v4"])
def test_new_fixtures_share_no_memory_or_question_with_any_other(new: str) -> None:
    """train_short and validation_v4 are disjoint, by content, from validation_v3, from each
    other and from every other production fixture."""
    mems, qs = _content(new)
    others = sorted(p.stem for p in PRODUCTION.glob("*.json") if p.stem != new)
    assert {"validation_v3", "train_short", "validation_v4"} - {new} <= set(others)
    for other in others:
        om, oq = _content(other)
        assert not mems & om, (new, other, sorted(mems & om)[:3])
        assert not qs & oq, (new, other, sorted(qs & oq)[:3])


@pytest.mark.parametrize(("name", "heldout", "cases", "questions"),
                         [("train_short", False, 12, 60), ("validation_v4", True, 8, 40)])
def test_new_fixtures_load_and_hold_the_v3_mix(name: str, heldout: bool, cases: int,
                                                questions: int) -> None:
    """Valid under the package's loader; every case has an absent-answer question (one of
    five: 20%); validation_v4 is held out by its own field, train_short is not."""
    from engram_eval.production_eval.fixture import load_fixture
    from engram_eval.provenance.heldout import fixture_heldout

    path = PRODUCTION / f"{name}.json"
    view, gold = load_fixture(path)
    qs = [q for c in view.cases for q in c.queries]
    assert view.heldout is heldout and len(view.cases) == cases and len(qs) == questions
    assert all(sum(gold(q.question_id) == () for q in c.queries) == 1 for c in view.cases)
    assert (fixture_heldout(path) is not None) is heldout


@pytest.mark.parametrize("name", ["train_short", "validation_v4"])
def test_new_fixtures_were_frozen_as_they_are(name: str) -> None:
    """The frozen-source record written before any fit holds the fixture's sha256."""
    from engram_eval.io import sha256_file
    from engram_eval.provenance.frozen import load_manifest

    m = load_manifest(FROZEN / f"{name}.before_calibration.frozen.json")
    assert m["input"] == {"kind": "fixture", "name": f"{name}.json",
                          "size": (PRODUCTION / f"{name}.json").stat().st_size,
                          "sha256": sha256_file(PRODUCTION / f"{name}.json")}
