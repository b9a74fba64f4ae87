"""The production gate at session level: a question's haystack sessions as its memories.

One path for everything that measures the gate on real conversations (the abstention sweep,
the calibration on real sessions and its held-out measurement): for each question, its
haystack sessions become memories (the user text when the haystack has chat roles, as on
LongMemEval; every turn otherwise, as on LoCoMo), cut into dense pieces exactly as the
benchmark cuts user text, encoded (through the embedding cache when the engine has one), and
searched with the production code.

Which questions take part, and their gold (read only to label, after search):

* unanswerable: LongMemEval ``_abs`` questions; LoCoMo category 5 (adversarial);
* answerable: LongMemEval questions with gold under the ``answerable`` protocol; LoCoMo items
  of categories 1-4 with a resolved evidence session (``locomo_no_adversarial``);
* every other question (answerable in name only, no gold session) is left out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engram_eval.data.records import Question, corpus_shape, has_chat_roles
from engram_eval.production.search import Engine
from engram_eval.production.store import Memory
from engram_eval.scoring import protocols as P


@dataclass(frozen=True)
class SessionQuestion:
    """One question's memories (its haystack sessions), their pieces and vectors, the
    memory shape of its haystack (:func:`~engram_eval.data.records.corpus_shape`: ``chat``
    on LongMemEval, ``people`` on LoCoMo; search takes a per-shape calibration's model by
    it), and the label side: whether it is unanswerable and its gold session ids."""

    question: Question
    memories: tuple[Memory, ...]
    pieces: tuple[tuple[int, str], ...]
    vectors: np.ndarray
    unanswerable: bool
    gold: tuple[str, ...]
    shape: str = "chat"


def group_of(question_id: str, fmt: str) -> str:
    """A question's fold and resampling group: the conversation on LoCoMo (``conv-26:q0`` ->
    ``conv-26``), the question elsewhere (a fixture's records carry their case as group
    instead)."""
    return question_id.split(":", 1)[0] if fmt == "locomo" else question_id


def labels(q: Question, fmt: str) -> tuple[bool, tuple[str, ...]] | None:
    """(unanswerable, gold) of ``q`` (module docstring), None when it takes no part."""
    if fmt == "locomo":
        unans = bool(q.get_extra("adversarial"))
        gold = () if unans else (P.gold_for(q, "locomo_no_adversarial") or ())
    else:
        unans = q.is_abstention
        gold = () if unans else (P.gold_for(q, "answerable") or ())
    if not unans and not gold:
        return None
    return unans, tuple(gold)


def question_memories(engine: Engine, q: Question) -> tuple[tuple[Memory, ...],
                                                           tuple[tuple[int, str], ...],
                                                           np.ndarray]:
    """The memories, dense pieces and piece vectors of ``q``'s haystack."""
    roles = has_chat_roles(q.sessions)
    mems = tuple(Memory(s.session_id, s.user_text if roles else s.text(), s.date)
                 for s in q.sessions)
    enc = engine.encoder()
    pcs = engine.session_pieces(q.sessions, role="user" if roles else None)
    pieces = tuple((pc.session_index, pc.text) for pc in pcs)
    vecs = enc.encode([t for _, t in pieces])
    return mems, pieces, np.asarray(vecs)


def session_questions(engine: Engine, questions: Sequence[Question], fmt: str
                      ) -> Iterator[SessionQuestion]:
    """Every question that takes part, with its memories ready to search."""
    for q in questions:
        lab = labels(q, fmt)
        if lab is None:
            continue
        mems, pieces, vecs = question_memories(engine, q)
        yield SessionQuestion(q, mems, pieces, vecs, lab[0], lab[1], corpus_shape(q.sessions))


def search_all(engine: Engine, sq: SessionQuestion) -> Any:
    """The gated search over every memory with the cut-off at 1.0 and no result limit, so
    every candidate's confidence (and, with the excerpt retry, its excerpt's) is in the
    trace: the confidences a sweep over cut-offs needs."""
    from engram_eval.production.search import search_memories

    return search_memories(engine, sq.question.question, now=sq.question.question_date,
                           memories=sq.memories, pieces=sq.pieces, vectors=sq.vectors,
                           limit=len(sq.memories), min_confidence=1.0, shape=sq.shape)
