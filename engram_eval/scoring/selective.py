"""Selective retrieval: how well a confidence says whether the top result is right.

Per question: ``confidence`` of its top result and ``correct`` (1 when the question is
answerable and its top result is gold; 0 when the top result is wrong or the question has no
answer). Pure functions of these two lists:

* :func:`reliability`: equal-width bins (15 by default) over [0, 1], the last bin closed;
  ``ECE = sum_b (n_b / n) * |mean(correct in b) - mean(confidence in b)|``;
* :func:`brier`: ``mean((confidence - correct)^2)``;
* :func:`auroc`: area under the ROC curve of ``confidence`` for ``correct``
  (``sklearn.metrics.roc_auc_score``; None when only one class is present);
* :func:`risk_coverage`: questions answered in order of decreasing confidence; at each
  distinct confidence (tied questions enter together) the coverage ``k / n`` and the risk
  ``1 - (correct among the k answered) / k``;
* :func:`aurc`: ``(1 / n) * sum_{k=1..n} risk(k)``, where ``risk(k)`` of the k-th question is
  the risk once its whole tie group has entered (so the order within ties does not matter);
* :func:`bootstrap`: percentile interval of any of these over questions resampled with
  replacement (``numpy.random.default_rng(seed)``), or, given ``groups``, over whole groups
  (e.g. LoCoMo conversations) resampled with replacement, each drawn group bringing all of
  its questions (a cluster bootstrap: questions of one conversation are not independent).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def _arrays(confidence: Sequence[float], correct: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(confidence, dtype=float)
    y = np.asarray(correct, dtype=float)
    if p.shape != y.shape or p.ndim != 1:
        raise ValueError("confidence and correct must be lists of the same length")
    return p, y


def reliability(confidence: Sequence[float], correct: Sequence[int],
                bins: int = 15) -> dict[str, Any]:
    """ECE and the bin table (``lo``, ``hi``, ``n``, ``mean_confidence``, ``fraction_correct``)."""
    p, y = _arrays(confidence, correct)
    edges = np.linspace(0.0, 1.0, bins + 1)
    table = []
    ece = 0.0
    for b in range(bins):
        lo, hi = float(edges[b]), float(edges[b + 1])
        m = (p >= lo) & ((p < hi) if b < bins - 1 else (p <= hi))
        nb = int(m.sum())
        row: dict[str, Any] = {"lo": lo, "hi": hi, "n": nb, "mean_confidence": None,
                               "fraction_correct": None}
        if nb:
            row["mean_confidence"] = float(p[m].mean())
            row["fraction_correct"] = float(y[m].mean())
            ece += nb / len(p) * abs(row["fraction_correct"] - row["mean_confidence"])
        table.append(row)
    return {"ece": float(ece), "bins": table, "n": int(len(p))}


def ece(confidence: Sequence[float], correct: Sequence[int], bins: int = 15) -> float:
    return float(reliability(confidence, correct, bins)["ece"])


def brier(confidence: Sequence[float], correct: Sequence[int]) -> float:
    p, y = _arrays(confidence, correct)
    return float(np.mean((p - y) ** 2))


def auroc(confidence: Sequence[float], correct: Sequence[int]) -> float | None:
    p, y = _arrays(confidence, correct)
    if len(set(y.tolist())) < 2:
        return None
    try:
        from sklearn.metrics import roc_auc_score
    except ImportError:  # pragma: no cover - a core dependency
        raise ImportError("AUROC needs scikit-learn: pip install 'scikit-learn>=1.3'") from None
    return float(roc_auc_score(y, p))


def _risk_per_question(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted confidences, risk of each position once its tie group has entered)."""
    order = np.argsort(-p, kind="stable")
    ps, ys = p[order], y[order]
    n = len(ps)
    cum = np.cumsum(ys)
    risk = np.empty(n)
    k = 0
    while k < n:
        j = k
        while j + 1 < n and ps[j + 1] == ps[k]:
            j += 1
        risk[k: j + 1] = 1.0 - cum[j] / (j + 1)
        k = j + 1
    return ps, risk


def risk_coverage(confidence: Sequence[float], correct: Sequence[int]) -> list[dict[str, float]]:
    """One point per distinct confidence, highest first: ``threshold``, ``coverage``, ``risk``."""
    p, y = _arrays(confidence, correct)
    ps, risk = _risk_per_question(p, y)
    n = len(ps)
    out = []
    for k in range(n):
        if k + 1 == n or ps[k + 1] != ps[k]:
            out.append({"threshold": float(ps[k]), "coverage": (k + 1) / n,
                        "risk": float(risk[k])})
    return out


def aurc(confidence: Sequence[float], correct: Sequence[int]) -> float:
    p, y = _arrays(confidence, correct)
    if not len(p):
        return float("nan")
    return float(_risk_per_question(p, y)[1].mean())


def bootstrap(stat: Callable[[np.ndarray], float | None], n: int, *, resamples: int = 2000,
              seed: int = 0, level: float = 0.95,
              groups: Sequence[str] | None = None) -> dict[str, Any]:
    """Percentile interval of ``stat(indices)`` over ``resamples`` draws of ``n`` question
    indices with replacement; draws where ``stat`` is None (e.g. AUROC of one class) are
    skipped and counted. With ``groups`` (one label per question), each draw takes as many
    groups as there are, with replacement, and the indices of every question of each drawn
    group, in draw order."""
    rng = np.random.default_rng(seed)
    members: list[np.ndarray] = []
    if groups is not None:
        if len(groups) != n:
            raise ValueError(f"groups has {len(groups)} labels for {n} questions")
        order: dict[str, list[int]] = {}
        for i, g in enumerate(groups):
            order.setdefault(g, []).append(i)
        members = [np.asarray(ix, dtype=int) for ix in order.values()]
    vals = []
    skipped = 0
    for _ in range(resamples):
        if members:
            ix = np.concatenate([members[g] for g in rng.integers(0, len(members),
                                                                   size=len(members))])
        else:
            ix = rng.integers(0, n, size=n)
        v = stat(ix)
        if v is None:
            skipped += 1
        else:
            vals.append(float(v))
    a = (1.0 - level) / 2.0
    lo, hi = (np.quantile(vals, [a, 1.0 - a]).tolist() if vals else (None, None))
    return {"lo": lo, "hi": hi, "level": level, "resamples": resamples, "seed": seed,
            "skipped": skipped, "unit": "question" if groups is None else "group",
            "groups": None if groups is None else len(members)}
