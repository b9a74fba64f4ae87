"""``engram-eval tune``: choose fusion and temporal settings offline from a run's traces.

``tune RUN.jsonl --grid GRID.yaml --output CONFIG.yaml`` reads a finished run of the hybrid
retriever (plain or gzipped rows, its sidecar beside it) and re-fuses every question from the
per-session signal scores stored in its traces (the trace contract of
:mod:`engram_eval.retrieval.hybrid`): nothing is encoded again, so it takes seconds.

1. **Proof first.** Re-fusing each row with the run's *own* settings (its question trace's
   ``signals``, ``fusion``, ``temporal``, ``temporal_boost``) through the pipeline's own
   stages (:func:`engram_eval.retrieval.pipeline.rescore`) must reproduce every stored
   ranking and every stored score exactly; otherwise tune refuses (the offline re-fusion
   would not be what the retriever does). Runs with a cross-encoder rerank, or without the
   traces, are refused for the same reason.
2. **Search** (:func:`search`, the one grid search: single-run ``tune`` is the search over
   parts of :mod:`engram_eval.analysis.tune_parts` given one part). Every combination in the
   grid (see :func:`load_grid`): fusion method, its normalisation (convex) or ``rrf_k``
   (rrf), one weight per signal, and the temporal step (off, or on with each
   ``temporal_boost``). Candidates are enumerated in grid order; ties of the objective go to
   the earliest candidate. Each candidate ranks all of a part's questions at once with the
   batched scorer the pipeline's fusion and temporal stages use
   (:class:`engram_eval.retrieval.fusion.SignalBatch`); :func:`check_mirror` then re-derives
   every question's order under the run's own and the chosen settings through the pipeline,
   one question at a time.
3. **Objective.** The mean over the protocol's scored questions of the mean of the objective
   metrics (default ``recall_any@1, recall_all@5, ndcg_any@5`` under ``answerable``),
   computed with the package's own metric functions (:mod:`engram_eval.scoring.metrics`) against
   the gold stored in the rows. ``official`` is refused (it counts repeated haystack entries,
   which rows do not carry).
4. **Estimate.** Beside the in-sample score of the chosen candidate, a ``folds``-fold
   cross-validated estimate: units are split into folds by a seeded permutation dealt
   round-robin; for each fold the best candidate on the other folds is scored on it; the
   estimate is the mean over all questions of these held-out scores. The unit
   (``cluster``, :func:`units_of`) is by default the question id's prefix before ``:`` (a
   LoCoMo conversation, so no conversation is split between choosing and scoring; an id
   without ``:`` is its own unit, so LongMemEval folds are by question), or with ``None``
   the question. Reports made before this unit was honoured for one run (``cross_validation``
   without ``unit``) used folds by question (PROVENANCE.md section 14).
5. **Output.** ``CONFIG.yaml``: the run's retrieval settings with the chosen ones applied
   (loadable with ``engram-eval run --config``), with a provenance header; and
   ``CONFIG.yaml.tuning.json``: run path and fingerprint, dataset sha256, rows sha256,
   protocol, objective, grid, number of candidates and questions, the chosen settings,
   in-sample score (per metric too), the run's own settings' score, and the k-fold estimate
   with its unit and each fold's choice. Neither file may exist beforehand.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.retrieval import fusion as F
from engram_eval.retrieval.settings import SIGNALS, RetrievalSettings
from engram_eval.runs.config import read_yaml_mapping
from engram_eval.scoring import metrics as M

DEFAULT_OBJECTIVE = ("recall_any@1", "recall_all@5", "ndcg_any@5")
DEFAULT_PROTOCOL = "answerable"
WEIGHT_FIELD = {name: w for name, _, w in SIGNALS}
USE_FIELD = {name: u for name, u, _ in SIGNALS}
GRID_KEYS = ("fusion", "normalisation", "rrf_k", "weights", "temporal", "temporal_boost")


# --------------------------------------------------------------------------- candidates


def _as_list(v: Any, key: str, kind: type, source: str) -> list[Any]:
    vals = v if isinstance(v, list) else [v]
    out: list[Any] = []
    for x in vals:
        if kind is float and isinstance(x, (int, float)) and not isinstance(x, bool):
            out.append(float(x))
        elif kind is bool and isinstance(x, bool):
            out.append(x)
        elif kind is str and isinstance(x, str):
            out.append(x)
        else:
            raise ConfigError(f"{source}: grid field {key}: {x!r} is not a {kind.__name__}")
    if not out:
        raise ConfigError(f"{source}: grid field {key}: empty list")
    return out


def load_grid(path: str | Path) -> dict[str, Any]:
    """Read a grid YAML: every key optional, each a value or a list of values::

        fusion: [rrf, convex]
        normalisation: [minmax, zscore]     # used by convex
        rrf_k: [10, 60]                     # used by rrf
        weights: {dense: [1.0], bm25_user: [0, 0.3, 1.0], ...}   # signal or weight_* names
        temporal: [false, true]
        temporal_boost: [1.25, 1.5]         # used when temporal is true
    """
    data = read_yaml_mapping(path, "grid", "a mapping of grid fields")
    src = str(path)
    unknown = sorted(set(data) - set(GRID_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown grid field {unknown[0]!r}; known: {GRID_KEYS}")
    grid: dict[str, Any] = {}
    if "fusion" in data:
        grid["fusion"] = _as_list(data["fusion"], "fusion", str, src)
        for x in grid["fusion"]:
            if x not in F.METHODS:
                raise ConfigError(f"{path}: grid field fusion: {x!r} not in {F.METHODS}")
    if "normalisation" in data:
        grid["normalisation"] = _as_list(data["normalisation"], "normalisation", str, src)
        for x in grid["normalisation"]:
            if x not in F.NORMALISATIONS:
                raise ConfigError(f"{path}: grid field normalisation: {x!r} not in "
                                  f"{F.NORMALISATIONS}")
    for key, kind in (("rrf_k", float), ("temporal", bool), ("temporal_boost", float)):
        if key in data:
            grid[key] = _as_list(data[key], key, kind, src)
    if "weights" in data:
        w = data["weights"]
        if not isinstance(w, dict):
            raise ConfigError(f"{path}: grid field weights must map signal -> values")
        grid["weights"] = {}
        for k, v in w.items():
            name = str(k).removeprefix("weight_")
            if name not in WEIGHT_FIELD:
                raise ConfigError(f"{path}: grid field weights: unknown signal {k!r}; known: "
                                  f"{sorted(WEIGHT_FIELD)}")
            vals = _as_list(v, f"weights.{k}", float, src)
            if any(x < 0 for x in vals):
                raise ConfigError(f"{path}: grid field weights.{k}: weights must be >= 0")
            grid["weights"][name] = vals
    _validate_grid(grid, path)
    return grid


def _validate_grid(grid: Mapping[str, Any], path: str | Path) -> None:
    """Every grid value must be a valid :class:`RetrievalSettings` value for its field: the
    dataclass holds the bounds and choices, the grid repeats none of them."""
    base = RetrievalSettings()
    checks: list[tuple[str, str, Any]] = [
        (key, key, x) for key in ("fusion", "normalisation", "rrf_k", "temporal",
                                  "temporal_boost") for x in grid.get(key, [])]
    checks += [(f"weights.{name}", WEIGHT_FIELD[name], x)
               for name, vals in grid.get("weights", {}).items() for x in vals]
    for label, field_name, x in checks:
        try:
            dataclasses.replace(base, **{field_name: x})
        except ConfigError as e:
            raise ConfigError(f"{path}: grid field {label}: {e}") from None


#: Most grid combinations ``tune`` enumerates (each is scored on every question; real grids
#: have a few thousand). A larger grid is one ConfigError before anything is enumerated.
MAX_CANDIDATES = 200_000


def candidate_count(grid: Mapping[str, Any], base: F.FusionSetting, signals: Sequence[str]) -> int:
    """How many combinations :func:`candidates` would enumerate (all-zero weight
    combinations included), computed from the list lengths alone."""
    names = [n for n in F.SIGNAL_ORDER if n in signals]
    weights = grid.get("weights", {})
    n_weights = math.prod(len(weights.get(n, [0.0])) for n in names)
    n_methods = sum(len(grid.get("normalisation", [base.normalisation])) if m == "convex"
                    else len(grid.get("rrf_k", [base.rrf_k]))
                    for m in grid.get("fusion", [base.fusion]))
    n_temporal = sum(len(grid.get("temporal_boost", [base.temporal_boost])) if t else 1
                     for t in grid.get("temporal", [base.temporal]))
    return n_methods * n_weights * n_temporal


def candidates(grid: Mapping[str, Any], base: F.FusionSetting, signals: Sequence[str]
               ) -> list[F.FusionSetting]:
    """Every grid combination in grid order; unlisted keys keep the run's own value.
    Combinations whose weights are all 0 are skipped. A grid of more than
    :data:`MAX_CANDIDATES` combinations is one :class:`ConfigError`, raised before any is
    enumerated."""
    count = candidate_count(grid, base, signals)
    if count > MAX_CANDIDATES:
        raise ConfigError(f"the tune grid has {count} combinations, more than "
                          f"{MAX_CANDIDATES}; give fewer values per grid field")
    w_base = base.weight_map()
    names = [n for n in F.SIGNAL_ORDER if n in signals]
    w_lists = [grid.get("weights", {}).get(n, [w_base.get(n, 0.0)]) for n in names]
    methods: list[tuple[str, str, float]] = []
    for m in grid.get("fusion", [base.fusion]):
        if m == "convex":
            for nm in grid.get("normalisation", [base.normalisation]):
                methods.append((m, nm, base.rrf_k))
        else:
            for k in grid.get("rrf_k", [base.rrf_k]):
                methods.append((m, base.normalisation, k))
    temporals: list[tuple[bool, float]] = []
    for t in grid.get("temporal", [base.temporal]):
        if t:
            temporals += [(True, b) for b in grid.get("temporal_boost", [base.temporal_boost])]
        else:
            temporals.append((False, base.temporal_boost))
    out = []
    for (m, nm, k), ws, (t, b) in itertools.product(methods, itertools.product(*w_lists),
                                                     temporals):
        if not any(x > 0 for x in ws):
            continue
        out.append(F.FusionSetting(m, nm, k, tuple(zip(names, ws, strict=True)), t, b))
    return out


# --------------------------------------------------------------------------- rows


@dataclass
class TunedQuestion:
    question_id: str
    session_ids: list[str]  # corpus order
    signals: dict[str, F.Signal]
    in_window: np.ndarray  # bool per session (False where unknown)
    gold: list[str]


def _row_question(row: Mapping[str, Any], path: str, line: int
                  ) -> tuple[TunedQuestion, F.FusionSetting, list[float], list[float]]:
    """The question's signals and the run's own candidate, from one row."""
    qid = row["question_id"]
    where = f"{path}: row {line} ({qid})"
    trace = row.get("trace") or {}
    qt = trace.get("question") or {}
    sess = trace.get("sessions")
    for key in ("signals", "fusion", "temporal", "temporal_boost"):
        if key not in qt:
            raise ProvenanceError(f"{where}: question trace has no {key!r}; tune needs a run "
                                  "of the hybrid retriever with the full trace contract")
    if not isinstance(sess, list) or len(sess) != len(row["ranked_session_ids"]):
        raise ProvenanceError(f"{where}: trace.sessions does not match the ranking")
    n = len(sess)
    ids: list[str | None] = [None] * n
    for t, sid in zip(sess, row["ranked_session_ids"], strict=True):
        if t.get("reranked"):
            raise ProvenanceError(f"{where}: the run used a cross-encoder rerank; re-fusion "
                                  "cannot reproduce it (tune a run made with --no-rerank)")
        ci = t.get("corpus_index")
        if not isinstance(ci, int) or not 0 <= ci < n or ids[ci] is not None:
            raise ProvenanceError(f"{where}: bad or repeated corpus_index in the trace")
        ids[ci] = sid
    by_ci = sorted(sess, key=lambda t: t["corpus_index"])
    signals = {}
    for name in qt["signals"]:
        try:
            scores = [float(t[name]) for t in by_ci]
            informative = [t[name + "_rank"] is not None for t in by_ci]
        except (KeyError, TypeError) as e:
            raise ProvenanceError(f"{where}: trace lacks signal {name!r} ({e})") from None
        signals[name] = F.Signal.of(scores, informative)
    in_window = np.array([t.get("in_window") is True for t in by_ci], dtype=bool)
    mult = [float(t["temporal"]) for t in by_ci]
    fz = qt["fusion"]
    own = F.FusionSetting(str(fz["method"]), str(fz["normalisation"]), float(fz["k"]),
                    tuple((n_, float(w)) for n_, w in fz["weights"].items()),
                    bool(qt["temporal"]), float(qt["temporal_boost"]))
    q = TunedQuestion(qid, [str(s) for s in ids], signals, in_window, [])
    return q, own, mult, [float(x) for x in row["scores"]]


def refuse_unless_reproduced(q: TunedQuestion, own: F.FusionSetting, mult: Sequence[float],
                             ranked: Sequence[str], scores: Sequence[float], where: str,
                             settings: RetrievalSettings | None = None) -> None:
    """Re-score with the run's own settings through the retrieval pipeline's own stages
    (:func:`engram_eval.retrieval.pipeline.rescore`); raise ProvenanceError unless ranking
    and scores are reproduced exactly. ``settings``: the run's retrieval settings (default:
    the package defaults with ``own`` applied)."""
    want_mult = np.where(q.in_window & own.temporal, own.temporal_boost, 1.0)
    if not np.array_equal(np.asarray(mult), want_mult):
        raise ProvenanceError(f"{where}: traced temporal multipliers do not follow from "
                              "in_window and the run's temporal settings")
    order, final = pipeline_order(q, own, settings)
    got_ids = [q.session_ids[i] for i in order]
    got_scores = [float(final[i]) for i in order]
    if got_ids != list(ranked) or got_scores != list(scores):
        raise ProvenanceError(f"{where}: re-fusing the traced signals with the run's own "
                              "settings does not reproduce the stored ranking; refusing to "
                              "tune on it")


def pipeline_order(q: TunedQuestion, c: F.FusionSetting, settings: RetrievalSettings | None = None
                   ) -> tuple[list[int], np.ndarray]:
    """The pipeline's order and final scores of ``q`` under candidate ``c``."""
    from engram_eval.retrieval.pipeline import rescore, with_fusion_setting

    # The traced signals are the ones switched on (a retriever variant such as ``bm25``
    # switches signals off that the run config leaves on; a signal switched on but not
    # computable on the corpus, like bm25_assistant without chat roles, fuses as absent).
    switches: dict[str, Any] = {USE_FIELD[n]: n in q.signals for n in USE_FIELD}
    base = dataclasses.replace(settings or RetrievalSettings(), **switches)
    return rescore(q.signals, [bool(x) for x in q.in_window], with_fusion_setting(base, c))


# --------------------------------------------------------------------------- evaluation


def _metric_fn(name: str) -> tuple[Any, int | None]:
    if name == "mrr":
        return M.mrr, None
    base, _, k = name.partition("@")
    fns = {"recall_any": M.recall_any, "recall_all": M.recall_all, "ndcg_any": M.ndcg_any,
           "hit": M.hit}
    if base not in fns or not k.isdigit() or int(k) < 1:
        raise ConfigError(f"objective: unknown metric {name!r}; use recall_any@k, "
                          "recall_all@k, ndcg_any@k, hit@k or mrr")
    return fns[base], int(k)


class Evaluator:
    """The objective of every question of one part under any candidate, ranked by the batched
    scorer (:class:`engram_eval.retrieval.fusion.SignalBatch`, the code of the pipeline's
    fusion and temporal stages) over all the part's questions at once."""

    def __init__(self, questions: Sequence[TunedQuestion], objective: Sequence[str]) -> None:
        self.qs = list(questions)
        self.objective = list(objective)
        self.fns = [_metric_fn(m) for m in self.objective]
        ks = [k for _, k in self.fns]
        self.depth = None if any(k is None for k in ks) else max(k for k in ks if k)
        self.batch = F.SignalBatch.of([q.signals for q in self.qs],
                                      [q.in_window for q in self.qs],
                                      [len(q.session_ids) for q in self.qs])
        self.nmax = self.batch.nmax
        self._memo: list[dict[bytes, float]] = [{} for _ in self.qs]

    def orders(self, c: F.FusionSetting) -> np.ndarray:
        return self.batch.orders(c)

    def per_question(self, c: F.FusionSetting) -> np.ndarray:
        """Objective value of every question (mean of the objective metrics)."""
        order = self.orders(c)
        depth = self.nmax if self.depth is None else min(self.depth, self.nmax)
        top_all = np.ascontiguousarray(order[:, :depth], dtype=np.int32)
        out = np.zeros(len(self.qs), dtype=np.float64)
        for qi, q in enumerate(self.qs):
            key = top_all[qi].tobytes()
            memo = self._memo[qi]
            v = memo.get(key)
            if v is None:
                n = len(q.session_ids)
                ranking = [q.session_ids[int(i)] for i in top_all[qi, : min(depth, n)]]
                vals = [fn(q.gold, ranking, k) if k is not None else fn(q.gold, ranking)
                        for fn, k in self.fns]
                v = memo[key] = float(sum(vals) / len(vals))
            out[qi] = v
        return out

    def metric_means(self, c: F.FusionSetting) -> dict[str, float]:
        order = self.orders(c)
        sums = {m: 0.0 for m in self.objective}
        for qi, q in enumerate(self.qs):
            ranking = [q.session_ids[int(i)] for i in order[qi, : len(q.session_ids)]]
            for m, (fn, k) in zip(self.objective, self.fns, strict=True):
                sums[m] += fn(q.gold, ranking, k) if k is not None else fn(q.gold, ranking)
        n = max(len(self.qs), 1)
        return {m: s / n for m, s in sums.items()}


# --------------------------------------------------------------------------- the search


def folds_of(n: int, folds: int, seed: int) -> np.ndarray:
    """Fold index of each of ``n`` units: a seeded permutation dealt round-robin."""
    perm = np.random.default_rng(seed).permutation(n)
    out = np.zeros(n, dtype=np.int64)
    out[perm] = np.arange(n) % folds
    return out


#: Cross-validation units: ``id-prefix`` = the question id before ``:`` (a LoCoMo
#: conversation); None = the question.
CLUSTERS = ("id-prefix", None)


def units_of(ids: Sequence[str], cluster: str | None) -> list[str]:
    """The cross-validation unit of each question id."""
    if cluster not in CLUSTERS:
        raise ConfigError(f"tune: unknown cross-validation unit {cluster!r}; use 'id-prefix' "
                          "or none")
    return [i.split(":", 1)[0] if cluster == "id-prefix" else i for i in ids]


def fold_of_units(units: Sequence[str], folds: int, seed: int) -> np.ndarray:
    """Fold of each question: its unit's fold, units dealt round-robin after a seeded
    permutation (first-seen order). With one question per unit this is :func:`folds_of`
    of the questions."""
    distinct = list(dict.fromkeys(units))
    unit_fold = folds_of(len(distinct), folds, seed)
    index = {u: k for k, u in enumerate(distinct)}
    return np.array([unit_fold[index[u]] for u in units], dtype=np.int64)


def check_folds(parts: Sequence[TunedPart], folds: int, cluster: str | None) -> None:
    """Refuse ``folds`` above the number of cross-validation units (:func:`units_of`) of a
    part: a fold with no unit would be recorded as a fold that never held anything out, and
    the report would claim an ``N``-fold estimate it did not make. One ConfigError naming
    the part, its units and the largest usable ``--folds``."""
    for p in parts:
        n = len(set(units_of([q.question_id for q in p.questions], cluster)))
        if folds > n:
            what = ("questions" if cluster is None else
                    "cross-validation units (the question id before ':', a LoCoMo conversation; "
                    "a question without ':' is its own)")
            fix = (f"use --folds {n} or fewer" if n >= 2 else
                   "cross-validation needs at least 2: tune on a larger run")
            raise ConfigError(f"tune: --folds {folds} is more than the {n} {what} of {p.path} "
                              f"(protocol {p.protocol}); {fix} (nothing was written)")


COMBINE = ("worst-ratio", "mean")


def combine(scores: np.ndarray, rule: str) -> np.ndarray:
    """``scores``: parts x candidates -> one value per candidate. ``mean``: the unweighted mean
    over parts (one part: its own scores); ``worst-ratio``: the smallest, over parts, of a
    part's score divided by the best score any candidate reaches on that part."""
    if rule == "mean":
        return scores.mean(axis=0)
    best = scores.max(axis=1, keepdims=True)
    ratio = np.divide(scores, best, out=np.ones_like(scores), where=best > 0)
    return ratio.min(axis=0)


def check_mirror(parts: Sequence[TunedPart], evaluators: Sequence[Evaluator],
                 settings: Sequence[F.FusionSetting]) -> None:
    """The grid search ranks all of a part's questions as one batch; what ``tune`` reports
    must be the pipeline's own result, question by question: every question's order under
    the part's own settings and each of ``settings`` (the chosen) is re-derived through
    :func:`engram_eval.retrieval.pipeline.rescore` and compared (RuntimeError if not equal)."""
    for p, ev in zip(parts, evaluators, strict=True):
        for c in dict.fromkeys((p.own, *settings)):
            orders = ev.orders(c)
            for qi, q in enumerate(p.questions):
                ref, _ = pipeline_order(q, c, p.run_settings)
                if [int(i) for i in orders[qi, : len(q.session_ids)]] != ref:
                    raise RuntimeError(f"tune: the batched re-fusion differs from the pipeline "
                                       f"on {q.question_id} under {c.to_json()}")


@dataclass
class Search:
    """What :func:`search` found over a group of parts (one chat structure)."""

    candidates: list[F.FusionSetting]
    signals: list[str]
    evaluators: list[Evaluator]
    #: per part: candidates x questions objective values
    tables: list[np.ndarray]
    #: parts x candidates: each part's mean objective
    per_part: np.ndarray
    combined: np.ndarray
    best: int
    #: per part: each question's fold
    folds: list[np.ndarray]
    #: per fold: the candidate chosen on the other folds (index into ``candidates``)
    picks: list[int]
    #: per part: each question's out-of-fold objective
    held: list[np.ndarray]

    @property
    def chosen(self) -> F.FusionSetting:
        return self.candidates[self.best]


def search(parts: Sequence[TunedPart], grid: Mapping[str, Any], objective: Sequence[str],
           rule: str, folds: int, seed: int, cluster: str | None) -> Search:
    """The one grid search of ``tune``, for one part or several (of one chat structure):

    1. candidates: :func:`candidates` around the first part's own settings and the signals
       any part traced;
    2. per part, every candidate's objective on every question (:class:`Evaluator`), the
       part's score its mean; the parts' scores combined by ``rule`` (:func:`combine`); the
       best combined score wins, ties to the earliest candidate;
    3. :func:`check_mirror` for the runs' own settings and the chosen ones;
    4. ``folds``-fold cross-validation within every part at once (fold ``f`` of each part held
       out together, the choice made on the other folds of every part by the same rule),
       folds dealt by unit (:func:`units_of`: the question, or with ``id-prefix`` the id
       before ``:``)."""
    if rule not in COMBINE:
        raise ConfigError(f"tune: --combine must be one of {COMBINE}")
    check_folds(parts, folds, cluster)  # before the grid is evaluated
    own = parts[0].own
    signals = [n for n in F.SIGNAL_ORDER if any(n in p.signals for p in parts)]
    cands = candidates(grid, own, signals)
    if not cands:
        raise ConfigError("tune: the grid yields no candidate (all weights 0?)")
    evaluators = [Evaluator(p.questions, objective) for p in parts]
    tables = [np.stack([ev.per_question(c) for c in cands]) for ev in evaluators]  # C x Q
    per_part = np.stack([tab.mean(axis=1) for tab in tables])  # parts x C
    combined = combine(per_part, rule)
    best = int(np.argmax(combined))  # first of equals: grid order
    check_mirror(parts, evaluators, [cands[best]])
    fold = [fold_of_units(units_of([q.question_id for q in p.questions], cluster), folds,
                          seed) for p in parts]
    held = [np.zeros(len(p.questions), dtype=np.float64) for p in parts]
    picks = []
    for f in range(folds):
        train = np.stack([tab[:, fold[k] != f].mean(axis=1) if (fold[k] != f).any()
                          else tab.mean(axis=1) for k, tab in enumerate(tables)])
        pick = int(np.argmax(combine(train, rule)))
        for k, tab in enumerate(tables):
            test = fold[k] == f
            held[k][test] = tab[pick, test]
        picks.append(pick)
    return Search(cands, signals, evaluators, tables, per_part, combined, best, fold, picks,
                  held)


# --------------------------------------------------------------------------- entry point


@dataclass
class TuneResult:
    config_path: Path
    report_path: Path
    report: dict[str, Any]


@dataclass
class TunedPart:
    """One run to tune on: its questions (inside the protocol), the run's own candidate, the
    signals it traced, its sidecar and rows, and whether its haystacks have chat roles."""

    path: str
    protocol: str
    questions: list[TunedQuestion]
    own: F.FusionSetting
    signals: list[str]
    meta: dict[str, Any]
    rows_sha256: str
    n_rows: int
    run_cfg: dict[str, Any]
    run_settings: RetrievalSettings
    chat_roles: bool


def load_part(run_path: str | Path, protocol: str) -> TunedPart:
    """Read a finished run and prove, question by question, that the pipeline reproduces its
    stored rankings and scores from the traced signals (else ProvenanceError). A run of a
    held-out part is refused (:func:`engram_eval.provenance.guard.refuse_heldout_run`)."""
    from engram_eval.provenance.guard import refuse_heldout_run
    from engram_eval.runs.reader import read_run

    finished = read_run(run_path, require_sidecar=True)  # refuses a torn last line
    meta = finished.metadata
    refuse_heldout_run(meta, run_path, "settings are tuned on tuning parts only")
    run_cfg = dict(meta.get("config") or {})
    run_settings = RetrievalSettings.of(run_cfg)
    if run_cfg.get("rerank"):
        raise ProvenanceError(f"{run_path}: the run used a cross-encoder rerank; re-fusion "
                              "cannot reproduce it (tune a run made with --no-rerank)")

    questions: list[TunedQuestion] = []
    own: F.FusionSetting | None = None
    signals_seen: list[str] = []
    for line, row in enumerate(finished.rows, start=1):
        q, cand, mult, scores = _row_question(row, str(run_path), line)
        where = f"{run_path}: row {line} ({q.question_id})"
        refuse_unless_reproduced(q, cand, mult, row["ranked_session_ids"], scores, where,
                                 run_settings)
        if own is None:
            own = cand
        elif cand != own:
            raise ProvenanceError(f"{where}: fusion settings differ between rows")
        for n in q.signals:
            if n not in signals_seen:
                signals_seen.append(n)
        gold = (row.get("gold") or {}).get(protocol, "absent")
        if gold == "absent":
            raise ConfigError(f"{where}: the run was not scored under protocol {protocol!r}")
        if gold is None:
            continue  # outside the protocol's denominator
        q.gold = [str(g) for g in gold]
        questions.append(q)
    if own is None or not questions:
        raise ProvenanceError(f"{run_path}: no question to tune on under {protocol!r}")
    signals = [n for n in F.SIGNAL_ORDER if n in signals_seen]
    roles = {bool(((r.get("trace") or {}).get("question") or {}).get("chat_roles", True))
             for r in finished.rows}
    if len(roles) > 1:
        raise ProvenanceError(f"{run_path}: its haystacks mix chat and people conversations; "
                              "tune runs of one chat structure each")
    return TunedPart(str(run_path), protocol, questions, own, signals, dict(meta),
                     finished.rows_sha256, len(finished.rows), run_cfg, run_settings,
                     roles.pop() if roles else True)


def output_paths(output: str | Path, folds: int) -> tuple[Path, Path]:
    """The config YAML and its ``.tuning.json`` report, both refused when they exist (tune never
    overwrites), after checking ``folds`` (at least 2); shared by :func:`tune` and
    :func:`engram_eval.analysis.tune_parts.tune_parts`."""
    out = Path(output)
    report_path = Path(str(out) + ".tuning.json")
    for p in (out, report_path):
        if p.exists():
            raise FileExistsError(f"{p}: exists; tune never overwrites")
    if folds < 2:
        raise ConfigError("tune: --folds must be at least 2")
    return out, report_path


def check_request(objective: Sequence[str], protocols: Sequence[str]) -> list[str]:
    """The objective's metrics (stripped), after refusing an empty or unknown one and the
    ``official`` protocol (it counts repeated haystack entries, which rows do not carry)."""
    if "official" in protocols:
        raise ConfigError("tune: protocol 'official' counts repeated haystack entries, which "
                          "rows do not carry; use answerable, all or official_nonempty_gold")
    metrics = [m.strip() for m in objective if m.strip()]
    if not metrics:
        raise ConfigError("tune: empty objective")
    for m in metrics:
        _metric_fn(m)
    return metrics


def check_grid_signals(grid: Mapping[str, Any], parts: Sequence[TunedPart],
                       grid_path: str | Path) -> None:
    """ConfigError when the grid gives a signal a weight above 0 that no run computed."""
    computed = {n for p in parts for n in p.signals}
    for n, vals in grid.get("weights", {}).items():
        if n not in computed and any(v > 0 for v in vals):
            raise ConfigError(f"{grid_path}: grid weights.{n} > 0 but the run did not compute "
                              f"signal {n!r} (switch on {USE_FIELD[n]} in the tuning run)")


def tune(run_path: str | Path, grid_path: str | Path, output: str | Path, *,
         objective: Sequence[str] = DEFAULT_OBJECTIVE, protocol: str = DEFAULT_PROTOCOL,
         folds: int = 5, seed: int = 0, cluster: str | None = "id-prefix") -> TuneResult:
    """See the module docstring: :func:`search` over this one part (its score is the part's
    mean objective), folds dealt by ``cluster`` (:func:`units_of`)."""
    t0 = time.perf_counter()
    out, report_path = output_paths(output, folds)
    objective = check_request(objective, [protocol])
    units_of([], cluster)  # an unknown unit is refused before the run is read
    grid = load_grid(grid_path)
    part = load_part(run_path, protocol)
    check_grid_signals(grid, [part], grid_path)
    found = search([part], grid, objective, "mean", folds, seed, cluster)
    cands, best, chosen = found.candidates, found.best, found.chosen
    table, ev, fold = found.tables[0], found.evaluators[0], found.folds[0]
    means = found.per_part[0]
    fold_report = []
    for f, pick in enumerate(found.picks):
        train, test = fold != f, fold == f
        if not test.any():
            continue
        fold_report.append({"fold": f, "n_train": int(train.sum()), "n_test": int(test.sum()),
                            "chosen": cands[pick].to_json(),
                            "train_score": float(table[pick, train].mean()),
                            "test_score": float(table[pick, test].mean())})
    own, meta = part.own, part.meta
    own_idx = cands.index(own) if own in cands else None
    own_score = (float(means[own_idx]) if own_idx is not None
                 else float(ev.per_question(own).mean()))

    config = output_config(part.run_cfg, chosen, found.signals)
    RetrievalSettings.of(config)  # the written config must validate
    report = {
        "kind": "engram-eval/tuning",
        "run": {"path": str(Path(run_path).resolve()), "fingerprint": meta.get("fingerprint"),
                "rows_sha256": part.rows_sha256, "n_rows": part.n_rows},
        "dataset": {"name": (meta.get("dataset") or {}).get("name"),
                    "sha256": (meta.get("dataset") or {}).get("sha256")},
        "protocol": protocol, "n_questions": len(part.questions),
        "objective": {"metrics": objective, "rule": "mean over questions of the mean of "
                      "these metrics (engram_eval.scoring.metrics)"},
        "grid": grid, "n_candidates": len(cands), "signals": found.signals,
        "run_settings": own.to_json(), "run_settings_score": own_score,
        "chosen": chosen.to_json(), "in_sample_score": float(means[best]),
        "in_sample_metrics": ev.metric_means(chosen),
        "cross_validation": {"folds": folds, "seed": seed, "unit": cluster or "question",
                             "estimate": float(found.held[0].mean()),
                             "rule": "for each fold choose on the other folds, score the "
                             "held fold; mean over all questions", "per_fold": fold_report},
        "config": config,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    from engram_eval.io import exclusive_write

    exclusive_write(report_path, json.dumps(report, indent=2, sort_keys=True) + "\n")
    exclusive_write(out, _config_yaml(config, report, report_path))
    return TuneResult(out, report_path, report)


def output_config(run_cfg: Mapping[str, Any], chosen: F.FusionSetting, signals: Sequence[str]
                  ) -> dict[str, Any]:
    """The run's retrieval settings with the chosen fusion/temporal settings applied.

    A signal that got weight 0 is switched off unless another chosen signal needs it
    (dense feeds ``dense_rocchio`` and, with ``feedback_source: dense``, ``bm25_prf``)."""
    names = {f.name for f in fields(RetrievalSettings) if f.metadata["fingerprint"]}
    cfg: dict[str, Any] = {k: v for k, v in run_cfg.items() if k in names}
    if "retriever" in run_cfg:
        cfg = {"retriever": run_cfg["retriever"], **cfg}
    w = chosen.weight_map()
    cfg.update({"fusion": chosen.fusion, "normalisation": chosen.normalisation,
                "rrf_k": chosen.rrf_k, "temporal": chosen.temporal,
                "temporal_boost": chosen.temporal_boost})
    for n in signals:
        cfg[WEIGHT_FIELD[n]] = float(w.get(n, 0.0))
    on = {n for n in signals if w.get(n, 0.0) > 0}
    if "dense_rocchio" in on or ("bm25_prf" in on and cfg.get("feedback_source") == "dense"):
        on.add("dense")
    for n in signals:
        cfg[USE_FIELD[n]] = n in on
    return cfg


def _config_yaml(config: Mapping[str, Any], report: Mapping[str, Any], report_path: Path
                 ) -> str:
    import yaml

    cv = report["cross_validation"]
    head = [
        "# engram-eval tune: chosen on the run below; load with engram-eval run --config",
        f"# run: {report['run']['path']}",
        f"# run fingerprint: {report['run']['fingerprint']}",
        f"# rows sha256: {report['run']['rows_sha256']}",
        f"# dataset: {report['dataset']['name']} sha256 {report['dataset']['sha256']}",
        f"# protocol: {report['protocol']} ({report['n_questions']} questions); objective: "
        f"mean of {', '.join(report['objective']['metrics'])}",
        f"# candidates: {report['n_candidates']}; in-sample {report['in_sample_score']:.4f}; "
        f"{cv['folds']}-fold CV estimate {cv['estimate']:.4f} (seed {cv['seed']}); "
        f"run's own settings {report['run_settings_score']:.4f}",
        f"# full report: {report_path.name}",
    ]
    return "\n".join(head) + "\n" + yaml.safe_dump(dict(config), sort_keys=False)
