"""Tests for engram_eval.data.translations."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from engram_eval.data import apply_translations, load_longmemeval, load_question_translations
from engram_eval.errors import DataError

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_tiny.json"


def _write(tmp_path: Path, data: Any, name: str = "tr.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _error(path: Path) -> DataError:
    with pytest.raises(DataError) as info:
        load_question_translations(path)
    return info.value


def test_load_list_form(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"question_id": "lme_t01", "question": "我领养的小狗是什么品种？", "note": "ignored"},
            {"question_id": "lme_t08", "question": "我三周前买了什么？"},
        ],
    )
    assert load_question_translations(path) == {
        "lme_t01": "我领养的小狗是什么品种？",
        "lme_t08": "我三周前买了什么？",
    }


def test_load_dict_form_and_gzip(tmp_path: Path) -> None:
    path = tmp_path / "tr.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"lme_t02": "Lisboa?"}).encode()))
    assert load_question_translations(path) == {"lme_t02": "Lisboa?"}


def test_apply_translations() -> None:
    questions = load_longmemeval(FIXTURE).questions
    out = apply_translations(questions, {"lme_t01": "Q1-cn", "lme_t12": "Q12-cn"})
    assert isinstance(out, tuple) and len(out) == len(questions)
    assert out[0].question == "Q1-cn" and out[-1].question == "Q12-cn"
    assert out[0].sessions is questions[0].sessions
    assert out[0].answer == questions[0].answer
    assert out[0].answer_session_ids == questions[0].answer_session_ids
    assert out[1] is questions[1]  # untranslated questions are unchanged
    assert questions[0].question == "What breed is the puppy I adopted?"  # inputs untouched


def test_apply_translations_strict_unknown_id() -> None:
    questions = load_longmemeval(FIXTURE).questions
    with pytest.raises(DataError) as info:
        apply_translations(questions, {"lme_t01": "x", "nope": "y"}, source="cn.json")
    err = info.value
    assert err.path == "cn.json" and "cn.json" in str(err)
    assert err.record == "question_id=nope" and err.field == "question_id"
    assert "'nope'" in err.reason


def test_apply_translations_lenient_ignores_unknown() -> None:
    questions = load_longmemeval(FIXTURE).questions
    out = apply_translations(questions, {"nope": "y", "lme_t03": "z"}, strict=False)
    assert out[2].question == "z"


def test_not_json(tmp_path: Path) -> None:
    path = tmp_path / "tr.json"
    path.write_text("[{", encoding="utf-8")
    err = _error(path)
    assert (err.path, err.record, err.field) == (str(path), "(file)", "(root)")


def test_wrong_top_level_type(tmp_path: Path) -> None:
    path = _write(tmp_path, "just a string")
    err = _error(path)
    assert (err.path, err.record, err.field) == (str(path), "(file)", "(root)")


def test_entry_missing_question(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"question_id": "a", "question": "x"}, {"question_id": "b"}])
    err = _error(path)
    assert (err.record, err.field) == ("question_id=b (index 1)", "question")
    assert str(path) in str(err)


def test_entry_missing_id(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"question": "x"}])
    err = _error(path)
    assert (err.record, err.field) == ("index 0", "question_id")


def test_entry_not_object(tmp_path: Path) -> None:
    path = _write(tmp_path, [["a", "b"]])
    err = _error(path)
    assert (err.record, err.field) == ("index 0", "(record)")


def test_duplicate_id(tmp_path: Path) -> None:
    entries = [{"question_id": "a", "question": "x"}, {"question_id": "a", "question": "y"}]
    path = _write(tmp_path, entries)
    err = _error(path)
    assert (err.record, err.field) == ("question_id=a (index 1)", "question_id")
    assert "index 0" in err.reason


def test_dict_value_wrong_type(tmp_path: Path) -> None:
    path = _write(tmp_path, {"a": "x", "b": 3})
    err = _error(path)
    assert (err.record, err.field) == ("question_id=b", "b")
