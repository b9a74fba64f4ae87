"""Tests for engram_eval.data.longmemeval on the hand-written fixture and on bad files."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from engram_eval.data import LongMemEvalDataset, iter_longmemeval, load_longmemeval
from engram_eval.data.records import Question
from engram_eval.errors import DataError

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_tiny.json"


@pytest.fixture(scope="module")
def dataset() -> LongMemEvalDataset:
    return load_longmemeval(FIXTURE)


@pytest.fixture()
def raw() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return data


def _write(tmp_path: Path, data: Any, name: str = "bad.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _write_gz(tmp_path: Path, data: Any, name: str = "bad.json.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps(data).encode("utf-8")))
    return path


def _error(path: Path) -> DataError:
    with pytest.raises(DataError) as info:
        load_longmemeval(path)
    return info.value


def _assert_names(err: DataError, path: Path, record: str, field: str) -> None:
    """The message names the file, the record and the field."""
    msg = str(err)
    assert err.path == str(path) and str(path) in msg
    assert err.record == record and record in msg
    assert err.field == field and field in msg


# ----------------------------------------------------------------------------- happy path


def test_counts(dataset: LongMemEvalDataset) -> None:
    r = dataset.report
    assert r.n_questions == len(dataset) == 12
    assert r.n_sessions == 109
    assert r.n_turns == 410
    assert r.n_duplicate_session_entries == 2
    assert r.n_duplicate_entries_with_different_dates == 1
    assert r.questions_with_duplicates == ("lme_t09", "lme_t12")
    assert r.n_abstention == 2
    assert r.n_without_answer_session_ids == 0
    assert r.n_answer_sessions_without_has_answer == 2
    assert r.n_answer_ids_not_in_haystack == 0
    assert dict(r.by_type) == {
        "single-session-user": 3,
        "single-session-assistant": 1,
        "single-session-preference": 1,
        "multi-session": 2,
        "knowledge-update": 2,
        "temporal-reasoning": 3,
    }


def test_first_record(dataset: LongMemEvalDataset) -> None:
    q = dataset.questions[0]
    assert q.question_id == "lme_t01"
    assert q.question_type == "single-session-user"
    assert q.question == "What breed is the puppy I adopted?"
    assert q.answer == "Border collie"
    assert q.question_date == "2023/05/28 (Sun) 10:05"
    assert q.answer_session_ids == ("answer_t01_1",)
    assert len(q.sessions) == 10
    assert q.extra == ()
    assert not q.is_abstention
    first = q.sessions[0]
    assert first.session_id == "answer_t07_1"
    assert first.date == "2023/02/20 (Mon) 18:37"
    gold = next(s for s in q.sessions if s.session_id == "answer_t01_1")
    assert [t.index for t in gold.turns] == [0, 1, 2, 3]
    assert [t.role for t in gold.turns] == ["user", "assistant", "user", "assistant"]
    assert [t.has_answer for t in gold.turns] == [True, False, False, False]
    assert "border collie" in gold.turns[0].content
    # distractor turns omit has_answer in the file: default False, turn_id empty
    filler = q.sessions[1]
    assert filler.session_id == "sharegpt_Hk2PzRe_3"
    assert all(not t.has_answer and t.turn_id == "" for t in filler.turns)


def test_middle_record_number_answer(dataset: LongMemEvalDataset) -> None:
    q = dataset.questions[3]
    assert q.question_id == "lme_t04"
    assert q.question_type == "multi-session"
    assert q.answer == "3"  # a JSON number in the file
    assert q.answer_session_ids == ("answer_t04_1", "answer_t04_2", "answer_t04_3")
    assert len(q.sessions) == 10
    assert set(q.answer_session_ids) <= set(q.session_ids)


def test_last_record_identical_duplicate_collapsed(dataset: LongMemEvalDataset) -> None:
    q = dataset.questions[-1]
    assert q.question_id == "lme_t12"
    assert q.answer == "Crumb & Co."
    assert q.question_date == "2023/05/15 (Mon) 13:40"
    assert q.answer_session_ids == ("answer_t12_1",)
    assert len(q.sessions) == 9  # 10 haystack entries, one repeated
    assert q.session_ids.count("sharegpt_Hk2PzRe_3") == 1
    assert len(set(q.session_ids)) == len(q.session_ids)


def test_duplicate_with_different_date_keeps_first(dataset: LongMemEvalDataset) -> None:
    q = dataset.by_id()["lme_t09"]
    dup = [s for s in q.sessions if s.session_id == "sharegpt_Zr8NcDf_0"]
    assert len(dup) == 1
    assert dup[0].date == "2023/04/05 (Wed) 14:10"


def test_assistant_only_evidence(dataset: LongMemEvalDataset) -> None:
    q = dataset.by_id()["lme_t02"]
    assert q.question_type == "single-session-assistant"
    (gold,) = [s for s in q.sessions if s.session_id == "answer_t02_1"]
    assert not any(t.has_answer for t in gold.turns if t.role == "user")
    assert any(t.has_answer for t in gold.turns if t.role == "assistant")


def test_abstention_and_by_id(dataset: LongMemEvalDataset) -> None:
    ids = dataset.by_id()
    assert list(ids) == [q.question_id for q in dataset.questions]
    abstentions = [q.question_id for q in dataset if q.is_abstention]
    assert abstentions == ["lme_t10_abs", "lme_t11_abs"]
    assert isinstance(ids["lme_t11_abs"], Question)


def test_temporal_fixture_window(dataset: LongMemEvalDataset) -> None:
    q = dataset.by_id()["lme_t08"]
    assert q.question == "What did I buy 3 weeks ago?"
    (gold,) = [s for s in q.sessions if s.session_id in q.answer_session_ids]
    assert gold.date == "2023/05/20 (Sat) 02:21"
    assert q.question_date == "2023/06/10 (Sat) 18:00"


def test_every_haystack_date_precedes_question(dataset: LongMemEvalDataset) -> None:
    for q in dataset:
        assert all(s.date < q.question_date for s in q.sessions), q.question_id


def test_gzip_detected_by_magic_not_extension(tmp_path: Path, dataset: LongMemEvalDataset) -> None:
    data = FIXTURE.read_bytes()
    gz_named_json = tmp_path / "tiny.json"
    gz_named_json.write_bytes(gzip.compress(data))
    plain_named_gz = tmp_path / "tiny.json.gz"
    plain_named_gz.write_bytes(data)
    a = load_longmemeval(gz_named_json)
    b = load_longmemeval(plain_named_gz)
    assert a.questions == b.questions == dataset.questions
    assert a.report == dataset.report
    assert a.path == str(gz_named_json)


def test_iter_longmemeval_yields_in_order(dataset: LongMemEvalDataset) -> None:
    assert tuple(iter_longmemeval(FIXTURE)) == dataset.questions


def test_dataset_is_frozen(dataset: LongMemEvalDataset) -> None:
    with pytest.raises(AttributeError):
        dataset.path = "x"  # type: ignore[misc]


def test_duplicate_date_mismatch_can_be_strict(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    path = _write(tmp_path, raw)
    with pytest.raises(DataError) as info:
        load_longmemeval(path, allow_duplicate_date_mismatch=False)
    _assert_names(info.value, path, "question_id=lme_t09 (index 8)", "haystack_dates[8]")


# ----------------------------------------------------------------------------- bad input


def test_not_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[{"question_id": "a",', encoding="utf-8")
    err = _error(path)
    _assert_names(err, path, "(file)", "(root)")
    assert "not valid JSON" in str(err)


def test_bad_gzip(tmp_path: Path) -> None:
    path = tmp_path / "broken.json.gz"
    path.write_bytes(gzip.compress(FIXTURE.read_bytes())[:200])  # truncated stream
    err = _error(path)
    _assert_names(err, path, "(file)", "(root)")
    assert "gzip" in str(err)


def test_gzip_of_garbage_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "garbage.json.gz"
    path.write_bytes(gzip.compress(b"\x00\x01 not json"))
    err = _error(path)
    _assert_names(err, path, "(file)", "(root)")


def test_wrong_top_level_type(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    path = _write(tmp_path, {"questions": raw})
    err = _error(path)
    _assert_names(err, path, "(file)", "(root)")
    assert "list" in err.reason and "object" in err.reason


def test_record_not_an_object(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    path = _write(tmp_path, [*raw[:2], "oops"])
    err = _error(path)
    _assert_names(err, path, "index 2", "(record)")


def test_missing_field(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    del raw[4]["answer_session_ids"]
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "question_id=lme_t05 (index 4)", "answer_session_ids")
    assert "missing" in err.reason


def test_missing_question_id_names_index(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    del raw[2]["question_id"]
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "index 2", "question_id")


def test_missing_turn_content(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    del raw[0]["haystack_sessions"][3][2]["content"]
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "question_id=lme_t01 (index 0)", "haystack_sessions[3][2].content")


def test_wrong_type(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    raw[6]["haystack_sessions"][1][0]["has_answer"] = "yes"
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "question_id=lme_t07 (index 6)", "haystack_sessions[1][0].has_answer")
    assert "boolean" in err.reason and "string" in err.reason


def test_wrong_type_answer(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    raw[1]["answer"] = ["Alfama"]
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "question_id=lme_t02 (index 1)", "answer")


def test_non_string_question_id(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    raw[3]["question_id"] = 42
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "index 3", "question_id")


def test_duplicate_question_id(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    raw[7]["question_id"] = "lme_t02"
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "question_id=lme_t02 (index 7)", "question_id")
    assert "index 1" in err.reason  # the earlier occurrence


@pytest.mark.parametrize("name", ["haystack_dates", "haystack_sessions"])
def test_mismatched_haystack_lengths(tmp_path: Path, raw: list[dict[str, Any]], name: str) -> None:
    raw[5][name].pop()
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "question_id=lme_t06 (index 5)", name)
    assert "8 entries" in err.reason and "9" in err.reason


def test_repeated_session_with_different_contents(
    tmp_path: Path, raw: list[dict[str, Any]]
) -> None:
    rec = raw[11]
    j = [i for i, s in enumerate(rec["haystack_session_ids"]) if s == "sharegpt_Hk2PzRe_3"][1]
    rec["haystack_sessions"][j] = copy.deepcopy(rec["haystack_sessions"][j])
    rec["haystack_sessions"][j][0]["content"] += " (edited)"
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "question_id=lme_t12 (index 11)", f"haystack_sessions[{j}]")
    assert "sharegpt_Hk2PzRe_3" in err.reason and "different contents" in err.reason


def test_first_bad_record_in_file_order_wins(tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    raw[9]["question"] = None
    raw[2]["question_date"] = 20230501
    path = _write(tmp_path, raw)
    err = _error(path)
    _assert_names(err, path, "question_id=lme_t03 (index 2)", "question_date")


def test_iter_streams_then_fails_on_a_corrupt_record_with_the_in_memory_message(
        tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    """The streamed reader yields the good records before a corrupt one, then raises exactly
    the error the in-memory loader raises for the whole file (plain and gzipped)."""
    raw[6]["haystack_dates"] = "2023/05/01"
    for path in (_write(tmp_path, raw), _write_gz(tmp_path, raw)):
        whole = _error(path)
        got = []
        with pytest.raises(DataError) as info:
            for q in iter_longmemeval(path):
                got.append(q.question_id)
        assert got == [r["question_id"] for r in raw[:6]]
        assert str(info.value) == str(whole)
        _assert_names(info.value, path, "question_id=lme_t07 (index 6)", "haystack_dates")


def test_iter_matches_the_in_memory_loader_plain_and_gzipped(
        tmp_path: Path, raw: list[dict[str, Any]]) -> None:
    plain = _write(tmp_path, raw)
    gz = _write_gz(tmp_path, raw)
    whole = load_longmemeval(plain).questions
    assert tuple(iter_longmemeval(plain)) == whole
    assert tuple(iter_longmemeval(gz)) == whole
    # numbers stay numbers of the same type (ijson would give Decimal without use_float)
    raw[0]["answer"] = 2.5
    p2 = _write(tmp_path, raw, name="num.json")
    assert next(iter(iter_longmemeval(p2))).answer == load_longmemeval(p2).questions[0].answer


@pytest.mark.parametrize("bad", ['{"a": 1}', '"text"', "[1, 2", ""])
def test_iter_bad_top_level_gives_the_in_memory_message(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(bad, encoding="utf-8")
    whole = _error(path)
    with pytest.raises(DataError) as info:
        list(iter_longmemeval(path))
    if bad == "[1, 2":  # the stream reaches the first record before the syntax error
        assert "index 0" in str(info.value) or "not valid JSON" in str(info.value)
    else:
        assert str(info.value) == str(whole)


def test_iter_memory_does_not_grow_with_the_file(tmp_path: Path,
                                                 raw: list[dict[str, Any]]) -> None:
    """Peak traced memory while streaming 8x the records stays near that of 1x (a loader
    that parses the file whole would need about 8x)."""
    import tracemalloc

    def peak(n_copies: int) -> int:
        recs = []
        for c in range(n_copies):
            for r in raw:
                recs.append({**r, "question_id": f"{r['question_id']}_c{c}"})
        path = _write(tmp_path, recs, name=f"big{n_copies}.json")
        tracemalloc.start()
        n = sum(1 for _ in iter_longmemeval(path))
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert n == len(recs)
        return top

    small, big = peak(4), peak(32)
    assert big < 2 * small, (small, big)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    err = _error(path)
    _assert_names(err, path, "(file)", "(root)")
