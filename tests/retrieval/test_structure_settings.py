"""Settings keyed by chat structure (issue 17): a haystack without an assistant role takes the
``people_overrides``, traced; ``tune`` over several parts chooses per structure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from engram_eval.cli import main as cli
from engram_eval.errors import ConfigError
from engram_eval.provenance.sidecar import sidecar_path
from engram_eval.retrieval import fusion as F
from engram_eval.retrieval.settings import PEOPLE_DEFAULTS, RetrievalSettings

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = {"weight_bm25_user": 1.0, "weight_bm25_turn": 0.6}


def _run(data: str, tmp: Path, name: str, config: Path | None = None) -> list[dict]:
    out = tmp / f"{name}.jsonl"
    args = ["run", str(ROOT / "fixtures" / data), "--retriever", "bm25", "--output", str(out),
            "--no-rerank"]  # the first stage: tune re-fuses its traces
    if config is not None:
        args += ["--config", str(config)]
    assert cli.main(args) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_haystack_without_assistant_role_takes_the_people_settings(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"people_overrides": OVERRIDES}))
    people = _run("locomo_tiny.json", tmp_path, "people", cfg)
    chat = _run("longmemeval_tiny.json", tmp_path, "chat", cfg)
    for row in people:
        q = row["trace"]["question"]
        assert q["chat_roles"] is False
        assert q["structure"] == {"kind": "people", "overrides": OVERRIDES}
        assert q["fusion"]["weights"]["bm25_user"] == 1.0
        assert q["fusion"]["weights"]["bm25_turn"] == 0.6
    for row in chat:
        q = row["trace"]["question"]
        assert q["structure"] == {"kind": "chat", "overrides": {}}
        assert q["fusion"]["weights"]["bm25_user"] == RetrievalSettings().weight_bm25_user
    # the package default: the people settings of PROVENANCE.md section 18, traced
    default = _run("locomo_tiny.json", tmp_path, "default")
    q = default[0]["trace"]["question"]
    assert q["structure"] == {"kind": "people", "overrides": PEOPLE_DEFAULTS}
    people = RetrievalSettings().for_chat_roles(False)
    assert q["fusion"]["normalisation"] == people.normalisation
    assert q["fusion"]["weights"]["bm25_user"] == people.weight_bm25_user == PEOPLE_DEFAULTS[
        "weight_bm25_user"]
    # with the overrides switched off nothing changes and nothing is traced
    off = tmp_path / "off.yaml"
    off.write_text(yaml.safe_dump({"people_overrides": {}}))
    plain = _run("locomo_tiny.json", tmp_path, "plain", off)
    assert "structure" not in plain[0]["trace"]["question"]
    assert (plain[0]["trace"]["question"]["fusion"]["normalisation"]
            == RetrievalSettings().normalisation)


def test_people_overrides_are_validated_by_the_settings() -> None:
    with pytest.raises(ConfigError, match="not a fusion, temporal, per-structure lexical, turn, encoder or rerank"):
        RetrievalSettings(people_overrides={"use_dense": False})
    with pytest.raises(ConfigError, match="people_overrides.*weight_dense"):
        RetrievalSettings(people_overrides={"weight_dense": -1.0})
    s = RetrievalSettings(people_overrides={"temporal_boost": 2.0})
    assert s.for_chat_roles(True) is s
    assert s.for_chat_roles(False).temporal_boost == 2.0
    assert s.for_chat_roles(False).people_overrides == {}


OWN = {"method": "rrf", "normalisation": "minmax", "k": 60.0,
       "weights": {"dense": 1.0, "bm25_user": 0.0}}
# three sessions; dense ranks s0 > s1 > s2, user BM25 matches s1 only. With RRF k=60,
# bm25_user weight 0 puts s0 first (1/61 vs 1/62), weight 1 puts s1 first (1/62 + 1/61).
DENSE, BM25 = [0.9, 0.5, 0.1], [0.0, 5.0, 0.0]


def hand_rows(gold: str, chat_roles: bool, prefix: str) -> list[dict]:
    sig = {"dense": F.Signal.of(DENSE), "bm25_user": F.Signal.of(BM25, np.array(BM25) > 0)}
    fused = F.fuse(sig, method="rrf", weights=OWN["weights"], k=60.0)
    final = F.temporal_scores(fused, np.ones(3))
    order = F.order(final)
    rows = []
    for n in range(2):
        sessions = []
        for i in order:
            t = {"corpus_index": i, "temporal": 1.0, "in_window": None, "reranked": False}
            for name, s in sig.items():
                ranks = F.signal_ranks(s.scores, s.informative)
                t[name], t[name + "_rank"] = float(s.scores[i]), ranks[i]
            sessions.append(t)
        rows.append({"question_id": f"{prefix}{n}:q", "question_type": "t",
                     "ranked_session_ids": [f"s{i}" for i in order],
                     "scores": [float(final[i]) for i in order], "metrics": {},
                     "gold": {"answerable": [gold], "locomo": [gold]},
                     "trace": {"question": {"signals": ["dense", "bm25_user"], "fusion": OWN,
                                            "temporal": False, "temporal_boost": 1.25,
                                            "chat_roles": chat_roles},
                               "sessions": sessions}})
    return rows


def _select_rows(meta: dict, run: Path) -> None:
    """A borrowed sidecar selects the hand-made rows (else they are a partial run of its
    selection)."""
    ids = [json.loads(x)["question_id"] for x in run.read_text().splitlines()]
    meta["selection"].update(n=len(ids), ids=ids)


def test_tune_over_two_parts_chooses_per_structure(tmp_path: Path) -> None:
    cfg, rep = _two_parts(tmp_path, {}, {})  # one analyser for both structures
    chat, people = rep["structures"]["chat"], rep["structures"]["people"]
    assert chat["chosen"]["weights"] == {"dense": 1.0, "bm25_user": 0.0}
    assert people["chosen"]["weights"] == {"dense": 1.0, "bm25_user": 1.0}
    assert chat["parts"][0]["in_sample_score"] == 1.0
    assert people["parts"][0]["in_sample_score"] == 1.0
    assert people["parts"][0]["run_settings_score"] == 0.0  # its own settings miss s1
    assert rep["fields"]["weight_bm25_user"] == {"chat": 0.0, "people": 1.0}
    assert rep["fields"]["weight_dense"] == {"shared": 1.0}
    assert cfg["weight_bm25_user"] == 0.0 and cfg["use_bm25_user"] is True
    assert cfg["people_overrides"] == {"weight_bm25_user": 1.0}
    RetrievalSettings.of(cfg)


def _people(*sessions: list[tuple[str, str]]) -> tuple:
    from engram_eval.data.records import Session, Turn

    return tuple(Session(f"s{i}", "2023/05/0{i + 1} (Mon) 10:00",
                         tuple(Turn(r, c, k) for k, (r, c) in enumerate(turns)))
                 for i, turns in enumerate(sessions))


def test_speaker_prefix_indexes_names_in_people_chats_only() -> None:
    """``lexical_speaker: prefix`` puts 'NAME: ' before every turn of a people haystack, so a
    question naming a speaker matches that speaker's turns; a chat haystack is untouched."""
    from engram_eval.data.records import Session, Turn
    from engram_eval.retrieval import pipeline as P

    filler = [[("Carol", f"the weather was {w}"), ("Dan", f"we walked {w}")]
              for w in ("sunny", "grey", "cold")]
    people = _people([("Alice", "I adopted a cat"), ("Bob", "nice")],
                     [("Bob", "I adopted a cat"), ("Alice", "nice")], *filler)
    plain_terms = {"lexical_stemmer": "none", "lexical_stopwords": "none"}
    base = RetrievalSettings(use_dense=False, use_dense_rocchio=False, use_bm25_turn=True,
                             people_overrides={}, **plain_terms)
    on = RetrievalSettings(use_dense=False, use_dense_rocchio=False, use_bm25_turn=True,
                           people_overrides={}, lexical_speaker="prefix", **plain_terms)
    plain = P.build_corpus(people, base)
    named = P.build_corpus(people, on)
    assert plain.bm25_user is not None and named.bm25_user is not None
    assert plain.bm25_user.tokens[0] == ["i", "adopted", "a", "cat", "nice"]
    assert named.bm25_user.tokens[0] == ["alice", "i", "adopted", "a", "cat", "bob", "nice"]
    assert named.bm25_turn is not None and named.bm25_turn.tokens[2] == ["bob", "i", "adopted",
                                                                         "a", "cat"]
    q = "did alice adopt a cat"
    # without names both sessions hold the same words; with them the turn of Alice wins
    t_plain, t_named = plain.bm25_turn.scores(q), named.bm25_turn.scores(q)  # type: ignore[union-attr]
    assert t_plain[0] == t_plain[2]
    assert t_named[0] > t_named[2]
    chat = (Session("c0", "", (Turn("user", "I adopted a cat", 0),
                               Turn("assistant", "nice", 1))),)
    assert P.build_corpus(chat, on).bm25_user.tokens == [["i", "adopted", "a", "cat"]]  # type: ignore[union-attr]


def test_people_overrides_may_choose_the_analyser_for_people_chats() -> None:
    from engram_eval.data.records import Session, Turn
    from engram_eval.retrieval import pipeline as P

    s = RetrievalSettings(use_dense=False, use_dense_rocchio=False, lexical_stemmer="none",
                          lexical_stopwords="none", people_overrides={
                              "lexical_stemmer": "snowball-english", "lexical_speaker": "prefix"})
    people = _people([("Alice", "adopted cats")])
    chat = (Session("c0", "", (Turn("user", "adopted cats", 0),)),)
    assert P.build_corpus(people, s).bm25_user.tokens == [["alic", "adopt", "cat"]]  # type: ignore[union-attr]
    assert P.build_corpus(chat, s).bm25_user.tokens == [["adopted", "cats"]]  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="use_bm25_turn"):
        RetrievalSettings(people_overrides={"use_bm25_turn": False})


def test_tune_over_two_parts_carries_the_people_runs_own_analyser(tmp_path: Path) -> None:
    """Runs made with another analyser for people's chats: the people runs' lexical fields
    that differ from the chat runs' go into people_overrides (and the report says so)."""
    _run("longmemeval_tiny.json", tmp_path, "real")
    runs = []
    for name, gold, roles in (("chat", "s0", True), ("people", "s1", False)):
        run = tmp_path / f"{name}.hand.jsonl"
        run.write_text("".join(json.dumps(r) + "\n" for r in hand_rows(gold, roles, name)))
        meta = json.loads(sidecar_path(tmp_path / "real.jsonl").read_text())
        meta["config"].update(lexical_stemmer="none", lexical_stopwords="none",
                              lexical_speaker="none", people_overrides={})
        if name == "people":
            meta["config"].update(lexical_stemmer="snowball-english", lexical_speaker="prefix")
        _select_rows(meta, run)
        sidecar_path(run).write_text(json.dumps(meta))
        runs.append(str(run))
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({"fusion": ["rrf"], "rrf_k": [60],
                                    "weights": {"dense": [1], "bm25_user": [0, 1]}}))
    out = tmp_path / "tuned.yaml"
    assert cli.main(["tune", *runs, "--grid", str(grid), "--output", str(out),
                     "--objective", "recall_any@1", "--folds", "2",
                     "--protocol", "answerable"]) == 0
    cfg = yaml.safe_load(out.read_text())
    assert cfg["lexical_stemmer"] == "none"
    assert cfg["people_overrides"] == {"weight_bm25_user": 1.0,
                                       "lexical_stemmer": "snowball-english",
                                       "lexical_speaker": "prefix"}
    rep = json.loads(Path(str(out) + ".tuning.json").read_text())
    assert rep["fields"]["lexical_speaker"] == {"chat": "none", "people": "prefix",
                                                "from": "the runs"}
    assert RetrievalSettings.of(cfg).for_chat_roles(False).lexical_stemmer == "snowball-english"


def _two_parts(tmp_path: Path, chat_cfg: dict, people_cfg: dict,
               drop: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """The two hand-made parts tuned together, their sidecars' config updated with
    ``chat_cfg`` / ``people_cfg`` and without the fields ``drop`` that these do not set (a run
    made before those fields existed): (the written config, the report)."""
    _run("longmemeval_tiny.json", tmp_path, "real")
    runs = []
    for name, gold, roles, extra in (("chat", "s0", True, chat_cfg),
                                     ("people", "s1", False, people_cfg)):
        run = tmp_path / f"{name}.hand.jsonl"
        run.write_text("".join(json.dumps(r) + "\n" for r in hand_rows(gold, roles, name)))
        meta = json.loads(sidecar_path(tmp_path / "real.jsonl").read_text())
        meta["config"].update(people_overrides={}, **extra)
        for k in drop:
            if k not in extra:
                meta["config"].pop(k, None)
        _select_rows(meta, run)
        sidecar_path(run).write_text(json.dumps(meta))
        runs.append(str(run))
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({"fusion": ["rrf"], "rrf_k": [60],
                                    "weights": {"dense": [1], "bm25_user": [0, 1]}}))
    out = tmp_path / "tuned.yaml"
    assert cli.main(["tune", *runs, "--grid", str(grid), "--output", str(out),
                     "--objective", "recall_any@1", "--folds", "2",
                     "--protocol", "answerable"]) == 0
    return (yaml.safe_load(out.read_text()),
            json.loads(Path(str(out) + ".tuning.json").read_text()))


def test_tune_over_two_parts_leaves_out_turn_fields_both_runs_predate(tmp_path: Path) -> None:
    """Runs recorded before bm25_turn_top_m / dense_turn_top_m existed (section 14's) were
    made at the legacy value 1 on both structures: no people_overrides entry for them, so
    re-tuning them writes the config they wrote then."""
    turn = ("bm25_turn_top_m", "dense_turn_top_m")
    cfg, rep = _two_parts(tmp_path, {}, {}, drop=turn)
    assert cfg["people_overrides"] == {"weight_bm25_user": 1.0}
    assert not any(k in cfg for k in turn) and not any(k in rep["fields"] for k in turn)


def test_tune_over_two_parts_carries_the_people_runs_own_turn_top_m(tmp_path: Path) -> None:
    """A people run made with dense_turn_top_m 3 beside a chat run that predates the field
    (so was made at 1): the override says 3."""
    cfg, rep = _two_parts(tmp_path, {}, {"dense_turn_top_m": 3},
                          drop=("bm25_turn_top_m", "dense_turn_top_m"))
    assert cfg["people_overrides"] == {"weight_bm25_user": 1.0, "dense_turn_top_m": 3}
    assert rep["fields"]["dense_turn_top_m"] == {"chat": 1, "people": 3, "from": "the runs"}
    # the chat run predates the field, so the written config leaves it out, and loading it
    # takes today's default (3 since PROVENANCE.md section 18), not the run's 1
    assert "dense_turn_top_m" not in cfg
    s = RetrievalSettings.of(cfg)
    assert (s.dense_turn_top_m, s.for_chat_roles(False).dense_turn_top_m) == (
        RetrievalSettings().dense_turn_top_m, 3)


def test_tune_over_two_parts_reports_each_fold(tmp_path: Path) -> None:
    """Per part and fold: the question count, the pick's mean on the other folds and on the
    fold itself; the questions' weighted mean of the latter is the CV estimate."""
    _, rep = _two_parts(tmp_path, {}, {})
    for c in rep["structures"].values():
        part = c["parts"][0]
        rows = part["cv_per_fold"]
        assert [r["fold"] for r in rows] == [0, 1]
        assert sum(r["n"] for r in rows) == part["n_questions"] == 2
        pooled = sum(r["n"] * r["held_out_score"] for r in rows if r["n"]) / 2
        assert pooled == pytest.approx(part["cv_estimate"])
        # each of the two questions alone picks the weight that ranks its gold first
        assert all(r["train_score"] == 1.0 and r["held_out_score"] == 1.0 for r in rows)


def test_tune_over_two_parts_carries_the_people_runs_own_encoder(tmp_path: Path) -> None:
    """A people run made with another encoder than the chat run (issue 42's people's encoder):
    the written config encodes people's chats with it, the chats with the chat run's."""
    enc = {"embedding_model": "engram-minilm-conv-v1", "embedding_precision": "int8"}
    cfg, rep = _two_parts(tmp_path, {}, enc)
    assert cfg["people_overrides"] == {"weight_bm25_user": 1.0, **enc}
    assert rep["fields"]["embedding_model"] == {
        "chat": RetrievalSettings().embedding_model, "people": "engram-minilm-conv-v1",
        "from": "the runs"}
    s = RetrievalSettings.of(cfg)
    assert (s.embedding_model, s.for_chat_roles(False).embedding_model) == (
        RetrievalSettings().embedding_model, "engram-minilm-conv-v1")


def test_the_pipeline_line_names_each_structures_encoder() -> None:
    """The line a run prints names the encoder of chats and, where it differs, people's."""
    from engram_eval.retrieval.settings import pipeline_line

    line = pipeline_line(RetrievalSettings())
    people = RetrievalSettings().for_chat_roles(False)
    assert (f"dense: {RetrievalSettings().embedding_model} onnx fp32; people's chats: "
            f"{people.embedding_model} {people.embedding_backend} "
            f"{people.embedding_precision})") in line
    assert "temporal x1.25 (people's chats: off)" in line
    one = pipeline_line(RetrievalSettings(people_overrides={}))
    assert "people's chats" not in one
