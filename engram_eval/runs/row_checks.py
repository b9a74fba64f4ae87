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

import functools
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


def is_finite_number(x: Any) -> bool:
    """A number a float holds, not NaN or infinite (an integer of 400 digits is not one: no
    writer of the package writes one, and every reader would fail converting it)."""
    if not is_number(x):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _shown(value: Any) -> str:
    """``value`` for a message, cut short (a forged number may have hundreds of digits)."""
    from engram_eval.retrieval.settings import short_repr

    return short_repr(value, 40)


def _bad_item(items: list[Any], ok: Any) -> str:
    """Where the first item of ``items`` failing ``ok`` is, and what it holds."""
    i = next(i for i, x in enumerate(items) if not ok(x))
    return f"item {i} is {_shown(items[i])}"


def row_shape_problems(row: Mapping[str, Any]) -> list[str]:
    """The types every reader of a finished run relies on, whatever the dataset and the run:
    ``question_type`` a string, ``ranked_session_ids`` a list of strings, ``scores`` as many
    finite numbers, ``gold`` and ``metrics`` objects keyed by protocol (a gold list of
    session ids or null; metrics an object of finite numbers or null), ``trace`` an object
    whose ``question`` is an object and ``sessions`` a list of objects, ``timing`` an
    object. ``verify`` reports these as failed checks and checks such a row no further;
    every other reader refuses the run (:func:`engram_eval.runs.reader.read_run`)."""
    qid = row.get("question_id")
    out = []
    if "question_type" in row and not isinstance(row["question_type"], str):
        out.append(problem(qid, "question_type", f"{_shown(row['question_type'])} is not a "
                           "string"))
    ranking = row.get("ranked_session_ids")
    if not isinstance(ranking, list) or not all(isinstance(x, str) for x in ranking):
        out.append(problem(qid, "ranked_session_ids", "not a list of session ids (" + (
            _bad_item(ranking, lambda x: isinstance(x, str)) if isinstance(ranking, list)
            else _shown(ranking)) + ")"))
    scores = row.get("scores")
    if not isinstance(scores, list) or not all(is_finite_number(x) for x in scores):
        out.append(problem(qid, "scores", "not a list of finite numbers (" + (
            _bad_item(scores, is_finite_number) if isinstance(scores, list)
            else _shown(scores)) + ")"))
    elif isinstance(ranking, list) and len(scores) != len(ranking):
        out.append(problem(qid, "scores", f"{len(scores)} scores for {len(ranking)} ranked "
                           "sessions"))
    for name in ("gold", "metrics"):
        if name in row and not isinstance(row[name], Mapping):
            out.append(problem(qid, name, f"{_shown(row[name])} is not an object keyed by "
                               "protocol"))
    for p, g in (row.get("gold") or {}).items() if isinstance(row.get("gold"), Mapping) else ():
        if g is not None and not (isinstance(g, list) and all(isinstance(x, str) for x in g)):
            out.append(problem(qid, f"gold.{p}", f"{_shown(g)} is not a list of session ids "
                               "or null"))
    metrics = row.get("metrics")
    for p, m in metrics.items() if isinstance(metrics, Mapping) else ():
        if m is None:
            continue
        if not isinstance(m, Mapping):
            out.append(problem(qid, f"metrics.{p}", f"{_shown(m)} is not an object or null"))
            continue
        out += [problem(qid, f"metrics.{p}.{k}", f"{_shown(v)} is not a finite number")
                for k, v in m.items() if not is_finite_number(v)]
        out += [problem(qid, f"metrics.{p}.{str(k)[:60]}", "not a metric engram-eval computes")
                for k in m if not is_metric_name(k)]
    trace = row.get("trace")
    if "trace" in row and not isinstance(trace, Mapping):
        out.append(problem(qid, "trace", f"{_shown(trace)} is not an object"))
    elif isinstance(trace, Mapping):
        if "question" in trace and not isinstance(trace["question"], Mapping):
            out.append(problem(qid, "trace.question", f"{_shown(trace['question'])} is not "
                               "an object"))
        sessions = trace.get("sessions")
        if "sessions" in trace and not (isinstance(sessions, list) and all(
                isinstance(t, Mapping) for t in sessions)):
            out.append(problem(qid, "trace.sessions", "not a list of objects (" + (
                _bad_item(sessions, lambda t: isinstance(t, Mapping))
                if isinstance(sessions, list) else _shown(sessions)) + ")"))
    if "timing" in row and not isinstance(row["timing"], Mapping):
        out.append(problem(qid, "timing", f"{_shown(row['timing'])} is not an object"))
    return out


@functools.cache
def _metric_families() -> frozenset[str]:
    """The per-question metrics the package computes at cut-off 1
    (:func:`engram_eval.scoring.metrics.question_metrics`): ``recall_any@1``, ..., ``mrr``."""
    from engram_eval.scoring.metrics import question_metrics

    return frozenset(question_metrics((), (), (1,)))


def is_metric_name(name: str) -> bool:
    """A metric the package computes: one of :func:`_metric_families` at any positive
    cut-off (``recall_any@7``), or ``mrr``."""
    family, at, k = name.partition("@")
    return name in _metric_families() or (
        bool(at) and f"{family}@1" in _metric_families() and k.isascii() and k.isdigit()
        and k[0] != "0")


def metric_key_problems(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Rows whose metrics under a protocol lack a metric other rows hold under it
    (summaries average each metric over every row: one some rows lack has no mean). Rows
    are taken to pass :func:`row_shape_problems`."""
    def scored(r: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        metrics = r.get("metrics")
        return [(p, m) for p, m in (metrics.items() if isinstance(metrics, Mapping) else ())
                if isinstance(m, Mapping)]

    holder: dict[tuple[str, str], Any] = {}  # (protocol, metric) -> a question holding it
    for r in rows:
        for p, m in scored(r):
            for k in m:
                holder.setdefault((p, k), r.get("question_id"))
    out = []
    for r in rows:
        for p, m in scored(r):
            lacking = sorted(k for (q, k) in holder if q == p and k not in m)
            if lacking:
                out.append(problem(r.get("question_id"), f"metrics.{p}", f"lacks {lacking} "
                                   f"(question {holder[(p, lacking[0])]!r} holds "
                                   f"{lacking[0]!r})"))
    return out


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_rank(value: Any, n: int) -> bool:
    """A 1-based rank in a corpus of ``n``."""
    return is_int(value) and 1 <= value <= n


def field_problems(row: Mapping[str, Any], question: Question | None,
                   protocols: Sequence[str], retriever: str | None = None) -> list[str]:
    """Keys outside :data:`~engram_eval.runs.rows.ROW_FIELDS` (and, given the run's
    ``retriever``, trace keys it never writes:
    :func:`~engram_eval.runs.known_fields.trace_keys`) or missing, ``gold`` and
    ``metrics`` keyed by exactly the run's protocols, ``n_sessions`` the ranking's length,
    ``timing.seconds`` a non-negative number; with the dataset's ``question`` also
    ``question_type``, ``question_date`` and ``n_sessions`` equal to what it gives."""
    qid = row.get("question_id")
    out = [problem(qid, k, "not a field engram-eval writes in a row")
           for k in row_unknown_fields(row, retriever)]
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


# --------------------------------------------------------------------------- recorded settings
def described_settings(described: Mapping[str, Any]) -> Any:
    """The effective retrieval settings of a pipeline run, rebuilt from the sidecar's
    ``retriever`` section (:func:`~engram_eval.retrieval.settings.describe_settings`: the
    fields grouped by stage, a stage that is off keeping only its switch), a field the run
    predates at its :data:`~engram_eval.retrieval.settings.LEGACY_VALUES` value, the
    parameters of a stage that is off at their defaults (they change no trace). None for a
    retriever that is not the pipeline (no ``fusion`` stage described). Raises
    :class:`~engram_eval.errors.ConfigError` for values the settings refuse."""
    from dataclasses import fields

    from engram_eval.retrieval.settings import LEGACY_VALUES, RetrievalSettings

    if not isinstance(described.get("fusion"), Mapping):
        return None
    names = {f.name for f in fields(RetrievalSettings)}
    flat = {k: v for k, v in LEGACY_VALUES.items() if k in names}
    for group in described.values():
        if isinstance(group, Mapping):
            flat.update((k, v) for k, v in group.items() if k in names)
    return RetrievalSettings.of(flat)


def config_problems(meta: Mapping[str, Any]) -> list[str]:
    """The sidecar's ``config`` against its ``retriever`` section (what the retriever built
    from that config describes): the same retriever name, and every setting both record
    equal, except a signal the retriever switches off (``bm25`` has no dense signal,
    ``dense`` no BM25 one: ``use_*`` true in the config, false as described)."""
    config = meta.get("config") or {}
    described = meta.get("retriever") or {}
    out = []
    if described.get("retriever") != config.get("retriever"):
        out.append(f"sidecar field 'retriever.retriever' is {described.get('retriever')!r}, "
                   f"but config.retriever is {config.get('retriever')!r}")
    for group, values in described.items():
        if not isinstance(values, Mapping):
            continue
        for k, v in values.items():
            if k not in config or config[k] == v or (
                    k.startswith("use_") and config[k] is True and v is False):
                continue
            out.append(f"sidecar field 'retriever.{group}.{k}' is {v!r}, but config.{k} "
                       f"is {config[k]!r}")
    return out


def trace_settings_problems(row: Mapping[str, Any], settings: Any) -> list[str]:
    """The settings a pipeline row's question trace records (``fusion`` method,
    normalisation, weights and k; ``temporal``, ``temporal_boost``; the ``signals``
    computed; the ``structure`` overrides applied) against the run's recorded ``settings``
    (:func:`described_settings`) for the haystack's chat structure (``people_overrides``
    apply to a haystack without chat roles)."""
    qid = row.get("question_id")
    trace = row.get("trace")
    qt = trace.get("question") if isinstance(trace, Mapping) else None
    if not isinstance(qt, Mapping):
        return []
    chat = qt.get("chat_roles", True) is not False
    c = settings.for_chat_roles(chat)
    want: dict[str, Any] = {"temporal": c.temporal, "temporal_boost": c.temporal_boost}
    want.update((f"fusion.{k}", v) for k, v in c.fusion_spec().items())
    got = {k: qt[k] for k in ("temporal", "temporal_boost") if k in qt}
    fusion = qt.get("fusion")
    if isinstance(fusion, Mapping):
        got.update((f"fusion.{k}", fusion[k]) for k in fusion)
    elif "fusion" in qt:
        got["fusion"] = fusion
    weights, wanted = got.get("fusion.weights"), want["fusion.weights"]
    if isinstance(weights, Mapping) and set(weights) == set(wanted):  # name the weight
        del got["fusion.weights"]
        got.update((f"fusion.weights.{k}", v) for k, v in weights.items())
        want.update((f"fusion.weights.{k}", v) for k, v in wanted.items())
    out = [problem(qid, f"trace.question.{k}", f"{_shown(got[k])}; the sidecar's settings "
                   f"give {_shown(want.get(k))}") for k in got if got[k] != want.get(k)]
    signals = qt.get("signals")
    if "signals" in qt and (not isinstance(signals, list) or signals != [
            s for s in c.signal_names() if s in signals]):
        out.append(problem(qid, "trace.question.signals", f"{_shown(signals)}; the sidecar's "
                           f"settings switch on {c.signal_names()} (in that order)"))
    structure = qt.get("structure")
    if isinstance(structure, Mapping) and "overrides" in structure:
        overrides = {} if chat else dict(settings.people_overrides)
        if structure["overrides"] != overrides:
            out.append(problem(qid, "trace.question.structure.overrides",
                               f"{_shown(structure['overrides'])}; the sidecar's "
                               f"people_overrides give {_shown(overrides)}"))
    return out
