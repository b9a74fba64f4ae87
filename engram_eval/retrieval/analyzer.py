"""The lexical analyser of the BM25 signals: text -> index terms.

Three settings (:class:`engram_eval.retrieval.settings.RetrievalSettings`, group ``lexical``),
recorded in every run's sidecar and fingerprint:

* ``lexical_tokenizer``:
  - ``word`` (the original rule): lower-cased ``[a-z0-9]+('[a-z]+)?`` runs; every other
    character separates (so accented letters and CJK text are dropped);
  - ``unicode``: case-folded Unicode letter/digit runs (with one inner apostrophe part; the
    typographic apostrophe counts as one), so accented words and digits are kept whole, and
    every Han, Hiragana, Katakana or Hangul character is a term of its own (those scripts do
    not separate words by spaces).
* ``lexical_stemmer``: ``none`` or ``snowball-english`` (the Snowball English stemmer of
  PyStemmer, a maintained C implementation; a term without a Latin letter is left as it is).
* ``lexical_stopwords``: ``none`` or ``en-v1`` (``engram_eval/lexicon/stopwords-en-v1.txt``,
  153 English function words; its sha256 is in the retriever's description). Stopwords are
  removed before stemming, so they match the tokeniser's forms.

``flat-bm25`` never uses this module: it keeps the LongMemEval reference's ``split(" ")``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

TOKENIZERS = ("word", "unicode")
STEMMERS = ("none", "snowball-english")
STOPWORD_LISTS = ("none", "en-v1")
LEXICON_DIR = Path(__file__).resolve().parent.parent / "lexicon"

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_UNICODE = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
#: Han (with extension A and compatibility ideographs), Hiragana, Katakana, Hangul syllables.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_LATIN = re.compile(r"[a-z]")


#: list name -> its file in ``engram_eval/lexicon/`` (hashed as a source of every run
#: whose retriever can read it)
STOPWORD_FILES = {"en-v1": "stopwords-en-v1.txt"}


def stopword_file(name: str) -> Path:
    return LEXICON_DIR / STOPWORD_FILES[name]


@lru_cache(maxsize=8)
def stopwords(name: str) -> tuple[frozenset[str], str]:
    """(the words, the file's sha256) of a stopword list; ``none`` is empty."""
    if name == "none":
        return frozenset(), ""
    if name not in STOPWORD_LISTS:
        raise ValueError(f"unknown stopword list {name!r}")
    raw = stopword_file(name).read_bytes()
    words = (line.split("#", 1)[0].strip() for line in raw.decode("utf-8").splitlines())
    return frozenset(w for w in words if w), hashlib.sha256(raw).hexdigest()


def _unicode_tokens(text: str) -> list[str]:
    out: list[str] = []
    for tok in _UNICODE.findall(text.replace("\u2019", "'").casefold()):
        if not _CJK.search(tok):
            out.append(tok)
            continue
        run = ""
        for ch in tok:  # CJK characters one by one, other runs kept together
            if _CJK.match(ch):
                if run:
                    out.append(run)
                    run = ""
                out.append(ch)
            else:
                run += ch
        if run:
            out.append(run)
    return out


@dataclass(frozen=True)
class Analyzer:
    """One analyser; ``analyze(text)`` gives the index terms in text order."""

    tokenizer: str = "word"
    stemmer: str = "none"
    stopwords: str = "none"

    def __post_init__(self) -> None:
        for value, allowed, what in ((self.tokenizer, TOKENIZERS, "tokenizer"),
                                     (self.stemmer, STEMMERS, "stemmer"),
                                     (self.stopwords, STOPWORD_LISTS, "stopwords")):
            if value not in allowed:
                raise ValueError(f"unknown lexical {what} {value!r}; one of {list(allowed)}")

    def tokens(self, text: str) -> list[str]:
        if self.tokenizer == "word":
            return _WORD.findall(text.lower())
        return _unicode_tokens(text)

    def analyze(self, text: str) -> list[str]:
        toks = self.tokens(text)
        stop, _ = stopwords(self.stopwords)
        if stop:
            toks = [t for t in toks if t not in stop]
        if self.stemmer == "snowball-english" and toks:
            stem = _snowball()
            latin = [i for i, t in enumerate(toks) if _LATIN.search(t)]
            stems = stem.stemWords([toks[i] for i in latin])
            for i, s in zip(latin, stems, strict=True):
                toks[i] = s
        return toks

    def describe(self) -> dict[str, Any]:
        """What a retriever's description records beside the three settings."""
        d: dict[str, Any] = {}
        if self.stopwords != "none":
            d["stopwords_sha256"] = stopwords(self.stopwords)[1]
        if self.stemmer != "none":
            from importlib.metadata import version

            d["stemmer_library"] = f"PyStemmer {version('PyStemmer')}"
        return d


@lru_cache(maxsize=1)
def _snowball() -> Any:
    try:
        import Stemmer
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise ImportError("the snowball-english stemmer needs PyStemmer: "
                          "pip install PyStemmer") from e
    return Stemmer.Stemmer("english")


#: The original analyser (``word``, no stemming, no stopwords): what every run made before
#: these settings existed used.
WORD = Analyzer()


def analyzer_of(settings: Any) -> Analyzer:
    """The analyser of a settings object (its three ``lexical_*`` fields)."""
    return Analyzer(settings.lexical_tokenizer, settings.lexical_stemmer,
                    settings.lexical_stopwords)
