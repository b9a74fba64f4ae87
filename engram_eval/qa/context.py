"""``export-context``: a finished run's top-k sessions as reader-ready context.

Per question (in the run's selection order) one JSON line:

* ``question_id``, ``question_type``, ``question``, ``question_date`` (the "current date"),
  ``top_k``; ``retrieved_session_ids`` — the run's first k ids, in rank order;
* ``sessions`` — those sessions in date order (``session_id``, ``date``, ``rank``);
* ``messages`` — the chat messages a reader is sent (:mod:`engram_eval.qa.prompts`): the
  sessions as JSON, oldest first, each with its date and its user and assistant turns, the
  current date, the question, and the instruction to note the relevant facts per session
  first, then answer, and to say when the information is not there;
* ``tokens`` — the prompt's token count and, in the same layout, the count of the prompt
  built from the question's gold answer sessions (the oracle's cost);
* ``evidence`` — the ``answerable`` gold (``None`` for ``_abs`` questions) and
  ``recall_all@k`` / ``recall_any@k`` of this ranking, from :mod:`engram_eval.scoring.metrics`.

The gold answer itself is never in the file. The sidecar (:func:`build_meta`) names the run
(path, fingerprint, rows hash), the dataset hash, ``top_k``, the layout and its template
hashes, the tokenizer and the source hashes; ``fingerprint`` covers all but paths and times.
The file is written whole to a temporary file and created exclusively (never overwritten);
a ``.gz`` output is gzip with mtime 0, so the bytes are deterministic.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.data.datasets import open_source
from engram_eval.data.records import Question, Session
from engram_eval.errors import ConfigError, DataError, ProvenanceError
from engram_eval.io import (
    already_exists,
    dump_json,
    exclusive_write,
    input_problem,
    make_parent,
    sha256_file,
    sha256_json,
)
from engram_eval.provenance.sidecar import package_versions, sidecar_path, source_hashes
from engram_eval.provenance.sources import QA_CONTEXT_SOURCES
from engram_eval.qa import prompts
from engram_eval.qa.tokens import TokenCounter, bundled_counter, token_stats
from engram_eval.retrieval.temporal import parse_date
from engram_eval.runs.reader import FinishedRun, read_run
from engram_eval.runs.rows import is_compressed, row_line
from engram_eval.scoring.metrics import recall_all, recall_any
from engram_eval.scoring.protocols import gold_for

KIND = "engram-eval/context"
SCHEMA_VERSION = 1
#: The sidecar fields that define an export (their sha256 is its ``fingerprint``).
FINGERPRINT_FIELDS = ("schema_version", "kind", "run", "dataset", "top_k", "layout",
                      "tokenizer", "sources")
#: Fields every context row has (checked by ``answer`` when it reads a context file).
ROW_FIELDS = ("question_id", "question_type", "question", "question_date", "top_k",
              "retrieved_session_ids", "sessions", "messages", "tokens", "evidence")


@dataclass(frozen=True)
class ContextConfig:
    """What defines an export besides its inputs."""

    top_k: int
    layout: str = prompts.LAYOUT

    def validate(self) -> None:
        if self.top_k < 1:
            raise ConfigError(f"--top-k must be at least 1 (got {self.top_k})")
        if self.layout != prompts.LAYOUT:
            raise ConfigError(f"unknown context layout {self.layout!r} (this version writes "
                              f"{prompts.LAYOUT!r})")


@dataclass(frozen=True)
class ContextOutcome:
    output: Path
    fingerprint: str
    n_questions: int
    tokens: dict[str, Any]


def date_order(sessions: Sequence[Session], haystack: Sequence[str]) -> list[Session]:
    """Oldest first by the parsed session date (same-day and unparsable dates keep their
    haystack order; unparsable ones go last)."""
    pos = {sid: i for i, sid in enumerate(haystack)}

    def key(s: Session) -> tuple[int, str, int]:
        d = parse_date(s.date)
        return (0, d.isoformat(), pos.get(s.session_id, 0)) if d else (1, "", pos.get(
            s.session_id, 0))
    return sorted(sessions, key=key)


def sessions_json(sessions: Sequence[Session]) -> str:
    """The structured layout: a JSON list, one object per session (one per line) with its
    number in date order, its date and its turns."""
    blocks = [json.dumps({"session": i, "date": s.date,
                          "turns": [{"role": t.role, "content": t.content} for t in s.turns]},
                         ensure_ascii=False)
              for i, s in enumerate(sessions, start=1)]
    return "[\n" + ",\n".join(blocks) + "\n]"


def reader_messages(question: Question, sessions: Sequence[Session]) -> list[dict[str, str]]:
    user = prompts.READER_USER.format(sessions_json=sessions_json(sessions),
                                      question_date=question.question_date,
                                      question=question.question)
    return [{"role": "system", "content": prompts.READER_SYSTEM},
            {"role": "user", "content": user}]


def prompt_tokens(counter: TokenCounter, messages: Sequence[dict[str, str]]) -> int:
    return sum(counter.count(m["content"]) for m in messages)


def context_row(question: Question, ranked: Sequence[str], top_k: int,
                counter: TokenCounter) -> dict[str, Any]:
    by_id = {s.session_id: s for s in question.sessions}
    top = list(ranked[:top_k])
    missing = [sid for sid in top if sid not in by_id]
    if missing:
        raise ProvenanceError(f"question {question.question_id!r}: the run ranks session(s) "
                              f"{missing[:3]} that its haystack in the dataset does not hold "
                              "(wrong dataset for this run?)")
    haystack = question.session_ids
    chosen = date_order([by_id[sid] for sid in top], haystack)
    messages = reader_messages(question, chosen)
    oracle = date_order([by_id[sid] for sid in dict.fromkeys(question.answer_session_ids)
                         if sid in by_id], haystack)
    gold = gold_for(question, "answerable")
    evidence: dict[str, Any] = {"protocol": "answerable",
                                "gold_session_ids": list(gold) if gold is not None else None,
                                f"recall_all@{top_k}": None, f"recall_any@{top_k}": None}
    if gold is not None:
        evidence[f"recall_all@{top_k}"] = recall_all(gold, list(ranked), top_k)
        evidence[f"recall_any@{top_k}"] = recall_any(gold, list(ranked), top_k)
    rank = {sid: i for i, sid in enumerate(top, start=1)}
    return {
        "question_id": question.question_id, "question_type": question.question_type,
        "question": question.question, "question_date": question.question_date,
        "top_k": top_k, "retrieved_session_ids": top,
        "sessions": [{"session_id": s.session_id, "date": s.date, "rank": rank[s.session_id]}
                     for s in chosen],
        "messages": messages,
        "tokens": {"prompt": prompt_tokens(counter, messages),
                   "oracle_prompt": prompt_tokens(counter, reader_messages(question, oracle)),
                   "oracle_sessions": len(oracle)},
        "evidence": evidence,
    }


def build_meta(run: FinishedRun, dataset: Path, dataset_sha256: str, config: ContextConfig,
               counter: TokenCounter, output: Path, ids: Sequence[str]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "kind": KIND,
        "run": {"path": os.path.relpath(run.path, output.parent), "name": run.path.name,
                "fingerprint": run.fingerprint, "rows_sha256": run.rows_sha256,
                "retriever": run.retriever},
        "dataset": {"path": str(dataset.resolve()), "name": dataset.name,
                    "sha256": dataset_sha256,
                    "split_note": "development split" if ".dev." in dataset.name else None},
        "top_k": config.top_k,
        "layout": {"name": config.layout, "templates_sha256": prompts.reader_template_hashes(),
                   "session_order": "date, oldest first", "current_date": "question_date",
                   "turns": "user and assistant"},
        "tokenizer": counter.describe(),
        "sources": source_hashes(QA_CONTEXT_SOURCES),
        "packages": package_versions(),
        "selection": {"n": len(ids), "ids": list(ids)},
        "fingerprint_fields": list(FINGERPRINT_FIELDS),
    }
    view = {k: ({x: y for x, y in meta[k].items() if x != "path"}
                if isinstance(meta[k], dict) else meta[k]) for k in FINGERPRINT_FIELDS}
    meta["fingerprint"] = sha256_json(view)
    return meta


def export_context(run_path: str | Path, dataset: str | Path, output: str | Path,
                   config: ContextConfig, *, echo: Callable[[str], None] = print,
                   progress: bool = True) -> ContextOutcome:
    """Write the context export and its sidecar (see the module docstring)."""
    from engram_eval.runs.progress import Progress

    config.validate()
    out = Path(output)
    for p in (out, sidecar_path(out)):
        if p.exists():
            raise FileExistsError(already_exists(p))
    ds = Path(dataset)
    why = input_problem(ds)
    if why:
        raise DataError(ds, "(file)", "(file)", f"dataset {why}")
    run = read_run(run_path, require_sidecar=True, within_selection=True)
    ds_sha = sha256_file(ds)
    if run.dataset_sha256 != ds_sha:
        raise ProvenanceError(f"{ds}: sha256 {ds_sha[:16]}… is not the dataset of the run "
                              f"{run.path} ({(run.dataset_sha256 or '?')[:16]}…)")
    counter = bundled_counter()
    source = open_source(ds)
    ranked = {r["question_id"]: r["ranked_session_ids"] for r in run.rows}
    order = [r["question_id"] for r in run.rows]
    in_file = [i for i in source.ids if i in ranked]
    if len(in_file) != len(order):
        raise ProvenanceError(f"{run.path}: {len(order) - len(in_file)} question(s) of the "
                              f"run are not in {ds}")
    rows: dict[str, dict[str, Any]] = {}
    with Progress(len(in_file), enabled=progress, desc="context") as bar:
        for q in source.iter_questions(in_file):
            rows[q.question_id] = context_row(q, ranked[q.question_id], config.top_k, counter)
            bar.update(1)
    lines = b"".join(row_line(rows[i]) for i in order)
    data = gzip.compress(lines, compresslevel=9, mtime=0) if out.name.endswith(".gz") else lines
    meta = build_meta(run, ds, ds_sha, config, counter, out, order)
    meta["rows_sha256"] = sha256_bytes(lines)
    meta["tokens"] = {"prompt": token_stats([r["tokens"]["prompt"] for r in rows.values()]),
                      "oracle_prompt": token_stats([r["tokens"]["oracle_prompt"]
                                                    for r in rows.values()
                                                    if r["tokens"]["oracle_sessions"]])}
    make_parent(out)
    exclusive_write(out, data)
    meta["file"] = out.name
    meta["sha256"] = sha256_file(out)
    meta["compressed"] = is_compressed(out)
    # the layout of a derived file's sidecar, so the results checks read it like the others
    meta["inputs"] = [{"file": meta["run"]["path"], "sha256": sha256_file(run.path),
                       "rows_sha256": run.rows_sha256, "run_fingerprint": run.fingerprint},
                      {"file": ds.name, "sha256": ds_sha}]
    meta["command"] = (["engram-eval", *sys.argv[1:]]
                       if Path(sys.argv[0]).name in ("engram-eval", "main.py") else list(sys.argv))
    meta["created_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    exclusive_write(sidecar_path(out), dump_json(meta))
    echo(f"wrote {len(order)} context row(s) to {out} (k={config.top_k})")
    return ContextOutcome(out, meta["fingerprint"], len(order), meta["tokens"])


def sha256_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def read_context(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """Rows, sidecar and rows hash of a context export; refuses a missing or edited sidecar,
    a file whose rows do not hash to the recorded ``rows_sha256``, or malformed rows."""
    from engram_eval.qa.files import read_plain_sidecar
    from engram_eval.runs.rows import scan_rows

    meta = read_plain_sidecar(path)
    if meta.get("kind") != KIND:
        raise ProvenanceError(f"{sidecar_path(path)}: not a context export's sidecar "
                              f"(kind {meta.get('kind')!r})")
    view = {k: ({x: y for x, y in meta[k].items() if x != "path"}
                if isinstance(meta.get(k), dict) else meta.get(k)) for k in FINGERPRINT_FIELDS}
    if sha256_json(view) != meta.get("fingerprint"):
        raise ProvenanceError(f"{sidecar_path(path)}: the recorded fingerprint does not match "
                              "the recorded fields (the sidecar was edited)")
    scan = scan_rows(path, required=ROW_FIELDS)
    if scan.torn_bytes:
        raise ProvenanceError(f"{path}: the last line is torn; the export is incomplete")
    if scan.sha256 != meta.get("rows_sha256"):
        raise ProvenanceError(f"{path}: its rows hash to {scan.sha256[:16]}…, not the "
                              f"recorded {str(meta.get('rows_sha256'))[:16]}… (changed after "
                              "it was written)")
    return scan.rows, meta, scan.sha256
