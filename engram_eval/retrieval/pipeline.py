"""The one retrieval pipeline: stages as plain functions over one per-question state.

Every consumer ranks through these functions: the benchmark retrievers
(:class:`engram_eval.retrieval.hybrid.HybridRetriever`, hence every ``run``), production
search (:func:`engram_eval.production.search.search_memories`) and ``tune``'s re-scoring
(:func:`rescore`, used by :mod:`engram_eval.analysis.tune` to prove that it reproduces
stored rankings, and to check question by question what its batched grid search reports).
Settings come from one dataclass, :class:`~engram_eval.retrieval.settings.RetrievalSettings`:
no stage holds a default.

Stages, in order (README.md, "Architecture", gives the same outline):

0. :func:`build_corpus` (candidates): one question's haystack indexed — user and assistant
   documents (:func:`engram_eval.data.records.has_chat_roles` decides once per corpus),
   BM25 indexes, dense pieces and their vectors (encoded, or handed in by a store that
   persisted them). Every session of the corpus is a candidate.
1. :func:`signals_stage`: every switched-on signal (:data:`settings.SIGNALS`), each with its
   informative mask, plus the feedback facts (``bm25_prf`` / ``dense_rocchio``).
2. :func:`fusion_stage`: weighted RRF or convex fusion -> ``fused``, the prior order and
   ranks, computed by the batched scorer (:class:`.fusion.SignalBatch`, the one
   implementation ``tune``'s grid search runs too) on this one question, under
   :func:`fusion_setting` of the settings.
3. :func:`temporal_stage`: the question's window (:func:`.temporal.safe_time_window`, never
   raises), each session's ``in_window``, the multiplier (``temporal_boost`` once per
   session, :func:`.fusion.multipliers`) and the temporal order
   (:func:`.fusion.temporal_scores`).
4. :func:`rerank_stage` (only with ``rerank``): cross-encoder scores of the best
   ``rerank_candidates`` fused candidates, the passage fallback, the blend with the prior
   (``fusion_alpha``, ``rerank_prior``) and the temporal multiplier; sessions not reranked
   go below.
5. :func:`coverage_stage` (only after a rerank with ``preserve_prior``): the temporal leader
   kept inside the first ``result_k`` (:mod:`.coverage`).
6. :func:`features_stage`: the confidence features the study kept
   (:data:`.gate_features.GATE_FEATURES`, computed by :mod:`.gate_features`, the one
   implementation) of the first :data:`.gate_features.GATE_DEPTH` results, traced as
   ``gate_features``; they never change the ranking.
7. :func:`finish`: the per-session traces (:class:`SessionTrace`) and the ranking.

The trace contract (keys, meaning) is documented in :mod:`engram_eval.retrieval.hybrid`,
which ``analyze`` and ``tune`` read; :class:`SessionTrace` and :class:`QuestionTrace` type it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

from engram_eval.data.records import (
    Session,
    Turn,
    assistant_document,
    has_chat_roles,
    user_turns,
)
from engram_eval.retrieval import fusion as F
from engram_eval.retrieval.analyzer import analyzer_of
from engram_eval.retrieval.bm25 import BM25Index
from engram_eval.retrieval.coverage import preserve_prior_leader
from engram_eval.retrieval.dense import Piece, session_scores, user_pieces
from engram_eval.retrieval.settings import RetrievalSettings

#: text -> unit vectors (one row per text); the embedding backend behind a cache.
Encode = Callable[[list[str]], np.ndarray]
#: (query, document) pairs -> raw cross-encoder scores (logits).
ScorePairs = Callable[[list[tuple[str, str]]], list[float]]


class QuestionTrace(TypedDict, total=False):
    """``row.trace.question`` (see :mod:`engram_eval.retrieval.hybrid`)."""

    signals: list[str]
    fusion: dict[str, Any]
    time_window: dict[str, str] | None
    temporal_status: str
    temporal: bool
    temporal_boost: float
    chat_roles: bool
    structure: dict[str, Any]
    feedback: dict[str, Any]


class SessionTrace(TypedDict, total=False):
    """``row.trace.sessions[i]``; each signal ``s`` also adds ``s`` and ``s_rank``."""

    corpus_index: int
    fused: float
    fused_rank: int
    prior_rank: int
    temporal: float
    in_window: bool | None
    temporal_rank: int
    reranked: bool
    rerank_rank: int | None
    base_raw_score: float
    rerank_turn: int | None
    rerank_turns_scored: int
    prior: float
    passage: dict[str, Any]
    raw_score: float
    final_score: float
    pre_coverage_score: float
    moved_by_coverage: bool
    gate_features: dict[str, float | None]


@dataclass
class Corpus:
    """One question's haystack, indexed (stage 0)."""

    sessions: tuple[Session, ...]
    chat_roles: bool
    bm25_user: BM25Index | None = None
    bm25_assistant: BM25Index | None = None
    bm25_turn: BM25Index | None = None
    turn_session: list[int] = field(default_factory=list)
    #: each ``bm25_turn`` document's turn index in its session (``Turn.index``)
    turn_index: list[int] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    vectors: np.ndarray | None = None


def check_signals(settings: RetrievalSettings) -> None:
    """ConfigError unless ``settings`` can rank: at least one signal switched on, and one of
    them with a weight above 0 (checked before any model is resolved)."""
    from engram_eval.errors import ConfigError

    s = settings
    if not s.signal_names():
        raise ConfigError("config: at least one of use_dense, use_bm25_user, "
                          "use_bm25_assistant, use_bm25_turn, use_bm25_prf must be true")
    if not any(w > 0 for w in s.weights().values()):
        raise ConfigError("config: every switched-on signal has weight 0 ("
                          + ", ".join(f"weight_{n}" for n in s.signal_names()) + ")")


def feedback_source(settings: RetrievalSettings) -> str:
    """The first-pass signal of the feedback signals."""
    s = settings
    return "dense" if s.feedback_source == "dense" and s.use_dense else "bm25_user"


def build_corpus(sessions: Sequence[Session], settings: RetrievalSettings, *,
                 encode: Encode | None = None,
                 count_tokens: Callable[[str], int] | None = None, token_limit: int = 256,
                 pieces: Sequence[Piece] | None = None,
                 vectors: np.ndarray | None = None) -> Corpus:
    """Stage 0. Dense pieces are cut here and encoded with ``encode`` unless ``pieces`` and
    ``vectors`` are given (a store that persisted them)."""
    sess = tuple(sessions)
    roles = has_chat_roles(sess)
    c = settings.for_chat_roles(roles)  # the lexical fields may differ by chat structure
    corpus = Corpus(sess, roles)
    lex = analyzer_of(c)
    text = lexical_text(c, roles)
    need_user = (c.use_bm25_user or c.use_bm25_prf
                 or ((c.use_dense_rocchio or c.use_bm25_prf)
                     and feedback_source(c) == "bm25_user"))
    if need_user:
        corpus.bm25_user = BM25Index(["\n".join(text(t) for t in user_turns(s, roles))
                                      for s in sess],
                                     k1=c.bm25_k1, b=c.bm25_b, analyzer=lex)
    if c.use_bm25_assistant and roles:
        corpus.bm25_assistant = BM25Index([assistant_document(s, roles) for s in sess],
                                          k1=c.bm25_k1, b=c.bm25_b, analyzer=lex)
    if c.use_bm25_turn:
        docs = []
        for si, s in enumerate(sess):
            for t in user_turns(s, roles):
                docs.append(text(t))
                corpus.turn_session.append(si)
                corpus.turn_index.append(t.index)
        corpus.bm25_turn = BM25Index(docs, k1=c.bm25_k1, b=c.bm25_b, analyzer=lex)
    if c.use_dense:
        if pieces is not None:
            if vectors is None:
                raise ValueError("build_corpus: pieces given without their vectors")
            corpus.pieces, corpus.vectors = list(pieces), vectors
        else:
            if encode is None:
                raise ValueError("build_corpus: use_dense needs an encoder")
            corpus.pieces = user_pieces(sess, c.dense_piece_words, c.dense_piece_overlap,
                                        count_tokens, token_limit,
                                        role="user" if roles else None)
            corpus.vectors = encode([p.text for p in corpus.pieces])
    return corpus


def lexical_text(settings: RetrievalSettings, chat_roles: bool) -> Callable[[Turn], str]:
    """A turn's text as the BM25 signals index it: its content, or ``NAME: content`` for a
    haystack without chat roles when ``lexical_speaker`` is ``prefix`` (a chat's roles are
    'user'/'assistant', never prefixed)."""
    if settings.lexical_speaker == "prefix" and not chat_roles:
        return lambda t: f"{t.role}: {t.content}"
    return lambda t: t.content


@dataclass
class QuestionState:
    """Everything the stages compute for one question over one corpus."""

    question_id: str
    text: str
    question_date: str
    settings: RetrievalSettings
    corpus: Corpus
    qtrace: QuestionTrace = field(default_factory=lambda: QuestionTrace())
    traces: list[SessionTrace] = field(default_factory=list)
    q_vec: np.ndarray | None = None
    signals: dict[str, F.Signal] = field(default_factory=dict)
    #: signal -> per session the turns its turn-level score summed (turn indices, best
    #: first); only for a signal whose top m is above 1 (traced as ``<signal>_turns``)
    turn_sets: dict[str, list[list[int]]] = field(default_factory=dict)
    fused: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fused_order: list[int] = field(default_factory=list)
    fused_rank: dict[int, int] = field(default_factory=dict)
    window: Any = None
    in_window: list[bool | None] = field(default_factory=list)
    mult: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tscore: np.ndarray = field(default_factory=lambda: np.zeros(0))
    t_order: list[int] = field(default_factory=list)
    t_rank: dict[int, int] = field(default_factory=dict)
    raw: np.ndarray = field(default_factory=lambda: np.zeros(0))
    final: np.ndarray = field(default_factory=lambda: np.zeros(0))
    reranked: set[int] = field(default_factory=set)
    rerank_rank: dict[int, int] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    moved: bool = False
    #: every (query, document) pair the rerank stage gave the cross-encoder, with its raw
    #: score: what :func:`run_pipeline` computed, for a consumer that needs the same scores
    #: (production's gate) not to score a pair twice.
    cross: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.corpus.sessions)


def window_trace(window: Any) -> dict[str, str] | None:
    if window is None:
        return None
    return {"start": window.start.isoformat(), "end": window.end.isoformat(),
            "expression": window.expression, "kind": window.kind}


def new_state(question_id: str, text: str, question_date: str, settings: RetrievalSettings,
              corpus: Corpus) -> QuestionState:
    """The state before any stage, with the question trace's settings part and time window
    (resolved here: it depends on the question alone)."""
    from engram_eval.retrieval.temporal import safe_time_window

    c = settings.for_chat_roles(corpus.chat_roles)  # the haystack's chat structure decides
    window, status = safe_time_window(text, question_date)
    st = QuestionState(question_id, text, question_date, c, corpus)
    st.window = window
    st.qtrace = QuestionTrace(signals=[], fusion=c.fusion_spec(),
                              time_window=window_trace(window), temporal_status=status,
                              temporal=c.temporal, temporal_boost=c.temporal_boost,
                              chat_roles=corpus.chat_roles)
    if settings.people_overrides:  # traced only when the structures can differ
        st.qtrace["structure"] = {
            "kind": "chat" if corpus.chat_roles else "people",
            "overrides": {} if corpus.chat_roles else dict(settings.people_overrides)}
    st.traces = [SessionTrace() for _ in range(st.n)]
    return st


def signals_stage(st: QuestionState, encode: Encode | None) -> None:
    """Stage 1: ``st.signals`` (name -> Signal) for every switched-on signal computable on
    this corpus, each traced (raw score and rank among informative sessions)."""
    c = st.settings
    corpus = st.corpus
    n = st.n
    out: dict[str, F.Signal] = {}
    info: dict[str, Any] = {}
    q = st.text
    if c.use_dense:
        assert encode is not None and corpus.vectors is not None
        st.q_vec = encode([q])[0]
        ds = session_scores(corpus.pieces, corpus.vectors, st.q_vec, n, c.dense_aggregate,
                            c.dense_turn_top_m)
        out["dense"] = F.Signal(ds.scores, np.array([k > 0 for k in ds.n_pieces], dtype=bool))
        if ds.top_turns is not None:
            st.turn_sets["dense"] = ds.top_turns
    user_scores = None
    if corpus.bm25_user is not None:
        user_scores = corpus.bm25_user.scores(q)
        if c.use_bm25_user:
            out["bm25_user"] = F.Signal(user_scores, user_scores > 0)
    if corpus.bm25_assistant is not None:
        s = corpus.bm25_assistant.scores(q)
        out["bm25_assistant"] = F.Signal(s, s > 0)
    if corpus.bm25_turn is not None:
        ts = corpus.bm25_turn.scores(q)
        if c.bm25_turn_top_m == 1:
            best = np.zeros(n, dtype=np.float64)
            for t, si in enumerate(corpus.turn_session):
                if ts[t] > best[si]:
                    best[si] = ts[t]
        else:
            best, st.turn_sets["bm25_turn"] = top_m_turns(
                ts, corpus.turn_session, corpus.turn_index, n, c.bm25_turn_top_m)
        out["bm25_turn"] = F.Signal(best, best > 0)
    if c.use_bm25_prf or c.use_dense_rocchio:
        from engram_eval.retrieval import feedback as FB

        source = feedback_source(c)
        if source == "dense":
            first = out["dense"]
        else:
            assert user_scores is not None
            first = F.Signal(user_scores, user_scores > 0)
        ranks = F.signal_ranks(first.scores, first.informative)
        top = sorted((r, i) for i, r in enumerate(ranks) if r is not None)
        fb = [i for _, i in top[: c.feedback_docs]]
        info = {"source": source, "sessions": [corpus.sessions[i].session_id for i in fb]}
        if c.use_bm25_prf:
            assert corpus.bm25_user is not None
            q_tokens = corpus.bm25_user.analyzer.analyze(q)
            terms = FB.expansion_terms(q_tokens, [corpus.bm25_user.tokens[i] for i in fb],
                                       corpus.bm25_user.idf, c.prf_terms)
            s = corpus.bm25_user.scores_tokens(q_tokens + terms)
            out["bm25_prf"] = F.Signal(s, s > 0)
            info["terms"] = terms
        if c.use_dense_rocchio:
            q_vec = st.q_vec
            assert q_vec is not None and corpus.vectors is not None
            pieces = corpus.pieces
            sims = (np.asarray(corpus.vectors, dtype=np.float32) @ q_vec.astype(np.float32)
                    if len(pieces) else np.zeros(0, dtype=np.float32))
            best_p = FB.best_pieces([p.session_index for p in pieces], sims, fb)
            q2 = FB.rocchio_query(q_vec, np.asarray(corpus.vectors)[best_p]
                                  if best_p else np.zeros((0, len(q_vec))), c.rocchio_beta)
            rs = session_scores(pieces, corpus.vectors, q2, n, c.dense_aggregate,
                                c.dense_turn_top_m)
            out["dense_rocchio"] = F.Signal(rs.scores, np.array(
                [k > 0 for k in rs.n_pieces], dtype=bool))
            if rs.top_turns is not None:
                st.turn_sets["dense_rocchio"] = rs.top_turns
    st.signals = out
    st.qtrace["signals"] = F._canonical(list(out))
    if info:
        st.qtrace["feedback"] = info
    trace_signals(st)


def top_m_turns(turn_scores: np.ndarray, turn_session: Sequence[int],
                turn_index: Sequence[int], n: int, m: int
                ) -> tuple[np.ndarray, list[list[int]]]:
    """A turn-level signal's session scores: per session the sum of its ``m`` best turn
    scores that are above 0 (a turn sharing no term adds nothing; a session with fewer such
    turns sums what it has), added best first, and those turns' indices (best first; ties:
    the earlier turn). With ``m`` 1 this is the session's best turn, floored at 0."""
    per: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    for t, si in enumerate(turn_session):
        x = float(turn_scores[t])
        if x > 0:
            per[si].append((x, t))
    scores = np.zeros(n, dtype=np.float64)
    turns: list[list[int]] = []
    for si, cands in enumerate(per):
        top = sorted(cands, key=lambda xt: (-xt[0], xt[1]))[:m]
        total = 0.0
        for x, _ in top:
            total += x
        scores[si] = total
        turns.append([turn_index[t] for _, t in top])
    return scores, turns


def trace_signals(st: QuestionState) -> None:
    """Each signal's raw score and rank (among informative sessions) into the traces, and
    for a turn-level signal summing more than one turn the turns it summed
    (``<signal>_turns``)."""
    for name in st.qtrace["signals"]:
        sig = st.signals[name]
        ranks = F.signal_ranks(sig.scores, sig.informative)
        turns = st.turn_sets.get(name)
        for i in range(st.n):
            tr: dict[str, Any] = st.traces[i]  # type: ignore[assignment]
            tr[name] = float(sig.scores[i])
            tr[name + "_rank"] = ranks[i]
            if turns is not None:
                tr[name + "_turns"] = turns[i]


def fusion_setting(settings: RetrievalSettings) -> F.FusionSetting:
    """The fusion and temporal fields of ``settings`` as the batched scorer's record (the
    weights of the switched-on signals, :meth:`RetrievalSettings.weights`)."""
    s = settings
    return F.FusionSetting(s.fusion, s.normalisation, s.rrf_k, tuple(s.weights().items()),
                           s.temporal, s.temporal_boost)


def with_fusion_setting(settings: RetrievalSettings, setting: F.FusionSetting
                        ) -> RetrievalSettings:
    """``settings`` with ``setting``'s fields applied (validated by the settings dataclass,
    the one place where bounds live); the inverse of :func:`fusion_setting`."""
    import dataclasses

    from engram_eval.retrieval.settings import SIGNALS

    weight_field = {name: w for name, _, w in SIGNALS}
    changes: dict[str, Any] = {"fusion": setting.fusion, "normalisation": setting.normalisation,
                               "rrf_k": setting.rrf_k, "temporal": setting.temporal,
                               "temporal_boost": setting.temporal_boost}
    for name, w in setting.weights:
        changes[weight_field[name]] = w
    return dataclasses.replace(settings, **changes)


def fusion_stage(st: QuestionState) -> None:
    """Stage 2: the fused score, the prior order and the prior rank of every session, from
    the batched scorer (:class:`.fusion.SignalBatch`) on a batch of this one question."""
    batch = F.SignalBatch.of([st.signals], lengths=[st.n])
    st.fused = batch.fused(fusion_setting(st.settings))[0]
    st.fused_order = F.order(st.fused)
    st.fused_rank = F.rank_of(st.fused_order)


def locate_in_window(st: QuestionState) -> None:
    """Stage 3a: ``in_window`` per session (None without a window or a parseable date)."""
    from engram_eval.retrieval.temporal import parse_date

    st.in_window = [None] * st.n
    if st.window is not None:
        for i, s in enumerate(st.corpus.sessions):
            d = parse_date(s.date)
            if d is not None:
                st.in_window[i] = st.window.contains(d)


def boost_stage(st: QuestionState) -> None:
    """Stage 3b: the multiplier (``temporal_boost`` once per session inside the window when
    ``temporal`` is on), the boosted prior and its order. Without a rerank these are final."""
    inside = np.array([bool(x) for x in st.in_window], dtype=bool)
    st.mult = F.multipliers(inside, fusion_setting(st.settings))
    st.tscore = F.temporal_scores(st.fused, st.mult)
    st.t_order = F.order(st.tscore)
    st.t_rank = F.rank_of(st.t_order)
    st.raw = st.fused.copy()
    st.final = st.tscore.copy()
    st.order = sorted(range(st.n), key=lambda i: (True, -float(st.final[i]), i))


def temporal_stage(st: QuestionState) -> None:
    """Stage 3: :func:`locate_in_window` then :func:`boost_stage`."""
    locate_in_window(st)
    boost_stage(st)


def rerank_document(session: Session, chat_roles: bool) -> str:
    """The text given to the cross-encoder: user text, a blank line, assistant text; for a
    corpus without chat roles (``chat_roles`` False, decided once per corpus), every turn in
    order. Passage offsets in traces refer to this string."""
    if not chat_roles:
        return session.text()
    return session.user_text + "\n\n" + session.assistant_text


def cross_scores(st: QuestionState, cands: list[int], score_pairs: ScorePairs
                 ) -> dict[int, float]:
    """Raw cross-encoder scores of ``cands`` with the passage fallback (stage 4's model
    part): when every base sigmoid is under ``passage_floor``, each candidate with a focused
    excerpt has it scored too and the larger raw score survives (both traced)."""
    from engram_eval.retrieval.rerank import sigmoid

    c = st.settings
    q = st.text
    if c.rerank_unit == "turn":
        return turn_scores(st, cands, score_pairs)
    docs = {i: rerank_document(st.corpus.sessions[i], st.corpus.chat_roles) for i in cands}
    base = score_pairs([(q, docs[i]) for i in cands])
    raw = dict(zip(cands, base, strict=False))
    for i in cands:
        st.traces[i]["base_raw_score"] = raw[i]
    if (c.rerank_unit == "passage" and c.passage_fallback
            and all(sigmoid(x) < c.passage_floor for x in base)):
        from engram_eval.retrieval.passages import select_excerpt

        excerpts = {}
        for i in cands:
            ex = select_excerpt(q, docs[i], max_words=c.passage_max_words)
            if ex is not None:
                excerpts[i] = ex
        if excerpts:
            ids = list(excerpts)
            ex_raw = score_pairs([(q, excerpts[i].text) for i in ids])
            for i, x in zip(ids, ex_raw, strict=False):
                ex = excerpts[i]
                st.traces[i]["passage"] = {"base_raw_score": raw[i], "excerpt_raw_score": x,
                                           "source_start": ex.start, "source_end": ex.end,
                                           "passage_words": ex.words}
                raw[i] = max(raw[i], x)
    return raw


def turn_scores(st: QuestionState, cands: list[int], score_pairs: ScorePairs
                ) -> dict[int, float]:
    """``rerank_unit: turn``: every user turn with text of each candidate is scored (one
    batch); a session's raw score is its best turn's (ties: the earlier turn), traced as
    ``rerank_turn`` (the turn's index in the session) and ``base_raw_score``. A candidate with
    no user text scores the session text instead (``rerank_turn`` null)."""
    q = st.text
    m = st.settings.rerank_turn_top_m
    closest = _dense_turn_similarity(st, cands) if m else {}
    pairs: list[tuple[str, str]] = []
    owner: list[tuple[int, int | None]] = []
    for i in cands:
        s = st.corpus.sessions[i]
        roles = st.corpus.chat_roles  # the user_turns rule, keeping each turn's index
        turns = [(k, t.content) for k, t in enumerate(s.turns)
                 if (t.role == "user" or not roles) and t.content.strip()]
        if m and len(turns) > m:
            sim = closest.get(i, {})
            keep = sorted(range(len(turns)), key=lambda j: (
                -sim.get(s.turns[turns[j][0]].index, -math.inf), j))[:m]
            turns = [turns[j] for j in sorted(keep)]
        if m:
            st.traces[i]["rerank_turns_scored"] = len(turns)
        if not turns:
            pairs.append((q, rerank_document(s, st.corpus.chat_roles)))
            owner.append((i, None))
        for k, text in turns:
            pairs.append((q, text))
            owner.append((i, k))
    scores = score_pairs(pairs) if pairs else []
    raw: dict[int, float] = {}
    best_turn: dict[int, int | None] = {}
    for (i, turn), x in zip(owner, scores, strict=True):
        if i not in raw or x > raw[i]:
            raw[i], best_turn[i] = x, turn
    for i in cands:
        st.traces[i]["base_raw_score"] = raw[i]
        st.traces[i]["rerank_turn"] = best_turn[i]
    return raw


def _dense_turn_similarity(st: QuestionState, cands: list[int]) -> dict[int, dict[int, float]]:
    """Per candidate session, each turn's (``Turn.index``) cosine to the question: its best
    dense piece's (``rerank_turn_top_m``'s ranking of a session's turns)."""
    corpus = st.corpus
    if st.q_vec is None or corpus.vectors is None or not len(corpus.pieces):
        return {}
    wanted = set(cands)
    sims = corpus.vectors @ st.q_vec
    out: dict[int, dict[int, float]] = {}
    for piece, x in zip(corpus.pieces, sims, strict=True):
        if piece.session_index in wanted:
            turns = out.setdefault(piece.session_index, {})
            turns[piece.turn_index] = max(float(x), turns.get(piece.turn_index, -math.inf))
    return out


def rerank_priors(rule: str, fused_ranks: Sequence[int], fused: Sequence[float]
                  ) -> list[float]:
    """The prior of each reranked candidate (in fused order), in [0, 1]: ``rank``: ``1 -
    (fused_rank - 1) / n`` (steps of 1/n whatever the scores); ``score``: the fused score
    min-max normalised over the candidates, ``(f - min) / (max - min)`` (1.0 for all when
    they are equal), so candidates the first stage put close together stay close and a clear
    leader keeps its lead."""
    if rule == "rank":
        return [1.0 - (r - 1) / len(fused_ranks) for r in fused_ranks]
    if rule == "score":
        lo, hi = min(fused, default=0.0), max(fused, default=0.0)
        return [(f - lo) / (hi - lo) if hi > lo else 1.0 for f in fused]
    raise ValueError(f"unknown rerank_prior {rule!r}")


def rerank_stage(st: QuestionState, score_pairs: ScorePairs) -> None:
    """Stage 4: ``score = ((1 - fusion_alpha) * sigmoid(raw) + fusion_alpha * prior) *
    temporal`` for the best ``rerank_candidates`` fused candidates, ``prior``
    (:func:`rerank_priors`, traced as ``prior``) by ``rerank_prior``; the others keep their
    temporal score shifted below every reranked one (``t - max(t over not reranked) - 1``).
    Order: reranked first, then score, then corpus order."""
    from engram_eval.retrieval.rerank import sigmoid

    c = st.settings
    n = st.n
    cands = st.fused_order[: c.rerank_candidates]
    priors = rerank_priors(c.rerank_prior, [st.fused_rank[i] for i in cands],
                           [float(st.fused[i]) for i in cands])

    def recorded(pairs: list[tuple[str, str]]) -> list[float]:
        raw = score_pairs(pairs)
        st.cross.update(zip(pairs, raw, strict=False))
        return raw

    raw_scores = cross_scores(st, cands, recorded)
    for i, prior in zip(cands, priors, strict=True):
        st.traces[i]["prior"] = prior
        st.raw[i] = raw_scores[i]
        base = (1 - c.fusion_alpha) * sigmoid(raw_scores[i]) + c.fusion_alpha * prior
        st.final[i] = base * st.mult[i]
        st.reranked.add(i)
    rest = [i for i in range(n) if i not in st.reranked]
    if rest:
        top_rest = max(float(st.tscore[i]) for i in rest)
        for i in rest:
            st.final[i] = st.tscore[i] - top_rest - 1.0
    rr = F.rank_of(F.order([st.final[i] for i in cands]))
    st.rerank_rank = {cands[j]: r for j, r in rr.items()}
    st.order = sorted(range(n), key=lambda i: (i not in st.reranked, -float(st.final[i]), i))


def coverage_stage(st: QuestionState) -> None:
    """Stage 5: keep the temporal leader inside the first ``result_k``; a moved leader gets
    the midpoint of its new neighbours' scores (scores stay non-increasing)."""
    c = st.settings
    leader = st.t_order[0]
    st.order, st.moved = preserve_prior_leader(st.order, leader, c.result_k)
    if st.moved:
        pos = st.order.index(leader)
        above = float(st.final[st.order[pos - 1]])
        below = float(st.final[st.order[pos + 1]])
        st.traces[leader]["pre_coverage_score"] = float(st.final[leader])
        st.final[leader] = above if above == below else below + (above - below) / 2.0


def features_stage(st: QuestionState) -> None:
    """Stage 6: :data:`.gate_features.GATE_FEATURES` of the first
    :data:`.gate_features.GATE_DEPTH` results of the final order into their traces as
    ``gate_features`` (feature name -> value, None where undefined), from the view of the
    final ranking that a run's trace gives (:func:`.gate_features.make_view`, spread
    :data:`.gate_features.GATE_SPREAD`)."""
    from engram_eval.retrieval import gate_features as G

    top = st.order[: G.GATE_DEPTH]
    sessions = st.corpus.sessions
    traces = [{**st.traces[i], "fused": float(st.fused[i]), "fused_rank": st.fused_rank[i],
               "reranked": i in st.reranked, "rerank_rank": st.rerank_rank.get(i)}
              for i in top]
    v = G.make_view(st.text, st.question_date, sessions,
                    [sessions[i].session_id for i in top], traces,
                    analyzer_of(st.settings), G.GATE_SPREAD)
    for i, row in zip(top, G.gate_rows(v, len(top)), strict=True):
        st.traces[i]["gate_features"] = row


def finish(st: QuestionState) -> list[tuple[int, SessionTrace]]:
    """Stage 7: ``(corpus index, trace)`` in final order, each trace completed."""
    out = []
    leader = st.t_order[0] if st.t_order else None
    for i in st.order:
        t = st.traces[i]
        t.update({"corpus_index": i, "fused": float(st.fused[i]),
                  "fused_rank": st.fused_rank[i], "prior_rank": st.fused_rank[i],
                  "temporal": float(st.mult[i]), "in_window": st.in_window[i],
                  "temporal_rank": st.t_rank[i], "reranked": i in st.reranked,
                  "rerank_rank": st.rerank_rank.get(i), "raw_score": float(st.raw[i]),
                  "final_score": float(st.final[i])})
        if st.moved and i == leader:
            t["moved_by_coverage"] = True
        out.append((i, t))
    return out


def run_pipeline(question_id: str, text: str, question_date: str,
                 settings: RetrievalSettings, corpus: Corpus, *,
                 encode: Encode | None = None,
                 score_pairs: ScorePairs | None = None) -> QuestionState:
    """Every stage in order for one question over ``corpus``; the state holds the result
    (``order``, ``final``), the traces and every cross-encoder score it computed
    (``cross``: (query, document) -> raw score). An empty corpus stops after the question
    trace."""
    st = new_state(question_id, text, question_date, settings, corpus)
    if st.n == 0:
        return st
    signals_stage(st, encode)
    fusion_stage(st)
    temporal_stage(st)
    c = st.settings  # this haystack's structure decides whether it is reranked
    if c.rerank:
        if score_pairs is None:
            raise ValueError("run_pipeline: rerank needs a cross-encoder")
        rerank_stage(st, score_pairs)
        if c.preserve_prior:
            coverage_stage(st)
    features_stage(st)
    return st


def rescore(signals: dict[str, F.Signal], in_window: Sequence[bool | None],
            settings: RetrievalSettings) -> tuple[list[int], np.ndarray]:
    """Stages 2-3 from stored signals and window membership (what ``tune`` re-fuses):
    ``(order, final scores)`` exactly as a run without a rerank computes them."""
    n = len(in_window)
    corpus = Corpus(tuple(Session(str(i), "", ()) for i in range(n)), True)
    st = QuestionState("", "", "", settings, corpus)
    st.signals = dict(signals)
    st.in_window = list(in_window)
    fusion_stage(st)
    boost_stage(st)
    return st.order, st.final
