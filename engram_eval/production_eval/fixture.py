"""Production fixtures: validation and the split into a gold-free view and a gold lookup.

A fixture (``schemas/production_fixture.schema.json``) is a list of cases, each with its own
memories and questions; ``gold`` lists the memory ids that answer a question (empty: the
answer is absent, the right output is nothing). ``heldout: true`` marks a fixture that may
only run under a frozen manifest.

:func:`load_fixture` validates the file and returns two separate objects: a
:class:`FixtureView` (cases, memories, queries -- no gold anywhere) for the search path, and a
:class:`GoldLookup` used only for scoring after search has returned. The raw JSON is dropped.
"""

from __future__ import annotations

import importlib.resources
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import read_json_document
from engram_eval.data.dates import read_date
from engram_eval.errors import DataError
from engram_eval.production.store import Memory

#: A fixture ``name`` and a ``case_id`` name files (``WORK_DIR/NAME/CASE_ID.sqlite``), so they
#: are plain names: letters, digits, ``.``, ``_``, ``-``, starting with a letter or digit (no
#: separator, never ``.`` or ``..``), at most 100 characters. The schema holds the same pattern.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
_NAME_RE = re.compile(NAME_PATTERN)
NAME_RULE = ("must be a plain name (it names a file under --work-dir): letters, digits, '.', "
             "'_' and '-', starting with a letter or digit, at most 100 characters")


def check_name(value: str) -> bool:
    """Whether ``value`` may name a fixture or a case (:data:`NAME_PATTERN`)."""
    return isinstance(value, str) and _NAME_RE.fullmatch(value) is not None


@dataclass(frozen=True)
class Query:
    question_id: str
    query: str
    now: str


@dataclass(frozen=True)
class CaseView:
    case_id: str
    memories: tuple[Memory, ...]
    queries: tuple[Query, ...]


@dataclass(frozen=True)
class FixtureView:
    """Everything search needs, nothing it must not see."""

    path: str
    name: str
    heldout: bool
    cases: tuple[CaseView, ...]


class GoldLookup:
    """question id -> gold memory ids (empty tuple: the answer is absent)."""

    def __init__(self, gold: Mapping[str, tuple[str, ...]]) -> None:
        self._gold = dict(gold)

    def __call__(self, question_id: str) -> tuple[str, ...]:
        return self._gold[question_id]

    def __len__(self) -> int:
        return len(self._gold)


def _schema() -> dict[str, Any]:
    text = importlib.resources.files("engram_eval").joinpath(
        "schemas/production_fixture.schema.json")
    return json.loads(text.read_text(encoding="utf-8"))


def _where(doc: Any, path: list[Any]) -> tuple[str, str]:
    """(record, field) for a JSON path: the case (by id when known) and the rest."""
    if len(path) >= 2 and path[0] == "cases" and isinstance(path[1], int):
        case = doc["cases"][path[1]] if path[1] < len(doc.get("cases", [])) else {}
        cid = case.get("case_id") if isinstance(case, dict) else None
        record = f"case {cid!r} (cases[{path[1]}])" if cid else f"cases[{path[1]}]"
        field = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in path[2:])
        return record, field.replace(".[", "[") or "(case)"
    return "(fixture)", ".".join(str(p) for p in path) or "(top level)"


def validate_document(doc: Any, path: str | Path) -> None:
    """Raise one :class:`DataError` naming file, case and field for the first problem."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        e = errors[0]
        record, field = _where(doc, list(e.absolute_path))
        reason = e.message
        if e.validator == "pattern" and e.schema.get("pattern") == NAME_PATTERN:
            reason = f"{e.instance!r} {NAME_RULE}"
        raise DataError(path, record, field, reason)
    if not check_name(doc["name"]):  # the schema says so too; kept if the schema is edited
        raise DataError(path, "(fixture)", "name", f"{doc['name']!r} {NAME_RULE}")
    qids: dict[str, str] = {}
    cids: set[str] = set()
    for ci, case in enumerate(doc["cases"]):
        record = f"case {case['case_id']!r} (cases[{ci}])"
        if not check_name(case["case_id"]):
            raise DataError(path, record, "case_id", f"{case['case_id']!r} {NAME_RULE}")
        if case["case_id"] in cids:
            raise DataError(path, record, "case_id", "duplicate case id")
        cids.add(case["case_id"])
        mids: set[str] = set()
        for mi, m in enumerate(case["memories"]):
            if m["id"] in mids:
                raise DataError(path, record, f"memories[{mi}].id",
                                f"duplicate memory id {m['id']!r} in this case")
            if not m["text"].strip():
                raise DataError(path, record, f"memories[{mi}].text", "empty memory text")
            # a date the temporal step cannot read would be silently ignored: refused
            read_date(path, record, f"memories[{mi}].date", m.get("date"), readable=True)
            mids.add(m["id"])
        for qi, q in enumerate(case["questions"]):
            if not q["query"].strip():
                raise DataError(path, record, f"questions[{qi}].query", "empty query")
            read_date(path, record, f"questions[{qi}].now", q.get("now"), readable=True)
            if q["question_id"] in qids:
                raise DataError(path, record, f"questions[{qi}].question_id",
                                f"duplicate question id {q['question_id']!r} (also in "
                                f"{qids[q['question_id']]})")
            qids[q["question_id"]] = record
            for g in q["gold"]:
                if g not in mids:
                    raise DataError(path, record, f"questions[{qi}].gold",
                                    f"gold id {g!r} is not a memory of this case")


def read_document(path: str | Path) -> Any:
    p = Path(path)
    try:
        return read_json_document(p, what="a fixture")
    except FileNotFoundError:
        raise DataError(p, "(file)", "(file)", "fixture file not found") from None
    except OSError as e:
        raise DataError(p, "(file)", "(file)", f"not readable JSON: {e}") from None


def load_fixture(path: str | Path) -> tuple[FixtureView, GoldLookup]:
    """Validate ``path`` and split it into the gold-free view and the gold lookup."""
    doc = read_document(path)
    validate_document(doc, path)
    cases = []
    gold: dict[str, tuple[str, ...]] = {}
    for case in doc["cases"]:
        mems = tuple(Memory(m["id"], m["text"], m.get("date", "")) for m in case["memories"])
        queries = []
        for q in case["questions"]:
            queries.append(Query(q["question_id"], q["query"], q.get("now", "")))
            gold[q["question_id"]] = tuple(q["gold"])
        cases.append(CaseView(case["case_id"], mems, tuple(queries)))
    view = FixtureView(str(path), doc["name"], bool(doc["heldout"]), tuple(cases))
    return view, GoldLookup(gold)
