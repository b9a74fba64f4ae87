"""LongMemEval loader (official release schema: oracle and S in memory; M streamed).

The file is a JSON list (plain or gzipped; gzip is detected by its magic bytes, not by the
extension) of question instances::

    question_id, question_type, question, answer (string or number), question_date,
    haystack_dates, haystack_session_ids, haystack_sessions[[{role, content, has_answer?}]],
    answer_session_ids

Every record is checked against ``engram_eval/schemas/longmemeval.schema.json`` and against the
cross-field rules below before anything is returned; the first problem in file order raises one
:class:`~engram_eval.errors.DataError` naming the file, the record
(``question_id=<id> (index N)``, or ``index N`` when the id is missing or not a string) and the
field (for example ``haystack_sessions[3][2].content``).

Cross-field rules:

* ``question_id`` is unique in the file;
* ``haystack_dates``, ``haystack_session_ids`` and ``haystack_sessions`` have equal lengths;
* a session id repeated inside one haystack must repeat the same turns. Identical repeats are
  collapsed to their first occurrence (each session is ranked once) and counted in the report.
  In the real S files all such repeats (10 questions of the dev split) carry identical turns but a
  *different date*; a differing date alone is therefore tolerated by default (the first
  occurrence's date is kept, and the repeat is counted in
  ``LoadReport.n_duplicate_entries_with_different_dates``). Pass
  ``allow_duplicate_date_mismatch=False`` to make it an error.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from engram_eval.data._jsonio import (
    FILE_RECORD,
    ROOT_FIELD,
    first_byte,
    first_error,
    iter_list_items,
    load_schema,
    read_json,
    record_validator,
    schema_error_to_data_error,
)
from engram_eval.data.records import Question, QuestionSet, Session, Turn
from engram_eval.errors import DataError

SCHEMA_NAME = "longmemeval.schema.json"
HAYSTACK_LISTS = ("haystack_dates", "haystack_sessions")


@dataclass(frozen=True)
class LoadReport:
    """What the loader saw and how it normalised it (all counts over the whole file).

    * ``n_sessions`` / ``n_turns``: session occurrences (summed over questions) after collapsing
      repeated ids, and their turns.
    * ``n_duplicate_session_entries``: haystack entries dropped because their session id had
      already appeared in the same haystack with identical turns;
      ``n_duplicate_entries_with_different_dates`` is the subset whose date differed from the
      kept first occurrence; ``questions_with_duplicates`` lists the affected questions.
    * ``n_abstention``: ``_abs`` questions.
    * ``n_without_answer_session_ids``: questions with an empty ``answer_session_ids``.
    * ``n_answer_sessions_without_has_answer``: questions where at least one answer session has
      no user turn with ``has_answer`` (an answer id absent from the haystack counts as such).
      These are the questions whose gold the official scorer relabels (``noans``).
    * ``n_answer_ids_not_in_haystack``: questions with an answer id that is not in the haystack.
    * ``by_type``: ``(question_type, count)`` pairs sorted by type.
    """

    n_questions: int
    n_sessions: int
    n_turns: int
    n_duplicate_session_entries: int
    n_duplicate_entries_with_different_dates: int
    questions_with_duplicates: tuple[str, ...]
    n_abstention: int
    n_without_answer_session_ids: int
    n_answer_sessions_without_has_answer: int
    n_answer_ids_not_in_haystack: int
    by_type: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class LongMemEvalDataset(QuestionSet):
    """A loaded LongMemEval file: its path, its questions in file order and the load report."""

    path: str
    questions: tuple[Question, ...]
    report: LoadReport


@dataclass(frozen=True)
class _Parsed:
    """One converted record plus what its conversion dropped."""

    question: Question
    n_duplicates: int
    n_duplicate_date_mismatch: int


def load_longmemeval(
    path: str | Path, *, allow_duplicate_date_mismatch: bool = True
) -> LongMemEvalDataset:
    """Load and validate a whole LongMemEval file (``.json`` or gzipped, any extension).

    Raises :class:`DataError` for the first invalid record; nothing partial is returned.
    """
    data = read_json(path, "question_id")
    records = _top_level_list(path, data)
    parse = _record_parser(path, allow_duplicate_date_mismatch)
    parsed = [parse(index, raw) for index, raw in enumerate(records)]
    return LongMemEvalDataset(
        path=str(path),
        questions=tuple(p.question for p in parsed),
        report=_build_report(parsed),
    )


def iter_longmemeval(
    path: str | Path, *, allow_duplicate_date_mismatch: bool = True
) -> Iterator[Question]:
    """Yield the questions of a LongMemEval file one by one, in file order, streaming.

    The file (plain or gzipped) is read incrementally with ``ijson``: one record is parsed,
    checked and converted at a time, so memory does not grow with the file (LongMemEval_M is
    2.7 GB). Every record goes through the same checks as :func:`load_longmemeval`
    (:func:`parse_record`), so a bad record raises the same :class:`DataError` — but only when
    the stream reaches it, after the questions before it were yielded.
    """
    parse = _record_parser(path, allow_duplicate_date_mismatch)
    p = Path(path)
    try:
        first = first_byte(p)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(p, FILE_RECORD, ROOT_FIELD, f"cannot read file: {exc}") from exc
    if first != b"[":
        # Not a list: the in-memory reader gives the exact message (JSON error or wrong kind).
        _top_level_list(path, read_json(path, "question_id"))
        return
    # Nesting and string limits are checked on the parse events, before memory grows.
    for index, raw in enumerate(iter_list_items(p, "question_id")):
        yield parse(index, raw).question


def _record_parser(
    path: str | Path, allow_duplicate_date_mismatch: bool
) -> Callable[[int, Any], _Parsed]:
    """:func:`parse_record` bound to one file: one validator and one duplicate-id table,
    shared by every record of the file (records must be passed in file order)."""
    validator = record_validator(load_schema(SCHEMA_NAME))
    seen: dict[str, int] = {}

    def parse(index: int, raw: Any) -> _Parsed:
        return parse_record(
            path,
            index,
            raw,
            validator,
            seen,
            allow_duplicate_date_mismatch=allow_duplicate_date_mismatch,
        )

    return parse


def record_name(raw: object, index: int) -> str:
    """``question_id=<id> (index N)``, or ``index N`` when the id is missing or not a string."""
    if isinstance(raw, Mapping):
        qid = raw.get("question_id")
        if isinstance(qid, str) and qid:
            return f"question_id={qid} (index {index})"
    return f"index {index}"


def parse_record(
    path: str | Path,
    index: int,
    raw: Any,
    validator: Draft202012Validator,
    seen: dict[str, int],
    *,
    allow_duplicate_date_mismatch: bool = True,
) -> _Parsed:
    """Validate one raw record and convert it to a :class:`Question`.

    ``seen`` maps question ids already loaded to their index; it is updated in place (this is
    what lets a streaming reader share the function).
    """
    record = record_name(raw, index)
    error = first_error(validator, raw)
    if error is not None:
        raise schema_error_to_data_error(path, record, error)
    qid: str = raw["question_id"]
    if qid in seen:
        raise DataError(
            path,
            record,
            "question_id",
            f"duplicate question_id {qid!r}; first seen at index {seen[qid]}",
        )
    seen[qid] = index
    _check_haystack_lengths(path, record, raw)
    sessions, n_dup, n_date = _sessions(
        path, record, raw, allow_duplicate_date_mismatch=allow_duplicate_date_mismatch
    )
    question = Question(
        question_id=qid,
        question_type=raw["question_type"],
        question=raw["question"],
        answer=str(raw["answer"]),
        question_date=raw["question_date"],
        sessions=sessions,
        answer_session_ids=tuple(raw["answer_session_ids"]),
        extra=_repeat_extra(raw["haystack_session_ids"]),
    )
    return _Parsed(question, n_dup, n_date)


def _repeat_extra(ids: Sequence[str]) -> tuple[tuple[str, object], ...]:
    """``(("haystack_entries", ((sid, n), ...)),)`` for session ids listed ``n > 1`` times in
    the haystack (first-seen order), else ``()``. The reference scorer indexes every haystack
    entry, so a repeated id takes ``n`` positions there (see ``protocols``)."""
    counts = Counter(ids)
    repeats = tuple((sid, counts[sid]) for sid in dict.fromkeys(ids) if counts[sid] > 1)
    return (("haystack_entries", repeats),) if repeats else ()


def _top_level_list(path: str | Path, data: Any) -> list[Any]:
    if not isinstance(data, list):
        kind = "object" if isinstance(data, dict) else type(data).__name__
        raise DataError(
            path,
            FILE_RECORD,
            ROOT_FIELD,
            f"expected a JSON list of question objects at the top level, got {kind}",
        )
    return data


def _check_haystack_lengths(path: str | Path, record: str, raw: Mapping[str, Any]) -> None:
    n_ids = len(raw["haystack_session_ids"])
    for name in HAYSTACK_LISTS:
        n = len(raw[name])
        if n != n_ids:
            raise DataError(
                path,
                record,
                name,
                f"has {n} entries but haystack_session_ids has {n_ids}",
            )


def _sessions(
    path: str | Path,
    record: str,
    raw: Mapping[str, Any],
    *,
    allow_duplicate_date_mismatch: bool,
) -> tuple[tuple[Session, ...], int, int]:
    """Sessions in first-seen order, with the number of dropped repeats (and date mismatches)."""
    ids: Sequence[str] = raw["haystack_session_ids"]
    dates: Sequence[str] = raw["haystack_dates"]
    turns_raw: Sequence[Sequence[Mapping[str, Any]]] = raw["haystack_sessions"]
    first_at: dict[str, int] = {}
    sessions: list[Session] = []
    n_dup = 0
    n_date = 0
    for j, sid in enumerate(ids):
        if sid not in first_at:
            first_at[sid] = j
            sessions.append(make_session(sid, dates[j], turns_raw[j]))
            continue
        i = first_at[sid]
        if turns_raw[j] != turns_raw[i]:
            raise DataError(
                path,
                record,
                f"haystack_sessions[{j}]",
                f"session id {sid!r} repeats haystack_session_ids[{i}] with different contents",
            )
        if dates[j] != dates[i]:
            if not allow_duplicate_date_mismatch:
                raise DataError(
                    path,
                    record,
                    f"haystack_dates[{j}]",
                    f"session id {sid!r} repeats haystack_session_ids[{i}] with a different date "
                    f"({dates[j]!r} vs {dates[i]!r})",
                )
            n_date += 1
        n_dup += 1
    return tuple(sessions), n_dup, n_date


def make_session(session_id: str, date: str, turns: Sequence[Mapping[str, Any]]) -> Session:
    """A :class:`Session` from schema-valid raw turns; ``has_answer`` defaults to False."""
    return Session(
        session_id=session_id,
        date=date,
        turns=tuple(
            Turn(
                role=t["role"],
                content=t["content"],
                index=k,
                has_answer=bool(t.get("has_answer", False)),
            )
            for k, t in enumerate(turns)
        ),
    )


def _lacks_user_has_answer(question: Question) -> bool:
    from engram_eval.data.records import has_user_evidence  # the one noans rule

    by_id = {s.session_id: s for s in question.sessions}
    for sid in question.answer_session_ids:
        session = by_id.get(sid)
        if session is None or not has_user_evidence(session):
            return True
    return False


def _build_report(parsed: Sequence[_Parsed]) -> LoadReport:
    questions = [p.question for p in parsed]
    types = Counter(q.question_type for q in questions)
    return LoadReport(
        n_questions=len(questions),
        n_sessions=sum(len(q.sessions) for q in questions),
        n_turns=sum(len(s.turns) for q in questions for s in q.sessions),
        n_duplicate_session_entries=sum(p.n_duplicates for p in parsed),
        n_duplicate_entries_with_different_dates=sum(p.n_duplicate_date_mismatch for p in parsed),
        questions_with_duplicates=tuple(p.question.question_id for p in parsed if p.n_duplicates),
        n_abstention=sum(q.is_abstention for q in questions),
        n_without_answer_session_ids=sum(not q.answer_session_ids for q in questions),
        n_answer_sessions_without_has_answer=sum(_lacks_user_has_answer(q) for q in questions),
        n_answer_ids_not_in_haystack=sum(
            not set(q.answer_session_ids) <= set(q.session_ids) for q in questions
        ),
        by_type=tuple(sorted(types.items())),
    )
