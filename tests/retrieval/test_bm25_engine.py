"""BM25Index's engine (engram_eval.retrieval.bm25.SparseOkapi) gives rank-bm25's BM25Okapi
scores and idfs: within 1e-9 (the contract) and, on this platform, bit for bit, for both
postings routes, several (k1, b), a plain and a stemming analyser, on edge-case fixtures and
seeded random corpora."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

import engram_eval.retrieval.bm25 as bm25_module
from engram_eval.retrieval.analyzer import WORD, Analyzer
from engram_eval.retrieval.bm25 import BM25Index, SparseOkapi

pytest.importorskip("Stemmer")

ANALYSERS = {"word": WORD, "stemming": Analyzer("word", "snowball-english", "none"),
             "unicode-stem-stop": Analyzer("unicode", "snowball-english", "en-v1")}
PARAMS = [(1.5, 0.75), (1.2, 0.3), (0.5, 0.9), (2.0, 0.0), (3.0, 1.0)]

#: name -> (documents, queries)
FIXTURES: dict[str, tuple[list[str], list[str]]] = {
    "empty documents": (
        ["my dog barks at the mailman", "", "   ", "!!", "the cat sleeps; the dog runs",
         "Running dogs and sleeping cats"],
        ["dog", "the dog the dog sleeps", "running cat mailman zebra", "zebra"]),
    "one document": (
        ["I adopted a border collie puppy and the puppy sleeps"],
        ["puppy", "puppy puppy collie", "adopted a cat", "nothing here"]),
    "one document and empties": (
        ["", "we baked bread bread bread", ""],
        ["bread", "baked bread", "cake"]),
    "more than half (negative idf)": (
        ["the cat", "the dog", "the bird and the cat", "the fish", "a cat is here",
         "the cat and the dog"],
        ["the", "the cat", "the the the", "cat dog bird", "a", "unknown the"]),
    "every term everywhere (negative average idf)": (
        ["a b", "b a a", "a b b b"],
        ["a", "b", "a b a", "c"]),
    "repeated and absent terms": (
        ["Denver was cold in January", "We flew to Denver", "Paris in spring",
         "The weather was cold and rainy", "I like cold brew coffee"],
        ["cold cold cold Denver", "cold denver xyzzy xyzzy", "coffee coffee paris"]),
    "stemming variants": (
        ["I adopted puppies", "adopting a puppy", "the adoption agency", "running and runs"],
        ["adopt puppy", "puppies adopted", "run running ran"]),
}


@pytest.fixture(params=["count-first", "ids-first"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both postings routes of ``_postings`` (they must give the same arrays)."""
    monkeypatch.setattr(bm25_module, "COUNT_FIRST_MEAN_LENGTH",
                        0 if request.param == "count-first" else 10**9)
    return str(request.param)


def _check_equal(ref: np.ndarray, got: np.ndarray) -> None:
    ref = np.asarray(ref, dtype=np.float64)
    assert got.dtype == np.float64 and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-9)
    assert np.array_equal(got, ref)  # the same operations in the same order: the same floats


@pytest.mark.parametrize("name", sorted(FIXTURES))
@pytest.mark.parametrize("k1,b", PARAMS)
@pytest.mark.parametrize("analyser", sorted(ANALYSERS))
def test_scores_and_idf_equal_rank_bm25(name: str, k1: float, b: float, analyser: str,
                                        route: str) -> None:
    docs, queries = FIXTURES[name]
    an = ANALYSERS[analyser]
    index = BM25Index(docs, k1=k1, b=b, analyzer=an)
    tokens = [an.analyze(d) for d in docs]
    assert index.tokens == tokens and index.n == len(docs) and index.analyzer is an
    ref = BM25Okapi(tokens, k1=k1, b=b)
    for q in queries:
        q_tokens = an.analyze(q)
        with np.errstate(invalid="ignore"):
            want = ref.get_scores(q_tokens)
        if b == 1.0:  # rank-bm25's 0/0 for an empty document (see the NaN test below)
            want = np.nan_to_num(want, nan=0.0)
        _check_equal(want, index.scores(q))
        _check_equal(want, index.scores_tokens(q_tokens))
    for term, value in ref.idf.items():
        assert index.idf(term) == value
    assert index.idf("never-a-term") == 0.0


def test_negative_idf_is_floored_like_rank_bm25() -> None:
    """'the' is in 3 of 4 documents: log(1.5) - log(3.5) < 0, floored to 0.25 x the average
    of the six raw idfs (the average taken before flooring, in first-occurrence order)."""
    docs = ["the cat", "the dog", "the bird", "a fish"]
    ref = BM25Okapi([WORD.analyze(d) for d in docs])
    raw_the = math.log(4 - 3 + 0.5) - math.log(3 + 0.5)
    raw_other = math.log(4 - 1 + 0.5) - math.log(1 + 0.5)
    assert raw_the < 0
    assert ref.average_idf == pytest.approx((raw_the + 5 * raw_other) / 6)
    assert ref.idf["the"] == 0.25 * ref.average_idf
    index = BM25Index(docs)
    assert index.idf("the") == ref.idf["the"] > 0
    assert index.idf("cat") == ref.idf["cat"] == raw_other
    assert index._bm25 is not None and index._bm25.average_idf == ref.average_idf


def test_one_document_corpus_scores_negative_like_rank_bm25() -> None:
    """N = 1: every idf is log(0.5) - log(1.5) < 0, so the average is too and epsilon times it
    is a negative floor: rank-bm25 scores the matching document below zero."""
    index = BM25Index(["the puppy sleeps"])
    ref = BM25Okapi([["the", "puppy", "sleeps"]])
    s = index.scores("puppy")
    _check_equal(ref.get_scores(["puppy"]), s)
    assert s[0] < 0 and index.idf("puppy") < 0


def test_all_empty_and_no_documents() -> None:
    for docs in ([], [""], ["", "  ", "?!"]):
        index = BM25Index(docs)
        for q in ("dog", "", "dog dog"):
            s = index.scores(q)
            assert s.dtype == np.float64
            np.testing.assert_array_equal(s, np.zeros(len(docs)))
        assert index.idf("dog") == 0.0
        assert index.tokens == [[] for _ in docs]
    with pytest.raises(ValueError, match="at least one token"):
        SparseOkapi([[], []])


def test_where_rank_bm25_divides_zero_by_zero_the_score_is_zero() -> None:
    """k1 = 0: every document without the term is 0/0 in rank-bm25 (NaN); b = 1: an empty
    document is. This engine returns 0 there (a document sharing no term scores 0) and
    rank-bm25's value everywhere else."""
    docs = ["my dog barks", "", "a cat sleeps", "dog dog cat"]
    tokens = [WORD.analyze(d) for d in docs]
    for k1, b in ((0.0, 0.75), (1.5, 1.0), (0.0, 1.0)):
        with np.errstate(invalid="ignore"):
            want = BM25Okapi(tokens, k1=k1, b=b).get_scores(["dog", "cat"])
        assert np.isnan(want).any()
        got = BM25Index(docs, k1=k1, b=b).scores("dog cat")
        assert not np.isnan(got).any()
        finite = ~np.isnan(want)
        np.testing.assert_array_equal(got[finite], want[finite])
        # a NaN there means: no matching term in that document
        assert all(got[i] == 0.0 for i in np.flatnonzero(~finite)
                   if not {"dog", "cat"} & set(tokens[i]))


def _random_corpus(rng: random.Random) -> tuple[list[list[str]], list[list[str]]]:
    vocab_size = rng.choice([1, 2, 5, 20, 200])
    vocab = [f"w{i}x" for i in range(vocab_size)]
    weights = [1.0 / (i + 1) ** rng.choice([0.0, 1.0, 1.5]) for i in range(vocab_size)]
    n = rng.choice([1, 2, 3, 7, 40])
    docs = []
    for _ in range(n):
        length = 0 if rng.random() < 0.15 else rng.choice([1, 3, 10, 60, 700])
        docs.append(rng.choices(vocab, weights, k=length))
    if not any(docs):
        docs[0] = [vocab[0]]
    queries = [rng.choices(vocab + ["absentx", "otherx"], k=rng.randint(1, 12))
               for _ in range(3)]
    return docs, queries


@pytest.mark.parametrize("seed", range(6))
def test_random_corpora_equal_rank_bm25(seed: int, route: str) -> None:
    rng = random.Random(1000 + seed)
    for _ in range(25):
        docs, queries = _random_corpus(rng)
        k1 = rng.choice([0.1, 0.9, 1.2, 1.5, 2.7])
        b = rng.choice([0.0, 0.25, 0.75, 0.99])
        ref = BM25Okapi(docs, k1=k1, b=b)
        eng = SparseOkapi(docs, k1=k1, b=b)
        assert eng.average_idf == ref.average_idf
        assert list(eng.vocab) == list(ref.idf)  # rank-bm25's dict order
        for q in queries:
            _check_equal(ref.get_scores(q), eng.get_scores(q))
        # the same through BM25Index (the terms survive the word analyser unchanged)
        index = BM25Index([" ".join(d) for d in docs], k1=k1, b=b)
        assert index.tokens == docs
        for q in queries:
            _check_equal(ref.get_scores(q), index.scores(" ".join(q)))
        for term, value in ref.idf.items():
            assert index.idf(term) == value


def test_both_routes_build_the_same_postings() -> None:
    rng = random.Random(7)
    for _ in range(20):
        docs, _ = _random_corpus(rng)
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        total = int(lengths.sum())
        old = bm25_module.COUNT_FIRST_MEAN_LENGTH
        try:
            bm25_module.COUNT_FIRST_MEAN_LENGTH = 0
            a = bm25_module._postings(docs, lengths, total)
            bm25_module.COUNT_FIRST_MEAN_LENGTH = 10**9
            b = bm25_module._postings(docs, lengths, total)
        finally:
            bm25_module.COUNT_FIRST_MEAN_LENGTH = old
        assert a[0] == b[0] and list(a[0]) == list(dict.fromkeys(t for d in docs for t in d))
        for x, y in zip(a[1:], b[1:], strict=True):
            np.testing.assert_array_equal(x, y)
        assert int(a[3].sum()) == total
