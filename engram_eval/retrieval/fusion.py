"""Score fusion: pure functions over per-signal scores, testable without a retriever.

Used by the hybrid retriever, by ``engram-eval tune`` (which re-fuses stored traces and must
reproduce the retriever's rankings exactly, so both call the very same functions) and by
production search.

A *signal* is one score per session of the question's corpus plus an *informative* mask
(:class:`Signal`): a session that matches no query term gets no BM25 evidence, a session
without user text gets no dense score. Only informative sessions count, as below. Signals
are combined in the fixed order :data:`SIGNAL_ORDER` (then by name), so the floating-point
sums do not depend on the order a caller lists them in.

Ranks (:func:`signal_ranks`): 1-based among the informative sessions by descending score,
ties broken by corpus order (the session's position in the question's haystack); None for
sessions that are not informative.

**Weighted reciprocal-rank fusion** (:func:`rrf`): ``fused_i = sum_s w_s / (k + rank_s(i))``
over the signals where session ``i`` is informative. Uses ranks only, so signals on any scale
need no calibration; ``k`` (>= 0) flattens the contribution of the top ranks.

**Convex combination of normalised scores** (:func:`convex`):
``fused_i = sum_s w_s * norm_s(i) / sum_s w_s``, the sums over the signals passed with a
positive weight. Each signal is normalised per question, over its informative sessions:

* ``minmax``: ``(x - lo) / (hi - lo)`` with ``lo``/``hi`` the smallest/largest informative
  score, so the best informative session gets 1 and the worst 0.
* ``zscore``: ``(x - mean) / std`` (population std over the informative sessions), so a
  signal counts by how many standard deviations a session stands above the signal's mean;
  unlike min-max it is not dominated by one outlying top score.

Rules shared by both (see :func:`normalise`):

* a session *not informative* for a signal gets that signal's floor: 0 under min-max, the
  lowest informative z-score under z-score; it is never placed above an informative one;
* equal raw scores (ties) get equal normalised values;
* a signal *constant over the corpus* (every session informative with one and the same
  score) or with *no informative session* carries no order: it is dropped (contributes 0
  to every session);
* a signal informative for only some sessions, all with the same score (e.g. BM25 matching
  one session), separates them from the rest: informative 1, others 0;
* a *missing signal* (not computed for this corpus, e.g. assistant BM25 on a corpus without
  chat roles, or switched off) simply is not in the mapping: it contributes nothing and its
  weight is not in the denominator. Weights of names not in the mapping are ignored.

**Temporal step on a non-negative scale** (:func:`prior_scores`, :func:`temporal_scores`):
a multiplier applied to a negative score would push it down, inverting the boost. The
temporal multiplier is therefore applied to ``prior_i = fused_i - min(0, min_j fused_j)``:
RRF and min-max scores are never negative and are used unchanged; z-score fusions are
shifted so that the lowest session scores 0. The final score is ``prior_i * multiplier_i``.

:func:`order` sorts by descending score, ties by corpus order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: Canonical fusion order of the known signals (unknown names follow, sorted).
SIGNAL_ORDER = ("dense", "bm25_user", "bm25_assistant", "bm25_turn", "bm25_prf",
                "dense_rocchio")
METHODS = ("rrf", "convex")
NORMALISATIONS = ("minmax", "zscore")


@dataclass(frozen=True)
class Signal:
    """One signal over a question's corpus: ``scores[i]`` and ``informative[i]`` per session."""

    scores: np.ndarray
    informative: np.ndarray

    @classmethod
    def of(cls, scores: Sequence[float] | np.ndarray,
           informative: Sequence[bool] | np.ndarray | None = None) -> Signal:
        s = np.asarray(scores, dtype=np.float64)
        m = (np.ones(len(s), dtype=bool) if informative is None
             else np.asarray(informative, dtype=bool))
        if s.shape != m.shape or s.ndim != 1:
            raise ValueError("scores and informative must be 1-D and of the same length")
        return cls(s, m)


def _canonical(names: Sequence[str]) -> list[str]:
    known = [n for n in SIGNAL_ORDER if n in names]
    return known + sorted(n for n in names if n not in SIGNAL_ORDER)


def signal_ranks(scores: np.ndarray, informative: np.ndarray) -> list[int | None]:
    """1-based rank of each informative entry by descending score (ties: corpus order);
    None for entries that are not informative."""
    idx = [i for i in range(len(scores)) if informative[i]]
    idx.sort(key=lambda i: (-float(scores[i]), i))
    out: list[int | None] = [None] * len(scores)
    for r, i in enumerate(idx, start=1):
        out[i] = r
    return out


def normalise(signal: Signal, method: str) -> np.ndarray | None:
    """Per-question normalised scores of one signal (module docstring); None when the signal
    is dropped (no informative session, or constant over the whole corpus)."""
    if method not in NORMALISATIONS:
        raise ValueError(f"unknown normalisation {method!r}; use one of {NORMALISATIONS}")
    s, m = signal.scores, signal.informative
    n = len(s)
    if not m.any():
        return None
    vals = s[m]
    lo, hi = float(vals.min()), float(vals.max())
    out = np.zeros(n, dtype=np.float64)
    if hi == lo:
        if m.all():
            return None
        out[m] = 1.0
        return out
    if method == "minmax":
        out[m] = (vals - lo) / (hi - lo)
        return out
    mean = float(vals.mean())
    std = float(vals.std())
    if std == 0.0 or not math.isfinite(std):  # pragma: no cover - hi > lo implies std > 0
        out[m] = 1.0
        return out
    z = (vals - mean) / std
    out[:] = float(z.min())
    out[m] = z
    return out


def rrf(signals: Mapping[str, Signal], weights: Mapping[str, float], k: float) -> np.ndarray:
    """Weighted reciprocal-rank fusion (module docstring)."""
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    n = _length(signals)
    fused = np.zeros(n, dtype=np.float64)
    for name in _canonical(list(signals)):
        w = float(weights.get(name, 0.0))
        sig = signals[name]
        if w <= 0 or not sig.informative.any():
            continue
        for i, r in enumerate(signal_ranks(sig.scores, sig.informative)):
            if r is not None:
                fused[i] += w / (k + r)
    return fused


def convex(signals: Mapping[str, Signal], weights: Mapping[str, float],
           normalisation: str) -> np.ndarray:
    """Convex combination of per-question normalised scores (module docstring)."""
    n = _length(signals)
    fused = np.zeros(n, dtype=np.float64)
    total = 0.0
    for name in _canonical(list(signals)):
        w = float(weights.get(name, 0.0))
        if w <= 0:
            continue
        total += w
        norm = normalise(signals[name], normalisation)
        if norm is not None:
            fused += w * norm
    return fused / total if total > 0 else fused


def fuse(signals: Mapping[str, Signal], *, method: str, weights: Mapping[str, float],
         k: float = 60.0, normalisation: str = "minmax") -> np.ndarray:
    """Fused score per session by ``method`` (``rrf`` or ``convex``)."""
    if method == "rrf":
        return rrf(signals, weights, k)
    if method == "convex":
        return convex(signals, weights, normalisation)
    raise ValueError(f"unknown fusion method {method!r}; use one of {METHODS}")


def prior_scores(fused: np.ndarray) -> np.ndarray:
    """``fused - min(0, min(fused))``: never negative; unchanged when already >= 0."""
    if len(fused) == 0:
        return fused.copy()
    low = float(fused.min())
    return fused - low if low < 0 else fused.copy()


def temporal_scores(fused: np.ndarray, multipliers: np.ndarray) -> np.ndarray:
    """The temporal step: ``prior_scores(fused) * multipliers``."""
    return prior_scores(fused) * np.asarray(multipliers, dtype=np.float64)


def order(scores: np.ndarray | Sequence[float]) -> list[int]:
    """Indices by descending score, ties by corpus order."""
    return sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))


def rank_of(order_: Sequence[int]) -> dict[int, int]:
    """index -> 1-based position in ``order_``."""
    return {i: r for r, i in enumerate(order_, start=1)}


def _length(signals: Mapping[str, Signal]) -> int:
    lengths = {len(s.scores) for s in signals.values()}
    if len(lengths) > 1:
        raise ValueError(f"signals cover corpora of different sizes: {sorted(lengths)}")
    return lengths.pop() if lengths else 0
