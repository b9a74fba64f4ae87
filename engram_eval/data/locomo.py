"""LoCoMo loader (``locomo10.json`` layout, and LoCoMo-shaped sets).

The file is a JSON list of conversations (plain or gzipped, detected by magic bytes)::

    {sample_id, conversation: {speaker_a, speaker_b, session_N: [{speaker, dia_id, text,
     blip_caption?, img_url?, ...}], session_N_date_time}, qa: [{question, answer |
     adversarial_answer, evidence: [dia_id, ...], category}], ...}

Conversion (one corpus per conversation, shared by all of its QA items):

* **Sessions.** One :class:`Session` per ``session_N`` list, in numeric order of ``N``, with
  ``session_id = "{sample_id}:session_{N}"`` (e.g. ``conv-26:session_3``; unique across
  conversations because ``sample_id`` is unique) and ``date`` = the ``session_N_date_time``
  string unchanged (e.g. ``"1:56 pm on 8 May, 2023"``). ``session_N_date_time`` keys without a
  ``session_N`` list (conv-26 has 16 of them) are ignored.
* **Turns.** ``role`` = the speaker's name (LoCoMo has no user/assistant roles, so use
  ``Session.text()`` rather than ``user_text``), ``content`` = ``text``, followed by
  ``" [image: <blip_caption>]"`` when the turn shares an image with a caption, ``turn_id`` =
  ``dia_id``, ``index`` = position in the session, ``has_answer`` = False (evidence is
  per question; it is kept in ``Question.extra``).
* **Questions.** QA item ``i`` (0-based position in ``qa``) becomes ``question_id =
  "{sample_id}:q{i}"``, ``question_type = str(category)``, ``answer`` = ``answer`` if present
  else ``adversarial_answer`` (as a string; two category-5 items in locomo10 carry both),
  ``question_date`` = ``""``: LoCoMo gives no question date, and the last session's date
  is *not* used in its place (a relative expression such as "last week" would then be
  resolved against a date nobody asked on); the last session's date is kept in ``extra`` as
  ``last_session_date`` for readers that want it, ``sessions`` = all of the
  conversation's sessions, ``answer_session_ids`` = the sessions holding the resolved evidence
  turns (unique, in session order). ``extra`` (sorted by key): ``adversarial`` (category == 5),
  ``adversarial_answer`` (only when present), ``category`` (int), ``conversation_id``
  (sample_id), ``evidence`` (the raw strings), ``evidence_dia_ids`` (resolved canonical ids), ``last_session_date``.

Evidence parsing is lenient where the intent is clear: each raw string is split on ``;``, ``,``
and whitespace (``'D8:6; D9:17'``, ``'D9:1 D4:4 D4:6'``), a stray colon after ``D`` is dropped
(``'D:11:26'`` -> ``D11:26``) and leading zeros are removed (``'D30:05'`` -> ``D30:5``). A piece
that still does not look like ``D<session>:<turn>`` (``'D'``) or names no turn of the
conversation is *unresolvable*: counted and listed in the report, never silently dropped.

Counting, and how it relates to the dataset README (6 malformed, 9 unresolvable, 4 items
without evidence on locomo10):

* ``n_malformed_evidence_ids`` (6): raw strings that are not a single ``D<digits>:<digits>``
  token: three space-joined lists, ``'D8:6; D9:17'``, ``'D:11:26'``, ``'D'``.
* ``n_noncanonical_evidence_ids`` (1): well-shaped raw strings that only resolve after removing
  leading zeros (``'D30:05'``). Strings that needed any repair = malformed + noncanonical = 7.
* ``n_evidence_ids_unmatched_verbatim`` (9): raw strings that are not literally a ``dia_id`` of
  their conversation -- this is the README's "9 do not resolve" (the 6 malformed, ``'D30:05'``
  and the two genuinely missing turns ``D10:19`` in conv-42 and ``D4:36`` in conv-47).
* ``n_unresolvable_evidence_ids`` (3): pieces that still resolve to no turn *after* lenient
  parsing: ``D10:19``, ``D4:36`` and the bare ``'D'``.
* ``n_items_empty_evidence`` (4): items whose evidence list is empty (README's "4 items have no
  evidence"); ``n_items_no_resolved_evidence`` (0 on locomo10): items with a non-empty list of
  which nothing resolves. These two are disjoint; ``n_items_without_gold`` is their sum.
  Such items are kept, with empty ``answer_session_ids``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import (
    FILE_RECORD,
    ROOT_FIELD,
    first_error,
    load_schema,
    read_json,
    record_validator,
    schema_error_to_data_error,
)
from engram_eval.data.dates import read_date
from engram_eval.data.records import Question, QuestionSet, Session, Turn
from engram_eval.errors import DataError

SCHEMA_NAME = "locomo.schema.json"
_SESSION_KEY = re.compile(r"session_(\d+)")
_WELL_FORMED = re.compile(r"D\d+:\d+")
_LENIENT = re.compile(r"[Dd]:?(\d+):(\d+)")
_SPLIT = re.compile(r"[;,\s]+")


@dataclass(frozen=True)
class LocomoReport:
    """Counts over the whole file; see the module docstring for the evidence definitions.

    ``malformed_evidence`` lists ``(question_id, raw string)`` for malformed and noncanonical
    strings; ``unresolvable_evidence`` lists ``(question_id, piece)`` for pieces that resolve to
    no turn; ``items_without_gold`` lists the question ids with empty ``answer_session_ids``.
    ``by_category`` is ``(category, count)`` sorted by category.
    """

    n_conversations: int
    n_sessions: int
    n_turns: int
    n_questions: int
    by_category: tuple[tuple[int, int], ...]
    n_with_adversarial_answer: int
    n_evidence_ids: int
    n_malformed_evidence_ids: int
    n_noncanonical_evidence_ids: int
    n_evidence_ids_unmatched_verbatim: int
    n_unresolvable_evidence_ids: int
    n_items_empty_evidence: int
    n_items_no_resolved_evidence: int
    n_items_without_gold: int
    n_items_with_unresolvable_evidence: int
    malformed_evidence: tuple[tuple[str, str], ...]
    unresolvable_evidence: tuple[tuple[str, str], ...]
    items_without_gold: tuple[str, ...]


@dataclass(frozen=True)
class LocomoConversation:
    """One conversation: its id, speakers and sessions (the corpus of its questions)."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]


@dataclass(frozen=True)
class LocomoDataset(QuestionSet):
    """A loaded LoCoMo file: conversations, QA items as questions (file order), report."""

    path: str
    conversations: tuple[LocomoConversation, ...]
    questions: tuple[Question, ...]
    report: LocomoReport


@dataclass(frozen=True)
class EvidenceRef:
    """One raw evidence string after lenient parsing.

    ``pieces`` are the tokens it was split into; ``canonical`` holds ``D<s>:<t>`` for each
    piece that parses (None otherwise).
    """

    raw: str
    pieces: tuple[str, ...]
    canonical: tuple[str | None, ...]

    @property
    def malformed(self) -> bool:
        """Not a single ``D<digits>:<digits>`` token."""
        return _WELL_FORMED.fullmatch(self.raw) is None

    @property
    def noncanonical(self) -> bool:
        """Well shaped, but differs from its canonical form (leading zeros)."""
        return not self.malformed and self.canonical != (self.raw,)


def parse_evidence(raw: str) -> EvidenceRef:
    """Leniently parse one raw evidence string (see the module docstring)."""
    pieces = tuple(p for p in _SPLIT.split(raw.strip()) if p)
    return EvidenceRef(raw, pieces, tuple(canonical_dia_id(p) for p in pieces))


def canonical_dia_id(text: str) -> str | None:
    """``'D:11:26'`` -> ``'D11:26'``, ``'D30:05'`` -> ``'D30:5'``; None when not an id."""
    m = _LENIENT.fullmatch(text)
    if m is None:
        return None
    return f"D{int(m.group(1))}:{int(m.group(2))}"


@dataclass
class _Tally:
    """Mutable counters used while loading (local to one load call)."""

    n_evidence: int = 0
    n_malformed: int = 0
    n_noncanonical: int = 0
    n_unmatched_verbatim: int = 0
    n_empty: int = 0
    n_no_resolved: int = 0
    n_with_unresolvable: int = 0
    malformed: list[tuple[str, str]] = field(default_factory=list)
    unresolvable: list[tuple[str, str]] = field(default_factory=list)
    without_gold: list[str] = field(default_factory=list)


def load_locomo(path: str | Path) -> LocomoDataset:
    """Load and validate a LoCoMo file; raises :class:`DataError` naming file, record, field.

    Records are named ``sample_id=<id> (index N)`` (or ``index N``); QA problems name the
    field ``qa[i]...``. Nothing partial is returned.
    """
    data = read_json(path, "sample_id")
    if not isinstance(data, list):
        kind = "object" if isinstance(data, dict) else type(data).__name__
        raise DataError(
            path,
            FILE_RECORD,
            ROOT_FIELD,
            f"expected a JSON list of conversation objects at the top level, got {kind}",
        )
    validator = record_validator(load_schema(SCHEMA_NAME))
    tally = _Tally()
    conversations: list[LocomoConversation] = []
    questions: list[Question] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(data):
        record = record_name(raw, index)
        error = first_error(validator, raw)
        if error is not None:
            raise schema_error_to_data_error(path, record, error)
        sample_id: str = raw["sample_id"]
        if sample_id in seen:
            raise DataError(
                path,
                record,
                "sample_id",
                f"duplicate sample_id {sample_id!r}; first seen at index {seen[sample_id]}",
            )
        seen[sample_id] = index
        conv = make_conversation(path, record, raw)
        conversations.append(conv)
        questions.extend(_questions(path, record, raw, conv, tally))
    return LocomoDataset(
        path=str(path),
        conversations=tuple(conversations),
        questions=tuple(questions),
        report=_report(conversations, questions, tally),
    )


def record_name(raw: object, index: int) -> str:
    """``sample_id=<id> (index N)``, or ``index N`` when the id is missing or not a string."""
    if isinstance(raw, Mapping):
        sid = raw.get("sample_id")
        if isinstance(sid, str) and sid:
            return f"sample_id={sid} (index {index})"
    return f"index {index}"


def turn_content(turn: Mapping[str, Any]) -> str:
    """The turn text, with ``" [image: <caption>]"`` appended when it has a BLIP caption."""
    caption = turn.get("blip_caption")
    if caption:
        return f"{turn['text']} [image: {caption}]"
    return str(turn["text"])


def session_numbers(conversation: Mapping[str, Any]) -> list[int]:
    """The ``N`` of every ``session_N`` list, ascending."""
    nums = []
    for key in conversation:
        m = _SESSION_KEY.fullmatch(key)
        if m is not None:
            nums.append(int(m.group(1)))
    return sorted(nums)


def make_conversation(path: str | Path, record: str, raw: Mapping[str, Any]) -> LocomoConversation:
    """Build the sessions of one schema-valid conversation record."""
    sample_id: str = raw["sample_id"]
    conv: Mapping[str, Any] = raw["conversation"]
    sessions: list[Session] = []
    for n in session_numbers(conv):
        key = f"session_{n}"
        date = read_date(path, record, f"conversation.{key}_date_time",
                         conv.get(f"{key}_date_time"), required=True, of=f"conversation.{key}")
        turns = tuple(
            Turn(role=t["speaker"], content=turn_content(t), index=k, turn_id=t["dia_id"])
            for k, t in enumerate(conv[key])
        )
        sessions.append(Session(session_id=f"{sample_id}:{key}", date=date, turns=turns))
    if not sessions:
        raise DataError(path, record, "conversation", "conversation has no session_N lists")
    _check_unique_dia_ids(path, record, sessions)
    return LocomoConversation(
        sample_id=sample_id,
        speaker_a=conv["speaker_a"],
        speaker_b=conv["speaker_b"],
        sessions=tuple(sessions),
    )


def _check_unique_dia_ids(path: str | Path, record: str, sessions: Sequence[Session]) -> None:
    where: dict[str, str] = {}
    for s in sessions:
        key = s.session_id.split(":", 1)[1]
        for t in s.turns:
            if t.turn_id in where:
                raise DataError(
                    path,
                    record,
                    f"conversation.{key}[{t.index}].dia_id",
                    f"dia_id {t.turn_id!r} already used in conversation.{where[t.turn_id]}",
                )
            where[t.turn_id] = f"{key}[{t.index}]"


def dia_index(sessions: Sequence[Session]) -> dict[str, tuple[str, int]]:
    """Map every turn's dia_id (raw and canonical) to ``(session_id, session position)``."""
    out: dict[str, tuple[str, int]] = {}
    for pos, s in enumerate(sessions):
        for t in s.turns:
            out[t.turn_id] = (s.session_id, pos)
            canon = canonical_dia_id(t.turn_id)
            if canon is not None:
                out.setdefault(canon, (s.session_id, pos))
    return out


def _questions(
    path: str | Path,
    record: str,
    raw: Mapping[str, Any],
    conv: LocomoConversation,
    tally: _Tally,
) -> list[Question]:
    index = dia_index(conv.sessions)
    verbatim = {t.turn_id for s in conv.sessions for t in s.turns}
    last_session_date = conv.sessions[-1].date
    out = []
    for i, item in enumerate(raw["qa"]):
        qid = f"{conv.sample_id}:q{i}"
        answer = item.get("answer", item.get("adversarial_answer"))
        if answer is None:
            raise DataError(
                path,
                record,
                f"qa[{i}].answer",
                "QA item has neither 'answer' nor 'adversarial_answer'",
            )
        gold, resolved = _resolve(qid, item["evidence"], index, verbatim, tally)
        category: int = item["category"]
        extra: list[tuple[str, object]] = [
            ("adversarial", category == 5),
            ("category", category),
            ("conversation_id", conv.sample_id),
            ("evidence", tuple(item["evidence"])),
            ("evidence_dia_ids", resolved),
            ("last_session_date", last_session_date),
        ]
        if "adversarial_answer" in item:
            extra.append(("adversarial_answer", str(item["adversarial_answer"])))
        out.append(
            Question(
                question_id=qid,
                question_type=str(category),
                question=item["question"],
                answer=str(answer),
                question_date="",
                sessions=conv.sessions,
                answer_session_ids=gold,
                extra=tuple(sorted(extra, key=lambda kv: kv[0])),
            )
        )
    return out


@dataclass(frozen=True)
class ResolvedEvidence:
    """One QA item's evidence resolved against its conversation (:func:`resolve_evidence`):
    ``gold`` the sessions holding a resolved turn (session order), ``dia_ids`` the resolved
    canonical turn ids (first-seen order), ``unresolved`` the pieces naming no turn."""

    gold: tuple[str, ...]
    dia_ids: tuple[str, ...]
    unresolved: tuple[str, ...]


def resolve_evidence(question_id: str, evidence: Sequence[str],
                     sessions: Sequence[Session]) -> ResolvedEvidence:
    """Resolve raw evidence strings against ``sessions`` exactly as the loader does (lenient
    parsing, see the module docstring); used for corrected evidence (a gold overlay)."""
    tally = _Tally()
    verbatim = {t.turn_id for s in sessions for t in s.turns}
    gold, resolved = _resolve(question_id, evidence, dia_index(sessions), verbatim, tally)
    return ResolvedEvidence(gold, resolved, tuple(piece for _, piece in tally.unresolvable))


def _resolve(
    qid: str,
    evidence: Sequence[str],
    index: Mapping[str, tuple[str, int]],
    verbatim: set[str],
    tally: _Tally,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Gold session ids (in session order) and resolved canonical dia_ids for one QA item."""
    hits: dict[str, int] = {}
    resolved: list[str] = []
    n_bad = 0
    for raw in evidence:
        ref = parse_evidence(raw)
        tally.n_evidence += 1
        if raw not in verbatim:
            tally.n_unmatched_verbatim += 1
        if ref.malformed:
            tally.n_malformed += 1
            tally.malformed.append((qid, raw))
        elif ref.noncanonical:
            tally.n_noncanonical += 1
            tally.malformed.append((qid, raw))
        for piece, canon in zip(ref.pieces, ref.canonical, strict=True):
            target = index.get(piece) or (index.get(canon) if canon else None)
            if target is None:
                n_bad += 1
                tally.unresolvable.append((qid, piece))
                continue
            hits[target[0]] = target[1]
            name = canon or piece
            if name not in resolved:
                resolved.append(name)
        if not ref.pieces:
            n_bad += 1
            tally.unresolvable.append((qid, raw))
    if not evidence:
        tally.n_empty += 1
    elif not hits:
        tally.n_no_resolved += 1
    if n_bad:
        tally.n_with_unresolvable += 1
    if not hits:
        tally.without_gold.append(qid)
    gold = tuple(sid for sid, _ in sorted(hits.items(), key=lambda kv: kv[1]))
    return gold, tuple(resolved)


def _report(
    conversations: Sequence[LocomoConversation], questions: Sequence[Question], tally: _Tally
) -> LocomoReport:
    categories = Counter(int(str(q.get_extra("category"))) for q in questions)
    return LocomoReport(
        n_conversations=len(conversations),
        n_sessions=sum(len(c.sessions) for c in conversations),
        n_turns=sum(len(s.turns) for c in conversations for s in c.sessions),
        n_questions=len(questions),
        by_category=tuple(sorted(categories.items())),
        n_with_adversarial_answer=sum(
            q.get_extra("adversarial_answer") is not None for q in questions
        ),
        n_evidence_ids=tally.n_evidence,
        n_malformed_evidence_ids=tally.n_malformed,
        n_noncanonical_evidence_ids=tally.n_noncanonical,
        n_evidence_ids_unmatched_verbatim=tally.n_unmatched_verbatim,
        n_unresolvable_evidence_ids=len(tally.unresolvable),
        n_items_empty_evidence=tally.n_empty,
        n_items_no_resolved_evidence=tally.n_no_resolved,
        n_items_without_gold=tally.n_empty + tally.n_no_resolved,
        n_items_with_unresolvable_evidence=tally.n_with_unresolvable,
        malformed_evidence=tuple(tally.malformed),
        unresolvable_evidence=tuple(tally.unresolvable),
        items_without_gold=tuple(tally.without_gold),
    )
