"""TREC interchange: a run's rankings as a TREC run file and its gold as TREC qrels.

``engram-eval trec RUN.jsonl --trec-run OUT.run --trec-qrels OUT.qrels [--protocol P]``

* Run file, one line per ranked session: ``qid Q0 docid rank score tag`` (rank 1-based, in
  the row's order). Standard tools (trec_eval, ir_measures, ranx) re-sort by score and break
  ties their own way, so the score column must be *strictly* decreasing to keep our order:
  ``--scores stored`` writes the row's stored scores and refuses a question whose scores tie
  or increase; ``--scores rank`` writes ``n - rank + 1``; ``auto`` (default) uses the stored
  scores when every exported question's are strictly decreasing, else rank scores for all
  (said on stdout and in :attr:`TrecExport.score_source`).
* Qrels: ``qid 0 docid 1`` for each gold session under the protocol, including gold ids that
  were never ranked (so recall and the ideal DCG count them, as ours do).
* Only questions scored under the protocol are exported. A question whose gold is empty
  (possible under ``official``/``all``) has no qrels line; TREC tools then leave it out of
  their averages while our ``official`` keeps it (recall_all 1, recall_any 0), so compare
  such protocols per question, not by their means.

Metric correspondence (checked on a fixture against ir_measures in tests/runs/test_trec.py):
``recall_any@k`` = ``hit@k`` = ``Success@k``; ``recall_all@k`` = 1 exactly when ``R@k`` = 1;
``mrr`` = ``RR``. ``ndcg_any@k`` is the official LongMemEval variant, DCG = rel_1 +
sum_{i>=2} rel_i / log2(i) (ranks 1 and 2 weigh the same), while TREC ``nDCG@k`` uses
rel_i / log2(i + 1). Both normalise by the ideal DCG over all gold ids, so they agree when the
top k is ideal (all of min(|gold|, k) gold ids first) or holds no gold, and differ otherwise
(one gold id at rank 2: ours 1/log2(2) = 1.0, TREC 1/log2(3) = 0.631).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError, DataError
from engram_eval.io import already_exists
from engram_eval.runs.reader import FinishedRun, read_run


@dataclass(frozen=True)
class TrecExport:
    run_text: str
    qrels_text: str
    n_questions: int
    n_qrels: int
    score_source: str  # "stored" or "rank"
    reason: str


def _check_id(source: str | Path, qid: str, what: str, ident: Any) -> str:
    if not isinstance(ident, str) or not ident or any(c.isspace() for c in ident):
        raise DataError(source, f"question_id={qid}", what,
                        f"{ident!r} cannot be written to a TREC file (empty or has whitespace)")
    return ident


def _strictly_decreasing(scores: Sequence[float]) -> bool:
    return all(a > b for a, b in zip(scores, scores[1:], strict=False))


def trec_export(rows: Sequence[Mapping[str, Any]], *, protocol: str = "answerable",
                tag: str = "engram-eval", scores: str = "auto",
                source: str | Path = "(rows)") -> TrecExport:
    if scores not in ("auto", "stored", "rank"):
        raise ConfigError(f"--scores must be auto, stored or rank, got {scores!r}")
    if not tag or any(c.isspace() for c in tag):
        raise ConfigError(f"--tag {tag!r}: a TREC run tag cannot be empty or contain spaces")
    chosen = [r for r in rows
              if isinstance(r.get("metrics"), dict) and r["metrics"].get(protocol) is not None]
    if not chosen:
        raise ConfigError(f"no row is scored under protocol {protocol!r}")
    bad = None
    for r in chosen:
        s = r["scores"]
        if len(s) != len(r["ranked_session_ids"]):
            raise DataError(source, f"question_id={r['question_id']}", "scores",
                            "length differs from ranked_session_ids")
        if bad is None and not _strictly_decreasing([float(x) for x in s]):
            bad = r["question_id"]
    if scores == "stored" and bad is not None:
        raise DataError(source, f"question_id={bad}", "scores",
                        "stored scores tie or increase down the ranking; TREC tools would "
                        "re-order them (use --scores rank)")
    use = "rank" if scores == "rank" or (scores == "auto" and bad is not None) else "stored"
    reason = ("requested" if scores != "auto" else
              "every exported question's stored scores strictly decrease" if use == "stored"
              else f"stored scores tie or increase (first: question {bad})")
    run_lines: list[str] = []
    qrel_lines: list[str] = []
    for r in chosen:
        qid = _check_id(source, r["question_id"], "question_id", r["question_id"])
        ranked = r["ranked_session_ids"]
        n = len(ranked)
        for i, sid in enumerate(ranked):
            _check_id(source, qid, f"ranked_session_ids[{i}]", sid)
            sc = float(r["scores"][i]) if use == "stored" else float(n - i)
            run_lines.append(f"{qid} Q0 {sid} {i + 1} {sc!r} {tag}")
        gold = (r.get("gold") or {}).get(protocol)
        if gold is None:
            raise DataError(source, f"question_id={qid}", f"gold.{protocol}",
                            "row carries no gold for the protocol")
        for j, g in enumerate(dict.fromkeys(gold)):
            _check_id(source, qid, f"gold.{protocol}[{j}]", g)
            qrel_lines.append(f"{qid} 0 {g} 1")
    return TrecExport("\n".join(run_lines) + "\n", "\n".join(qrel_lines) + "\n",
                      len(chosen), len(qrel_lines), use, reason)


def export_run(run: FinishedRun | str | Path, *, run_out: str | Path | None,
               qrels_out: str | Path | None, protocol: str | None = None,
               tag: str | None = None, scores: str = "auto") -> TrecExport:
    """Write a finished run's (a path, plain or gzipped, or a run already read with
    :func:`~engram_eval.runs.reader.read_run`) TREC run and/or qrels (exclusive)."""
    from engram_eval.io import exclusive_write

    if not run_out and not qrels_out:
        raise ConfigError("trec: give --trec-run PATH and/or --trec-qrels PATH")
    for p in (run_out, qrels_out):
        if p and Path(p).exists():
            raise FileExistsError(already_exists(p))
    if not isinstance(run, FinishedRun):
        run = read_run(run)
    protocol = protocol or run.default_protocol
    t = tag or (run.retriever or run.path.name.split(".")[0])
    t = "".join("_" if c.isspace() else c for c in t)
    out = trec_export(run.rows, protocol=protocol, tag=t, scores=scores, source=run.path)
    if run_out:
        exclusive_write(run_out, out.run_text)
    if qrels_out:
        exclusive_write(qrels_out, out.qrels_text)
    return out
