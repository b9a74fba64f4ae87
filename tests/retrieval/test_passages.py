"""Tests for engram_eval.retrieval.passages (focused-excerpt selection)."""

from __future__ import annotations

import pytest

from engram_eval.retrieval.passages import (
    STOPWORDS,
    Excerpt,
    content_terms,
    plural_variants,
    select_excerpt,
    split_sentences,
    terms_match,
)


def filler(count: int, tag: str = "filler") -> str:
    """``count`` distinct one-sentence fillers of four words each (no query words)."""
    return " ".join(f"{tag} sentence number {i}." for i in range(count))


# --------------------------------------------------------------------------- terms


def test_content_terms_drop_stopwords_and_short_tokens_keep_order_unique() -> None:
    query = (
        "What did I say about the Dogs and my dog's berries, and the dogs garden? x y"
    )
    assert content_terms(query) == ["say", "dogs", "dog", "berries", "garden"]


def test_content_terms_only_stopwords() -> None:
    assert content_terms("What did you do to me, and when?") == []
    assert {"the", "what", "and", "did"} <= STOPWORDS


@pytest.mark.parametrize(
    ("term", "token", "expected"),
    [
        ("dogs", "dog", True),
        ("dog", "dogs", True),
        ("berries", "berry", True),
        ("berry", "berries", True),
        ("boxes", "box", True),
        ("glasses", "glass", True),
        ("cookies", "cookie", True),
        ("horses", "horse", True),
        ("glass", "glas", False),
        ("glas", "glass", False),
        ("dog", "dogma", False),
        ("cat", "cats", True),
        ("cat", "cat", True),
        ("boxes", "boxe", True),  # regular "-s" reading; harmless
        ("berries", "berr", False),
    ],
)
def test_plural_matching(term: str, token: str, expected: bool) -> None:
    assert terms_match(term, token) is expected


def test_plural_variants_never_strip_double_s() -> None:
    assert plural_variants("glass") == frozenset()
    assert plural_variants("boss") == frozenset()
    assert "berry" in plural_variants("berries")


# --------------------------------------------------------------------------- sentences


def test_split_sentences_offsets() -> None:
    text = 'Hi there.  Next one!\nThird 3.5 ok? "Quoted." end'
    spans = split_sentences(text)
    assert [text[s:e] for s, e in spans] == [
        "Hi there.",
        "Next one!",
        "Third 3.5 ok?",
        '"Quoted."',
        "end",
    ]
    assert split_sentences("   \n  ") == []


def test_split_sentences_newline_without_punctuation() -> None:
    text = "first line\nsecond line\n\nthird"
    assert [text[s:e] for s, e in split_sentences(text)] == [
        "first line",
        "second line",
        "third",
    ]


# --------------------------------------------------------------------------- excerpts


def test_plural_query_selects_singular_sentence() -> None:
    for query, word in [("dogs", "dog"), ("berries", "berry"), ("boxes", "box")]:
        target = f"My {word} is remarkable."
        document = f"{filler(30)} {target} {filler(30, 'other')}"
        excerpt = select_excerpt(f"tell me about the {query}", document, max_words=20)
        assert excerpt is not None, query
        assert target in excerpt.text
        assert document[excerpt.start : excerpt.end] == excerpt.text
        assert excerpt.matched_terms == (query,)


def test_double_s_is_not_a_plural() -> None:
    document = f"{filler(30)} The glas is here. {filler(30, 'other')}"
    assert select_excerpt("glass", document, max_words=20) is None


def test_term_counted_once_per_sentence() -> None:
    repeated = "Cat cat cat cat cat."
    distinct = "The cat sat on a mat."
    document = f"{repeated} {filler(20)} {distinct} {filler(20, 'other')}"
    excerpt = select_excerpt("cat mat", document, max_words=10)
    assert excerpt is not None
    assert excerpt.sentence_index == 21
    assert distinct in excerpt.text
    assert repeated not in excerpt.text
    assert excerpt.matched_terms == ("cat", "mat")


def test_ties_go_to_the_earliest_sentence_and_only_one_excerpt() -> None:
    document = f"{filler(10)} I adopted a puppy. {filler(10, 'mid')} Another puppy came. {filler(10)}"
    excerpt = select_excerpt("puppy", document, max_words=6)
    assert isinstance(excerpt, Excerpt)
    assert excerpt.sentence_index == 10
    assert "I adopted a puppy." in excerpt.text
    assert "Another puppy came." not in excerpt.text


def test_stopwords_are_ignored_when_scoring() -> None:
    noise = "What did you do with the one that was there?"
    target = "The violin lesson moved."
    document = f"{noise} {filler(40)} {target} {filler(40, 'other')}"
    excerpt = select_excerpt("What did you do with the violin?", document, max_words=8)
    assert excerpt is not None
    assert excerpt.matched_terms == ("violin",)
    assert target in excerpt.text
    assert noise not in excerpt.text


def test_boilerplate_neighbours_are_skipped_unique_context_kept() -> None:
    boiler = "Is there anything else I can help you with?"
    before = "I moved to Lisbon in spring."
    anchor = "My new apartment has a balcony."
    after = "The rent is high though."
    document = f"{filler(40)} {before} {boiler} {anchor} {boiler} {after} {boiler} {filler(40, 'tail')}"
    excerpt = select_excerpt("apartment balcony", document, max_words=24)
    assert excerpt is not None
    assert boiler not in excerpt.text
    for sentence in (before, anchor, after):
        assert sentence in excerpt.text
    # alternately after/before: rent (after), Lisbon (before), tail 0 (after); then
    # neither "filler ... 39." nor "tail ... 1." (4 words each) fits the 24-word budget
    assert excerpt.text == f"{before} {anchor} {after} tail sentence number 0."
    assert excerpt.words == len(excerpt.text.split()) == 21
    # start/end are the outer span of the kept sentences; text drops the inner boilerplate
    assert excerpt.start == document.index(before)
    assert excerpt.end == document.index("tail sentence number 0.") + len(
        "tail sentence number 0."
    )
    span = document[excerpt.start : excerpt.end]
    assert span.count(boiler) == 3
    assert span.replace(f" {boiler}", "") == excerpt.text


def test_neighbour_repeating_the_kept_sentence_is_skipped() -> None:
    anchor = "The recipe needs saffron."
    document = (
        f"{filler(30)} {anchor} {anchor} Unique note follows. {filler(30, 'tail')}"
    )
    excerpt = select_excerpt("saffron recipe", document, max_words=12)
    assert excerpt is not None
    assert excerpt.text.count("saffron") == 1
    assert "Unique note follows." in excerpt.text


def test_excerpt_never_exceeds_160_words() -> None:
    document = (
        filler(60) + " The marathon training plan starts Monday. " + filler(60, "tail")
    )
    excerpt = select_excerpt("marathon training plan", document)
    assert excerpt is not None
    assert excerpt.words <= 160
    assert len(excerpt.text.split()) == excerpt.words
    assert "marathon training plan" in excerpt.text
    assert document[excerpt.start : excerpt.end] == excerpt.text
    # the budget is used: one more neighbour (4 words) would not fit
    assert excerpt.words > 160 - 4


def test_single_long_sentence_is_truncated_around_matches() -> None:
    words = [f"w{i}" for i in range(400)]
    words[300] = "telescope"
    words[310] = "lenses"
    document = " ".join(words) + "."
    excerpt = select_excerpt("telescope lens", document)
    assert excerpt is not None
    assert excerpt.words == 160
    assert len(excerpt.text.split()) == 160
    assert "telescope" in excerpt.text and "lenses" in excerpt.text
    assert document[excerpt.start : excerpt.end] == excerpt.text
    assert excerpt.matched_terms == ("telescope", "lens")
    assert excerpt.sentence_index == 0
    # centred: matches sit in the middle of the window, not at an edge
    kept = excerpt.text.split()
    assert 60 <= kept.index("telescope") <= 100


def test_offsets_point_into_the_source_document() -> None:
    document = (
        "Header.\n"
        + filler(50)
        + "\nWe booked flights to Kyoto.\n"
        + filler(50, "tail")
    )
    excerpt = select_excerpt("flights Kyoto", document, max_words=30)
    assert excerpt is not None
    assert document[excerpt.start : excerpt.end] == excerpt.text
    start, end = split_sentences(document)[excerpt.sentence_index]
    assert document[start:end] == "We booked flights to Kyoto."
    assert excerpt.start <= start and end <= excerpt.end


@pytest.mark.parametrize(
    ("query", "document"),
    [
        ("dog", "My dog is happy. " * 10),  # short document: scored whole, no excerpt
        ("zebra", filler(100)),  # nothing matches
        ("what did you do", filler(100)),  # only stopwords
        ("", filler(100)),
    ],
)
def test_none_cases(query: str, document: str) -> None:
    assert select_excerpt(query, document) is None


def test_document_exactly_at_budget_needs_no_excerpt() -> None:
    document = filler(40)  # 160 words
    assert len(document.split()) == 160
    assert select_excerpt("filler", document) is None
    assert select_excerpt("filler", document + " extra filler.") is not None


def test_invalid_budget() -> None:
    with pytest.raises(ValueError):
        select_excerpt("dog", filler(10), max_words=0)
