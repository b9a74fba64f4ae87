"""Systems from outside the package (engram_eval.retrieval.systems): opaque ids, the order
shuffled, ids mapped back, replies checked, identity recorded."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import systems_helpers as H

from engram_eval.data.datasets import load_questions
from engram_eval.errors import ConfigError
from engram_eval.retrieval import base
from engram_eval.retrieval.settings import SystemSettings
from engram_eval.retrieval.systems import (
    IDS_OPAQUE,
    IDS_VISIBLE,
    SystemReplyError,
    SystemRetriever,
    identity_difference,
    parse_ranking,
)
from engram_eval.runs.config import RunConfig

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "engram_eval" / "schemas"
                     / "system.schema.json").read_text())
REFS = {"index": "haystack", "search": "query", "reply": "ranking"}


@pytest.fixture(autouse=True)
def _clean() -> None:
    H.SEEN.clear()
    H.FAIL_AT.clear()
    H.BAD.clear()


def _questions() -> list:  # type: ignore[type-arg]
    return load_questions(H.FIXTURE, "longmemeval")[1]


def _rank(retriever, q):  # type: ignore[no-untyped-def]
    retriever.index(q.sessions)
    return retriever.rank(q)


def test_opaque_ids_map_back_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    r = base.create("py:systems_helpers:make_spy", RunConfig(retriever="py:systems_helpers:make_spy",
                                                            id_salt="s1"))
    for q in _questions():
        H.SEEN.clear()
        ranking = _rank(r, q)
        shown = H.SEEN[0]["index"]
        sent = [s["id"] for s in shown["sessions"]]
        real = list(dict.fromkeys(q.session_ids))
        # the system saw no real id, no answer_ prefix, and not the question id
        assert not set(sent) & set(real)
        assert not any(i.startswith("answer_") for i in sent)
        assert q.question_id not in json.dumps(H.SEEN)
        assert "has_answer" not in json.dumps(H.SEEN)
        # the ranking came back in the dataset's ids, every session once, in the system's order
        _, back = r.haystack(q)
        assert ranking.session_ids == [back[x["id"]] for x in H.SEEN[-1]["reply"]]
        # what is sent and returned is what the protocol's schema says
        for kind, doc in ((k, v) for seen in H.SEEN for k, v in seen.items()):
            jsonschema.validate(doc, {**SCHEMA, "$ref": f"#/$defs/{REFS[kind]}"})
        assert sorted(ranking.session_ids) == sorted(real)


def test_the_order_is_shuffled_by_salt_and_seed_and_recorded() -> None:
    q = _questions()[0]
    sys_ = H.Spy({})
    orders = {}
    for salt, seed in (("a", 0), ("a", 1), ("b", 0), ("a", 0)):
        r = SystemRetriever("spy", sys_, {}, SystemSettings(id_salt=salt, id_seed=seed))
        r.index(q.sessions)
        doc, back = r.haystack(q)
        orders.setdefault((salt, seed), []).append([back[s["id"]] for s in doc["sessions"]])
        assert r.describe()["ids"] == {"real_ids": False, "id_salt": salt, "id_seed": seed,
                                       "label": IDS_OPAQUE}
    assert orders[("a", 0)][0] == orders[("a", 0)][1]  # seeded: the same again
    assert orders[("a", 0)][0] != orders[("a", 1)][0]
    assert orders[("a", 0)][0] != list(dict.fromkeys(q.session_ids))  # not the dataset's
    visible = SystemRetriever("spy", sys_, {}, SystemSettings(real_ids=True))
    visible.index(q.sessions)
    doc, back = visible.haystack(q)
    assert [s["id"] for s in doc["sessions"]] == list(dict.fromkeys(q.session_ids))
    assert visible.describe()["ids"]["label"] == IDS_VISIBLE


@pytest.mark.parametrize(("reply", "match"), [
    (lambda r: r[:-1], "holds 3 of the haystack's 4 sessions"),
    (lambda r: [r[0], *r[:-1]], "twice"),
    (lambda r: [{"id": "answer_x", "score": 1.0}, *r[1:]], "not a session of the haystack"),
    (lambda r: {"rank": r}, "without 'ranking'"),
    (lambda r: [*r[:-1], {"id": r[-1]["id"], "score": 9e9}], "must not increase"),
    (lambda r: [{"id": r[0]["id"]}, *r[1:]], "some sessions, not all"),
    (lambda r: [{"id": r[0]["id"], "score": float("nan")}, *r[1:]], "finite"),
    (lambda r: [7, *r[1:]], "not a session id"),
])
def test_a_reply_that_is_not_a_ranking_is_one_clear_error(reply, match: str) -> None:  # type: ignore[no-untyped-def]
    back = {f"s{i}": f"real{i}" for i in range(4)}
    good = [{"id": f"s{i}", "score": float(4 - i)} for i in range(4)]
    assert parse_ranking(good, back, "q1", "spy") == ([f"s{i}" for i in range(4)],
                                                       [4.0, 3.0, 2.0, 1.0])
    assert parse_ranking({"ranking": [f"s{i}" for i in range(4)]}, back, "q1", "spy")[1] is None
    import numpy as np  # a numpy score is a number too

    assert parse_ranking([{"id": f"s{i}", "score": np.float32(4 - i)} for i in range(4)], back,
                         "q1", "spy")[1] == [4.0, 3.0, 2.0, 1.0]
    with pytest.raises(SystemReplyError, match=match) as e:
        parse_ranking(reply(good), back, "q1", "spy")
    assert "question q1" in str(e.value)


def test_scores_default_to_the_rank_and_the_trace_says_so() -> None:
    class Ids:
        def index(self, haystack):  # type: ignore[no-untyped-def]
            self.ids = [s["id"] for s in haystack["sessions"]]

        def search(self, query):  # type: ignore[no-untyped-def]
            return list(reversed(self.ids))

    q = _questions()[0]
    r = SystemRetriever("ids", Ids(), {}, SystemSettings())
    ranking = _rank(r, q)
    n = len(ranking.results)
    assert ranking.scores == [float(n - i) for i in range(n)]
    assert all(x.trace == {"system_score": False} for x in ranking.results)


def test_entry_point_identity_and_its_difference(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    site = H.install(monkeypatch, tmp_path / "site")
    r = base.create("prefix-leak", RunConfig(retriever="prefix-leak",
                                             system_settings={"prefix": "answer_"}))
    sysd = r.describe()["system"]
    assert sysd["distribution"] == "engram-prefix-leak" and sysd["version"] == "1.0.0"
    assert sysd["entry"] == "prefix-leak = engram_prefix_leak:make_system"
    assert set(sysd["files_sha256"]) == {"engram_prefix_leak/__init__.py",
                                         "dist-info/entry_points.txt"}
    assert sysd["settings"] == {"prefix": "answer_"} and len(sysd["settings_sha256"]) == 64
    H.install(monkeypatch, site, version="1.0.1")
    (site / "engram_prefix_leak" / "__init__.py").write_text(
        (H.LEAK_SRC / "__init__.py").read_text() + "\n# changed\n")
    (site / "engram_prefix_leak" / "extra.py").write_text("X = 1\n")
    now = base.create("prefix-leak", RunConfig(retriever="prefix-leak",
                                               system_settings={"prefix": "answer_"}))
    diff = identity_difference(sysd, now.describe()["system"])
    text = "; ".join(diff)
    assert "version: the run's '1.0.0', installed '1.0.1'" in text
    assert "files differing: engram_prefix_leak/__init__.py;" in text
    assert text.endswith("files not in the run: engram_prefix_leak/extra.py")


def test_unknown_names_and_bad_factories_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="unknown retriever 'nope'.*entry points"):
        base.create("nope", RunConfig())
    with pytest.raises(ConfigError, match="cannot import no_such_module_xyz"):
        base.create("py:no_such_module_xyz:f", RunConfig())
    H.importable(monkeypatch, H.LEAK_SRC)
    with pytest.raises(ConfigError, match="no callable 'nothing'"):
        base.create("py:engram_prefix_leak:nothing", RunConfig())
    with pytest.raises(ConfigError, match="factory failed.*unknown settings"):
        base.create("py:engram_prefix_leak:make_system",
                    RunConfig(retriever="py:engram_prefix_leak:make_system",
                              system_settings={"prefx": 1}))
    with pytest.raises(ConfigError, match="--system-url goes with --retriever http"):
        base.create("py:engram_prefix_leak:make_system",
                    RunConfig(retriever="py:engram_prefix_leak:make_system",
                              system_url="http://127.0.0.1:1"))


def test_the_bm25s_example_ranks_by_text(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("bm25s")
    H.importable(monkeypatch, H.BM25S_SRC)
    r = base.create("py:engram_bm25s:make_system", RunConfig(retriever="py:engram_bm25s:"
                                                             "make_system"))
    qs = _questions()
    hits = 0
    for q in qs:
        ranking = _rank(r, q)
        hits += ranking.session_ids[0] in q.answer_session_ids
    assert hits >= len(qs) // 2  # text, not ids: the tiny fixture's questions match their answers
