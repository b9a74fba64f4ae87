"""Confidence-gated search over a set of memories: the package's retrieval pipeline, then a gate.

Per query (``now`` = the date the query is asked), over the memories as a corpus of one-turn
user sessions (their dense pieces and vectors as the store persisted them):

1. Ranking: the package's one pipeline (:mod:`engram_eval.retrieval.pipeline`: signals ->
   fusion -> temporal -> rerank -> coverage) under the retrieval part of
   :class:`~engram_eval.production.settings.ProductionSettings` (the package defaults unless a
   recorded setting says otherwise). The first ``candidates`` memories of its ranking go on.
2. Confidence (:mod:`.confidence`): with a per-memory-shape calibration (version 4 on), the
   model of the memories' shape (:func:`engram_eval.data.records.corpus_shape`; a store's
   memories are ``short``, named in the response's ``question["shape"]``), with or without
   the rerank stage: its features are absolute signals and per-question context
   (:mod:`.features`; feature set v4 reads the ``gate_features`` the pipeline traces, which
   it computes with or without a rerank), fitted under the settings it records. With an
   older calibration (versions 1-3): when the rerank stage is on, the sigmoid of the
   cross-encoder logit of the memory text; else the calibrated logistic of absolute signals
   (the dense score, the query terms the memory holds, and the time feature: +1 inside the
   query's time window, -1 outside, 0 without a window, a memory date, or the temporal step),
   or with a version-3 calibration (fitted on real sessions) its model of absolute signals and
   per-question context over the candidates. Each candidate is scored by the cross-encoder
   at most once: the logit the pipeline's rerank stage computed for a memory it reranked is
   the one the gate uses, and a pair is never given to the cross-encoder twice.
3. Focused-excerpt retry: a long memory the gate rejects tries one focused excerpt
   (:func:`engram_eval.retrieval.passages.select_excerpt`, at most one per memory), whatever
   the other candidates scored; the larger confidence survives.
4. Gate (:func:`accepted`; cut-off :func:`gate_cutoff`: ``min_confidence``, or under
   ``cutoff`` 'calibrated' the one the applied calibration model records): under
   ``result_order`` 'pipeline' (the default) the gate decides *whether* to answer and the
   pipeline the order -- the first candidate's confidence below the cut-off abstains,
   else the candidates at or above it in the pipeline's order (a later candidate under it
   is dropped); under 'confidence' (every record made before issue 45) the candidates at or
   above the cut-off, most confident first (ties: ranking order). At most ``limit``;
   possibly nothing (abstention). The response's ``question["min_confidence"]`` is the
   cut-off applied, ``question["result_order"]`` the order.

This code never sees gold ids: it receives memories and a query only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engram_eval.data.records import Session, Turn, corpus_shape
from engram_eval.production.confidence import (
    AnyCalibration,
    Calibration,
    ContextCalibration,
    ShapeCalibration,
    check_calibration,
    load_calibration,
    term_coverage,
)
from engram_eval.production.settings import (
    DEFAULT_CALIBRATION,
    ProductionSettings,
    data_file,
)
from engram_eval.production.store import Memory
from engram_eval.retrieval.dense import Piece
from engram_eval.retrieval.holder import ModelHolder
from engram_eval.retrieval.models import ModelRef


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
    """Settings, resolved models (hashed, not loaded) and the lazily loaded encoders: a
    :class:`~engram_eval.retrieval.holder.ModelHolder` built from the retrieval part of the
    settings (the models a benchmark run of the same settings holds), so production encodes
    and scores exactly as a run does."""

    def __init__(self, settings: ProductionSettings | None = None, *,
                 vector_cache: Any = None, holder: ModelHolder | None = None) -> None:
        """``holder``: the models to search with (built from the settings when not given;
        pass one to share loaded models, or a test's counting fakes); ``vector_cache``: an
        open cache for the holder built here (none: no cache)."""
        import dataclasses

        from engram_eval.retrieval.pipeline import check_signals
        from engram_eval.retrieval.settings import RetrievalSettings

        self.settings = s = settings or ProductionSettings()
        retrieval = dataclasses.replace(RetrievalSettings.of(s),
                                        use_cache=vector_cache is not None)
        check_signals(retrieval)
        self.holder = holder if holder is not None else ModelHolder(
            retrieval, vector_cache=vector_cache)
        self.vector_cache = vector_cache
        self._calibration: AnyCalibration | None = None
        self._read: AnyCalibration | None = None

    @property
    def embedding_ref(self) -> ModelRef:
        ref = self.holder.embedding_ref
        if ref is None:
            from engram_eval.errors import ConfigError

            raise ConfigError("production search needs the dense signal (use_dense)")
        return ref

    @property
    def reranker_ref(self) -> ModelRef | None:
        return self.holder.reranker_ref

    def models(self) -> list[ModelRef]:
        return self.holder.models()

    def calibration_path(self) -> Path:
        """The calibration file: ``settings.calibration``, else the packaged default. A path
        inside the package (such as a recorded ``engram_eval/production/calibration_v1.json``,
        which now lives in ``data/``: :func:`~engram_eval.production.settings.data_file`) is
        read from the package, wherever the process runs."""
        return data_file(self.settings.calibration or DEFAULT_CALIBRATION)

    def _loaded(self) -> AnyCalibration:
        """The calibration file, read (not checked) once."""
        if self._read is None:
            self._read = load_calibration(self.calibration_path())
        return self._read

    def calibration(self) -> AnyCalibration:
        """The offline calibration, checked against this engine's model files and settings."""
        if self._calibration is None:
            cal = self._loaded()
            check_calibration(cal, self.embedding_ref.sha256, self.settings.retrieval_part())
            self._calibration = cal
        return self._calibration

    def applies_calibration(self) -> bool:
        """Whether the gate's confidence comes from the calibration: always without the rerank
        stage; with it, under ``rerank_confidence`` 'calibration' when the calibration is per
        memory shape (version 4 on; an older one, or 'sigmoid', leaves the confidence to the
        cross-encoder's sigmoid, and the calibration is read but not checked)."""
        s = self.settings
        return not s.rerank or (s.rerank_confidence == "calibration"
                                and isinstance(self._loaded(), ShapeCalibration))

    def model_for(self, shape: str) -> Calibration | ContextCalibration | None:
        """The calibration model the gate applies to memories of ``shape``: a per-shape
        calibration's model of the shape (with or without a rerank), an older calibration
        without a rerank; None with a rerank and an older calibration (versions 1-3: the
        confidence is then the cross-encoder's sigmoid)."""
        if not self.applies_calibration():
            return None
        cal = self.calibration()
        return cal.for_shape(shape) if isinstance(cal, ShapeCalibration) else cal

    def cutoff_for(self, shape: str) -> float:
        """The gate's cut-off for memories of ``shape`` (:func:`gate_cutoff`)."""
        return gate_cutoff(self.settings, self.model_for(shape), shape)

    def encoder(self) -> Any:
        return self.holder.encoder()

    def cross(self) -> Any:
        return self.holder.cross_encoder()

    def session_pieces(self, sessions: Sequence[Session], role: str | None = "user"
                       ) -> list[Piece]:
        """Dense pieces of ``sessions``' turns of ``role`` (None: every turn), cut exactly as
        the benchmark cuts user text (the embedding model's token counter)."""
        from engram_eval.retrieval.dense import user_pieces

        count_tokens, token_limit = self.holder.token_counter()
        s = self.settings
        return user_pieces(sessions, s.dense_piece_words, s.dense_piece_overlap,
                           count_tokens, token_limit, role=role)

    def pieces(self, memories: Sequence[Memory]) -> list[tuple[int, str]]:
        """Dense pieces of each memory, cut exactly as the benchmark cuts user text."""
        return [(p.session_index, p.text)
                for p in self.session_pieces(memory_sessions(memories), role="user")]

    def search(self, query: str, *, now: str, memories: Sequence[Memory],
               pieces: Sequence[tuple[int, str]], vectors: np.ndarray,
               limit: int | None = None, min_confidence: float | None = None,
               shape: str | None = None) -> SearchResponse:
        """:func:`search_memories` with this engine (what a store calls)."""
        return search_memories(self, query, now=now, memories=memories, pieces=pieces,
                               vectors=vectors, limit=limit, min_confidence=min_confidence,
                               shape=shape)

    def describe(self) -> dict[str, Any]:
        """The settings and where the gate's confidence comes from (:meth:`model_for`)."""
        d: dict[str, Any] = {"settings": self.settings.to_json()}
        if not self.applies_calibration():
            d["confidence"] = "sigmoid(cross-encoder logit)"
        else:
            cal = self.calibration()
            d["confidence"] = (
                "calibrated model of absolute signals and per-question context, one per "
                "memory shape (calibration v4 on)"
                + (", over the cross-encoder's reranking" if self.settings.rerank else "")
                if isinstance(cal, ShapeCalibration) else
                "calibrated model of absolute signals and per-question context "
                "(calibration v3, real sessions)" if isinstance(cal, ContextCalibration)
                else "calibrated logistic of absolute signals (dense, terms, time)")
            d["calibration"] = str(self.calibration_path())
        return d


def memory_sessions(memories: Sequence[Memory]) -> list[Session]:
    """Each memory as the pipeline sees it: a session of one user turn."""
    return [Session(m.id, m.date, (Turn("user", m.text, 0),)) for m in memories]


def memory_signals(engine: Engine, query: str, now: str, memories: Sequence[Memory],
                   pieces: Sequence[tuple[int, str]], vectors: np.ndarray) -> dict[str, Any]:
    """The pipeline's ranking of ``memories`` for ``query`` plus the gate's per-memory
    features: ``dense``, ``bm25`` (the memory-text BM25 signal), every other computed signal
    under ``signals``, ``fused``, ``mult``, ``time``, ``terms``, ``order`` (the pipeline's
    final order), ``window`` and ``qvec``; with a rerank, ``cross_raw`` (memory index -> the
    logit of its whole text, for every memory the pipeline reranked) and ``cross_pairs``
    (every (query, text) pair the pipeline scored -> its logit); ``gate_features`` (memory
    index -> the features the pipeline traced for its first results,
    :mod:`engram_eval.retrieval.gate_features`)."""
    from engram_eval.retrieval import pipeline as P

    s = engine.settings
    n = len(memories)
    sessions = memory_sessions(memories)
    corpus = P.build_corpus(sessions, s, pieces=[Piece(i, 0, t) for i, t in pieces],
                            vectors=vectors)
    st = P.run_pipeline("", query, now, s, corpus,
                        encode=engine.encoder().encode if s.use_dense else None,
                        score_pairs=engine.holder.score_pairs if s.reranks_any() else None)
    # the logit the pipeline's rerank stage computed for each reranked memory's whole text
    # (its one turn under the turn unit; under the session and passage units its rerank
    # document, the memory text with an empty assistant part, which the cross-encoder's
    # tokenizer reads as the memory text): the gate's full-text score, never computed twice
    scored = {i: float(st.traces[i]["base_raw_score"]) for i in st.reranked}
    zeros = np.zeros(n)
    sig = {name: st.signals[name].scores if name in st.signals else zeros
           for name in st.qtrace.get("signals", [])}
    time_f = np.zeros(n)
    if s.temporal:
        for i, inside in enumerate(st.in_window):
            if inside is not None:
                time_f[i] = 1.0 if inside else -1.0
    window = st.window if s.temporal else None
    return {"qvec": st.q_vec, "dense": sig.get("dense", zeros), "bm25": sig.get("bm25_user", zeros),
            "signals": {k: v for k, v in sig.items() if k not in ("dense", "bm25_user")},
            "fused": st.fused if n else zeros, "mult": st.mult if n else np.ones(n),
            "time": time_f, "order": list(st.order), "cross_raw": scored,
            "cross_pairs": dict(st.cross),
            "gate_features": {i: dict(st.traces[i]["gate_features"]) for i in st.order
                              if "gate_features" in st.traces[i]},
            "terms": [term_coverage(query, m.text) for m in memories],
            "window": None if window is None else {"start": window.start.isoformat(),
                                                   "end": window.end.isoformat(),
                                                   "expression": window.expression}}


def gate_cutoff(settings: ProductionSettings,
                model: Calibration | ContextCalibration | None,
                shape: str | None = None) -> float:
    """The gate's cut-off: under ``cutoff`` 'calibrated', the one ``model`` (the calibration
    model the gate applies, :meth:`Engine.model_for`: a version-3 file, or a per-shape file's
    model of the memory shape, with or without a rerank) records, chosen on its training
    data; ``min_confidence`` under 'fixed', with no model (a rerank with a calibration of
    versions 1-3: the cross-encoder's sigmoid), or for a model that records none (versions
    1-2). For memories of the ``people`` shape without ``people_gate``: 0 (no gate: every
    question answered)."""
    if shape == "people" and not settings.people_gate:
        return 0.0
    recorded = getattr(model, "cutoff", None)
    if settings.cutoff == "calibrated" and recorded is not None:
        return float(recorded)
    return settings.min_confidence


def accepted(cands: Sequence[int], conf: Mapping[int, float], cut: float,
             order: str = "pipeline") -> list[int]:
    """The candidates the gate accepts, in the order it returns them (module docstring, step
    4): ``cands`` in the pipeline's order, ``conf`` their confidences. Under ``order``
    'pipeline' the first candidate's confidence decides answer or abstain and each later
    candidate under ``cut`` is dropped (so the first result, when there is one, is the
    pipeline's first); under 'confidence' those at or above ``cut``, most confident first
    (ties: the pipeline's order)."""
    if order == "pipeline":
        if not cands or conf[cands[0]] < cut:
            return []
        return [i for i in cands if conf[i] >= cut]
    if order != "confidence":
        raise ValueError(f"result order {order!r}: 'pipeline' or 'confidence'")
    rank = {i: n for n, i in enumerate(cands)}
    return sorted((i for i in cands if conf[i] >= cut), key=lambda i: (-conf[i], rank[i]))


def search_memories(engine: Engine, query: str, *, now: str, memories: Sequence[Memory],
                    pieces: Sequence[tuple[int, str]], vectors: np.ndarray,
                    limit: int | None = None, min_confidence: float | None = None,
                    shape: str | None = None) -> SearchResponse:
    """The gated search of the module docstring over ``memories`` (with their pieces and
    vectors as the store holds them). ``shape``: the memory shape of the data the memories
    come from (:func:`engram_eval.data.records.corpus_shape`), which picks the model of a
    per-shape calibration; None reads it from the memories as the pipeline sees them (one
    user turn each: ``short``, a production store)."""
    from engram_eval.retrieval.passages import select_excerpt
    from engram_eval.retrieval.rerank import sigmoid

    s = engine.settings
    limit = s.limit if limit is None else limit
    if not memories:
        return SearchResponse((), (), {"query": query, "now": now, "time_window": None})
    sig = memory_signals(engine, query, now, memories, pieces, vectors)
    cands = sig["order"][: s.candidates]
    shape_used = None
    if engine.applies_calibration() and isinstance(engine.calibration(), ShapeCalibration):
        shape_used = shape if shape is not None else corpus_shape(memory_sessions(memories))
    cal = engine.model_for(shape_used or "short")
    cut = gate_cutoff(s, cal, shape_used) if min_confidence is None else min_confidence

    scored: dict[tuple[str, str], float] = dict(sig.get("cross_pairs") or {})

    def cross_once(pairs: list[tuple[str, str]]) -> list[float]:
        """Raw logits of ``pairs``: a pair already scored (by the pipeline's rerank stage or
        earlier in this search) is never given to the cross-encoder again; the others go in
        one batch."""
        todo = [p for p in dict.fromkeys(pairs) if p not in scored]
        if todo:
            scored.update(zip(todo, engine.cross().raw_scores(todo), strict=True))
        return [scored[p] for p in pairs]

    def conf_full(idxs: list[int]) -> dict[int, float]:
        if cal is None:  # a rerank without a per-shape calibration: the sigmoid
            known = sig["cross_raw"]  # scored by the pipeline's rerank stage: never twice
            todo = [i for i in idxs if i not in known]
            raw = dict(zip(todo, cross_once([(query, memories[i].text) for i in todo]),
                           strict=True)) if todo else {}
            return {i: sigmoid(known[i] if i in known else raw[i]) for i in idxs}
        if isinstance(cal, ContextCalibration):
            conf = cal.confidences(cal.features(query, sig, cands))
            return {i: float(conf[cands.index(i)]) for i in idxs}
        return {i: cal.confidence([float(sig["dense"][i]), sig["terms"][i], sig["time"][i]])
                for i in idxs}

    conf = conf_full(cands)
    traces: dict[int, dict[str, Any]] = {}
    for rank, i in enumerate(cands, start=1):
        traces[i] = {"id": memories[i].id, "fused_rank": rank, "dense": float(sig["dense"][i]),
                     "bm25": float(sig["bm25"][i]), "fused": float(sig["fused"][i]),
                     "temporal": float(sig["mult"][i]), "time": sig["time"][i],
                     "terms": sig["terms"][i], "confidence_full": conf[i]}
        for name, scores in sig["signals"].items():  # signals beyond dense and memory BM25
            traces[i][name] = float(scores[i])
    if s.excerpt_retry:
        rejected = [i for i in cands if conf[i] < cut]
        excerpts = {}
        for i in rejected:
            ex = select_excerpt(query, memories[i].text, max_words=s.excerpt_max_words)
            if ex is not None:
                excerpts[i] = ex
        if excerpts:
            ids = list(excerpts)
            if cal is None:
                raw = cross_once([(query, excerpts[i].text) for i in ids])
                ex_conf = {i: sigmoid(x) for i, x in zip(ids, raw, strict=True)}
            else:
                vecs = engine.encoder().encode([excerpts[i].text for i in ids])
                ex_conf = {}
                for i, v in zip(ids, vecs, strict=True):
                    cos = float(np.dot(v, sig["qvec"]))
                    ex_terms = term_coverage(query, excerpts[i].text)
                    if isinstance(cal, ContextCalibration):  # the excerpt in its memory's place
                        row = cal.features(query, sig, cands,
                                           {i: {"dense": cos, "terms": ex_terms}})
                        ex_conf[i] = float(cal.confidences(row)[cands.index(i)])
                    else:
                        ex_conf[i] = cal.confidence([cos, ex_terms, sig["time"][i]])
                    traces[i]["excerpt_dense"] = cos
            for i in ids:
                ex = excerpts[i]
                traces[i]["excerpt"] = {"confidence": ex_conf[i], "start": ex.start,
                                        "end": ex.end, "words": ex.words}
                conf[i] = max(conf[i], ex_conf[i])
    for i in cands:
        traces[i]["confidence"] = conf[i]
        traces[i]["accepted"] = False
    chosen = accepted(cands, conf, cut, s.result_order)[:limit]
    for i in chosen:
        traces[i]["accepted"] = True
    results = tuple(SearchResult(memories[i].id, float(conf[i]), memories[i].text,
                                 memories[i].date, traces[i]) for i in chosen)
    question = {"query": query, "now": now, "time_window": sig["window"], "limit": limit,
                "min_confidence": cut, "result_order": s.result_order}
    if shape_used is not None:  # a per-shape calibration: the model it applied
        question["shape"] = shape_used
    return SearchResponse(results, tuple(traces[i] for i in cands), question)
