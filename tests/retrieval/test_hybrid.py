"""The hybrid retriever (engram_eval.retrieval.hybrid) end to end on tiny local models."""

from __future__ import annotations

import pytest

from engram_eval.data.records import Question, Session, Turn
from engram_eval.errors import ConfigError
from engram_eval.retrieval import base
from engram_eval.retrieval.hybrid import (
    HybridRetriever,
    make_bm25_only,
    make_dense_only,
    make_hybrid,
)
from engram_eval.retrieval.passages import select_excerpt
from engram_eval.retrieval.pipeline import rerank_document
from engram_eval.retrieval.rerank import sigmoid
from engram_eval.retrieval.settings import GENERIC_RERANK
from engram_eval.runs.config import RunConfig

QUESTION_DATE = "2023/06/10 (Sat) 18:00"
SIGNALS = ("dense", "bm25_user", "bm25_assistant")


def make_session(sid: str, date: str, user: list[str], assistant: list[str]) -> Session:
    turns: list[Turn] = []
    for i in range(max(len(user), len(assistant))):
        if i < len(user):
            turns.append(Turn("user", user[i], len(turns)))
        if i < len(assistant):
            turns.append(Turn("assistant", assistant[i], len(turns)))
    return Session(sid, date, tuple(turns))


def long_text(tag: str, n: int) -> str:
    """``n`` distinct filler sentences of six words."""
    return " ".join(f"The {tag} story continued with part {i}." for i in range(n))


SESSIONS = [
    make_session("s_puppy", "2023/05/02 (Tue) 19:12",
                 ["I adopted a border collie puppy last week.", "The puppy chews everything."],
                 ["Border collies are energetic dogs; give the puppy chew toys."]),
    make_session("s_skillet", "2023/05/20 (Sat) 02:21",
                 ["I bought a 12-inch cast iron skillet today.",
                  long_text("kitchen", 30) + " I will season the skillet with oil."],
                 ["A cast iron skillet lasts a lifetime if you keep it dry and oiled. "
                  + long_text("care", 10)]),
    make_session("s_denver", "2023/04/01 (Sat) 10:00",
                 ["What is the weather like in Denver in April?"],
                 ["Denver in April is mild with occasional snow."]),
    make_session("s_bought_late", "2023/06/08 (Thu) 09:00",
                 ["I bought new running shoes for my race."],
                 ["Nice, break them in before the race."]),
    make_session("s_pan", "2023/05/18 (Thu) 19:40",
                 ["Which pan is best for searing a steak?"],
                 ["A cast iron pan or a carbon steel pan works best for searing."]),
    make_session("s_shelter", "2023/02/20 (Mon) 18:37",
                 ["I volunteer at the animal shelter four hours a week."],
                 ["Shy dogs need quiet routines."]),
    make_session("s_bakery", "2023/03/12 (Sun) 09:48",
                 ["My sister ordered her wedding cake from a bakery called Crumb and Co."],
                 ["Crumb and Co. is known for lemon cakes."]),
    make_session("s_music", "2023/01/15 (Sun) 12:00",
                 ["I play guitar and piano, and I just got a ukulele."],
                 ["Three instruments, nice. The ukulele is easy to learn."]),
    make_session("s_assistant_only", "2023/03/30 (Thu) 08:00", [],
                 ["Fado music in Lisbon is best heard in the Alfama neighborhood."]),
    make_session("s_long", "2023/01/02 (Mon) 08:00",
                 [long_text("travel", 40) + " I plan to buy a small skillet for camping."],
                 [long_text("answer", 25)]),
]


def question(text: str, sessions: list[Session] | None = None, qid: str = "q1",
             date: str = QUESTION_DATE) -> Question:
    return Question(qid, "single-session-user", text, "", date, tuple(sessions or SESSIONS), ())


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("hybrid-cache"))


@pytest.fixture(scope="module")
def base_config(tiny_embedding_model: str, cache_dir: str) -> RunConfig:
    # The landed RRF setting, pinned: these tests compute fusion by hand and must not move
    # when the package defaults (chosen by tuning) change.
    return RunConfig().replace(embedding_model=tiny_embedding_model, cache_dir=cache_dir,
                               progress=False, fusion="rrf", rrf_k=60.0, weight_dense=1.0,
                               weight_bm25_user=1.0, weight_bm25_assistant=0.5,
                               use_bm25_turn=False, weight_bm25_turn=0.0, temporal=True,
                               temporal_boost=1.25, rerank=False,
                               # word terms, no feedback signals: the first stage before
                               # PROVENANCE.md section 14, which these hand computations use
                               lexical_stemmer="none", lexical_stopwords="none",
                               normalisation="minmax", use_bm25_prf=False,
                               weight_bm25_prf=0.0, use_dense_rocchio=False,
                               weight_dense_rocchio=0.0)


@pytest.fixture(scope="module")
def rerank_config(base_config: RunConfig, tiny_cross_encoder: str) -> RunConfig:
    # the generic cross-encoder rule (passage unit, no blend, torch), as a model without a
    # settings card gets it from `run`; these tests check that stage, not the shipped one
    generic = {k: v for k, v in GENERIC_RERANK.items()
               if k not in ("rerank_candidates", "rerank_max_length")}
    return base_config.replace(rerank=True, reranker_model=tiny_cross_encoder,
                               rerank_candidates=100, rerank_max_length=128, **generic)


def run(config: RunConfig, q: Question, factory=make_hybrid):  # type: ignore[no-untyped-def]
    r = factory(config)
    r.index(q.sessions)
    ranking = r.rank(q)
    ranking.check_complete(q.sessions)
    return r, ranking


def traces(ranking) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return {s.session_id: s.trace for s in ranking.results}


def expected_fused(trace, config: RunConfig) -> float:  # type: ignore[no-untyped-def]
    weights = {"dense": config.weight_dense, "bm25_user": config.weight_bm25_user,
               "bm25_assistant": config.weight_bm25_assistant}
    total = 0.0
    for name in SIGNALS:
        rank = trace.get(name + "_rank")
        if rank is not None:
            total += weights[name] / (config.rrf_k + rank)
    return total


# --------------------------------------------------------------------------- basics


def test_ranking_covers_corpus_and_traces_are_complete(base_config: RunConfig) -> None:
    r, ranking = run(base_config, question("What breed is the puppy I adopted?"))
    assert len(ranking.results) == len(SESSIONS)
    assert sorted(ranking.session_ids) == sorted(s.session_id for s in SESSIONS)
    for s in ranking.results:
        t = s.trace
        for key in ("final_score", "raw_score", "prior_rank", "temporal", "fused", "reranked"):
            assert key in t, key
        for name in SIGNALS:
            assert name in t and name + "_rank" in t
        assert t["final_score"] == s.score
        assert t["reranked"] is False
    # sorted by score, prior ranks are a permutation
    assert ranking.scores == sorted(ranking.scores, reverse=True)
    assert sorted(s.trace["prior_rank"] for s in ranking.results) == list(range(1, 11))
    # the session with no user text has no dense rank
    t = traces(ranking)
    assert t["s_assistant_only"]["dense_rank"] is None
    assert t["s_assistant_only"]["bm25_user_rank"] is None
    assert ranking.session_ids[0] == "s_puppy"
    assert r.models() and r.models()[0].role == "embedding"
    assert "embedding" in r.stats()


def test_same_input_same_ranking(base_config: RunConfig) -> None:
    q = question("How many hours do I volunteer at the shelter?")
    _, a = run(base_config, q)
    _, b = run(base_config, q)
    assert a.session_ids == b.session_ids and a.scores == b.scores


def test_empty_corpus(base_config: RunConfig) -> None:
    r = make_hybrid(base_config)
    r.index([])
    q = Question("q", "t", "anything", "", QUESTION_DATE, (), ())
    assert r.rank(q).results == ()


def test_weighted_rrf_matches_hand_computation(base_config: RunConfig) -> None:
    cfg = base_config.replace(rrf_k=10.0, weight_dense=0.7, weight_bm25_user=1.3,
                              weight_bm25_assistant=0.4, temporal=False)
    _, ranking = run(cfg, question("Which cast iron pan did I buy for searing?"))
    for s in ranking.results:
        t = s.trace
        assert t["fused"] == pytest.approx(expected_fused(t, cfg), rel=1e-12)
        assert t["final_score"] == pytest.approx(t["fused"])
        assert t["raw_score"] == pytest.approx(t["fused"])
    # one session by hand, spelled out
    t = traces(ranking)["s_pan"]
    assert t["bm25_user_rank"] is not None and t["bm25_assistant_rank"] is not None
    by_hand = (0.7 / (10.0 + t["dense_rank"]) + 1.3 / (10.0 + t["bm25_user_rank"])
               + 0.4 / (10.0 + t["bm25_assistant_rank"]))
    assert t["fused"] == pytest.approx(by_hand)
    # a session without any lexical match gets only its dense contribution
    t = traces(ranking)["s_denver"]
    assert t["bm25_user_rank"] is None and t["bm25_assistant_rank"] is None
    assert t["bm25_user"] == 0.0
    assert t["fused"] == pytest.approx(0.7 / (10.0 + t["dense_rank"]))
    # prior rank follows the fused score
    order = sorted(ranking.results, key=lambda s: s.trace["prior_rank"])
    fused = [s.trace["fused"] for s in order]
    assert fused == sorted(fused, reverse=True)


def test_signal_ranks_follow_signal_scores(base_config: RunConfig) -> None:
    _, ranking = run(base_config, question("Denver weather in April"))
    for name in SIGNALS:
        ranked = [s.trace for s in ranking.results if s.trace[name + "_rank"] is not None]
        ranked.sort(key=lambda t: t[name + "_rank"])
        assert [t[name + "_rank"] for t in ranked] == list(range(1, len(ranked) + 1))
        scores = [t[name] for t in ranked]
        assert scores == sorted(scores, reverse=True)
        if name != "dense":
            assert all(t[name] > 0 for t in ranked)


def test_uninformative_lexical_signal_does_not_break_fusion(base_config: RunConfig) -> None:
    cfg = base_config.replace(temporal=False)
    _, ranking = run(cfg, question("zyzzyva quokka?"))  # no word shared with any session
    for s in ranking.results:
        t = s.trace
        assert t["bm25_user"] == 0.0 and t["bm25_assistant"] == 0.0
        assert t["bm25_user_rank"] is None and t["bm25_assistant_rank"] is None
    dense_order = sorted((s for s in ranking.results if s.trace["dense_rank"] is not None),
                         key=lambda s: s.trace["dense_rank"])
    # fusion reduces to the dense ranking; the session without user text comes last
    assert ranking.session_ids[:-1] == [s.session_id for s in dense_order]
    assert ranking.session_ids[-1] == "s_assistant_only"
    assert traces(ranking)["s_assistant_only"]["fused"] == 0.0
    for s in dense_order:
        assert s.trace["fused"] == pytest.approx(1.0 / (cfg.rrf_k + s.trace["dense_rank"]))


def test_uninformative_dense_signal_does_not_break_fusion(base_config: RunConfig) -> None:
    sessions = [make_session(f"a{i}", "2023/01/01", [], [text]) for i, text in
                enumerate(["the skillet is cast iron", "denver weather", "a puppy"])]
    _, ranking = run(base_config, question("What skillet did I buy?", sessions))
    assert ranking.session_ids[0] == "a0"
    assert all(s.trace["dense_rank"] is None for s in ranking.results)
    assert ranking.results[0].trace["fused"] == pytest.approx(0.5 / (60 + 1))


# --------------------------------------------------------------------------- temporal


def test_temporal_multiplier_applied_once_per_session(base_config: RunConfig) -> None:
    cfg = base_config.replace(temporal_boost=1.5)
    q = question("Which skillet did I buy 3 weeks ago?")
    r, ranking = run(cfg, q)
    window = r.question_trace(q)["time_window"]
    assert window["start"] == "2023-05-16" and window["end"] == "2023-05-24"
    t = traces(ranking)
    inside = {"s_skillet", "s_pan"}
    for sid, tr in t.items():
        if sid in inside:
            assert tr["temporal"] == 1.5
            assert tr["fused"] * 1.5 == pytest.approx(tr["final_score"], rel=1e-12)
        else:
            assert tr["temporal"] == 1.0
            assert tr["final_score"] == pytest.approx(tr["fused"], rel=1e-12)
        assert tr["raw_score"] == pytest.approx(tr["fused"])
    # s_skillet matches both in user and assistant text and is still boosted only once
    assert t["s_skillet"]["bm25_user_rank"] is not None
    assert t["s_skillet"]["bm25_assistant_rank"] is not None
    assert t["s_skillet"]["final_score"] < t["s_skillet"]["fused"] * 1.5 * 1.5 - 1e-9
    off = run(base_config.replace(temporal=False), question("What did I buy 3 weeks ago?"))[1]
    assert all(s.trace["temporal"] == 1.0 for s in off.results)
    qt = r.question_trace(question("What did I buy?"))
    assert qt["time_window"] is None and qt["temporal_status"] == "no_expression"


# --------------------------------------------------------------------------- rerank


def test_rerank_scores_are_sigmoid_of_raw(rerank_config: RunConfig) -> None:
    cfg = rerank_config.replace(temporal=False)
    r, ranking = run(cfg, question("What breed is the puppy I adopted?"))
    for s in ranking.results:
        t = s.trace
        assert t["reranked"] is True
        assert t["raw_score"] == t["base_raw_score"]
        assert s.score == pytest.approx(sigmoid(t["raw_score"]))
        assert "passage" not in t  # default floor: tiny-model sigmoids are far above 0.001
    assert ranking.scores == sorted(ranking.scores, reverse=True) or any(
        s.trace.get("moved_by_coverage") for s in ranking.results)
    stats = r.stats()["rerank"]
    assert stats["pairs_scored"] + stats["cache_hits"] == len(SESSIONS)
    # the default embedding backend (onnx) records its offline export beside the source model,
    # then the people's chats' encoder (people_overrides; a shipped graph, no export), resolved
    # and recorded though this chat haystack never loads it
    people = RunConfig().for_chat_roles(False).embedding_model
    assert [(m.role, m.name == people) for m in r.models()] == [
        ("embedding", False), ("embedding-onnx", False), ("embedding", True),
        ("reranker", False)]
    assert "embedding_people" not in r.stats()


def test_fusion_alpha_blend_and_non_candidates(rerank_config: RunConfig) -> None:
    cfg = rerank_config.replace(fusion_alpha=0.3, rerank_candidates=4, temporal_boost=1.5,
                                preserve_prior=False)
    q = question("What did I buy 3 weeks ago?")
    _, ranking = run(cfg, q)
    cands = [s for s in ranking.results if s.trace["reranked"]]
    others = [s for s in ranking.results if not s.trace["reranked"]]
    assert len(cands) == 4 and sorted(s.trace["prior_rank"] for s in cands) == [1, 2, 3, 4]
    for s in cands:
        t = s.trace
        prior = 1.0 - (t["prior_rank"] - 1) / 4
        want = ((1 - 0.3) * sigmoid(t["raw_score"]) + 0.3 * prior) * t["temporal"]
        assert s.score == pytest.approx(want, rel=1e-12)
    top_rest = max(t["fused"] * t["temporal"] for t in (s.trace for s in others))
    for s in others:
        t = s.trace
        assert s.score == pytest.approx(t["fused"] * t["temporal"] - top_rest - 1.0)
        assert t["rerank_rank"] is None
        assert t["raw_score"] == pytest.approx(t["fused"])
        assert "base_raw_score" not in t
    # reranked candidates always come first
    assert ranking.session_ids[:4] == [s.session_id for s in cands]
    assert any(s.trace["temporal"] == 1.5 for s in cands)


def test_score_prior_is_the_fused_score_min_max_normalised_over_the_candidates(
        rerank_config: RunConfig) -> None:
    cfg = rerank_config.replace(fusion_alpha=0.6, rerank_candidates=4, temporal_boost=1.5,
                                preserve_prior=False, rerank_prior="score")
    _, ranking = run(cfg, question("What did I buy 3 weeks ago?"))
    cands = [s.trace for s in ranking.results if s.trace["reranked"]]
    lo, hi = min(t["fused"] for t in cands), max(t["fused"] for t in cands)
    assert len(cands) == 4 and hi > lo
    for t in cands:
        assert t["prior"] == pytest.approx((t["fused"] - lo) / (hi - lo), rel=1e-12)
        want = ((1 - 0.6) * sigmoid(t["raw_score"]) + 0.6 * t["prior"]) * t["temporal"]
        assert t["final_score"] == pytest.approx(want, rel=1e-12)
    assert sorted(t["prior"] for t in cands)[::3] == [0.0, 1.0]
    # the rank rule on the same candidates: equal steps, whatever the fused scores
    rank = [s.trace for s in run(cfg.replace(rerank_prior="rank"),
                                 question("What did I buy 3 weeks ago?"))[1].results
            if s.trace["reranked"]]
    assert sorted(t["prior"] for t in rank) == [1 - k / 4 for k in (3, 2, 1, 0)]
    assert {t["prior_rank"]: t["prior"] for t in rank} == {r: 1 - (r - 1) / 4
                                                            for r in (1, 2, 3, 4)}


@pytest.mark.parametrize("fused, want", [
    ([0.9, 0.5, 0.4, 0.1], [1.0, (0.5 - 0.1) / 0.8, (0.4 - 0.1) / 0.8, 0.0]),
    ([0.3, 0.3], [1.0, 1.0]),  # no spread: every candidate keeps the full prior
])
def test_rerank_priors(fused: list[float], want: list[float]) -> None:
    from engram_eval.retrieval.pipeline import rerank_priors

    ranks = list(range(1, len(fused) + 1))
    assert rerank_priors("score", ranks, fused) == pytest.approx(want, rel=1e-12)
    assert rerank_priors("rank", ranks, fused) == [1 - (r - 1) / len(fused) for r in ranks]
    with pytest.raises(ValueError, match="rerank_prior"):
        rerank_priors("nope", ranks, fused)


def _coverage_case(cfg: RunConfig) -> tuple[Question, int]:
    """A question whose prior leader lands at 0-based position >= 2 after rerank."""
    texts = ["What breed is the puppy I adopted?", "What did I buy?",
             "How many instruments do I own?", "Where is my sister's wedding cake from?",
             "How many hours do I volunteer?", "What is the weather in Denver?",
             "Which pan is best for steak?", "What running shoes did I buy?"]
    for text in texts:
        q = question(text)
        _, ranking = run(cfg.replace(preserve_prior=False), q)
        pos = [s.trace["prior_rank"] for s in ranking.results].index(1)
        if pos >= 2:
            print(f"coverage case: {text!r}, leader at position {pos}")
            return q, pos
    raise AssertionError("no question puts the prior leader outside the top 2 after rerank")


def test_prior_coverage_moves_leader_into_window(rerank_config: RunConfig) -> None:
    cfg = rerank_config.replace(temporal=False)
    q, pos = _coverage_case(cfg)
    result_k = pos  # the leader sits just outside the window (0-based pos == result_k)
    _, plain = run(cfg.replace(preserve_prior=False, result_k=result_k), q)
    _, covered = run(cfg.replace(preserve_prior=True, result_k=result_k), q)
    leader = plain.session_ids[pos]
    assert traces(plain)[leader]["prior_rank"] == 1
    assert "moved_by_coverage" not in traces(plain)[leader]
    ids = covered.session_ids
    assert ids.index(leader) == result_k - 1  # the last slot of the window
    assert ids[0] == plain.session_ids[0]  # the rerank winner keeps rank 1
    expected = plain.session_ids[: result_k - 1] + [leader] + [
        s for s in plain.session_ids[result_k - 1 :] if s != leader]
    assert ids == expected
    assert traces(covered)[leader]["moved_by_coverage"] is True
    assert sum(1 for s in covered.results if s.trace.get("moved_by_coverage")) == 1
    # every other score is unchanged; the moved session gets a score between its new
    # neighbours, so scores stay non-increasing down the ranking
    before = {s.session_id: s.score for s in plain.results}
    after = {s.session_id: s.score for s in covered.results}
    assert {k: v for k, v in after.items() if k != leader} == {
        k: v for k, v in before.items() if k != leader}
    assert covered.scores == sorted(covered.scores, reverse=True)
    assert covered.scores[result_k - 2] >= after[leader] >= covered.scores[result_k]
    assert traces(covered)[leader]["pre_coverage_score"] == before[leader]
    # a window that already holds the leader changes nothing
    _, wide = run(cfg.replace(preserve_prior=True, result_k=pos + 1), q)
    assert wide.session_ids == plain.session_ids
    assert not any(s.trace.get("moved_by_coverage") for s in wide.results)
    # result_k = 1 cannot add anything next to the winner
    _, k1 = run(cfg.replace(preserve_prior=True, result_k=1), q)
    assert k1.session_ids == plain.session_ids


# --------------------------------------------------------------------------- passages


def test_passage_fallback_traces(rerank_config: RunConfig) -> None:
    cfg = rerank_config.replace(passage_floor=1.0, temporal=False)
    q = question("What skillet did I buy?")
    _, ranking = run(cfg, q)
    by_id = {s.session_id: s for s in SESSIONS}
    with_passage = 0
    for s in ranking.results:
        t = s.trace
        doc = rerank_document(by_id[s.session_id], True)
        excerpt = select_excerpt(q.question, doc, max_words=cfg.passage_max_words)
        if excerpt is None:
            assert "passage" not in t
            assert t["raw_score"] == t["base_raw_score"]
            continue
        with_passage += 1
        p = t["passage"]
        assert set(p) == {"base_raw_score", "excerpt_raw_score", "source_start", "source_end",
                          "passage_words"}
        assert p["passage_words"] <= 160
        assert (p["source_start"], p["source_end"]) == (excerpt.start, excerpt.end)
        assert 0 <= p["source_start"] < p["source_end"] <= len(doc)
        assert p["base_raw_score"] == t["base_raw_score"]
        assert t["raw_score"] == max(p["base_raw_score"], p["excerpt_raw_score"])
        assert s.score == pytest.approx(sigmoid(t["raw_score"]))
    assert with_passage >= 2  # s_skillet and s_long are long and mention the query terms

    _, off = run(cfg.replace(passage_fallback=False), q)
    assert not any("passage" in s.trace for s in off.results)
    for s in off.results:
        assert s.trace["raw_score"] == s.trace["base_raw_score"]


# --------------------------------------------------------------------------- variants


def test_variants_describe_disabled_signals(base_config: RunConfig) -> None:
    dense = make_dense_only(base_config)
    d = dense.describe()
    assert d["retriever"] == "dense" and dense.name == "dense"
    assert d["signals"] == ["dense"]
    assert d["dense"]["use_dense"] is True and d["lexical"]["use_bm25_user"] is False
    assert d["lexical"]["use_bm25_assistant"] is False and "embedding_model" in d["dense"]
    bm25 = make_bm25_only(base_config)
    d = bm25.describe()
    assert d["retriever"] == "bm25"
    # describe() agrees with the effective settings: use_dense false, no embedding model
    assert bm25.settings.use_dense is False
    assert d["dense"] == {"use_dense": False, "use_dense_rocchio": False}
    assert d["signals"] == ["bm25_user", "bm25_assistant"]
    assert d["lexical"]["use_bm25_user"] is True and d["lexical"]["use_bm25_assistant"] is True
    assert bm25.models() == []
    assert d["rerank"] == {"rerank": False}
    h = make_hybrid(base_config).describe()
    assert h["signals"] == ["dense", "bm25_user", "bm25_assistant"]
    assert (h["lexical"]["bm25_k1"], h["lexical"]["bm25_b"]) == (1.5, 0.75)
    assert h["fusion"]["fusion"] == "rrf" and h["fusion"]["rrf_k"] == 60.0
    assert (h["fusion"]["weight_dense"], h["fusion"]["weight_bm25_user"],
            h["fusion"]["weight_bm25_assistant"]) == (1.0, 1.0, 0.5)
    assert isinstance(base.create("bm25", base_config), HybridRetriever)


def test_describe_is_derived_from_settings(base_config: RunConfig) -> None:
    """Every fingerprinted retrieval setting appears in describe(); none is hand-copied."""
    from dataclasses import fields

    from engram_eval.retrieval.settings import RetrievalSettings

    r = make_hybrid(base_config.replace(rerank=False, bm25_k1=1.2, bm25_b=0.6))
    d = r.describe()
    flat = {k: v for g in d.values() if isinstance(g, dict) for k, v in g.items()}
    for f in fields(RetrievalSettings):
        if f.metadata["fingerprint"] and f.metadata["group"] != "rerank":
            assert flat[f.name] == getattr(r.settings, f.name), f.name
    assert (flat["bm25_k1"], flat["bm25_b"]) == (1.2, 0.6)


def test_variants_rank(base_config: RunConfig) -> None:
    q = question("What breed is the puppy I adopted?")
    _, dense = run(base_config, q, make_dense_only)
    assert all(s.trace.keys().isdisjoint({"bm25_user", "bm25_assistant"})
               for s in dense.results)
    _, bm25 = run(base_config, q, make_bm25_only)
    assert all("dense" not in s.trace for s in bm25.results)
    assert bm25.session_ids[0] == "s_puppy"


def test_no_signal_is_a_config_error(base_config: RunConfig) -> None:
    with pytest.raises(ConfigError, match="at least one"):
        HybridRetriever(base_config.replace(use_dense=False, use_dense_rocchio=False, use_bm25_user=False,
                                            use_bm25_assistant=False))


def test_rerank_config_describes_reranker(rerank_config: RunConfig) -> None:
    d = make_hybrid(rerank_config).describe()
    assert d["rerank"]["rerank_candidates"] == 100
    assert d["rerank"]["passage_floor"] == 0.001 and d["rerank"]["fusion_alpha"] == 0.0


def test_flag_embedding_backend_in_hybrid(base_config: RunConfig) -> None:
    cfg = base_config.replace(embedding_backend="flag_embedding")
    r, ranking = run(cfg, question("What breed is the puppy I adopted?"))
    assert r.describe()["dense"]["embedding_backend"] == "flag_embedding"
    assert any(s.trace["dense_rank"] is not None for s in ranking.results)


def test_corpus_without_user_roles_uses_every_turn(tmp_path) -> None:
    """LoCoMo-style sessions (speaker names as roles) must still give lexical signal."""
    from engram_eval.data.records import Question, Session, Turn
    from engram_eval.retrieval.hybrid import HybridRetriever
    from engram_eval.runs.config import RunConfig

    def sess(sid: str, text: str) -> Session:
        return Session(sid, "1:56 pm on 8 May, 2023", (Turn("Caroline", text, 0),
                                                        Turn("Melanie", "nice", 1)))

    sessions = [sess("s1", "we talked about pottery classes"),
                sess("s2", "Caroline went hiking in the mountains"),
                sess("s3", "a chat about painting sunsets")]
    cfg = RunConfig(use_dense=False, use_dense_rocchio=False, cache_dir=str(tmp_path), progress=False, rerank=False)
    r = HybridRetriever(cfg, name="bm25")
    r.index(sessions)
    q = Question("q", "4", "Where did Caroline go hiking?", "", "1:56 pm on 8 May, 2023",
                 tuple(sessions), ("s2",))
    ranking = r.rank(q)
    assert ranking.session_ids[0] == "s2"
    assert ranking.results[0].trace["bm25_user_rank"] == 1
    assert ranking.results[0].trace.get("bm25_assistant_rank") is None


# --------------------------------------------------------------------------- ordering, coverage


@pytest.mark.parametrize("changes", [
    {"rrf_k": 0.0, "weight_bm25_user": 3.0},
    {"rrf_k": 0.0, "weight_dense": 10.0, "weight_bm25_user": 10.0,
     "weight_bm25_assistant": 10.0},
    {"fusion": "convex", "normalisation": "minmax", "weight_bm25_user": 10.0},
    {"fusion": "convex", "normalisation": "zscore", "weight_dense": 10.0},
])
@pytest.mark.parametrize("preserve", [False, True])
def test_reranked_sessions_always_precede_the_rest(rerank_config: RunConfig, changes: dict,
                                                   preserve: bool) -> None:
    cfg = rerank_config.replace(rerank_candidates=3, temporal_boost=10.0, result_k=2,
                                preserve_prior=preserve, **changes)
    for text in ("What did I buy 3 weeks ago?", "Which cast iron skillet did I buy?"):
        _, ranking = run(cfg, question(text))
        flags = [s.trace["reranked"] for s in ranking.results]
        moved = [s.trace.get("moved_by_coverage", False) for s in ranking.results]
        if not any(moved):
            assert flags == sorted(flags, reverse=True), flags
        assert sum(flags) == 3
        # scores agree with the ranking, at the parameter bounds too
        assert ranking.scores == sorted(ranking.scores, reverse=True)
        for s in ranking.results:
            if not s.trace["reranked"]:
                assert s.score <= -1.0


def test_coverage_runs_only_after_a_rerank(base_config: RunConfig) -> None:
    # the fused leader (s_puppy, outside the window) is pushed to rank 3 by a large boost;
    # without a rerank the final ranking is the post-temporal prior ranking: nothing moves
    cfg = base_config.replace(temporal_boost=10.0, preserve_prior=True, result_k=2)
    _, ranking = run(cfg, question("What breed is the puppy I adopted 3 weeks ago?"))
    t = traces(ranking)
    assert not any(s.trace.get("moved_by_coverage") for s in ranking.results)
    assert ranking.session_ids.index("s_puppy") >= 2
    assert t["s_puppy"]["fused_rank"] == 1 and t["s_puppy"]["temporal_rank"] >= 3
    assert [s.trace["temporal_rank"] for s in ranking.results] == list(
        range(1, len(SESSIONS) + 1))
    assert ranking.scores == sorted(ranking.scores, reverse=True)


def test_coverage_keeps_the_post_temporal_leader(rerank_config: RunConfig) -> None:
    q = question("What breed is the puppy I adopted 3 weeks ago?")
    for boost in (1.0, 10.0):
        for k in range(2, 6):
            cfg = rerank_config.replace(temporal_boost=boost, result_k=k)
            _, plain = run(cfg.replace(preserve_prior=False), q)
            _, covered = run(cfg, q)
            leader = next(s.session_id for s in plain.results if s.trace["temporal_rank"] == 1)
            assert leader in covered.session_ids[:k]
            moved = [s.session_id for s in covered.results if s.trace.get("moved_by_coverage")]
            assert moved == ([] if leader in plain.session_ids[:k] else [leader])
            assert covered.scores == sorted(covered.scores, reverse=True)


# --------------------------------------------------------------------------- trace contract

SESSION_KEYS = {"corpus_index", "fused", "fused_rank", "prior_rank", "temporal", "in_window",
                "temporal_rank", "reranked", "rerank_rank", "raw_score", "final_score"}


def test_trace_contract(rerank_config: RunConfig) -> None:
    cfg = rerank_config.replace(use_bm25_turn=True, use_bm25_prf=True, use_dense_rocchio=True,
                                rerank_candidates=4)
    q = question("What did I buy 3 weeks ago?")
    r, ranking = run(cfg, q)
    names = ["dense", "bm25_user", "bm25_assistant", "bm25_turn", "bm25_prf", "dense_rocchio"]
    qt = r.question_trace(q)
    assert qt["signals"] == names
    assert qt["fusion"] == {"method": "rrf", "normalisation": "minmax", "k": 60.0,
                            "weights": {"dense": 1.0, "bm25_user": 1.0,
                                        "bm25_assistant": 0.5, "bm25_turn": 0.0,
                                        "bm25_prf": 0.0, "dense_rocchio": 0.0}}
    assert qt["temporal_status"] == "window" and qt["time_window"]["kind"] == "ago"
    assert qt["feedback"]["source"] == "dense" and len(qt["feedback"]["sessions"]) == 1
    for s in ranking.results:
        t = s.trace
        assert SESSION_KEYS <= set(t), SESSION_KEYS - set(t)
        for name in names:
            assert name in t and name + "_rank" in t
        assert t["final_score"] == s.score
        assert q.sessions[t["corpus_index"]].session_id == s.session_id
        assert (t["rerank_rank"] is None) == (not t["reranked"])
    ranks = sorted(s.trace["rerank_rank"] for s in ranking.results if s.trace["reranked"])
    assert ranks == [1, 2, 3, 4]
    for key in ("fused_rank", "temporal_rank"):
        assert sorted(s.trace[key] for s in ranking.results) == list(range(1, 11))


def test_zero_weight_signals_are_traced_but_do_not_change_the_ranking(
        base_config: RunConfig) -> None:
    q = question("Which cast iron skillet did I buy?")
    _, plain = run(base_config, q)
    _, extra = run(base_config.replace(use_bm25_turn=True, use_bm25_prf=True,
                                       use_dense_rocchio=True), q)
    assert plain.session_ids == extra.session_ids and plain.scores == extra.scores
    assert all("bm25_prf" in s.trace for s in extra.results)


def test_turn_bm25_is_the_best_turn(base_config: RunConfig) -> None:
    from engram_eval.retrieval.bm25 import BM25Index

    cfg = base_config.replace(use_bm25_turn=True, weight_bm25_turn=1.0)
    q = question("Which cast iron skillet did I buy?")
    _, ranking = run(cfg, q)
    turns = [(si, t.content) for si, s in enumerate(SESSIONS) for t in s.turns
             if t.role == "user"]
    idx = BM25Index([c for _, c in turns], k1=cfg.bm25_k1, b=cfg.bm25_b)
    scores = idx.scores(q.question)
    for s in ranking.results:
        si = s.trace["corpus_index"]
        want = max([float(scores[j]) for j, (k, _) in enumerate(turns) if k == si] + [0.0])
        assert s.trace["bm25_turn"] == pytest.approx(want, rel=1e-12)
        assert (s.trace["bm25_turn_rank"] is None) == (want <= 0)


def test_prf_expands_the_question_with_feedback_terms(base_config: RunConfig) -> None:
    from engram_eval.retrieval.bm25 import BM25Index, tokenize
    from engram_eval.retrieval.feedback import expansion_terms

    cfg = base_config.replace(use_bm25_prf=True, weight_bm25_prf=1.0, feedback_source="bm25_user",
                              prf_terms=3)
    q = question("Which skillet did I buy?")
    r, ranking = run(cfg, q)
    fb = r.question_trace(q)["feedback"]
    top = next(s for s in ranking.results if s.trace["bm25_user_rank"] == 1)
    assert fb["source"] == "bm25_user" and fb["sessions"] == [top.session_id]
    idx = BM25Index([s.user_text for s in SESSIONS], k1=cfg.bm25_k1, b=cfg.bm25_b)
    terms = expansion_terms(tokenize(q.question), [idx.tokens[top.trace["corpus_index"]]],
                            idx.idf, 3)
    assert fb["terms"] == terms and len(terms) == 3
    want = idx.scores_tokens(tokenize(q.question) + terms)
    for s in ranking.results:
        assert s.trace["bm25_prf"] == pytest.approx(float(want[s.trace["corpus_index"]]))


def test_settings_are_validated_when_a_retriever_is_built_directly() -> None:
    from types import SimpleNamespace

    from engram_eval.retrieval.settings import RetrievalSettings

    with pytest.raises(ConfigError, match="dense_piece_overlap"):
        HybridRetriever(RetrievalSettings(dense_piece_words=16, dense_piece_overlap=16))
    with pytest.raises(ConfigError, match="dense_piece_overlap"):
        HybridRetriever(SimpleNamespace(**{**RetrievalSettings().__dict__,
                                           "dense_piece_overlap": 200}))
    with pytest.raises(ConfigError, match="dense_piece_overlap"):
        make_hybrid(RunConfig(dense_piece_overlap=128))
