"""Typed, frozen records for questions, sessions and turns.

Every loader returns these records; nothing downstream reads raw JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

#: The chat roles of LongMemEval-style corpora.
CHAT_ROLES = frozenset({"user", "assistant"})


@dataclass(frozen=True)
class Turn:
    """One utterance of a session.

    ``index`` is the turn's position in its session (0-based, as in the file).
    ``has_answer`` is the dataset's evidence flag (False when the file omits it).
    ``turn_id`` is a dataset-specific id (LoCoMo ``dia_id``), empty when absent.
    """

    role: str
    content: str
    index: int
    has_answer: bool = False
    turn_id: str = ""


@dataclass(frozen=True)
class Session:
    """A past conversation session: its id, date string (as in the file) and turns."""

    session_id: str
    date: str
    turns: tuple[Turn, ...]

    def text(self, role: str | None = None, sep: str = "\n") -> str:
        """Concatenated content of the turns with ``role`` (all turns when None)."""
        return sep.join(t.content for t in self.turns if role is None or t.role == role)

    @property
    def user_text(self) -> str:
        return self.text("user")

    @property
    def assistant_text(self) -> str:
        return self.text("assistant")


@dataclass(frozen=True)
class Question:
    """A retrieval question with its own haystack (one corpus per question).

    ``sessions`` holds each distinct session once, in first-seen haystack order; repeated
    identical session ids in the file are collapsed by the loader and counted in its report.
    ``answer_session_ids`` is the dataset's gold list, unchanged. ``extra`` carries
    dataset-specific fields (e.g. LoCoMo category, evidence ids) as sorted key/value pairs.
    """

    question_id: str
    question_type: str
    question: str
    answer: str
    question_date: str
    sessions: tuple[Session, ...]
    answer_session_ids: tuple[str, ...]
    extra: tuple[tuple[str, object], ...] = field(default=())

    @property
    def is_abstention(self) -> bool:
        return self.question_id.endswith("_abs")

    @property
    def session_ids(self) -> tuple[str, ...]:
        return tuple(s.session_id for s in self.sessions)

    @property
    def gold_absent(self) -> tuple[str, ...]:
        """The ``answer_session_ids`` that are not sessions of this question's haystack: no
        retriever can rank them, so they count as missed wherever the gold is
        ``answer_session_ids``."""
        if not self.answer_session_ids:
            return ()
        haystack = set(self.session_ids)
        return tuple(a for a in self.answer_session_ids if a not in haystack)

    def get_extra(self, key: str, default: object = None) -> object:
        for k, v in self.extra:
            if k == key:
                return v
        return default


def has_chat_roles(sessions: Iterable[Session]) -> bool:
    """The one "no chat roles -> every turn is user text" rule, decided per corpus.

    True when any turn of the corpus (a question's haystack) has the role ``user`` or
    ``assistant`` (LongMemEval). False for corpora whose roles are speaker names (LoCoMo
    conversations between two people): there every turn counts as user text and there is
    no assistant text. Every retriever decides this once per corpus with this function and
    then uses :func:`user_turns` / :func:`user_document` / :func:`assistant_document`.
    """
    return any(t.role in CHAT_ROLES for s in sessions for t in s.turns)


#: The memory shapes a corpus can have (:func:`corpus_shape`); a confidence calibration is
#: fitted per shape (:mod:`engram_eval.production.confidence`, version 4).
SHAPES = ("chat", "people", "short")


def corpus_shape(sessions: Iterable[Session]) -> str:
    """The memory shape of a corpus, read from its turns, extending :func:`has_chat_roles`
    (the fusion structure) with a third case:

    * ``people``: no chat roles -- named speakers talking to each other (LoCoMo); the
      structure :func:`has_chat_roles` calls False;
    * ``short``: chat roles, and every session is one ``user`` turn -- isolated memories,
      one per item, as a production store keeps them (its memories become such sessions);
    * ``chat``: chat roles otherwise -- user/assistant sessions (LongMemEval).

    An empty corpus has no chat roles, so it is ``people`` (as :func:`has_chat_roles` says).
    """
    sess = list(sessions)
    if not has_chat_roles(sess):
        return "people"
    if all(len(s.turns) == 1 and s.turns[0].role == "user" for s in sess):
        return "short"
    return "chat"


def user_turns(session: Session, chat_roles: bool) -> tuple[Turn, ...]:
    """The turns that count as user text: ``role == "user"`` in a chat corpus, every turn
    otherwise (see :func:`has_chat_roles`)."""
    if not chat_roles:
        return session.turns
    return tuple(t for t in session.turns if t.role == "user")


def user_document(session: Session, chat_roles: bool, sep: str = "\n") -> str:
    """The session's user text joined by ``sep`` (every turn without chat roles)."""
    return sep.join(t.content for t in user_turns(session, chat_roles))


def assistant_document(session: Session, chat_roles: bool, sep: str = "\n") -> str:
    """The session's assistant text (empty without chat roles)."""
    if not chat_roles:
        return ""
    return sep.join(t.content for t in session.turns if t.role == "assistant")


class QuestionSet:
    """Mixin for loaded datasets that hold ``questions: tuple[Question, ...]``."""

    questions: tuple[Question, ...]

    def by_id(self) -> dict[str, Question]:
        """A new ``question_id -> Question`` dict (ids are unique, checked at load)."""
        return {q.question_id: q for q in self.questions}

    def __len__(self) -> int:
        return len(self.questions)

    def __iter__(self) -> Iterator[Question]:
        return iter(self.questions)


def has_user_evidence(session: Session) -> bool:
    """True when a *user* turn of ``session`` carries ``has_answer`` (the LongMemEval
    reference's test for a gold session; the one ``noans`` rule, used by the loader's report
    and by :mod:`engram_eval.scoring.protocols`)."""
    return any(t.role == "user" and t.has_answer for t in session.turns)
