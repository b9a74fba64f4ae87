"""The hybrid retriever (its stages: :mod:`engram_eval.retrieval.pipeline`; README, "Architecture").

Built from :class:`~engram_eval.retrieval.settings.RetrievalSettings` (a
:class:`~engram_eval.runs.config.RunConfig` is one), kept as ``self.settings``; ``describe()`` is
derived from them. Per question (one corpus per question, nothing shared but caches):

1. Documents: per session its user text and its assistant text. A corpus without chat roles
   (LoCoMo: speakers' names) has every turn as user text and no assistant text
   (:func:`engram_eval.data.records.has_chat_roles`, decided once per corpus in ``index``).
   The structure also picks the encoder: ``people_overrides`` may name another one for
   people's chats (:class:`~.holder.ModelHolder` holds one per structure), so pieces are cut
   with that model's tokenizer and encoded by it, the question too.
2. Signals (each computed when its ``use_*`` switch is on, and traced even at weight 0):
   ``dense`` (best user piece, :mod:`.dense`), ``bm25_user``, ``bm25_assistant``,
   ``bm25_turn`` (BM25 over single user turns, a session scoring its best turn, or the
   sum of its ``bm25_turn_top_m`` best),
   ``bm25_prf`` (the question expanded with feedback terms, RM3-style) and ``dense_rocchio``
   (the question vector moved toward the feedback sessions' best pieces); the two feedback
   signals start from a first pass fixed by ``feedback_source`` (:mod:`.feedback`). The
   dense signals score a session by its best piece, or with ``dense_turn_top_m`` above 1 by
   the sum of its m best turns (a turn scoring its best piece).
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
   * temporal``, where ``prior`` is ``1 - (fused_rank - 1) / n_candidates``
   (``rerank_prior`` 'rank') or the fused score min-max normalised over the candidates
   ('score'; :func:`.pipeline.rerank_priors`). The ranking is
   ordered by (reranked first, then score): sessions not reranked keep their temporal score
   shifted below every reranked one, ``t - max(t over not reranked) - 1`` (so <= -1 < 0 <=
   any reranked score), whatever ``rrf_k`` and the weights. Passage fallback: when every base
   sigmoid score is under ``passage_floor``, each candidate longer than ``passage_max_words``
   gets one focused excerpt (:mod:`.passages`) scored too, and the larger raw score survives.
   What is scored is ``rerank_unit``: ``passage`` (the session text with that fallback, the
   default), ``session`` (the session text only) or ``turn`` (every user turn with text, a
   session taking its best turn's raw score, traced as ``rerank_turn``).
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
* ``s_turns`` for a turn-level signal summing more than one turn (``bm25_turn`` with
  ``bm25_turn_top_m`` above 1; ``dense`` and ``dense_rocchio`` with ``dense_turn_top_m``
  above 1): the turns summed, as indices into the session's turns, best first (BM25: only
  turns scoring above 0); absent at top m 1, where the score is the best turn's alone;
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
* ``moved_by_coverage``: true (only present when the coverage step moved the session);
* ``gate_features`` (the first :data:`.gate_features.GATE_DEPTH` results only): the
  confidence features the study kept, name -> value (null where undefined), computed by
  :mod:`.gate_features` with every spread over the first :data:`.gate_features.GATE_SPREAD`
  results (runs made before it lack the key).

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

from engram_eval.data.records import (
    Question,
    Session,
    has_chat_roles,
)
from engram_eval.retrieval import pipeline as P
from engram_eval.retrieval.base import Ranking, ScoredSession
from engram_eval.retrieval.holder import ModelHolder
from engram_eval.retrieval.models import ModelRef
from engram_eval.retrieval.settings import RetrievalSettings, describe_settings
from engram_eval.retrieval.sources import PIPELINE_SOURCES


class HybridRetriever:
    """See the module docstring. Models are resolved (and hashed) at construction and
    loaded on first use, so provenance can be checked before any model is loaded."""

    def __init__(self, settings: RetrievalSettings, name: str = "hybrid", *,
                 vector_cache: Any = None, holder: ModelHolder | None = None) -> None:
        """``holder``: the models to rank with (:class:`~.holder.ModelHolder`; built from
        ``settings`` when not given); ``vector_cache``: an open cache for the holder built
        here to use instead of the one ``use_cache`` / ``cache_dir`` name."""
        self.settings = RetrievalSettings.of(settings)  # validates
        self.name = name
        P.check_signals(self.settings)
        self.holder = holder if holder is not None else ModelHolder(
            self.settings, vector_cache=vector_cache)
        h = self.holder
        self.embedding_ref = h.embedding_ref
        self.reranker_ref = h.reranker_ref
        self.onnx_ref = h.onnx_ref
        self.reranker_onnx_ref = h.reranker_onnx_ref
        self._sessions: tuple[Session, ...] = ()
        self._chat_roles = True
        self._qtrace: dict[tuple[str, str], dict[str, Any]] = {}

    # -- provenance -------------------------------------------------------------
    def models(self) -> list[ModelRef]:
        return self.holder.models()

    def source_modules(self) -> list[str]:
        return list(PIPELINE_SOURCES)

    def describe(self) -> dict[str, Any]:
        """The effective settings (derived from ``self.settings``), grouped by stage."""
        d: dict[str, Any] = {"retriever": self.name, **describe_settings(self.settings)}
        if self.settings.use_dense:
            d["dense"]["index"] = "faiss.IndexFlatIP"
        d["lexical"]["tokenizer"] = "lower-cased [a-z0-9]+('[a-z]+)?"  # (the word rule)
        from engram_eval.retrieval.analyzer import analyzer_of

        d["lexical"].update(analyzer_of(self.settings).describe())
        return d

    # -- models (held by self.holder) ----------------------------------------------
    def encoder(self, chat_roles: bool = True) -> Any:
        """The encoder of haystacks of this structure (:meth:`.holder.ModelHolder.encoder`)."""
        return self.holder.encoder(chat_roles)

    def cross_encoder(self) -> Any:
        return self.holder.cross_encoder()

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Raw cross-encoder scores (:meth:`.holder.ModelHolder.score_pairs`)."""
        return self.holder.score_pairs(pairs)

    def stats(self) -> dict[str, Any]:
        return self.holder.stats()

    # -- protocol ---------------------------------------------------------------
    def index(self, sessions: Sequence[Session]) -> None:
        """Stage 0 of :mod:`.pipeline` over the question's haystack."""
        c = self.settings
        self._qtrace = {}
        # the structure decides the encoder (people's chats may have their own) before any
        # piece is cut or encoded; build_corpus decides it again, by the same rule
        roles = has_chat_roles(sessions)
        encode = None
        if c.use_dense:
            encode = self.encoder(roles).encode
        count_tokens, token_limit = self.holder.token_counter(roles)
        self._corpus = P.build_corpus(sessions, c, encode=encode, count_tokens=count_tokens,
                                      token_limit=token_limit)
        self._sessions = self._corpus.sessions
        self._chat_roles = self._corpus.chat_roles

    def rank(self, question: Question) -> Ranking:
        """Stages 1-6 of :mod:`.pipeline` for ``question`` over the indexed haystack."""
        c = self.settings
        st = P.run_pipeline(question.question_id, question.question, question.question_date,
                            c, self._corpus,
                            encode=(self.encoder(self._chat_roles).encode if c.use_dense
                                    else None),
                            score_pairs=self.score_pairs if c.reranks_any() else None)
        self._qtrace = {(question.question_id, question.question): dict(st.qtrace)}
        sessions = self._sessions
        return Ranking(question.question_id, tuple(
            ScoredSession(sessions[i].session_id, float(st.final[i]), dict(t))
            for i, t in P.finish(st)))

    def question_trace(self, question: Question) -> dict[str, Any]:
        """The question-level trace of the last ``rank(question)`` (see module docstring)."""
        key = (question.question_id, question.question)
        if key not in self._qtrace:
            from engram_eval.retrieval.temporal import safe_time_window

            window, status = safe_time_window(question.question, question.question_date)
            return {"signals": [], "fusion": self.settings.fusion_spec(),
                    "time_window": P.window_trace(window), "temporal_status": status}
        return dict(self._qtrace[key])


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
