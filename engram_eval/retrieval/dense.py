"""Dense retrieval over user text: pieces, a FAISS index per question, session scores.

Sessions are far longer than the embedding model's window (all-MiniLM-L6-v2 reads 256
word pieces; a LongMemEval_S session holds ~2k). Nothing is truncated silently: each user
turn is one piece, a turn longer than ``piece_words`` words is split into overlapping word
windows, and a window that still exceeds the model's token limit (checked with the model's
own tokenizer when one is available) is halved until it fits. A session's dense score
aggregates its pieces' cosine similarities to the question:

* ``max`` (default): the best piece;
* ``max_mean``: 0.8 x best + 0.2 x mean of the best three (rewards several matching turns).

With ``top_m`` above 1 (``dense_turn_top_m``, aggregate ``max`` only) a session's score is
turn-level instead: each turn scores its best piece (the windows of one long turn are one
turn), and the session the sum of its ``top_m`` best turns (all it has when fewer); the
contributing turns are kept (``top_turns``) for the trace. ``top_m`` 1 is ``max``.

The piece texts are what the embedding cache stores, so the split rule is part of the run
fingerprint (``dense_piece_words``, ``dense_piece_overlap``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from engram_eval.data.records import Session


@dataclass(frozen=True)
class Piece:
    session_index: int
    turn_index: int
    text: str


def word_windows(text: str, size: int, overlap: int) -> list[str]:
    """Split ``text`` into windows of at most ``size`` words, consecutive windows sharing
    ``overlap`` words. Empty text gives no window."""
    words = text.split()
    if not words:
        return []
    if len(words) <= size:
        return [" ".join(words)]
    step = size - overlap
    out = []
    for start in range(0, len(words), step):
        out.append(" ".join(words[start : start + size]))
        if start + size >= len(words):
            break
    return out


def fit_to_tokens(text: str, count_tokens: Callable[[str], int] | None, limit: int) -> list[str]:
    """Halve ``text`` (by words) until every part is within ``limit`` tokens."""
    if count_tokens is None or count_tokens(text) <= limit:
        return [text]
    words = text.split()
    if len(words) <= 1:
        return [text]  # a single giant token sequence: nothing sensible to split
    mid = len(words) // 2
    return (fit_to_tokens(" ".join(words[:mid]), count_tokens, limit)
            + fit_to_tokens(" ".join(words[mid:]), count_tokens, limit))


def user_pieces(sessions: Sequence[Session], size: int, overlap: int,
                count_tokens: Callable[[str], int] | None = None,
                token_limit: int = 256, role: str | None = "user") -> list[Piece]:
    """Pieces of the turns with ``role`` (every turn when ``role`` is None)."""
    pieces = []
    for si, s in enumerate(sessions):
        for t in s.turns:
            if role is not None and t.role != role:
                continue
            for w in word_windows(t.content, size, overlap):
                for part in fit_to_tokens(w, count_tokens, token_limit):
                    pieces.append(Piece(si, t.index, part))
    return pieces


def _faiss() -> object:
    try:
        import faiss
    except ImportError as e:  # pragma: no cover - declared dependency
        raise ImportError("faiss is required for dense retrieval: pip install faiss-cpu") from e
    return faiss


@dataclass(frozen=True)
class DenseScores:
    """Per-session dense score, the index of its best piece's turn, and the piece count;
    with ``top_m`` above 1 also the turns summed (turn indices, best first)."""

    scores: np.ndarray
    best_turn: list[int]
    n_pieces: list[int]
    top_turns: list[list[int]] | None = None


def session_scores(pieces: Sequence[Piece], vectors: np.ndarray, query: np.ndarray,
                   n_sessions: int, aggregate: str = "max", top_m: int = 1) -> DenseScores:
    """Search all pieces with a FAISS inner-product index (vectors are L2-normalised, so
    inner product = cosine) and aggregate per session (``top_m`` above 1: the sum of the
    session's ``top_m`` best turns, a turn scoring its best piece; module docstring).
    Sessions without user text score 0."""
    scores = np.zeros(n_sessions, dtype=np.float64)
    best_turn = [-1] * n_sessions
    counts = [0] * n_sessions
    if top_m < 1:
        raise ValueError(f"top_m must be at least 1, not {top_m}")
    if top_m > 1 and aggregate != "max":
        raise ValueError(f"top_m {top_m} needs aggregate 'max', not {aggregate!r}")
    top_turns: list[list[int]] | None = ([[] for _ in range(n_sessions)] if top_m > 1
                                         else None)
    if len(pieces) == 0:
        return DenseScores(scores, best_turn, counts, top_turns)
    faiss: object = _faiss()
    index = faiss.IndexFlatIP(vectors.shape[1])  # type: ignore[attr-defined]
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    sims, ids = index.search(np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32),
                             len(pieces))
    per_session: list[list[float]] = [[] for _ in range(n_sessions)]
    # top_m > 1: per session its turns' best similarities, best first (a turn's first piece
    # to arrive is its best), only as many turns as are summed
    turn_best: list[list[float]] = [[] for _ in range(n_sessions)]
    for sim, pid in zip(sims[0], ids[0], strict=False):
        if pid < 0:
            continue
        p = pieces[int(pid)]
        if not per_session[p.session_index]:
            best_turn[p.session_index] = p.turn_index
        per_session[p.session_index].append(float(sim))  # arrives in descending order
        if top_turns is not None:
            seen = top_turns[p.session_index]
            if len(seen) < top_m and p.turn_index not in seen:
                seen.append(p.turn_index)
                turn_best[p.session_index].append(float(sim))
    for si, sims_s in enumerate(per_session):
        counts[si] = len(sims_s)
        if not sims_s:
            continue
        if top_turns is not None:
            scores[si] = sum(turn_best[si])
        elif aggregate == "max":
            scores[si] = sims_s[0]
        elif aggregate == "max_mean":
            top = sims_s[:3]
            scores[si] = 0.8 * sims_s[0] + 0.2 * (sum(top) / len(top))
        else:
            raise ValueError(f"unknown dense aggregate {aggregate!r}")
    return DenseScores(scores, best_turn, counts, top_turns)
