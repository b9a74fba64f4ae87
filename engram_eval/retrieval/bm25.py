"""BM25 backends (rank-bm25).

* :class:`FlatBM25` (``flat-bm25``) reproduces the LongMemEval reference retriever: one
  document per session made of the user turns joined by a space, tokenised with
  ``str.split(" ")`` for both document and question, ``BM25Okapi`` defaults, order
  ``argsort(scores)[::-1]`` (so ties fall exactly as in the reference code).
* :class:`BM25Index` is the lexical signal of the hybrid retriever: lower-cased word
  tokens, one document per session and role.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from engram_eval.data.records import Question, Session
from engram_eval.models import ModelRef
from engram_eval.retrieval.base import Ranking, ScoredSession

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _bm25_class() -> Any:
    try:
        from rank_bm25 import BM25Okapi
    except ImportError as e:  # pragma: no cover - declared dependency
        raise ImportError("rank-bm25 is required: pip install rank-bm25") from e
    return BM25Okapi


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens (letters/digits, with an internal apostrophe part)."""
    return _WORD.findall(text.lower())


class BM25Index:
    """BM25 over a list of documents; ``scores(query)`` returns one float per document.

    Empty documents are allowed (they score 0). An entirely empty corpus scores all zeros.
    """

    def __init__(self, documents: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.n = len(documents)
        tokens = [tokenize(d) for d in documents]
        self._empty = all(not t for t in tokens)
        # rank-bm25 divides by the average length: guard the all-empty corpus.
        self._bm25 = None if self._empty or self.n == 0 else _bm25_class()(tokens, k1=k1, b=b)

    def scores(self, query: str) -> np.ndarray:
        q = tokenize(query)
        if self._bm25 is None or not q:
            return np.zeros(self.n, dtype=np.float64)
        return np.asarray(self._bm25.get_scores(q), dtype=np.float64)


class FlatBM25:
    """The LongMemEval reference ``flat-bm25`` retriever at session granularity."""

    name = "flat-bm25"

    def __init__(self) -> None:
        self._sessions: tuple[Session, ...] = ()

    def index(self, sessions: Sequence[Session]) -> None:
        self._sessions = tuple(sessions)

    def rank(self, question: Question) -> Ranking:
        corpus = [" ".join(t.content for t in s.turns if t.role == "user") for s in self._sessions]
        if not corpus:
            return Ranking(question.question_id, ())
        bm25 = _bm25_class()([doc.split(" ") for doc in corpus])
        scores = np.asarray(bm25.get_scores(question.question.split(" ")), dtype=np.float64)
        order = np.argsort(scores)[::-1]
        results = tuple(
            ScoredSession(self._sessions[i].session_id, float(scores[i]),
                          {"bm25_user": float(scores[i])})
            for i in order
        )
        return Ranking(question.question_id, results)

    def describe(self) -> dict[str, Any]:
        return {"retriever": self.name, "granularity": "session", "tokenizer": "split(' ')",
                "bm25": "BM25Okapi defaults"}

    def models(self) -> list[ModelRef]:
        return []

    def source_modules(self) -> list[str]:
        return ["engram_eval/retrieval/base.py", "engram_eval/retrieval/bm25.py"]


def make_flat_bm25(config: Any) -> FlatBM25:
    return FlatBM25()
