"""Per-candidate features of the confidence model fitted on real sessions (calibration v3).

For each of a question's candidates (the first ``candidates`` memories of the pipeline's
ranking), absolute signals of the (query, memory) pair and the question's context around it.
Nothing is normalised per question: a question whose answer is absent keeps its low absolute
scores, and the context features are differences and ranks, never a rescaling of the best
of a bad lot to 1.

Absolute, per (query, memory):

* ``dense``: cosine similarity of the query to the memory's best-matching dense piece;
* ``terms``: fraction of the query's content terms the memory holds
  (:func:`engram_eval.production.confidence.term_coverage`);
* ``time``: +1 inside the query's time window, -1 outside, 0 without a window or a date.

Per-question context:

* ``first``: 1 for the pipeline's first result, else 0; ``log_rank``: log of its rank;
* ``dense_gap``: its dense score minus the best dense score of the *other* candidates (the
  gap to the next result: positive only for the dense leader);
* ``terms_gap``: the same for ``terms``;
* ``dense_top`` / ``lexical_top``: 1 when it is the best memory of the whole set by the
  dense signal / by the memory-text BM25 signal; ``agree``: both at once (the dense and
  lexical signals agree on it);
* ``query_terms``: log(1 + number of the query's content terms).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engram_eval.retrieval.gate_features import GATE_DEPTH, GATE_FEATURES
from engram_eval.retrieval.passages import content_terms

FEATURES_V3 = ("dense", "terms", "time", "first", "log_rank", "dense_gap", "terms_gap",
               "dense_top", "lexical_top", "agree", "query_terms")


def candidate_features(query: str, sig: Mapping[str, Any], cands: Sequence[int],
                       overrides: Mapping[int, Mapping[str, float]] | None = None
                       ) -> np.ndarray:
    """One row of :data:`FEATURES_V3` per candidate (in ``cands`` order), from the output of
    :func:`engram_eval.production.search.memory_signals`. ``overrides``: per candidate index,
    replacement absolute signals (``dense``, ``terms``), as the excerpt retry scores an
    excerpt in its memory's place."""
    dense_all = np.asarray(sig["dense"], dtype=float)
    bm25_all = np.asarray(sig["bm25"], dtype=float)
    n = len(dense_all)
    dense_best = int(np.argmax(dense_all)) if n else -1
    lex_best = int(np.argmax(bm25_all)) if n and float(bm25_all.max()) > 0 else -1
    qt = math.log1p(len(content_terms(query)))
    dense = {i: float(dense_all[i]) for i in cands}
    terms = {i: float(sig["terms"][i]) for i in cands}
    for i, o in (overrides or {}).items():
        dense[i] = float(o.get("dense", dense[i]))
        terms[i] = float(o.get("terms", terms[i]))
    rows = []
    for rank, i in enumerate(cands, start=1):
        others = [j for j in cands if j != i]
        d_other = max((dense[j] for j in others), default=0.0)
        t_other = max((terms[j] for j in others), default=0.0)
        dt = 1.0 if i == dense_best else 0.0
        lt = 1.0 if i == lex_best else 0.0
        rows.append([dense[i], terms[i], float(sig["time"][i]), 1.0 if rank == 1 else 0.0,
                     math.log(rank), dense[i] - d_other, terms[i] - t_other, dt, lt, dt * lt,
                     qt])
    return np.asarray(rows, dtype=float).reshape(len(cands), len(FEATURES_V3))


#: ``(query, memory_signals output, candidates, overrides) -> one row per candidate``.
FeatureFunction = Callable[[str, Mapping[str, Any], Sequence[int],
                            Mapping[int, Mapping[str, float]] | None], np.ndarray]


@dataclass(frozen=True)
class FeatureSet:
    """A named feature set: its column names and the function that computes them (the
    signature of :func:`candidate_features`, ``overrides`` included). A calibration records
    the name and the columns; search computes them through :func:`feature_set`."""

    name: str
    features: tuple[str, ...]
    compute: FeatureFunction


def gate_features(query: str, sig: Mapping[str, Any], cands: Sequence[int],
                  overrides: Mapping[int, Mapping[str, float]] | None = None) -> np.ndarray:
    """One row of :data:`engram_eval.retrieval.gate_features.GATE_FEATURES` per candidate:
    the values the pipeline traced (``sig["gate_features"]``, computed by the one
    implementation, :mod:`engram_eval.retrieval.gate_features`), 0 where undefined (a
    spread of fewer than two sessions or of equal scores: no z-score or margin, read as 0; a
    signal switched off: no agreement). No excerpt retry (``overrides``): ConfigError; a
    candidate beyond the traced depth: ConfigError."""
    from engram_eval.errors import ConfigError

    if overrides:
        raise ConfigError("feature set 'v4' scores whole memories only: set excerpt_retry "
                          "false")
    traced = sig.get("gate_features") or {}
    rows = []
    for i in cands:
        if i not in traced:
            raise ConfigError(f"feature set 'v4': memory {i} has no traced features (the "
                              f"pipeline traces the first {GATE_DEPTH} results; candidates "
                              f"must be at most {GATE_DEPTH})")
        rows.append([0.0 if traced[i][n] is None else float(traced[i][n])
                     for n in GATE_FEATURES])
    return np.asarray(rows, dtype=float).reshape(len(cands), len(GATE_FEATURES))


#: Every feature set a calibration may name. ``v3``: :data:`FEATURES_V3` (calibration v3 and
#: the default of the per-shape calibration); ``v4``: the features the confidence study kept
#: (PROVENANCE.md section 16), as the pipeline traces them (:func:`gate_features`).
FEATURE_SETS: dict[str, FeatureSet] = {"v3": FeatureSet("v3", FEATURES_V3, candidate_features),
                                       "v4": FeatureSet("v4", GATE_FEATURES,
                                                         gate_features)}
DEFAULT_FEATURE_SET = "v3"


def feature_set(name: str) -> FeatureSet:
    """The registered feature set ``name`` (ConfigError naming the known ones otherwise)."""
    if name not in FEATURE_SETS:
        from engram_eval.errors import ConfigError

        raise ConfigError(f"unknown feature set {name!r}; known: {sorted(FEATURE_SETS)}")
    return FEATURE_SETS[name]
