"""Question translations mapped by ``question_id`` (LongMemEval-CN style).

A translation file (plain or gzipped JSON) is either a list of ``{question_id, question}``
objects (other fields ignored) or a ``{question_id: question}`` object. Only the question text
is replaced; haystacks, answers and gold ids stay as loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import FILE_RECORD, ROOT_FIELD, read_json
from engram_eval.data.records import Question
from engram_eval.errors import DataError

DEFAULT_SOURCE = "<translations>"


def load_question_translations(path: str | Path) -> dict[str, str]:
    """Read a translation file into ``question_id -> translated question``.

    Raises :class:`DataError` (file, record, field) for a wrong top-level type, an entry that
    is not an object, a missing or non-string ``question_id`` / ``question``, an empty
    translation, or a duplicate ``question_id``.
    """
    data = read_json(path, "question_id")
    if isinstance(data, dict):
        return _from_mapping(path, data)
    if isinstance(data, list):
        return _from_list(path, data)
    raise DataError(
        path,
        FILE_RECORD,
        ROOT_FIELD,
        f"expected a JSON list of {{question_id, question}} objects or an object, "
        f"got {type(data).__name__}",
    )


def _from_mapping(path: str | Path, data: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for qid, text in data.items():
        _check_text(path, f"question_id={qid}", qid, text)
        out[qid] = text
    return out


def _from_list(path: str | Path, data: list[Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    first_at: dict[str, int] = {}
    for index, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise DataError(
                path,
                f"index {index}",
                "(record)",
                f"expected an object, got {type(entry).__name__}",
            )
        qid = entry.get("question_id")
        if not isinstance(qid, str) or not qid:
            raise DataError(
                path, f"index {index}", "question_id", "missing or not a non-empty string"
            )
        record = f"question_id={qid} (index {index})"
        if qid in first_at:
            raise DataError(
                path,
                record,
                "question_id",
                f"duplicate question_id {qid!r}; first seen at index {first_at[qid]}",
            )
        first_at[qid] = index
        _check_text(path, record, "question", entry.get("question"))
        out[qid] = entry["question"]
    return out


def _check_text(path: str | Path, record: str, field: str, text: object) -> None:
    if not isinstance(text, str) or not text.strip():
        raise DataError(path, record, field, "translation must be a non-empty string")


def apply_translations(
    questions: Iterable[Question],
    mapping: Mapping[str, str],
    *,
    strict: bool = True,
    source: str | Path = DEFAULT_SOURCE,
) -> tuple[Question, ...]:
    """New :class:`Question` records with ``question`` replaced where ``mapping`` has the id.

    Questions without a translation are returned unchanged. With ``strict`` (the default) a
    mapping id that is not among ``questions`` raises :class:`DataError`; ``source`` names the
    translation file in that message.
    """
    questions = tuple(questions)
    if strict:
        known = {q.question_id for q in questions}
        unknown = [qid for qid in mapping if qid not in known]
        if unknown:
            shown = ", ".join(repr(u) for u in unknown[:5])
            more = f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""
            raise DataError(
                source,
                f"question_id={unknown[0]}",
                "question_id",
                f"{len(unknown)} translated question id(s) not in the dataset: {shown}{more}",
            )
    return tuple(
        replace(q, question=mapping[q.question_id]) if q.question_id in mapping else q
        for q in questions
    )
