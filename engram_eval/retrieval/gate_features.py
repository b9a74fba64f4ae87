"""Features of "the answer is here", computed once (issue 30): one pure function per feature
of a :class:`QuestionView` (a question, its final ranking, per-session traces in that order,
its sessions' texts and the lexical analyser) and a candidate position ``i`` in the final
ranking, None where the view does not hold what it needs.

Three consumers call these functions and no other code computes them:

* the confidence feature study (:mod:`engram_eval.production_eval.confidence_study`) over
  finished runs, its view built from a run row's traces;
* the pipeline (:func:`engram_eval.retrieval.pipeline.features_stage`), which writes the
  features the study kept (:data:`GATE_FEATURES`) into the per-session traces of the first
  :data:`GATE_DEPTH` results as ``gate_features`` -- so a run's trace carries them, and
  calibration reads runs instead of recomputing;
* production search, which reads them from the same pipeline state
  (:func:`engram_eval.production.search.memory_signals`).

"Every session" below means the sessions of the view's *spread*: the first ``spread``
results of the final ranking (None: every traced session, as the study reads a run; the
pipeline uses :data:`GATE_SPREAD`). "Terms" are the question's distinct index terms under
the analyser (:class:`engram_eval.retrieval.analyzer.Analyzer`):

* ``rerank_logit``: the cross-encoder's raw score of the candidate (``base_raw_score``: its
  best turn's logit under ``rerank_unit: turn``);
* ``rerank_z``: that logit standardised over the reranked candidates of the spread
  ``(x_i - mean) / std`` (population std; None when fewer than 2 or std 0);
* ``rerank_prob_first`` (context, issue 45): the sigmoid of the first result's
  ``rerank_logit``; ``rerank_margin_first`` (context): the first result's ``rerank_logit``
  minus the second's (None unless both were reranked);
* ``first_stage_rank``: ``log(fused_rank)`` (0 when the first stage also ranked it first);
* ``rerank_agreement``: Kendall's tau-b between ``fused_rank`` and ``rerank_rank`` over the
  reranked candidates of the spread (question context; ``scipy.stats.kendalltau``);
* ``dense``: the candidate's dense score; ``dense_z``: standardised over every session;
  ``dense_max``: the best dense score of every session (context);
* ``fused_z``: the fused score standardised over every session; ``fusion_margin``: the best
  fused score of every session minus the second best (context);
* ``terms_turn``: share of the terms found in the candidate's best turn (the cross-encoder's
  ``rerank_turn`` when traced, else the user turn -- every turn without chat roles -- holding
  the most distinct terms, ties to the earlier); ``terms_session``: share found in its user
  document (every turn without chat roles); both 0 for a question without terms;
* ``lex_dense_agree``: 1 when the candidate is first by both ``dense`` and ``bm25_turn``
  (the lexical best-turn signal; ``dense_rank`` and ``bm25_turn_rank`` traced), else 0;
* question cues (context): ``query_terms`` (number of terms); ``time_expression`` (1 when
  :func:`engram_eval.retrieval.temporal.resolve_time_window` finds a window, at the question
  date or, without one, at :data:`REFERENCE_DATE`); ``count_or_compare`` (1 when the
  question matches :data:`COUNT_COMPARE`); ``absent_entity`` (1 when a capitalised word of
  the question other than its first, analysed, occurs in no session of the haystack: text
  and speaker names of every turn).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from engram_eval.data.records import Session, has_chat_roles, user_turns
from engram_eval.retrieval.analyzer import Analyzer

#: The date a question without one is read at, only to ask whether it names a time window.
REFERENCE_DATE = date(2100, 1, 1)
#: A count or a comparison in the question (case-insensitive, whole words; not "last", which
#: mostly names a time: "last week").
COUNT_COMPARE = re.compile(
    r"\b(how (many|much|long|often|old)|number of|total|count|than|more|most|less|least|fewer|"
    r"first|before|after|earlier|later|order|compare[ds]?|difference|between|which)\b",
    re.IGNORECASE)
_CAPITALISED = re.compile(r"\b[A-Z][\w'\u2019-]*")

#: The features the confidence study kept (PROVENANCE.md section 16: the best turn's term
#: share, the number of question terms, lexical/dense agreement, the dense score and its
#: best, the fused z-score and margin), in the order a gate's feature row holds them.
GATE_FEATURES = ("dense", "dense_max", "fused_z", "fusion_margin", "terms_turn",
                 "lex_dense_agree", "query_terms")
#: The pipeline traces :data:`GATE_FEATURES` for this many results of its final ranking.
GATE_DEPTH = 10
#: ... with every spread (``dense_max``, ``fused_z``, ``fusion_margin``) over the first
#: this many results (the published out-of-fold LongMemEval runs trace 5 sessions).
GATE_SPREAD = 5


@dataclass(frozen=True)
class QuestionView:
    """What the feature functions read about one question: its text and date, its haystack
    (texts), the final ranking's session ids with their per-session traces (final order),
    the analyser, and the spread (module docstring)."""

    text: str
    question_date: str
    sessions: tuple[Session, ...]
    ranked: tuple[str, ...]
    traces: tuple[Mapping[str, Any], ...]
    analyzer: Analyzer
    spread: int | None = None
    by_id: Mapping[str, Session] = field(default_factory=dict)

    @cached_property
    def chat_roles(self) -> bool:
        return has_chat_roles(self.sessions)

    @cached_property
    def terms(self) -> frozenset[str]:
        return frozenset(self.analyzer.analyze(self.text))

    @property
    def spread_traces(self) -> tuple[Mapping[str, Any], ...]:
        return self.traces if self.spread is None else self.traces[: self.spread]

    def session(self, i: int) -> Session | None:
        return self.by_id.get(self.ranked[i]) if i < len(self.ranked) else None

    def trace(self, i: int) -> Mapping[str, Any]:
        return self.traces[i] if i < len(self.traces) else {}


@lru_cache(maxsize=1 << 16)
def term_set(analyzer: Analyzer, text: str) -> frozenset[str]:
    """The distinct terms of ``text`` under ``analyzer``, memoised: the candidates of one
    conversation's questions share their turns, and a best turn is read twice."""
    return frozenset(analyzer.analyze(text))


def make_view(text: str, question_date: str, sessions: Sequence[Session],
              ranked: Sequence[str], traces: Sequence[Mapping[str, Any]], analyzer: Analyzer,
              spread: int | None = None) -> QuestionView:
    """A :class:`QuestionView` (sessions indexed by id)."""
    return QuestionView(text, question_date, tuple(sessions), tuple(ranked), tuple(traces),
                        analyzer, spread, {s.session_id: s for s in sessions})


def analyzer_of_run(meta: Mapping[str, Any] | None) -> Analyzer:
    """A finished run's lexical analyser: the ``lexical_*`` fields of its recorded settings
    (sidecar ``meta``), a field the run predates at its legacy value (the analyser it was
    made with)."""
    from types import SimpleNamespace

    from engram_eval.retrieval.analyzer import analyzer_of
    from engram_eval.retrieval.settings import recorded_values

    return analyzer_of(SimpleNamespace(**recorded_values(meta or {})))


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(float(x)):
        return None
    return float(x)


def _z(own: float | None, values: Sequence[float | None]) -> float | None:
    """``own`` standardised over ``values`` (population std; None when ``own`` is None,
    fewer than 2 values are defined or their std is 0)."""
    xs = [v for v in values if v is not None]
    if own is None or len(xs) < 2:
        return None
    sd = float(np.std(xs))
    return None if sd == 0 else (own - float(np.mean(xs))) / sd


def _share(terms: frozenset[str], found: frozenset[str] | set[str]) -> float:
    return len(terms & found) / len(terms) if terms else 0.0


# --------------------------------------------------------------------------- the features


def rerank_logit(v: QuestionView, i: int) -> float | None:
    t = v.trace(i)
    return _num(t.get("base_raw_score")) if t.get("reranked") else None


def rerank_z(v: QuestionView, i: int) -> float | None:
    vals = [_num(t.get("base_raw_score")) if t.get("reranked") else None
            for t in v.spread_traces]
    return _z(rerank_logit(v, i), vals)


def rerank_prob_first(v: QuestionView, i: int) -> float | None:
    """The cross-encoder's probability (sigmoid of its logit) of the question's first
    result (context)."""
    x = rerank_logit(v, 0)
    return None if x is None else 1.0 / (1.0 + math.exp(-x))


def rerank_margin_first(v: QuestionView, i: int) -> float | None:
    """The first result's cross-encoder logit minus the second's (context)."""
    a, b = rerank_logit(v, 0), rerank_logit(v, 1)
    return None if a is None or b is None else a - b


def first_stage_rank(v: QuestionView, i: int) -> float | None:
    r = _num(v.trace(i).get("fused_rank"))
    return math.log(r) if r is not None and r >= 1 else None


def rerank_agreement(v: QuestionView, i: int) -> float | None:
    pairs = [(t.get("fused_rank"), t.get("rerank_rank")) for t in v.spread_traces
             if t.get("reranked")]
    pairs = [(a, b) for a, b in pairs if _num(a) is not None and _num(b) is not None]
    if len(pairs) < 2:
        return None
    from scipy.stats import kendalltau

    tau = kendalltau([a for a, _ in pairs], [b for _, b in pairs]).statistic
    return _num(tau)


def dense(v: QuestionView, i: int) -> float | None:
    return _num(v.trace(i).get("dense"))


def dense_z(v: QuestionView, i: int) -> float | None:
    return _z(dense(v, i), [_num(t.get("dense")) for t in v.spread_traces])


def dense_max(v: QuestionView, i: int) -> float | None:
    xs = [x for t in v.spread_traces if (x := _num(t.get("dense"))) is not None]
    return max(xs) if xs else None


def fused_z(v: QuestionView, i: int) -> float | None:
    return _z(_num(v.trace(i).get("fused")), [_num(t.get("fused")) for t in v.spread_traces])


def fusion_margin(v: QuestionView, i: int) -> float | None:
    xs = sorted((x for t in v.spread_traces if (x := _num(t.get("fused"))) is not None),
                reverse=True)
    return xs[0] - xs[1] if len(xs) >= 2 else None


def best_turn_text(v: QuestionView, i: int) -> str | None:
    """The candidate's best turn: ``rerank_turn`` when traced, else the user turn (every
    turn without chat roles) holding the most distinct question terms (ties: earlier)."""
    s = v.session(i)
    if s is None:
        return None
    k = v.trace(i).get("rerank_turn")
    if isinstance(k, int) and not isinstance(k, bool) and 0 <= k < len(s.turns):
        return str(s.turns[k].content)
    turns = [t for t in user_turns(s, v.chat_roles) if t.content.strip()]
    if not turns:
        return None
    best = max(turns, key=lambda t: (len(v.terms & term_set(v.analyzer, t.content)),
                                     -t.index))
    return str(best.content)


def terms_turn(v: QuestionView, i: int) -> float | None:
    text = best_turn_text(v, i)
    return None if text is None else _share(v.terms, term_set(v.analyzer, text))


def terms_session(v: QuestionView, i: int) -> float | None:
    s = v.session(i)
    if s is None:
        return None
    text = "\n".join(t.content for t in user_turns(s, v.chat_roles))
    return _share(v.terms, term_set(v.analyzer, text))


def lex_dense_agree(v: QuestionView, i: int) -> float | None:
    t = v.trace(i)
    if "dense_rank" not in t or "bm25_turn_rank" not in t:
        return None
    return 1.0 if t.get("dense_rank") == 1 and t.get("bm25_turn_rank") == 1 else 0.0


def query_terms(v: QuestionView, i: int) -> float | None:
    return float(len(v.terms))


def time_expression(v: QuestionView, i: int) -> float | None:
    from engram_eval.retrieval.temporal import parse_date, resolve_time_window

    qd = parse_date(v.question_date or "") or REFERENCE_DATE
    return 1.0 if resolve_time_window(v.text, qd) is not None else 0.0


def count_or_compare(v: QuestionView, i: int) -> float | None:
    return 1.0 if COUNT_COMPARE.search(v.text) else 0.0


def question_entities(v: QuestionView) -> frozenset[str]:
    """Analysed capitalised words of the question other than its first word."""
    words = [m.group(0) for m in _CAPITALISED.finditer(v.text)
             if m.start() > 0 and v.text[:m.start()].strip()]
    out: set[str] = set()
    for w in words:
        out.update(v.analyzer.analyze(w))
    return frozenset(out)


def absent_entity(v: QuestionView, i: int) -> float | None:
    ents = question_entities(v)
    if not ents:
        return 0.0
    seen: set[str] = set()
    for s in v.sessions:
        for t in s.turns:
            seen.update(v.analyzer.analyze(f"{t.role} {t.content}"))
        if ents <= seen:
            return 0.0
    return 1.0 if ents - seen else 0.0


@dataclass(frozen=True)
class Feature:
    name: str
    fn: Callable[[QuestionView, int], float | None]
    context: bool  # the same for every candidate of a question
    doc: str


#: Every feature, in the study's order.
FEATURES: tuple[Feature, ...] = (
    Feature("rerank_logit", rerank_logit, False, "cross-encoder raw score (best turn's logit)"),
    Feature("rerank_z", rerank_z, False, "that logit standardised over the reranked candidates"),
    Feature("rerank_prob_first", rerank_prob_first, True,
            "cross-encoder probability (sigmoid of the logit) of the first result"),
    Feature("rerank_margin_first", rerank_margin_first, True,
            "the first result's cross-encoder logit minus the second's"),
    Feature("first_stage_rank", first_stage_rank, False, "log of the first-stage (fused) rank"),
    Feature("rerank_agreement", rerank_agreement, True,
            "Kendall tau of fused rank vs rerank rank over the reranked candidates"),
    Feature("dense", dense, False, "dense score"),
    Feature("dense_z", dense_z, False, "dense score standardised over every session"),
    Feature("dense_max", dense_max, True, "best dense score of the question"),
    Feature("fused_z", fused_z, False, "fused score standardised over every session"),
    Feature("fusion_margin", fusion_margin, True, "best fused score minus the second"),
    Feature("terms_turn", terms_turn, False, "share of the question's terms in the best turn"),
    Feature("terms_session", terms_session, False, "share of the question's terms in the session"),
    Feature("lex_dense_agree", lex_dense_agree, False, "first by both dense and bm25_turn"),
    Feature("query_terms", query_terms, True, "number of the question's terms"),
    Feature("time_expression", time_expression, True, "the question names a time window"),
    Feature("count_or_compare", count_or_compare, True, "the question counts or compares"),
    Feature("absent_entity", absent_entity, True,
            "a capitalised question word found in no session"),
)
FEATURE_NAMES = tuple(f.name for f in FEATURES)
_BY_NAME = {f.name: f for f in FEATURES}


def feature_row(v: QuestionView, i: int, context: Mapping[str, float | None] | None = None,
                names: Sequence[str] = FEATURE_NAMES) -> list[float]:
    """The features ``names`` of candidate ``i`` (NaN where undefined); ``context``: the
    question's context features, computed once."""
    out = []
    for name in names:
        f = _BY_NAME[name]
        x = context[f.name] if (context is not None and f.context) else f.fn(v, i)
        out.append(float("nan") if x is None else float(x))
    return out


def gate_rows(v: QuestionView, k: int) -> list[dict[str, float | None]]:
    """:data:`GATE_FEATURES` of the first ``k`` candidates of ``v`` (None where undefined):
    what the pipeline traces as ``gate_features``."""
    ctx = {n: _BY_NAME[n].fn(v, 0) for n in GATE_FEATURES if _BY_NAME[n].context}
    return [{n: ctx[n] if n in ctx else _BY_NAME[n].fn(v, i) for n in GATE_FEATURES}
            for i in range(min(k, len(v.ranked)))]
