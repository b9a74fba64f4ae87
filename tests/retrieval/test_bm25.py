"""BM25 backends (engram_eval.retrieval.bm25)."""

from __future__ import annotations

import numpy as np
from rank_bm25 import BM25Okapi

from engram_eval.data.records import Question, Session, Turn
from engram_eval.retrieval.bm25 import BM25Index, FlatBM25, make_flat_bm25, tokenize


def test_tokenize() -> None:
    assert tokenize("My Dog's NAME is Rex-2, isn't it?") == [
        "my", "dog's", "name", "is", "rex", "2", "isn't", "it"]
    assert tokenize("") == []


def test_bm25_index_empty_corpus_and_empty_query() -> None:
    assert BM25Index([]).scores("dog").shape == (0,)
    empty_docs = BM25Index(["", "  ", "!!"])
    np.testing.assert_array_equal(empty_docs.scores("dog"), np.zeros(3))
    idx = BM25Index(["my dog barks", "a cat sleeps"])
    for q in ("", "   ", "?!"):
        s = idx.scores(q)
        assert s.dtype == np.float64
        np.testing.assert_array_equal(s, np.zeros(2))


def test_bm25_index_matching_doc_scores_higher() -> None:
    docs = ["I adopted a border collie puppy", "", "the weather in Denver was cold",
            "my sister bakes bread", "we watched a movie"]
    s = BM25Index(docs).scores("What breed is the PUPPY I adopted?")
    assert s.shape == (5,)
    assert int(np.argmax(s)) == 0
    assert s[0] > 0
    assert s[1] == 0.0  # an empty document scores zero
    assert s[3] == 0.0 and s[4] == 0.0  # no shared term


def test_bm25_index_parameters_matter() -> None:
    docs = ["dog dog dog dog cat", "dog bird", "fish", "tree", "rock"]
    a = BM25Index(docs, k1=1.5, b=0.75).scores("dog")
    b = BM25Index(docs, k1=0.1, b=0.0).scores("dog")
    assert not np.allclose(a, b)


def _session(sid: str, turns: list[tuple[str, str]]) -> Session:
    return Session(sid, "2023/01/01", tuple(Turn(r, c, i) for i, (r, c) in enumerate(turns)))


def _question(text: str, sessions: list[Session]) -> Question:
    return Question("q1", "single-session-user", text, "", "2023/02/01", tuple(sessions), ())


def test_flat_bm25_matches_reference_computation_with_ties() -> None:
    sessions = [
        _session("s0", [("user", "I bought a cast-iron skillet"), ("assistant", "skillet skillet")]),
        _session("s1", [("user", "nothing relevant here")]),
        _session("s2", [("user", "what did I buy"), ("user", "I bought a skillet Skillet")]),
        _session("s3", [("user", "nothing relevant here")]),  # ties with s1 and s5
        _session("s4", [("assistant", "assistant only, I bought a skillet")]),  # empty user doc
        _session("s5", [("user", "totally unrelated words")]),
        _session("s6", [("user", "I bought a cast-iron skillet")]),  # ties with s0
    ]
    question = "What did I buy? a  skillet"
    ranking = FlatBM25()
    ranking.index(sessions)
    got = ranking.rank(_question(question, sessions))

    corpus = [" ".join(t.content for t in s.turns if t.role == "user") for s in sessions]
    bm25 = BM25Okapi([d.split(" ") for d in corpus])
    scores = bm25.get_scores(question.split(" "))
    order = np.argsort(scores)[::-1]
    assert got.session_ids == [sessions[i].session_id for i in order]
    np.testing.assert_allclose(got.scores, [scores[i] for i in order])
    # the tied pair s0/s6 appears in the reference order (reversed argsort)
    assert scores[0] == scores[6]
    for r in got.results:
        assert r.trace == {"bm25_user": r.score}
    got.check_complete(sessions)


def test_flat_bm25_is_case_and_punctuation_sensitive_like_the_reference() -> None:
    sessions = [_session("a", [("user", "Skillet")]), _session("b", [("user", "skillet")]),
                _session("c", [("user", "pan")])]
    r = FlatBM25()
    r.index(sessions)
    top = r.rank(_question("skillet", sessions)).results[0]
    assert top.session_id == "b" and top.score > 0


def test_flat_bm25_empty_corpus_and_protocol_bits() -> None:
    r = make_flat_bm25(None)
    r.index([])
    assert r.rank(_question("x", [])).results == ()
    assert r.describe()["tokenizer"] == "split(' ')"
    assert r.models() == []
    assert "engram_eval/retrieval/bm25.py" in r.source_modules()


def test_flat_bm25_scores_speaker_name_corpora() -> None:
    """LoCoMo turns carry speakers' names as roles: every turn is user text there (the one
    rule in engram_eval.data.records.has_chat_roles), so scores are not all zero."""
    sessions = [Session(f"c:s{i}", "1:56 pm on 8 May, 2023",
                        (Turn("Caroline", text, 0), Turn("Melanie", "nice one", 1)))
                for i, text in enumerate(["we talked about pottery classes",
                                          "Caroline went hiking in the mountains",
                                          "a chat about painting sunsets"])]
    r = FlatBM25()
    r.index(sessions)
    q = Question("q", "4", "Where did Caroline go hiking", "", "", tuple(sessions), ())
    ranking = r.rank(q)
    assert ranking.session_ids[0] == "c:s1" and ranking.scores[0] > 0
    corpus = [f"{s.turns[0].content} {s.turns[1].content}".split(" ") for s in sessions]
    want = BM25Okapi(corpus).get_scores(q.question.split(" "))
    assert sorted(ranking.scores, reverse=True) == sorted(want.tolist(), reverse=True)
    from engram_eval.data.records import has_chat_roles

    assert not has_chat_roles(sessions)


def test_chat_roles_are_decided_per_corpus() -> None:
    from engram_eval.data.records import has_chat_roles, user_document

    chat = Session("a", "", (Turn("user", "hi there", 0), Turn("assistant", "hello", 1)))
    odd = Session("b", "", (Turn("system", "setup", 0),))
    assert has_chat_roles([chat, odd]) and not has_chat_roles([odd])
    # in a chat corpus a session without user turns has no user text
    assert user_document(odd, True) == "" and user_document(odd, False) == "setup"
