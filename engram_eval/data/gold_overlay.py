"""Gold overlays: corrected evidence for LoCoMo QA items (``--gold-overlay FILE``).

A gold overlay maps QA items to corrected evidence; ``run``, ``score`` and ``compare`` then
report the metrics on the dataset's evidence *and* on the corrected one, named apart
(:mod:`engram_eval.scoring.audited`). Two layouts are read as they are:

* **The public LoCoMo audit** (``locomo_audit_errors.json``): a JSON list of objects with
  ``question_id`` = ``locomo_<conversation index>_qa<item index>`` (the conversation's
  0-based position in the LoCoMo file, the item's 0-based position in its ``qa`` list),
  ``correct_evidence`` (the audit's ``dia_id`` list) and, checked when present,
  ``question`` (must equal the item's text) and ``cited_evidence`` (must equal the item's
  evidence list): an audit made against another file is refused, naming the entry. The
  key ``locomo_<c>_qa<i>`` maps to the package's question id ``<sample_id of conversation
  c>:q<i>`` (:func:`audit_key_to_question_id`). Other fields (``reasoning``,
  ``correct_answer``, ...) are not read.
* **A plain JSON map** ``{question_id: [dia_id, ...]}`` keyed by the package's LoCoMo
  question ids (``conv-26:q1``).

Corrected evidence is resolved as the loader resolves the dataset's
(:func:`engram_eval.data.locomo.resolve_evidence`: lenient parsing, sessions holding a
resolved turn). A piece naming no turn is recorded by question id (``unresolved``); an
item left with no resolved evidence has no corrected gold and leaves every audited
denominator, and is named (``no_gold``): never silently dropped.

An entry *changes the evidence* when its resolved turn set differs from the dataset's
(order is not a change); it *changes the gold* when the sessions holding them differ. Only
LoCoMo datasets take an overlay: LongMemEval's gold is sessions, and its reference protocol
reads gold from session ids, not from a list a file could correct.
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import FILE_RECORD, ROOT_FIELD, read_json
from engram_eval.data.locomo import resolve_evidence
from engram_eval.data.records import Question
from engram_eval.errors import ConfigError, DataError

AUDIT_FORMAT = "locomo-audit"
MAP_FORMAT = "map"
_AUDIT_KEY = re.compile(r"locomo_(\d+)_qa(\d+)")
#: The fields of the record a run keeps of its overlay (sidecar ``selection.gold_overlay``).
RECORD_FIELDS = ("name", "sha256", "format", "n_entries")


@dataclass(frozen=True)
class OverlayItem:
    """One QA item an overlay names: the key it is listed under, the dataset's evidence and
    the corrected one (raw strings), each resolved (canonical ``dia_id`` and sessions), and
    the corrected pieces that name no turn."""

    question_id: str
    key: str
    evidence: tuple[str, ...]
    evidence_audited: tuple[str, ...]
    dia_ids: tuple[str, ...]
    dia_ids_audited: tuple[str, ...]
    gold: tuple[str, ...]
    gold_audited: tuple[str, ...]
    unresolved: tuple[str, ...]

    @property
    def evidence_changed(self) -> bool:
        return set(self.dia_ids) != set(self.dia_ids_audited)

    @property
    def gold_changed(self) -> bool:
        return set(self.gold) != set(self.gold_audited)


@dataclass(frozen=True)
class GoldOverlay:
    """A read overlay: the file's name, sha256 and layout, and its items by question id
    (file order)."""

    path: str
    sha256: str
    format: str
    items: dict[str, OverlayItem]

    def record(self) -> dict[str, Any]:
        """What a run records of the overlay (:data:`RECORD_FIELDS`; the path is not
        recorded: the hash names the file)."""
        return {"name": Path(self.path).name, "sha256": self.sha256, "format": self.format,
                "n_entries": len(self.items)}

    def corrected(self, question: Question) -> Question:
        """``question`` with the corrected evidence (``answer_session_ids`` and the
        ``evidence`` / ``evidence_dia_ids`` extras); itself when the overlay does not name
        it."""
        item = self.items.get(question.question_id)
        if item is None:
            return question
        extra = dict(question.extra)
        extra["evidence"] = item.evidence_audited
        extra["evidence_dia_ids"] = item.dia_ids_audited
        return replace(question, answer_session_ids=item.gold_audited,
                       extra=tuple(sorted(extra.items())))


def conversation_order(questions: Sequence[Question]) -> list[str]:
    """The LoCoMo conversations' sample ids in file order (the audit's conversation index)."""
    return list(dict.fromkeys(str(q.get_extra("conversation_id")) for q in questions))


def audit_key_to_question_id(key: str, conversations: Sequence[str],
                             known: Container[str]) -> str | None:
    """``locomo_<c>_qa<i>`` -> ``<conversations[c]>:q<i>`` (``conversations``:
    :func:`conversation_order`); None when the key has another shape or the id is not in
    ``known`` (the dataset's question ids)."""
    m = _AUDIT_KEY.fullmatch(key)
    if m is None:
        return None
    c, i = int(m.group(1)), int(m.group(2))
    if c >= len(conversations):
        return None
    qid = f"{conversations[c]}:q{i}"
    return qid if qid in known else None


def read_gold_overlay(path: str | Path, questions: Sequence[Question], *,
                      dataset: str | Path = "the dataset") -> GoldOverlay:
    """Read ``path`` (either layout, detected from its top level) against the LoCoMo
    ``questions`` (all of the file, in file order). Every problem is one
    :class:`DataError` naming the overlay file, the entry and the field."""
    from engram_eval.io import sha256_file

    if not questions or questions[0].get_extra("conversation_id") is None:
        raise ConfigError(f"--gold-overlay {path}: a gold overlay corrects LoCoMo evidence; "
                          f"{dataset} is not a LoCoMo dataset")
    data = read_json(path, "question_id")
    by_id = {q.question_id: q for q in questions}
    if isinstance(data, list):
        fmt, pairs = AUDIT_FORMAT, _audit_pairs(path, data, questions, by_id, dataset)
    elif isinstance(data, dict):
        fmt, pairs = MAP_FORMAT, _map_pairs(path, data, by_id, dataset)
    else:
        raise DataError(path, FILE_RECORD, ROOT_FIELD, "a gold overlay is a JSON list (the "
                        "LoCoMo audit's entries) or an object {question_id: [dia_id, ...]}, "
                        f"not {type(data).__name__}")
    items: dict[str, OverlayItem] = {}
    for key, qid, evidence in pairs:
        q = by_id[qid]
        raw = q.get_extra("evidence")
        original = tuple(str(e) for e in raw) if isinstance(raw, tuple | list) else ()
        was = resolve_evidence(qid, original, q.sessions)
        now = resolve_evidence(qid, evidence, q.sessions)
        items[qid] = OverlayItem(qid, key, original, tuple(evidence), was.dia_ids, now.dia_ids,
                                 was.gold, now.gold, now.unresolved)
    return GoldOverlay(str(path), sha256_file(path), fmt, items)


def _evidence_list(path: str | Path, record: str, name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
        raise DataError(path, record, name, "must be a list of dia_id strings")
    return list(value)


def _audit_pairs(path: str | Path, data: list[Any], questions: Sequence[Question],
                 by_id: Mapping[str, Question], dataset: str | Path
                 ) -> list[tuple[str, str, list[str]]]:
    out: list[tuple[str, str, list[str]]] = []
    seen: dict[str, str] = {}
    conversations = conversation_order(questions)
    for n, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise DataError(path, f"index {n}", ROOT_FIELD, "an audit entry must be an object")
        key = entry.get("question_id")
        record = f"question_id={key} (index {n})" if isinstance(key, str) else f"index {n}"
        if not isinstance(key, str):
            raise DataError(path, record, "question_id", "missing or not a string")
        if _AUDIT_KEY.fullmatch(key) is None:
            raise DataError(path, record, "question_id", "not of the audit's form "
                            "locomo_<conversation index>_qa<item index>")
        qid = audit_key_to_question_id(key, conversations, by_id)
        if qid is None:
            raise DataError(path, record, "question_id", f"names no QA item of {dataset} "
                            "(the audit was made against another file)")
        if qid in seen:
            raise DataError(path, record, "question_id", f"QA item {qid} is listed twice "
                            f"(also as {seen[qid]})")
        seen[qid] = key
        q = by_id[qid]
        if "question" in entry and entry["question"] != q.question:
            raise DataError(path, record, "question", f"differs from the text of {qid} in "
                            f"{dataset} ({q.question[:60]!r}): the audit was made against "
                            "another file")
        if "cited_evidence" in entry:
            cited = _evidence_list(path, record, "cited_evidence", entry["cited_evidence"])
            raw = q.get_extra("evidence")
            if isinstance(raw, tuple | list) and cited != [str(e) for e in raw]:
                raise DataError(path, record, "cited_evidence", f"differs from the evidence "
                                f"of {qid} in {dataset} ({list(raw)!r}): the audit was made "
                                "against another file")
        if "correct_evidence" not in entry:
            raise DataError(path, record, "correct_evidence", "missing")
        out.append((key, qid, _evidence_list(path, record, "correct_evidence",
                                             entry["correct_evidence"])))
    return out


def _map_pairs(path: str | Path, data: Mapping[str, Any], by_id: Mapping[str, Question],
               dataset: str | Path) -> list[tuple[str, str, list[str]]]:
    out = []
    for key, value in data.items():
        record = f"question_id={key}"
        if key not in by_id:
            hint = (" (an audit key: give the audit's list of entries, or the package's "
                    "question id <sample_id>:q<i>)" if _AUDIT_KEY.fullmatch(key) else "")
            raise DataError(path, record, "question_id", f"not a question id of {dataset}"
                            f"{hint}")
        out.append((key, key, _evidence_list(path, record, key, value)))
    return out
