"""``memo-lexical``: the session search of the lexical memory system "Memo", rebuilt on a real
SQLite FTS5 index so that its published figures can be reproduced and compared here.

What the seed document (``shared/seeds/001_…``) says Memo does, and how this module does it:

* **Index.** One FTS5 row per *event* (message / turn), as Memo's backend indexes events:
  one in-memory SQLite database per question's haystack (the standard library's
  :mod:`sqlite3`, table ``events(body)``, tokenizer ``unicode61`` by default, rowid = the
  event's sequence number in haystack order). Every turn is an event, whatever its role.
* **Phrase step.** The whole question becomes one quoted FTS5 phrase (``"..."`` with inner
  double quotes doubled), so quotes, ``AND``, ``OR``, ``NOT``, ``NEAR``, ``*``, ``:``,
  parentheses and ``^`` inside a question are text, never query syntax. Its top
  ``memo_limit`` sessions in backend order are the phrase hits.
* **Weighted step.** The question is tokenized content-word-first: content words fill the
  ``memo_window``-token window first, stopwords only the slots left. Each window token and
  each consecutive pair of window tokens is its own quoted-phrase search keeping its top
  ``max(memo_limit, memo_page_min)`` sessions in backend order. A session's merged weight is
  the sum of the weights of the phrases whose page holds it: a token weighs its length in
  code points, a pair the length of its string ``"a b"`` (both tokens and the space). The
  merged list is ordered by weight, then time (latest first), then session id.
* **Result.** Phrase hits first, then weighted hits, each session once, cut at
  ``memo_limit``: the sessions Memo would return (trace ``returned: true``).
* **Backend order of one phrase.** A session is a candidate when any of its events matches
  the phrase (FTS5 ``MATCH`` decides). Per session one representative event wins, by
  ``match_count`` DESC, ``document_length`` ASC, time DESC, sequence DESC; sessions rank by
  their representative's ``match_count`` DESC, ``document_length`` ASC, time DESC,
  ``session_id`` ASC, sequence DESC. ``match_count`` = non-overlapping occurrences of the
  phrase's token sequence in the event's token sequence, both as FTS5 tokenized them (read
  back from an ``fts5vocab`` ``instance`` table); ``document_length`` = the event text's
  length in code points.
* **Time proxy.** Messages carry no timestamps in either dataset, so an event's time is
  ``(session time, index of the turn in its session)``. Session time is read from the
  session's date string: LongMemEval ``2023/05/20 (Sat) 02:21`` and LoCoMo ``1:56 pm on 8
  May, 2023`` to the minute; another string the package's date parser reads, to the day; an
  empty or unreadable date sorts before every dated session (it is "oldest"). The rule is
  decided by the data, never by a dataset name.

Choices where the description is open (each one a setting, recorded in the sidecar):

* Question tokens (``memo_min_token_chars``, ``memo_cjk_min_run``): lower-cased maximal runs
  of letters and digits, Han characters split from other scripts; a non-Han token needs at
  least 2 code points, a Han run at least 2 (Memo 0.7's CJK rule); a repeated token counts
  once (first occurrence).
* Stopwords (``memo_stopwords``): the description does not list Memo's words; it only names
  15 that Memo's list does NOT hold (an ablation it rejected: ever, whether, discuss, last,
  week, have, has, had, will, your, my, me, our, their, some). ``memo-en-v1`` (default) is
  this module's list of English function words (:data:`STOPWORDS_EN_V1`; it holds 10 of
  those 15); ``memo-en-narrow`` is the same list without them (closer to what the seed says
  of Memo's list, but 2 points lower hit@1 on the LongMemEval S development split, where
  Memo's own ablation also found the larger list better); ``none`` switches the
  content-first rule off.
* Window order (``memo_window_order``): ``priority`` (default) keeps the window in selection
  order, content words (in question order) before the stopwords that filled the rest, and
  pairs are neighbours in that list; ``question`` puts the chosen tokens back in question
  order before pairing.
* Whole-question phrase: the raw question text; a question whose text holds no token skips
  the step (an empty FTS5 phrase matches nothing).
* Sessions past ``memo_limit`` (Memo returns none, our metrics need a full ranking): the
  rest of the merged weighted list, then every session no phrase found, by time DESC and
  session id ASC (trace ``stage: unmatched``). hit@1/5/10 never see this tail; MRR can (a
  gold session at rank 11 or lower adds at most 1/11 per question; Memo's MRR, over its 10
  results, would count 0).
* Scores: Memo exposes ranks, not scores, so a session's score is ``n - rank0`` (strictly
  decreasing over the ranking; tools that re-sort by score keep the order). The trace keeps
  the real quantities: stage, summed weight and which phrases found the session.

``describe()`` names the SQLite library version (``engine``): the tokenizer belongs to it, so
it is part of the run's fingerprint, and ``verify --rerun`` refuses a machine whose SQLite
differs instead of comparing rankings made by another tokenizer. ``hit@1/5/10`` with the
default ``memo_limit`` of 10 are Memo's returned list exactly.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engram_eval.data.records import Question, Session
from engram_eval.retrieval.base import Ranking, ScoredSession
from engram_eval.retrieval.models import ModelRef
from engram_eval.retrieval.settings import MEMO_STOPWORD_LISTS, MemoLexicalSettings
from engram_eval.retrieval.sources import MEMO_LEXICAL_SOURCES

NAME = "memo-lexical"

#: English function words for the content-first window (``memo_stopwords: memo-en-v1``).
STOPWORDS_EN_V1 = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its itself
just me more most my myself no nor not now of off on once only or other our ours ourselves out
over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves s t d ll m re ve
""".split())
#: Words the seed names as NOT in Memo's shipped list (its rejected "+15 stopwords" ablation).
NOT_MEMO_STOPWORDS = frozenset("ever whether discuss last week have has had will your my me "
                               "our their some".split())
#: ``memo-en-narrow``: :data:`STOPWORDS_EN_V1` without :data:`NOT_MEMO_STOPWORDS`.
STOPWORDS_EN_NARROW = STOPWORDS_EN_V1 - NOT_MEMO_STOPWORDS

STOPWORD_LISTS = {"memo-en-v1": STOPWORDS_EN_V1, "memo-en-narrow": STOPWORDS_EN_NARROW,
                  "none": frozenset()}

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_HAN}]+|[^\W_{_HAN}]+")
_IS_HAN = re.compile(rf"[{_HAN}]")
#: LongMemEval ``2023/05/20 (Sat) 02:21``
_LME_DATE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([A-Za-z]+\))?\s*(\d{1,2}):(\d{2})")
#: LoCoMo ``1:56 pm on 8 May, 2023``
_LOCOMO_DATE = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+"
                          r"([A-Za-z]+),?\s+(\d{4})", re.IGNORECASE)
_MONTHS = {m: i for i, m in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december"), start=1)}


assert set(STOPWORD_LISTS) == set(MEMO_STOPWORD_LISTS)


# -- question side ----------------------------------------------------------------------------
def question_tokens(text: str, s: MemoLexicalSettings) -> list[str]:
    """The question's distinct tokens in question order (module docstring)."""
    out: list[str] = []
    seen: set[str] = set()
    for tok in _TOKEN.findall(text.lower()):
        need = s.memo_cjk_min_run if _IS_HAN.match(tok) else s.memo_min_token_chars
        if len(tok) >= need and tok not in seen:
            seen.add(tok)
            out.append(tok)
    return out


def window(tokens: Sequence[str], s: MemoLexicalSettings) -> list[str]:
    """Content words first, stopwords fill what is left of the window."""
    stop = STOPWORD_LISTS[s.memo_stopwords]
    content = [t for t in tokens if t not in stop]
    chosen = (content + [t for t in tokens if t in stop])[: s.memo_window]
    if s.memo_window_order == "question":
        keep = set(chosen)
        chosen = [t for t in tokens if t in keep]
    return chosen


def weighted_phrases(text: str, s: MemoLexicalSettings) -> list[tuple[str, str, int]]:
    """``(kind, phrase, weight)`` of the weighted step: window tokens, then adjacent pairs."""
    win = window(question_tokens(text, s), s)
    out = [("token", t, len(t)) for t in win]
    for a, b in zip(win, win[1:], strict=False):
        w = len(a) + 1 + len(b) if s.memo_pair_weight == "string" else len(a) + len(b)
        out.append(("pair", f"{a} {b}", w))
    return out


def fts_phrase(text: str) -> str:
    """``text`` as one quoted FTS5 phrase: everything inside is tokenized as text."""
    return '"' + text.replace("\x00", " ").replace('"', '""') + '"'


# -- time proxy -------------------------------------------------------------------------------
def session_time(date: str) -> float | None:
    """Seconds since the epoch (naive UTC) of a session date string, or None (module
    docstring: to the minute for the two datasets' layouts, else to the day)."""
    m = _LME_DATE.match(date or "")
    try:
        if m:
            y, mo, d, h, mi = (int(x) for x in m.groups())
            return datetime(y, mo, d, h, mi).timestamp()
        m = _LOCOMO_DATE.match(date or "")
        if m and m.group(5).lower() in _MONTHS:
            h, mi = int(m.group(1)) % 12, int(m.group(2))
            h += 12 if m.group(3).lower() == "p" else 0
            return datetime(int(m.group(6)), _MONTHS[m.group(5).lower()], int(m.group(4)),
                            h, mi).timestamp()
    except ValueError:
        return None
    if not (date or "").strip():
        return None
    from engram_eval.retrieval.temporal import parse_date

    day = parse_date(date)
    return None if day is None else datetime(day.year, day.month, day.day).timestamp()


# -- the index --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Event:
    seq: int
    session: int  # position of the session in the haystack
    turn: int
    length: int
    time: tuple[float, int]


class MemoIndex:
    """One haystack in an in-memory FTS5 table, one row per event, with the backend order of
    a quoted phrase (:meth:`search`)."""

    def __init__(self, sessions: Sequence[Session], tokenizer: str = "unicode61",
                 event_text: str = "content") -> None:
        self.sessions = tuple(sessions)
        self.session_times = [session_time(s.date) for s in self.sessions]
        self.db = sqlite3.connect(":memory:")
        self.db.execute(f"CREATE VIRTUAL TABLE events USING fts5(body, tokenize='{tokenizer}')")
        self.db.execute(f"CREATE VIRTUAL TABLE scratch USING fts5(body, tokenize='{tokenizer}')")
        self.db.execute("CREATE VIRTUAL TABLE events_terms USING fts5vocab(events, instance)")
        self.db.execute("CREATE VIRTUAL TABLE scratch_terms USING fts5vocab(scratch, instance)")
        self.events: dict[int, _Event] = {}
        rows = []
        seq = 0
        for si, (s, t0) in enumerate(zip(self.sessions, self.session_times, strict=True)):
            stime = float("-inf") if t0 is None else t0
            for turn in s.turns:
                seq += 1
                text = (turn.content if event_text == "content"
                        else f"{turn.role}: {turn.content}")
                body = text.replace("\x00", " ")
                self.events[seq] = _Event(seq, si, turn.index, len(text), (stime, turn.index))
                rows.append((seq, body))
        self.db.executemany("INSERT INTO events(rowid, body) VALUES (?, ?)", rows)
        self.tokens: dict[int, list[str]] = {}
        for doc, term in self.db.execute(
                "SELECT doc, term FROM events_terms ORDER BY doc, offset"):
            self.tokens.setdefault(doc, []).append(term)

    def close(self) -> None:
        self.db.close()

    def fts_tokens(self, text: str) -> list[str]:
        """``text`` as the index's FTS5 tokenizer splits it."""
        self.db.execute("INSERT INTO scratch(rowid, body) VALUES (1, ?)",
                        (text.replace("\x00", " "),))
        try:
            return [t for (t,) in self.db.execute(
                "SELECT term FROM scratch_terms ORDER BY offset")]
        finally:
            self.db.execute("DELETE FROM scratch")

    def search(self, phrase: str, k: int) -> list[dict[str, Any]]:
        """The top ``k`` sessions for quoted ``phrase`` in backend order: one entry per
        session with its representative event (module docstring)."""
        want = self.fts_tokens(phrase)
        if not want:
            return []
        matched = [r for (r,) in self.db.execute(
            "SELECT rowid FROM events WHERE events MATCH ?", (fts_phrase(phrase),))]
        best: dict[int, tuple[Any, ...]] = {}
        for seq in matched:
            ev = self.events[seq]
            count = count_occurrences(self.tokens.get(seq, []), want)
            key = (-count, ev.length, -ev.time[0], -ev.time[1], -seq)
            if ev.session not in best or key < best[ev.session][0]:
                best[ev.session] = (key, ev, count)
        ranked = sorted(best.values(), key=lambda b: (
            b[0][0], b[0][1], b[0][2], b[0][3], self.sessions[b[1].session].session_id,
            b[0][4]))
        return [{"session": b[1].session, "match_count": b[2], "event_turn": b[1].turn,
                 "event_length": b[1].length} for b in ranked[:k]]


def count_occurrences(tokens: Sequence[str], phrase: Sequence[str]) -> int:
    """Non-overlapping occurrences of the token sequence ``phrase`` in ``tokens``."""
    n, m = len(tokens), len(phrase)
    if m == 0 or m > n:
        return 0
    if m == 1:
        return tokens.count(phrase[0]) if isinstance(tokens, list) else sum(
            1 for t in tokens if t == phrase[0])
    count, i = 0, 0
    first = phrase[0]
    while i <= n - m:
        if tokens[i] == first and list(tokens[i:i + m]) == list(phrase):
            count += 1
            i += m
        else:
            i += 1
    return count


# -- the retriever ----------------------------------------------------------------------------
class MemoLexical:
    """Memo's session search (module docstring)."""

    name = NAME

    def __init__(self, settings: MemoLexicalSettings | None = None) -> None:
        self.settings = settings or MemoLexicalSettings()
        self._sessions: tuple[Session, ...] = ()
        self._index: MemoIndex | None = None
        self._qtrace: dict[tuple[str, str], dict[str, Any]] = {}

    def index(self, sessions: Sequence[Session]) -> None:
        sessions = tuple(sessions)
        if self._index is not None and sessions == self._sessions:
            return  # the same haystack again (LoCoMo: every item of a conversation)
        if self._index is not None:
            self._index.close()
        self._sessions = sessions
        self._index = MemoIndex(sessions, self.settings.memo_tokenizer,
                                self.settings.memo_event_text)

    def rank(self, question: Question) -> Ranking:
        if self._index is None:
            self.index(())
        assert self._index is not None
        return self._rank(question, self._index)

    def _rank(self, question: Question, idx: MemoIndex) -> Ranking:
        s = self.settings
        sessions = self._sessions
        n = len(sessions)
        found: dict[int, list[dict[str, Any]]] = {}

        def note(si: int, entry: dict[str, Any]) -> None:
            found.setdefault(si, []).append(entry)

        phrase_hits = idx.search(question.question, s.memo_limit)
        for r, hit in enumerate(phrase_hits):
            note(hit["session"], {"kind": "question", "phrase": None, "weight": 0, "rank": r + 1,
                                  "match_count": hit["match_count"],
                                  "event_turn": hit["event_turn"]})
        phrases = weighted_phrases(question.question, s)
        page = max(s.memo_limit, s.memo_page_min)
        weight: dict[int, int] = {}
        pages = []
        for kind, phrase, w in phrases:
            hits = idx.search(phrase, page)
            pages.append({"kind": kind, "phrase": phrase, "weight": w, "sessions": len(hits)})
            for r, hit in enumerate(hits):
                weight[hit["session"]] = weight.get(hit["session"], 0) + w
                note(hit["session"], {"kind": kind, "phrase": phrase, "weight": w,
                                      "rank": r + 1, "match_count": hit["match_count"],
                                      "event_turn": hit["event_turn"]})

        def stime(si: int) -> float:
            t = idx.session_times[si]
            return float("-inf") if t is None else t

        merged = sorted(weight, key=lambda si: (-weight[si], -stime(si),
                                                sessions[si].session_id))
        order: list[int] = []
        stage: dict[int, str] = {}
        for si in [h["session"] for h in phrase_hits]:
            order.append(si)
            stage[si] = "phrase"
        for si in merged:
            if si not in stage:
                order.append(si)
                stage[si] = "weighted"
        rest = sorted((si for si in range(n) if si not in stage),
                      key=lambda si: (-stime(si), sessions[si].session_id))
        for si in rest:
            order.append(si)
            stage[si] = "unmatched"
        results = []
        for pos, si in enumerate(order):
            results.append(ScoredSession(sessions[si].session_id, float(n - pos), {
                "stage": stage[si], "returned": pos < s.memo_limit,
                "weight": weight.get(si, 0), "found_by": found.get(si, [])}))
        self._qtrace = {(question.question_id, question.question): {
            "retriever": NAME, "question_phrase_hits": len(phrase_hits),
            "window": [p for k, p, _ in phrases if k == "token"], "phrases": pages}}
        return Ranking(question.question_id, tuple(results))

    def question_trace(self, question: Question) -> dict[str, Any]:
        """The question-level trace of the last ``rank(question)``: the window, every
        phrase with its kind, weight and how many sessions its page held."""
        return dict(self._qtrace.get((question.question_id, question.question), {}))

    def describe(self) -> dict[str, Any]:
        return {"retriever": NAME, "granularity": "event (one FTS5 row per turn)",
                "engine": f"sqlite {sqlite3.sqlite_version} fts5", **self.settings.describe()}

    def models(self) -> list[ModelRef]:
        return []

    def source_modules(self) -> list[str]:
        return list(MEMO_LEXICAL_SOURCES)


def make_memo_lexical(config: Any) -> MemoLexical:
    return MemoLexical(MemoLexicalSettings.from_config(config))
