"""The lexical analyser of the BM25 signals: tokenisers, Snowball stemming, stopwords, and the
settings that select them (recorded in a run's description and fingerprint)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from engram_eval.errors import ConfigError
from engram_eval.retrieval.analyzer import (
    WORD,
    Analyzer,
    analyzer_of,
    stopword_file,
    stopwords,
)
from engram_eval.retrieval.bm25 import BM25Index, tokenize
from engram_eval.retrieval.settings import LEGACY_VALUES, RetrievalSettings

pytest.importorskip("Stemmer")

FULL = Analyzer("unicode", "snowball-english", "en-v1")


def test_the_word_rule_is_the_original_tokeniser() -> None:
    text = "I adopted 2 Puppies in Zürich; it's 東京 now!"
    assert WORD.analyze(text) == tokenize(text) == ["i", "adopted", "2", "puppies", "in", "z",
                                                    "rich", "it's", "now"]


def test_unicode_keeps_accents_digits_and_splits_cjk() -> None:
    a = Analyzer("unicode")
    assert a.analyze("Zürich’s café opened in 2023: 我去了东京") == [
        "zürich's", "café", "opened", "in", "2023", "我", "去", "了", "东", "京"]
    assert a.analyze("ＡＢＣ x_y") == ["ａｂｃ", "x", "y"]  # full-width letters case-folded
    assert a.analyze("") == [] and FULL.analyze("") == [] and WORD.analyze("   ") == []


def test_stemming_and_stopwords() -> None:
    assert FULL.analyze("What breed is the puppy I adopted?") == ["breed", "puppi", "adopt"]
    assert FULL.analyze("The puppies were adopting") == ["puppi", "adopt"]
    # stopwords go before stemming: 'very' is a stopword, its stem 'veri' would not be
    assert Analyzer("word", "snowball-english", "none").analyze("very") == ["veri"]
    assert FULL.analyze("very running") == ["run"]
    # CJK and digits are not stemmed
    assert FULL.analyze("2023年 running") == ["2023", "年", "run"]


def test_the_stopword_list_is_read_and_hashed() -> None:
    words, sha = stopwords("en-v1")
    raw = stopword_file("en-v1").read_bytes()
    assert sha == hashlib.sha256(raw).hexdigest()
    assert len(words) == 153 and {"the", "i'm", "yourselves"} <= words
    assert not any(w.startswith("#") for w in words)
    assert FULL.describe()["stopwords_sha256"] == sha
    assert WORD.describe() == {}


def test_unknown_choices_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown lexical stemmer"):
        Analyzer(stemmer="porter")
    with pytest.raises(ConfigError, match="lexical_stopwords"):
        RetrievalSettings(lexical_stopwords="fr")


def test_settings_select_the_analyser_and_old_runs_keep_the_word_rule() -> None:
    s = RetrievalSettings(lexical_tokenizer="unicode", lexical_stemmer="snowball-english",
                          lexical_stopwords="en-v1")
    assert analyzer_of(s) == FULL
    # the default: stemmed, en-v1 stopwords (chosen on the tuning parts, PROVENANCE.md s14)
    assert analyzer_of(RetrievalSettings()) == Analyzer("word", "snowball-english", "en-v1")
    assert analyzer_of(RetrievalSettings(lexical_stemmer="none",
                                         lexical_stopwords="none")) == WORD
    assert {k: LEGACY_VALUES[k] for k in ("lexical_tokenizer", "lexical_stemmer",
                                          "lexical_stopwords")} == {
        "lexical_tokenizer": "word", "lexical_stemmer": "none", "lexical_stopwords": "none"}


def test_bm25_scores_with_the_analyser_equal_rank_bm25_on_the_analysed_terms() -> None:
    from rank_bm25 import BM25Okapi

    docs = ["I adopted a puppy from the shelter", "The puppies were adopted quickly",
            "We baked a cake for the wedding", "", "走去东京 2023"]
    q = "which puppy did I adopt in 2023?"
    idx = BM25Index(docs, k1=1.2, b=0.6, analyzer=FULL)
    ref = BM25Okapi([FULL.analyze(d) for d in docs], k1=1.2, b=0.6)
    np.testing.assert_allclose(idx.scores(q), ref.get_scores(FULL.analyze(q)), rtol=0,
                               atol=1e-12)
    assert idx.scores(q)[1] > 0  # 'puppies'/'adopted' match 'puppy'/'adopt' once stemmed
    assert BM25Index(docs).scores(q)[1] == 0  # ... and not without stemming


def test_a_hybrid_run_describes_its_analyser(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from engram_eval.retrieval.hybrid import HybridRetriever

    r = HybridRetriever(RetrievalSettings(use_dense=False, use_dense_rocchio=False, rerank=False,
                                          lexical_stemmer="snowball-english",
                                          lexical_stopwords="en-v1", cache_dir=str(tmp_path)))
    lex = r.describe()["lexical"]
    assert lex["lexical_stemmer"] == "snowball-english" and lex["lexical_stopwords"] == "en-v1"
    assert lex["stopwords_sha256"] == stopwords("en-v1")[1]
    assert lex["stemmer_library"].startswith("PyStemmer ")


def test_the_settings_offer_exactly_the_analysers_choices() -> None:
    """settings.py spells the choices out (importing the analyser there would add it to the
    hashed sources of every retriever); this keeps the two lists equal."""
    from dataclasses import fields

    from engram_eval.retrieval.analyzer import STEMMERS, STOPWORD_LISTS, TOKENIZERS

    choices = {f.name: f.metadata["choices"] for f in fields(RetrievalSettings)}
    assert tuple(choices["lexical_tokenizer"]) == TOKENIZERS
    assert tuple(choices["lexical_stemmer"]) == STEMMERS
    assert tuple(choices["lexical_stopwords"]) == STOPWORD_LISTS
