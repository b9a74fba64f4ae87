"""Issue 45: the gate decides whether to answer, the pipeline decides the order.

Production search returns its accepted candidates in the pipeline's order (the first
candidate's confidence decides answer or abstain; a later candidate under the cut-off is
dropped); a record made before the field (``result_order``) reads back as 'confidence', the
order it ran. ``production measure`` reports both orders; under the pipeline's the accepted
top-1 equals the pipeline's recall_any@1 on the same questions.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "fixtures" / "longmemeval_tiny.json"


def test_accepted_keeps_the_pipelines_order_and_abstains_on_the_first() -> None:
    from engram_eval.production.search import accepted

    cands = [7, 3, 5, 1]  # the pipeline's order
    conf = {7: 0.8, 3: 0.4, 5: 0.95, 1: 0.7}
    assert accepted(cands, conf, 0.6) == [7, 5, 1]  # 3 dropped, the order kept
    assert accepted(cands, conf, 0.6, "confidence") == [5, 7, 1]  # most confident first
    assert accepted(cands, conf, 0.85) == []  # the first is under the cut-off: abstain
    assert accepted(cands, conf, 0.85, "confidence") == [5]
    assert accepted(cands, {**conf, 5: 0.8}, 0.6, "confidence") == [7, 5, 1]  # ties: pipeline
    assert accepted([], {}, 0.0) == []
    with pytest.raises(ValueError, match="result order"):
        accepted(cands, conf, 0.6, "best")


def test_a_record_without_the_field_reads_back_as_the_order_it_ran() -> None:
    from engram_eval.production.settings import ProductionSettings, data_file

    assert ProductionSettings().result_order == "pipeline"
    for name in ("settings_v6.json", "settings_v1.json"):  # v6's fit, the published runs
        rec = json.loads(data_file(f"engram_eval/production/data/{name}").read_text())
        assert "result_order" not in rec
        assert ProductionSettings.from_recorded(rec).result_order == "confidence"
    from published_files import published_bytes

    published = json.loads(published_bytes("results/confidence_v6/holdout.json"))
    assert "result_order" not in published["settings"]
    s = ProductionSettings.from_recorded(
        {k: v for k, v in published["settings"].items() if k != "calibration_sha256"})
    assert s.result_order == "confidence"
    # the order cuts what is returned, not the confidences: a calibration applies under both
    assert "result_order" not in ProductionSettings().retrieval_part()
    with pytest.raises(Exception, match="result_order"):
        ProductionSettings(result_order="best")


def _run(tmp: Path) -> Path:
    from engram_eval.runs import runner
    from engram_eval.runs.config import RunConfig

    out = tmp / "run.jsonl"
    cfg = RunConfig(use_dense=False, use_dense_rocchio=False, rerank=False, progress=False,
                    cache_dir=str(tmp / "cache"))
    runner.run(cfg, DATA, out, echo=lambda m: None)
    return out


def test_measure_reports_both_orders_and_accepted_top1_is_the_runs_recall_at_1(
        tiny_embedding_model: str, tmp_path: Path) -> None:
    """production measure DATA --run RUN keeps the settings' order and reports both; under
    the pipeline's order the accepted top result of every question is the run's first
    result, so at a cut-off that accepts everything top-1 equals the run's own recall_any@1
    (the scorer's figure in its summary), and at the calibrated cut-off it equals
    recall_any@1 over the questions accepted."""
    from engram_eval.cli.production import main
    from engram_eval.runs.reader import read_run

    run = _run(tmp_path)
    cal = tmp_path / "cal.json"
    common = ["--no-cache", "--no-excerpt-retry", "--embedding-model", tiny_embedding_model]
    assert main(["calibrate-sessions", "--per-shape", "--feature-set", "v4", "--run",
                 f"lme={run}", "--run-data", f"lme={DATA}", "--folds", "2", "--min-returned",
                 "1", "--target-precision", "0.5", "--mapping", "platt", "--output", str(cal),
                 *common]) == 0
    base = ["measure", str(DATA), "--run", str(run), "--source-root", str(REPO),
            "--dataset-label", "tiny", "--calibration", str(cal), "--resamples", "20", *common]
    docs = {}
    for name, extra in {"all": ["--cutoff", "fixed", "--min-confidence", "0"],
                        "cal": [],
                        "legacy": ["--result-order", "confidence"]}.items():
        out = tmp_path / f"measure_{name}.json"
        assert main([*base, *extra, "--output", str(out)]) == 0
        docs[name] = json.loads(out.read_text())
    rows = {r["question_id"]: r for r in read_run(run).rows}
    summary = json.loads(Path(str(run) + ".summary.json").read_text())
    r1 = summary["protocols"]["answerable"]["metrics"]["recall_any@1"]  # the scorer's
    every = docs["all"]
    assert every["result_order"] == "pipeline" and set(every["orders"]) == {
        "pipeline", "confidence"}
    for t in every["questions"]:
        assert t["top"] == rows[t["question_id"]]["ranked_session_ids"][0]
    cmp_all = every["order_comparison"]
    ans = cmp_all["answerable_with_candidates"]
    assert ans == sum(1 for t in every["questions"] if not t["unanswerable"])
    assert cmp_all["pipeline"]["accepted"] == ans
    assert cmp_all["pipeline"]["accepted_top_right"] / ans == pytest.approx(
        cmp_all["pipeline_recall_any_at_1"])
    assert summary["protocols"]["answerable"]["n"] == ans
    assert cmp_all["pipeline_recall_any_at_1"] == pytest.approx(r1)
    cal_doc = docs["cal"]
    c = cal_doc["order_comparison"]["pipeline"]
    assert c["accepted"] == sum(1 for t in cal_doc["questions"] if not t["unanswerable"]
                                and t["confidence"] >= cal_doc["cutoff"])
    if c["accepted"]:
        assert c["accepted_top_right"] / c["accepted"] == pytest.approx(
            c["pipeline_recall_any_at_1_on_accepted"])
    # the legacy order keeps the most confident; both orders' figures are the same numbers
    legacy = docs["legacy"]
    assert legacy["result_order"] == "confidence"
    assert legacy["orders"] == cal_doc["orders"]
    for t, p in zip(legacy["questions"], cal_doc["questions"], strict=True):
        assert t["confidence"] >= p["confidence"]
    assert legacy["manifest"]["settings"]["result_order"] == "confidence"


@pytest.fixture(scope="module")
def fitted(tiny_embedding_model: str, tmp_path_factory: pytest.TempPathFactory):
    """A tiny engine and a per-shape calibration fitted on train_short with it."""
    import dataclasses

    from engram_eval.production.search import Engine
    from engram_eval.production.settings import ProductionSettings
    from engram_eval.production_eval import calibrate_real as C

    eng = Engine(ProductionSettings(embedding_model=tiny_embedding_model, excerpt_retry=False,
                                    candidates=4, rerank=False))
    short = C.extract_fixture(eng, "s", REPO / "fixtures" / "production" / "train_short.json")
    doc = C.fit_shapes([short], eng, folds=3, target_precision=0.5, min_returned=1)
    assert doc["shapes"]["short"]["fit"]["top_result"].startswith("the pipeline's first")
    path = tmp_path_factory.mktemp("order") / "cal.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return Engine(dataclasses.replace(eng.settings, calibration=str(path)))


@pytest.mark.parametrize("order", ["pipeline", "confidence"])
def test_a_store_returns_the_pipelines_first_or_nothing(fitted, tmp_path: Path,
                                                        order: str) -> None:
    """Through a store, on every train_short question and a range of cut-offs: under the
    pipeline's order the results are the candidates at or above the cut-off in the
    pipeline's order, and nothing when the first is under it; under 'confidence' the most
    confident first (what production returned before)."""
    import dataclasses

    from engram_eval.production.search import Engine
    from engram_eval.production.store import MemoryStore
    from engram_eval.production_eval.fixture import load_fixture

    eng = Engine(dataclasses.replace(fitted.settings, result_order=order))
    view, _ = load_fixture(REPO / "fixtures" / "production" / "train_short.json")
    seen_drop = seen_abstain = 0
    for case in view.cases[:4]:
        path = tmp_path / f"{case.case_id}.sqlite"
        store = MemoryStore.create(path, eng)
        store.add(case.memories)
        store.close()
        with MemoryStore.open(path, eng) as s:
            for q in case.queries:
                for cut in (0.0, 0.3, 0.5, 0.7):
                    resp = s.search(q.query, now=q.now, min_confidence=cut, limit=10)
                    conf = [c["confidence"] for c in resp.candidates]
                    ids = [c["id"] for c in resp.candidates]
                    assert resp.question["result_order"] == order
                    passing = [i for i, c in zip(ids, conf, strict=True) if c >= cut]
                    if order == "pipeline":
                        want = passing if conf and conf[0] >= cut else []
                        seen_abstain += bool(passing) and not want
                        seen_drop += bool(want) and len(want) < len(ids)
                    else:
                        by = dict(zip(ids, conf, strict=True))
                        want = sorted(passing, key=lambda i: (-by[i], ids.index(i)))
                    assert resp.ids == want
                    assert [c["id"] for c in resp.candidates if c["accepted"]] == sorted(
                        want, key=ids.index)
    if order == "pipeline":  # the fixture exercises both rules
        assert seen_drop and seen_abstain


def _synthetic(label: str, seed: int, n: int = 60, k: int = 4):
    """n questions of k candidates (feature set v4's width), every 5th unanswerable, gold at
    the pipeline's first for 2 in 3 answerable questions, gold rows with a higher first
    feature; groups of 2 questions."""
    from engram_eval.production.features import feature_set
    from engram_eval.production_eval.calibrate_real import PartData

    width = len(feature_set("v4").features)
    rng = np.random.default_rng(seed)
    records = []
    for q in range(n):
        unans = q % 5 == 0
        x = rng.normal(size=(k, width))
        gold_at = None if unans else (0 if q % 3 else int(rng.integers(1, k)))
        if gold_at is not None:
            x[gold_at, 0] += 1.5
        ids = [f"m{j}" for j in range(k)]
        records.append({"question_id": f"{label}-{q}", "group": f"{label}-{q // 2}",
                        "unanswerable": unans,
                        "gold": [] if gold_at is None else [ids[gold_at]], "candidates": ids,
                        "x": x, "y": np.asarray([1.0 if j == gold_at else 0.0
                                                 for j in range(k)])})
    return PartData(label, f"{label}.json", "0" * 64, "synthetic", records, None, "chat")


def test_nested_cv_scores_each_fold_by_the_fit_on_the_others() -> None:
    """Each outer fold's questions carry the confidences and the cut-off of fit_model on the
    other folds (recomputed here for one fold), the top result is the pipeline's first, no
    group is split across folds, and the figures at the cut-offs are the counts."""
    import dataclasses

    from engram_eval.production_eval import calibrate_real as C

    parts = [_synthetic("a", 1), _synthetic("b", 2, n=40)]
    kw = {"features": "v4", "folds": 4, "C": 1.0, "mapping": "platt", "calibrate_on": "top",
          "target_precision": 0.6, "min_returned": 3}
    doc = C.nested_cv(parts, order="pipeline", resamples=50, **kw)
    qs = doc["questions"]
    assert len(qs) == 100 and {q["fold"] for q in qs} == {0, 1, 2, 3}
    group = {r["question_id"]: f"{p.label}/{r['group']}" for p in parts for r in p.records}
    folds_of: dict[str, set[int]] = {}
    for q in qs:
        folds_of.setdefault(group[q["question_id"]], set()).add(q["fold"])
    assert all(len(f) == 1 for f in folds_of.values())
    rec = {r["question_id"]: r for p in parts for r in p.records}
    assert all(q["top"] == rec[q["question_id"]]["candidates"][0] for q in qs)
    test0 = {q["question_id"] for q in qs if q["fold"] == 0}
    train = [dataclasses.replace(p, records=[r for r in p.records
                                             if r["question_id"] not in test0]) for p in parts]
    m = C.fit_model(train, order="pipeline", **kw)
    for q in qs:
        if q["fold"] == 0:
            want = C.apply_fit(m, rec[q["question_id"]]["x"])[0]
            assert q["confidence"] == pytest.approx(want, abs=1e-12)
            assert q["cutoff"] == m.cutoff["value"]
    a = doc["all"]
    answered = [q for q in qs if q["confidence"] >= q["cutoff"]]
    assert a["answered"] == len(answered)
    assert a["answered_right"] == sum(q["correct"] for q in answered)
    assert a["unanswerable_abstained"] == sum(1 for q in qs if q["unanswerable"]
                                              and q["confidence"] < q["cutoff"])
    assert doc["parts"]["b"]["n"] == 40 and a["intervals"]["auroc"]["lo"] <= a["auroc"]
    # the order before issue 45 keeps the most confident candidate
    old = C.nested_cv(parts, order="confidence", resamples=10, **kw)
    assert any(q["top"] != rec[q["question_id"]]["candidates"][0] for q in old["questions"])


def test_people_chats_are_not_gated_by_default() -> None:
    """people_gate off (the default): memories of the people shape get cut-off 0, whatever
    the model records; on (and in every record made before the field) the model's."""
    from types import SimpleNamespace

    from engram_eval.production.search import gate_cutoff
    from engram_eval.production.settings import ProductionSettings

    model = SimpleNamespace(cutoff=0.72)
    s = ProductionSettings()
    assert not s.people_gate and "people_gate" not in s.retrieval_part()
    assert gate_cutoff(s, model, "people") == 0.0  # type: ignore[arg-type]
    assert gate_cutoff(s, model, "chat") == 0.72  # type: ignore[arg-type]
    assert gate_cutoff(s.replace(people_gate=True), model, "people") == 0.72  # type: ignore[arg-type]
    rec = {k: v for k, v in s.to_json().items() if k != "people_gate"}
    assert ProductionSettings.from_recorded(rec).people_gate is True


def test_calibrate_sessions_reports_the_nested_cross_validation(tiny_embedding_model: str,
                                                               tmp_path: Path) -> None:
    """calibrate-sessions --nested-cv reports each shape's nested cross-validation beside the
    fit (which it leaves as it is); without --report it is refused."""
    from engram_eval.cli.production import main
    from engram_eval.production.confidence import load_calibration

    run = _run(tmp_path)
    common = ["calibrate-sessions", "--per-shape", "--feature-set", "v4", "--run",
              f"lme={run}", "--run-data", f"lme={DATA}", "--folds", "2", "--min-returned",
              "1", "--target-precision", "0.5", "--mapping", "platt", "--no-cache",
              "--no-excerpt-retry", "--embedding-model", tiny_embedding_model]
    assert main([*common, "--nested-cv", "--output", str(tmp_path / "a.json"),
                 "--report", str(tmp_path / "a.report.json")]) == 0
    rep = json.loads((tmp_path / "a.report.json").read_text())
    n = rep["nested_cv"]["chat"]
    assert n["order"] == "pipeline" and n["all"]["n"] == len(n["questions"])
    assert n["outer_folds"] == 2 and len(n["folds"]) == 2
    assert load_calibration(tmp_path / "a.json").for_shape("chat").cutoff == rep[
        "shapes"]["chat"]["cutoff"]["value"]
    assert main([*common, "--output", str(tmp_path / "b.json")]) == 0
    assert (tmp_path / "b.json").read_text() == (tmp_path / "a.json").read_text()
    assert main([*common, "--shape-C", "chat=0.1", "--output", str(tmp_path / "e.json")]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["shapes"]["chat"]["fit"]["C"] == 0.1
    assert rep["shapes"]["chat"]["fit"]["C"] == 1.0
    assert main([*common, "--nested-cv", "--output", str(tmp_path / "c.json")]) == 2
    assert not (tmp_path / "c.json").exists()


def test_compare_nested_pairs_the_candidates_and_takes_the_highest_auroc(tmp_path: Path
                                                                         ) -> None:
    import subprocess
    import sys

    from engram_eval.production_eval import calibrate_real as C
    from engram_eval.scoring import selective as S

    parts = [_synthetic("a", 3)]
    kw = {"features": "v4", "folds": 3, "mapping": "platt", "calibrate_on": "top",
          "target_precision": 0.6, "min_returned": 3, "resamples": 20}
    docs = {"c1": C.nested_cv(parts, C=1.0, **kw), "c001": C.nested_cv(parts, C=0.001, **kw)}
    got = C.compare_nested(docs, resamples=50)
    auc = {n: S.auroc([q["confidence"] for q in d["questions"]],
                      [q["correct"] for q in d["questions"]]) for n, d in docs.items()}
    assert {n: r["auroc"] for n, r in got["candidates"].items()} == auc
    assert got["chosen"] == max(auc, key=lambda n: (auc[n], n == "c1"))
    row = got["candidates"]["c001"]
    assert row["auroc_minus_baseline"] == pytest.approx(auc["c001"] - auc["c1"])
    assert row["interval"]["resamples"] == 50 and "interval" not in got["candidates"]["c1"]
    other = C.nested_cv([_synthetic("a", 3, n=40)], C=1.0, **kw)
    with pytest.raises(Exception, match="other questions"):
        C.compare_nested({"c1": docs["c1"], "x": other})
    # the script over two reports
    for n, d in docs.items():
        (tmp_path / f"{n}.json").write_text(json.dumps({"nested_cv": {"chat": d}}))
    out = tmp_path / "choice.json"
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "choose_gate.py"),
                        "--candidate", f"c1={tmp_path / 'c1.json'}",
                        "--candidate", f"c001={tmp_path / 'c001.json'}",
                        "--resamples", "50", "--output", str(out)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["shapes"]["chat"] == json.loads(json.dumps(got))
