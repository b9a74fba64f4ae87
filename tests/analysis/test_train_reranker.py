"""The rerank stage (issue 16): training pairs, the model card, the held-out refusal, and the
turn-level scores and blend of the pipeline against hand-computed values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from engram_eval.analysis.train_reranker import (
    TrainSettings,
    build_pairs,
    pairs_sha256,
    train,
)
from engram_eval.cli import main as cli
from engram_eval.data.records import Question, Session, Turn
from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.io import sha256_file
from engram_eval.retrieval import pipeline as P
from engram_eval.retrieval.settings import RetrievalSettings
from engram_eval.runs.reader import read_run

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "fixtures" / "longmemeval_tiny.json"


def u(text: str, i: int, has_answer: bool = False) -> Turn:
    return Turn("user", text, i, has_answer)


def a(text: str, i: int) -> Turn:
    return Turn("assistant", text, i)


def hand_question() -> Question:
    sessions = (
        Session("g", "2023/05/01", (u("hello there", 0), a("hi", 1),
                                    u("my puppy is a border collie", 2, True))),
        Session("n1", "2023/05/02", (u("the weather today", 0), a("sunny", 1),
                                     u("what breed is a good puppy for flats", 2))),
        Session("n2", "2023/05/03", (u("cooking pasta", 0),)),
        Session("n3", "2023/05/04", (u("a puppy", 0), u("breed puppy", 1))),
        Session("n4", "2023/05/05", (a("only the assistant speaks", 0),)),
    )
    return Question("q1", "single-session-user", "What breed is my puppy?", "border collie",
                    "2023/06/01", sessions, ("g",))


def test_pairs_follow_the_rules_and_repeat() -> None:
    q = hand_question()
    ranking = {"q1": ["n3", "g", "n1", "n4", "n2"]}
    s = TrainSettings(hard_negatives=2, random_negatives=1, seed=0)
    pairs, counts = build_pairs([q], ranking, s)
    pos = [p for p in pairs if p.kind == "positive"]
    hard = [p for p in pairs if p.kind == "hard"]
    rand = [p for p in pairs if p.kind == "random"]
    # the one has_answer user turn of the gold session
    assert [(p.session_id, p.turn_index, p.label) for p in pos] == [("g", 2, 1.0)]
    # first two non-gold sessions in ranking order (n3, then n1); in each the user turn
    # sharing most content terms with the question ("breed", "puppy"): n3 turn 1 has both,
    # n1 turn 2 has both (turn 0 none)
    assert [(p.session_id, p.turn_index) for p in hard] == [("n3", 1), ("n1", 2)]
    # random: one user turn of a non-gold session not already used and with user text
    # (n2 only: n4 has no user turn)
    assert [(p.session_id, p.turn_index) for p in rand] == [("n2", 0)]
    assert counts["positive"] == 1 and counts["hard"] == 2 and counts["random"] == 1
    again, _ = build_pairs([q], ranking, s)
    assert pairs_sha256(again) == pairs_sha256(pairs)


def test_a_question_without_an_evidence_user_turn_is_skipped_and_counted() -> None:
    q = hand_question()
    no_ev = Question("q2", "single-session-assistant", q.question, "x", q.question_date,
                     tuple(Session(s.session_id, s.date, tuple(
                         Turn(t.role, t.content, t.index) for t in s.turns))
                         for s in q.sessions), ("g",))
    pairs, counts = build_pairs([no_ev], {"q2": ["g"]}, TrainSettings())
    assert pairs == [] and counts["questions_skipped"]["no_evidence_turn"] == 1


def test_an_unanswerable_question_gives_an_all_negative_group_when_asked() -> None:
    """unanswerable_negatives N: a LongMemEval ``_abs`` question gives its first N ranked
    sessions (gold ones too: the answer is in none) by their most question-like user turn,
    all label 0, kind ``absent``; sessions without user text are passed over; off (0), the
    question gives no pair, as before, and the counts keep their earlier keys."""
    q = hand_question()
    abs_q = Question("q1_abs", "single-session-user", q.question, "", q.question_date,
                     tuple(Session(s.session_id, s.date, tuple(
                         Turn(t.role, t.content, t.index) for t in s.turns))
                         for s in q.sessions), ("g",))
    ranking = {"q1_abs": ["n4", "g", "n3", "n1", "n2"]}
    pairs, counts = build_pairs([abs_q], ranking, TrainSettings(unanswerable_negatives=2))
    # n4 has no user turn; g: "hello there" / "my puppy is a border collie" -> the one sharing
    # "puppy" (turn 2); n3: "breed puppy" (turn 1) shares both content terms
    assert [(p.session_id, p.turn_index, p.label, p.kind) for p in pairs] == [
        ("g", 2, 0.0, "absent"), ("n3", 1, 0.0, "absent")]
    assert counts["absent"] == 2 and counts["questions_used"] == 1
    assert counts["questions_skipped"]["no_evidence_turn"] == 0
    off, off_counts = build_pairs([abs_q], ranking, TrainSettings())
    assert off == [] and off_counts["questions_skipped"]["no_evidence_turn"] == 1
    assert "absent" not in off_counts
    # an answerable question's pairs do not change with the setting
    ranking_q = {"q1": ["n3", "g", "n1", "n4", "n2"]}
    plain, _ = build_pairs([q], ranking_q, TrainSettings())
    with_groups, _ = build_pairs([q], ranking_q, TrainSettings(unanswerable_negatives=2))
    assert pairs_sha256(plain) == pairs_sha256(with_groups)
    with pytest.raises(ConfigError, match="unanswerable_negatives"):
        TrainSettings(unanswerable_negatives=-1)


def _turn_state(alpha: float, prior: str = "rank") -> P.QuestionState:
    q = hand_question()
    settings = RetrievalSettings(use_dense=False, use_dense_rocchio=False, use_bm25_assistant=False,
                                 use_bm25_turn=False, weight_bm25_user=1.0, temporal=False,
                                 rerank=True, rerank_unit="turn", fusion_alpha=alpha,
                                 rerank_candidates=3, preserve_prior=False, rerank_prior=prior)
    corpus = P.build_corpus(q.sessions, settings)
    raw_of = {"hello there": -2.0, "my puppy is a border collie": 3.0,
              "the weather today": -1.0, "what breed is a good puppy for flats": 1.0,
              "cooking pasta": -3.0, "a puppy": 0.5, "breed puppy": 2.0}

    def score_pairs(pairs: list[tuple[str, str]]) -> list[float]:
        return [raw_of[text] for _, text in pairs]

    return P.run_pipeline("q1", q.question, q.question_date, settings, corpus,
                          score_pairs=score_pairs)


@pytest.mark.parametrize("prior_rule", ["rank", "score"])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5])
def test_turn_level_scores_and_blend_by_hand(alpha: float, prior_rule: str) -> None:
    st = _turn_state(alpha, prior_rule)
    cands = st.fused_order[:3]
    lo, hi = min(st.fused[i] for i in cands), max(st.fused[i] for i in cands)
    best = {"g": (3.0, 2), "n1": (1.0, 2), "n2": (-3.0, 0), "n3": (2.0, 1), "n4": (None, None)}

    def sig(x: float) -> float:
        return 1.0 / (1.0 + math.exp(-x))

    ids = [s.session_id for s in st.corpus.sessions]
    for rank, i in enumerate(cands, start=1):
        raw, turn = best[ids[i]]
        assert raw is not None
        assert st.traces[i]["rerank_turn"] == turn
        assert st.raw[i] == raw
        prior = 1.0 - (rank - 1) / 3 if prior_rule == "rank" else (st.fused[i] - lo) / (hi - lo)
        assert st.traces[i]["prior"] == pytest.approx(prior, abs=1e-12)
        assert st.final[i] == pytest.approx((1 - alpha) * sig(raw) + alpha * prior, abs=1e-12)
    # reranked first, by their blended score; the rest below every reranked one
    assert st.order[:3] == sorted(cands, key=lambda i: -st.final[i])
    assert all(st.final[i] < 0 for i in st.order[3:])
    assert np.all(np.diff([st.final[i] for i in st.order]) <= 0)


def test_rerank_turn_top_m_scores_only_the_turns_closest_to_the_question() -> None:
    """``rerank_turn_top_m`` 1: each candidate is scored by its one turn whose dense vector is
    closest to the question's (a hand-made encoder: 2-d unit vectors by text), whatever the
    cross-encoder would have said of its other turns; 0 scores every turn (as before)."""
    q = hand_question()
    angle = {"hello there": 1.2, "my puppy is a border collie": 0.1,
             "the weather today": 0.2, "what breed is a good puppy for flats": 1.0,
             "cooking pasta": 0.9, "a puppy": 0.3, "breed puppy": 0.6, q.question: 0.0}

    def encode(texts: list[str]) -> np.ndarray:
        return np.array([[math.cos(angle[t]), math.sin(angle[t])] for t in texts],
                        dtype=np.float32)

    raw_of = {"hello there": 5.0, "my puppy is a border collie": 3.0,
              "the weather today": -1.0, "what breed is a good puppy for flats": 1.0,
              "cooking pasta": -3.0, "a puppy": 0.5, "breed puppy": 2.0,
              "\n\nonly the assistant speaks": -4.0}  # n4: no user turn, its session text
    scored: list[str] = []

    def score_pairs(pairs: list[tuple[str, str]]) -> list[float]:
        scored.extend(text for _, text in pairs)
        return [raw_of[text] for _, text in pairs]

    def state(m: int) -> P.QuestionState:
        scored.clear()
        settings = RetrievalSettings(use_dense_rocchio=False, use_bm25_assistant=False,
                                     use_bm25_prf=False, use_bm25_turn=False, temporal=False,
                                     rerank=True, rerank_unit="turn", rerank_candidates=5,
                                     preserve_prior=False, rerank_turn_top_m=m,
                                     dense_piece_words=32, dense_piece_overlap=4)
        corpus = P.build_corpus(q.sessions, settings, encode=encode)
        return P.run_pipeline("q1", q.question, q.question_date, settings, corpus,
                              encode=encode, score_pairs=score_pairs)

    ids = [s.session_id for s in q.sessions]
    one = state(1)
    # g: "my puppy..." (angle 0.1) is closer than "hello there" (1.2), though the latter
    # would score 5.0; n1: "the weather today" (0.2); n3: "a puppy" (0.3)
    expected = {"g": (3.0, 2), "n1": (-1.0, 0), "n2": (-3.0, 0), "n3": (0.5, 0)}
    for i in one.reranked:
        if ids[i] in expected:
            assert (one.traces[i]["base_raw_score"], one.traces[i]["rerank_turn"]) == \
                expected[ids[i]]
            assert one.traces[i]["rerank_turns_scored"] == 1
    assert "hello there" not in scored and "breed puppy" not in scored
    every = state(0)
    assert "hello there" in scored and "breed puppy" in scored
    g = ids.index("g")
    assert every.traces[g]["base_raw_score"] == 5.0 and every.traces[g]["rerank_turn"] == 0
    assert "rerank_turns_scored" not in every.traces[g]  # rows of m 0 are as before
    with pytest.raises(ConfigError, match="rerank_turn_top_m"):
        RetrievalSettings(use_dense=False, use_dense_rocchio=False, rerank_turn_top_m=2)


@pytest.fixture(scope="module")
def bm25_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tr-run")
    out = d / "run.jsonl"
    assert cli.main(["run", str(TINY), "--retriever", "bm25", "--output", str(out)]) == 0
    return out


def test_train_writes_the_model_and_its_card(bm25_run: Path, tiny_embedding_model: str,
                                             tmp_path: Path) -> None:
    out = tmp_path / "model"
    s = TrainSettings(base_model=tiny_embedding_model, max_steps=3, batch_size=8)
    card = train(TINY, bm25_run, out, s)
    on_disk = json.loads(Path(str(out) + ".card.json").read_text())
    assert on_disk == json.loads(json.dumps(card, sort_keys=True))
    assert card["part"]["sha256"] == sha256_file(TINY)
    assert card["run"]["rows_sha256"]
    assert card["base_model"]["path"] == tiny_embedding_model
    assert card["settings"]["max_steps"] == 3 and card["training"]["steps"] == 3
    assert len(card["training"]["loss_curve"]) == 3
    assert card["pairs"]["positive"] > 0 and card["pairs"]["pairs"] == (
        card["pairs"]["positive"] + card["pairs"]["hard"] + card["pairs"]["random"])
    for rel, sha in card["output_files"].items():
        assert sha256_file(out / rel) == sha
    assert "model.safetensors" in card["output_files"]
    with pytest.raises(ProvenanceError, match="never overwrites"):
        train(TINY, bm25_run, out, s)


def test_the_card_counts_the_nothing_here_pairs(bm25_run: Path, tiny_embedding_model: str,
                                                tmp_path: Path) -> None:
    """With unanswerable_negatives, the fixture's ``_abs`` questions give all-negative pairs,
    which the card's totals and its part entry count (kind ``absent``)."""
    out = tmp_path / "model"
    s = TrainSettings(base_model=tiny_embedding_model, max_steps=1, batch_size=8,
                      unanswerable_negatives=2)
    card = train(TINY, bm25_run, out, s)
    pc = card["pairs"]
    assert pc["absent"] > 0 and pc["absent"] == card["parts"][0]["pairs"]["absent"]
    assert pc["pairs"] == pc["positive"] + pc["hard"] + pc["random"] + pc["absent"]
    assert card["settings"]["unanswerable_negatives"] == 2


def test_a_heldout_part_and_a_run_on_other_data_are_refused(bm25_run: Path,
                                                             tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    assert cli.main(["split", str(TINY), "--holdout", "0.3", "--salt", "t",
                     "--output-dir", str(parts)]) == 0
    held = next(parts.glob("*.heldout.json*"))
    tune = next(parts.glob("*.tune.json*"))
    with pytest.raises(ProvenanceError, match="held-out"):
        train(held, bm25_run, tmp_path / "m1")
    with pytest.raises(ProvenanceError, match="was made on data"):
        train(tune, bm25_run, tmp_path / "m2")  # the run is of the whole fixture
    assert not (tmp_path / "m1").exists() and not (tmp_path / "m2").exists()


def test_exclude_shard_leaves_out_the_fold_a_run_shard_selects(bm25_run: Path,
                                                               tiny_embedding_model: str,
                                                               tmp_path: Path) -> None:
    from engram_eval.data.datasets import load_questions
    from engram_eval.errors import ConfigError
    from engram_eval.runs.shard import shard_of

    _, questions = load_questions(TINY)
    fold = [q.question_id for q in questions if shard_of(q.question_id, 2) == 0]
    assert 0 < len(fold) < len(questions)  # the fixture has questions on both sides
    s = TrainSettings(base_model=tiny_embedding_model, max_steps=1, batch_size=8,
                      exclude_shard="0/2")
    card = train(TINY, bm25_run, tmp_path / "fold", s)
    assert card["settings"]["exclude_shard"] == "0/2"
    assert card["excluded_questions"]["count"] == len(fold)
    kept = [q for q in questions if q.question_id not in fold]
    _, full_counts = build_pairs(kept, {q.question_id: [s.session_id for s in q.sessions]
                                        for q in kept}, TrainSettings())
    assert card["pairs"]["questions_used"] <= len(kept)
    assert card["pairs"]["questions_used"] == full_counts["questions_used"]
    with pytest.raises(ConfigError, match="exclude_shard"):
        TrainSettings(exclude_shard="2/2")


LOCOMO = Path(__file__).resolve().parents[2] / "fixtures" / "locomo_tiny.json"


def test_two_parts_train_one_model_and_the_card_lists_both(bm25_run: Path,
                                                            tiny_embedding_model: str,
                                                            tmp_path: Path) -> None:
    from engram_eval.analysis.train_reranker import pairs_sha256
    from engram_eval.data.datasets import load_questions

    loc_run = tmp_path / "loc.jsonl"
    assert cli.main(["run", str(LOCOMO), "--retriever", "bm25", "--output", str(loc_run)]) == 0
    s = TrainSettings(base_model=tiny_embedding_model, max_steps=1, batch_size=8)
    card = train(TINY, bm25_run, tmp_path / "both", s, also=[(LOCOMO, loc_run)])
    assert [p["sha256"] for p in card["parts"]] == [sha256_file(TINY), sha256_file(LOCOMO)]
    assert card["part"]["sha256"] == sha256_file(TINY)  # the first part, as for one part
    expected, per_part = [], []
    for data, run in ((TINY, bm25_run), (LOCOMO, loc_run)):
        _, qs = load_questions(data)
        rows = {r["question_id"]: r["ranked_session_ids"] for r in read_run(run).rows}
        got, counts = build_pairs(qs, rows, s)
        expected += got
        per_part.append((got, counts))
    assert card["pairs_sha256"] == pairs_sha256(expected)  # concatenated in the given order
    assert card["pairs"]["pairs"] == len(expected)
    for entry, (got, counts) in zip(card["parts"], per_part, strict=True):
        assert entry["pairs"]["pairs"] == counts["pairs"]
        assert entry["trained_question_ids"] == sorted({p.question_id for p in got})
    with pytest.raises(ConfigError, match="same part is given twice"):
        train(TINY, bm25_run, tmp_path / "twice", s, also=[(TINY, bm25_run)])


def test_exclude_fold_leaves_out_whole_conversations(tiny_embedding_model: str,
                                                     tmp_path: Path) -> None:
    from engram_eval.analysis.train_encoder import in_fold
    from engram_eval.data.datasets import load_questions

    loc_run = tmp_path / "loc.jsonl"
    assert cli.main(["run", str(LOCOMO), "--retriever", "bm25", "--output", str(loc_run)]) == 0
    _, qs = load_questions(LOCOMO)
    fold = [q.question_id for q in qs if in_fold(q.question_id, (0, 2))]
    convs = {qid.split(":", 1)[0] for qid in fold}
    # a conversation is all in or all out of the fold (the fixture has one on each side)
    assert convs and all(in_fold(q.question_id, (0, 2)) == (q.question_id.split(":", 1)[0]
                                                            in convs) for q in qs)
    assert len(fold) < len(qs)
    s = TrainSettings(base_model=tiny_embedding_model, max_steps=1, batch_size=8,
                      exclude_fold="0/2")
    card = train(LOCOMO, loc_run, tmp_path / "fold", s)
    assert card["excluded_questions"]["fold"] == "0/2"
    assert card["excluded_questions"]["count"] == len(fold)
    trained = card["parts"][0]["trained_question_ids"]
    assert trained and not {qid.split(":", 1)[0] for qid in trained} & convs
    with pytest.raises(ConfigError, match="exclude_fold"):
        TrainSettings(exclude_fold="3/2")
    with pytest.raises(ConfigError, match="not both"):
        TrainSettings(exclude_fold="0/2", exclude_shard="0/2")


def test_max_questions_caps_each_part_by_a_fixed_order(bm25_run: Path,
                                                        tiny_embedding_model: str,
                                                        tmp_path: Path) -> None:
    import hashlib

    from engram_eval.data.datasets import load_questions

    _, qs = load_questions(TINY)
    cap = max(1, len(qs) // 2)
    s = TrainSettings(base_model=tiny_embedding_model, max_steps=1, batch_size=8,
                      max_questions=cap, seed=3)
    card = train(TINY, bm25_run, tmp_path / "capped", s)
    entry = card["parts"][0]
    assert entry["questions_available"] == len(qs) and entry["questions_considered"] == cap
    order = sorted(qs, key=lambda q: (hashlib.sha256(f"3:{q.question_id}".encode()).hexdigest(),
                                      q.question_id))
    kept = {q.question_id for q in order[:cap]}
    assert set(entry["trained_question_ids"]) <= kept
    with pytest.raises(ConfigError, match="max_questions"):
        TrainSettings(max_questions=-1)
