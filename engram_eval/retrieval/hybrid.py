"""The hybrid retriever (DESIGN.md, "The retrieval pipeline").

Per question (one corpus per question, nothing shared but caches):

1. Documents: per session, its user text and its assistant text.
2. Signals: dense similarity over user pieces (:mod:`.dense`), BM25 over user documents,
   BM25 over assistant documents (:mod:`.bm25`).
3. Fusion: weighted reciprocal-rank fusion, ``fused = sum_s w_s / (rrf_k + rank_s)``.
   RRF uses ranks only, so signals on different scales need no calibration. A signal
   contributes only where it is informative: a session that matches no query term gets
   no BM25 contribution, and a signal with no positive score anywhere is dropped for that
   question. Assistant evidence is weighted lower by default (0.5).
4. Temporal multiplier (:mod:`.temporal`): sessions dated inside the question's time
   window have their score multiplied by ``temporal_boost``, once per session.
5. Optional cross-encoder rerank of the top ``rerank_candidates`` fused candidates
   (:mod:`.rerank`): ``score = ((1 - fusion_alpha) * sigmoid(raw) + fusion_alpha * prior)
   * temporal``, where ``prior = 1 - (prior_rank - 1) / n_candidates``. Candidates not
   reranked keep ``fused * temporal - 1`` so they always follow reranked ones.
   Passage fallback: when every base sigmoid score is under ``passage_floor``, each
   candidate longer than ``passage_max_words`` gets one focused excerpt
   (:mod:`.passages`) scored too, and the larger raw score survives.
6. Prior coverage (:mod:`.coverage`): the best fused candidate is kept in the first
   ``result_k`` results.
7. Every session's trace keeps its final score, raw score, prior rank, temporal multiplier
   and signal scores/ranks (and excerpt details when one was scored).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from engram_eval.config import RunConfig
from engram_eval.data.records import Question, Session
from engram_eval.models import ModelRef, resolve_model
from engram_eval.retrieval.base import Ranking, ScoredSession
from engram_eval.retrieval.bm25 import BM25Index
from engram_eval.retrieval.coverage import preserve_prior_leader
from engram_eval.retrieval.dense import session_scores, user_pieces

SOURCE_MODULES = [
    "engram_eval/retrieval/base.py",
    "engram_eval/retrieval/hybrid.py",
    "engram_eval/retrieval/bm25.py",
    "engram_eval/retrieval/dense.py",
    "engram_eval/retrieval/embeddings.py",
    "engram_eval/retrieval/temporal.py",
    "engram_eval/retrieval/rerank.py",
    "engram_eval/retrieval/passages.py",
    "engram_eval/retrieval/coverage.py",
    "engram_eval/models.py",
]


def _ranks(scores: np.ndarray, informative: np.ndarray) -> list[int | None]:
    """1-based rank of each informative entry by descending score (ties: corpus order);
    None for entries that are not informative."""
    idx = [i for i in range(len(scores)) if informative[i]]
    idx.sort(key=lambda i: (-float(scores[i]), i))
    out: list[int | None] = [None] * len(scores)
    for r, i in enumerate(idx, start=1):
        out[i] = r
    return out


def token_counter(model_dir: str) -> tuple[Any, int] | None:
    """(count_tokens, limit) from the model's ``tokenizer.json`` and its sentence-transformers
    ``max_seq_length``, read with the light ``tokenizers`` library so that a fully cached run
    never loads the model. None when the files are absent (word windows only)."""
    import json
    from pathlib import Path

    d = Path(model_dir)
    tok_file = d / "tokenizer.json"
    if not tok_file.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - a dependency of transformers
        return None
    tok = Tokenizer.from_file(str(tok_file))
    tok.no_truncation()
    limit = 512
    cfg = d / "sentence_bert_config.json"
    if cfg.is_file():
        limit = int(json.loads(cfg.read_text()).get("max_seq_length", limit))

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count, limit - 2  # room for [CLS] and [SEP]


def rerank_document(session: Session) -> str:
    """The text given to the cross-encoder: user text, a blank line, assistant text (for
    corpora without user/assistant roles, e.g. LoCoMo, every turn in order).
    Passage offsets in traces refer to this string."""
    if not has_user_role([session]):
        return session.text()
    return session.user_text + "\n\n" + session.assistant_text


def has_user_role(sessions: Sequence[Session]) -> bool:
    """True when the corpus uses LongMemEval's user/assistant roles. LoCoMo sessions are
    conversations between two people (roles are speaker names): there, every turn counts
    as user text and there is no assistant document."""
    return any(t.role in ("user", "assistant") for s in sessions for t in s.turns)


class HybridRetriever:
    """See the module docstring. Models are resolved (and hashed) at construction and
    loaded on first use, so provenance can be checked before any model is loaded."""

    def __init__(self, config: RunConfig, name: str = "hybrid") -> None:
        self.cfg = config
        self.name = name
        if not (config.use_dense or config.use_bm25_user or config.use_bm25_assistant):
            from engram_eval.errors import ConfigError

            raise ConfigError("config: at least one of use_dense, use_bm25_user, "
                              "use_bm25_assistant must be true")
        self.embedding_ref = (resolve_model(config.embedding_model, "embedding")
                              if config.use_dense else None)
        self.reranker_ref = (resolve_model(config.reranker_model, "reranker")
                             if config.rerank else None)
        self._cache: Any = None
        self._encoder: Any = None
        self._cross: Any = None
        self._count_tokens: Any = None
        self._token_limit = 256
        self._sessions: tuple[Session, ...] = ()

    # -- provenance -------------------------------------------------------------
    def models(self) -> list[ModelRef]:
        return [r for r in (self.embedding_ref, self.reranker_ref) if r is not None]

    def source_modules(self) -> list[str]:
        return list(SOURCE_MODULES)

    def describe(self) -> dict[str, Any]:
        c = self.cfg
        d = {"retriever": self.name, "use_dense": c.use_dense,
             "use_bm25_user": c.use_bm25_user, "use_bm25_assistant": c.use_bm25_assistant,
             "fusion": "weighted_rrf", "rrf_k": c.rrf_k,
             "weights": {"dense": c.weight_dense, "bm25_user": c.weight_bm25_user,
                         "bm25_assistant": c.weight_bm25_assistant},
             "temporal": c.temporal, "temporal_boost": c.temporal_boost,
             "rerank": c.rerank, "preserve_prior": c.preserve_prior, "result_k": c.result_k}
        if c.use_dense:
            d["dense"] = {"backend": c.embedding_backend, "model": c.embedding_model,
                          "precision": c.embedding_precision, "piece_words": c.dense_piece_words,
                          "piece_overlap": c.dense_piece_overlap, "aggregate": c.dense_aggregate,
                          "index": "faiss.IndexFlatIP"}
        if c.rerank:
            d["reranker"] = {"backend": c.reranker_backend, "model": c.reranker_model,
                             "candidates": c.rerank_candidates, "max_length": c.rerank_max_length,
                             "fusion_alpha": c.fusion_alpha,
                             "passage_fallback": c.passage_fallback,
                             "passage_floor": c.passage_floor,
                             "passage_max_words": c.passage_max_words}
        return d

    # -- lazy resources ---------------------------------------------------------
    def _vector_cache(self) -> Any:
        if self._cache is None and self.cfg.use_cache:
            from engram_eval.cache import VectorCache, default_cache_dir

            self._cache = VectorCache(self.cfg.cache_dir or default_cache_dir())
        return self._cache

    def encoder(self) -> Any:
        if self._encoder is None:
            from engram_eval.retrieval.embeddings import CachedEncoder, make_embedder

            assert self.embedding_ref is not None
            emb = make_embedder(self.cfg.embedding_backend, self.embedding_ref,
                                self.cfg.embedding_precision, self.cfg.batch_size)
            self._encoder = CachedEncoder(emb, self._vector_cache(), self.cfg.embedding_backend)
            counter = token_counter(self.embedding_ref.path)
            if counter is not None:
                self._count_tokens, self._token_limit = counter
        return self._encoder

    def cross_encoder(self) -> Any:
        if self._cross is None:
            from engram_eval.retrieval.rerank import CachedCrossEncoder, make_cross_encoder

            assert self.reranker_ref is not None
            model = make_cross_encoder(self.cfg.reranker_backend, self.reranker_ref,
                                       self.cfg.rerank_max_length)
            self._cross = CachedCrossEncoder(model, self._vector_cache(),
                                             self.cfg.reranker_backend,
                                             self.cfg.rerank_max_length)
        return self._cross

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self._encoder is not None:
            e = self._encoder
            out["embedding"] = {"model_seconds": e.model_seconds, "texts_encoded": e.n_model,
                                "disk_cache_hits": e.n_disk, "memory_cache_hits": e.n_memory}
        if self._cross is not None:
            x = self._cross
            out["rerank"] = {"model_seconds": x.model_seconds, "pairs_scored": x.n_model,
                             "cache_hits": x.n_cached}
        return out

    # -- protocol ---------------------------------------------------------------
    def index(self, sessions: Sequence[Session]) -> None:
        c = self.cfg
        self._sessions = tuple(sessions)
        roles = has_user_role(sessions)
        user_docs = [s.user_text if roles else s.text() for s in sessions]
        self._bm25_user = (BM25Index(user_docs, k1=c.bm25_k1, b=c.bm25_b)
                           if c.use_bm25_user else None)
        self._bm25_asst = (BM25Index([s.assistant_text for s in sessions], k1=c.bm25_k1,
                                     b=c.bm25_b) if c.use_bm25_assistant and roles else None)
        if c.use_dense:
            enc = self.encoder()
            self._pieces = user_pieces(sessions, c.dense_piece_words, c.dense_piece_overlap,
                                       self._count_tokens, self._token_limit,
                                       role="user" if roles else None)
            self._vectors = enc.encode([p.text for p in self._pieces])

    def _signals(self, question: Question) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
        """name -> (scores, informative mask, weight)."""
        c = self.cfg
        n = len(self._sessions)
        out: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}
        if c.use_dense:
            q = self.encoder().encode([question.question])[0]
            ds = session_scores(self._pieces, self._vectors, q, n, c.dense_aggregate)
            self._dense = ds
            mask = np.array([k > 0 for k in ds.n_pieces], dtype=bool)
            out["dense"] = (ds.scores, mask, c.weight_dense)
        for name, idx, w in (("bm25_user", self._bm25_user, c.weight_bm25_user),
                             ("bm25_assistant", self._bm25_asst, c.weight_bm25_assistant)):
            if idx is not None:
                s = idx.scores(question.question)
                out[name] = (s, s > 0, w)
        return out

    def rank(self, question: Question) -> Ranking:
        c = self.cfg
        sessions = self._sessions
        n = len(sessions)
        if n == 0:
            return Ranking(question.question_id, ())
        signals = self._signals(question)
        fused = np.zeros(n, dtype=np.float64)
        traces: list[dict[str, Any]] = [{} for _ in range(n)]
        for name, (scores, mask, w) in signals.items():
            ranks = _ranks(scores, mask)
            informative = bool(mask.any())
            for i in range(n):
                traces[i][name] = float(scores[i])
                r = ranks[i]
                traces[i][name + "_rank"] = r
                if informative and r is not None and w > 0:
                    fused[i] += w / (c.rrf_k + r)
        prior_order = sorted(range(n), key=lambda i: (-fused[i], i))
        prior_rank = {i: r for r, i in enumerate(prior_order, start=1)}

        mult = np.ones(n, dtype=np.float64)
        window = None
        if c.temporal:
            from engram_eval.retrieval.temporal import (
                parse_date,
                resolve_time_window,
                temporal_multiplier,
            )

            qdate = parse_date(question.question_date)
            window = resolve_time_window(question.question, qdate) if qdate else None
            if window is not None:
                for i, s in enumerate(sessions):
                    mult[i] = temporal_multiplier(parse_date(s.date), window,
                                                  boost=c.temporal_boost)

        raw = fused.copy()
        final = fused * mult
        reranked = set()
        if c.rerank:
            cands = prior_order[: c.rerank_candidates]
            raw_scores = self._rerank(question, cands, traces)
            for i in range(n):
                final[i] = fused[i] * mult[i] - 1.0
            for i in cands:
                prior = 1.0 - (prior_rank[i] - 1) / len(cands)
                from engram_eval.retrieval.rerank import sigmoid

                raw[i] = raw_scores[i]
                base = (1 - c.fusion_alpha) * sigmoid(raw_scores[i]) + c.fusion_alpha * prior
                final[i] = base * mult[i]
                reranked.add(i)
        order = sorted(range(n), key=lambda i: (-final[i], i))
        moved = False
        if c.preserve_prior:
            order, moved = preserve_prior_leader(order, prior_order[0], c.result_k)
        results = []
        for i in order:
            t = traces[i]
            t.update({"fused": float(fused[i]), "prior_rank": prior_rank[i],
                      "temporal": float(mult[i]), "raw_score": float(raw[i]),
                      "final_score": float(final[i]), "reranked": i in reranked})
            if moved and i == prior_order[0]:
                t["moved_by_coverage"] = True
            results.append(ScoredSession(sessions[i].session_id, float(final[i]), t))
        ranking = Ranking(question.question_id, tuple(results))
        return ranking

    def question_trace(self, question: Question) -> dict[str, Any]:
        """Per-question facts worth keeping in a row (time window resolved, if any)."""
        if not self.cfg.temporal:
            return {}
        from engram_eval.retrieval.temporal import parse_date, resolve_time_window

        qdate = parse_date(question.question_date)
        w = resolve_time_window(question.question, qdate) if qdate else None
        if w is None:
            return {"time_window": None}
        return {"time_window": {"start": w.start.isoformat(), "end": w.end.isoformat(),
                                "expression": w.expression, "kind": w.kind}}

    def _rerank(self, question: Question, cands: list[int],
                traces: list[dict[str, Any]]) -> dict[int, float]:
        from engram_eval.retrieval.rerank import sigmoid

        c = self.cfg
        cross = self.cross_encoder()
        docs = {i: rerank_document(self._sessions[i]) for i in cands}
        base = cross.raw_scores([(question.question, docs[i]) for i in cands])
        raw = dict(zip(cands, base, strict=False))
        for i in cands:
            traces[i]["base_raw_score"] = raw[i]
        if c.passage_fallback and all(sigmoid(x) < c.passage_floor for x in base):
            from engram_eval.retrieval.passages import select_excerpt

            excerpts = {}
            for i in cands:
                ex = select_excerpt(question.question, docs[i], max_words=c.passage_max_words)
                if ex is not None:
                    excerpts[i] = ex
            if excerpts:
                ids = list(excerpts)
                ex_raw = cross.raw_scores([(question.question, excerpts[i].text) for i in ids])
                for i, x in zip(ids, ex_raw, strict=False):
                    ex = excerpts[i]
                    traces[i]["passage"] = {"base_raw_score": raw[i], "excerpt_raw_score": x,
                                            "source_start": ex.start, "source_end": ex.end,
                                            "passage_words": ex.words}
                    raw[i] = max(raw[i], x)
        return raw


def _variant(config: RunConfig, name: str, **changes: Any) -> HybridRetriever:
    return HybridRetriever(dataclasses.replace(config, **changes), name=name)


def make_hybrid(config: RunConfig) -> HybridRetriever:
    return HybridRetriever(config, name="hybrid")


def make_bm25_only(config: RunConfig) -> HybridRetriever:
    """User + assistant BM25 fused (no dense signal)."""
    return _variant(config, "bm25", use_dense=False)


def make_dense_only(config: RunConfig) -> HybridRetriever:
    """Dense user retrieval alone (no BM25)."""
    return _variant(config, "dense", use_bm25_user=False, use_bm25_assistant=False)


