"""Calibration of the production confidence on real sessions (calibration v3), and its
measurement as selective retrieval.

**Data.** The session-level gate (:mod:`engram_eval.production_eval.sessions`: each question's
haystack sessions as its memories) over *tuning parts only* -- the tune part of the
LongMemEval dev split (its ``_abs`` questions included) and the tune conversations of a
LoCoMo split by conversation. A file holding any held-out data is refused (the one guard,
:func:`engram_eval.provenance.guard.refuse_heldout`: a part, a copy, a subset, a mixture, or a
link to a marked part). Per question, its
candidates (the first ``candidates`` memories of the pipeline's ranking) with the features of
:mod:`engram_eval.production.features`; label 1 when the memory is gold (never for an
unanswerable question). Gold is read only to label, after the features are computed.

**Fit** (scikit-learn, imported lazily):

1. Scores: ``StandardScaler`` + ``LogisticRegression`` (L2, ``C``, lbfgs) on every
   (question, candidate) pair; its coefficients are stored in raw feature units (the
   scaling folded in).
2. Mapping to a probability: an *explicit* cross-fit, not ``CalibratedClassifierCV``
   (which cannot keep a question's or a conversation's pairs in one fold):
   ``GroupKFold`` (``folds``; groups = LongMemEval question, LoCoMo conversation) gives
   out-of-fold scores; an ``IsotonicRegression`` (``out_of_bounds="clip"``) -- or a Platt
   logistic of the score -- is fitted on them. ``calibrate_on="top"`` fits it on each
   question's top candidate only (label: the top result is right), ``"pairs"`` on every pair.
   The final score model is refitted on all pairs (``CalibratedClassifierCV``'s
   ``ensemble=False`` scheme, with groups).
3. Cut-off: on the tuning parts' out-of-fold confidences, the smallest cut-off on a 0.01
   grid at which, on *every* tuning part, at least ``target_precision`` of the returned top
   results are gold (a question returns a top result when its top confidence >= cut-off;
   unanswerable questions that return one count as wrong) and at least ``min_returned``
   questions return one. When no cut-off does, the one with the highest such rate (on the
   worst part) among those where every part returns at least ``min_returned`` questions,
   and the file says the target was not reached.

The calibration file records the data (file names, sha256, counts, a hash of every
(question, memory, label)), the settings, the model files' hash, the fitted numbers, the
model's hash, the cut-off with its target and the tuning-part (out-of-fold) metrics. It is
deterministic (no timestamps). Search applies it with numpy only
(:class:`engram_eval.production.confidence.ContextCalibration`).

**Per memory shape** (:func:`fit_shapes`, calibration version 4, issue 30). The same fit
(:func:`fit_model`, the one code path of both versions), once per memory shape, each shape
on its own parts: a part's shape is read from its data
(:func:`engram_eval.data.records.corpus_shape`, the rule that reads the fusion structure):
a LongMemEval tune part is ``chat``, LoCoMo tune conversations ``people``, a production
fixture of isolated memories (:func:`extract_fixture`: each case's memories stored as a
production store keeps them) ``short``. Cross-fit groups: the question (LongMemEval), the
conversation (LoCoMo), the case (a fixture: its questions search one store). The feature set
is named (:data:`engram_eval.production.features.FEATURE_SETS`, default ``v3``), and each
shape's model is stored as scikit-learn fitted it -- the scaler's mean and scale, the
logistic coefficients on the scaled features, the mapping's numbers unrounded -- so the numpy
application reproduces ``predict_proba`` and the isotonic ``predict``. A fixture that is
held out (its own ``heldout`` field, its bytes, or any case of a known held-out fixture:
:func:`engram_eval.provenance.heldout.fixture_heldout`) is refused, as a held-out dataset
part is.

**Measurement** (:func:`measure`): the packaged search under that calibration over a part's
questions; per question its top result under the gate's ``result_order`` (the pipeline's
first; before issue 45 the highest confidence, ties in ranking order), whether it is right,
and the selective-retrieval metrics of :mod:`engram_eval.scoring.selective` with bootstrap
intervals over questions (over whole conversations on LoCoMo); both orders are reported side
by side (:func:`measure_orders`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engram_eval.data.records import corpus_shape
from engram_eval.errors import ConfigError
from engram_eval.io import sha256_file, sha256_json
from engram_eval.production.confidence import CALIBRATION_KIND, ShapeCalibration
from engram_eval.production.features import (
    DEFAULT_FEATURE_SET,
    FEATURES_V3,
    FeatureSet,
    feature_set,
)
from engram_eval.production.search import Engine, memory_signals
from engram_eval.production_eval.sessions import group_of, search_all, session_questions
from engram_eval.scoring import selective as S

FORMULA = ("z = intercept + sum_k w_k * x_k over features; confidence = interp(z, "
           "isotonic.x, isotonic.y) (clipped at the ends), or sigmoid(platt.a * z + platt.b)")
FORMULA_V4 = ("per shape: z = logistic.intercept + sum_k logistic.coefficients[k] * "
              "(x_k - standardisation.mean[k]) / standardisation.scale[k] over its features; "
              "confidence = interp(z, isotonic.x, isotonic.y) (clipped at the ends), or "
              "sigmoid(platt.a * z + platt.b)")
SHAPE_RULE = ("engram_eval.data.records.corpus_shape of the data: people = no chat roles "
              "(named speakers); short = every session one user turn (isolated memories, a "
              "production store); chat = user/assistant sessions. Search over a store: short.")


def _sklearn() -> Any:
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise ConfigError("the calibration on real sessions needs scikit-learn: pip install "
                          "'scikit-learn>=1.3' (a dependency of engram-eval)") from None
    import sklearn.isotonic
    import sklearn.linear_model
    import sklearn.model_selection
    import sklearn.pipeline
    import sklearn.preprocessing

    return sklearn


@dataclass
class PartData:
    """One tuning part's candidates: per question its id, group, labels and feature rows."""

    label: str
    path: str
    sha256: str
    fmt: str
    records: list[dict[str, Any]]
    selection: dict[str, Any] | None = None
    #: the memory shape read from the part's data (engram_eval.data.records.corpus_shape)
    shape: str | None = None

    @property
    def questions(self) -> int:
        return len(self.records)


def part_shape(path: str | Path, shapes: dict[str, str]) -> str:
    """The one shape of a part's questions (``question_id -> shape``); ConfigError naming
    the file and two questions when they differ, or when no question takes part."""
    found = sorted(set(shapes.values()))
    if not found:
        raise ConfigError(f"{path}: no question takes part, so its memory shape is unknown")
    if len(found) > 1:
        first = {sh: next(q for q, v in shapes.items() if v == sh) for sh in found}
        raise ConfigError(f"{path}: its questions' memories have different shapes ("
                          + ", ".join(f"{q}: {sh}" for sh, q in first.items())
                          + "); give each shape its own part")
    return found[0]


def refuse_heldout(path: str | Path) -> None:
    """ProvenanceError when ``path`` holds any held-out data (the one guard,
    :func:`engram_eval.provenance.guard.refuse_heldout`: marker beside the file or its link
    target, a copy of a part, or any held-out question)."""
    from engram_eval.provenance.guard import refuse_heldout as guard

    guard(path, "the calibration is fitted on tuning parts only")


def refuse_heldout_fixture(path: str | Path) -> None:
    """ProvenanceError when the production fixture ``path`` is held out (its own field, its
    bytes, or a case of a known held-out fixture: validation_v3, validation_v4, ...)."""
    from engram_eval.errors import ProvenanceError
    from engram_eval.provenance.heldout import fixture_heldout

    m = fixture_heldout(path)
    if m is not None:
        raise ProvenanceError(f"{path}: {m.describe()}; the calibration is fitted on tuning "
                              "parts only")


def select(questions: Sequence[Any], *, max_questions: int | None = None,
           every: int | None = None) -> list[Any]:
    """The questions a fit reads: the first ``max_questions``; with ``every`` = K, every
    unanswerable question (LongMemEval ``_abs``, LoCoMo category 5) and every K-th of the
    others, in file order (a part too slow to encode whole on a small machine)."""
    qs = list(questions)[:max_questions] if max_questions else list(questions)
    if not every or every <= 1:
        return qs
    out, k = [], 0
    for q in qs:
        if q.is_abstention or q.get_extra("adversarial"):
            out.append(q)
        else:
            if k % every == 0:
                out.append(q)
            k += 1
    return out


def extract(engine: Engine, label: str, path: str | Path, *, max_questions: int | None = None,
            every: int | None = None, check_heldout: bool = True,
            on_question: Callable[[int], None] | None = None,
            features: str = DEFAULT_FEATURE_SET) -> PartData:
    """Features (of the feature set ``features``) and labels of every taking-part question
    of ``path`` (a tuning part)."""
    from engram_eval.data.datasets import load_questions, resolve_format

    fs = feature_set(features)
    if check_heldout:
        refuse_heldout(path)
    fmt = resolve_format(path, "auto")
    _, loaded = load_questions(path, fmt)
    qs = select(loaded, max_questions=max_questions, every=every)
    k = engine.settings.candidates
    records = []
    shapes: dict[str, str] = {}
    for n, sq in enumerate(session_questions(engine, qs, fmt)):
        q = sq.question
        shapes[q.question_id] = sq.shape
        sig = memory_signals(engine, q.question, q.question_date, sq.memories, sq.pieces,
                             sq.vectors)
        cands = sig["order"][:k]
        x = fs.compute(q.question, sig, cands, None)
        ids = [sq.memories[i].id for i in cands]
        gold = set(sq.gold)  # read only now, to label
        records.append({"question_id": q.question_id, "group": group_of(q.question_id, fmt),
                        "unanswerable": sq.unanswerable, "gold": sorted(gold),
                        "candidates": ids, "x": x,
                        "y": np.asarray([1.0 if i in gold else 0.0 for i in ids])})
        if on_question is not None:
            on_question(n)
    return PartData(label, Path(path).name, sha256_file(path), fmt, records,
                    {"max_questions": max_questions, "every": every},
                    part_shape(path, shapes))


def extract_fixture(engine: Engine, label: str, path: str | Path, *,
                    check_heldout: bool = True,
                    on_question: Callable[[int], None] | None = None,
                    features: str = DEFAULT_FEATURE_SET) -> PartData:
    """Features and labels of every question of the production fixture ``path`` (a
    training fixture such as ``train_short.json``; a held-out fixture is refused). Each
    case's memories are cut and encoded as a store keeps them (float32 vectors), searched
    by the production code; group = the case. Gold is read only to label, after."""
    from engram_eval.production.search import memory_sessions
    from engram_eval.production_eval.fixture import load_fixture

    fs = feature_set(features)
    if check_heldout:
        refuse_heldout_fixture(path)
    view, gold_of = load_fixture(path)
    k = engine.settings.candidates
    records: list[dict[str, Any]] = []
    shapes: dict[str, str] = {}
    n = 0
    for case in view.cases:
        mems = case.memories
        pieces = engine.pieces(mems)
        vecs = np.asarray(engine.encoder().encode([t for _, t in pieces]), dtype=np.float32)
        shape = corpus_shape(memory_sessions(mems))
        for q in case.queries:
            shapes[q.question_id] = shape
            sig = memory_signals(engine, q.query, q.now, mems, pieces, vecs)
            cands = sig["order"][:k]
            x = fs.compute(q.query, sig, cands, None)
            ids = [mems[i].id for i in cands]
            gold = set(gold_of(q.question_id))  # read only now, to label
            records.append({"question_id": q.question_id, "group": case.case_id,
                            "unanswerable": not gold, "gold": sorted(gold),
                            "candidates": ids, "x": x,
                            "y": np.asarray([1.0 if i in gold else 0.0 for i in ids])})
            if on_question is not None:
                on_question(n)
            n += 1
    return PartData(label, Path(path).name, sha256_file(path), "production-fixture", records,
                    {"max_questions": None, "every": None}, part_shape(path, shapes))


def extract_runs(label: str, run_paths: Sequence[str | Path], dataset: str | Path, *,
                 check_heldout: bool = True) -> PartData:
    """Feature set ``v4`` and labels of every taking-part question of finished runs over
    ``dataset`` (a tuning part; its sha256 must be each run's; a held-out dataset or run is
    refused; the runs' questions must be disjoint). Per question its candidates are the
    first :data:`~engram_eval.retrieval.gate_features.GATE_DEPTH` results of the run's final
    ranking that the run traced, their rows the ``gate_features`` the run's trace holds --
    or, for a run made before the pipeline traced them, the same functions
    (:func:`engram_eval.retrieval.gate_features.gate_rows`) over the view of its traces
    (spread :data:`~engram_eval.retrieval.gate_features.GATE_SPREAD`, the run's own
    analyser): what the pipeline would have traced. The shape is read from the dataset's
    sessions; group: the question (LongMemEval) or the conversation (LoCoMo). Gold is read
    only to label, after the features."""
    from engram_eval.data.datasets import load_questions, resolve_format
    from engram_eval.errors import DataError, ProvenanceError
    from engram_eval.production.features import gate_features
    from engram_eval.production_eval.sessions import labels
    from engram_eval.provenance.guard import refuse_heldout_run
    from engram_eval.retrieval import gate_features as G
    from engram_eval.retrieval.gate_features import analyzer_of_run
    from engram_eval.runs.reader import read_run

    if check_heldout:
        refuse_heldout(dataset)
    sha = sha256_file(dataset)
    fmt = resolve_format(dataset, "auto")
    _, loaded = load_questions(dataset, fmt)
    by_id = {q.question_id: q for q in loaded}
    records: list[dict[str, Any]] = []
    shapes: dict[str, str] = {}
    runs_doc: list[dict[str, Any]] = []
    for rp in run_paths:
        r = read_run(rp, require_sidecar=True)
        if check_heldout:
            refuse_heldout_run(r.metadata, r.path, "the calibration is fitted on tuning parts "
                                                   "only")
        if r.dataset_sha256 != sha:
            raise ProvenanceError(f"{r.path}: sidecar field dataset.sha256 is "
                                  f"{r.dataset_sha256}, but {dataset} has sha256 {sha}: the "
                                  "run was made on other data")
        analyzer = analyzer_of_run(r.metadata)
        traced_rows = computed_rows = 0
        for row in r.rows:
            qid = row["question_id"]
            q = by_id.get(qid)
            if q is None:
                raise DataError(str(r.path), f"question {qid}", "question_id",
                                "names no question of the dataset")
            if qid in shapes:
                raise DataError(str(r.path), f"question {qid}", "question_id",
                                "already appears in another run given")
            lab = labels(q, fmt)
            if lab is None:
                continue
            traces = list(((row.get("trace") or {}).get("sessions")) or ())
            ranked = list(row["ranked_session_ids"])
            k = min(G.GATE_DEPTH, len(traces), len(ranked))
            if not k:
                raise DataError(str(r.path), f"question {qid}", "trace.sessions",
                                "holds no per-session trace")
            if all("gate_features" in t for t in traces[:k]):
                feats = {i: traces[i]["gate_features"] for i in range(k)}
                traced_rows += 1
            else:
                v = G.make_view(q.question, q.question_date, q.sessions, ranked, traces[:k],
                                analyzer, G.GATE_SPREAD)
                feats = dict(enumerate(G.gate_rows(v, k)))
                computed_rows += 1
            x = gate_features(q.question, {"gate_features": feats}, list(range(k)), None)
            shapes[qid] = corpus_shape(q.sessions)
            unans, gold_ids = lab
            gold = set(gold_ids)  # read only now, to label
            ids = ranked[:k]
            records.append({"question_id": qid, "group": group_of(qid, fmt),
                            "unanswerable": unans, "gold": sorted(gold), "candidates": ids,
                            "x": x, "y": np.asarray([1.0 if i in gold and not unans else 0.0
                                                     for i in ids])})
        runs_doc.append({"file": Path(rp).name, "sha256": sha256_file(rp),
                         "questions_with_traced_features": traced_rows,
                         "questions_with_features_computed_from_traces": computed_rows,
                         "settings": r.metadata.get("config")})
    return PartData(label, Path(dataset).name, sha, fmt, records,
                    {"max_questions": None, "every": None, "runs": runs_doc},
                    part_shape(dataset, shapes))


def _pairs(parts: Sequence[PartData], width: int = len(FEATURES_V3)
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple]]:
    xs, ys, groups, index = [], [], [], []
    for pi, part in enumerate(parts):
        for qi, r in enumerate(part.records):
            for ci in range(len(r["candidates"])):
                xs.append(r["x"][ci])
                ys.append(r["y"][ci])
                groups.append(f"{part.label}/{r['group']}")
                index.append((pi, qi, ci))
    x = np.asarray(xs, dtype=float).reshape(len(xs), width)
    return x, np.asarray(ys, dtype=float), np.asarray(groups), index


def _score_model(C: float) -> Any:
    sk = _sklearn()
    return sk.pipeline.make_pipeline(
        sk.preprocessing.StandardScaler(),
        sk.linear_model.LogisticRegression(C=C, max_iter=2000))


def _raw_coefficients(model: Any) -> tuple[float, np.ndarray]:
    """The pipeline's decision function as ``b + w . x`` in raw feature units."""
    scaler, lr = model[0], model[-1]
    scale = np.where(scaler.scale_ == 0, 1.0, scaler.scale_)
    w = lr.coef_[0] / scale
    b = float(lr.intercept_[0] - np.sum(lr.coef_[0] * scaler.mean_ / scale))
    return b, w


#: The two orders of the gate's results (``ProductionSettings.result_order``): the
#: pipeline's (the default since issue 45) and most confident first (before it).
ORDERS = ("pipeline", "confidence")


def top_index(conf: np.ndarray, order: str) -> int:
    """The position (in the pipeline's order) of a question's top result under ``order``:
    the pipeline's first, or the most confident (ties: the pipeline's order)."""
    if order not in ORDERS:
        raise ConfigError(f"result order {order!r}: one of {list(ORDERS)}")
    return 0 if order == "pipeline" else int(np.argmax(conf))  # first maximum on ties


def _top(records: list[dict[str, Any]], conf: list[np.ndarray],
         order: str = "confidence") -> list[dict[str, Any]]:
    """Per question: its top candidate under ``order`` (:func:`top_index`; candidates in the
    pipeline's order), its confidence, whether right."""
    out = []
    for r, c in zip(records, conf, strict=True):
        if not len(c):
            out.append({"question_id": r["question_id"], "unanswerable": r["unanswerable"],
                        "top": None, "confidence": 0.0, "correct": 0})
            continue
        i = top_index(c, order)
        right = (not r["unanswerable"]) and r["candidates"][i] in r["gold"]
        out.append({"question_id": r["question_id"], "unanswerable": r["unanswerable"],
                    "top": r["candidates"][i], "confidence": float(c[i]),
                    "correct": int(right)})
    return out


def at_cutoff(top: Sequence[dict[str, Any]], cut: float) -> dict[str, Any]:
    """What the gate does at ``cut`` with each question's top result."""
    ans = [t for t in top if not t["unanswerable"]]
    una = [t for t in top if t["unanswerable"]]
    ret = [t for t in top if t["confidence"] >= cut]
    acc = [t for t in ans if t["confidence"] >= cut]
    abstained = sum(1 for t in una if t["confidence"] < cut)
    return {"cutoff": cut, "questions": len(top), "answerable": len(ans),
            "unanswerable": len(una), "returned": len(ret),
            "returned_top_gold": sum(t["correct"] for t in ret),
            "unanswerable_abstained": abstained,
            "returned_top_gold_rate": (sum(t["correct"] for t in ret) / len(ret)
                                       if ret else None),
            "answerable_returned_rate": len(acc) / len(ans) if ans else None,
            "answerable_top_gold_rate": (sum(t["correct"] for t in acc) / len(ans)
                                         if ans else None),
            "unanswerable_abstained_rate": abstained / len(una) if una else None}


def choose_cutoff(tops: dict[str, list[dict[str, Any]]], target: float,
                  min_returned: int = 20) -> dict[str, Any]:
    """The smallest cut-off on the 0.01 grid meeting ``target`` on every part (module
    docstring); the table of every part at it."""
    grid = [round(0.01 * i, 2) for i in range(1, 100)]
    for c in grid:
        rows = {k: at_cutoff(v, c) for k, v in tops.items()}
        if all(r["returned"] >= min_returned and r["returned_top_gold_rate"] is not None
               and r["returned_top_gold_rate"] >= target for r in rows.values()):
            return {"value": c, "met_on_tuning_parts": True, "at_cutoff": rows}
    # unreachable: the cut-off with the highest worst-part rate among those where every part
    # returns at least min_returned questions (the smallest such cut-off on ties)
    best, best_rate = grid[-1], -1.0
    for c in grid:
        rows = {k: at_cutoff(v, c) for k, v in tops.items()}
        if all(r["returned"] >= min_returned for r in rows.values()):
            rate = min(r["returned_top_gold_rate"] or 0.0 for r in rows.values())
            if rate > best_rate:
                best, best_rate = c, rate
    return {"value": best, "met_on_tuning_parts": False,
            "fallback": "target not reached on every tuning part: the cut-off with the "
                        "highest returned-top-gold rate (worst part) among those where every "
                        f"part returns at least {min_returned} questions",
            "at_cutoff": {k: at_cutoff(v, best) for k, v in tops.items()}}


def summarise(top: Sequence[dict[str, Any]], *, bins: int = 15) -> dict[str, Any]:
    conf = [t["confidence"] for t in top]
    corr = [t["correct"] for t in top]
    rel = S.reliability(conf, corr, bins)
    return {"n": len(top), "correct": int(sum(corr)), "ece": rel["ece"],
            "brier": S.brier(conf, corr), "auroc": S.auroc(conf, corr),
            "aurc": S.aurc(conf, corr), "reliability": rel["bins"]}


UNANSWERABLE = {"longmemeval": "LongMemEval _abs questions",
                "locomo": "LoCoMo category 5 (adversarial) items",
                "production-fixture": "fixture questions without a gold memory"}


def selective_report(top: Sequence[dict[str, Any]], cutoff: float, fmt: str, *,
                     bins: int = 15) -> dict[str, Any]:
    """The selective-retrieval report of one part's (out-of-fold) top results: every
    question (:func:`summarise` and the risk-coverage curve, ``risk = 1 - top result
    right``), the answerable questions alone, and the unanswerable ones alone (LongMemEval
    ``_abs``, LoCoMo category 5: no top result is right, so no AUROC; their confidences and
    how many the cut-off abstains on), with what the gate does at ``cutoff``."""
    ans = [t for t in top if not t["unanswerable"]]
    una = [t for t in top if t["unanswerable"]]
    conf = [t["confidence"] for t in top]
    corr = [t["correct"] for t in top]
    uc = [t["confidence"] for t in una]
    return {"all": {**summarise(top, bins=bins),
                    "risk_coverage": S.risk_coverage(conf, corr)},
            "answerable": summarise(ans, bins=bins) if ans else None,
            "unanswerable": {"what": UNANSWERABLE.get(fmt, "questions without gold"),
                             "n": len(una),
                             "mean_confidence": float(np.mean(uc)) if uc else None,
                             "max_confidence": float(np.max(uc)) if uc else None,
                             "abstained_at_cutoff": sum(1 for c in uc if c < cutoff)},
            "at_cutoff": at_cutoff(top, cutoff)}


@dataclass(frozen=True)
class ModelFit:
    """One fitted model (:func:`fit_model`): the scikit-learn objects as fitted (the score
    model refitted on all pairs, the mapping fitted on out-of-fold scores), the mapping's
    numbers as a file records them, the cut-off chosen on the parts' out-of-fold
    confidences, and each part's out-of-fold top results."""

    features: FeatureSet
    score_model: Any
    mapper: Any
    mapping: dict[str, Any]
    cutoff: dict[str, Any]
    tops: dict[str, list[dict[str, Any]]]
    folds: int
    C: float
    calibrate_on: str
    target_precision: float
    min_returned: int
    order: str = "confidence"


def fit_model(parts: Sequence[PartData], *, features: str = DEFAULT_FEATURE_SET,
              folds: int = 5, C: float = 1.0, mapping: str = "isotonic",
              calibrate_on: str = "top", target_precision: float = 0.9,
              min_returned: int = 20, digits: int | None = None,
              order: str = "confidence") -> ModelFit:
    """The fit of the module docstring on ``parts`` (pooled): out-of-fold scores by
    ``GroupKFold``, the mapping on them, the score model refitted on all pairs, the cut-off.
    ``order``: which candidate is a question's top result (:func:`top_index`: the
    pipeline's first, or the most confident, as every fit before issue 45), for the mapping
    fitted on top results and the cut-off.
    ``digits``: the mapping's numbers are rounded to these many decimals as recorded (None:
    unrounded); the out-of-fold confidences that choose the cut-off use the recorded
    numbers, as search will."""
    if mapping not in ("isotonic", "platt") or calibrate_on not in ("top", "pairs"):
        raise ConfigError("mapping is isotonic or platt; calibrate_on is top or pairs")
    fs = feature_set(features)
    sk = _sklearn()
    x, y, groups, index = _pairs(parts, len(fs.features))
    if len(set(y.tolist())) < 2:
        raise ConfigError("the tuning parts need both gold and non-gold candidates")
    if len(set(groups.tolist())) < folds:
        raise ConfigError(f"{len(set(groups.tolist()))} cross-fit groups in "
                          f"{[p.path for p in parts]}, fewer than {folds} folds")

    def rnd(v: float) -> float:
        return float(v) if digits is None else round(float(v), digits)

    z_oof = np.zeros(len(y))
    for tr, te in sk.model_selection.GroupKFold(n_splits=folds).split(x, y, groups):
        z_oof[te] = _score_model(C).fit(x[tr], y[tr]).decision_function(x[te])
    final = _score_model(C).fit(x, y)

    def per_question(values: np.ndarray) -> list[list[np.ndarray]]:
        out: list[list[list[float]]] = [[[] for _ in p.records] for p in parts]
        for (pi, qi, _), v in zip(index, values, strict=True):
            out[pi][qi].append(float(v))
        return [[np.asarray(v) for v in qs] for qs in out]

    z_q = per_question(z_oof)
    if calibrate_on == "top":
        tz, ty = [], []
        for part, zs in zip(parts, z_q, strict=True):
            for t, zq in zip(_top(part.records, zs, order), zs, strict=True):
                if len(zq):
                    tz.append(float(zq[top_index(zq, order)]))
                    ty.append(float(t["correct"]))
        cal_z, cal_y = np.asarray(tz), np.asarray(ty)
    else:
        cal_z, cal_y = z_oof, y
    doc_map: dict[str, Any] = {"method": mapping, "fitted_on": calibrate_on,
                               "points": int(len(cal_y)), "positives": int(cal_y.sum())}
    mapper: Any
    if mapping == "isotonic":
        mapper = sk.isotonic.IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0)
        mapper.fit(cal_z, cal_y)
        ix, iy = mapper.X_thresholds_.tolist(), mapper.y_thresholds_.tolist()
        doc_map["isotonic"] = {"x": [rnd(v) for v in ix], "y": [rnd(v) for v in iy]}
    else:
        mapper = sk.linear_model.LogisticRegression(C=1e6, max_iter=2000)
        mapper.fit(cal_z.reshape(-1, 1), cal_y)
        doc_map["platt"] = {"a": rnd(mapper.coef_[0][0]), "b": rnd(mapper.intercept_[0])}

    def fmap(z: np.ndarray) -> np.ndarray:  # the stored numbers, as search applies them
        if mapping == "isotonic":
            return np.interp(z, np.asarray(doc_map["isotonic"]["x"]),
                             np.asarray(doc_map["isotonic"]["y"]))
        return 1.0 / (1.0 + np.exp(-(doc_map["platt"]["a"] * z + doc_map["platt"]["b"])))
    conf_q = [[fmap(zq) for zq in zs] for zs in z_q]
    tops = {p.label: _top(p.records, cq, order) for p, cq in zip(parts, conf_q, strict=True)}
    cut = choose_cutoff(tops, target_precision, min_returned)
    return ModelFit(fs, final, mapper, doc_map, cut, tops, folds, C, calibrate_on,
                    target_precision, min_returned, order)


def apply_fit(m: ModelFit, x: np.ndarray) -> np.ndarray:
    """The confidences ``m`` gives the rows ``x`` (its score model refitted on all its pairs,
    then its mapping as recorded: what search applies)."""
    if not len(x):
        return np.zeros(0)
    z = m.score_model.decision_function(np.asarray(x, dtype=float))
    if m.mapping["method"] == "isotonic":
        return np.interp(z, np.asarray(m.mapping["isotonic"]["x"]),
                         np.asarray(m.mapping["isotonic"]["y"]))
    a, b = m.mapping["platt"]["a"], m.mapping["platt"]["b"]
    return np.asarray(1.0 / (1.0 + np.exp(-(a * z + b))))


def nested_cv(parts: Sequence[PartData], *, features: str = DEFAULT_FEATURE_SET,
              folds: int = 5, C: float = 1.0, mapping: str = "platt",
              calibrate_on: str = "top", target_precision: float = 0.9,
              min_returned: int = 20, order: str = "pipeline", bins: int = 15,
              resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The whole fit (:func:`fit_model`: score model, mapping and cut-off, each with its own
    inner cross-fit) judged on data it never saw: an outer ``GroupKFold(folds)`` over the
    pooled parts' groups (question, conversation, case); each outer fold's questions get
    the confidences and the cut-off of the fit on the other folds (inner folds: ``folds``,
    or fewer when the outer training data has fewer groups). Reported over every question:
    AUROC, ECE, Brier, AURC of the top result (under ``order``) with bootstrap intervals by
    group, and what each question's own fold cut-off does (returned, answered precision =
    returned top results right, answerable answered, unanswerable abstained), in all and per
    part. This is the estimate a choice between fits reads; the fit itself is
    :func:`fit_model` on every part."""
    import dataclasses

    sk = _sklearn()
    recs = [(pi, qi) for pi, p in enumerate(parts) for qi in range(len(p.records))]
    groups = np.asarray([f"{parts[pi].label}/{parts[pi].records[qi]['group']}"
                         for pi, qi in recs])
    n_groups = len(set(groups.tolist()))
    if n_groups < folds:
        raise ConfigError(f"{n_groups} groups in {[p.path for p in parts]}, fewer than "
                          f"{folds} outer folds")
    conf: list[np.ndarray | None] = [None] * len(recs)
    cut_of = np.zeros(len(recs))
    fold_of = np.zeros(len(recs), dtype=int)
    fold_docs = []
    for k, (tr, te) in enumerate(sk.model_selection.GroupKFold(n_splits=folds).split(
            np.zeros(len(recs)), np.zeros(len(recs)), groups)):
        keep = {recs[j] for j in tr}
        train = [dataclasses.replace(p, records=[r for qi, r in enumerate(p.records)
                                                 if (pi, qi) in keep])
                 for pi, p in enumerate(parts)]
        train = [p for p in train if p.records]
        inner = min(folds, len(set(groups[tr].tolist())))
        m = fit_model(train, features=features, folds=inner, C=C, mapping=mapping,
                      calibrate_on=calibrate_on, target_precision=target_precision,
                      min_returned=min_returned, order=order)
        for j in te:
            pi, qi = recs[j]
            conf[j] = apply_fit(m, parts[pi].records[qi]["x"])
            cut_of[j] = m.cutoff["value"]
            fold_of[j] = k
        fold_docs.append({"fold": k, "test_questions": len(te),
                          "test_groups": len(set(groups[te].tolist())),
                          "cutoff": m.cutoff["value"],
                          "cutoff_met_on_training_folds": m.cutoff["met_on_tuning_parts"]})
    top = []
    for j, (pi, qi) in enumerate(recs):
        c = conf[j]
        assert c is not None
        t = _top([parts[pi].records[qi]], [c], order)[0]
        top.append({**t, "part": parts[pi].label, "cutoff": float(cut_of[j]),
                    "fold": int(fold_of[j])})
    cf = np.asarray([t["confidence"] for t in top])
    y = np.asarray([t["correct"] for t in top])
    una = np.asarray([t["unanswerable"] for t in top], dtype=bool)
    ret = cf >= cut_of

    def ratio(num: np.ndarray, den: np.ndarray) -> Callable[[np.ndarray], float | None]:
        def f(ix: np.ndarray) -> float | None:
            d = den[ix].sum()
            return None if d == 0 else float(num[ix].sum() / d)
        return f

    def figures(ix_all: np.ndarray) -> dict[str, Any]:
        g = groups[ix_all].tolist()

        def iv(stat: Callable[[np.ndarray], float | None]) -> dict[str, Any]:
            return S.bootstrap(lambda ix: stat(ix_all[ix]), len(ix_all), resamples=resamples,
                               seed=seed, groups=g)

        sub = [top[i] for i in ix_all]
        stats: dict[str, Callable[[np.ndarray], float | None]] = {
            "auroc": lambda ix: S.auroc(cf[ix], y[ix]),
            "ece": lambda ix: S.ece(cf[ix], y[ix], bins),
            "answered_precision": ratio(ret & (y == 1), ret),
            "answerable_answered_rate": ratio(ret & ~una, ~una),
            "unanswerable_abstained_rate": ratio(~ret & una, una)}
        return {"n": len(sub), "answerable": int((~una[ix_all]).sum()),
                "unanswerable": int(una[ix_all].sum()),
                "top_right": int(y[ix_all].sum()),
                **{k: v for k, v in summarise(sub, bins=bins).items() if k != "reliability"},
                "answered": int(ret[ix_all].sum()),
                "answered_right": int((ret & (y == 1))[ix_all].sum()),
                "answered_precision": ratio(ret & (y == 1), ret)(ix_all),
                "answerable_answered": int((ret & ~una)[ix_all].sum()),
                "answerable_answered_rate": ratio(ret & ~una, ~una)(ix_all),
                "unanswerable_abstained": int((~ret & una)[ix_all].sum()),
                "unanswerable_abstained_rate": ratio(~ret & una, una)(ix_all),
                "intervals": {k: iv(f) for k, f in stats.items()}}

    every = np.arange(len(top))
    return {"rule": "outer GroupKFold over the pooled parts' groups; each fold's questions "
                    "scored by the whole fit (score model, mapping, cut-off, with its inner "
                    "cross-fit) made on the other folds, judged at that fit's cut-off",
            "outer_folds": folds, "order": order, "feature_set": features,
            "target_precision": target_precision, "min_returned": min_returned,
            "bootstrap": {"resamples": resamples, "seed": seed,
                          "unit": "group (question, conversation or case)"},
            "folds": fold_docs, "all": figures(every),
            "parts": {p.label: figures(np.asarray([j for j, t in enumerate(top)
                                                   if t["part"] == p.label]))
                      for p in parts},
            "questions": [{**{k: t[k] for k in ("question_id", "part", "fold",
                                                "unanswerable", "top", "confidence",
                                                "correct", "cutoff")},
                           "group": str(groups[j])} for j, t in enumerate(top)]}


def _cutoff_doc(m: ModelFit, on: str) -> dict[str, Any]:
    return {"value": m.cutoff["value"], "target": {
        "returned_top_gold_rate_at_least": m.target_precision, "on": on,
        "min_questions_returning": m.min_returned},
        "met_on_tuning_parts": m.cutoff["met_on_tuning_parts"],
        "rule": "smallest cut-off on a 0.01 grid meeting the target on every tuning part",
        "at_cutoff": m.cutoff["at_cutoff"]}


def _data_doc(parts: Sequence[PartData]) -> list[dict[str, Any]]:
    return [{"part": p.label, "file": p.path, "sha256": p.sha256, "format": p.fmt,
             "questions": p.questions, "selection": p.selection,
             "unanswerable": sum(1 for r in p.records if r["unanswerable"]),
             "pairs": int(sum(len(r["candidates"]) for r in p.records)),
             "positives": int(sum(r["y"].sum() for r in p.records)),
             "pairs_sha256": sha256_json([[r["question_id"], r["candidates"],
                                           r["y"].astype(int).tolist()]
                                          for r in p.records])} for p in parts]


def _check_engine(engine: Engine) -> None:
    if engine.settings.excerpt_retry:
        raise ConfigError("calibration v3 is fitted on whole memories: set excerpt_retry "
                          "false (the excerpt retry would raise confidences it never saw)")


def _engine_doc(engine: Engine) -> dict[str, Any]:
    ref = engine.embedding_ref
    return {"embedding_model": {"name": engine.settings.embedding_model, "sha256": ref.sha256,
                                "revision": ref.revision},
            "settings": engine.settings.retrieval_part()}


def fit(parts: Sequence[PartData], engine: Engine, *, folds: int = 5, C: float = 1.0,
        mapping: str = "isotonic", calibrate_on: str = "top", target_precision: float = 0.9,
        min_returned: int = 20, bins: int = 15) -> dict[str, Any]:
    """Fit calibration v3 on ``parts`` (module docstring; one model pooled over the parts,
    :func:`fit_model` with the numbers rounded to 10 decimals and the coefficients in raw
    feature units). Returns the calibration document."""
    _check_engine(engine)
    m = fit_model(parts, features="v3", folds=folds, C=C, mapping=mapping,
                  calibrate_on=calibrate_on, target_precision=target_precision,
                  min_returned=min_returned, digits=10)
    b, w = _raw_coefficients(m.score_model)
    coefficients = {"intercept": round(b, 10),
                    **{f: round(float(v), 10) for f, v in zip(FEATURES_V3, w, strict=True)}}
    model = {"features": list(FEATURES_V3), "coefficients": coefficients, "mapping": m.mapping}
    import sklearn

    eng = _engine_doc(engine)
    return {
        "kind": CALIBRATION_KIND, "version": 3, "features": list(FEATURES_V3),
        "formula": FORMULA, "coefficients": coefficients, "mapping": m.mapping,
        "model_sha256": sha256_json(model),
        "cutoff": _cutoff_doc(m, "every tuning part (out-of-fold confidences)"),
        "fit": {"library": f"scikit-learn {sklearn.__version__}",
                "score_model": f"StandardScaler + LogisticRegression(C={C}, L2, lbfgs) on "
                               "every (question, candidate) pair; coefficients stored in raw "
                               "feature units",
                "mapping": f"{mapping} on out-of-fold scores ({calibrate_on}); explicit "
                           f"GroupKFold({folds}) cross-fit by question (LongMemEval) / "
                           "conversation (LoCoMo), final score model refitted on all pairs "
                           "(CalibratedClassifierCV ensemble=False, with groups)",
                "folds": folds, "C": C, "label": "memory is gold (never for an "
                "unanswerable question)",
                "candidates_per_question": engine.settings.candidates},
        "data": _data_doc(parts),
        "embedding_model": eng["embedding_model"],
        "settings": eng["settings"],
        "tuning_parts_out_of_fold": {p.label: summarise(m.tops[p.label], bins=bins)
                                     for p in parts},
        "note": "confidence = estimated probability that the returned memory is gold, fitted "
                "on real sessions of tuning parts; the cut-off was chosen there for the "
                "stated target. Not a check that the memory is true or complete.",
    }


def shape_model_doc(m: ModelFit, shape: str, parts: Sequence[PartData], *,
                    candidates: int, bins: int = 15) -> dict[str, Any]:
    """One shape's entry of a version-4 file: the fitted numbers as scikit-learn holds them
    (unrounded), the mapping, the cut-off, the training data's hashes and the out-of-fold
    metrics."""
    import sklearn

    scaler, lr = m.score_model[0], m.score_model[-1]
    model = {"feature_set": m.features.name, "features": list(m.features.features),
             "standardisation": {"mean": [float(v) for v in scaler.mean_],
                                 "scale": [float(v) for v in scaler.scale_]},
             "logistic": {"intercept": float(lr.intercept_[0]),
                          "coefficients": [float(v) for v in lr.coef_[0]]},
             "mapping": m.mapping}
    return {"shape": shape, **model, "model_sha256": sha256_json(model),
            "cutoff": _cutoff_doc(m, f"every {shape} training part (out-of-fold "
                                     "confidences)"),
            "fit": {"library": f"scikit-learn {sklearn.__version__}",
                    "score_model": f"StandardScaler + LogisticRegression(C={m.C}, L2, lbfgs) "
                                   "on every (question, candidate) pair; stored as fitted "
                                   "(scaler mean and scale, coefficients on scaled features)",
                    "mapping": f"{m.mapping['method']} on out-of-fold scores "
                               f"({m.calibrate_on}); explicit GroupKFold({m.folds}) "
                               "cross-fit by question (LongMemEval) / conversation (LoCoMo) "
                               "/ case (a fixture), final score model refitted on all pairs",
                    "folds": m.folds, "C": m.C,
                    "label": "memory is gold (never for an unanswerable question)",
                    "candidates_per_question": candidates,
                    # a fit before issue 45 took the most confident candidate (not recorded)
                    **({"top_result": "the pipeline's first candidate (result_order "
                                      "'pipeline')"} if m.order == "pipeline" else {})},
            "data": _data_doc(parts),
            "tuning_parts_out_of_fold": {p.label: summarise(m.tops[p.label], bins=bins)
                                         for p in parts},
            "selective_out_of_fold": {p.label: selective_report(
                m.tops[p.label], float(m.cutoff["value"]), p.fmt, bins=bins)
                for p in parts}}


def compare_nested(candidates: Mapping[str, Mapping[str, Any]], *, resamples: int = 2000,
                   seed: int = 0) -> dict[str, Any]:
    """A choice between fits of one shape by their nested cross-validation
    (:func:`nested_cv` documents, the same questions): each candidate's AUROC and ECE, and
    the paired bootstrap interval (questions' groups resampled together, the same draws for
    every candidate) of its AUROC minus the first candidate's. The candidate with the
    highest nested AUROC is chosen (ties: the first listed)."""
    names = list(candidates)
    if not names:
        raise ConfigError("no candidate to compare")
    qs = {n: candidates[n]["questions"] for n in names}
    ids = [q["question_id"] for q in qs[names[0]]]
    for n in names[1:]:
        if [q["question_id"] for q in qs[n]] != ids:
            raise ConfigError(f"candidate {n!r} was judged on other questions than "
                              f"{names[0]!r}")
    gr = [q["group"] for q in qs[names[0]]]  # a conversation's questions drawn together
    cf = {n: np.asarray([q["confidence"] for q in qs[n]]) for n in names}
    y = {n: np.asarray([q["correct"] for q in qs[n]]) for n in names}
    base = names[0]
    out: dict[str, Any] = {"rule": "highest nested cross-validated AUROC (ties: the first "
                                   "listed); paired bootstrap intervals against the first",
                           "baseline": base, "candidates": {}}
    for n in names:
        row = {"auroc": S.auroc(cf[n].tolist(), y[n].tolist()),
               "ece": S.ece(cf[n].tolist(), y[n].tolist()),
               "answered_precision": candidates[n]["all"]["answered_precision"],
               "unanswerable_abstained_rate":
                   candidates[n]["all"]["unanswerable_abstained_rate"]}
        if n != base:
            def diff(ix: np.ndarray, n: str = n) -> float | None:
                a, b = S.auroc(cf[n][ix], y[n][ix]), S.auroc(cf[base][ix], y[base][ix])
                return None if a is None or b is None else a - b
            row["auroc_minus_baseline"] = diff(np.arange(len(ids)))
            row["interval"] = S.bootstrap(diff, len(ids), resamples=resamples, seed=seed,
                                          groups=gr)
        out["candidates"][n] = row
    best = max(names, key=lambda n: (out["candidates"][n]["auroc"] or -1.0,
                                     -names.index(n)))
    out["chosen"] = best
    return out


def without_curves(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-4 document without the risk-coverage curves of its selective reports (one
    point per question: they belong in the report, not in the package's calibration file)."""
    import copy

    out = copy.deepcopy(doc)
    for m in (out.get("shapes") or {}).values():
        for rep in (m.get("selective_out_of_fold") or {}).values():
            rep["all"].pop("risk_coverage", None)
    return out


def fit_shapes(parts: Sequence[PartData], engine: Engine, *,
               features: str = DEFAULT_FEATURE_SET, folds: int = 5,
               C: float | Mapping[str, float] = 1.0,
               mapping: str = "platt", calibrate_on: str = "top",
               target_precision: float | Mapping[str, float] = 0.9,
               min_returned: int = 20, bins: int = 15) -> dict[str, Any]:
    """Calibration version 4: :func:`fit_model` once per memory shape, each on the parts
    whose data has that shape (module docstring). ``target_precision``: one target, or one
    per shape (a shape not named takes 0.9). A question's top result is the one the
    engine's ``result_order`` returns first. ``C``: one regularisation, or one per shape (a
    shape not named takes 1.0). Returns the calibration document."""
    from engram_eval.data.records import SHAPES

    _check_engine(engine)
    by_shape: dict[str, list[PartData]] = {}
    for p in parts:
        if p.shape not in SHAPES:
            raise ConfigError(f"{p.path}: part {p.label!r} has no memory shape read from its "
                              "data (extract it with extract or extract_fixture)")
        by_shape.setdefault(p.shape, []).append(p)
    targets = (dict(target_precision) if isinstance(target_precision, Mapping)
               else dict.fromkeys(by_shape, float(target_precision)))
    unknown = sorted(set(targets) - set(SHAPES))
    if unknown:
        raise ConfigError(f"target precision for unknown shape(s) {unknown}; shapes: "
                          f"{list(SHAPES)}")
    cs = dict(C) if isinstance(C, Mapping) else dict.fromkeys(by_shape, float(C))
    unknown = sorted(set(cs) - set(SHAPES))
    if unknown:
        raise ConfigError(f"C for unknown shape(s) {unknown}; shapes: {list(SHAPES)}")
    shapes = {}
    for shape in sorted(by_shape):
        m = fit_model(by_shape[shape], features=features, folds=folds,
                      C=float(cs.get(shape, 1.0)), mapping=mapping,
                      calibrate_on=calibrate_on, target_precision=targets.get(shape, 0.9),
                      min_returned=min_returned, order=engine.settings.result_order)
        shapes[shape] = shape_model_doc(m, shape, by_shape[shape],
                                        candidates=engine.settings.candidates, bins=bins)
    return {"kind": CALIBRATION_KIND, "version": 4, "formula": FORMULA_V4,
            "shape_rule": SHAPE_RULE, "shapes": shapes, **_engine_doc(engine),
            "note": "per memory shape: confidence = estimated probability that the returned "
                    "memory is gold, fitted out of fold on that shape's training parts; each "
                    "cut-off was chosen there for the stated target (recorded, not applied: "
                    "the gate's cut-off is min_confidence). Not a check that the memory is "
                    "true or complete."}


# --------------------------------------------------------------------------- measurement


def measure(engine: Engine, path: str | Path, *, cutoff: float | None = None, bins: int = 15,
            resamples: int = 2000, seed: int = 0, max_questions: int | None = None,
            on_question: Callable[[int], None] | None = None) -> dict[str, Any]:
    """The gate under ``engine``'s calibration over ``path``, searched by production search:
    per-question top results and the selective-retrieval metrics with bootstrap intervals
    (module docstring), under the engine's ``result_order`` with both orders reported
    (:func:`measure_orders`). ``cutoff``: None = the gate's own for the data's memory shape
    (:meth:`~engram_eval.production.search.Engine.cutoff_for`)."""
    from engram_eval.data.datasets import load_questions, resolve_format

    t0 = time.time()
    fmt = resolve_format(path, "auto")
    _, loaded = load_questions(path, fmt)
    qs = list(loaded)[:max_questions] if max_questions else list(loaded)
    records: list[dict[str, Any]] = []
    conf: list[np.ndarray] = []
    shapes = set()
    for n, sq in enumerate(session_questions(engine, qs, fmt)):
        shapes.add(sq.shape)
        resp = search_all(engine, sq)  # candidates in the pipeline's order
        gold = set(sq.gold)  # read only after search returned
        records.append({"question_id": sq.question.question_id,
                        "unanswerable": sq.unanswerable, "gold": sorted(gold),
                        "candidates": [c["id"] for c in resp.candidates]})
        conf.append(np.asarray([float(c["confidence"]) for c in resp.candidates]))
        if on_question is not None:
            on_question(n)
    if cutoff is None:
        cuts = {engine.cutoff_for(sh) for sh in shapes} or {engine.settings.min_confidence}
        if len(cuts) > 1:
            raise ConfigError(f"{path}: its questions' memory shapes {sorted(shapes)} have "
                              f"different cut-offs {sorted(cuts)}; measure each shape apart")
        cutoff = cuts.pop()
    return {"dataset": {"name": Path(path).name, "sha256": sha256_file(path), "format": fmt},
            **measure_orders(records, conf, fmt, cutoff, engine.settings.result_order,
                             bins=bins, resamples=resamples, seed=seed,
                             max_questions=max_questions),
            "wall_seconds": round(time.time() - t0, 2)}


def order_comparison(records: Sequence[dict[str, Any]],
                     tops: Mapping[str, Sequence[dict[str, Any]]], cutoff: float
                     ) -> dict[str, Any]:
    """The two orders side by side on the same questions (issue 45): per order, how many
    answerable questions have a right top result (all of them, and those whose top result
    passes ``cutoff``), and the pipeline's recall_any@1 (:func:`engram_eval.scoring.metrics.
    recall_any` of the candidates in the pipeline's order, the package's one definition)
    over the same questions: under the pipeline's order the accepted top-1 equals it."""
    from engram_eval.scoring.metrics import recall_any

    ans = [i for i, r in enumerate(records) if not r["unanswerable"] and r["candidates"]]
    r1 = {i: recall_any(records[i]["gold"], records[i]["candidates"], 1) for i in ans}
    out: dict[str, Any] = {"answerable_with_candidates": len(ans),
                           "pipeline_recall_any_at_1": (sum(r1.values()) / len(ans)
                                                        if ans else None)}
    for order, top in tops.items():
        acc = [i for i in ans if top[i]["confidence"] >= cutoff]
        out[order] = {"top_right": sum(top[i]["correct"] for i in ans),
                      "accepted": len(acc),
                      "accepted_top_right": sum(top[i]["correct"] for i in acc),
                      "pipeline_recall_any_at_1_on_accepted": (
                          sum(r1[i] for i in acc) / len(acc) if acc else None)}
    a, b = ORDERS
    out["questions_whose_top_differs"] = sum(
        1 for x, y in zip(tops[a], tops[b], strict=True) if x["top"] != y["top"])
    return out


def measure_orders(records: Sequence[dict[str, Any]], conf: Sequence[np.ndarray], fmt: str,
                   cutoff: float, order: str, *, bins: int, resamples: int, seed: int,
                   max_questions: int | None) -> dict[str, Any]:
    """:func:`selective_measurement` of the top results under ``order`` (the gate's
    ``result_order``: what the measurement keeps), with both orders' summaries, figures at
    ``cutoff`` and intervals under ``orders`` and :func:`order_comparison`, so the change of
    order is visible in one release."""
    tops = {o: _top(list(records), list(conf), o) for o in ORDERS}
    for top in tops.values():
        for t, r in zip(top, records, strict=True):
            t["gold"] = r["gold"]
    docs = {o: selective_measurement(tops[o], fmt, cutoff, bins=bins, resamples=resamples,
                                     seed=seed, max_questions=max_questions) for o in ORDERS}
    return {**docs[order], "result_order": order,
            "orders": {o: {k: d[k] for k in ("summary", "at_cutoff", "intervals")}
                       for o, d in docs.items()},
            "order_comparison": order_comparison(records, tops, cutoff)}


def measure_runs(cal: ShapeCalibration, run_paths: Sequence[str | Path], path: str | Path, *,
                 cutoff: float | None = None, cutoff_rule: str = "calibrated",
                 candidates: int | None = None, bins: int = 15, resamples: int = 2000,
                 seed: int = 0, order: str = "confidence") -> dict[str, Any]:
    """A version-4 calibration over finished runs of ``path`` (one part; held-out parts are
    the caller's to guard): each question's candidates and features as the runs traced them
    (:func:`extract_runs`, computed from the traces for runs made before the pipeline traced
    features), the model of the part's memory shape, then the selective-retrieval metrics of
    :func:`measure`. ``candidates``: at most that many per question, best ranked first (the
    depth the model was fitted at). ``cutoff``: None = the model's recorded one under
    ``cutoff_rule`` 'calibrated' (else ConfigError: a fixed cut-off must be given).
    ``order``: the top result kept (:func:`measure_orders`; both orders are reported)."""
    from engram_eval.data.datasets import resolve_format

    t0 = time.time()
    part = extract_runs(Path(path).name, run_paths, path, check_heldout=False)
    assert part.shape is not None
    if candidates is not None:
        for r in part.records:
            r["candidates"] = r["candidates"][:candidates]
            r["x"], r["y"] = r["x"][:candidates], r["y"][:candidates]
    model = cal.for_shape(part.shape)
    if cutoff is None:
        if cutoff_rule != "calibrated" or model.cutoff is None:
            raise ConfigError(f"{cal.path}: model {part.shape!r} records no cut-off to apply; "
                              "give one")
        cutoff = model.cutoff
    conf = [model.confidences(np.asarray(r["x"], dtype=float)) if len(r["candidates"])
            else np.zeros(0) for r in part.records]
    fmt = resolve_format(path, "auto")
    return {"dataset": {"name": Path(path).name, "sha256": part.sha256, "format": fmt},
            "shape": part.shape, "runs": (part.selection or {}).get("runs"),
            "candidates_per_question": candidates,
            **measure_orders(part.records, conf, fmt, cutoff, order, bins=bins,
                             resamples=resamples, seed=seed, max_questions=None),
            "wall_seconds": round(time.time() - t0, 2)}


def selective_measurement(top: list[dict[str, Any]], fmt: str, cutoff: float, *, bins: int,
                          resamples: int, seed: int, max_questions: int | None
                          ) -> dict[str, Any]:
    """The selective-retrieval metrics of per-question top results (``confidence``,
    ``correct``, ``unanswerable``) at ``cutoff``, with bootstrap intervals by question, or
    by whole conversation on LoCoMo."""
    conf = np.asarray([t["confidence"] for t in top])
    corr = np.asarray([t["correct"] for t in top])
    una = np.asarray([t["unanswerable"] for t in top], dtype=bool)
    summary = summarise(top, bins=bins)

    # LoCoMo: whole conversations resampled (their questions are not independent)
    groups = ([group_of(t["question_id"], fmt) for t in top] if fmt == "locomo" else None)

    def interval(f: Callable[[np.ndarray], float | None]) -> dict[str, Any]:
        return S.bootstrap(f, len(top), resamples=resamples, seed=seed, groups=groups)

    def rate(mask_fn: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
             ) -> Callable[[np.ndarray], float | None]:
        def f(ix: np.ndarray) -> float | None:
            num, den = mask_fn(ix)
            return None if den.sum() == 0 else float(num.sum() / den.sum())
        return f

    cut = at_cutoff(top, cutoff)
    intervals = {
        "ece": interval(lambda ix: S.ece(conf[ix], corr[ix], bins)),
        "brier": interval(lambda ix: S.brier(conf[ix], corr[ix])),
        "auroc": interval(lambda ix: S.auroc(conf[ix], corr[ix])),
        "aurc": interval(lambda ix: S.aurc(conf[ix], corr[ix])),
        "answerable_returned_rate": interval(rate(
            lambda ix: ((~una[ix]) & (conf[ix] >= cutoff), ~una[ix]))),
        "unanswerable_abstained_rate": interval(rate(
            lambda ix: (una[ix] & (conf[ix] < cutoff), una[ix]))),
        "returned_top_gold_rate": interval(rate(
            lambda ix: ((conf[ix] >= cutoff) & (corr[ix] == 1), conf[ix] >= cutoff))),
    }
    curve = S.risk_coverage(conf.tolist(), corr.tolist())
    return {"max_questions": max_questions, "bins": bins, "cutoff": cutoff,
            "bootstrap": ({"resamples": resamples, "seed": seed, "unit": "question",
                           "note": "questions resampled with replacement"}
                          if groups is None else
                          {"resamples": resamples, "seed": seed, "unit": "conversation",
                           "conversations": len(set(groups)),
                           "note": "whole conversations resampled with replacement (a "
                                   "cluster bootstrap); with few conversations the interval "
                                   "is coarse"}),
            "summary": summary, "at_cutoff": cut, "intervals": intervals,
            "risk_coverage": curve, "questions": top}


def plot(doc: dict[str, Any], path: str | Path, title: str) -> bytes:
    """Reliability diagram (with bin counts) and risk-coverage curve, PNG bytes."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = doc["summary"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.6))
    a1.plot([0, 1], [0, 1], "--", color="grey", lw=1, label="perfect calibration")
    b = [r for r in s["reliability"] if r["n"]]
    a1.plot([r["mean_confidence"] for r in b], [r["fraction_correct"] for r in b], "o-",
            label=f"top results (n={s['n']})")
    for r in b:
        a1.annotate(str(r["n"]), (r["mean_confidence"], r["fraction_correct"]), fontsize=7,
                    textcoords="offset points", xytext=(3, -9))
    a1.set_xlabel("confidence of the top result (bin mean, 15 bins)")
    a1.set_ylabel("fraction whose top result is right")
    a1.set_title(f"reliability: ECE {s['ece']:.3f}, Brier {s['brier']:.3f}", fontsize=9)
    a1.legend(fontsize=7)
    rc = doc["risk_coverage"]
    a2.plot([p["coverage"] for p in rc], [p["risk"] for p in rc], "-")
    cut = doc["at_cutoff"]
    if cut["returned"]:
        a2.axvline(cut["returned"] / cut["questions"], color="grey", ls="--", lw=1,
                   label=f"cut-off {cut['cutoff']}")
        a2.legend(fontsize=7)
    auroc = "n/a" if s["auroc"] is None else f"{s['auroc']:.3f}"
    a2.set_xlabel("coverage (questions returning a top result)")
    a2.set_ylabel("risk (top result not right)")
    a2.set_title(f"risk-coverage: AURC {s['aurc']:.3f}, AUROC {auroc}", fontsize=9)
    a2.set_ylim(-0.02, 1.02)
    fig.suptitle(title, fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def finite(v: float | None) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v
