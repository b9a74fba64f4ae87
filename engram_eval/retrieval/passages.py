"""Focused-excerpt selection for the cross-encoder passage fallback.

When every base cross-encoder score of a question is under the passage floor, the reranker
may score *one* focused excerpt per long document and keep the larger of the full-document
and excerpt scores. This module only chooses that excerpt; it never scores anything.

Selection, in short:

1. The query's content terms are its lowercased word tokens minus English stopwords and
   tokens shorter than :data:`MIN_TERM_LENGTH` characters (order kept, duplicates dropped).
2. Each sentence is scored by the number of *distinct* query terms it matches; a term that
   occurs five times still counts once. Matching is equality or a conservative regular
   English plural (``s``, ``es``, ``ies`` <-> ``y``; a final ``ss`` is never stripped).
3. The best sentence (ties: the earliest) is the anchor. The excerpt holds the whole anchor
   (or, when the anchor alone exceeds the word budget, the budget-sized run of its words
   that covers the most distinct terms) and then grows with neighbouring sentences,
   alternately after and before, while the budget allows. Neighbours that are boilerplate
   repetition (their normalised text occurs at least twice in the document, or they repeat
   the adjacent kept sentence, or they hold no word token) are skipped; unique context stays.

Words are whitespace-delimited, the same count the ``≤ max_words`` contract uses.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

__all__ = [
    "MIN_TERM_LENGTH",
    "STOPWORDS",
    "Excerpt",
    "content_terms",
    "plural_variants",
    "select_excerpt",
    "split_sentences",
    "terms_match",
]

#: Tokens shorter than this are never content terms.
MIN_TERM_LENGTH = 2

_STOPWORD_TEXT = """
    a about above after again against ago all also am an and any are aren as at
    be because been before being below between both but by
    can cannot could couldn
    did didn do does doesn doing don down during
    each either else ever every
    few for from further
    get got
    had hadn has hasn have haven having he her here hers herself him himself his how
    i if in into is isn it its itself
    just
    let ll
    may me might mine more most much must mustn my myself
    neither no nor not now
    of off often on once only or other ought our ours ourselves out over own
    please
    re really
    same shall shan she should shouldn so some such
    than that the their theirs them themselves then there these they this those through
    to too
    under until up upon us
    ve very
    was wasn we were weren what whatever when where whether which while who whom whose why
    will with won would wouldn
    yet you your yours yourself yourselves
"""

#: English stopwords (with contraction fragments left by the tokenizer: "don't" -> "don").
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())

_TOKEN_RE = re.compile(r"[^\W_]+")
_WORD_RE = re.compile(r"\S+")
# A sentence ends after a run of . ! ? (plus closing quotes/brackets) that is followed by
# whitespace or the end of the text, or at a newline.
_BOUNDARY_RE = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s|$)|\n")


@dataclass(frozen=True)
class Excerpt:
    """One focused excerpt of a source document.

    ``start``/``end`` are character offsets into the source document: ``document[start:end]``
    spans the whole excerpt. ``text`` equals that slice unless boilerplate sentences inside
    the span were skipped; then ``text`` is the kept pieces of the slice (each maximal run of
    adjacent kept sentences copied verbatim) joined by single spaces. ``words`` is the
    whitespace word count of ``text`` (never above the caller's ``max_words``).
    ``matched_terms`` are the query terms the anchor sentence matches (within the kept part
    when the anchor had to be truncated), in query order. ``sentence_index`` indexes the
    anchor in :func:`split_sentences` of the document.
    """

    text: str
    start: int
    end: int
    words: int
    matched_terms: tuple[str, ...]
    sentence_index: int


def _tokens(text: str) -> list[str]:
    return _TOKEN_RE.findall(text.lower())


def content_terms(query: str) -> list[str]:
    """Lowercased word tokens of ``query`` minus :data:`STOPWORDS` and short tokens.

    Tokens are runs of Unicode letters and digits (so "John's" gives "john"). Tokens shorter
    than :data:`MIN_TERM_LENGTH` are dropped. Order of first occurrence is kept; each term
    appears once.
    """
    seen: dict[str, None] = {}
    for token in _tokens(query):
        if len(token) >= MIN_TERM_LENGTH and token not in STOPWORDS:
            seen.setdefault(token, None)
    return list(seen)


def plural_variants(word: str) -> frozenset[str]:
    """Singular forms ``word`` could have if it were a regular English plural.

    ``-ies`` gives ``-y`` and ``-ie`` ("berries" -> "berry", "cookies" -> "cookie");
    ``-es`` after s, x, z, ch, sh or o gives the bare stem ("boxes" -> "box",
    "glasses" -> "glass"); any ``-s`` not preceded by another ``s`` drops the ``s``
    ("dogs" -> "dog", "horses" -> "horse"). A word ending in ``ss`` has no variant
    ("glass" is not the plural of "glas"). Variants shorter than two characters are
    dropped. Lowercase input is expected.
    """
    variants: set[str] = set()
    if word.endswith("ies") and len(word) > 4:
        variants.add(word[:-3] + "y")
    if (
        word.endswith("es")
        and len(word) > 3
        and word[:-2].endswith(("s", "x", "z", "ch", "sh", "o"))
    ):
        variants.add(word[:-2])
    if word.endswith("s") and not word.endswith("ss"):
        variants.add(word[:-1])
    return frozenset(v for v in variants if len(v) >= 2)


def terms_match(term: str, token: str) -> bool:
    """True when ``term`` and ``token`` are equal or one is a regular plural of the other."""
    return (
        term == token
        or token in plural_variants(term)
        or term in plural_variants(token)
    )


def _sentence_matches(terms: list[str], tokens: list[str]) -> tuple[str, ...]:
    """The distinct ``terms`` (in their order) that some token in ``tokens`` matches."""
    token_set = set(tokens)
    singulars: set[str] = set()
    for token in token_set:
        singulars |= plural_variants(token)
    return tuple(
        term
        for term in terms
        if term in token_set
        or term in singulars
        or not plural_variants(term).isdisjoint(token_set)
    )


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the sentences of ``text``, in order.

    A sentence ends after a run of ``.``, ``!`` or ``?`` (with any closing quotes or
    brackets) that is followed by whitespace or the end of the text, and at every newline.
    Spans are stripped of surrounding whitespace, never empty, never overlap, and together
    cover every non-whitespace character of ``text``. A period inside a token ("3.5",
    "e.g.x") does not split.
    """
    spans: list[tuple[int, int]] = []

    def add(start: int, end: int) -> None:
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start < end:
            spans.append((start, end))

    position = 0
    for m in _BOUNDARY_RE.finditer(text):
        add(position, m.start() if m.group() == "\n" else m.end())
        position = m.end()
    add(position, len(text))
    return spans


def _word_count(text: str) -> int:
    return len(text.split())


def _normalise(text: str) -> str:
    return " ".join(_tokens(text))


def _truncate_anchor(
    document: str, span: tuple[int, int], terms: list[str], max_words: int
) -> tuple[int, int, tuple[str, ...]]:
    """The ``max_words``-word run of an over-long sentence around its matched words.

    Picks the earliest run covering the most distinct terms, then re-centres it on the
    matched words it covers (all of them stay inside). Returns (start, end, matched terms).
    """
    words = list(_WORD_RE.finditer(document, span[0], span[1]))
    word_terms = [_sentence_matches(terms, _tokens(w.group())) for w in words]
    count = len(words)

    def covered(first: int) -> tuple[str, ...]:
        found = {
            t
            for terms_here in word_terms[first : first + max_words]
            for t in terms_here
        }
        return tuple(t for t in terms if t in found)

    # Slide a max_words window, counting term occurrences, to find the earliest window
    # covering the most distinct terms (linear in the sentence length).
    inside: Counter[str] = Counter()
    for terms_here in word_terms[:max_words]:
        inside.update(terms_here)
    best_first, best_count = 0, len(inside)
    for first in range(1, count - max_words + 1):
        inside.subtract(word_terms[first - 1])
        inside.update(word_terms[first + max_words - 1])
        distinct = sum(1 for value in inside.values() if value > 0)
        if distinct > best_count:
            best_first, best_count = first, distinct
    hits = [i for i in range(best_first, best_first + max_words) if word_terms[i]]
    low, high = hits[0], hits[-1]
    centred = (low + high) // 2 - max_words // 2
    first = min(max(centred, high - max_words + 1, 0), low, count - max_words)
    last = first + max_words - 1
    return words[first].start(), words[last].end(), covered(first)


def select_excerpt(
    query: str, document: str, *, max_words: int = 160
) -> Excerpt | None:
    """The single focused excerpt of ``document`` for ``query``, or None.

    Returns None when the document has at most ``max_words`` words (it is scored whole, no
    excerpt is needed), when the query has no content terms, or when no sentence matches any
    of them. Otherwise returns exactly one :class:`Excerpt` with ``words <= max_words``,
    anchored on the sentence matching the most distinct query terms (ties: earliest) and
    grown as the module docstring describes. ``max_words`` must be positive (ValueError).
    """
    if max_words < 1:
        raise ValueError(f"max_words must be positive, got {max_words}")
    if _word_count(document) <= max_words:
        return None
    terms = content_terms(query)
    if not terms:
        return None
    spans = split_sentences(document)
    sentences = [document[s:e] for s, e in spans]
    matches = [_sentence_matches(terms, _tokens(s)) for s in sentences]
    anchor = max(range(len(spans)), key=lambda i: (len(matches[i]), -i), default=None)
    if anchor is None or not matches[anchor]:
        return None

    if _word_count(sentences[anchor]) > max_words:
        start, end, matched = _truncate_anchor(
            document, spans[anchor], terms, max_words
        )
        text = document[start:end]
        return Excerpt(text, start, end, _word_count(text), matched, anchor)

    normalised = [_normalise(s) for s in sentences]
    frequency = Counter(normalised)

    def boilerplate(index: int, adjacent_kept: int) -> bool:
        norm = normalised[index]
        return not norm or frequency[norm] >= 2 or norm == normalised[adjacent_kept]

    kept = {anchor}
    budget = max_words - _word_count(sentences[anchor])
    ends = {"after": anchor, "before": anchor}  # outermost kept sentence on each side
    cursor = {"after": anchor + 1, "before": anchor - 1}
    open_sides = ["after", "before"]
    while open_sides:
        for side in list(open_sides):
            step = 1 if side == "after" else -1
            index = cursor[side]
            while 0 <= index < len(spans) and boilerplate(index, ends[side]):
                index += step
            if not 0 <= index < len(spans) or _word_count(sentences[index]) > budget:
                open_sides.remove(side)
                continue
            kept.add(index)
            budget -= _word_count(sentences[index])
            ends[side] = index
            cursor[side] = index + step

    order = sorted(kept)
    pieces: list[str] = []
    run_start = order[0]
    for previous, current in zip(order, [*order[1:], None], strict=True):
        if current is None or current != previous + 1:
            pieces.append(document[spans[run_start][0] : spans[previous][1]])
            if current is not None:
                run_start = current
    text = " ".join(pieces)
    start, end = spans[order[0]][0], spans[order[-1]][1]
    return Excerpt(text, start, end, _word_count(text), matches[anchor], anchor)
