"""Synthetic stress sets: LongMemEval files padded to an M-like haystack size.

``engram-eval make-stress SRC --sessions 500 --seed N --output F`` writes, for every
question of the LongMemEval file ``SRC`` (same order, same fields, official schema), a
haystack padded up to ``--sessions`` sessions with *filler* sessions drawn from the other
questions' haystacks:

* a filler is never an evidence session of any question: not in any ``answer_session_ids``
  and holding no turn with ``has_answer: true``; nor is it already in the question's own
  haystack (each session id at most once per question);
* each question draws its fillers with its own generator seeded by
  sha256(seed, question_id), so the output is a function of (source, seed, sessions) alone;
* each filler gets a date drawn uniformly between the earliest and the latest date of the
  question's own haystack (the question's date when the haystack has none), in the
  dataset's ``YYYY/MM/DD (Day) HH:MM`` format, and is inserted after the original sessions
  dated no later than it (originals keep their relative order);
* ``answer_session_ids``, the original sessions and every ``has_answer`` flag are unchanged.

The source is read streaming, three times (scan; spool the chosen fillers into a temporary
SQLite file beside the output; write), so neither the source nor the output is ever held in
memory. The output (gzip when ``F`` ends in ``.gz``) is written to a temporary file and
renamed into place; an existing output is refused. The sidecar ``F.meta.json`` labels the
file synthetic and records the seed, the target, the source's sha256 and size, the
generator's source hash and per-question counts.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError, DataError, ProvenanceError
from engram_eval.io import (
    already_exists,
    atomic_write,
    dump_json,
    input_problem,
    refuse_links,
    remove_contained,
    sha256_file,
    streaming_write,
)

DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"
KIND = "engram-eval/stress-set"


def meta_path(output: str | Path) -> Path:
    return Path(str(output) + ".meta.json")


def parse_date(text: str) -> datetime | None:
    try:
        return datetime.strptime(text.strip(), DATE_FORMAT)
    except (ValueError, AttributeError):
        return None


def format_date(d: datetime) -> str:
    return d.strftime(DATE_FORMAT)


def raw_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Stream the raw records of a LongMemEval file, each checked exactly as the loader
    checks it (schema, duplicate ids, haystack lengths; same error messages)."""
    import zlib

    from engram_eval.data._jsonio import (
        first_byte,
        iter_list_items,
        load_schema,
        record_validator,
    )
    from engram_eval.data.longmemeval import SCHEMA_NAME, iter_longmemeval, parse_record

    p = Path(path)
    why = input_problem(p)
    if why:
        raise DataError(p, "(file)", "(root)", f"dataset {why}")
    try:
        head = first_byte(p)
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(p, "(file)", "(root)", f"cannot read file: {e}") from e
    if head != b"[":
        for _ in iter_longmemeval(p):  # raises the loader's exact error
            pass
        return
    validator = record_validator(load_schema(SCHEMA_NAME))
    seen: dict[str, int] = {}
    # bounded streaming: nesting and string limits checked before memory grows
    for index, raw in enumerate(iter_list_items(p, "question_id")):
        parse_record(p, index, raw, validator, seen)
        yield raw


def _evidence_ids(raw: Mapping[str, Any]) -> set[str]:
    out = set(raw["answer_session_ids"])
    for sid, turns in zip(raw["haystack_session_ids"], raw["haystack_sessions"], strict=True):
        if any(t.get("has_answer") is True for t in turns):
            out.add(sid)
    return out


def _rng(seed: int, question_id: str) -> random.Random:
    digest = hashlib.sha256(f"engram-eval stress\0{seed}\0{question_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def _date_range(raw: Mapping[str, Any]) -> tuple[datetime, datetime] | None:
    dates = [d for d in (parse_date(x) for x in raw["haystack_dates"]) if d is not None]
    if not dates:
        qd = parse_date(raw.get("question_date", ""))
        return (qd, qd) if qd is not None else None
    return min(dates), max(dates)


def _choose(pool: list[str], own: set[str], k: int, rng: random.Random) -> list[str]:
    """``k`` distinct pool ids not in ``own`` (fewer when the pool runs out), in draw order."""
    if k <= 0:
        return []
    candidates = [s for s in pool if s not in own]
    return rng.sample(candidates, min(k, len(candidates)))


def _padded(raw: dict[str, Any], fillers: list[tuple[str, list[Any]]],
            rng: random.Random) -> dict[str, Any]:
    """The record with ``fillers`` (id, turns) dated and merged into its haystack."""
    rng_range = _date_range(raw)
    orig_dates = [parse_date(x) for x in raw["haystack_dates"]]
    known = sorted(d for d in orig_dates if d is not None)
    # Insertion point of a filler: after every original dated no later than it (by the
    # originals' positions: the k-th original in file order once k of them are <= it).
    placed: list[tuple[int, datetime | None, int, str, list[Any]]] = []
    for i, (sid, turns) in enumerate(fillers):
        if rng_range is None:
            when = None
            date_text = raw["question_date"]
            pos = len(raw["haystack_session_ids"])
        else:
            lo, hi = rng_range
            span = int((hi - lo).total_seconds() // 60)
            when = lo + timedelta(minutes=rng.randint(0, max(span, 0)))
            date_text = format_date(when)
            pos = _position(orig_dates, when) if known else len(orig_dates)
        placed.append((pos, when, i, date_text, [sid, turns]))
    placed.sort(key=lambda x: (x[0], x[1] or datetime.min, x[2]))
    ids, dates, sessions = [], [], []
    j = 0
    n = len(raw["haystack_session_ids"])
    for k in range(n + 1):
        while j < len(placed) and placed[j][0] == k:
            _, _, _, date_text, (sid, turns) = placed[j]
            ids.append(sid)
            dates.append(date_text)
            sessions.append(turns)
            j += 1
        if k < n:
            ids.append(raw["haystack_session_ids"][k])
            dates.append(raw["haystack_dates"][k])
            sessions.append(raw["haystack_sessions"][k])
    out = dict(raw)
    out["haystack_session_ids"] = ids
    out["haystack_dates"] = dates
    out["haystack_sessions"] = sessions
    return out


def _position(orig_dates: list[datetime | None], when: datetime) -> int:
    """Index after the last original (file order) whose date is <= ``when``; originals
    without a parseable date do not move the point."""
    last = -1
    for i, d in enumerate(orig_dates):
        if d is not None and d <= when:
            last = i
    if last == -1:
        # before every dated original: right before the first dated one
        firsts = [i for i, d in enumerate(orig_dates) if d is not None]
        return firsts[0] if firsts else len(orig_dates)
    return last + 1


def make_stress(source: str | Path, output: str | Path, *, sessions: int, seed: int,
                limit: int | None = None, echo: Any = None) -> dict[str, Any]:
    """Build the stress set (see the module docstring); returns the sidecar written.

    ``limit``: write only the first ``limit`` questions (fillers are still drawn from every
    question's haystack), for benchmarks on a fixed subset."""
    src = Path(source)
    out = Path(output)
    if sessions < 1:
        raise ConfigError(f"make-stress --sessions {sessions}: must be >= 1")
    refuse_links(out, meta_path(out))  # a link (dangling or not) where an output goes
    for p in (out, meta_path(out)):
        if p.exists():
            raise ProvenanceError(already_exists(p))
    out.parent.mkdir(parents=True, exist_ok=True)
    source_sha = sha256_file(src)

    # Pass 1: ids, evidence, and the pool of filler candidates (first-seen order).
    evidence: set[str] = set()
    pool_order: dict[str, None] = {}
    haystack_of: dict[str, list[str]] = {}
    n_questions = 0
    for raw in raw_records(src):
        evidence |= _evidence_ids(raw)
        if limit is None or n_questions < limit:
            haystack_of[raw["question_id"]] = list(dict.fromkeys(raw["haystack_session_ids"]))
        n_questions += 1
        for sid in raw["haystack_session_ids"]:
            pool_order.setdefault(sid, None)
    pool = [s for s in pool_order if s not in evidence]
    del pool_order

    # Choose every question's fillers (ids only).
    plan: dict[str, list[str]] = {}
    needed: set[str] = set()
    for qid, own in haystack_of.items():
        k = sessions - len(own)
        plan[qid] = _choose(pool, set(own), k, _rng(seed, qid))
        needed.update(plan[qid])
    del haystack_of

    tmpdir = tempfile.mkdtemp(prefix="." + out.name + ".spool-", dir=out.parent)
    spool_path = Path(tmpdir) / "sessions.sqlite3"
    try:
        # Pass 2: spool the content of every chosen filler (first occurrence of its id).
        db = sqlite3.connect(str(spool_path))
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("CREATE TABLE s (k TEXT PRIMARY KEY, v TEXT)")
        for raw in raw_records(src):
            rows = [(sid, json.dumps(turns, ensure_ascii=False))
                    for sid, turns in zip(raw["haystack_session_ids"], raw["haystack_sessions"],
                                          strict=True) if sid in needed]
            db.executemany("INSERT OR IGNORE INTO s VALUES (?, ?)", rows)
        db.commit()

        # Pass 3: write every padded record, streaming.
        counts: list[int] = []
        n_short = 0
        try:
            with streaming_write(out, exclusive=True,
                                 gzip_output=out.name.endswith(".gz")) as f:
                f.write(b"[\n")
                for i, raw in enumerate(raw_records(src)):
                    if limit is not None and i >= limit:
                        continue  # read to the end: every record is still checked
                    qid = raw["question_id"]
                    fill = []
                    for sid in plan[qid]:
                        (text,) = db.execute("SELECT v FROM s WHERE k = ?", (sid,)).fetchone()
                        fill.append((sid, json.loads(text)))
                    rec = _padded(raw, fill, _rng(seed, qid + "\0dates"))
                    n = len(dict.fromkeys(rec["haystack_session_ids"]))
                    counts.append(n)
                    n_short += n < sessions
                    if i:
                        f.write(b",\n")
                    f.write(json.dumps(rec, ensure_ascii=False).encode("utf-8"))
                f.write(b"\n]\n")
        except FileExistsError:
            raise ProvenanceError(already_exists(out)) from None
        db.close()
    finally:  # the spool directory, ours, inside the output's directory
        remove_contained(tmpdir, out.parent)

    from engram_eval.io import package_root

    meta = {
        "kind": KIND,
        "synthetic": True,
        "label": "SYNTHETIC stress set: haystacks padded with sessions drawn from other "
                 "questions' haystacks; not an official LongMemEval file",
        "seed": seed,
        "sessions": sessions,
        "source": {"name": src.name, "size": src.stat().st_size, "sha256": source_sha},
        "output": {"name": out.name, "size": out.stat().st_size, "sha256": sha256_file(out)},
        "n_questions": len(counts),
        "source_questions": n_questions,
        "limit": limit,
        "filler_pool": len(pool),
        "sessions_per_question": {"min": min(counts, default=0),
                                  "max": max(counts, default=0),
                                  "mean": (sum(counts) / len(counts)) if counts else 0.0},
        "questions_short_of_target": n_short,
        "rules": {"filler_source": "other questions' haystacks",
                  "excluded": "every evidence session (answer_session_ids or a has_answer "
                              "turn) and the question's own haystack",
                  "dates": "uniform in the question's haystack date range",
                  "unchanged": ["answer_session_ids", "original sessions", "has_answer"]},
        "generator": {"module": "engram_eval/data/stress.py",
                      "sha256": sha256_file(package_root() / "engram_eval" / "data" / "stress.py")},
    }
    atomic_write(meta_path(out), dump_json(meta))
    if echo is not None and n_short:
        echo(f"make-stress: {n_short} question(s) could not be padded to {sessions} sessions "
             f"(filler pool of {len(pool)} sessions)")
    return meta
