"""memo-lexical: each ranking rule of Memo's session search, pinned on hand-built haystacks
and the real SQLite FTS5 engine (engram_eval/retrieval/memo_lexical.py)."""

from __future__ import annotations

import sqlite3

import pytest

from engram_eval.data.records import Question, Session, Turn
from engram_eval.retrieval import base
from engram_eval.retrieval import memo_lexical as M
from engram_eval.runs.config import RunConfig


def sess(sid: str, date: str, *texts: str) -> Session:
    return Session(sid, date, tuple(Turn("user" if i % 2 == 0 else "assistant", t, i)
                                    for i, t in enumerate(texts)))


def ask(text: str, sessions: list[Session], **settings: object) -> tuple[list[str], dict]:
    r = M.MemoLexical(M.MemoLexicalSettings(**settings))  # type: ignore[arg-type]
    r.index(sessions)
    q = Question("q", "t", text, "", "", tuple(sessions), (sessions[0].session_id,))
    ranking = r.rank(q)
    ranking.check_complete(sessions)
    assert ranking.scores == sorted(ranking.scores, reverse=True)
    assert len(set(ranking.scores)) == len(ranking.scores)
    return ranking.session_ids, {x.session_id: x.trace for x in ranking.results}


D1, D2, D3 = "2023/05/01 (Mon) 10:00", "2023/05/02 (Tue) 10:00", "2023/05/03 (Wed) 10:00"


def test_fts5_is_available() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(x)")


def test_whole_question_phrase_comes_before_any_weighted_hit() -> None:
    verbatim = sess("verbatim", D1, "where did I park the car")
    heavy = sess("heavy", D3, "parking parking car park where did I leave it, park car park car")
    ids, tr = ask("where did I park the car", [heavy, verbatim])
    assert ids[0] == "verbatim" and tr["verbatim"]["stage"] == "phrase"
    assert tr["heavy"]["stage"] == "weighted"
    assert tr["heavy"]["weight"] > 0
    assert tr["verbatim"]["found_by"][0]["kind"] == "question"


def test_weighted_merge_sums_token_lengths_and_pair_string_lengths() -> None:
    s_pair = sess("pair", D1, "my red bicycle")           # red(3) + bicycle(7) + "red bicycle"(11)
    s_split = sess("split", D2, "red paint", "a bicycle")  # red(3) + bicycle(7)
    s_long = sess("long", D3, "bicycle")                   # bicycle(7)
    ids, tr = ask("red bicycle?", [s_long, s_split, s_pair])
    assert ids == ["pair", "split", "long"]
    assert (tr["pair"]["weight"], tr["split"]["weight"], tr["long"]["weight"]) == (21, 10, 7)
    kinds = {(f["kind"], f["phrase"], f["weight"]) for f in tr["pair"]["found_by"]}
    assert ("pair", "red bicycle", 11) in kinds and ("token", "bicycle", 7) in kinds
    _, tr2 = ask("red bicycle?", [s_long, s_split, s_pair], memo_pair_weight="tokens")
    assert tr2["pair"]["weight"] == 20


def test_longer_token_outweighs_shorter_tokens_and_time_breaks_weight_ties() -> None:
    a = sess("a", D1, "zebra")       # 5
    b = sess("b", D2, "cat dog")     # 3 + 3 = 6
    c = sess("c", D3, "horse")       # 5, later than a
    ids, _ = ask("cat dog zebra horse", [a, b, c], memo_window_order="question")
    # "cat dog" is also a pair (7): b = 13; c and a tie at 5, the later session first
    assert ids == ["b", "c", "a"]


def test_representative_event_match_count_then_length_then_time() -> None:
    # per phrase, sessions rank by their representative event: match count DESC first ...
    twice = sess("twice", D1, "kiwi pie and kiwi jam and many other words here")
    once_short = sess("once_short", D3, "kiwi")
    ids, tr = ask("kiwi", [once_short, twice])
    assert ids == ["twice", "once_short"]
    assert tr["twice"]["found_by"][-1]["match_count"] == 2
    # ... then the shorter event ...
    short = sess("short", D1, "kiwi now")
    longer = sess("longer", D3, "kiwi is a small fruit")
    assert ask("kiwi", [longer, short])[0] == ["short", "longer"]
    # ... then the later event (session date, then the turn's index inside its session)
    early, late = sess("early", D1, "kiwi"), sess("late", D2, "kiwi")
    assert ask("kiwi", [early, late])[0] == ["late", "early"]
    first_turn = sess("first_turn", D1, "kiwi", "zzz", "yyy")
    third_turn = sess("third_turn", D1, "xxx", "zzz", "kiwi")
    assert ask("kiwi", [first_turn, third_turn])[0] == ["third_turn", "first_turn"]


def test_representative_event_is_chosen_inside_the_session() -> None:
    # the session's best event (2 matches) represents it, not its first or its shortest
    s = sess("s", D1, "kiwi", "kiwi kiwi with cream")
    t = sess("t", D3, "kiwi kiwi and more words than the other one")
    ids, tr = ask("kiwi", [t, s])
    assert ids == ["s", "t"]  # both count 2; s's event (20 code points) is shorter
    assert tr["s"]["found_by"][0]["event_turn"] == 1


def test_session_id_breaks_a_full_tie() -> None:
    x, y = sess("y-session", D1, "kiwi"), sess("x-session", D1, "kiwi")
    assert ask("kiwi", [x, y])[0] == ["x-session", "y-session"]


def test_undated_session_counts_as_oldest() -> None:
    dated, undated = sess("dated", D1, "kiwi"), sess("undated", "", "kiwi")
    assert ask("kiwi", [undated, dated])[0] == ["dated", "undated"]


def test_each_phrase_keeps_its_top_page_only() -> None:
    # 12 sessions hold "kiwi"; the page is max(limit, page_min); the 3 longest fall off it
    many = [sess(f"s{i:02d}", D1, "kiwi " + "x " * i) for i in range(12)]
    ids, tr = ask("kiwi lemon", many, memo_limit=4, memo_page_min=9)  # no verbatim hit
    assert [i for i in ids if tr[i]["stage"] == "weighted"] == [f"s{i:02d}" for i in range(9)]
    assert [tr[i]["returned"] for i in ids] == [True] * 4 + [False] * 8
    assert all(tr[f"s{i:02d}"]["stage"] == "unmatched" for i in (9, 10, 11))


def test_content_words_first_window_and_stopword_fill() -> None:
    s = M.MemoLexicalSettings(memo_window=4)
    toks = M.question_tokens("What did we decide about the database migration?", s)
    assert toks == ["what", "did", "we", "decide", "about", "the", "database", "migration"]
    assert M.window(toks, s) == ["decide", "database", "migration", "what"]
    q = M.MemoLexicalSettings(memo_window=4, memo_window_order="question")
    assert M.window(toks, q) == ["what", "decide", "database", "migration"]
    phrases = M.weighted_phrases("What did we decide about the database migration?", s)
    assert [p for k, p, _ in phrases if k == "pair"] == [
        "decide database", "database migration", "migration what"]
    none = M.MemoLexicalSettings(memo_window=2, memo_stopwords="none")
    assert M.window(toks, none) == ["what", "did"]


def test_han_runs_are_tokens_and_mixed_script_splits() -> None:
    s = M.MemoLexicalSettings()
    assert M.question_tokens("我上次提到的Python项目叫什么?", s) == [
        "我上次提到的", "python", "项目叫什么"]
    assert M.question_tokens("我 的 书", s) == []  # single Han characters are dropped
    english = sess("en", D1, "my Python project is called Engram")
    other = sess("other", D2, "nothing relevant")
    ids, tr = ask("我上次提到的Python项目叫什么?", [other, english])
    assert ids[0] == "en" and tr["en"]["found_by"][0]["phrase"] == "python"


@pytest.mark.parametrize("text", [
    'AND', 'NEAR(foo bar)', 'foo AND bar OR NOT baz', '"quoted" "unbalanced', 'body:kiwi',
    'kiwi*', '^kiwi', '(kiwi', 'kiwi + - ; \\ \x00 ', '""', '***', ':', 'NEAR(kiwi, 2)',
    "it's -kiwi- {body}: kiwi", "",
])
def test_fts5_syntax_in_a_question_is_text_and_never_fails(text: str) -> None:
    s1 = sess("s1", D1, "kiwi near foo bar and body kiwi")
    s2 = sess("s2", D2, "nothing")
    ids, _ = ask(text, [s1, s2])
    assert sorted(ids) == ["s1", "s2"]


def test_query_syntax_is_searched_as_a_phrase() -> None:
    hit = sess("hit", D1, "they said near foo bar and then left")
    decoy = sess("decoy", D2, "foo is near bar")  # NEAR(foo bar) as syntax would match this
    ids, tr = ask("NEAR(foo bar)", [decoy, hit])
    assert ids[0] == "hit" and tr["hit"]["stage"] == "phrase"
    assert tr["decoy"]["stage"] != "phrase"
    ids, tr = ask('body:"kiwi" AND pie*', [sess("x", D1, "body kiwi and pie"),
                                          sess("y", D2, "kiwi pie")])
    assert tr["x"]["stage"] == "phrase" and tr["y"]["stage"] != "phrase"


def test_occurrences_are_counted_without_overlap() -> None:
    assert M.count_occurrences(["a", "a", "a", "a"], ["a", "a"]) == 2
    assert M.count_occurrences(["a", "b", "a", "b"], ["a", "b"]) == 2
    assert M.count_occurrences(["a"], ["a", "b"]) == 0


def test_time_proxy_reads_both_datasets_layouts() -> None:
    lme = M.session_time("2023/05/20 (Sat) 02:21")
    assert lme is not None and lme < M.session_time("2023/05/20 (Sat) 14:00")  # type: ignore[operator]
    a, b = M.session_time("1:56 pm on 8 May, 2023"), M.session_time("9:05 am on 8 May, 2023")
    assert a is not None and b is not None and b < a
    assert M.session_time("12:30 am on 1 January, 2024") < M.session_time(  # type: ignore[operator]
        "12:10 pm on 1 January, 2024")
    assert M.session_time("") is None and M.session_time("not a date") is None
    assert M.session_time("2023-05-20") is not None  # another readable date: to the day


def test_registered_and_built_from_a_run_config() -> None:
    assert "memo-lexical" in base.available()
    cfg = RunConfig(retriever="memo-lexical", memo_limit=7, memo_window_order="question")
    r = base.create("memo-lexical", cfg)
    d = r.describe()
    assert d["retriever"] == "memo-lexical" and d["memo_limit"] == 7
    assert d["memo_window_order"] == "question"
    assert "engram_eval/retrieval/memo_lexical.py" in r.source_modules()
    # the memo fields are recorded in memo-lexical runs only
    assert cfg.fingerprint_part()["memo_limit"] == 7
    assert not any(k.startswith("memo_") for k in RunConfig().fingerprint_part())
    assert not any(k.startswith("memo_") for k in RunConfig().to_json())


def test_bad_memo_setting_is_refused() -> None:
    from engram_eval.errors import ConfigError

    with pytest.raises(ConfigError, match="memo_window"):
        M.MemoLexicalSettings(memo_window=0)
    with pytest.raises(ConfigError, match="memo_stopwords"):
        RunConfig(memo_stopwords="klingon")


def test_same_haystack_is_indexed_once_and_a_new_one_replaces_it() -> None:
    r = M.MemoLexical()
    one = [sess("a", D1, "kiwi")]
    r.index(one)
    first = r._index
    r.index(list(one))
    assert r._index is first
    two = [sess("b", D1, "kiwi")]
    r.index(two)
    q = Question("q", "t", "kiwi", "", "", tuple(two), ("b",))
    assert r.rank(q).session_ids == ["b"]


def test_event_text_setting_prefixes_the_speaker() -> None:
    a = Session("a", D1, (Turn("Caroline", "hello there", 0),))
    b = Session("b", D2, (Turn("Melanie", "caroline said hi", 0),))
    assert ask("caroline", [a, b])[0] == ["b", "a"]
    ids, tr = ask("caroline", [a, b], memo_event_text="speaker")
    assert tr["a"]["stage"] == "phrase" and ids[0] == "a"  # "Caroline: hello there" is shorter
