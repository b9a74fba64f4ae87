"""Pseudo-relevance feedback: pure helpers for the ``bm25_prf`` and ``dense_rocchio`` signals.

Both start from a *first pass* that does not depend on the fusion weights (the dense
signal, or user BM25; ``feedback_source``), so a run that traces every signal can be
re-fused offline with other weights and give exactly what the retriever would.

* :func:`expansion_terms` (RM3-style): every term of the feedback sessions' user documents
  is weighted ``sum_d tf(t, d) / |d| * idf(t)`` (the term's relative frequency in each
  feedback document times the corpus idf), terms of the question, stop words, tokens
  shorter than three characters, pure numbers and terms with idf <= 0 are skipped, and the
  ``n_terms`` heaviest (ties by the term, alphabetically) are added once each to the
  question's tokens; the expanded query is scored with the same BM25 index.
* :func:`rocchio_query`: ``q' = normalise(q + beta * mean_d v_d)`` where ``v_d`` is the
  piece vector of feedback session ``d`` most similar to the question (its best piece); the
  pieces are then re-scored against ``q'``. No text is encoded again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

STOP_WORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing done down during each even ever
few for from further get got had has have having he her here hers herself him himself his how
i i'm i've if in into is it it's its itself just know let like me more most much my myself no
nor not now of off on once one only or other our ours ourselves out over own really same she
should so some such than that that's the their theirs them themselves then there these they
this those through to too under until up us very was we were what when where which while who
whom why will with would you you're your yours yourself yourselves yes yeah okay ok thanks
thank sure well great good
""".split())


def expansion_terms(question_tokens: Sequence[str], feedback_docs: Sequence[Sequence[str]],
                    idf: Callable[[str], float], n_terms: int) -> list[str]:
    """The ``n_terms`` heaviest feedback terms (module docstring), heaviest first."""
    asked = set(question_tokens)
    weight: dict[str, float] = {}
    for doc in feedback_docs:
        if not doc:
            continue
        tf = Counter(doc)
        size = float(len(doc))
        for term, count in tf.items():
            if (term in asked or term in STOP_WORDS or len(term) < 3 or term.isdigit()):
                continue
            w = idf(term)
            if w <= 0:
                continue
            weight[term] = weight.get(term, 0.0) + count / size * w
    ranked = sorted(weight.items(), key=lambda kv: (-kv[1], kv[0]))
    return [t for t, _ in ranked[:n_terms]]


def best_pieces(piece_sessions: Sequence[int], sims: np.ndarray, sessions: Sequence[int]
                ) -> list[int]:
    """For each session in ``sessions``, the index of its most similar piece (first on ties);
    sessions without pieces are skipped."""
    best: dict[int, int] = {}
    for p, si in enumerate(piece_sessions):
        if si in best and sims[p] <= sims[best[si]]:
            continue
        best[si] = p
    return [best[s] for s in sessions if s in best]


def rocchio_query(query: np.ndarray, feedback_vectors: np.ndarray, beta: float) -> np.ndarray:
    """``normalise(query + beta * mean(feedback_vectors))`` (unchanged without feedback)."""
    q = np.asarray(query, dtype=np.float32)
    if len(feedback_vectors) == 0 or beta == 0:
        return q
    moved = q + np.float32(beta) * np.asarray(feedback_vectors, dtype=np.float32).mean(axis=0)
    norm = float(np.linalg.norm(moved))
    return moved / np.float32(norm) if norm > 0 else q
