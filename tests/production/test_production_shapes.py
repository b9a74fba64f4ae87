"""Issue 30: calibration per memory shape -- the short-memory fixtures (train_short,
validation_v4), the shape read from the data, and the per-shape calibration file (fitted
with scikit-learn out of fold, applied with numpy only)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = REPO / "fixtures" / "production"
FROZEN = PRODUCTION / "frozen"


# --------------------------------------------------------------------------- fixtures


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _content(name: str) -> tuple[set[str], set[str]]:
    """(memory texts, question texts) of a production fixture, whitespace and case folded."""
    doc = json.loads((PRODUCTION / f"{name}.json").read_text(encoding="utf-8"))
    mems = {_norm(m["text"]) for c in doc["cases"] for m in c["memories"]}
    qs = {_norm(q["query"]) for c in doc["cases"] for q in c["questions"]}
    return mems, qs


@pytest.mark.parametrize("new", ["train_short", "validation_v4"])
def test_new_fixtures_share_no_memory_or_question_with_any_other(new: str) -> None:
    """train_short and validation_v4 are disjoint, by content, from validation_v3, from each
    other and from every other production fixture."""
    mems, qs = _content(new)
    others = sorted(p.stem for p in PRODUCTION.glob("*.json") if p.stem != new)
    assert {"validation_v3", "train_short", "validation_v4"} - {new} <= set(others)
    for other in others:
        om, oq = _content(other)
        assert not mems & om, (new, other, sorted(mems & om)[:3])
        assert not qs & oq, (new, other, sorted(qs & oq)[:3])


@pytest.mark.parametrize(("name", "heldout", "cases", "questions"),
                         [("train_short", False, 12, 60), ("validation_v4", True, 8, 40)])
def test_new_fixtures_load_and_hold_the_v3_mix(name: str, heldout: bool, cases: int,
                                                questions: int) -> None:
    """Valid under the package's loader; every case has an absent-answer question (one of
    five: 20%); validation_v4 is held out by its own field, train_short is not."""
    from engram_eval.production_eval.fixture import load_fixture
    from engram_eval.provenance.heldout import fixture_heldout

    path = PRODUCTION / f"{name}.json"
    view, gold = load_fixture(path)
    qs = [q for c in view.cases for q in c.queries]
    assert view.heldout is heldout and len(view.cases) == cases and len(qs) == questions
    assert all(sum(gold(q.question_id) == () for q in c.queries) == 1 for c in view.cases)
    assert (fixture_heldout(path) is not None) is heldout


@pytest.mark.parametrize("name", ["train_short", "validation_v4"])
def test_new_fixtures_were_frozen_as_they_are(name: str) -> None:
    """The frozen-source record written before any fit holds the fixture's sha256."""
    from engram_eval.io import sha256_file
    from engram_eval.provenance.frozen import load_manifest

    m = load_manifest(FROZEN / f"{name}.before_calibration.frozen.json")
    assert m["input"] == {"kind": "fixture", "name": f"{name}.json",
                          "size": (PRODUCTION / f"{name}.json").stat().st_size,
                          "sha256": sha256_file(PRODUCTION / f"{name}.json")}


# --------------------------------------------------------------------------- the shape


def _session(sid: str, *roles: str):
    from engram_eval.data.records import Session, Turn

    return Session(sid, "2024/01/01 (Mon) 10:00",
                   tuple(Turn(r, f"{r} says {i}", i) for i, r in enumerate(roles)))


def test_corpus_shape_reads_chat_people_and_short_from_the_turns() -> None:
    from engram_eval.data.records import corpus_shape, has_chat_roles

    chat = [_session("a", "user", "assistant"), _session("b", "user")]
    people = [_session("c", "Maya", "Leo", "Maya")]
    short = [_session("d", "user"), _session("e", "user")]
    assert corpus_shape(chat) == "chat"  # one one-turn session does not make it short
    assert corpus_shape(people) == "people"
    assert corpus_shape(short) == "short"
    assert corpus_shape([_session("f", "assistant")]) == "chat"  # one turn, not the user's
    assert corpus_shape([_session("g", "Maya")]) == "people"
    assert corpus_shape([]) == "people"  # no chat roles, as has_chat_roles says
    # the fusion structure and the shape agree: people exactly when there are no chat roles
    for corpus in (chat, people, short, []):
        assert (corpus_shape(corpus) == "people") is (not has_chat_roles(corpus))


def test_corpus_shape_of_the_data_the_package_reads() -> None:
    """Each LongMemEval haystack is chat, each LoCoMo conversation people, and memories as
    production search hands them to the pipeline are short."""
    from engram_eval.data.datasets import load_questions
    from engram_eval.data.records import corpus_shape
    from engram_eval.production.search import memory_sessions
    from engram_eval.production.store import Memory

    _, lme = load_questions(REPO / "fixtures" / "longmemeval_tiny.json", "longmemeval")
    _, loc = load_questions(REPO / "fixtures" / "locomo_tiny.json", "locomo")
    assert {corpus_shape(q.sessions) for q in lme} == {"chat"}
    assert {corpus_shape(q.sessions) for q in loc} == {"people"}
    mems = [Memory("m1", "I adopted a lurcher.", "2025-01-01"),
            Memory("m2", "A long note.\nWith two lines.", "2025-01-02")]
    assert corpus_shape(memory_sessions(mems)) == "short"


# --------------------------------------------------------------------------- the fit


def _part(label: str, seed: int, shape: str, n: int = 40, k: int = 4, width: int = 11):
    """A synthetic part: n questions of k candidates (``width`` features), every 5th
    unanswerable, gold memories with a higher first feature; groups of 2 questions."""
    from engram_eval.production_eval.calibrate_real import PartData

    rng = np.random.default_rng(seed)
    records = []
    for q in range(n):
        unans = q % 5 == 0
        x = rng.normal(size=(k, width))
        x[:, -1] = 1.5  # a constant column: scikit-learn's scale 1 for it
        gold_at = None if unans else int(rng.integers(0, k))
        if gold_at is not None:
            x[gold_at, 0] += 2.0
        ids = [f"m{j}" for j in range(k)]
        records.append({"question_id": f"{label}-{q}", "group": f"{label}-{q // 2}",
                        "unanswerable": unans,
                        "gold": [] if gold_at is None else [ids[gold_at]], "candidates": ids,
                        "x": x, "y": np.asarray([1.0 if j == gold_at else 0.0
                                                 for j in range(k)])})
    return PartData(label, f"{label}.json", "0" * 64, "synthetic", records, None, shape)





@pytest.mark.parametrize("features", ["v3", "v4"])
@pytest.mark.parametrize("mapping", ["isotonic", "platt"])
def test_numpy_application_reproduces_scikit_learn(tmp_path: Path, mapping: str,
                                                   features: str) -> None:
    """The stored model of a shape, loaded and applied with numpy only, gives scikit-learn's
    predict_proba of the score model and the mapping's prediction to 1e-12 (each feature
    set: v3, and v4, the features the study kept as the pipeline traces them)."""
    from engram_eval.io import sha256_json
    from engram_eval.production.confidence import ShapeCalibration, load_calibration
    from engram_eval.production.features import feature_set
    from engram_eval.production_eval import calibrate_real as C

    width = len(feature_set(features).features)
    parts = [_part("a", 0, "short", width=width), _part("b", 1, "short", width=width)]
    m = C.fit_model(parts, features=features, folds=4, mapping=mapping,
                    target_precision=0.5, min_returned=5)
    entry = C.shape_model_doc(m, "short", parts, candidates=4)
    doc = {"kind": "engram-eval/production-calibration", "version": 4, "shapes":
           {"short": entry}, "embedding_model": {"sha256": "e" * 64}, "settings": {}}
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(doc), encoding="utf-8")
    cal = load_calibration(p)
    assert isinstance(cal, ShapeCalibration)
    model = cal.for_shape("short")
    assert model.feature_set == features and model.cutoff == entry["cutoff"]["value"]
    x, _, _, _ = C._pairs(parts, width)
    x = np.vstack([x, np.random.default_rng(7).normal(scale=3, size=(50, width))])
    z = model.scores(x)
    assert np.max(np.abs(1 / (1 + np.exp(-z)) - m.score_model.predict_proba(x)[:, 1])) < 1e-12
    zs = m.score_model.decision_function(x)
    want = (m.mapper.predict(zs) if mapping == "isotonic"
            else m.mapper.predict_proba(zs.reshape(-1, 1))[:, 1])
    assert np.max(np.abs(model.confidences(x) - want)) < 1e-12
    # the file names what it was fitted on, and its model hash is of the stored numbers
    assert [d["sha256"] for d in entry["data"]] == ["0" * 64] * 2
    assert all(len(d["pairs_sha256"]) == 64 for d in entry["data"])
    keys = ("feature_set", "features", "standardisation", "logistic", "mapping")
    assert entry["model_sha256"] == sha256_json({k: entry[k] for k in keys})


def test_fit_shapes_fits_each_shape_on_its_own_parts(tiny_engine, tmp_path: Path) -> None:
    from engram_eval.errors import ConfigError
    from engram_eval.production.confidence import load_calibration
    from engram_eval.production_eval import calibrate_real as C

    chat, short = _part("lme", 2, "chat"), _part("fix", 3, "short")
    doc = C.fit_shapes([chat, short], tiny_engine, folds=4, target_precision={"chat": 0.5,
                       "short": 0.6}, min_returned=5)
    assert doc["version"] == 4 and sorted(doc["shapes"]) == ["chat", "short"]
    assert [d["part"] for d in doc["shapes"]["short"]["data"]] == ["fix"]
    assert [d["part"] for d in doc["shapes"]["chat"]["data"]] == ["lme"]
    assert doc["shapes"]["short"]["cutoff"]["target"]["returned_top_gold_rate_at_least"] == 0.6
    # each shape alone gives the same model as a fit of that shape's parts only
    alone = C.fit_shapes([short], tiny_engine, folds=4, target_precision=0.6, min_returned=5)
    assert alone["shapes"]["short"] == doc["shapes"]["short"]
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(doc), encoding="utf-8")
    cal = load_calibration(p)
    with pytest.raises(ConfigError, match=r"cal\.json: no calibrated model for memory shape "
                       r"'people' \(this file holds \['chat', 'short'\]\)"):
        cal.for_shape("people")  # type: ignore[union-attr]
    bad = json.loads(p.read_text())
    bad["shapes"]["short"]["features"] = ["dense"]
    p.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"shapes\.short\.features"):
        load_calibration(p)
    unknown = _part("x", 4, "")  # no shape read from the data
    with pytest.raises(ConfigError, match="no memory shape"):
        C.fit_shapes([unknown], tiny_engine, folds=4)


# --------------------------------------------------------------------------- held out


@pytest.mark.parametrize("name", ["validation_v3", "validation_v4"])
def test_fitting_refuses_a_heldout_fixture(name: str, tmp_path: Path) -> None:
    """By its own field, and as a renamed copy that says it is not held out."""
    from engram_eval.errors import ProvenanceError
    from engram_eval.production_eval import calibrate_real as C

    src = PRODUCTION / f"{name}.json"
    with pytest.raises(ProvenanceError, match="the calibration is fitted on tuning parts only"):
        C.extract_fixture(None, "x", src)  # type: ignore[arg-type]  # refused before use
    doc = json.loads(src.read_text(encoding="utf-8"))
    doc.update(name="innocent", heldout=False)
    copy = tmp_path / "innocent.json"
    copy.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ProvenanceError, match=f"fixture {name}.json"):
        C.extract_fixture(None, "x", copy)  # type: ignore[arg-type]


@pytest.mark.parametrize("dataset", ["longmemeval_tiny.json", "locomo_tiny.json"])
def test_fitting_refuses_a_heldout_dataset_part(dataset: str, tmp_path: Path) -> None:
    from engram_eval.data.split import split_dataset
    from engram_eval.errors import ProvenanceError
    from engram_eval.production_eval import calibrate_real as C

    split_dataset(REPO / "fixtures" / dataset, holdout=0.5, salt="t", output_dir=tmp_path)
    held = next(p for p in tmp_path.glob("*.heldout.json*") if not p.name.endswith(".split.json"))
    with pytest.raises(ProvenanceError, match="held-out"):
        C.extract(None, "x", held)  # type: ignore[arg-type]  # refused before use


def test_the_command_refuses_validation_v4(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    from engram_eval.cli.production import main

    out = tmp_path / "cal.json"
    rc = main(["calibrate-sessions", "--per-shape", "--fixture",
               f"v4={PRODUCTION / 'validation_v4.json'}", "--output", str(out), "--no-cache",
               "--no-excerpt-retry"])
    err = capsys.readouterr().err
    assert rc == 2 and "validation_v4.json" in err and "tuning parts only" in err, err
    assert not out.exists()
    rc = main(["calibrate-sessions", "--fixture", f"t={PRODUCTION / 'train_short.json'}",
               "--output", str(out), "--no-cache"])
    assert rc == 2 and "go with --per-shape" in capsys.readouterr().err


# --------------------------------------------------------------------------- search


@pytest.fixture(scope="module")
def tiny_engine(tiny_embedding_model):
    from engram_eval.production.search import Engine
    from engram_eval.production.settings import ProductionSettings

    return Engine(ProductionSettings(embedding_model=tiny_embedding_model, excerpt_retry=False,
                                     candidates=4, rerank=False))


def test_search_takes_the_model_of_the_memories_shape(tiny_engine, tmp_path: Path) -> None:
    """End to end with the tiny model: the short shape fitted on train_short, the chat
    shape on the tiny LongMemEval file; a store's search applies the short model, the
    session-level gate on LongMemEval the chat model, and LoCoMo (people) is refused."""
    import dataclasses

    from engram_eval.data.datasets import load_questions
    from engram_eval.errors import ConfigError
    from engram_eval.production.search import Engine
    from engram_eval.production_eval import calibrate_real as C
    from engram_eval.production_eval.fixture import load_fixture
    from engram_eval.production_eval.sessions import search_all, session_questions

    short = C.extract_fixture(tiny_engine, "train_short", PRODUCTION / "train_short.json")
    chat = C.extract(tiny_engine, "lme", REPO / "fixtures" / "longmemeval_tiny.json")
    assert (short.shape, chat.shape) == ("short", "chat")
    assert len(short.records) == 60 and {r["group"] for r in short.records} == {
        f"s{i:02d}" for i in range(1, 13)}
    doc = C.fit_shapes([short, chat], tiny_engine, folds=3, target_precision=0.5,
                       min_returned=1)
    cal_path = tmp_path / "cal.json"
    cal_path.write_text(json.dumps(doc), encoding="utf-8")
    eng = Engine(dataclasses.replace(tiny_engine.settings, calibration=str(cal_path)))
    cal = eng.calibration()
    view, _ = load_fixture(PRODUCTION / "train_short.json")
    case = view.cases[0]
    pieces = eng.pieces(case.memories)
    vecs = np.asarray(eng.encoder().encode([t for _, t in pieces]), dtype=np.float32)
    for q, rec in zip(case.queries, short.records[:len(case.queries)], strict=True):
        resp = eng.search(q.query, now=q.now, memories=case.memories, pieces=pieces,
                          vectors=vecs, limit=10, min_confidence=1.0)
        assert resp.question["shape"] == "short"
        assert [c["id"] for c in resp.candidates] == rec["candidates"]
        want = cal.for_shape("short").confidences(rec["x"])  # type: ignore[union-attr]
        assert np.allclose([c["confidence"] for c in resp.candidates], want, atol=1e-12)
    _, qs = load_questions(REPO / "fixtures" / "longmemeval_tiny.json", "longmemeval")
    sq, rec = next(session_questions(eng, list(qs), "longmemeval")), chat.records[0]
    resp = search_all(eng, sq)
    assert resp.question["shape"] == "chat"
    want = cal.for_shape("chat").confidences(rec["x"])  # type: ignore[union-attr]
    assert np.allclose([c["confidence"] for c in resp.candidates], want, atol=1e-12)
    _, loc = load_questions(REPO / "fixtures" / "locomo_tiny.json", "locomo")
    with pytest.raises(ConfigError, match="no calibrated model for memory shape 'people'"):
        search_all(eng, next(session_questions(eng, list(loc), "locomo")))


# --------------------------------------------------------------------------- runs as parts


def _tiny_run(tmp: Path, data: Path) -> Path:
    from engram_eval.runs import runner
    from engram_eval.runs.config import RunConfig

    out = tmp / f"{data.stem}.jsonl"
    cfg = RunConfig(use_dense=False, use_dense_rocchio=False, rerank=False, progress=False,
                    cache_dir=str(tmp / "cache"))
    runner.run(cfg, data, out, echo=lambda m: None)
    return out


@pytest.mark.parametrize(("dataset", "shape"), [("longmemeval_tiny.json", "chat"),
                                                ("locomo_tiny.json", "people")])
def test_runs_give_the_features_their_traces_hold(tmp_path: Path, dataset: str,
                                                  shape: str) -> None:
    """A part read from a run: per question the first GATE_DEPTH traced results, rows of
    feature set v4 equal to the trace's ``gate_features`` (None read as 0), the shape read
    from the data; a run made before the trace held them (the key removed) gives the same
    rows, computed from its traces by the same functions."""
    from engram_eval.production.features import feature_set
    from engram_eval.production_eval import calibrate_real as C
    from engram_eval.retrieval.gate_features import GATE_DEPTH, GATE_FEATURES
    from engram_eval.runs.reader import read_run

    data = REPO / "fixtures" / dataset
    run = _tiny_run(tmp_path, data)
    part = C.extract_runs("p", [run], data)
    assert part.shape == shape and part.records
    assert feature_set("v4").features == GATE_FEATURES
    rows = {r["question_id"]: r for r in read_run(run).rows}
    for rec in part.records:
        traces = rows[rec["question_id"]]["trace"]["sessions"]
        k = min(GATE_DEPTH, len(traces))
        assert rec["candidates"] == rows[rec["question_id"]]["ranked_session_ids"][:k]
        want = [[0.0 if t["gate_features"][n] is None else t["gate_features"][n]
                 for n in GATE_FEATURES] for t in traces[:k]]
        assert rec["x"].tolist() == want
        assert rec["y"].sum() == (0 if rec["unanswerable"] else
                                  len(set(rec["candidates"]) & set(rec["gold"])))
    # the same run without the traced features: computed from its traces, the same rows
    lines = run.read_text(encoding="utf-8").splitlines()
    old = tmp_path / "old.jsonl"
    out = []
    for line in lines:
        row = json.loads(line)
        for t in (row.get("trace") or {}).get("sessions") or []:
            t.pop("gate_features", None)
        out.append(json.dumps(row))
    old.write_text("\n".join(out) + "\n", encoding="utf-8")
    # the sidecar as it was (the summary records the rows' sha256, so it stays behind)
    Path(str(old) + ".metadata.json").write_bytes(Path(str(run) + ".metadata.json").read_bytes())
    again = C.extract_runs("p", [old], data)
    assert [r["x"].tolist() for r in again.records] == [r["x"].tolist() for r in part.records]
    assert again.selection["runs"][0]["questions_with_features_computed_from_traces"] == len(
        again.records)
    assert part.selection["runs"][0]["questions_with_traced_features"] == len(part.records)


def test_runs_of_a_heldout_part_are_refused(tmp_path: Path) -> None:
    from engram_eval.data.split import split_dataset
    from engram_eval.errors import ProvenanceError
    from engram_eval.production_eval import calibrate_real as C

    split_dataset(REPO / "fixtures" / "longmemeval_tiny.json", holdout=0.5, salt="t",
                  output_dir=tmp_path)
    held = next(p for p in tmp_path.glob("*.heldout.json*") if not p.name.endswith(".split.json"))
    with pytest.raises(ProvenanceError, match="held-out"):
        C.extract_runs("x", [tmp_path / "never-read.jsonl"], held)


def test_the_selective_report_shows_unanswerable_questions_apart() -> None:
    """Every question, the answerable ones alone and the unanswerable ones alone (counts and
    rates as formulas), with the risk-coverage curve of every question."""
    from engram_eval.production_eval import calibrate_real as C

    top = [{"question_id": "a", "unanswerable": False, "confidence": 0.9, "correct": 1},
           {"question_id": "b", "unanswerable": False, "confidence": 0.7, "correct": 0},
           {"question_id": "c", "unanswerable": True, "confidence": 0.8, "correct": 0},
           {"question_id": "d", "unanswerable": True, "confidence": 0.2, "correct": 0}]
    rep = C.selective_report(top, 0.5, "longmemeval")
    assert rep["all"]["n"] == 4 and rep["answerable"]["n"] == 2
    assert rep["answerable"]["auroc"] == 1.0  # the right answer above the wrong one
    una = rep["unanswerable"]
    assert una["n"] == 2 and una["abstained_at_cutoff"] == 1
    assert una["mean_confidence"] == pytest.approx((0.8 + 0.2) / 2)
    assert "_abs" in una["what"]
    rc = rep["all"]["risk_coverage"]
    assert [p["coverage"] for p in rc] == [1 / 4, 2 / 4, 3 / 4, 4 / 4]
    assert [p["risk"] for p in rc] == pytest.approx([0 / 1, 1 / 2, 2 / 3, 3 / 4])
    assert rep["at_cutoff"]["returned"] == 3


def test_the_command_fits_v4_from_runs_with_its_selective_report(
        tiny_embedding_model: str, tmp_path: Path) -> None:
    """calibrate-sessions --per-shape --feature-set v4 --run ... --run-data ...: the chat
    model fitted on a run's traced features, the report's selective rows per part and a
    figure; --run without v4, or a --run label without its data, is refused."""
    from engram_eval.cli.production import main

    data = REPO / "fixtures" / "longmemeval_tiny.json"
    run = _tiny_run(tmp_path, data)
    cal, rep = tmp_path / "cal.json", tmp_path / "rep.json"
    base = ["calibrate-sessions", "--per-shape", "--run", f"lme={run}", "--no-cache",
            "--no-excerpt-retry", "--embedding-model", tiny_embedding_model]
    assert main([*base, "--feature-set", "v3", "--run-data", f"lme={data}",
                 "--output", str(cal)]) == 2
    assert main([*base, "--feature-set", "v4", "--output", str(cal)]) == 2
    assert not cal.exists()
    assert main([*base, "--feature-set", "v4", "--run-data", f"lme={data}", "--folds", "2",
                 "--min-returned", "1", "--mapping", "platt", "--output", str(cal),
                 "--report", str(rep)]) == 0
    doc = json.loads(cal.read_text())
    m = doc["shapes"]["chat"]
    assert sorted(doc["shapes"]) == ["chat"] and m["feature_set"] == "v4"
    sel = m["selective_out_of_fold"]["lme"]
    n_una = sum(1 for r in json.loads(cal.read_text())["shapes"]["chat"]["data"]
                for _ in range(r["unanswerable"]))
    assert sel["unanswerable"]["n"] == n_una == 2  # lme_t10_abs, lme_t11_abs
    assert sel["all"]["n"] == sel["answerable"]["n"] + n_una
    assert rep.is_file() and rep.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    # the curves are in the report only; the calibration file is the report's doc without them
    full = json.loads(rep.read_text())["shapes"]["chat"]["selective_out_of_fold"]["lme"]
    assert "risk_coverage" not in m["selective_out_of_fold"]["lme"]["all"]
    assert full["all"]["risk_coverage"][-1]["coverage"] == 1.0


def test_the_gate_cutoff_is_the_recorded_one_only_when_asked() -> None:
    """--cutoff calibrated applies the cut-off the applied model records (min_confidence
    where it records none, and with a rerank: no model); fixed, and every record made before
    the field existed, applies min_confidence."""
    import dataclasses

    from engram_eval.production.search import gate_cutoff
    from engram_eval.production.settings import ProductionSettings

    @dataclasses.dataclass
    class Model:
        cutoff: float | None

    s = ProductionSettings(min_confidence=0.6, cutoff="fixed")
    cal = dataclasses.replace(s, cutoff="calibrated")
    assert ProductionSettings().cutoff == "calibrated"  # the package default
    assert gate_cutoff(s, Model(0.83)) == 0.6  # type: ignore[arg-type]
    assert gate_cutoff(cal, Model(0.83)) == 0.83  # type: ignore[arg-type]
    assert gate_cutoff(cal, Model(None)) == gate_cutoff(cal, None) == 0.6  # type: ignore[arg-type]
    old = {k: v for k, v in cal.to_json().items() if k != "cutoff"}
    assert ProductionSettings.from_recorded(old).cutoff == "fixed"
    assert ProductionSettings.from_recorded(cal.to_json()).cutoff == "calibrated"
    # a record made before the rerank prior could be chosen ranked with the rank rule
    scored = dataclasses.replace(cal, rerank_prior="score").to_json()
    assert ProductionSettings.from_recorded(scored).rerank_prior == "score"
    before = {k: v for k, v in scored.items() if k != "rerank_prior"}
    assert ProductionSettings.from_recorded(before).rerank_prior == "rank"


def test_measure_reads_a_v4_calibration_over_runs_at_the_shapes_cutoff(
        tiny_embedding_model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """production measure DATA --run RUN: each question's top candidate by the chat model's
    confidence over the features the run traced, at the cut-off the model records (under
    --cutoff calibrated) or min_confidence (fixed); the run's sha256 is in the manifest; a
    v3 calibration or --max-questions with --run is refused."""
    from engram_eval.cli.production import main
    from engram_eval.io import sha256_file
    from engram_eval.production.confidence import load_calibration
    from engram_eval.production_eval import calibrate_real as C

    data = REPO / "fixtures" / "longmemeval_tiny.json"
    run = _tiny_run(tmp_path, data)
    cal = tmp_path / "cal.json"
    common = ["--no-cache", "--no-excerpt-retry", "--embedding-model", tiny_embedding_model]
    assert main(["calibrate-sessions", "--per-shape", "--feature-set", "v4", "--run",
                 f"lme={run}", "--run-data", f"lme={data}", "--folds", "2", "--min-returned",
                 "1", "--target-precision", "0.5", "--mapping", "platt", "--output", str(cal),
                 *common]) == 0
    model = load_calibration(cal).for_shape("chat")  # type: ignore[union-attr]
    assert model.cutoff is not None
    base = ["measure", str(data), "--run", str(run), "--source-root", str(REPO),
            "--dataset-label", "tiny", "--calibration", str(cal), "--resamples", "20", *common]
    out = {rule: tmp_path / f"{rule}.json" for rule in ("calibrated", "fixed")}
    for rule, path in out.items():
        assert main([*base, "--cutoff", rule, "--min-confidence", "0.4",
                     "--output", str(path)]) == 0
    docs = {rule: json.loads(p.read_text()) for rule, p in out.items()}
    assert docs["calibrated"]["cutoff"] == model.cutoff and docs["fixed"]["cutoff"] == 0.4
    part = C.extract_runs("p", [run], data)
    assert main([*base, "--candidates", "2", "--output", str(tmp_path / "two.json")]) == 0
    two = json.loads((tmp_path / "two.json").read_text())
    assert two["candidates_per_question"] == 2
    for t, rec in zip(two["questions"], part.records, strict=True):
        conf = model.confidences(rec["x"][:2])  # the pipeline's first (issue 45)
        assert (t["top"], t["confidence"]) == (rec["candidates"][0], pytest.approx(conf[0]))
    for doc in docs.values():
        assert doc["shape"] == "chat" and doc["result_order"] == "pipeline"
        assert doc["manifest"]["settings"]["measure"]["runs"] == {run.name: sha256_file(run)}
        by_conf = 0  # the most confident candidate's rightness: the order before issue 45
        for t, rec in zip(doc["questions"], part.records, strict=True):
            conf = model.confidences(rec["x"])
            assert (t["question_id"], t["top"]) == (rec["question_id"], rec["candidates"][0])
            assert t["confidence"] == pytest.approx(conf[0], abs=1e-12)
            assert t["correct"] == int(not rec["unanswerable"] and t["top"] in rec["gold"])
            best = rec["candidates"][int(np.argmax(conf))]
            by_conf += int(not rec["unanswerable"] and best in rec["gold"])
        assert doc["orders"]["confidence"]["summary"]["correct"] == by_conf
        returned = [t for t in doc["questions"] if t["confidence"] >= doc["cutoff"]]
        assert doc["at_cutoff"]["returned"] == len(returned)
    refused = tmp_path / "refused.json"
    capsys.readouterr()
    assert main([*base, "--max-questions", "2", "--output", str(refused)]) == 2
    assert "drop --max-questions" in capsys.readouterr().err
    v3 = json.loads((REPO / "engram_eval/production/data/calibration_v3_chat.json").read_text())
    v3["embedding_model"] = json.loads(cal.read_text())["embedding_model"]
    v3["settings"] = json.loads(cal.read_text())["settings"]
    (tmp_path / "v3.json").write_text(json.dumps(v3))
    assert main([*base, "--calibration", str(tmp_path / "v3.json"), "--output",
                 str(refused)]) == 2
    assert "--run needs a version-4 calibration" in capsys.readouterr().err
    assert not refused.exists()


# --------------------------------------------------------------------------- with the rerank


def test_per_shape_calibration_applies_with_the_rerank_and_scores_each_pair_once(
        tiny_embedding_model: str, tiny_cross_encoder: str, tmp_path: Path) -> None:
    """Production's defaults rerank (the benchmark runner's pipeline). calibrate-sessions
    --per-shape --feature-set v4 fits the short model through production search under them
    and records the full settings it fitted under; search under those settings then gives
    each candidate the confidence of that model (checked by hand against the formula the
    file states) over the features the pipeline traced after its rerank, and the
    cross-encoder scores each (query, memory) pair once."""
    from engram_eval.cli.production import main
    from engram_eval.production.features import gate_features
    from engram_eval.production.search import Engine, memory_signals
    from engram_eval.production.settings import ProductionSettings
    from engram_eval.production_eval.fixture import load_fixture
    from engram_eval.production_eval.runner import effective_settings

    assert ProductionSettings().rerank  # the package's default pipeline
    cal, rec = tmp_path / "cal.json", tmp_path / "settings.json"
    assert main(["calibrate-sessions", "--per-shape", "--feature-set", "v4", "--fixture",
                 f"short={PRODUCTION / 'train_short.json'}", "--folds", "3",
                 "--min-returned", "1", "--target-precision", "0.5", "--mapping", "platt",
                 "--candidates", "4", "--no-excerpt-retry", "--no-cache",
                 "--embedding-model", tiny_embedding_model,
                 "--reranker-model", tiny_cross_encoder, "--reranker-backend", "onnx",
                 "--output", str(cal), "--settings-output", str(rec)]) == 0
    settings = ProductionSettings.from_recorded(json.loads(rec.read_text()))
    want = ProductionSettings(embedding_model=tiny_embedding_model, candidates=4,
                              reranker_model=tiny_cross_encoder, reranker_backend="onnx",
                              excerpt_retry=False, calibration=str(cal))
    assert json.loads(rec.read_text()) == want.to_json() and settings == want
    doc = json.loads(cal.read_text())
    assert doc["settings"]["rerank"] and sorted(doc["shapes"]) == ["short"]

    engine = Engine(settings)
    assert engine.applies_calibration() and engine.model_for("short") is not None
    assert "over the cross-encoder's reranking" in engine.describe()["confidence"]
    recorded = effective_settings(engine, REPO)  # a run names and hashes the calibration
    assert recorded["calibration"] == str(cal) and len(recorded["calibration_sha256"]) == 64
    cross = engine.cross()
    seen: list[tuple[str, str]] = []
    inner = cross.raw_scores

    def counting(pairs):  # type: ignore[no-untyped-def]
        seen.extend(pairs)
        return inner(pairs)

    view, _ = load_fixture(PRODUCTION / "train_short.json")
    case = view.cases[0]
    pieces = engine.pieces(case.memories)
    vecs = np.asarray(engine.encoder().encode([t for _, t in pieces]), dtype=np.float32)
    m = doc["shapes"]["short"]
    mean, scale = np.asarray(m["standardisation"]["mean"]), np.asarray(m["standardisation"]["scale"])
    coef = np.asarray(m["logistic"]["coefficients"])
    a, b = m["mapping"]["platt"]["a"], m["mapping"]["platt"]["b"]
    for q in case.queries:
        seen.clear()
        cross.raw_scores = counting
        resp = engine.search(q.query, now=q.now, memories=case.memories, pieces=pieces,
                             vectors=vecs, limit=10, min_confidence=1.0)
        cross.raw_scores = inner
        assert resp.question["shape"] == "short" and len(resp.candidates) == 4
        assert seen and len(seen) == len(set(seen))  # every pair given to the model once
        texts = {mem.id: mem.text for mem in case.memories}
        for c in resp.candidates:  # each candidate was reranked, its text scored once
            assert sum(d == texts[c["id"]] for _, d in seen) == 1
        sig = memory_signals(engine, q.query, q.now, case.memories, pieces, vecs)
        cands = sig["order"][:4]
        assert [case.memories[i].id for i in cands] == [c["id"] for c in resp.candidates]
        x = gate_features(q.query, sig, cands, None)
        z = m["logistic"]["intercept"] + ((x - mean) / scale) @ coef
        by_hand = 1.0 / (1.0 + np.exp(-(a * z + b)))
        assert np.allclose([c["confidence"] for c in resp.candidates], by_hand, atol=1e-12)


def test_the_v4_default_refuses_other_settings_naming_the_file_that_reproduces_it(
        tiny_embedding_model: str) -> None:
    """Calibration v4 was fitted under settings the package defaults have left (no rerank,
    the first stage before PROVENANCE.md section 14): under the defaults it is refused with
    the settings file that reproduces it, and under that file it is accepted."""
    import dataclasses

    from engram_eval.errors import ConfigError
    from engram_eval.production.confidence import check_calibration, load_calibration
    from engram_eval.production.settings import RECORDED_SETTINGS_V4, ProductionSettings, data_file

    cal = load_calibration(data_file("engram_eval/production/data/calibration_v4.json"))
    recorded = ProductionSettings.from_recorded(
        json.loads(data_file(RECORDED_SETTINGS_V4).read_text()))
    assert recorded.calibration == "engram_eval/production/data/calibration_v4.json"
    check_calibration(cal, cal.embedding_sha256, recorded.retrieval_part())
    with pytest.raises(ConfigError, match=f"pass --settings {RECORDED_SETTINGS_V4} to "
                       "reproduce it"):
        check_calibration(cal, cal.embedding_sha256, ProductionSettings().retrieval_part())
    off = dataclasses.replace(ProductionSettings(), rerank=False)
    with pytest.raises(ConfigError, match="fitted under other settings"):
        check_calibration(cal, cal.embedding_sha256, off.retrieval_part())


def test_a_record_from_before_the_calibrated_rerank_gate_reads_as_the_sigmoid() -> None:
    """Production runs published with the rerank on before production applied a per-shape
    calibration with it (results/shipped_reranker/production_*.json) record no
    ``rerank_confidence``: they read as 'sigmoid', the gate they ran, so they rebuild as
    made; under 'sigmoid' the engine applies no calibration, reads none, and names the
    sigmoid; the field does not act without a rerank (calibration v4 is accepted either
    way)."""
    import dataclasses

    from published_files import published_bytes

    from engram_eval.production.confidence import check_calibration, load_calibration
    from engram_eval.production.search import Engine
    from engram_eval.production.settings import RECORDED_SETTINGS_V4, ProductionSettings, data_file

    published = json.loads(published_bytes("results/shipped_reranker/production_dev.json")
                           )["settings"]
    assert published["rerank"] and "rerank_confidence" not in published
    made = ProductionSettings.from_recorded(published)
    assert made.rerank and made.rerank_confidence == "sigmoid"
    assert ProductionSettings().rerank_confidence == "calibration"
    # the gate's reading, not the weights: the shipped reranker stands in for the archived v1
    # those runs named (issue 46's retention rule)
    engine = Engine(dataclasses.replace(made, calibration="/nonexistent/calibration.json",
                                        reranker_model=ProductionSettings().reranker_model))
    assert not engine.applies_calibration() and engine.model_for("short") is None
    assert engine.describe()["confidence"] == "sigmoid(cross-encoder logit)"

    cal = load_calibration(data_file("engram_eval/production/data/calibration_v4.json"))
    v4 = ProductionSettings.from_recorded(json.loads(data_file(RECORDED_SETTINGS_V4).read_text()))
    for source in ("sigmoid", "calibration"):  # no rerank: the field cannot act
        check_calibration(cal, cal.embedding_sha256,
                          dataclasses.replace(v4, rerank_confidence=source).retrieval_part())


def test_the_default_gate_is_fitted_under_the_package_defaults() -> None:
    """Production search runs the package's default pipeline (issue 26 item 3): the packaged
    default calibration (v6) records exactly the package's production defaults, rerank on,
    and is accepted under them with the default embedding model's files; its settings file
    is the record it was fitted under; every shape has a model and a cut-off."""
    from engram_eval.production.confidence import (
        ShapeCalibration,
        check_calibration,
        load_calibration,
    )
    from engram_eval.production.settings import DEFAULT_CALIBRATION, ProductionSettings, data_file

    assert DEFAULT_CALIBRATION.endswith("calibration_v7.json")
    cal = load_calibration(data_file(DEFAULT_CALIBRATION))
    assert isinstance(cal, ShapeCalibration)
    defaults = ProductionSettings()
    assert defaults.rerank and defaults.rerank_confidence == "calibration"
    from engram_eval.production.search import Engine

    engine = Engine(defaults)  # the real default model files, checked as a search checks them
    assert engine.applies_calibration() and engine.calibration().path == cal.path
    check_calibration(cal, engine.embedding_ref.sha256, defaults.retrieval_part())
    recorded = json.loads(data_file("engram_eval/production/data/settings_v7.json").read_text())
    assert ProductionSettings.from_recorded(recorded) == defaults.replace(
        calibration=DEFAULT_CALIBRATION)  # every field, the gate's included
    for shape in cal.models:  # fitted with the pipeline's first as the top result
        assert "pipeline's first" in (cal.for_shape(shape).record or {})["fit"]["top_result"]
    assert defaults.reranker_model == "engram-ce-minilm-v4" and defaults.rerank_prior == "score"
    for shape in ("chat", "people", "short"):
        assert 0.0 < float(cal.for_shape(shape).cutoff) < 1.0


def test_the_former_default_gate_runs_under_its_recorded_settings() -> None:
    """Calibration v5 (the default before v6) was fitted under engram-ce-minilm-v3 with the
    rank prior: its settings file reproduces that (a record made before ``rerank_prior``
    reads 'rank'), it is accepted there and refused under today's defaults, naming the file."""
    from engram_eval.errors import ConfigError
    from engram_eval.production.confidence import check_calibration, load_calibration
    from engram_eval.production.search import Engine
    from engram_eval.production.settings import (
        RECORDED_SETTINGS_V5,
        ProductionSettings,
        data_file,
    )

    v5 = ProductionSettings.from_recorded(json.loads(data_file(RECORDED_SETTINGS_V5).read_text()))
    assert (v5.reranker_model, v5.rerank_prior, v5.fusion_alpha) == ("engram-ce-minilm-v3",
                                                                     "rank", 0.8)
    cal = load_calibration(data_file("engram_eval/production/data/calibration_v5.json"))
    emb = Engine(v5).embedding_ref.sha256
    check_calibration(cal, emb, v5.retrieval_part())
    with pytest.raises(ConfigError, match="settings_v5.json"):
        check_calibration(cal, emb, ProductionSettings().retrieval_part())
