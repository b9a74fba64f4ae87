"""The per-question loop behind every benchmark script.

``run()`` loads and hashes the dataset, builds the retriever (resolving model files
without loading them), assembles the provenance sidecar, then either claims a fresh output
or verifies a resume, ranks every selected question that has no row yet, appends one row
per question, and finally writes ``<output>.summary.json`` from the rows on disk.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval import protocols as P
from engram_eval.config import LONGMEMEVAL_PROTOCOLS, RunConfig
from engram_eval.data.records import Question
from engram_eval.errors import ConfigError, DataError, ProvenanceError
from engram_eval.io import atomic_write, dump_json, sha256_file
from engram_eval.metrics import KS, mean_metrics, random_baseline
from engram_eval.provenance import (
    build_metadata,
    claim_output,
    compare_for_resume,
    read_sidecar,
    record_run,
    sidecar_path,
    summary_path,
)
from engram_eval.rows import RowWriter, scan_rows, truncate_torn_tail

log = logging.getLogger(__name__)
TABLE_METRICS = ("recall_any@1", "recall_any@3", "recall_any@5", "recall_any@10",
                 "recall_all@5", "recall_all@10", "ndcg_any@5", "ndcg_any@10")


# -- datasets -----------------------------------------------------------------------
def detect_format(path: str | Path) -> str:
    """``locomo`` when the first record has a ``qa`` list, else ``longmemeval``."""
    with open(path, "rb") as f:
        head = f.read(2)
    opener: Callable[..., Any] = gzip.open if head == b"\x1f\x8b" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            start = f.read(1 << 16)
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(path, "(file)", "(file)", f"cannot read: {e}") from None
    return "locomo" if '"qa"' in start and '"conversation"' in start else "longmemeval"


def load_questions(path: str | Path, fmt: str = "auto") -> tuple[str, tuple[Question, ...]]:
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "locomo":
        from engram_eval.data.locomo import load_locomo

        return fmt, tuple(load_locomo(path).questions)
    from engram_eval.data.longmemeval import load_longmemeval

    return fmt, tuple(load_longmemeval(path).questions)


def default_protocols(fmt: str) -> list[str]:
    return ["locomo"] if fmt == "locomo" else list(LONGMEMEVAL_PROTOCOLS)


def select(questions: Sequence[Question], config: RunConfig, path: str | Path) -> list[Question]:
    """Apply ``question_ids`` (file order kept) then ``limit``; unknown ids are an error."""
    chosen = list(questions)
    if config.question_ids:
        known = {q.question_id for q in questions}
        unknown = [i for i in config.question_ids if i not in known]
        if unknown:
            raise ConfigError(f"--question-id: {', '.join(unknown[:5])} not found in {path}")
        want = set(config.question_ids)
        chosen = [q for q in chosen if q.question_id in want]
    if config.limit is not None:
        chosen = chosen[: config.limit]
    return chosen


# -- rows and summaries ---------------------------------------------------------------
def make_row(question: Question, ranking: Any, protocols: Sequence[str],
             question_trace: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    ids = ranking.session_ids
    gold = {p: (list(g) if (g := P.gold_for(question, p)) is not None else None)
            for p in protocols}
    metrics = {p: P.score_question(question, ids, p) for p in protocols}
    return {
        "question_id": question.question_id,
        "question_type": question.question_type,
        "question_date": question.question_date,
        "n_sessions": len(ids),
        "ranked_session_ids": ids,
        "scores": ranking.scores,
        "gold": gold,
        "metrics": metrics,
        "trace": {"question": dict(question_trace),
                  "sessions": [dict(r.trace) for r in ranking.results]},
        "timing": {"seconds": round(seconds, 6)},
    }


def summarize_rows(rows: Sequence[Mapping[str, Any]], protocols: Sequence[str]) -> dict[str, Any]:
    """Per-protocol means, per-type tables and random baselines, from rows alone."""
    summaries = {}
    for p in protocols:
        per_q = [(r["question_id"], r["question_type"], r["metrics"].get(p)) for r in rows]
        summaries[p] = P.summarize(per_q, p)
    out = P.summary_to_json(summaries)
    for p in protocols:
        base = []
        for r in rows:
            g = r.get("gold", {}).get(p)
            if r["metrics"].get(p) is None or g is None:
                continue
            n_gold = len(set(g) & set(r["ranked_session_ids"]))
            pool = len(r["ranked_session_ids"])
            row = {}
            for k in KS:
                rb = random_baseline(n_gold, pool, k) if pool else {
                    f"recall_any@{k}": 0.0, f"recall_all@{k}": 1.0 if n_gold == 0 else 0.0}
                row.update(rb)
            base.append(row)
        out["protocols"][p]["random_baseline"] = mean_metrics(base) if base else {}
        out["protocols"][p]["denominator"] = DENOMINATORS.get(p, p)
    return out


DENOMINATORS = {
    "answerable": "questions with answer_session_ids, excluding _abs (Engram protocol)",
    "official": "LongMemEval reference scorer: non-_abs questions with at least one answer "
                "session holding a user has_answer turn",
    "all": "every question (no-gold questions score recall_all=1, recall_any=0)",
    "locomo": "QA items with at least one evidence session resolved",
}


def format_summary(summary: Mapping[str, Any], metric_names: Sequence[str] = TABLE_METRICS) -> str:
    lines = []
    for p, s in summary["protocols"].items():
        ps = P.ProtocolSummary(p, s["n"], s["metrics"],
                               {t: (v["n"], v["metrics"]) for t, v in s["by_type"].items()},
                               s.get("n_skipped", 0))
        lines.append(P.format_table(ps, metric_names))
        lines.append(f"  denominator: {s.get('denominator', p)}")
        lines.append("")
    return "\n".join(lines)


# -- the run ----------------------------------------------------------------------------
@dataclass
class RunOutcome:
    output: Path
    fingerprint: str
    n_written: int
    n_total: int
    summary: dict[str, Any]
    repaired_torn_line: bool


def run(config: RunConfig, dataset: str | Path, output: str | Path, *, resume: bool = False,
        echo: Callable[[str], None] = print, command: Sequence[str] | None = None) -> RunOutcome:
    """Run (or resume) one provenance-locked retrieval run; see the module docstring.

    ``command`` (the argv that started the run) is recorded in the sidecar's ``runs`` list
    for PROVENANCE.md; it is not part of the fingerprint."""
    from engram_eval.retrieval import base as retrieval_base

    config.validate()
    t_start = time.time()
    dataset = Path(dataset)
    output = Path(output)
    if not dataset.is_file():
        raise DataError(dataset, "(file)", "(file)", "dataset file not found")
    fmt, questions = load_questions(dataset, config.dataset_format)
    protocols = list(config.protocols) or default_protocols(fmt)
    if fmt == "locomo" and any(p != "locomo" for p in protocols):
        raise ConfigError("protocols: a LoCoMo dataset is scored with the 'locomo' protocol")
    if fmt == "longmemeval" and "locomo" in protocols:
        raise ConfigError("protocols: 'locomo' applies to LoCoMo datasets only")
    chosen = select(questions, config, dataset)
    ids = [q.question_id for q in chosen]
    retriever = retrieval_base.create(config.retriever, config)  # resolves models, loads none
    meta = build_metadata(dataset_path=dataset, dataset_sha256=sha256_file(dataset),
                          dataset_format=fmt, retriever=retriever, config=config,
                          protocols=protocols, selected_ids=ids)
    repaired = False
    done: set[str] = set()
    if resume:
        if not output.exists():
            raise ProvenanceError(f"{output}: nothing to resume (file does not exist)")
        lock = _lock(output)
        old = read_sidecar(output)
        compare_for_resume(old, meta, sidecar_path(output))
        scan = scan_rows(output, allowed_ids=ids)
        if scan.torn_bytes:
            truncate_torn_tail(output, scan.torn_bytes)
            repaired = True
            echo(f"repaired {output}: removed a torn last line ({scan.torn_bytes} bytes) left "
                 "by an interrupted run")
        done = {r["question_id"] for r in scan.rows}
        fingerprint = old["fingerprint"]
        echo(f"resuming {output}: {len(done)}/{len(ids)} questions already done "
             f"(fingerprint {fingerprint[:16]}…)")
    else:
        claim_output(output, meta)
        lock = _lock(output)
        fingerprint = meta["fingerprint"]
    try:
        return _loop(config, retriever, chosen, ids, done, protocols, meta, fingerprint, output,
                     resume, repaired, started_wall=t_start, command=command)
    finally:
        lock.close()


def _lock(output: Path) -> Any:
    """Hold an exclusive advisory lock on the result file for the whole run, so two
    processes (two resumes, or a resume beside a live run) never append to one file."""
    import fcntl

    f = open(output, "rb")  # read-only handle, used only to hold the lock
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise ProvenanceError(f"{output} is being written by another running process; "
                              "refusing to write to it at the same time") from None
    return f


def _loop(config: RunConfig, retriever: Any, chosen: Sequence[Question], ids: list[str],
          done: set[str], protocols: list[str], meta: dict[str, Any], fingerprint: str,
          output: Path, resume: bool, repaired: bool, *, started_wall: float,
          command: Sequence[str] | None) -> RunOutcome:
    t_start = started_wall
    todo = [q for q in chosen if q.question_id not in done]
    started = datetime.now(UTC).isoformat(timespec="seconds")
    n_written = 0
    bar = _progress(len(ids), len(done), config.progress)
    try:
        with RowWriter(output) as writer:
            for q in todo:
                t0 = time.perf_counter()
                retriever.index(q.sessions)
                ranking = retriever.rank(q)
                ranking.check_complete(q.sessions)
                qtrace = retriever.question_trace(q) if hasattr(retriever, "question_trace") else {}
                row = make_row(q, ranking, protocols, qtrace, time.perf_counter() - t0)
                writer.write(row)
                n_written += 1
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        stats = retriever.stats() if hasattr(retriever, "stats") else {}
        record_run(output, {"mode": "resume" if resume else "fresh", "host": socket.gethostname(),
                            "command": list(command) if command is not None else None,
                            "started_at": started,
                            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
                            "wall_seconds": round(time.time() - t_start, 3),
                            "questions_written": n_written, "repaired_torn_line": repaired,
                            "use_cache": config.use_cache, "cache_dir": config.cache_dir,
                            "model_stats": stats})
    scan = scan_rows(output, allowed_ids=ids)
    if len(scan.rows) != len(ids) or scan.torn_bytes:
        raise ProvenanceError(f"{output}: expected {len(ids)} rows, found {len(scan.rows)}")
    summary = summarize_rows(_ordered(scan.rows, ids), protocols)
    summary = {"fingerprint": fingerprint, "dataset": meta["dataset"]["name"],
               "dataset_sha256": meta["dataset"]["sha256"], "retriever": config.retriever,
               "n_questions": len(ids), **summary}
    atomic_write(summary_path(output), dump_json(summary))
    return RunOutcome(output, fingerprint, n_written, len(ids), summary, repaired)


def _ordered(rows: Sequence[dict[str, Any]], ids: Sequence[str]) -> list[dict[str, Any]]:
    by = {r["question_id"]: r for r in rows}
    return [by[i] for i in ids]


def _progress(total: int, initial: int, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, initial=initial, unit="q", desc="questions", dynamic_ncols=True)


def floats_equal(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))
