"""Score fusion and the temporal step: one batched scorer over per-signal scores, testable
without a retriever, importing no other module of the package (an import-linter contract).

**The batched scorer** (:class:`SignalBatch`, :class:`FusionSetting`): the signals of one or
many questions as ``questions x sessions`` arrays, scored for a fusion + temporal setting. It
is the only implementation of the formulas below: the pipeline's fusion and temporal stages
(:func:`engram_eval.retrieval.pipeline.fusion_stage` and ``boost_stage``, hence every run and
production search) score a batch of one question, and ``engram-eval tune`` scores all of a
tuning part's questions at once for each of thousands of grid candidates. The per-question
functions :func:`fuse`, :func:`rrf` and :func:`convex` are that scorer on a batch of one.

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
temporal multiplier is therefore applied to ``prior_i = fused_i - min(0, min_j fused_j)``
(the minimum over the question's own sessions): RRF and min-max scores are never negative
and are used unchanged; z-score fusions are shifted so that the lowest session scores 0.
The multiplier (:func:`multipliers`) is ``temporal_boost`` for a session dated inside the
question's window when the temporal step is on, else 1. The final score is
``prior_i * multiplier_i``.

:func:`order` sorts by descending score, ties by corpus order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
    """Weighted reciprocal-rank fusion of one question (module docstring)."""
    return fuse(signals, method="rrf", weights=weights, k=k)


def convex(signals: Mapping[str, Signal], weights: Mapping[str, float],
           normalisation: str) -> np.ndarray:
    """Convex combination of one question's normalised scores (module docstring)."""
    return fuse(signals, method="convex", weights=weights, normalisation=normalisation)


def fuse(signals: Mapping[str, Signal], *, method: str, weights: Mapping[str, float],
         k: float = 60.0, normalisation: str = "minmax") -> np.ndarray:
    """Fused score per session of one question by ``method`` (``rrf`` or ``convex``): the
    batched scorer (:class:`SignalBatch`) on a batch of this one question."""
    setting = FusionSetting(method, normalisation, float(k), tuple(weights.items()), False, 1.0)
    return SignalBatch.of([signals]).fused(setting)[0]


def prior_scores(fused: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """``fused - min(0, min(fused))`` along the last axis (per question of a batch; the
    minimum over the entries ``mask`` keeps, default all): never negative where kept;
    unchanged when already >= 0."""
    return _shift_to_nonnegative(np.array(fused, dtype=np.float64), mask)


def _shift_to_nonnegative(out: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """:func:`prior_scores` in place on ``out`` (returned)."""
    if out.size == 0:
        return out
    low = (out if mask is None else np.where(mask, out, np.inf)).min(axis=-1)
    if out.ndim == 1:
        if low < 0:
            out -= low
        return out
    neg = low < 0
    if neg.any():
        out[neg] -= low[neg][:, None]
    return out


def temporal_scores(fused: np.ndarray, multipliers: np.ndarray,
                    mask: np.ndarray | None = None) -> np.ndarray:
    """The temporal step: ``prior_scores(fused, mask) * multipliers``."""
    return prior_scores(fused, mask) * np.asarray(multipliers, dtype=np.float64)


def multipliers(in_window: np.ndarray, setting: FusionSetting) -> np.ndarray:
    """The temporal multiplier of each session: ``temporal_boost`` inside the question's
    window when the setting's temporal step is on, else 1.0 (``in_window``: bool array of
    any shape; unknown counts as outside)."""
    inside = np.asarray(in_window, dtype=bool)
    if not setting.temporal:
        return np.ones(inside.shape, dtype=np.float64)
    return np.where(inside, float(setting.temporal_boost), 1.0)


# --------------------------------------------------------------------------- batched scorer


@dataclass(frozen=True)
class FusionSetting:
    """One fusion + temporal setting; the fields are the
    :class:`~engram_eval.retrieval.settings.RetrievalSettings` fields of the same names
    (``weights``: (signal, weight) pairs; names without a pair weigh 0)."""

    fusion: str
    normalisation: str
    rrf_k: float
    weights: tuple[tuple[str, float], ...]
    temporal: bool
    temporal_boost: float

    def __post_init__(self) -> None:
        if self.fusion not in METHODS:
            raise ValueError(f"unknown fusion method {self.fusion!r}; use one of {METHODS}")
        if self.fusion == "rrf" and self.rrf_k < 0:
            raise ValueError(f"rrf k must be >= 0, got {self.rrf_k}")
        if self.fusion == "convex" and self.normalisation not in NORMALISATIONS:
            raise ValueError(f"unknown normalisation {self.normalisation!r}; use one of "
                             f"{NORMALISATIONS}")

    def weight_map(self) -> dict[str, float]:
        return dict(self.weights)

    def to_json(self) -> dict[str, Any]:
        return {"fusion": self.fusion, "normalisation": self.normalisation,
                "rrf_k": self.rrf_k, "weights": self.weight_map(), "temporal": self.temporal,
                "temporal_boost": self.temporal_boost}


class SignalBatch:
    """The traced signals of many questions as arrays, ``Q x N`` (``N``: the largest corpus;
    a question's sessions are its first ``n_q`` columns, ``mask`` marks them), scored for any
    :class:`FusionSetting` by the same array operations whether the batch holds one question
    (the pipeline's fusion and temporal stages) or thousands (``tune``'s grid search).

    Per signal and question what a setting needs is computed once and kept: the ranks among
    informative sessions (:func:`signal_ranks`), ``k + rank`` for RRF, and the normalised
    scores (:func:`normalise`). A signal a question did not compute contributes nothing and
    its weight is not in that question's convex denominator (module docstring)."""

    def __init__(self, signals: Sequence[Mapping[str, Signal]], lengths: Sequence[int],
                 in_window: np.ndarray) -> None:
        self.signals = [dict(s) for s in signals]
        self.lengths = [int(n) for n in lengths]
        nq = len(self.signals)
        self.nmax = max(self.lengths, default=0)
        self.mask = np.zeros((nq, self.nmax), dtype=bool)
        for qi, n in enumerate(self.lengths):
            self.mask[qi, :n] = True
        self.padding = ~self.mask
        self.in_window = in_window
        self.names = _canonical(sorted({n for s in self.signals for n in s}))
        self.present = {n: np.array([n in s for s in self.signals], dtype=np.float64)
                        for n in self.names}
        self._cache: dict[tuple[str, str], np.ndarray] = {}

    @classmethod
    def of(cls, signals: Sequence[Mapping[str, Signal]],
           in_window: Sequence[Sequence[bool] | np.ndarray] | None = None,
           lengths: Sequence[int] | None = None) -> SignalBatch:
        """A batch of questions: each one's signals (name -> :class:`Signal`), its sessions'
        window membership (default: none in a window) and its corpus size (default: from
        ``in_window``, else its signals'); every signal must cover the whole corpus."""
        nq = len(signals)
        if lengths is None:
            lengths = ([len(w) for w in in_window] if in_window is not None
                       else [_length(s) for s in signals])
        if len(lengths) != nq or (in_window is not None and len(in_window) != nq):
            raise ValueError("SignalBatch.of: one entry per question in every argument")
        for qi, (s, n) in enumerate(zip(signals, lengths, strict=True)):
            for name, sig in s.items():
                if len(sig.scores) != n:
                    raise ValueError(f"SignalBatch.of: question {qi}: signal {name!r} covers "
                                     f"{len(sig.scores)} sessions, its corpus {n}")
        nmax = max(lengths, default=0)
        window = np.zeros((nq, nmax), dtype=bool)
        if in_window is not None:
            for qi, w in enumerate(in_window):
                if len(w) != lengths[qi]:
                    raise ValueError(f"SignalBatch.of: question {qi}: in_window covers "
                                     f"{len(w)} sessions, its corpus {lengths[qi]}")
                window[qi, : len(w)] = np.asarray(w, dtype=bool)
        return cls(signals, lengths, window)

    def __len__(self) -> int:
        return len(self.signals)

    def _ranks(self, name: str) -> np.ndarray:
        """Rank among informative sessions, 0 where not informative or not computed."""
        key = (name, "ranks")
        if key not in self._cache:
            out = np.zeros(self.mask.shape, dtype=np.float64)
            for qi, s in enumerate(self.signals):
                if name in s:
                    sig = s[name]
                    for i, r in enumerate(signal_ranks(sig.scores, sig.informative)):
                        if r is not None:
                            out[qi, i] = r
            self._cache[key] = out
        return self._cache[key]

    def rrf_denominators(self, name: str, k: float) -> np.ndarray:
        """``k + rank`` where the session is informative, +inf elsewhere (``w / inf = 0``)."""
        key = (name, f"rrf:{k!r}")
        if key not in self._cache:
            r = self._ranks(name)
            self._cache[key] = np.where(r > 0, k + r, np.inf)
        return self._cache[key]

    def normalised(self, name: str, method: str) -> np.ndarray:
        """:func:`normalise` of the signal per question; 0 where dropped or not computed."""
        key = (name, method)
        if key not in self._cache:
            out = np.zeros(self.mask.shape, dtype=np.float64)
            for qi, s in enumerate(self.signals):
                if name in s:
                    v = normalise(s[name], method)
                    if v is not None:
                        out[qi, : len(v)] = v
            self._cache[key] = out
        return self._cache[key]

    def fused(self, setting: FusionSetting) -> np.ndarray:
        """Fused scores, ``Q x N`` (0 beyond a question's corpus): ``sum_s w_s / (k +
        rank_s)`` (rrf) or ``sum_s w_s * norm_s / sum_s w_s`` (convex), signals added in
        the canonical order."""
        nq = len(self.signals)
        fused = np.zeros(self.mask.shape, dtype=np.float64)
        w = setting.weight_map()
        if setting.fusion == "rrf":
            for n in self.names:
                wn = float(w.get(n, 0.0))
                if wn > 0:
                    fused += wn / self.rrf_denominators(n, setting.rrf_k)
            return fused
        total = np.zeros(nq, dtype=np.float64)
        for n in self.names:
            wn = float(w.get(n, 0.0))
            if wn <= 0:
                continue
            total += wn * self.present[n]
            fused += wn * self.normalised(n, setting.normalisation)
        pos = total > 0
        if pos.any():
            fused[pos] /= total[pos][:, None]
        return fused

    def final(self, setting: FusionSetting) -> np.ndarray:
        """Scores after the temporal step (what a run without a rerank ranks by), ``Q x N``;
        ``-inf`` beyond a question's corpus."""
        out = _shift_to_nonnegative(self.fused(setting), self.mask)  # a fresh array
        if setting.temporal:  # else every multiplier is 1: x * 1.0 == x
            out *= multipliers(self.in_window, setting)
        out[self.padding] = -np.inf
        return out

    def orders(self, setting: FusionSetting) -> np.ndarray:
        """Each question's ranking (corpus indices by descending final score, ties by corpus
        order), ``Q x N``; a question's first ``n_q`` entries are its sessions."""
        return np.argsort(-self.final(setting), axis=1, kind="stable")


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
