"""BM25 backends.

* :class:`FlatBM25` (``flat-bm25``) reproduces the LongMemEval reference retriever: one
  document per session made of the user turns joined by a space, tokenised with
  ``str.split(" ")`` for both document and question, ``rank_bm25.BM25Okapi`` defaults, order
  ``argsort(scores)[::-1]`` (so ties fall exactly as in the reference code). On corpora
  without chat roles (LoCoMo: speakers' names) every turn is user text
  (:func:`engram_eval.data.records.has_chat_roles`, decided once per corpus). It keeps
  calling rank-bm25 itself: it is the reference.
* :class:`BM25Index` is the lexical signal of the hybrid retriever: one document per
  session and role (or per turn), terms from the run's analyser
  (:mod:`engram_eval.retrieval.analyzer`; by default lower-cased word tokens). Its engine
  (:class:`SparseOkapi`) gives rank-bm25's ``BM25Okapi`` scores bit for bit, faster.

**The engine.** ``BM25Okapi`` counts terms in a Python loop over every token and, per query
term, loops in Python over every document (``get_scores``). :class:`SparseOkapi` builds the
same statistics with C-level dict operations (one vocabulary in first-occurrence order; a
``collections.Counter`` per document when documents are long, :func:`_postings`) and NumPy (a
term-major postings list ``(term, document, tf)`` by a stable radix sort), and computes every posting's Okapi weight once at build time, so a query
only adds the postings of its terms. It is written here rather than taken from ``bm25s``
(0.3.11) because the scores must be rank-bm25's own: ``bm25s``'s Okapi idf
(``robertson``) is ``log((N - n + 0.5) / (n + 0.5))`` clamped at 0, not rank-bm25's
difference of logs with negative values replaced by ``epsilon`` x the average idf, and it
stores float32 weights, so its scores differ well beyond 1e-9; nor is it a dependency of this
package. NumPy alone suffices (no scipy.sparse: one slice per query term). The arithmetic is
rank-bm25's, operation for operation, so the floats are the same, not just close:

* ``idf(t) = log(N - n_t + 0.5) - log(n_t + 0.5)`` (two ``math.log`` calls, as rank-bm25
  writes it; ``n_t`` documents contain ``t``); the average idf is the sequential sum over
  the vocabulary in first-occurrence order (rank-bm25's dict order; ``np.cumsum`` adds in
  that order) divided by the vocabulary size; every negative idf (a term in more than half
  the documents) becomes ``epsilon * average`` (``epsilon`` = 0.25, so the floor is itself
  negative when the average is);
* a document's score is ``sum_q idf(q) * (tf * (k1 + 1)) / (tf + k1 * (1 - b + b * |d| /
  avgdl))`` over the query's tokens in order (a repeated token adds again; a token absent
  from the corpus adds nothing), accumulated in query order as rank-bm25 does; a document
  without the term adds nothing, where rank-bm25 adds ``+-0.0``, which changes no sum.

One deliberate difference: where rank-bm25's formula is ``0 / 0`` (a document without the
term when ``k1 = 0``, or an empty document when ``b = 1``) it returns NaN; this engine
returns 0, the formula's limit and this class's contract (a document that shares no term with
the query scores 0). Everything else is equal to rank-bm25's ``get_scores``;
``tests/retrieval/test_bm25_engine.py`` pins it on edge-case fixtures and seeded random corpora.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from itertools import chain, count
from typing import Any

import numpy as np

from engram_eval.data.records import Question, Session, has_chat_roles, user_document
from engram_eval.retrieval.analyzer import WORD, Analyzer
from engram_eval.retrieval.base import Ranking, ScoredSession
from engram_eval.retrieval.models import ModelRef
from engram_eval.retrieval.sources import FLAT_BM25_SOURCES

#: rank-bm25's ``BM25Okapi`` default: negative idfs become ``EPSILON * average idf``.
EPSILON = 0.25


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


#: Mean document length (tokens) from which :func:`_postings` counts per document first.
COUNT_FIRST_MEAN_LENGTH = 512


def _postings(corpus: Sequence[Sequence[str]], lengths: np.ndarray, total: int
              ) -> tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray]:
    """``(vocabulary, term, document, tf)``: the vocabulary (term -> id) in first-occurrence
    order, which is rank-bm25's dict order, and the postings sorted by term, documents
    ascending within a term. Two routes give the same arrays; the cheaper one is taken:

    * long documents (a mean of :data:`COUNT_FIRST_MEAN_LENGTH` tokens or more): a
      ``Counter`` per document (one C-level dict operation per token), then term ids for the
      distinct (document, term) pairs only, far fewer than the tokens;
    * short documents (turns): term ids for every token at once, then (term, document) runs
      counted in NumPy after the sort (no per-document ``Counter`` to set up).

    Either way the sort is stable and, for up to 65,536 terms, a radix sort on 16 bits.
    """
    n = len(corpus)
    tf_of = None
    if total >= COUNT_FIRST_MEAN_LENGTH * n:
        counts = [Counter(d) for d in corpus]  # each in first-occurrence order
        keys: list[str] = list(chain.from_iterable(counts))  # distinct terms, document-major
        tf_of = np.fromiter(chain.from_iterable(c.values() for c in counts), dtype=np.int64,
                            count=len(keys))
        per_doc = np.fromiter(map(len, counts), dtype=np.int64, count=n)
    else:
        keys = list(chain.from_iterable(corpus))  # every token, document-major
        per_doc = lengths
    vocab = dict(zip(dict.fromkeys(keys), count(), strict=False))
    term_of = np.fromiter(map(vocab.__getitem__, keys), dtype=np.int64, count=len(keys))
    doc_of = np.repeat(np.arange(n, dtype=np.int64), per_doc)
    order = np.argsort(term_of.astype(np.uint16 if len(vocab) <= 1 << 16 else np.int64),
                       kind="stable")
    term, doc = term_of[order], doc_of[order]
    if tf_of is not None:
        return vocab, term, doc, tf_of[order]
    first = np.ones(len(keys), dtype=bool)  # the first token of each (term, document) run
    first[1:] = (term[1:] != term[:-1]) | (doc[1:] != doc[:-1])
    starts = np.flatnonzero(first)
    return vocab, term[starts], doc[starts], np.diff(starts, append=len(keys))


class SparseOkapi:
    """rank-bm25's ``BM25Okapi`` over tokenised documents, on a postings list (module
    docstring). The corpus must hold at least one token (rank-bm25 divides by the average
    document length)."""

    def __init__(self, corpus: Sequence[Sequence[str]], *, k1: float = 1.5, b: float = 0.75,
                 epsilon: float = EPSILON) -> None:
        n = len(corpus)
        lengths = np.fromiter(map(len, corpus), dtype=np.int64, count=n)
        total = int(lengths.sum())
        if total == 0:
            raise ValueError("SparseOkapi needs at least one token")
        self.corpus_size = n
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self.avgdl = total / n
        self.vocab, post_term, self.docs, tf = _postings(corpus, lengths, total)
        v = len(self.vocab)
        df = np.bincount(post_term, minlength=v)
        self.indptr: list[int] = [0, *np.cumsum(df).tolist()]
        # idf exactly as rank-bm25 computes it, once per distinct document frequency
        uniq = np.unique(df).tolist()
        table = np.zeros(n + 1, dtype=np.float64)
        table[uniq] = [math.log(n - f + 0.5) - math.log(f + 0.5) for f in uniq]
        raw = table[df]
        self.average_idf = float(np.cumsum(raw)[-1]) / v  # sequential, dict order
        self.idf = np.where(raw < 0, epsilon * self.average_idf, raw)
        # Okapi weight of every posting, with rank-bm25's operations in its order
        norm = k1 * (1 - b + b * lengths / self.avgdl)
        self.weights = self.idf[post_term] * (tf * (k1 + 1) / (tf + norm[self.docs]))

    def get_scores(self, query: Sequence[str]) -> np.ndarray:
        """One score per document; query tokens in order, a repeated token adds again."""
        score = np.zeros(self.corpus_size, dtype=np.float64)
        for q in query:
            t = self.vocab.get(q)
            if t is not None:
                lo, hi = self.indptr[t], self.indptr[t + 1]
                score[self.docs[lo:hi]] += self.weights[lo:hi]
        return score

    def idf_of(self, term: str) -> float:
        """rank-bm25's ``idf[term]`` (after the epsilon floor); 0 for an unknown term."""
        t = self.vocab.get(term)
        return 0.0 if t is None else float(self.idf[t])


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
                      else SparseOkapi(self.tokens, k1=k1, b=b))

    def scores(self, query: str) -> np.ndarray:
        return self.scores_tokens(self.analyzer.analyze(query))

    def scores_tokens(self, query_tokens: Sequence[str]) -> np.ndarray:
        """Scores of an already tokenised query (a repeated token counts again)."""
        if self._bm25 is None or not query_tokens:
            return np.zeros(self.n, dtype=np.float64)
        return self._bm25.get_scores(query_tokens)

    def idf(self, term: str) -> float:
        """The index's idf of ``term`` (0 for a term absent from the corpus)."""
        if self._bm25 is None:
            return 0.0
        return self._bm25.idf_of(term)


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
