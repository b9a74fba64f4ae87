"""A deterministic dummy retriever for tests: scores are a hash of (question, session).

It loads no model and depends only on ids and text, so runner and provenance tests can
exercise the full run contract quickly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from engram_eval.data.records import Question, Session
from engram_eval.retrieval.base import Ranking, ScoredSession, sort_scored
from engram_eval.retrieval.models import ModelRef
from engram_eval.retrieval.sources import DUMMY_SOURCES


class DummyRetriever:
    name = "dummy"

    def __init__(self, salt: str = "") -> None:
        self.salt = salt
        self._sessions: tuple[Session, ...] = ()

    def index(self, sessions: Sequence[Session]) -> None:
        self._sessions = tuple(sessions)

    def rank(self, question: Question) -> Ranking:
        order = {s.session_id: i for i, s in enumerate(self._sessions)}
        items = []
        for s in self._sessions:
            digest = hashlib.sha256(
                f"{self.salt}\0{question.question}\0{s.session_id}\0{s.user_text}".encode()
            ).digest()
            score = int.from_bytes(digest[:6], "big") / float(1 << 48)
            items.append(ScoredSession(s.session_id, score, {"hash_score": score}))
        return Ranking(question.question_id, tuple(sort_scored(items, order)))

    def describe(self) -> dict[str, Any]:
        return {"retriever": self.name, "salt": self.salt}

    def models(self) -> list[ModelRef]:
        return []

    def source_modules(self) -> list[str]:
        return list(DUMMY_SOURCES)


def make_dummy(config: Any) -> DummyRetriever:
    return DummyRetriever(salt=getattr(config, "dummy_salt", ""))
