"""Exports of a finished run: ``export`` (ids and scores without conversation text, or a
LongMemEval reference-layout log) and ``compress`` (``x.jsonl`` -> ``x.jsonl.gz``, sidecar and
summary renamed with it, verified before the originals are removed).

The TREC run/qrels export is :mod:`engram_eval.runs.trec`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from engram_eval.data.datasets import load_questions
from engram_eval.errors import DataError, ProvenanceError
from engram_eval.io import (
    exclusive_write,
    input_problem,
    refuse_links,
    remove_contained,
    sha256_file,
)
from engram_eval.provenance.sidecar import sidecar_path, summary_path
from engram_eval.runs.reader import read_run
from engram_eval.runs.rows import open_rows, read_rows_bytes
from engram_eval.runs.verify import verify
from engram_eval.scoring import protocols as P


def export_public(result: str | Path, out: str | Path) -> int:
    """Ids and scores only (no conversation text, no traces); refuses to overwrite."""
    rows = read_run(result, within_selection=True).rows
    lines = [json.dumps({"question_id": r["question_id"], "question_type": r["question_type"],
                         "ranked_session_ids": r["ranked_session_ids"], "scores": r["scores"]},
                        ensure_ascii=False) for r in rows]
    exclusive_write(out, "".join(line + "\n" for line in lines))
    return len(lines)


def export_official_log(result: str | Path, out: str | Path, dataset: str | Path) -> int:
    """A retrieval log in the LongMemEval reference layout (``run_retrieval.py`` output), read
    by the reference ``print_retrieval_metrics.py`` as is.

    One JSON object per question (``_abs`` ones included, as the reference writes them), with
    ``retrieval_results.ranked_items[].corpus_id`` and ``metrics.session`` holding *every*
    metric (``recall_any@k``, ``recall_all@k``, ``ndcg_any@k`` for k in 1, 3, 5, 10, 30, 50)
    computed with the reference rule (:func:`~engram_eval.scoring.metrics.reference_entry_metrics`
    on :func:`~engram_eval.scoring.protocols.reference_gold`), also for questions with no gold (0, 1,
    0). Ids follow the reference indexer: an answer session without a user ``has_answer``
    turn is relabelled ``answer`` -> ``noans``, and a session id listed ``n`` times in the
    haystack is listed ``n`` times (adjacent, same score). The printer's means over the
    non-``_abs`` questions are therefore exactly this package's ``official`` summary."""
    run = read_run(result, within_selection=True)
    rows = run.rows
    # The log carries the dataset's questions, answers and ids beside the run's ranking:
    # another file with the same question ids (another release, an edited copy) would
    # silently mix the two.
    got = sha256_file(dataset)
    if got != run.dataset_sha256:
        raise ProvenanceError(f"{dataset}: sha256 {got[:16]}... is not the dataset of the run "
                              f"{result} ({(run.dataset_sha256 or '?')[:16]}...); pass the "
                              "dataset the run was made over")
    _, qs = load_questions(dataset, run.metadata["dataset_format"])
    by_id = {q.question_id: q for q in qs}
    lines = []
    for r in rows:
        q = by_id.get(r["question_id"])
        if q is None:
            raise DataError(dataset, f"question_id={r['question_id']}", "question_id",
                            f"question of {result} is not in the dataset")
        sess = {s.session_id: s for s in q.sessions}
        entries = P.entry_counts(q)
        gold = P.reference_gold(q)
        ranking = r["ranked_session_ids"]
        metrics = P.metrics_for_gold("official", gold, ranking, entries)
        items: list[dict[str, Any]] = []
        for sid, sc in zip(ranking, r["scores"], strict=True):
            cid = P.reference_corpus_id(sess[sid])
            items.extend({"corpus_id": cid, "score": sc} for _ in range(entries.get(sid, 1)))
        session = {k: v for k, v in metrics.items()
                   if k.split("@")[0] in ("recall_any", "recall_all", "ndcg_any")}
        lines.append(json.dumps({
            "question_id": q.question_id, "question_type": q.question_type,
            "question": q.question, "answer": q.answer, "question_date": q.question_date,
            "answer_session_ids": list(q.answer_session_ids),
            "retrieval_results": {
                "query": q.question,
                "ranked_items": items,
                "metrics": {"session": session, "turn": {}},
            }}, ensure_ascii=False))
    exclusive_write(out, "".join(line + "\n" for line in lines))
    return len(lines)


def compress_result(result: str | Path) -> Path:
    """Write ``RESULT.gz`` (gzip, mtime 0, so the bytes are deterministic) with its sidecar
    ``RESULT.gz.metadata.json`` and summary ``RESULT.gz.summary.json`` (copied unchanged: the
    rows hash is over the uncompressed bytes), verify the new file, and only then remove the
    uncompressed result, sidecar and summary. Refuses to overwrite; on a failed verification
    the new files are removed and the original kept."""
    src = Path(result)
    dst = Path(str(src) + ".gz")
    if src.name.endswith(".gz"):
        raise ProvenanceError(f"{src} already ends in .gz")
    refuse_links(dst, sidecar_path(dst), summary_path(dst))
    for p in (src, sidecar_path(src), summary_path(src)):
        why = input_problem(p)  # missing, a directory, a FIFO, a dangling link: said so
        if why:
            raise ProvenanceError(f"{p}: {why}; compress needs the result, its sidecar and "
                                  "its summary")
    with open_rows(src) as f:
        head = f.read(2)
    if head == b"\x1f\x8b":
        raise ProvenanceError(f"{src} is already gzip-compressed")
    before = verify(src)
    if not before.ok:
        raise ProvenanceError(f"{src} does not verify; refusing to compress it:\n"
                              + before.format())
    raw = read_rows_bytes(src)
    data = gzip.compress(raw, compresslevel=9, mtime=0)
    created: list[Path] = []
    try:
        for path, content in ((dst, data),
                              (sidecar_path(dst), sidecar_path(src).read_bytes()),
                              (summary_path(dst), summary_path(src).read_bytes())):
            exclusive_write(path, content)
            created.append(path)
        after = verify(dst)
        if not after.ok or after.checks != before.checks:
            raise ProvenanceError(f"{dst} does not verify like {src}:\n" + after.format())
    except BaseException:
        for path in created:  # ours, created a moment ago
            remove_contained(path, dst.parent, recursive=False)
        raise
    for p in (summary_path(src), sidecar_path(src), src):  # a link is removed as a link
        remove_contained(p, src.parent, recursive=False)
    return dst
