"""Per-question entries of a report: what the page's question list and drill-down show.

Every number comes from the row (its stored metrics, ranking, scores and per-session
trace, keys of the trace contract in :mod:`engram_eval.retrieval.hybrid`) or from the miss
analysis of :mod:`engram_eval.analysis.analyze`; nothing is re-scored here. Floats of the
traces are rounded to :data:`DIGITS` significant digits (display only; the metrics tables of
the page come from the summary, unrounded).

One entry per row, in row order::

    {"id", "type", "date", "text" (with the dataset, else None), "n_sessions",
     "outcome": "hit" | "miss" | "unscored",   # recall_all@k under the report's protocol
     "flip": "gained" | "lost" | "",           # with --against: compare's flips of recall_all@k
     "metrics": {name: value}, "metrics_against": {...} | None,
     "gold": [session ids] | None, "gold_ranks": {id: final rank | None},
     "gold_ranks_against": {...} | None,
     "misses": [analyze entry + class], "misses_against": [...] | None,
     "time_window", "temporal_status", "signals": [names],
     "sessions": [session entry, ...],   # the top ``depth``, then gold sessions below it
     "top_against": [[id, is_gold], ...] | None, "traced": number of traced sessions}

A session entry holds ``rank``, ``id``, ``score`` (the row's), ``gold``, ``below_depth``
(a gold session listed after the top ``depth``), ``signals`` (``[[score, rank], ...]``
aligned with the entry's ``signals``), the stage keys present in its trace (``fused``,
``fused_rank``, ``temporal``, ``in_window``, ``temporal_rank``, ``reranked``,
``rerank_rank``, ``raw_score``, ``base_raw_score``, ``moved_by_coverage``, ``rerank_turn``,
``passage``), ``other`` (any further trace keys, as short text), and with the dataset
``date``, ``turn`` (the best turn: ``{"index", "role", "text", "how"}``) and, for a gold
session, ``evidence`` (its first evidence turn when that is not the best turn).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engram_eval.data.records import Question, Session, Turn, has_chat_roles, user_turns

DIGITS = 6
TURN_CHARS = 600  # a turn's text is cut after this many characters (the rest is counted)
STAGE_KEYS = ("fused", "fused_rank", "temporal", "in_window", "temporal_rank", "reranked",
              "rerank_rank", "raw_score", "base_raw_score", "moved_by_coverage",
              "rerank_turn", "passage")
#: Trace keys neither a signal nor shown as a stage.
IGNORED_KEYS = frozenset({"corpus_index", "prior_rank", "final_score"})
_WORD = re.compile(r"[^\W_]+")  # runs of Unicode letters and digits, as passages tokenises


def rounded(x: Any) -> Any:
    """``x`` with floats rounded to :data:`DIGITS` significant digits (recursively)."""
    if isinstance(x, float):
        return float(f"{x:.{DIGITS}g}")
    if isinstance(x, list):
        return [rounded(v) for v in x]
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    return x


def trace_signals(row: Mapping[str, Any]) -> list[str]:
    """The row's signals: ``trace.question.signals``, else every trace key ``s`` with a
    numeric value that is neither a stage key nor ``<x>_rank`` (e.g. flat-bm25's score)."""
    q = (row.get("trace") or {}).get("question") or {}
    if isinstance(q, Mapping) and isinstance(q.get("signals"), list):
        return [str(s) for s in q["signals"]]
    names: list[str] = []
    for t in (row.get("trace") or {}).get("sessions") or []:
        if not isinstance(t, Mapping):
            continue
        for key, v in t.items():
            if (key in STAGE_KEYS or key in IGNORED_KEYS or key.endswith("_rank")
                    or isinstance(v, bool) or not isinstance(v, int | float)):
                continue
            if key not in names:
                names.append(key)
    return names


def _cut(text: str, limit: int) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    return text[:limit] + f" … [{len(text) - limit} more characters]"


def _question_terms(question: str) -> list[str]:
    from engram_eval.retrieval.passages import content_terms

    return content_terms(question)


def _matches(terms: Sequence[str], text: str) -> int:
    """How many distinct ``terms`` some word of ``text`` matches (equal, or one a regular
    plural of the other: :func:`engram_eval.retrieval.passages.terms_match`, by sets)."""
    from engram_eval.retrieval.passages import plural_variants

    tokens = set(_WORD.findall(text.lower()))
    singulars: set[str] = set()
    for tok in tokens:
        singulars |= plural_variants(tok)
    return sum(1 for t in terms
               if t in tokens or t in singulars or not plural_variants(t).isdisjoint(tokens))


def best_turn(session: Session, trace: Mapping[str, Any] | None, terms: Sequence[str],
              chat_roles: bool, limit: int = TURN_CHARS) -> dict[str, Any] | None:
    """The turn shown for a session: the cross-encoder's best turn when the trace names one
    (``rerank_turn``), else the user turn (every turn without chat roles) matching the most
    distinct content words of the question (:func:`engram_eval.retrieval.passages
    .content_terms`; ties: the earlier turn). A display choice, not a score."""
    k = (trace or {}).get("rerank_turn")
    if isinstance(k, int) and not isinstance(k, bool) and 0 <= k < len(session.turns):
        t = session.turns[k]
        return _turn(t, k, "the cross-encoder's best turn (rerank_turn)", limit)
    candidates = [t for t in user_turns(session, chat_roles) if t.content.strip()]
    if not candidates:
        return None
    best = max(candidates, key=lambda t: (_matches(terms, t.content), -t.index))
    return _turn(best, best.index, "the user turn sharing the most question words", limit)


def _turn(t: Turn, index: int, how: str, limit: int) -> dict[str, Any]:
    return {"index": index, "role": t.role, "text": _cut(t.content, limit), "how": how}


def evidence_turn(session: Session, question: Question) -> Turn | None:
    """The session's first evidence turn: ``has_answer`` (LongMemEval) or a ``turn_id``
    among the question's ``evidence_dia_ids`` (LoCoMo)."""
    ids = question.get_extra("evidence_dia_ids") or ()
    wanted = {str(i) for i in ids} if isinstance(ids, list | tuple) else set()
    for t in session.turns:
        if t.has_answer or (t.turn_id and t.turn_id in wanted):
            return t
    return None


def _session_entry(rank: int, sid: str, score: Any, trace: Mapping[str, Any] | None,
                   gold: set[str], signals: Sequence[str]) -> dict[str, Any]:
    e: dict[str, Any] = {"rank": rank, "id": sid, "score": rounded(score), "gold": sid in gold}
    if trace is None:
        e["untraced"] = True
        return e
    e["signals"] = [[rounded(trace.get(s)), trace.get(s + "_rank")] for s in signals]
    for key in STAGE_KEYS:
        if key in trace:
            e[key] = rounded(trace[key])
    other = {k: v for k, v in trace.items()
             if k not in STAGE_KEYS and k not in IGNORED_KEYS and k not in signals
             and not (k.endswith("_rank") and k[:-5] in signals)}
    if other:
        text = json.dumps(rounded(other), ensure_ascii=False, sort_keys=True)
        e["other"] = text if len(text) <= 300 else text[:300] + " …"
    return e


def question_entries(rows: Sequence[Mapping[str, Any]], *, protocol: str, k: int, depth: int,
                     questions: Mapping[str, Question] | None = None,
                     misses: Mapping[str, list[dict[str, Any]]] | None = None,
                     against_rows: Sequence[Mapping[str, Any]] | None = None,
                     misses_against: Mapping[str, list[dict[str, Any]]] | None = None,
                     flips: Mapping[str, Iterable[str]] | None = None,
                     metric_names: Sequence[str] = (), turn_chars: int = TURN_CHARS
                     ) -> list[dict[str, Any]]:
    """One entry per row (module doc). ``depth``: sessions listed per question (0: every
    traced one); ``misses``: question id -> the ``missed`` list of
    :func:`engram_eval.analysis.analyze.analyze_rows`; ``flips``: ``{"gained": ids, "lost":
    ids}`` of compare's flips of ``recall_all@k``; ``turn_chars``: a turn's text is cut after
    this many characters (0: never)."""
    other = {r["question_id"]: r for r in against_rows or ()}
    gained = set((flips or {}).get("gained", ()))
    lost = set((flips or {}).get("lost", ()))
    out = []
    for row in rows:
        qid = row["question_id"]
        q = (questions or {}).get(qid)
        metrics = (row.get("metrics") or {}).get(protocol)
        gold_list = (row.get("gold") or {}).get(protocol)
        gold = set(gold_list or ())
        ranked = list(row.get("ranked_session_ids") or [])
        scores = list(row.get("scores") or [])
        traces = (row.get("trace") or {}).get("sessions") or []
        pos = {sid: i for i, sid in enumerate(ranked)}
        signals = trace_signals(row)
        n = len(ranked) if depth <= 0 else min(depth, len(ranked))
        if depth <= 0 and traces:
            n = min(n, len(traces))
        show = list(range(n)) + sorted(pos[g] for g in gold if g in pos and pos[g] >= n)
        chat_roles = has_chat_roles(q.sessions) if q is not None else True
        terms = _question_terms(q.question) if q is not None else []
        by_sid = {s.session_id: s for s in q.sessions} if q is not None else {}
        sessions = []
        for i in show:
            sid = ranked[i]
            t = traces[i] if i < len(traces) and isinstance(traces[i], Mapping) else None
            e = _session_entry(i + 1, sid, scores[i] if i < len(scores) else None, t, gold,
                               signals)
            if i >= n:
                e["below_depth"] = True
            s = by_sid.get(sid)
            if s is not None and q is not None:
                e["date"] = s.date
                bt = best_turn(s, t, terms, chat_roles, turn_chars)
                if bt is not None:
                    e["turn"] = bt
                if sid in gold:
                    ev = evidence_turn(s, q)
                    if ev is not None and (bt is None or ev.index != bt["index"]):
                        e["evidence"] = _turn(ev, ev.index, "evidence turn (dataset)",
                                              turn_chars)
            sessions.append(e)
        outcome = ("unscored" if metrics is None or gold_list is None else
                   "hit" if metrics.get(f"recall_all@{k}") == 1 else "miss")
        qt = (row.get("trace") or {}).get("question") or {}
        entry: dict[str, Any] = {
            "id": qid, "type": row.get("question_type"), "date": row.get("question_date"),
            "text": q.question if q is not None else None,
            "n_sessions": len(ranked), "outcome": outcome,
            "flip": "gained" if qid in gained else "lost" if qid in lost else "",
            "metrics": _pick(metrics, metric_names), "gold": gold_list,
            "gold_ranks": {g: (pos[g] + 1 if g in pos else None) for g in gold_list or ()},
            "misses": rounded((misses or {}).get(qid, [])),
            "time_window": qt.get("time_window") if isinstance(qt, Mapping) else None,
            "temporal_status": qt.get("temporal_status") if isinstance(qt, Mapping) else None,
            "signals": signals, "sessions": sessions, "traced": len(traces),
            "metrics_against": None, "gold_ranks_against": None, "misses_against": None,
            "top_against": None}
        b = other.get(qid)
        if b is not None:
            b_ranked = list(b.get("ranked_session_ids") or [])
            b_pos = {sid: i for i, sid in enumerate(b_ranked)}
            entry["metrics_against"] = _pick((b.get("metrics") or {}).get(protocol),
                                             metric_names)
            entry["gold_ranks_against"] = {g: (b_pos[g] + 1 if g in b_pos else None)
                                           for g in gold_list or ()}
            entry["misses_against"] = rounded((misses_against or {}).get(qid, []))
            entry["top_against"] = [[sid, sid in gold] for sid in b_ranked[:max(n, k)]]
        out.append(entry)
    return out


def _pick(metrics: Mapping[str, Any] | None, names: Sequence[str]) -> dict[str, Any] | None:
    if metrics is None:
        return None
    return {n: metrics[n] for n in names if n in metrics}
