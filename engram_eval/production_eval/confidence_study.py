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

**Features**: every feature of :mod:`engram_eval.retrieval.gate_features` (the one
implementation, which the pipeline also writes into traces), computed from each run row's
traces and the dataset's texts with the view's spread over every *traced* session (all of
them unless the run kept fewer traces), the question's terms under the run's own lexical
analyser
(:func:`engram_eval.retrieval.gate_features.analyzer_of_run`, from the run's sidecar).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from engram_eval.data.records import Question
from engram_eval.errors import ConfigError, DataError, ProvenanceError
from engram_eval.retrieval.analyzer import Analyzer
from engram_eval.retrieval.gate_features import (
    FEATURE_NAMES,
    FEATURES,
    QuestionView,
    analyzer_of_run,
    feature_row,
    make_view,
)
from engram_eval.scoring import selective as S

KIND = "engram-eval/confidence-study"


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


def view(question: Question, row: Mapping[str, Any], analyzer: Analyzer) -> QuestionView:
    """The view of ``question`` through its run row (its final ranking and per-session
    traces; every traced session is the spread)."""
    traces = tuple(((row.get("trace") or {}).get("sessions")) or ())
    return make_view(question.question, question.question_date, question.sessions,
                     row["ranked_session_ids"], traces, analyzer)


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
