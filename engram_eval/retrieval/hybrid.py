"""The hybrid retriever (DESIGN.md, "The retrieval pipeline").

Built from :class:`~engram_eval.retrieval.settings.RetrievalSettings` (a
:class:`~engram_eval.runs.config.RunConfig` is one), kept as ``self.settings``; ``describe()`` is
derived from them. Per question (one corpus per question, nothing shared but caches):

1. Documents: per session its user text and its assistant text. A corpus without chat roles
   (LoCoMo: speakers' names) has every turn as user text and no assistant text
   (:func:`engram_eval.data.records.has_chat_roles`, decided once per corpus in ``index``).
2. Signals (each computed when its ``use_*`` switch is on, and traced even at weight 0):
   ``dense`` (best user piece, :mod:`.dense`), ``bm25_user``, ``bm25_assistant``,
   ``bm25_turn`` (BM25 over single user turns, a session scoring its best turn),
   ``bm25_prf`` (the question expanded with feedback terms, RM3-style) and ``dense_rocchio``
   (the question vector moved toward the feedback sessions' best pieces); the two feedback
   signals start from a first pass fixed by ``feedback_source`` (:mod:`.feedback`).
   Informative sessions: dense -> the session has user pieces; BM25 signals -> score > 0.
3. Fusion (:mod:`.fusion`): ``fusion: rrf`` (weighted reciprocal rank, constant ``rrf_k``)
   or ``fusion: convex`` (weighted sum of per-question ``minmax``/``zscore`` normalised
   scores). Only informative sessions count; an uninformative signal is dropped.
4. Temporal step (:mod:`.temporal`): the question's time window is resolved with
   :func:`~.temporal.safe_time_window` (never raises; status traced). Sessions dated inside
   it get the multiplier ``temporal_boost`` once per session, applied to the non-negative
   prior score ``fused - min(0, min fused)`` (:func:`.fusion.temporal_scores`), so the boost
   never inverts on a z-score scale.
5. Optional cross-encoder rerank of the ``rerank_candidates`` best *fused* candidates
   (:mod:`.rerank`): ``score = ((1 - fusion_alpha) * sigmoid(raw) + fusion_alpha * prior)
   * temporal``, where ``prior = 1 - (fused_rank - 1) / n_candidates``. The ranking is
   ordered by (reranked first, then score): sessions not reranked keep their temporal score
   shifted below every reranked one, ``t - max(t over not reranked) - 1`` (so <= -1 < 0 <=
   any reranked score), whatever ``rrf_k`` and the weights. Passage fallback: when every base
   sigmoid score is under ``passage_floor``, each candidate longer than ``passage_max_words``
   gets one focused excerpt (:mod:`.passages`) scored too, and the larger raw score survives.
6. Prior coverage (:mod:`.coverage`), only after a rerank and when ``preserve_prior``: the
   leader of the prior ranking *after the temporal step* (``temporal_rank`` 1) is kept in the
   first ``result_k`` results; if it was below, it moves to slot ``result_k`` and gets the
   midpoint of its new neighbours' scores, so scores stay non-increasing down the ranking.
   Without a rerank the final ranking *is* the prior ranking and nothing moves.

Trace contract (the keys that ``analyze`` and ``tune`` read). Per session, in
``row.trace.sessions[i]`` (i = final rank order):

* for every computed signal ``s``: ``s`` (its raw score; 0.0 where not informative) and
  ``s_rank`` (1-based rank among the informative sessions, ties by corpus order; null
  where not informative);
* ``corpus_index``: the session's position in the question's haystack (the tie-breaker);
* ``fused`` (fused score), ``fused_rank`` (rank by fused score = the prior rank; also
  written as ``prior_rank``);
* ``temporal`` (the multiplier applied, 1.0 outside the window or with ``temporal`` off),
  ``in_window`` (the session's date lies in the question's window; null without a window
  or without a parseable session date), ``temporal_rank`` (rank after the temporal step);
* ``reranked`` (bool), ``rerank_rank`` (rank among reranked sessions by their reranked
  score, null if not reranked), ``base_raw_score`` and ``passage`` (reranked only);
* ``raw_score`` (cross-encoder logit if reranked, else the fused score), ``final_score``
  (= the row's score; non-increasing down the ranking);
* ``moved_by_coverage``: true (only present when the coverage step moved the session).

Per question, in ``row.trace.question``: ``signals`` (names computed for this corpus, in
fusion order), ``fusion`` (``method``, ``normalisation``, ``weights``, ``k``),
``time_window`` (``start``, ``end``, ``expression``, ``kind``, or null),
``temporal_status`` (``window`` / ``no_expression`` / ``no_question_date`` /
``parse_error``), ``temporal`` (on/off) and ``temporal_boost``, ``chat_roles``, and
``feedback`` (``source``, ``sessions``, ``terms``) when a feedback signal is on.

Without a rerank, ``final_score = fusion.temporal_scores(fused, temporal)`` and the order is
:func:`.fusion.order` of it: :mod:`engram_eval.analysis.tune` relies on exactly this to re-fuse runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from engram_eval.data.records import (
    Question,
    Session,
    assistant_document,
    has_chat_roles,
    user_document,
    user_turns,
)
from engram_eval.errors import ConfigError
from engram_eval.retrieval import fusion as F
from engram_eval.retrieval.base import Ranking, ScoredSession
from engram_eval.retrieval.bm25 import BM25Index, tokenize
from engram_eval.retrieval.coverage import preserve_prior_leader
from engram_eval.retrieval.dense import session_scores, user_pieces
from engram_eval.retrieval.models import ModelRef, resolve_model
from engram_eval.retrieval.settings import RetrievalSettings, describe_settings

SOURCE_MODULES = [
    "engram_eval/retrieval/base.py",
    "engram_eval/retrieval/hybrid.py",
    "engram_eval/retrieval/settings.py",
    "engram_eval/retrieval/fusion.py",
    "engram_eval/retrieval/feedback.py",
    "engram_eval/retrieval/bm25.py",
    "engram_eval/retrieval/dense.py",
    "engram_eval/retrieval/embeddings.py",
    "engram_eval/retrieval/onnx_export.py",
    "engram_eval/retrieval/temporal.py",
    "engram_eval/retrieval/rerank.py",
    "engram_eval/retrieval/passages.py",
    "engram_eval/retrieval/coverage.py",
    "engram_eval/retrieval/models.py",
]


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



def rerank_document(session: Session, chat_roles: bool) -> str:
    """The text given to the cross-encoder: user text, a blank line, assistant text; for a
    corpus without chat roles (``chat_roles`` False, decided once per corpus), every turn in
    order. Passage offsets in traces refer to this string."""
    if not chat_roles:
        return session.text()
    return session.user_text + "\n\n" + session.assistant_text


class HybridRetriever:
    """See the module docstring. Models are resolved (and hashed) at construction and
    loaded on first use, so provenance can be checked before any model is loaded."""

    def __init__(self, settings: RetrievalSettings, name: str = "hybrid") -> None:
        self.settings = RetrievalSettings.of(settings)  # validates
        self.name = name
        s = self.settings
        if not s.signal_names():
            raise ConfigError("config: at least one of use_dense, use_bm25_user, "
                              "use_bm25_assistant, use_bm25_turn, use_bm25_prf must be true")
        if not any(w > 0 for w in s.weights().values()):
            raise ConfigError("config: every switched-on signal has weight 0 ("
                              + ", ".join(f"weight_{n}" for n in s.signal_names()) + ")")
        self.embedding_ref = (resolve_model(s.embedding_model, "embedding")
                              if s.use_dense else None)
        self.reranker_ref = (resolve_model(s.reranker_model, "reranker")
                             if s.rerank else None)
        from engram_eval.retrieval.onnx_export import prepare_embedding_backend

        # the exported ONNX model (backend onnx), recorded with the run's models
        self.onnx_ref = prepare_embedding_backend(s.embedding_backend, self.embedding_ref,
                                                  s.embedding_precision, s.cache_dir)
        self._cache: Any = None
        self._encoder: Any = None
        self._cross: Any = None
        self._count_tokens: Any = None
        self._token_limit = 256
        self._sessions: tuple[Session, ...] = ()
        self._chat_roles = True
        self._qtrace: dict[tuple[str, str], dict[str, Any]] = {}

    # -- provenance -------------------------------------------------------------
    def models(self) -> list[ModelRef]:
        return [r for r in (self.embedding_ref, self.onnx_ref, self.reranker_ref)
                if r is not None]

    def source_modules(self) -> list[str]:
        return list(SOURCE_MODULES)

    def describe(self) -> dict[str, Any]:
        """The effective settings (derived from ``self.settings``), grouped by stage."""
        d: dict[str, Any] = {"retriever": self.name, **describe_settings(self.settings)}
        if self.settings.use_dense:
            d["dense"]["index"] = "faiss.IndexFlatIP"
        d["lexical"]["tokenizer"] = "lower-cased [a-z0-9]+('[a-z]+)?"
        return d

    # -- lazy resources ---------------------------------------------------------
    def _vector_cache(self) -> Any:
        if self._cache is None and self.settings.use_cache:
            from engram_eval.retrieval.cache import VectorCache, default_cache_dir

            self._cache = VectorCache(self.settings.cache_dir or default_cache_dir())
        return self._cache

    def encoder(self) -> Any:
        if self._encoder is None:
            from engram_eval.retrieval.embeddings import CachedEncoder, make_embedder

            assert self.embedding_ref is not None
            emb = make_embedder(self.settings.embedding_backend, self.embedding_ref,
                                self.settings.embedding_precision, self.settings.batch_size,
                                onnx_ref=self.onnx_ref)
            self._encoder = CachedEncoder(emb, self._vector_cache(), self.settings.embedding_backend)
            counter = token_counter(self.embedding_ref.path)
            if counter is not None:
                self._count_tokens, self._token_limit = counter
        return self._encoder

    def cross_encoder(self) -> Any:
        if self._cross is None:
            from engram_eval.retrieval.rerank import CachedCrossEncoder, make_cross_encoder

            assert self.reranker_ref is not None
            model = make_cross_encoder(self.settings.reranker_backend, self.reranker_ref,
                                       self.settings.rerank_max_length)
            self._cross = CachedCrossEncoder(model, self._vector_cache(),
                                             self.settings.reranker_backend,
                                             self.settings.rerank_max_length)
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
        c = self.settings
        self._sessions = tuple(sessions)
        self._qtrace = {}
        roles = has_chat_roles(self._sessions)
        self._chat_roles = roles
        user_docs = [user_document(s, roles) for s in self._sessions]
        need_user = (c.use_bm25_user or c.use_bm25_prf
                     or ((c.use_dense_rocchio or c.use_bm25_prf) and self._source() == "bm25_user"))
        self._bm25_user = (BM25Index(user_docs, k1=c.bm25_k1, b=c.bm25_b)
                           if need_user else None)
        self._bm25_asst = (BM25Index([assistant_document(s, roles) for s in self._sessions],
                                     k1=c.bm25_k1, b=c.bm25_b)
                           if c.use_bm25_assistant and roles else None)
        self._turn_session: list[int] = []
        self._bm25_turn = None
        if c.use_bm25_turn:
            docs = []
            for si, s in enumerate(self._sessions):
                for t in user_turns(s, roles):
                    docs.append(t.content)
                    self._turn_session.append(si)
            self._bm25_turn = BM25Index(docs, k1=c.bm25_k1, b=c.bm25_b)
        if c.use_dense:
            enc = self.encoder()
            self._pieces = user_pieces(self._sessions, c.dense_piece_words,
                                       c.dense_piece_overlap, self._count_tokens,
                                       self._token_limit, role="user" if roles else None)
            self._vectors = enc.encode([p.text for p in self._pieces])

    def _source(self) -> str:
        """The first-pass signal of the feedback signals."""
        c = self.settings
        return "dense" if c.feedback_source == "dense" and c.use_dense else "bm25_user"

    def _signals(self, question: Question) -> tuple[dict[str, F.Signal], dict[str, Any]]:
        """name -> Signal for every switched-on signal computable on this corpus, plus the
        feedback facts for the question trace."""
        c = self.settings
        n = len(self._sessions)
        out: dict[str, F.Signal] = {}
        info: dict[str, Any] = {}
        q_vec = None
        if c.use_dense:
            q_vec = self.encoder().encode([question.question])[0]
            ds = session_scores(self._pieces, self._vectors, q_vec, n, c.dense_aggregate)
            out["dense"] = F.Signal(ds.scores, np.array([k > 0 for k in ds.n_pieces],
                                                        dtype=bool))
        user_scores = None
        if self._bm25_user is not None:
            user_scores = self._bm25_user.scores(question.question)
            if c.use_bm25_user:
                out["bm25_user"] = F.Signal(user_scores, user_scores > 0)
        if self._bm25_asst is not None:
            s = self._bm25_asst.scores(question.question)
            out["bm25_assistant"] = F.Signal(s, s > 0)
        if self._bm25_turn is not None:
            ts = self._bm25_turn.scores(question.question)
            best = np.zeros(n, dtype=np.float64)
            for t, si in enumerate(self._turn_session):
                if ts[t] > best[si]:
                    best[si] = ts[t]
            out["bm25_turn"] = F.Signal(best, best > 0)
        if c.use_bm25_prf or c.use_dense_rocchio:
            from engram_eval.retrieval import feedback as FB

            source = self._source()
            if source == "dense":
                first = out["dense"]
            else:
                assert user_scores is not None
                first = F.Signal(user_scores, user_scores > 0)
            ranks = F.signal_ranks(first.scores, first.informative)
            top = sorted((r, i) for i, r in enumerate(ranks) if r is not None)
            fb = [i for _, i in top[: c.feedback_docs]]
            info = {"source": source,
                    "sessions": [self._sessions[i].session_id for i in fb]}
            if c.use_bm25_prf:
                assert self._bm25_user is not None
                q_tokens = tokenize(question.question)
                terms = FB.expansion_terms(q_tokens, [self._bm25_user.tokens[i] for i in fb],
                                           self._bm25_user.idf, c.prf_terms)
                s = self._bm25_user.scores_tokens(q_tokens + terms)
                out["bm25_prf"] = F.Signal(s, s > 0)
                info["terms"] = terms
            if c.use_dense_rocchio:
                assert q_vec is not None
                sims = (np.asarray(self._vectors, dtype=np.float32) @ q_vec.astype(np.float32)
                        if len(self._pieces) else np.zeros(0, dtype=np.float32))
                best_p = FB.best_pieces([p.session_index for p in self._pieces], sims, fb)
                q2 = FB.rocchio_query(q_vec, np.asarray(self._vectors)[best_p]
                                      if best_p else np.zeros((0, len(q_vec))), c.rocchio_beta)
                rs = session_scores(self._pieces, self._vectors, q2, n, c.dense_aggregate)
                out["dense_rocchio"] = F.Signal(rs.scores, np.array(
                    [k > 0 for k in rs.n_pieces], dtype=bool))
        return out, info

    def _window(self, question: Question) -> tuple[Any, str]:
        from engram_eval.retrieval.temporal import safe_time_window

        return safe_time_window(question.question, question.question_date)

    def rank(self, question: Question) -> Ranking:
        from engram_eval.retrieval.temporal import parse_date

        c = self.settings
        sessions = self._sessions
        n = len(sessions)
        window, status = self._window(question)
        qtrace: dict[str, Any] = {
            "signals": [], "fusion": c.fusion_spec(),
            "time_window": None if window is None else {
                "start": window.start.isoformat(), "end": window.end.isoformat(),
                "expression": window.expression, "kind": window.kind},
            "temporal_status": status, "temporal": c.temporal,
            "temporal_boost": c.temporal_boost, "chat_roles": self._chat_roles}
        self._qtrace = {(question.question_id, question.question): qtrace}
        if n == 0:
            return Ranking(question.question_id, ())
        signals, fb_info = self._signals(question)
        qtrace["signals"] = F._canonical(list(signals))
        if fb_info:
            qtrace["feedback"] = fb_info
        traces: list[dict[str, Any]] = [{} for _ in range(n)]
        for name in qtrace["signals"]:
            sig = signals[name]
            ranks = F.signal_ranks(sig.scores, sig.informative)
            for i in range(n):
                traces[i][name] = float(sig.scores[i])
                traces[i][name + "_rank"] = ranks[i]
        fused = F.fuse(signals, method=c.fusion, weights=c.weights(), k=c.rrf_k,
                       normalisation=c.normalisation)
        fused_order = F.order(fused)
        fused_rank = F.rank_of(fused_order)

        mult = np.ones(n, dtype=np.float64)
        in_window: list[bool | None] = [None] * n
        if window is not None:
            for i, s in enumerate(sessions):
                d = parse_date(s.date)
                if d is not None:
                    in_window[i] = window.contains(d)
                    if c.temporal and in_window[i]:
                        mult[i] = float(c.temporal_boost)
        tscore = F.temporal_scores(fused, mult)
        t_order = F.order(tscore)
        t_rank = F.rank_of(t_order)

        raw = fused.copy()
        final = tscore.copy()
        reranked: set[int] = set()
        rerank_rank: dict[int, int] = {}
        if c.rerank:
            from engram_eval.retrieval.rerank import sigmoid

            cands = fused_order[: c.rerank_candidates]
            raw_scores = self._rerank(question, cands, traces)
            for i in cands:
                prior = 1.0 - (fused_rank[i] - 1) / len(cands)
                raw[i] = raw_scores[i]
                base = (1 - c.fusion_alpha) * sigmoid(raw_scores[i]) + c.fusion_alpha * prior
                final[i] = base * mult[i]
                reranked.add(i)
            rest = [i for i in range(n) if i not in reranked]
            if rest:
                top_rest = max(float(tscore[i]) for i in rest)
                for i in rest:
                    final[i] = tscore[i] - top_rest - 1.0
            rerank_rank = F.rank_of(F.order([final[i] for i in cands]))
            rerank_rank = {cands[j]: r for j, r in rerank_rank.items()}
        order = sorted(range(n), key=lambda i: (i not in reranked, -float(final[i]), i))
        moved = False
        if c.rerank and c.preserve_prior:
            leader = t_order[0]
            order, moved = preserve_prior_leader(order, leader, c.result_k)
            if moved:
                pos = order.index(leader)
                above = float(final[order[pos - 1]])
                below = float(final[order[pos + 1]])
                traces[leader]["pre_coverage_score"] = float(final[leader])
                final[leader] = above if above == below else below + (above - below) / 2.0
        results = []
        for i in order:
            t = traces[i]
            t.update({"corpus_index": i, "fused": float(fused[i]),
                      "fused_rank": fused_rank[i], "prior_rank": fused_rank[i],
                      "temporal": float(mult[i]), "in_window": in_window[i],
                      "temporal_rank": t_rank[i], "reranked": i in reranked,
                      "rerank_rank": rerank_rank.get(i), "raw_score": float(raw[i]),
                      "final_score": float(final[i])})
            if moved and i == t_order[0]:
                t["moved_by_coverage"] = True
            results.append(ScoredSession(sessions[i].session_id, float(final[i]), t))
        return Ranking(question.question_id, tuple(results))

    def question_trace(self, question: Question) -> dict[str, Any]:
        """The question-level trace of the last ``rank(question)`` (see module docstring)."""
        key = (question.question_id, question.question)
        if key not in self._qtrace:
            window, status = self._window(question)
            return {"signals": [], "fusion": self.settings.fusion_spec(),
                    "time_window": None if window is None else {
                        "start": window.start.isoformat(), "end": window.end.isoformat(),
                        "expression": window.expression, "kind": window.kind},
                    "temporal_status": status}
        return dict(self._qtrace[key])

    def _rerank(self, question: Question, cands: list[int],
                traces: list[dict[str, Any]]) -> dict[int, float]:
        from engram_eval.retrieval.rerank import sigmoid

        c = self.settings
        cross = self.cross_encoder()
        docs = {i: rerank_document(self._sessions[i], self._chat_roles) for i in cands}
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



def _variant(settings: RetrievalSettings, name: str, **changes: Any) -> HybridRetriever:
    return HybridRetriever(dataclasses.replace(RetrievalSettings.of(settings), **changes),
                           name=name)


def make_hybrid(config: RetrievalSettings) -> HybridRetriever:
    return HybridRetriever(config, name="hybrid")


def make_bm25_only(config: RetrievalSettings) -> HybridRetriever:
    """The lexical signals of ``config`` fused (no dense signal)."""
    return _variant(config, "bm25", use_dense=False, use_dense_rocchio=False)


def make_dense_only(config: RetrievalSettings) -> HybridRetriever:
    """The dense signals of ``config`` alone (no BM25)."""
    return _variant(config, "dense", use_bm25_user=False, use_bm25_assistant=False,
                    use_bm25_turn=False, use_bm25_prf=False)
