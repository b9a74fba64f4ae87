"""Feature study for the production confidence: which signals say "the answer is here"
(issue 30 item 1). Measured out of fold on tuning parts, before any gate is fitted.

**Inputs.** Finished runs (:func:`engram_eval.runs.reader.read_run`; their per-session
traces hold the pipeline's signals) and the dataset they were made on (for texts; its
sha256 must be each run's). A dataset or run holding held-out data is refused (the one
guard, :mod:`engram_eval.provenance.guard`). Which questions take part and their gold:
:func:`engram_eval.production_eval.sessions.labels` (unanswerable: LongMemEval ``_abs``,
LoCoMo category 5; answerable: gold under ``answerable`` / ``locomo_no_adversarial``; any
other question is left out and counted). Gold is read only to label.

**Two labels.**

* ``top``: one row per question, the features of its top result; label 1 when the question
  is answerable and its top result is gold (0 for an unanswerable question);
* ``candidate``: one row per (question, candidate) for the first ``candidates`` results of
  the final ranking, at most as many as the run traced (a run made with ``--trace-sessions
  N`` keeps the traces of its first N results only); label 1 when the candidate is gold
  (never for an unanswerable question).

**Features** (:data:`FEATURES`; one pure function each, of a :class:`QuestionView` and a
candidate position ``i`` in the final ranking, None where the run does not trace what it
needs). "Every session" below means every *traced* session of the question (all of them
unless the run kept fewer traces). "Terms" are the question's distinct index terms under the
run's own lexical analyser (:class:`engram_eval.retrieval.analyzer.Analyzer`, from the run's
sidecar):

* ``rerank_logit``: the cross-encoder's raw score of the candidate (``base_raw_score``: its
  best turn's logit under ``rerank_unit: turn``);
* ``rerank_z``: that logit standardised over every (traced) reranked candidate of the question
  ``(x_i - mean) / std`` (population std; None when fewer than 2 or std 0);
* ``first_stage_rank``: ``log(fused_rank)`` (0 when the first stage also ranked it first);
* ``rerank_agreement``: Kendall's tau-b between ``fused_rank`` and ``rerank_rank`` over the
  reranked candidates (question context; ``scipy.stats.kendalltau``);
* ``dense``: the candidate's dense score; ``dense_z``: standardised over every session of the
  question; ``dense_max``: the best dense score of the question (context);
* ``fused_z``: the fused score standardised over every session; ``fusion_margin``: the best
  fused score minus the second best (context);
* ``terms_turn``: share of the terms found in the candidate's best turn (the cross-encoder's
  ``rerank_turn`` when traced, else the user turn -- every turn without chat roles -- holding
  the most distinct terms, ties to the earlier); ``terms_session``: share found in its user
  document (every turn without chat roles); both 0 for a question without terms;
* ``lex_dense_agree``: 1 when the candidate is first by both ``dense`` and ``bm25_turn``
  (the lexical best-turn signal), else 0;
* question cues (context): ``query_terms`` (number of terms); ``time_expression`` (1 when
  :func:`engram_eval.retrieval.temporal.resolve_time_window` finds a window, at the question
  date or, without one, at :data:`REFERENCE_DATE`); ``count_or_compare`` (1 when the
  question matches :data:`COUNT_COMPARE`); ``absent_entity`` (1 when a capitalised word of
  the question other than its first, analysed, occurs in no session of the haystack: text
  and speaker names of every turn).

**Measures** (:mod:`engram_eval.scoring.selective`, reused): per feature, AUROC of the raw
value (below 0.5: the feature points the other way) with a percentile bootstrap interval,
resampling questions (whole conversations on LoCoMo; a candidate row brings its question's or
conversation's other rows); a combined model, ``StandardScaler`` + ``LogisticRegression``
(L2, ``C``) over the features defined on every row and not constant, scored out of fold
(``GroupKFold``: by question on LongMemEval, by conversation on LoCoMo) with its interval;
the combined model's standardised coefficients fitted on all rows (descriptive only); and an
ablation: the out-of-fold AUROC without each feature, with a paired bootstrap interval of
the loss. Verdicts (:func:`verdicts`): *kept* when the combination loses AUROC without it,
*redundant* when it is informative alone only, *dropped* otherwise. No gate or cut-off is
chosen here.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import numpy as np

from engram_eval.data.records import Question, has_chat_roles, user_turns
from engram_eval.errors import ConfigError, DataError, ProvenanceError
from engram_eval.retrieval.analyzer import Analyzer
from engram_eval.scoring import selective as S

KIND = "engram-eval/confidence-study"
#: The date a question without one is read at, only to ask whether it names a time window.
REFERENCE_DATE = date(2100, 1, 1)
#: A count or a comparison in the question (case-insensitive, whole words; not "last", which
#: mostly names a time: "last week").
COUNT_COMPARE = re.compile(
    r"\b(how (many|much|long|often|old)|number of|total|count|than|more|most|less|least|fewer|"
    r"first|before|after|earlier|later|order|compare[ds]?|difference|between|which)\b",
    re.IGNORECASE)
_CAPITALISED = re.compile(r"\b[A-Z][\w'\u2019-]*")


@dataclass(frozen=True)
class StudySettings:
    """Settings of the study (each with its help text, for the command line)."""

    candidates: int = 20
    folds: int = 5
    C: float = 1.0
    resamples: int = 1000
    seed: int = 0
    level: float = 0.95

    HELP = {"candidates": "results per question in the candidate-level rows (the final "
                          "ranking's first N)",
            "folds": "GroupKFold folds of the combined model (at most the number of groups)",
            "C": "inverse L2 strength of the combined logistic model",
            "resamples": "bootstrap resamples of every interval",
            "seed": "bootstrap seed",
            "level": "interval level"}

    def __post_init__(self) -> None:
        if self.candidates < 1 or self.folds < 2 or self.resamples < 1:
            raise ConfigError("confidence study: candidates >= 1, folds >= 2, resamples >= 1")
        if not (0.0 < self.level < 1.0) or not (self.C > 0 and math.isfinite(self.C)):
            raise ConfigError("confidence study: 0 < level < 1 and C a finite positive number")


# --------------------------------------------------------------------------- one question


@dataclass(frozen=True)
class QuestionView:
    """What the feature functions read about one question: the question (texts), its run
    row's final ranking and per-session traces (final order), and the analyser."""

    question: Question
    ranked: tuple[str, ...]
    traces: tuple[Mapping[str, Any], ...]
    analyzer: Analyzer
    by_id: Mapping[str, Any] = field(default_factory=dict)  # session id -> Session

    @cached_property
    def chat_roles(self) -> bool:
        return has_chat_roles(self.question.sessions)

    @cached_property
    def terms(self) -> frozenset[str]:
        return frozenset(self.analyzer.analyze(self.question.question))

    def session(self, i: int) -> Any:
        return self.by_id.get(self.ranked[i]) if i < len(self.ranked) else None

    def trace(self, i: int) -> Mapping[str, Any]:
        return self.traces[i] if i < len(self.traces) else {}


def view(question: Question, row: Mapping[str, Any], analyzer: Analyzer) -> QuestionView:
    traces = tuple(((row.get("trace") or {}).get("sessions")) or ())
    return QuestionView(question, tuple(row["ranked_session_ids"]), traces, analyzer,
                        {s.session_id: s for s in question.sessions})


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(float(x)):
        return None
    return float(x)


def _z(values: Sequence[float | None], i: int) -> float | None:
    xs = [v for v in values if v is not None]
    if i >= len(values) or values[i] is None or len(xs) < 2:
        return None
    sd = float(np.std(xs))
    return None if sd == 0 else (float(values[i]) - float(np.mean(xs))) / sd  # type: ignore[arg-type]


def _share(terms: frozenset[str], found: set[str]) -> float:
    return len(terms & found) / len(terms) if terms else 0.0


# --------------------------------------------------------------------------- the features


def rerank_logit(v: QuestionView, i: int) -> float | None:
    t = v.trace(i)
    return _num(t.get("base_raw_score")) if t.get("reranked") else None


def rerank_z(v: QuestionView, i: int) -> float | None:
    vals = [rerank_logit(v, j) for j in range(len(v.traces))]
    return _z(vals, i)


def first_stage_rank(v: QuestionView, i: int) -> float | None:
    r = _num(v.trace(i).get("fused_rank"))
    return math.log(r) if r is not None and r >= 1 else None


def rerank_agreement(v: QuestionView, i: int) -> float | None:
    pairs = [(t.get("fused_rank"), t.get("rerank_rank")) for t in v.traces if t.get("reranked")]
    pairs = [(a, b) for a, b in pairs if _num(a) is not None and _num(b) is not None]
    if len(pairs) < 2:
        return None
    from scipy.stats import kendalltau

    tau = kendalltau([a for a, _ in pairs], [b for _, b in pairs]).statistic
    return _num(tau)


def dense(v: QuestionView, i: int) -> float | None:
    return _num(v.trace(i).get("dense"))


def dense_z(v: QuestionView, i: int) -> float | None:
    return _z([_num(t.get("dense")) for t in v.traces], i)


def dense_max(v: QuestionView, i: int) -> float | None:
    xs = [x for t in v.traces if (x := _num(t.get("dense"))) is not None]
    return max(xs) if xs else None


def fused_z(v: QuestionView, i: int) -> float | None:
    return _z([_num(t.get("fused")) for t in v.traces], i)


def fusion_margin(v: QuestionView, i: int) -> float | None:
    xs = sorted((x for t in v.traces if (x := _num(t.get("fused"))) is not None), reverse=True)
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
    best = max(turns, key=lambda t: (len(v.terms & set(v.analyzer.analyze(t.content))),
                                     -t.index))
    return str(best.content)


def terms_turn(v: QuestionView, i: int) -> float | None:
    text = best_turn_text(v, i)
    return None if text is None else _share(v.terms, set(v.analyzer.analyze(text)))


def terms_session(v: QuestionView, i: int) -> float | None:
    s = v.session(i)
    if s is None:
        return None
    text = "\n".join(t.content for t in user_turns(s, v.chat_roles))
    return _share(v.terms, set(v.analyzer.analyze(text)))


def lex_dense_agree(v: QuestionView, i: int) -> float | None:
    t = v.trace(i)
    if "dense_rank" not in t or "bm25_turn_rank" not in t:
        return None
    return 1.0 if t.get("dense_rank") == 1 and t.get("bm25_turn_rank") == 1 else 0.0


def query_terms(v: QuestionView, i: int) -> float | None:
    return float(len(v.terms))


def time_expression(v: QuestionView, i: int) -> float | None:
    from engram_eval.retrieval.temporal import parse_date, resolve_time_window

    qd = parse_date(v.question.question_date or "") or REFERENCE_DATE
    return 1.0 if resolve_time_window(v.question.question, qd) is not None else 0.0


def count_or_compare(v: QuestionView, i: int) -> float | None:
    return 1.0 if COUNT_COMPARE.search(v.question.question) else 0.0


def question_entities(v: QuestionView) -> frozenset[str]:
    """Analysed capitalised words of the question other than its first word."""
    words = [m.group(0) for m in _CAPITALISED.finditer(v.question.question)
             if m.start() > 0 and v.question.question[:m.start()].strip()]
    out: set[str] = set()
    for w in words:
        out.update(v.analyzer.analyze(w))
    return frozenset(out)


def absent_entity(v: QuestionView, i: int) -> float | None:
    ents = question_entities(v)
    if not ents:
        return 0.0
    seen: set[str] = set()
    for s in v.question.sessions:
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


FEATURES: tuple[Feature, ...] = (
    Feature("rerank_logit", rerank_logit, False, "cross-encoder raw score (best turn's logit)"),
    Feature("rerank_z", rerank_z, False, "that logit standardised over the reranked candidates"),
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


def feature_row(v: QuestionView, i: int, context: Mapping[str, float | None] | None = None
                ) -> list[float]:
    """Every feature of candidate ``i`` (NaN where undefined); ``context``: the question's
    context features, computed once."""
    out = []
    for f in FEATURES:
        x = context[f.name] if (context is not None and f.context) else f.fn(v, i)
        out.append(float("nan") if x is None else float(x))
    return out


# --------------------------------------------------------------------------- extraction


@dataclass(frozen=True)
class QuestionRecord:
    question_id: str
    group: str
    unanswerable: bool
    top_correct: int
    candidates: tuple[str, ...]
    labels: tuple[int, ...]
    x: np.ndarray  # (len(candidates), len(FEATURES))


def analyzer_of_run(meta: Mapping[str, Any] | None) -> Analyzer:
    """The run's lexical analyser: the ``lexical_*`` fields of its recorded settings, a field
    the run predates at its legacy value (the analyser it was made with)."""
    from types import SimpleNamespace

    from engram_eval.retrieval.analyzer import analyzer_of
    from engram_eval.retrieval.settings import recorded_values

    return analyzer_of(SimpleNamespace(**recorded_values(meta or {})))


def extract(rows: Sequence[Mapping[str, Any]], questions: Mapping[str, Question], fmt: str,
            analyzer: Analyzer, candidates: int, *, where: str = "run"
            ) -> tuple[list[QuestionRecord], dict[str, int]]:
    """(records, counts of questions left out and why) of the rows' questions."""
    from engram_eval.production_eval.sessions import group_of, labels

    records: list[QuestionRecord] = []
    left = {"no_gold": 0}
    for row in rows:
        qid = row["question_id"]
        q = questions.get(qid)
        if q is None:
            raise DataError(where, f"question {qid}", "question_id",
                            "names no question of the dataset")
        lab = labels(q, fmt)
        if lab is None:
            left["no_gold"] += 1
            continue
        v = view(q, row, analyzer)
        traced = len(v.traces) if 0 < len(v.traces) < len(v.ranked) else len(v.ranked)
        k = min(candidates, traced)
        if not k:
            raise DataError(where, f"question {qid}", "ranked_session_ids", "is empty")
        ctx = {f.name: f.fn(v, 0) for f in FEATURES if f.context}
        x = np.asarray([feature_row(v, i, ctx) for i in range(k)], dtype=float)
        unans, gold = lab
        gs = set(gold)  # read only now, to label
        ids = v.ranked[:k]
        ys = tuple(0 if unans else int(s in gs) for s in ids)
        records.append(QuestionRecord(qid, group_of(qid, fmt), unans, ys[0], ids, ys, x))
    return records, left


# --------------------------------------------------------------------------- measures


def _interval(stat: Callable[[np.ndarray], float | None], n: int, groups: Sequence[str],
              s: StudySettings) -> dict[str, Any]:
    return S.bootstrap(stat, n, resamples=s.resamples, seed=s.seed, level=s.level,
                       groups=groups)


def _auc(score: np.ndarray, y: np.ndarray) -> float | None:
    """:func:`engram_eval.scoring.selective.auroc` of arrays (it reads them with
    ``numpy.asarray``, so they are passed as they are, not copied into lists)."""
    return S.auroc(cast(Sequence[float], score), cast(Sequence[int], y))


def _resampled_auc(score: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], float | None]:
    """The bootstrap statistic AUROC(score[ix], y[ix]), remembered per drawn ``ix`` (the
    ablation's intervals draw the same indices, seed for seed, as the combined model's)."""
    memo: dict[bytes, float | None] = {}

    def stat(ix: np.ndarray) -> float | None:
        key = hashlib.blake2b(np.ascontiguousarray(ix).tobytes(), digest_size=16).digest()
        if key not in memo:
            memo[key] = _auc(score[ix], y[ix])
        return memo[key]

    return stat


def _auroc_with_interval(score: np.ndarray, y: np.ndarray, groups: Sequence[str],
                         s: StudySettings, stat: Callable[[np.ndarray], float | None] | None = None
                         ) -> dict[str, Any]:
    ci = _interval(stat or (lambda ix: _auc(score[ix], y[ix])), len(y), groups, s)
    return {"auroc": _auc(score, y), "interval": ci}


def combined_model(s: StudySettings) -> Any:
    """The combined model, unfitted: standardised features, L2 logistic regression."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=s.C, max_iter=1000))


def out_of_fold(x: np.ndarray, y: np.ndarray, groups: Sequence[str], s: StudySettings
                ) -> np.ndarray:
    """Out-of-fold decision scores of the standardised logistic model (GroupKFold)."""
    from sklearn.model_selection import GroupKFold

    k = min(s.folds, len(set(groups)))
    if k < 2:
        raise ConfigError("confidence study: the combined model needs at least 2 groups")
    out = np.zeros(len(y))
    for tr, te in GroupKFold(n_splits=k).split(x, y, groups):
        if len(set(y[tr].tolist())) < 2:
            raise ConfigError("confidence study: a training fold holds one class only")
        m = combined_model(s)
        m.fit(x[tr], y[tr])
        out[te] = m.decision_function(x[te])
    return out


def _coefficients(x: np.ndarray, y: np.ndarray, names: Sequence[str], s: StudySettings
                  ) -> dict[str, float]:
    m = combined_model(s).fit(x, y)
    coef = m[-1].coef_[0]
    return {n: float(c) for n, c in zip(names, coef, strict=True)}


def study_label(x: np.ndarray, y: np.ndarray, groups: Sequence[str], s: StudySettings,
                unit: str) -> dict[str, Any]:
    """Per-feature AUROC, the combined model out of fold and its ablation for one label."""
    y = np.asarray(y, dtype=float)
    context = {f.name: f.context for f in FEATURES}
    per: dict[str, Any] = {}
    usable: list[int] = []
    for j, name in enumerate(FEATURE_NAMES):
        col = x[:, j]
        ok = np.isfinite(col)
        entry: dict[str, Any] = {"n": int(ok.sum()), "positives": int(y[ok].sum())}
        if not ok.any():
            per[name] = {**entry, "auroc": None, "interval": None,
                         "note": "not traced in these runs"}
            continue
        if unit == "candidate" and context[name]:
            # the same value for every candidate of a question: alone it ranks questions, not
            # candidates; it is measured in the combination (ablation), without an interval
            entry.update({"auroc": _auc(col[ok], y[ok]), "interval": None,
                          "note": "question context: no interval alone (see the ablation)"})
        else:
            g = [groups[int(i)] for i in np.flatnonzero(ok)]
            entry.update(_auroc_with_interval(col[ok], y[ok], g, s))
        if ok.all() and np.ptp(col) > 0:
            usable.append(j)
        else:
            entry["note"] = ("constant" if ok.all() else
                             "undefined on some rows: left out of the combined model")
        per[name] = entry
    names = [FEATURE_NAMES[j] for j in usable]
    xs = x[:, usable]
    full = out_of_fold(xs, y, groups, s)
    full_auc = _resampled_auc(full, y)
    combined = {"features": names, **_auroc_with_interval(full, y, groups, s, full_auc),
                "aurc": S.aurc(1.0 / (1.0 + np.exp(-full)), y.tolist()) if unit == "question"
                else None,
                "coefficients_standardised": _coefficients(xs, y, names, s),
                "folds": min(s.folds, len(set(groups)))}
    ablation: dict[str, Any] = {}
    for k, name in enumerate(names):
        rest = [c for c in range(len(names)) if c != k]
        part = out_of_fold(xs[:, rest], y, groups, s) if rest else np.zeros(len(y))
        a_part = _auc(part, y)

        def loss(ix: np.ndarray, part: np.ndarray = part) -> float | None:
            a, b = full_auc(ix), _auc(part[ix], y[ix])
            return None if a is None or b is None else a - b

        ablation[name] = {"auroc_without": a_part,
                          "loss": (None if a_part is None or combined["auroc"] is None
                                   else combined["auroc"] - a_part),
                          "loss_interval": _interval(loss, len(y), groups, s)}
    return {"unit": unit, "n": int(len(y)), "positives": int(y.sum()),
            "groups": len(set(groups)), "per_feature": per, "combined": combined,
            "ablation": ablation}


def verdicts(labels: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per feature, from the study's intervals:

    * ``informative_alone``: its own AUROC interval excludes 0.5 on some label (on the
      ``candidate`` label only for a per-candidate feature: a context feature, the same for
      every candidate of a question, ranks questions there, not candidates);
    * ``adds_to_combination``: the combined model loses AUROC without it, the loss's interval
      above 0, on some label;
    * verdict ``kept`` (adds to the combination), ``redundant`` (informative alone, but the
      other features carry what it carries: correlated features share the loss, so of two
      near-copies neither may show one) or ``dropped`` (neither); ``not traced`` when no run
      defines it."""
    context = {f.name: f.context for f in FEATURES}
    out: dict[str, dict[str, Any]] = {}
    for name in FEATURE_NAMES:
        alone: list[str] = []
        adds: list[str] = []
        traced = False
        for lab, rep in labels.items():
            p = rep["per_feature"][name]
            if p["auroc"] is None:
                continue
            traced = True
            ci = p["interval"] or {}
            lo, hi = ci.get("lo"), ci.get("hi")
            if (lo is not None and hi is not None and (lo > 0.5 or hi < 0.5)
                    and not (lab == "candidate" and context[name])):
                alone.append(f"{lab}: AUROC {p['auroc']:.3f} [{lo:.3f}, {hi:.3f}]")
            ab = rep["ablation"].get(name)
            if ab and ab["loss_interval"]["lo"] is not None and ab["loss_interval"]["lo"] > 0:
                adds.append(f"{lab}: loss {ab['loss']:.3f} [{ab['loss_interval']['lo']:.3f}, "
                            f"{ab['loss_interval']['hi']:.3f}]")
        verdict = ("not traced" if not traced else "kept" if adds
                   else "redundant" if alone else "dropped")
        out[name] = {"verdict": verdict, "informative_alone": alone,
                     "adds_to_combination": adds}
    return out


# --------------------------------------------------------------------------- the study


def study(run_paths: Sequence[str | Path], dataset: str | Path,
          settings: StudySettings | None = None) -> dict[str, Any]:
    """The report (module docstring) of ``run_paths`` over ``dataset`` (a tuning part)."""
    from engram_eval.data.datasets import load_questions, resolve_format
    from engram_eval.io import sha256_file
    from engram_eval.provenance.guard import refuse_heldout, refuse_heldout_run
    from engram_eval.runs.reader import read_run

    s = settings or StudySettings()
    purpose = "the confidence study reads tuning parts only"
    refuse_heldout(dataset, purpose)
    sha = sha256_file(dataset)
    fmt = resolve_format(dataset, "auto")
    _, qs = load_questions(dataset, fmt)
    by_id = {q.question_id: q for q in qs}
    runs = [read_run(p, require_sidecar=True) for p in run_paths]
    records: list[QuestionRecord] = []
    left = {"no_gold": 0}
    seen: set[str] = set()
    analyzers = set()
    for r in runs:
        refuse_heldout_run(r.metadata, r.path, purpose)
        if r.dataset_sha256 != sha:
            raise ProvenanceError(f"{r.path}: sidecar field dataset.sha256 is "
                                  f"{r.dataset_sha256}, but {dataset} has sha256 {sha}: the "
                                  "run was made on other data")
        dup = seen & {row["question_id"] for row in r.rows}
        if dup:
            raise DataError(r.path, f"question {sorted(dup)[0]}", "question_id",
                            "already appears in another run given")
        seen |= {row["question_id"] for row in r.rows}
        an = analyzer_of_run(r.metadata)
        analyzers.add(an)
        recs, lo = extract(r.rows, by_id, fmt, an, s.candidates, where=str(r.path))
        records += recs
        left["no_gold"] += lo["no_gold"]
    if not records:
        raise ConfigError(f"{dataset}: no question of the runs takes part")
    top_x = np.asarray([r.x[0] for r in records])
    top_y = np.asarray([r.top_correct for r in records], dtype=float)
    top_g = [r.group for r in records]
    cand_x = np.concatenate([r.x for r in records])
    cand_y = np.asarray([y for r in records for y in r.labels], dtype=float)
    cand_g = [r.group for r in records for _ in r.labels]
    labels = {"top": study_label(top_x, top_y, top_g, s, "question"),
              "candidate": study_label(cand_x, cand_y, cand_g, s, "candidate")}
    n_unans = sum(r.unanswerable for r in records)
    return {
        "kind": KIND,
        "dataset": {"name": Path(dataset).name, "sha256": sha, "format": fmt},
        "runs": [r.describe() for r in runs],
        "settings": asdict(s) | {"resampling_unit": "conversation" if fmt == "locomo"
                                 else "question"},
        "analyzers": [asdict(a) for a in sorted(analyzers, key=repr)],
        "features": [{"name": f.name, "context": f.context, "doc": f.doc} for f in FEATURES],
        "denominators": {
            "questions": len(records), "answerable": len(records) - n_unans,
            "unanswerable": n_unans, "top_correct": int(top_y.sum()),
            "left_out": left, "candidate_rows": int(len(cand_y)),
            "candidate_positives": int(cand_y.sum()),
            "groups": len(set(top_g))},
        "labels": labels,
        "verdicts": verdicts(labels),
        "not_studied": [{
            "what": "a cross-encoder trained with unanswerable questions as all-negative "
                    "groups",
            "why": "needs a training and reranked fold runs per half of the tune part; not "
                   "run in this study"}],
        "note": "AUROC of the raw feature value: below 0.5 the feature points the other way. "
                "Tuning parts only; no gate or cut-off is chosen here.",
    }


def plot(report: Mapping[str, Any]) -> bytes:
    """Per-feature AUROC with intervals for both labels (PNG bytes)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labs = report["labels"]
    fig, axes = plt.subplots(1, len(labs), figsize=(5.6 * len(labs), 5.2), squeeze=False)
    for ax, (lab, rep) in zip(axes[0], labs.items(), strict=True):
        pf = rep["per_feature"]
        shown = [(n, pf[n]) for n in FEATURE_NAMES if pf[n]["interval"] is not None]
        shown.append(("combined (out of fold)", rep["combined"]))
        names = [n for n, _ in shown]
        vals = [e["auroc"] for _, e in shown]
        lo = [e["auroc"] - (e["interval"]["lo"] if e["interval"]["lo"] is not None
                            else e["auroc"]) for _, e in shown]
        hi = [(e["interval"]["hi"] if e["interval"]["hi"] is not None else e["auroc"])
              - e["auroc"] for _, e in shown]
        yy = np.arange(len(names))
        ax.errorbar(vals, yy, xerr=[lo, hi], fmt="o", capsize=3)
        ax.axvline(0.5, color="grey", ls="--", lw=1)
        ax.set_yticks(yy)
        ax.set_yticklabels(names, fontsize=8)
        ax.set_xlim(0.0, 1.0)
        ax.set_xlabel("AUROC (95% bootstrap interval)", fontsize=8)
        ax.set_title(f"label: {lab} (n={rep['n']}, positives {rep['positives']}, "
                     f"{rep['groups']} groups)" + ("\nquestion-context features: in the "
                                                   "combination only" if lab == "candidate"
                                                   else ""), fontsize=8)
    d = report["dataset"]
    fig.suptitle(f"Confidence feature study, {d['name']} (sha256 {d['sha256'][:12]}…), "
                 "tuning part", fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
