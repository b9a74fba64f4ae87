"""Per-row checks of ``verify`` beyond gold and metrics: every row field that derives from
the dataset or the run, re-derived and compared (:func:`field_problems`), and the traces that
summaries, ``analyze`` and ``tune`` read held to the ranking, the scores and the dataset
(:func:`trace_problems`). ``--resume`` runs them on every row it keeps
(:func:`engram_eval.runs.verify.check_row`).

Each problem is one string naming the row (question id) and the field:
``question 'ID': field 'NAME': what differs``. Without the dataset's question only what the
row and the run determine is checked (key sets, counts, the trace against the ranking).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from engram_eval.data.records import Question, has_chat_roles
from engram_eval.runs.known_fields import row_unknown_fields
from engram_eval.runs.rows import OPTIONAL_ROW_FIELDS, ROW_FIELDS

#: The per-session ranks of the hybrid trace (1-based, within the question's corpus).
RANK_FIELDS = ("fused_rank", "prior_rank", "temporal_rank")


def problem(qid: Any, field: str, what: str) -> str:
    return f"question {qid!r}: field {field!r}: {what}"


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def floats_equal(a: Any, b: Any) -> bool:
    """Two numbers equal up to float noise (1e-12); False for anything else."""
    return is_number(a) and is_number(b) and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_rank(value: Any, n: int) -> bool:
    """A 1-based rank in a corpus of ``n``."""
    return is_int(value) and 1 <= value <= n


def field_problems(row: Mapping[str, Any], question: Question | None,
                   protocols: Sequence[str]) -> list[str]:
    """Keys outside :data:`~engram_eval.runs.rows.ROW_FIELDS` or missing, ``gold`` and
    ``metrics`` keyed by exactly the run's protocols, ``n_sessions`` the ranking's length,
    ``timing.seconds`` a non-negative number; with the dataset's ``question`` also
    ``question_type``, ``question_date`` and ``n_sessions`` equal to what it gives."""
    qid = row.get("question_id")
    out = [problem(qid, k, "not a field engram-eval writes in a row")
           for k in row_unknown_fields(row)]
    out += [problem(qid, f, "missing (every row engram-eval writes has it)")
            for f in ROW_FIELDS if f not in row and f not in OPTIONAL_ROW_FIELDS]
    for name in ("gold", "metrics"):
        value = row.get(name)
        if isinstance(value, Mapping) and set(value) != set(protocols):
            out.append(problem(qid, name, f"keyed by {sorted(value)}; the run's protocols are "
                               f"{list(protocols)}"))
    ranking = row.get("ranked_session_ids")
    n = len(ranking) if isinstance(ranking, list) else None
    ns = row.get("n_sessions")
    if "n_sessions" in row and n is not None and (isinstance(ns, bool) or ns != n):
        out.append(problem(qid, "n_sessions", f"{ns!r}, but {n} sessions are ranked"))
    timing = row.get("timing")
    if "timing" in row:
        secs: Any = timing.get("seconds") if isinstance(timing, Mapping) else None
        if not (is_number(secs) and math.isfinite(secs) and secs >= 0):
            out.append(problem(qid, "timing", "must be {'seconds': a non-negative number}"))
    if question is not None:
        for name, want in (("question_type", question.question_type),
                           ("question_date", question.question_date),
                           ("n_sessions", len(question.sessions))):
            if name in row and row[name] != want:
                out.append(problem(qid, name, f"{row[name]!r}; the dataset gives {want!r}"))
    return out


def trace_problems(row: Mapping[str, Any], question: Question | None, *,
                   trace_sessions: int | None = None, text_known: bool = True) -> list[str]:
    """The row's ``trace`` against its ranking and scores (and the dataset's ``question``).

    * ``trace.sessions``: one object per ranked session in rank order, as many as the run
      keeps (``trace_sessions``: the run's setting, 0 = all; None = unknown, at most all);
    * per session, where the retriever traces it: ``corpus_index`` a distinct position in the
      haystack holding the session ranked there (with the dataset), ``final_score`` the
      row's score at that rank, ``prior_rank`` = ``fused_rank``, ranks within the corpus,
      ``rerank_rank`` set exactly for ``reranked`` sessions, which come first, at most one
      ``moved_by_coverage``, the ``temporal`` multiplier following from ``in_window`` and the
      question trace's ``temporal``/``temporal_boost``;
    * with the dataset: ``trace.question``'s ``chat_roles`` and ``structure.kind`` from the
      haystack's roles, and, when the question's text is the run's (``text_known``: False for
      a run that replaced question texts, unless that file is given), ``temporal_status``,
      ``time_window`` and each session's ``in_window`` re-derived by the temporal parser."""
    qid = row.get("question_id")
    trace = row.get("trace")
    ranking = row.get("ranked_session_ids")
    if not isinstance(trace, Mapping) or not isinstance(ranking, list):
        return [problem(qid, "trace", "not an object")] if "trace" in row else []
    sessions = trace.get("sessions")
    qt = trace.get("question")
    out = []
    if not isinstance(qt, Mapping):
        out.append(problem(qid, "trace.question", "not an object"))
        qt = {}
    if not isinstance(sessions, list) or not all(isinstance(t, Mapping) for t in sessions):
        return [*out, problem(qid, "trace.sessions", "not a list of objects")]
    n = len(ranking)
    want = n if not trace_sessions else min(trace_sessions, n)
    if trace_sessions is None and len(sessions) > n:
        out.append(problem(qid, "trace.sessions", f"{len(sessions)} traces for {n} ranked "
                           "sessions"))
    elif trace_sessions is not None and len(sessions) != want:
        out.append(problem(qid, "trace.sessions", f"{len(sessions)} traces; the run keeps "
                           f"{want} ({n} ranked, trace_sessions {trace_sessions})"))
    window, window_known = None, False
    if question is not None:
        out += _roles_problems(qid, qt, question)
        if text_known and "temporal_status" in qt:
            from engram_eval.retrieval.temporal import safe_time_window

            window, status = safe_time_window(question.question, question.question_date)
            window_known = True
            out += _window_problems(qid, qt, window, status)
    scores = row.get("scores")
    scores = scores if isinstance(scores, list) and len(scores) == n else None
    seen: dict[int, int] = {}
    below_unreranked = moved = 0
    for i, t in enumerate(sessions[:n]):
        where = f"trace.sessions[{i}]"
        ci = t.get("corpus_index")
        if "corpus_index" in t:
            if not (is_int(ci) and 0 <= ci < n):
                out.append(problem(qid, f"{where}.corpus_index", f"{ci!r} is not a position "
                                   f"in a corpus of {n}"))
                ci = None
            elif ci in seen:
                out.append(problem(qid, f"{where}.corpus_index", f"{ci} repeats rank "
                                   f"{seen[ci] + 1}'s"))
                ci = None
            else:
                seen[ci] = i
                if question is not None and question.session_ids[ci] != ranking[i]:
                    out.append(problem(qid, f"{where}.corpus_index", f"{ci} is session "
                                       f"{question.session_ids[ci]!r} in the dataset, but "
                                       f"{ranking[i]!r} is ranked there"))
        if "final_score" in t and scores is not None and not floats_equal(t["final_score"],
                                                                          scores[i]):
            out.append(problem(qid, f"{where}.final_score", f"{t['final_score']!r}, but the "
                               f"row's score at rank {i + 1} is {scores[i]!r}"))
        out += [problem(qid, f"{where}.{k}", f"{t[k]!r} is not a rank in a corpus of {n}")
                for k in RANK_FIELDS if k in t and not is_rank(t[k], n)]
        if "prior_rank" in t and "fused_rank" in t and t["prior_rank"] != t["fused_rank"]:
            out.append(problem(qid, f"{where}.prior_rank", f"{t['prior_rank']!r}, but "
                               f"fused_rank is {t['fused_rank']!r} (the same rank)"))
        if "reranked" in t:
            # the coverage step may move the prior leader, reranked or not, up the ranking
            bad, below_unreranked = _rerank_problem(t, n, below_unreranked,
                                                    t.get("moved_by_coverage") is True)
            if bad:
                out.append(problem(qid, f"{where}.reranked", bad))
        if "moved_by_coverage" in t:
            moved += 1
            if t["moved_by_coverage"] is not True or moved > 1:
                out.append(problem(qid, f"{where}.moved_by_coverage", "only ever true, and "
                                   "on one session at most"))
        bad_t = _multiplier_problem(t, qt)
        if bad_t:
            out.append(problem(qid, f"{where}.temporal", bad_t))
        if window_known and question is not None and ci is not None and "in_window" in t:
            expect = _in_window(window, question.sessions[ci].date)
            if t["in_window"] != expect:
                out.append(problem(qid, f"{where}.in_window", f"{t['in_window']!r}; the "
                                   f"session's date in the dataset gives {expect!r}"))
    return out


def _roles_problems(qid: Any, qt: Mapping[str, Any], question: Question) -> list[str]:
    """``chat_roles`` and ``structure.kind`` of the question trace against the haystack."""
    roles = has_chat_roles(question.sessions)
    out = []
    if "chat_roles" in qt and qt["chat_roles"] != roles:
        out.append(problem(qid, "trace.question.chat_roles", f"{qt['chat_roles']!r}; the "
                           f"haystack's roles give {roles!r}"))
    structure = qt.get("structure")
    kind = "chat" if roles else "people"
    if isinstance(structure, Mapping) and structure.get("kind") != kind:
        out.append(problem(qid, "trace.question.structure", f"kind {structure.get('kind')!r}; "
                           f"the haystack's roles give {kind!r}"))
    return out


def window_trace(window: Any) -> dict[str, str] | None:
    """A question trace's ``time_window`` for ``window``, as the pipeline writes it
    (:func:`engram_eval.retrieval.pipeline.window_trace`, not imported here so that a run
    of another retriever does not execute the pipeline's module; tests/runs/test_verify.py checks
    the two agree)."""
    if window is None:
        return None
    return {"start": window.start.isoformat(), "end": window.end.isoformat(),
            "expression": window.expression, "kind": window.kind}


def _window_problems(qid: Any, qt: Mapping[str, Any], window: Any, status: str) -> list[str]:
    """``temporal_status`` and ``time_window`` of the question trace against what the
    temporal parser gives for the question's text and date."""
    out = []
    if qt["temporal_status"] != status:
        out.append(problem(qid, "trace.question.temporal_status",
                           f"{qt['temporal_status']!r}; the question's text and date give "
                           f"{status!r}"))
    if qt.get("time_window") != window_trace(window):
        out.append(problem(qid, "trace.question.time_window",
                           f"{qt.get('time_window')!r}; the question's text and date give "
                           f"{window_trace(window)!r}"))
    return out


def _in_window(window: Any, date_text: str) -> bool | None:
    """What the pipeline traces as a session's ``in_window``
    (:func:`engram_eval.retrieval.pipeline.locate_in_window`)."""
    from engram_eval.retrieval.temporal import parse_date

    if window is None:
        return None
    d = parse_date(date_text)
    return None if d is None else bool(window.contains(d))


def _rerank_problem(t: Mapping[str, Any], n: int, below_unreranked: int,
                    moved: bool) -> tuple[str, int]:
    """(what is wrong with ``reranked``/``rerank_rank`` or "", updated count of sessions not
    reranked seen so far); the pipeline ranks reranked sessions first, except the one the
    coverage step ``moved``."""
    reranked, rr = t["reranked"], t.get("rerank_rank")
    if not isinstance(reranked, bool):
        return f"{reranked!r} is not true or false", below_unreranked
    if not reranked:
        return (("" if rr is None else f"false, but rerank_rank is {rr!r}"),
                below_unreranked + (not moved))
    if not is_rank(rr, n):
        return f"true, but rerank_rank {rr!r} is not a rank", below_unreranked
    if below_unreranked and not moved:
        return "a reranked session ranked below one that was not reranked", below_unreranked
    return "", below_unreranked


def _multiplier_problem(t: Mapping[str, Any], qt: Mapping[str, Any]) -> str:
    """The traced multiplier against ``in_window`` and the question's temporal settings
    (``temporal_boost`` once inside the window with ``temporal`` on, else 1)."""
    if not all(k in t for k in ("temporal", "in_window")) or not all(
            k in qt for k in ("temporal", "temporal_boost")):
        return ""
    boost = qt["temporal_boost"] if qt["temporal"] is True and t["in_window"] is True else 1.0
    if floats_equal(t["temporal"], boost):
        return ""
    return (f"{t['temporal']!r}, but in_window {t['in_window']!r} with temporal "
            f"{qt['temporal']!r} and temporal_boost {qt['temporal_boost']!r} gives {boost!r}")
