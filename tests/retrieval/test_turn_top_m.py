"""Turn-level top m (issue 27 item 3): ``bm25_turn_top_m`` and ``dense_turn_top_m``.

A session's turn-level signal is the sum of its m best turn scores (BM25: turns scoring
above 0; dense: a turn scores its best piece); a session with fewer turns sums what it has;
m = 1 is the best turn (the package default, unchanged). Expected values are written as the
formulas: BM25 Okapi per turn document (rank-bm25's idf), cosines of hand-made unit vectors.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from engram_eval.cli import main as cli
from engram_eval.data.records import Session, Turn
from engram_eval.errors import ConfigError
from engram_eval.provenance.sidecar import sidecar_path
from engram_eval.retrieval import pipeline as P
from engram_eval.retrieval.dense import Piece, session_scores
from engram_eval.retrieval.settings import LEGACY_VALUES, RetrievalSettings

ROOT = Path(__file__).resolve().parents[2]
K1, B = 1.5, 0.75


def _session(sid: str, turns: list[tuple[str, str]]) -> Session:
    return Session(sid, "", tuple(Turn(r, c, k) for k, (r, c) in enumerate(turns)))


def _chat() -> tuple[Session, ...]:
    """Turn documents (user turns, in order): d0 'apple apple pear' (s0, turn 0), d1 'apple'
    (s0, turn 2), d2 'kiwi' (s0, turn 4), d3 'apple pear' (s1, turn 0), d4..d7 'grape',
    'melon', 'fig', 'plum' (s2, turns 0, 2, 4, 6): 8 documents, 11 terms, 'apple' in 3."""
    s0 = _session("s0", [("user", "apple apple pear"), ("assistant", "apple indeed"),
                         ("user", "apple"), ("assistant", "ok"), ("user", "kiwi")])
    s1 = _session("s1", [("user", "apple pear"), ("assistant", "apple apple apple")])
    s2 = _session("s2", [x for w in ("grape", "melon", "fig", "plum")
                         for x in (("user", w), ("assistant", "ok"))])
    return (s0, s1, s2)


def _bm25(tf: int, length: int, n_docs: int = 8, n_with: int = 3,
          avgdl: float = 11 / 8) -> float:
    """Okapi BM25 of one query term (rank-bm25's idf; positive here, n_with < n_docs / 2)."""
    idf = math.log(n_docs - n_with + 0.5) - math.log(n_with + 0.5)
    return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avgdl))


def _lexical(**kw: object) -> RetrievalSettings:
    return RetrievalSettings(use_dense=False, use_dense_rocchio=False, use_bm25_prf=False,
                             use_bm25_user=False, use_bm25_assistant=False, rerank=False,
                             lexical_stemmer="none", lexical_stopwords="none",
                             bm25_k1=K1, bm25_b=B, temporal=False, **kw)  # type: ignore[arg-type]


def _bm25_turn(sessions: tuple[Session, ...], settings: RetrievalSettings, q: str = "apple"
               ) -> list[dict]:
    st = P.run_pipeline("q", q, "", settings, P.build_corpus(sessions, settings))
    return [dict(t) for t in st.traces]


@pytest.mark.parametrize("m", [1, 2, 3, 50])
def test_bm25_turn_sums_the_m_best_turns(m: int) -> None:
    d0, d1, d3 = _bm25(2, 3), _bm25(1, 1), _bm25(1, 2)
    assert d1 > d0 > d3 > 0  # the short turn wins: turn 2 of s0 is its best
    best_first = [d1, d0]  # s0's turns scoring above 0 ('kiwi' scores 0 and adds nothing)
    tr = _bm25_turn(_chat(), _lexical(bm25_turn_top_m=m))
    assert tr[0]["bm25_turn"] == pytest.approx(sum(best_first[:m]), rel=1e-12)
    # a session with fewer turns than m sums what it has
    assert tr[1]["bm25_turn"] == pytest.approx(d3, rel=1e-12)
    assert tr[2]["bm25_turn"] == 0.0 and tr[2]["bm25_turn_rank"] is None
    if m == 1:  # the best turn alone: nothing more is traced (rows as before the setting)
        assert "bm25_turn_turns" not in tr[0]
        assert tr[0]["bm25_turn"] == d1
    else:  # the turns summed, as indices into the session's turns, best first
        assert tr[0]["bm25_turn_turns"] == [2, 0]
        assert tr[1]["bm25_turn_turns"] == [0]
        assert tr[2]["bm25_turn_turns"] == []


def test_top_m_turns_orders_ties_by_turn_and_floors_at_zero() -> None:
    scores, turns = P.top_m_turns(np.array([1.0, 3.0, 1.0, -0.5, 0.0, 2.0]),
                                  [0, 0, 0, 0, 1, 1], [0, 1, 2, 3, 0, 1], 3, 2)
    assert scores.tolist() == [3.0 + 1.0, 2.0, 0.0]
    assert turns == [[1, 0], [1], []]  # equal scores: the earlier turn; <= 0 never summed


def test_people_chats_count_both_speakers_turns_and_may_choose_their_own_m() -> None:
    """Between people every turn is a turn (both speakers'); ``people_overrides`` may give
    people's chats their own m while a chat keeps the top-level one."""
    people = (_session("p0", [("Alice", "apple apple pear"), ("Bob", "apple"),
                              ("Alice", "kiwi")]),
              _session("p1", [("Bob", "apple pear")]),
              _session("p2", [(n, w) for n, w in (("Alice", "grape"), ("Bob", "melon"),
                                                  ("Alice", "fig"), ("Bob", "plum"))]))
    s = _lexical(bm25_turn_top_m=1, people_overrides={"bm25_turn_top_m": 2})
    tr = _bm25_turn(people, s)
    # the same 8 turn documents as the chat fixture, but Alice's and Bob's turns alike
    assert tr[0]["bm25_turn"] == pytest.approx(_bm25(1, 1) + _bm25(2, 3), rel=1e-12)
    assert tr[0]["bm25_turn_turns"] == [1, 0]  # Bob's turn 1, then Alice's turn 0
    chat = _bm25_turn(_chat(), s)
    assert chat[0]["bm25_turn"] == _bm25_turn(_chat(), _lexical())[0]["bm25_turn"]
    assert "bm25_turn_turns" not in chat[0]


def _unit(deg: float) -> np.ndarray:
    r = math.radians(deg)
    return np.array([math.cos(r), math.sin(r)], dtype=np.float32)


#: (session, turn, angle to the question in degrees): s0's turn 0 is cut in two windows
PIECES = [(0, 0, 10.0), (0, 0, 20.0), (0, 2, 60.0), (0, 4, 95.0), (1, 0, 30.0)]


def _cos(deg: float) -> float:
    return float(_unit(deg) @ _unit(0.0))  # the float32 inner product, as FAISS computes it


@pytest.mark.parametrize("m", [1, 2, 3, 50])
def test_dense_sums_the_m_best_turns_each_its_best_piece(m: int) -> None:
    pieces = [Piece(si, ti, f"p{k}") for k, (si, ti, _) in enumerate(PIECES)]
    vectors = np.stack([_unit(a) for *_, a in PIECES])
    ds = session_scores(pieces, vectors, _unit(0.0), 3, "max", m)
    # the two windows of turn 0 are one turn: its best (10 degrees) counts, once
    s0 = [_cos(10.0), _cos(60.0), _cos(95.0)]  # turns 0, 2, 4, best first (the last < 0)
    assert ds.scores[0] == pytest.approx(sum(s0[:m]), rel=1e-6)
    assert ds.scores[1] == pytest.approx(_cos(30.0), rel=1e-6)  # fewer turns than m
    assert ds.scores[2] == 0.0 and ds.n_pieces[2] == 0
    if m == 1:
        assert ds.top_turns is None
        assert ds.scores.tolist() == session_scores(pieces, vectors, _unit(0.0), 3).scores.tolist()
    else:
        assert ds.top_turns == [[0, 2, 4][:m], [0], []]


def test_dense_turns_are_traced_for_both_dense_signals() -> None:
    sessions = (_session("s0", [("user", "a"), ("assistant", "x"), ("user", "b"),
                                ("assistant", "y"), ("user", "c")]),
                _session("s1", [("user", "d")]), _session("s2", [("assistant", "z")]))
    pieces = [Piece(si, ti, f"p{k}") for k, (si, ti, _) in enumerate(PIECES)]
    vectors = np.stack([_unit(a) for *_, a in PIECES])
    s = RetrievalSettings(use_bm25_prf=False, rerank=False, temporal=False,
                          dense_turn_top_m=2, use_dense_rocchio=True, people_overrides={})
    corpus = P.build_corpus(sessions, s, pieces=pieces, vectors=vectors)
    st = P.run_pipeline("q", "a question", "", s, corpus,
                        encode=lambda texts: np.stack([_unit(0.0) for _ in texts]))
    tr: list[dict] = [dict(t) for t in st.traces]
    assert tr[0]["dense"] == pytest.approx(_cos(10.0) + _cos(60.0), rel=1e-6)
    assert tr[0]["dense_turns"] == [0, 2] and tr[1]["dense_turns"] == [0]
    assert tr[2]["dense_turns"] == [] and tr[2]["dense_rank"] is None
    # Rocchio: the question moved toward s0's best piece (10 degrees), re-scored the same way
    assert tr[0]["dense_rocchio_turns"] == [0, 2]


@pytest.mark.parametrize(("changes", "message"), [
    ({"bm25_turn_top_m": 0}, r"config field bm25_turn_top_m=0: must be >= 1"),
    ({"dense_turn_top_m": 0}, r"config field dense_turn_top_m=0: must be >= 1"),
    ({"bm25_turn_top_m": 2.0}, r"config field bm25_turn_top_m=2.0: must be an integer"),
    ({"dense_turn_top_m": 2, "dense_aggregate": "max_mean"},
     r"dense_turn_top_m: above 1 .* needs dense_aggregate max"),
    ({"people_overrides": {"bm25_turn_top_m": -1}},
     r"people_overrides: config field bm25_turn_top_m=-1: must be >= 1"),
])
def test_top_m_is_validated(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RetrievalSettings(**changes)


def test_defaults_are_the_tuned_choice_and_the_legacy_value_the_best_turn() -> None:
    """The defaults: the 3 best turns for dense, the best for BM25 (PROVENANCE.md section 18);
    a run made before the fields existed is rebuilt with the best turn for both."""
    s = RetrievalSettings()
    assert (s.bm25_turn_top_m, s.dense_turn_top_m) == (1, 3)
    assert (LEGACY_VALUES["bm25_turn_top_m"], LEGACY_VALUES["dense_turn_top_m"]) == (1, 1)


def test_flag_sidecar_and_trace_of_a_run(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m2.jsonl"
    assert cli.main(["run", str(ROOT / "fixtures" / "longmemeval_tiny.json"), "--retriever",
                     "bm25", "--no-rerank", "--bm25-turn-top-m", "2", "--output",
                     str(out)]) == 0
    meta = json.loads(sidecar_path(out).read_text())
    assert meta["config"]["bm25_turn_top_m"] == 2
    assert meta["retriever"]["lexical"]["bm25_turn_top_m"] == 2
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    traced = [t for r in rows for t in r["trace"]["sessions"]]
    assert traced and all(isinstance(t["bm25_turn_turns"], list) for t in traced)
    assert all(len(t["bm25_turn_turns"]) <= 2 for t in traced)
    # the CLI refuses m 0 with one error naming the field
    capsys.readouterr()
    assert cli.main(["run", str(ROOT / "fixtures" / "longmemeval_tiny.json"), "--retriever",
                     "bm25", "--no-rerank", "--bm25-turn-top-m", "0", "--output",
                     str(tmp_path / "bad.jsonl")]) == 2
    assert "bm25_turn_top_m=0: must be >= 1" in capsys.readouterr().err
