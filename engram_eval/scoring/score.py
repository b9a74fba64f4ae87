"""Neutral scoring: any system's rankings scored on this package's definitions.

``engram-eval score RANKINGS.jsonl --dataset D`` reads ``{question_id, ranked_session_ids}``
lines (:func:`score_rankings`); :func:`score` takes the rankings as a mapping
``question_id -> ranked session ids`` (the Python API, :func:`engram_eval.score`). Both build
the same rows a run would (gold and metrics per protocol, from
:mod:`engram_eval.scoring.protocols`) and summarise them with
:func:`engram_eval.scoring.summary.summarize_rows`, so a foreign system and a run of this
package are measured identically.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import iter_json_lines
from engram_eval.data.datasets import load_questions
from engram_eval.data.records import Question
from engram_eval.errors import DataError
from engram_eval.scoring import protocols as P
from engram_eval.scoring.protocols import default_protocols
from engram_eval.scoring.summary import (
    GOLD_ABSENT,
    evidence_unresolved,
    evidence_unresolved_message,
    gold_absent,
    gold_absent_message,
    summarize_rows,
)

_log = logging.getLogger(__name__)


def read_rankings(path: str | Path, known: Collection[str] | None = None
                  ) -> dict[str, list[str]]:
    """Parse ``{question_id, ranked_session_ids}`` lines; with ``known``, a question id
    outside it is an error naming its line."""
    out: dict[str, list[str]] = {}
    for n, obj in iter_json_lines(path, what="a rankings file"):  # plain or gzipped, bounded
        if not isinstance(obj, dict):
            raise DataError(path, f"line {n}", "(row)", "must be a JSON object")
        qid = obj.get("question_id")
        ranked = obj.get("ranked_session_ids")
        if not isinstance(qid, str):
            raise DataError(path, f"line {n}", "question_id", "missing or not a string")
        if not isinstance(ranked, list) or not all(isinstance(x, str) for x in ranked):
            raise DataError(path, f"line {n} (question_id={qid})", "ranked_session_ids",
                            "missing or not a list of strings")
        if known is not None and qid not in known:
            raise DataError(path, f"line {n} (question_id={qid})", "question_id",
                            "not a question of the dataset")
        if qid in out:
            raise DataError(path, f"line {n} (question_id={qid})", "question_id",
                            "duplicate question id")
        if len(set(ranked)) != len(ranked):
            raise DataError(path, f"line {n} (question_id={qid})", "ranked_session_ids",
                            "repeats a session id")
        out[qid] = ranked
    return out


def score_rankings(rankings_path: str | Path, dataset: str | Path,
                   protocols: Sequence[str] | None = None, *, strict: bool = False,
                   gold_overlay: str | Path | None = None
                   ) -> tuple[dict[str, Any], dict[str, int]]:
    """Score ``{question_id, ranked_session_ids}`` lines against a dataset; returns
    ``(summary, counts)``.

    A question of the dataset with no ranking scores as an empty ranking (0 on every
    recall, 1 on recall_all only for no-gold questions) and is counted as ``missing``;
    with ``strict`` it is an error. Rankings for unknown question ids are always an error.
    ``gold_overlay``: a LoCoMo corrections file; the summary then carries ``gold_overlay``
    and ``protocols_audited`` too (:mod:`engram_eval.scoring.audited`).
    """
    fmt, questions = load_questions(dataset)
    protocols = list(protocols or default_protocols(fmt))
    for p in protocols:
        P._check_protocol(p)  # --protocol bogus: one ConfigError, before the rankings are read
    P.check_protocols(fmt, protocols)
    known = {q.question_id for q in questions}
    ranks = read_rankings(rankings_path, known)  # unknown question ids raise, naming the line
    return _score(ranks, questions, protocols, strict=strict, source=rankings_path,
                  dataset=dataset, gold_overlay=gold_overlay)


def score(rankings: Mapping[str, Sequence[str]], dataset: str | Path,
          protocols: Sequence[str] | None = None, *, strict: bool = False,
          gold_overlay: str | Path | None = None) -> dict[str, Any]:
    """Score any system's rankings (``question_id -> ranked session ids``, best first)
    against a LongMemEval or LoCoMo file, exactly as ``engram-eval score`` does.

    Returns the summary ``engram-eval score --output`` writes: ``{"counts": {questions,
    rankings, missing, session_ids_not_in_corpus, gold_absent_from_haystack}, "protocols":
    {protocol: {"n", "metrics", ...}}, ...}``; questions whose answer session ids are not in
    their haystack (scored as missed: no system can rank them) are also a logged warning. Protocols default to the dataset's (answerable, official, ... for
    LongMemEval; locomo, ... for LoCoMo). A question without a ranking scores as an empty
    ranking (``strict``: an error); an unknown question id or a ranking that repeats a session
    id is an error (DataError). ``gold_overlay``: a LoCoMo corrections file
    (:mod:`engram_eval.data.gold_overlay`): the summary also carries the metrics on the
    corrected evidence (``protocols_audited``) and what changed (``gold_overlay``)."""
    fmt, questions = load_questions(dataset)
    known = {q.question_id for q in questions}
    ranks: dict[str, list[str]] = {}
    for qid, ranked in rankings.items():
        ids = [ranked] if isinstance(ranked, str) else list(ranked)
        if not isinstance(qid, str) or qid not in known:
            raise DataError("(rankings)", f"question_id={qid}", "question_id",
                            "not a question of the dataset")
        if not all(isinstance(x, str) for x in ids):
            raise DataError("(rankings)", f"question_id={qid}", "ranked_session_ids",
                            "not a list of strings")
        if len(set(ids)) != len(ids):
            raise DataError("(rankings)", f"question_id={qid}", "ranked_session_ids",
                            "repeats a session id")
        ranks[qid] = ids
    summary, counts = _score(ranks, questions, list(protocols or default_protocols(fmt)),
                             strict=strict, source="(rankings)", dataset=dataset,
                             gold_overlay=gold_overlay)
    return {"counts": counts, **summary}


def _score(ranks: Mapping[str, list[str]], questions: Sequence[Question], protocols: list[str],
           *, strict: bool, source: str | Path, dataset: str | Path,
           gold_overlay: str | Path | None = None
           ) -> tuple[dict[str, Any], dict[str, int]]:
    missing = [q.question_id for q in questions if q.question_id not in ranks]
    absent = gold_absent(questions)
    if absent:  # never retrievable, by any system: said, as `engram-eval run` says it
        _log.warning("%s", gold_absent_message(dataset, absent))
    unresolved = evidence_unresolved(questions)
    if unresolved:  # no gold, out of every denominator: named, as `engram-eval run` does
        _log.warning("%s", evidence_unresolved_message(dataset, unresolved))
    if missing and strict:
        raise DataError(source, f"question_id={missing[0]}", "question_id",
                        f"no ranking for {len(missing)} question(s) of the dataset")
    rows = []
    foreign = 0
    for q in questions:
        ranked = ranks.get(q.question_id, [])
        foreign += len(set(ranked) - set(q.session_ids))
        rows.append({"question_id": q.question_id, "question_type": q.question_type,
                     "ranked_session_ids": ranked,
                     "gold": {p: (list(g) if (g := P.gold_for(q, p)) is not None else None)
                              for p in protocols},
                     "metrics": {p: P.score_question(q, ranked, p) for p in protocols}})
    summary = summarize_rows(rows, protocols)
    if gold_overlay is not None:
        from engram_eval.data.gold_overlay import read_gold_overlay
        from engram_eval.scoring.audited import audited_summary

        overlay = read_gold_overlay(gold_overlay, questions, dataset=dataset)
        summary.update(audited_summary(rows, overlay, questions, protocols))
    counts = {"questions": len(questions), "rankings": len(ranks), "missing": len(missing),
              "session_ids_not_in_corpus": foreign, GOLD_ABSENT: len(absent)}
    return summary, counts


def side_by_side(summary: dict[str, Any], metric_names: Sequence[str]) -> str:
    """The summary's metrics as a table, one column per protocol (``engram-eval score``)."""
    protos = list(summary["protocols"])
    head = f"{'metric':<16}" + "".join(
        f"{p + ' (n=' + str(summary['protocols'][p]['n']) + ')':>22}" for p in protos)
    lines = [head]
    for m in metric_names:
        lines.append(f"{m:<16}" + "".join(
            f"{summary['protocols'][p]['metrics'].get(m, float('nan')):>22.4f}" for p in protos))
    return "\n".join(lines)
