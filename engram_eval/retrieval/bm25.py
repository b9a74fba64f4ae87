"""BM25 backends (rank-bm25).

* :class:`FlatBM25` (``flat-bm25``) reproduces the LongMemEval reference retriever: one
  document per session made of the user turns joined by a space, tokenised with
  ``str.split(" ")`` for both document and question, ``BM25Okapi`` defaults, order
  ``argsort(scores)[::-1]`` (so ties fall exactly as in the reference code). On corpora
  without chat roles (LoCoMo: speakers' names) every turn is user text
  (:func:`engram_eval.data.records.has_chat_roles`, decided once per corpus).
* :class:`BM25Index` is the lexical signal of the hybrid retriever: one document per
  session and role (or per turn), terms from the run's analyser
  (:mod:`engram_eval.retrieval.analyzer`; by default lower-cased word tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engram_eval.data.records import Question, Session, has_chat_roles, user_document
from engram_eval.retrieval.analyzer import WORD, Analyzer
from engram_eval.retrieval.base import Ranking, ScoredSession
from engram_eval.retrieval.models import ModelRef
from engram_eval.retrieval.sources import FLAT_BM25_SOURCES


def _bm25_class() -> Any:
    try:
        from rank_bm25 import BM25Okapi
    except ImportError as e:  # pragma: no cover - declared dependency
        raise ImportError("rank-bm25 is required: pip install rank-bm25") from e
    return BM25Okapi


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens (letters/digits, with an internal apostrophe part): the
    ``word`` analyser without stemming or stopwords."""
    return WORD.analyze(text)


class BM25Index:
    """BM25 over a list of documents; ``scores(query)`` returns one float per document.

    Empty documents are allowed (they score 0). An entirely empty corpus scores all zeros.
    """

    def __init__(self, documents: Sequence[str], *, k1: float = 1.5, b: float = 0.75,
                 analyzer: Analyzer = WORD) -> None:
        self.n = len(documents)
        self.analyzer = analyzer
        self.tokens = [analyzer.analyze(d) for d in documents]
        self._empty = all(not t for t in self.tokens)
        # rank-bm25 divides by the average length: guard the all-empty corpus.
        self._bm25 = (None if self._empty or self.n == 0
                      else _bm25_class()(self.tokens, k1=k1, b=b))

    def scores(self, query: str) -> np.ndarray:
        return self.scores_tokens(self.analyzer.analyze(query))

    def scores_tokens(self, query_tokens: Sequence[str]) -> np.ndarray:
        """Scores of an already tokenised query (a repeated token counts again)."""
        if self._bm25 is None or not query_tokens:
            return np.zeros(self.n, dtype=np.float64)
        return np.asarray(self._bm25.get_scores(list(query_tokens)), dtype=np.float64)

    def idf(self, term: str) -> float:
        """The index's idf of ``term`` (0 for a term absent from the corpus)."""
        if self._bm25 is None:
            return 0.0
        return float(self._bm25.idf.get(term, 0.0))


class FlatBM25:
    """The LongMemEval reference ``flat-bm25`` retriever at session granularity."""

    name = "flat-bm25"

    def __init__(self) -> None:
        self._sessions: tuple[Session, ...] = ()
        self._chat_roles = True

    def index(self, sessions: Sequence[Session]) -> None:
        self._sessions = tuple(sessions)
        self._chat_roles = has_chat_roles(self._sessions)

    def rank(self, question: Question) -> Ranking:
        corpus = [user_document(s, self._chat_roles, sep=" ") for s in self._sessions]
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
        return list(FLAT_BM25_SOURCES)


def make_flat_bm25(config: Any) -> FlatBM25:
    return FlatBM25()
