"""Tests for engram_eval.data.locomo on the hand-written fixture and on bad files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from engram_eval.data import LocomoDataset, load_locomo
from engram_eval.data.locomo import canonical_dia_id, parse_evidence
from engram_eval.errors import DataError

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "locomo_tiny.json"


@pytest.fixture(scope="module")
def dataset() -> LocomoDataset:
    return load_locomo(FIXTURE)


@pytest.fixture()
def raw() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return data


def _write(tmp_path: Path, data: Any, name: str = "bad.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _error(path: Path) -> DataError:
    with pytest.raises(DataError) as info:
        load_locomo(path)
    return info.value


def _assert_names(err: DataError, path: Path, record: str, field: str) -> None:
    msg = str(err)
    assert err.path == str(path) and str(path) in msg
    assert err.record == record and record in msg
    assert err.field == field and field in msg


# ----------------------------------------------------------------------------- evidence parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("D1:3", "D1:3"),
        ("D30:05", "D30:5"),
        ("D:11:26", "D11:26"),
        ("d2:4", "D2:4"),
        ("D", None),
        ("D1", None),
        ("11:26", None),
    ],
)
def test_canonical_dia_id(text: str, expected: str | None) -> None:
    assert canonical_dia_id(text) == expected


def test_parse_evidence() -> None:
    ref = parse_evidence("D8:6; D9:17")
    assert ref.pieces == ("D8:6", "D9:17") and ref.canonical == ("D8:6", "D9:17")
    assert ref.malformed and not ref.noncanonical
    spaced = parse_evidence("D9:1 D4:4 D4:6")
    assert spaced.canonical == ("D9:1", "D4:4", "D4:6") and spaced.malformed
    comma = parse_evidence("D1:2,D1:3")
    assert comma.canonical == ("D1:2", "D1:3")
    zero = parse_evidence("D30:05")
    assert not zero.malformed and zero.noncanonical and zero.canonical == ("D30:5",)
    bare = parse_evidence("D")
    assert bare.malformed and bare.canonical == (None,)
    ok = parse_evidence("D3:1")
    assert not ok.malformed and not ok.noncanonical


# ----------------------------------------------------------------------------- happy path


def test_counts(dataset: LocomoDataset) -> None:
    r = dataset.report
    assert r.n_conversations == len(dataset.conversations) == 2
    assert r.n_sessions == 6
    assert r.n_turns == 33
    assert r.n_questions == len(dataset) == 12
    assert r.by_category == ((1, 2), (2, 3), (3, 1), (4, 4), (5, 2))
    assert r.n_with_adversarial_answer == 2
    assert r.n_evidence_ids == 13
    assert r.n_malformed_evidence_ids == 1
    assert r.n_noncanonical_evidence_ids == 1
    assert r.n_evidence_ids_unmatched_verbatim == 4
    assert r.n_unresolvable_evidence_ids == 2
    assert r.n_items_empty_evidence == 1
    assert r.n_items_no_resolved_evidence == 1
    assert r.n_items_without_gold == 2
    assert r.n_items_with_unresolvable_evidence == 2
    assert r.malformed_evidence == (("tiny-1:q2", "D2:3; D3:1"), ("tiny-2:q1", "D2:01"))
    assert r.unresolvable_evidence == (("tiny-2:q2", "D3:9"), ("tiny-2:q5", "D4:1"))
    assert r.items_without_gold == ("tiny-1:q3", "tiny-2:q5")


def test_sessions_and_turns(dataset: LocomoDataset) -> None:
    conv = dataset.conversations[0]
    assert conv.sample_id == "tiny-1"
    assert (conv.speaker_a, conv.speaker_b) == ("Maya", "Leo")
    assert [s.session_id for s in conv.sessions] == [
        "tiny-1:session_1",
        "tiny-1:session_2",
        "tiny-1:session_3",
    ]  # the dangling session_4_date_time is ignored
    s2 = conv.sessions[1]
    assert s2.date == "11:25 am on 12 March, 2023"
    t = s2.turns[1]
    assert (t.role, t.index, t.turn_id, t.has_answer) == ("Leo", 1, "D2:2", False)
    assert t.content.endswith(" [image: a photo of a black and white dog lying on a rug]")
    assert t.content.startswith("Ha, it's a dog, not a roommate!")
    assert s2.turns[0].content == "How's the new roommate situation going?"
    ids = [s.session_id for c in dataset.conversations for s in c.sessions]
    assert len(set(ids)) == len(ids)


def test_first_record(dataset: LocomoDataset) -> None:
    q = dataset.questions[0]
    assert q.question_id == "tiny-1:q0"
    assert q.question_type == "4"
    assert q.question == "What instrument did Maya start learning?"
    assert q.answer == "The cello"
    assert q.question_date == ""  # LoCoMo gives no question date; none is invented
    assert q.get_extra("last_session_date") == "4:40 pm on 2 April, 2023"
    assert q.sessions == dataset.conversations[0].sessions
    assert q.answer_session_ids == ("tiny-1:session_1",)
    assert q.extra == (
        ("adversarial", False),
        ("category", 4),
        ("conversation_id", "tiny-1"),
        ("evidence", ("D1:3",)),
        ("evidence_dia_ids", ("D1:3",)),
        ("last_session_date", "4:40 pm on 2 April, 2023"),
    )


def test_middle_records(dataset: LocomoDataset) -> None:
    ids = dataset.by_id()
    malformed = ids["tiny-1:q2"]
    assert malformed.answer_session_ids == ("tiny-1:session_2", "tiny-1:session_3")
    assert malformed.get_extra("evidence") == ("D2:3; D3:1",)
    assert malformed.get_extra("evidence_dia_ids") == ("D2:3", "D3:1")
    empty = ids["tiny-1:q3"]
    assert empty.answer_session_ids == () and empty.get_extra("evidence") == ()
    adversarial = ids["tiny-1:q4"]
    assert adversarial.question_type == "5"
    assert adversarial.answer == "A border collie"
    assert adversarial.get_extra("adversarial") is True
    assert adversarial.get_extra("adversarial_answer") == "A border collie"
    both = ids["tiny-2:q3"]
    assert both.answer.startswith("Sam has no cat")
    assert both.get_extra("adversarial_answer") == "Biscuit"
    leading_zero = ids["tiny-2:q1"]
    assert leading_zero.answer_session_ids == ("tiny-2:session_2",)
    assert leading_zero.get_extra("evidence_dia_ids") == ("D2:1",)
    partial = ids["tiny-2:q2"]
    assert partial.answer_session_ids == ("tiny-2:session_1", "tiny-2:session_3")
    assert partial.get_extra("evidence_dia_ids") == ("D1:5", "D3:1")


def test_last_record(dataset: LocomoDataset) -> None:
    q = dataset.questions[-1]
    assert q.question_id == "tiny-2:q5"
    assert q.question_type == "2"
    assert q.answer == "2023"  # a JSON number in the file
    assert q.answer_session_ids == ()
    assert q.get_extra("evidence") == ("D4:1",)
    assert q.get_extra("evidence_dia_ids") == ()
    assert q.get_extra("conversation_id") == "tiny-2"
    assert q.question_date == ""
    assert q.get_extra("last_session_date") == "2:15 pm on 10 June, 2023"
    assert q.sessions == dataset.conversations[1].sessions


def test_gold_sorted_in_session_order(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    raw[0]["qa"][0]["evidence"] = ["D3:2", "D1:1", "D3:1", "D2:1"]
    ds = load_locomo(_write(tmp_path, raw))
    assert ds.questions[0].answer_session_ids == (
        "tiny-1:session_1",
        "tiny-1:session_2",
        "tiny-1:session_3",
    )


def test_sessions_ordered_numerically(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    conv = raw[0]["conversation"]
    for n in range(4, 11):
        conv[f"session_{n}"] = [{"speaker": "Maya", "dia_id": f"D{n}:1", "text": f"hi {n}"}]
        conv[f"session_{n}_date_time"] = f"1:00 pm on {n} May, 2023"
    ds = load_locomo(_write(tmp_path, raw))
    assert [s.session_id.split(":")[1] for s in ds.conversations[0].sessions] == [
        f"session_{n}" for n in range(1, 11)
    ]
    assert ds.questions[0].get_extra("last_session_date") == "1:00 pm on 10 May, 2023"


def test_gzip_input(tmp_path: Path, dataset: LocomoDataset) -> None:
    path = tmp_path / "locomo.json"
    path.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    assert load_locomo(path).questions == dataset.questions


# ----------------------------------------------------------------------------- bad input


def test_not_json(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{not json", encoding="utf-8")
    _assert_names(_error(path), path, "(file)", "(root)")


def test_bad_gzip(tmp_path: Path) -> None:
    path = tmp_path / "x.json.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00garbage")
    err = _error(path)
    _assert_names(err, path, "(file)", "(root)")
    assert "gzip" in str(err)


def test_wrong_top_level_type(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    path = _write(tmp_path, raw[0])
    _assert_names(_error(path), path, "(file)", "(root)")


def test_missing_field(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    del raw[1]["qa"][3]["evidence"]
    path = _write(tmp_path, raw)
    _assert_names(_error(path), path, "sample_id=tiny-2 (index 1)", "qa[3].evidence")


def test_missing_sample_id(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    del raw[1]["sample_id"]
    path = _write(tmp_path, raw)
    _assert_names(_error(path), path, "index 1", "sample_id")


def test_missing_turn_text(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    del raw[0]["conversation"]["session_2"][3]["text"]
    path = _write(tmp_path, raw)
    _assert_names(
        _error(path), path, "sample_id=tiny-1 (index 0)", "conversation.session_2[3].text"
    )


def test_wrong_type_category(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    raw[0]["qa"][5]["category"] = "4"
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "sample_id=tiny-1 (index 0)", "qa[5].category")
    assert "integer" in err.reason


def test_category_out_of_range(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    raw[0]["qa"][1]["category"] = 6
    path = _write(tmp_path, raw)
    _assert_names(_error(path), path, "sample_id=tiny-1 (index 0)", "qa[1].category")


def test_wrong_type_evidence_entry(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    raw[1]["qa"][0]["evidence"] = ["D1:2", 7]
    path = _write(tmp_path, raw)
    _assert_names(_error(path), path, "sample_id=tiny-2 (index 1)", "qa[0].evidence[1]")


def test_no_answer_at_all(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    del raw[0]["qa"][4]["adversarial_answer"]
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "sample_id=tiny-1 (index 0)", "qa[4].answer")
    assert "adversarial_answer" in err.reason


def test_missing_session_date(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    del raw[1]["conversation"]["session_2_date_time"]
    path = _write(tmp_path, raw)
    _assert_names(
        _error(path), path, "sample_id=tiny-2 (index 1)", "conversation.session_2_date_time"
    )


def test_duplicate_sample_id(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    raw[1]["sample_id"] = "tiny-1"
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "sample_id=tiny-1 (index 1)", "sample_id")
    assert "index 0" in err.reason


def test_duplicate_dia_id(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    raw[0]["conversation"]["session_3"][2]["dia_id"] = "D2:4"
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "sample_id=tiny-1 (index 0)", "conversation.session_3[2].dia_id")
    assert "session_2[3]" in err.reason
