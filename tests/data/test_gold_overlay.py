"""Reading a gold overlay: the audit's keys mapped to question ids, the plain map, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram_eval.data.datasets import load_questions
from engram_eval.data.gold_overlay import (
    AUDIT_FORMAT,
    MAP_FORMAT,
    audit_key_to_question_id,
    conversation_order,
    read_gold_overlay,
)
from engram_eval.errors import ConfigError, DataError
from engram_eval.io import sha256_file

ROOT = Path(__file__).resolve().parents[2]
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"
AUDIT = ROOT / "fixtures" / "locomo_tiny_audit.json"
LME = ROOT / "fixtures" / "longmemeval_tiny.json"


@pytest.fixture(scope="module")
def questions() -> tuple:
    return load_questions(LOCOMO)[1]


def test_audit_keys_map_to_question_ids(questions: tuple) -> None:
    convs = conversation_order(questions)
    assert convs == ["tiny-1", "tiny-2"]
    known = {q.question_id for q in questions}
    assert audit_key_to_question_id("locomo_0_qa0", convs, known) == "tiny-1:q0"
    assert audit_key_to_question_id("locomo_1_qa5", convs, known) == "tiny-2:q5"
    # the item index is the position in the conversation's qa list, the conversation index
    # the position in the file: each id names the question whose text the audit quotes
    raw = json.loads(LOCOMO.read_text())
    by_id = {q.question_id: q for q in questions}
    for c, conv in enumerate(raw):
        for i, item in enumerate(conv["qa"]):
            qid = audit_key_to_question_id(f"locomo_{c}_qa{i}", convs, known)
            assert qid is not None and by_id[qid].question == item["question"]
    assert audit_key_to_question_id("locomo_2_qa0", convs, known) is None  # no conversation 2
    assert audit_key_to_question_id("locomo_0_qa6", convs, known) is None  # no item 6
    assert audit_key_to_question_id("tiny-1:q0", convs, known) is None


def test_audit_layout_read_as_it_is(questions: tuple) -> None:
    o = read_gold_overlay(AUDIT, questions)
    assert o.format == AUDIT_FORMAT and o.sha256 == sha256_file(AUDIT)
    assert o.record() == {"name": AUDIT.name, "sha256": sha256_file(AUDIT),
                          "format": AUDIT_FORMAT, "n_entries": 7}
    items = o.items
    assert list(items) == ["tiny-1:q0", "tiny-1:q1", "tiny-2:q0", "tiny-2:q4", "tiny-1:q5",
                           "tiny-1:q3", "tiny-2:q3"]
    a = items["tiny-1:q0"]
    assert (a.key, a.gold, a.gold_audited) == ("locomo_0_qa0", ("tiny-1:session_1",),
                                               ("tiny-1:session_2",))
    assert a.evidence_changed and a.gold_changed
    b = items["tiny-1:q1"]  # another turn of the same session
    assert b.evidence_changed and not b.gold_changed
    assert not items["tiny-2:q0"].evidence_changed
    assert items["tiny-2:q4"].gold_audited == ("tiny-2:session_1", "tiny-2:session_3")
    assert items["tiny-1:q5"].gold_audited == () and items["tiny-1:q5"].gold_changed
    assert items["tiny-1:q3"].gold == () and items["tiny-1:q3"].gold_audited == (
        "tiny-1:session_1",)
    c = items["tiny-2:q3"]  # a corrected piece that names no turn is kept, named
    assert c.unresolved == ("D3:9",) and c.gold_audited == ("tiny-2:session_2",)
    fixed = o.corrected(next(q for q in questions if q.question_id == "tiny-2:q3"))
    assert fixed.answer_session_ids == ("tiny-2:session_2",)
    assert fixed.get_extra("evidence") == ("D3:9", "D2:5")
    assert fixed.get_extra("category") == 5


def test_plain_map(questions: tuple, tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"tiny-1:q0": ["D2:1"], "tiny-2:q1": ["D2:01", "D1:1"]}))
    o = read_gold_overlay(path, questions)
    assert o.format == MAP_FORMAT and list(o.items) == ["tiny-1:q0", "tiny-2:q1"]
    assert o.items["tiny-2:q1"].dia_ids_audited == ("D2:1", "D1:1")  # lenient, as the loader
    assert o.items["tiny-2:q1"].gold_audited == ("tiny-2:session_1", "tiny-2:session_2")


def _audit(tmp_path: Path, edit) -> Path:
    data = json.loads(AUDIT.read_text())
    edit(data)
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("edit", "record", "field", "why"), [
    (lambda d: d[0].update(question_id="locomo_2_qa0"), "question_id=locomo_2_qa0 (index 0)",
     "question_id", "names no QA item"),
    (lambda d: d[0].update(question_id="conv-1_q0"), "question_id=conv-1_q0 (index 0)",
     "question_id", "not of the audit's form"),
    (lambda d: d[1].update(question="What?"), "question_id=locomo_0_qa1 (index 1)",
     "question", "another file"),
    (lambda d: d[1].update(cited_evidence=["D2:3"]), "question_id=locomo_0_qa1 (index 1)",
     "cited_evidence", "another file"),
    (lambda d: d[2].pop("correct_evidence"), "question_id=locomo_1_qa0 (index 2)",
     "correct_evidence", "missing"),
    (lambda d: d[2].update(correct_evidence="D1:2"), "question_id=locomo_1_qa0 (index 2)",
     "correct_evidence", "list of dia_id strings"),
    (lambda d: d.append(dict(d[0])), "question_id=locomo_0_qa0 (index 7)", "question_id",
     "listed twice"),
])
def test_audit_refusals_name_the_entry(questions: tuple, tmp_path: Path, edit, record: str,
                                       field: str, why: str) -> None:
    path = _audit(tmp_path, edit)
    with pytest.raises(DataError) as e:
        read_gold_overlay(path, questions)
    assert (e.value.path, e.value.record, e.value.field) == (str(path), record, field)
    assert why in e.value.reason


def test_map_and_layout_refusals(questions: tuple, tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"locomo_0_qa0": ["D2:1"]}))
    with pytest.raises(DataError, match="an audit key") as e:
        read_gold_overlay(path, questions)
    assert e.value.record == "question_id=locomo_0_qa0"
    path.write_text('"D2:1"')
    with pytest.raises(DataError, match="a gold overlay is a JSON list"):
        read_gold_overlay(path, questions)
    with pytest.raises(ConfigError, match="not a LoCoMo dataset"):
        read_gold_overlay(AUDIT, load_questions(LME)[1], dataset=LME)


@pytest.mark.data
def test_public_audit_maps_exactly() -> None:
    """The public LoCoMo audit against locomo10.json: all 156 keys map to the question whose
    text they quote and whose evidence they cite (the reader checks both); 96 entries list
    other evidence strings, 93 of them other turns (the other 3 rewrite a malformed or
    unresolvable string: 'D8:6; D9:17' -> D8:6, D9:17; 'D30:05' -> 'D30:5'; the missing
    D4:36 dropped), 29 other gold sessions; one (conv-47:q11) corrects to no evidence."""
    from real_data import require

    dataset = require("locomo/locomo10.json")
    qs = load_questions(dataset)[1]
    o = read_gold_overlay(require("locomo/audit/locomo_audit_errors.json"), qs)
    items = list(o.items.values())
    assert len(items) == 156 and len({i.question_id for i in items}) == 156
    assert all(i.question_id == f"{conversation_order(qs)[int(i.key.split('_')[1])]}:q"
               f"{i.key.split('_qa')[1]}" for i in items)
    assert sum(set(i.evidence) != set(i.evidence_audited) for i in items) == 96
    assert sum(i.evidence_changed for i in items) == 93
    assert sum(i.gold_changed for i in items) == 29
    assert [i.question_id for i in items if not i.gold_audited] == ["conv-47:q11"]
    assert not any(i.unresolved for i in items)
