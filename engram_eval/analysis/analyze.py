"""Miss analysis from a run's traces: ``engram-eval analyze RUN.jsonl [--k 5]``.

For every scored question with a gold session outside the final top ``k``, each such gold
session's rank at each stage is read from the row's per-session trace (keys of the trace
contract in :mod:`engram_eval.retrieval.hybrid`): every signal's ``s_rank``, ``fused_rank``
(older rows: ``prior_rank``), ``temporal_rank``, ``rerank_rank`` and the final position
(1-based place in ``ranked_session_ids``). Absent keys are tolerated: a run without a rerank
has no ``rerank_rank``; rows written before ``temporal_rank`` existed take the final position
as the temporal rank when nothing was reranked (then the final order *is* the temporal order).

Each missed gold session gets one class, decided in this order (``W`` = the candidate window,
by default the run's ``rerank_candidates`` setting from its sidecar, else 35; ``best`` = the
smallest rank any signal gives it, none when no signal finds it informative):

1. ``not_in_corpus`` -- the gold id is not among the ranked sessions at all.
2. ``not_discovered`` -- ``best`` is none or ``best > W``: no signal ranks it within the
   candidate window.
3. With a rerank (the run reranked some session of this question):

   * ``lost_in_fusion`` -- it was not reranked (``fused_rank > W``, outside the rerank
     candidates) although a signal ranked it within ``W``;
   * ``lost_in_rerank`` -- it was reranked and ended outside the top ``k`` (the rerank, or the
     coverage step after it, placed it there).

4. Without a rerank, the first stage that drops it from the top ``k``:

   * ``lost_in_fusion`` -- ``best <= k`` but ``fused_rank > k``;
   * ``lost_in_temporal`` -- ``fused_rank <= k`` but ``temporal_rank > k``;
   * ``cut_by_window`` -- a signal ranked it within ``W`` but no stage ever had it within the
     top ``k``: found, just not high enough for the cut-off.

A gold session ranked below the traced prefix of a run written with ``--trace-sessions N``
is ``untraced`` (its stages are unknown); run with ``--trace-sessions 0`` (all) to analyse it.

Counts are reported per class overall and per question type (gold sessions), beside the
number of questions with any gold outside the top ``k`` (``recall_all@k = 0``) and with no
gold inside (``recall_any@k = 0``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError, DataError
from engram_eval.io import printable

CLASSES = ("not_in_corpus", "not_discovered", "lost_in_fusion", "lost_in_temporal",
           "lost_in_rerank", "cut_by_window", "untraced")
STAGE_KEYS = ("fused_rank", "prior_rank", "temporal_rank", "rerank_rank")
DEFAULT_WINDOW = 35
KIND = "engram-eval miss analysis"


def signal_names(row: Mapping[str, Any]) -> list[str]:
    """Signals of a row: ``trace.question.signals`` when present, else every ``<s>_rank`` key
    of the session traces that is not a stage rank."""
    q = (row.get("trace") or {}).get("question") or {}
    if isinstance(q.get("signals"), list):
        return [str(s) for s in q["signals"]]
    names: list[str] = []
    for t in (row.get("trace") or {}).get("sessions") or []:
        for key in t:
            if key.endswith("_rank") and key not in STAGE_KEYS:
                s = key[: -len("_rank")]
                if s not in names:
                    names.append(s)
    return names


def classify(*, k: int, window: int, in_corpus: bool, signal_ranks: Mapping[str, int | None],
             fused_rank: int | None, temporal_rank: int | None, reranked: bool,
             run_reranks: bool) -> str:
    """The class of one gold session outside the final top ``k`` (see the module doc)."""
    if not in_corpus:
        return "not_in_corpus"
    ranks = [r for r in signal_ranks.values() if r is not None]
    best = min(ranks) if ranks else None
    if best is None or best > window:
        return "not_discovered"
    if run_reranks:
        return "lost_in_rerank" if reranked else "lost_in_fusion"
    if best <= k and (fused_rank is None or fused_rank > k):
        return "lost_in_fusion"
    if fused_rank is not None and fused_rank <= k and (temporal_rank is None or
                                                       temporal_rank > k):
        return "lost_in_temporal"
    return "cut_by_window"


def analyze_rows(rows: Sequence[Mapping[str, Any]], *, k: int = 5, protocol: str = "answerable",
                 window: int = DEFAULT_WINDOW, source: str | Path = "(rows)"
                 ) -> dict[str, Any]:
    if k < 1 or window < 1:
        raise ConfigError("analyze: --k and --window must be >= 1")
    classes: Counter[str] = Counter()
    by_type: dict[str, Counter[str]] = {}
    questions: list[dict[str, Any]] = []
    n_scored = n_miss_all = n_miss_any = n_truncated = 0
    type_n: Counter[str] = Counter()
    for row in rows:
        qid = row["question_id"]
        metrics = row["metrics"].get(protocol) if isinstance(row.get("metrics"), dict) else None
        if metrics is None:
            continue
        gold = (row.get("gold") or {}).get(protocol)
        if gold is None:
            raise DataError(source, f"question_id={qid}", f"gold.{protocol}",
                            "row carries no gold for the protocol")
        n_scored += 1
        qtype = row["question_type"]
        type_n[qtype] += 1
        ranked = list(row["ranked_session_ids"])
        pos = {sid: i for i, sid in enumerate(ranked)}
        missed = [g for g in dict.fromkeys(gold) if pos.get(g, k) >= k]
        if not missed:
            continue
        n_miss_all += 1
        if len(missed) == len(set(gold)):
            n_miss_any += 1
        traces = (row.get("trace") or {}).get("sessions")
        if not isinstance(traces, list) or len(traces) > len(ranked) or (
                not traces and ranked):
            raise DataError(source, f"question_id={qid}", "trace.sessions",
                            "a per-session trace aligned with ranked_session_ids is needed "
                            "(was the run written without session traces?)")
        if len(traces) < len(ranked):
            n_truncated += 1
        signals = signal_names(row)
        run_reranks = any(bool(t.get("reranked")) for t in traces)
        entries = []
        for g in missed:
            entry: dict[str, Any]
            if g in pos and pos[g] >= len(traces):
                # --trace-sessions N kept only the first N traces: stages unknown
                entry = {"session_id": g, "final_rank": pos[g] + 1, "signal_ranks": {},
                         "fused_rank": None, "temporal_rank": None, "rerank_rank": None,
                         "reranked": False}
                cls = "untraced"
            elif g not in pos:
                entry = {"session_id": g, "final_rank": None,
                                         "signal_ranks": {}, "fused_rank": None,
                                         "temporal_rank": None, "rerank_rank": None,
                                         "reranked": False}
                cls = classify(k=k, window=window, in_corpus=False, signal_ranks={},
                               fused_rank=None, temporal_rank=None, reranked=False,
                               run_reranks=run_reranks)
            else:
                i = pos[g]
                t = traces[i]
                sranks = {s: t.get(s + "_rank") for s in signals}
                fused = t.get("fused_rank", t.get("prior_rank"))
                temporal = t.get("temporal_rank")
                if temporal is None and "temporal_rank" not in t and not run_reranks:
                    temporal = i + 1  # no rerank: the final order is the temporal order
                entry = {"session_id": g, "final_rank": i + 1, "signal_ranks": sranks,
                         "fused_rank": fused, "temporal_rank": temporal,
                         "rerank_rank": t.get("rerank_rank"),
                         "reranked": bool(t.get("reranked"))}
                if t.get("moved_by_coverage"):
                    entry["moved_by_coverage"] = True
                cls = classify(k=k, window=window, in_corpus=True, signal_ranks=sranks,
                               fused_rank=fused, temporal_rank=temporal,
                               reranked=bool(t.get("reranked")), run_reranks=run_reranks)
            entry["class"] = cls
            classes[cls] += 1
            by_type.setdefault(qtype, Counter())[cls] += 1
            entries.append(entry)
        q = (row.get("trace") or {}).get("question") or {}
        questions.append({"question_id": qid, "question_type": qtype,
                          "n_gold": len(set(gold)), "n_missed": len(missed),
                          "recall_any": metrics.get(f"recall_any@{k}"),
                          "recall_all": metrics.get(f"recall_all@{k}"),
                          "time_window": q.get("time_window"),
                          "temporal_status": q.get("temporal_status"),
                          "missed": entries})
    return {
        "kind": KIND,
        "protocol": protocol,
        "k": k,
        "window": window,
        "classes_order": list(CLASSES),
        "n_questions": n_scored,
        "n_questions_missing_some_gold": n_miss_all,
        "n_questions_missing_all_gold": n_miss_any,
        "n_missed_gold_sessions": sum(classes.values()),
        "n_questions_with_truncated_trace": n_truncated,
        "classes": {c: classes.get(c, 0) for c in CLASSES},
        "by_type": {t: {"n_questions": type_n[t],
                        **{c: by_type.get(t, Counter()).get(c, 0) for c in CLASSES}}
                    for t in sorted(type_n)},
        "questions": questions,
    }


def sidecar_window(sidecar: Mapping[str, Any] | None) -> int | None:
    """The run's ``rerank_candidates`` setting (retriever settings, else config), if any."""
    cfg = (sidecar or {}).get("config") or {}
    retr = (sidecar or {}).get("retriever") or {}
    for src in (retr, cfg):
        v = src.get("rerank_candidates") if isinstance(src, dict) else None
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def analyze_run(path: str | Path, *, k: int = 5, protocol: str | None = None,
                window: int | None = None) -> dict[str, Any]:
    from engram_eval.io import sha256_file
    from engram_eval.runs.reader import read_run

    run = read_run(path)
    protocol = run.protocol(protocol)  # one the rows are scored under
    side = sidecar_window(run.sidecar)
    w = window if window is not None else side if side is not None else DEFAULT_WINDOW
    rep = analyze_rows(run.rows, k=k, protocol=protocol, window=w, source=run.path)
    rep["run"] = run.describe()
    rep["window_source"] = ("--window" if window is not None else
                            "sidecar rerank_candidates" if side is not None else
                            f"default {DEFAULT_WINDOW}")
    rep["generator"] = {"module": "engram_eval/analysis/analyze.py", "sha256": sha256_file(Path(__file__))}
    return rep


def format_report(rep: Mapping[str, Any], max_questions: int = 30) -> str:
    k = rep["k"]
    lines = [f"analyze protocol={rep['protocol']} k={k} window={rep['window']}: "
             f"{rep['n_questions_missing_some_gold']} of {rep['n_questions']} questions have "
             f"gold outside the top {k} ({rep['n_questions_missing_all_gold']} with none inside); "
             f"{rep['n_missed_gold_sessions']} gold sessions missed"]
    short = {"not_in_corpus": "absent", "not_discovered": "undisc", "lost_in_fusion": "fusion",
             "lost_in_temporal": "temporal", "lost_in_rerank": "rerank",
             "cut_by_window": "cut", "untraced": "untraced"}
    head = f"{'type':<27} {'n':>4} " + " ".join(f"{short[c]:>8}" for c in CLASSES)
    lines += ["", head]
    for t, v in rep["by_type"].items():
        lines.append(f"{printable(t):<27} {v['n_questions']:>4} "
                     + " ".join(f"{v[c]:>8}" for c in CLASSES))
    lines.append(f"{'all':<27} {rep['n_questions']:>4} "
                 + " ".join(f"{rep['classes'][c]:>8}" for c in CLASSES))
    lines.append("")
    for q in rep["questions"][:max_questions]:
        for g in q["missed"]:
            sig = " ".join(f"{s}={r}" for s, r in g["signal_ranks"].items())
            lines.append(f"  {printable(q['question_id']):<16} {printable(g['session_id']):<24} "
                         f"final={g['final_rank']} "
                         f"{sig} fused={g['fused_rank']} temporal={g['temporal_rank']} "
                         f"rerank={g['rerank_rank']} -> {g['class']}")
    if len(rep["questions"]) > max_questions:
        lines.append(f"  ... {len(rep['questions']) - max_questions} more questions in the "
                     "report")
    return "\n".join(lines)
