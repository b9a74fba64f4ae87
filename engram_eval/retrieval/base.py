"""The retriever protocol, its result records and the backend registry.

Contract (every backend):

* ``index(sessions)`` receives the corpus of ONE question (never shared between
  questions) and replaces whatever was indexed before.
* ``rank(question)`` returns a :class:`Ranking` over *every* indexed session, best first,
  each session exactly once, with a JSON-serialisable trace per session.
* ``describe()`` returns the settings that define the ranking (recorded in the run
  fingerprint); ``models()`` returns the model files the backend will load, resolved on
  disk *without* loading them, so provenance can be checked before any model is loaded.
* Rankings must be deterministic for identical inputs, settings and model files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from engram_eval.data.records import Question, Session
    from engram_eval.retrieval.models import ModelRef
    from engram_eval.retrieval.settings import RetrievalSettings


@dataclass(frozen=True)
class ScoredSession:
    """One ranked session: its id, final score and a trace of how the score was made."""

    session_id: str
    score: float
    trace: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ranking:
    """A full ranking of one question's corpus, best first."""

    question_id: str
    results: tuple[ScoredSession, ...]

    @property
    def session_ids(self) -> list[str]:
        return [r.session_id for r in self.results]

    @property
    def scores(self) -> list[float]:
        return [r.score for r in self.results]

    def check_complete(self, sessions: Sequence[Session]) -> None:
        """Raise ValueError unless the ranking holds every session exactly once."""
        ids = self.session_ids
        if len(ids) != len(set(ids)):
            raise ValueError(f"question {self.question_id}: ranking repeats a session id")
        want = {s.session_id for s in sessions}
        if set(ids) != want:
            missing = sorted(want - set(ids))[:3]
            extra = sorted(set(ids) - want)[:3]
            raise ValueError(
                f"question {self.question_id}: ranking does not cover the corpus "
                f"(missing {missing}, unexpected {extra})"
            )


@runtime_checkable
class Retriever(Protocol):
    """What the runner needs from a retrieval backend (see module docstring)."""

    name: str

    def index(self, sessions: Sequence[Session]) -> None: ...

    def rank(self, question: Question) -> Ranking: ...

    def describe(self) -> dict[str, Any]: ...

    def models(self) -> list[ModelRef]: ...

    def source_modules(self) -> list[str]: ...


RetrieverFactory = Callable[["RetrievalSettings"], Retriever]
_REGISTRY: dict[str, tuple[str, str]] = {}
#: What builds a retriever of any name not registered: a system from outside the package.
_OUTSIDE = ("engram_eval.retrieval.systems", "create_system")


def register(name: str, module: str, factory: str) -> None:
    """Register backend ``name`` as ``module:factory`` (imported lazily on first use)."""
    _REGISTRY[name] = (module, factory)


def available() -> list[str]:
    return sorted(_REGISTRY)


def is_builtin(name: str) -> bool:
    """Whether ``name`` is one of the package's own retrievers; any other name is a system
    from outside the package (:mod:`engram_eval.retrieval.systems`)."""
    return name in _REGISTRY


def create(name: str, config: RetrievalSettings) -> Retriever:
    """Build the named backend from retrieval settings (a run's
    :class:`~engram_eval.runs.config.RunConfig` is one: it inherits them)."""
    import importlib

    # any other name: a system from outside the package (an entry point, py:MODULE:FACTORY
    # or http), built by engram_eval.retrieval.systems.create_system
    module, factory = _REGISTRY.get(name, _OUTSIDE)
    fn = getattr(importlib.import_module(module), factory)
    retriever: Retriever = fn(name, config) if name not in _REGISTRY else fn(config)
    return retriever


def sort_scored(items: Sequence[ScoredSession], order: Mapping[str, int]) -> list[ScoredSession]:
    """Sort by score descending; ties broken by corpus order (``order``: id -> position)."""
    return sorted(items, key=lambda r: (-r.score, order[r.session_id]))


register("flat-bm25", "engram_eval.retrieval.bm25", "make_flat_bm25")
register("bm25", "engram_eval.retrieval.hybrid", "make_bm25_only")
register("dense", "engram_eval.retrieval.hybrid", "make_dense_only")
register("hybrid", "engram_eval.retrieval.hybrid", "make_hybrid")
register("dummy", "engram_eval.retrieval.dummy", "make_dummy")
register("memo-lexical", "engram_eval.retrieval.memo_lexical", "make_memo_lexical")
