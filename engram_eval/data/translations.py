"""Question translations mapped by ``question_id`` (LongMemEval-CN style).

A translation file (plain or gzipped) is either JSON — a list of ``{question_id, question}``
objects (other fields ignored) or a ``{question_id: question}`` object — or JSONL (a name
ending ``.jsonl`` or ``.jsonl.gz``): one ``{question_id, question}`` object per line, blank
lines skipped. Only the question text is replaced; haystacks, answers and gold ids stay as
loaded.

``engram-eval run --questions FILE`` uses :func:`plan_replacement` (refuse a selected question
the file lacks, or a file id the dataset lacks, unless ``--allow-missing``) and
:func:`replace_texts` on the questions as they are streamed to the retriever.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
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
    if str(path).endswith((".jsonl", ".jsonl.gz")):
        return _from_list(path, _read_jsonl(path), record="line")
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


def _read_jsonl(path: str | Path) -> list[Any]:
    """The values of a JSONL file, one per line (:func:`iter_json_lines`: bounded, every
    failure one error naming the line); a blank line is kept as a placeholder so that a
    value's position is its line number minus one (errors name ``line N``)."""
    from engram_eval.data._jsonio import iter_json_lines

    out: list[Any] = []
    try:
        for n, value in iter_json_lines(path, what="a translations file"):
            out.extend([_BLANK] * (n - 1 - len(out)))
            out.append(value)
    except FileNotFoundError as e:
        raise DataError(path, FILE_RECORD, ROOT_FIELD, f"cannot read file: {e}") from None
    return out


_BLANK = object()


def _from_list(path: str | Path, data: list[Any], record: str = "index") -> dict[str, str]:
    out: dict[str, str] = {}
    first_at: dict[str, int] = {}
    for index, entry in enumerate(data):
        if entry is _BLANK:
            continue
        if record == "line":
            index += 1
        if not isinstance(entry, dict):
            raise DataError(
                path,
                f"{record} {index}",
                "(record)",
                f"expected an object, got {type(entry).__name__}",
            )
        qid = entry.get("question_id")
        if not isinstance(qid, str) or not qid:
            raise DataError(
                path, f"{record} {index}", "question_id", "missing or not a non-empty string"
            )
        where = f"question_id={qid} ({record} {index})"
        if qid in first_at:
            raise DataError(
                path,
                where,
                "question_id",
                f"duplicate question_id {qid!r}; first seen at {record} {first_at[qid]}",
            )
        first_at[qid] = index
        _check_text(path, where, "question", entry.get("question"))
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


def plan_replacement(
    mapping: Mapping[str, str],
    dataset_ids: Iterable[str],
    selected_ids: Iterable[str],
    *,
    allow_missing: bool = False,
    source: str | Path = DEFAULT_SOURCE,
) -> dict[str, int]:
    """Check a ``--questions`` file against a run's questions and count what it replaces.

    ``missing``: selected questions the file has no text for; ``unknown``: file ids that
    are not questions of the dataset. Either one is a :class:`DataError` (naming the file and
    the first ids) unless ``allow_missing``; then a missing question keeps its original text
    and an unknown id is ignored. Returns ``{"entries", "replaced", "missing", "unknown"}``.
    """
    known = set(dataset_ids)
    selected = list(selected_ids)
    missing = [q for q in selected if q not in mapping]
    unknown = [q for q in mapping if q not in known]
    if not allow_missing:
        for ids, what in ((unknown, "question id(s) in the file are not in the dataset"),
                          (missing, "selected question(s) have no text in the file")):
            if ids:
                shown = ", ".join(repr(i) for i in ids[:5])
                more = f" (and {len(ids) - 5} more)" if len(ids) > 5 else ""
                raise DataError(source, f"question_id={ids[0]}", "question_id",
                                f"{len(ids)} {what}: {shown}{more}; pass --allow-missing to "
                                "keep the original text of missing questions and ignore "
                                "unknown ids")
    return {"entries": len(mapping), "replaced": len(selected) - len(missing),
            "missing": len(missing), "unknown": len(unknown)}


def replace_texts(questions: Iterable[Question], mapping: Mapping[str, str]
                  ) -> Iterator[Question]:
    """``questions`` as they come, each with its text replaced where ``mapping`` has its id
    (lazy: a streamed dataset stays streamed)."""
    for q in questions:
        yield replace(q, question=mapping[q.question_id]) if q.question_id in mapping else q
