"""Confidence-gated search over a set of memories, built from the benchmark's components.

Per query (``now`` = the date the query is asked):

1. Signals (the benchmark retriever's code): dense cosine of the query to each memory's
   pieces (:mod:`engram_eval.retrieval.dense`, pieces cut as the benchmark cuts user text,
   FAISS inner product, best piece per memory) and BM25 over memory texts
   (:class:`engram_eval.retrieval.bm25.BM25Index`).
2. Fusion (:mod:`engram_eval.retrieval.fusion`): reciprocal-rank fusion of the informative
   signals, pinned in :class:`~engram_eval.production.settings.ProductionSettings`.
3. Temporal step (:mod:`engram_eval.retrieval.temporal`, the benchmark's date module): the
   query's time window relative to ``now``; memories dated inside it have their fused score
   multiplied by ``temporal_boost``. The top ``candidates`` memories go on.
4. Confidence (:mod:`.confidence`): the sigmoid of the cross-encoder logit when a reranker is
   configured, else the calibrated logistic of absolute signals.
5. Focused-excerpt retry: a long memory the gate rejects tries one focused excerpt
   (:func:`engram_eval.retrieval.passages.select_excerpt`, at most one per memory), whatever
   the other candidates scored; the larger confidence survives.
6. Gate: memories with confidence >= ``min_confidence``, best first (ties: fused order), at
   most ``limit``; possibly nothing (abstention).

This code never sees gold ids: it receives memories and a query only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engram_eval.io import package_root
from engram_eval.production.confidence import (
    Calibration,
    check_calibration,
    load_calibration,
    term_coverage,
)
from engram_eval.production.settings import DEFAULT_CALIBRATION, ProductionSettings
from engram_eval.production.store import Memory
from engram_eval.retrieval.models import ModelRef, resolve_model


@dataclass(frozen=True)
class SearchResult:
    id: str
    confidence: float
    text: str
    date: str
    trace: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchResponse:
    """Accepted results (at most ``limit``, maybe none) and the trace of every candidate."""

    results: tuple[SearchResult, ...]
    candidates: tuple[dict[str, Any], ...]
    question: dict[str, Any]

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.results]


class Engine:
    """Settings, resolved models (hashed, not loaded) and the lazily loaded encoders."""

    def __init__(self, settings: ProductionSettings | None = None, *,
                 vector_cache: Any = None) -> None:
        self.settings = s = settings or ProductionSettings()
        self.embedding_ref: ModelRef = resolve_model(s.embedding_model, "embedding")
        self.reranker_ref: ModelRef | None = (resolve_model(s.reranker_model, "reranker")
                                              if s.rerank else None)
        self.vector_cache = vector_cache
        self._encoder: Any = None
        self._cross: Any = None
        self._counter: Any = None
        self._calibration: Calibration | None = None

    def models(self) -> list[ModelRef]:
        return [r for r in (self.embedding_ref, self.reranker_ref) if r is not None]

    def calibration_path(self) -> Path:
        return Path(self.settings.calibration or package_root() / DEFAULT_CALIBRATION)

    def calibration(self) -> Calibration:
        """The offline calibration, checked against this engine's model files and settings."""
        if self._calibration is None:
            cal = load_calibration(self.calibration_path())
            check_calibration(cal, self.embedding_ref.sha256, self.settings.retrieval_part())
            self._calibration = cal
        return self._calibration

    def encoder(self) -> Any:
        if self._encoder is None:
            from engram_eval.retrieval.embeddings import CachedEncoder, make_embedder
            from engram_eval.retrieval.hybrid import token_counter

            s = self.settings
            emb = make_embedder(s.embedding_backend, self.embedding_ref, s.embedding_precision, 16)
            self._encoder = CachedEncoder(emb, self.vector_cache, s.embedding_backend)
            self._counter = token_counter(self.embedding_ref.path)
        return self._encoder

    def cross(self) -> Any:
        if self._cross is None:
            from engram_eval.retrieval.rerank import CachedCrossEncoder, make_cross_encoder

            s = self.settings
            assert self.reranker_ref is not None
            model = make_cross_encoder(s.reranker_backend, self.reranker_ref, s.rerank_max_length)
            self._cross = CachedCrossEncoder(model, self.vector_cache, s.reranker_backend,
                                             s.rerank_max_length)
        return self._cross

    def pieces(self, memories: Sequence[Memory]) -> list[tuple[int, str]]:
        """Dense pieces of each memory, cut exactly as the benchmark cuts user text."""
        from engram_eval.data.records import Session, Turn
        from engram_eval.retrieval.dense import user_pieces

        self.encoder()
        count, limit = self._counter if self._counter is not None else (None, 256)
        sessions = [Session(m.id, m.date, (Turn("user", m.text, 0),)) for m in memories]
        s = self.settings
        return [(p.session_index, p.text) for p in
                user_pieces(sessions, s.piece_words, s.piece_overlap, count, limit, role="user")]

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"settings": self.settings.to_json()}
        if self.settings.rerank:
            d["confidence"] = "sigmoid(cross-encoder logit)"
        else:
            d["confidence"] = "calibrated logistic of absolute signals (dense, terms, time)"
            d["calibration"] = str(self.calibration_path())
        return d


def _fuse(signals: dict[str, tuple[np.ndarray, np.ndarray]], s: ProductionSettings) -> np.ndarray:
    """Weighted reciprocal-rank fusion through the benchmark's fusion module. The memory
    BM25 signal is named ``bm25_user`` there (memories are the user's own text)."""
    from engram_eval.retrieval import fusion

    names = {"dense": "dense", "bm25": "bm25_user"}
    weights = {"dense": s.weight_dense, "bm25_user": s.weight_bm25}
    sigs = {names[k]: fusion.Signal.of(v[0], v[1]) for k, v in signals.items()}
    return fusion.fuse(sigs, method=s.fusion, weights=weights, k=s.rrf_k)


def memory_signals(engine: Engine, query: str, now: str, memories: Sequence[Memory],
                   pieces: Sequence[tuple[int, str]], vectors: np.ndarray) -> dict[str, Any]:
    """Per-memory signals for ``query``: dense, bm25, fused, temporal multiplier, time
    feature, term coverage, and the candidate order. Pure given its inputs."""
    from engram_eval.retrieval.bm25 import BM25Index
    from engram_eval.retrieval.dense import Piece, session_scores
    from engram_eval.retrieval.temporal import (
        parse_date,
        resolve_time_window,
        temporal_multiplier,
    )

    s = engine.settings
    n = len(memories)
    qvec = engine.encoder().encode([query])[0]
    plist = [Piece(i, 0, t) for i, t in pieces]
    dense = session_scores(plist, vectors, qvec, n, "max")
    dmask = np.array([k > 0 for k in dense.n_pieces], dtype=bool)
    bm25 = BM25Index([m.text for m in memories], k1=s.bm25_k1, b=s.bm25_b).scores(query)
    signals = {"dense": (dense.scores, dmask), "bm25": (bm25, bm25 > 0)}
    fused = _fuse(signals, s) if n else np.zeros(0)
    window = None
    if s.temporal:
        try:
            qdate = parse_date(now) if now else None
            window = resolve_time_window(query, qdate) if qdate else None
        except Exception:  # never let date parsing abort a search
            window = None
    mult = np.ones(n)
    time_f = np.zeros(n)
    for i, m in enumerate(memories):
        d = parse_date(m.date) if (window is not None and m.date) else None
        if window is not None and d is not None:
            mult[i] = temporal_multiplier(d, window, boost=s.temporal_boost)
            time_f[i] = 1.0 if window.contains(d) else -1.0
    from engram_eval.retrieval.fusion import order as fused_order
    from engram_eval.retrieval.fusion import temporal_scores

    prior = temporal_scores(fused, mult)
    order = fused_order(prior)
    return {"qvec": qvec, "dense": dense.scores, "bm25": bm25, "fused": fused, "mult": mult,
            "prior": prior,
            "time": time_f, "order": order,
            "terms": [term_coverage(query, m.text) for m in memories],
            "window": None if window is None else {"start": window.start.isoformat(),
                                                   "end": window.end.isoformat(),
                                                   "expression": window.expression}}


def search_memories(engine: Engine, query: str, *, now: str, memories: Sequence[Memory],
                    pieces: Sequence[tuple[int, str]], vectors: np.ndarray,
                    limit: int | None = None,
                    min_confidence: float | None = None) -> SearchResponse:
    """The gated search of the module docstring over ``memories`` (with their pieces and
    vectors as the store holds them)."""
    from engram_eval.retrieval.passages import select_excerpt
    from engram_eval.retrieval.rerank import sigmoid

    s = engine.settings
    limit = s.limit if limit is None else limit
    cut = s.min_confidence if min_confidence is None else min_confidence
    if not memories:
        return SearchResponse((), (), {"query": query, "now": now, "time_window": None})
    sig = memory_signals(engine, query, now, memories, pieces, vectors)
    cands = sig["order"][: s.candidates]
    cal = None if s.rerank else engine.calibration()

    def conf_full(idxs: list[int]) -> dict[int, float]:
        if s.rerank:
            raw = engine.cross().raw_scores([(query, memories[i].text) for i in idxs])
            return {i: sigmoid(x) for i, x in zip(idxs, raw, strict=True)}
        assert cal is not None
        return {i: cal.confidence([float(sig["dense"][i]), sig["terms"][i], sig["time"][i]])
                for i in idxs}

    conf = conf_full(cands)
    traces: dict[int, dict[str, Any]] = {}
    for rank, i in enumerate(cands, start=1):
        traces[i] = {"id": memories[i].id, "fused_rank": rank, "dense": float(sig["dense"][i]),
                     "bm25": float(sig["bm25"][i]), "fused": float(sig["fused"][i]),
                     "temporal": float(sig["mult"][i]), "time": sig["time"][i],
                     "terms": sig["terms"][i], "confidence_full": conf[i]}
    if s.excerpt_retry:
        rejected = [i for i in cands if conf[i] < cut]
        excerpts = {}
        for i in rejected:
            ex = select_excerpt(query, memories[i].text, max_words=s.excerpt_max_words)
            if ex is not None:
                excerpts[i] = ex
        if excerpts:
            ids = list(excerpts)
            if s.rerank:
                raw = engine.cross().raw_scores([(query, excerpts[i].text) for i in ids])
                ex_conf = {i: sigmoid(x) for i, x in zip(ids, raw, strict=True)}
            else:
                assert cal is not None
                vecs = engine.encoder().encode([excerpts[i].text for i in ids])
                ex_conf = {}
                for i, v in zip(ids, vecs, strict=True):
                    cos = float(np.dot(v, sig["qvec"]))
                    ex_conf[i] = cal.confidence([cos, term_coverage(query, excerpts[i].text),
                                                 sig["time"][i]])
                    traces[i]["excerpt_dense"] = cos
            for i in ids:
                ex = excerpts[i]
                traces[i]["excerpt"] = {"confidence": ex_conf[i], "start": ex.start,
                                        "end": ex.end, "words": ex.words}
                conf[i] = max(conf[i], ex_conf[i])
    for i in cands:
        traces[i]["confidence"] = conf[i]
        traces[i]["accepted"] = False
    passed = sorted((i for i in cands if conf[i] >= cut), key=lambda i: (-conf[i], cands.index(i)))
    chosen = passed[:limit]
    for i in chosen:
        traces[i]["accepted"] = True
    results = tuple(SearchResult(memories[i].id, float(conf[i]), memories[i].text,
                                 memories[i].date, traces[i]) for i in chosen)
    return SearchResponse(results, tuple(traces[i] for i in cands),
                          {"query": query, "now": now, "time_window": sig["window"],
                           "limit": limit, "min_confidence": cut})
