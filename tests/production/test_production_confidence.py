"""Confidence on real sessions (issue 18): selective-retrieval metrics, the v3 features, the
calibration fit and its numpy-only application in search.

Expected values are written as formulas on hand-built inputs; the end-to-end checks use the
tiny locally built embedding model over fixtures/longmemeval_tiny.json and locomo_tiny.json.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from engram_eval.scoring import selective as S

REPO = Path(__file__).resolve().parents[2]
CONF = [0.9, 0.8, 0.3, 0.1]
CORR = [1, 0, 1, 0]


# --------------------------------------------------------------------------- metrics


def test_ece_15_bins_each_point_alone_and_shared_bin():
    # every confidence falls in its own 1/15-wide bin: ECE = mean |correct - confidence|
    assert S.ece(CONF, CORR) == pytest.approx((0.1 + 0.8 + 0.7 + 0.1) / 4)
    # 0.50 and 0.52 share the bin [7/15, 8/15): |mean(1, 0) - mean(0.50, 0.52)|
    assert S.ece([0.50, 0.52], [1, 0]) == pytest.approx(abs(0.5 - 0.51))
    rel = S.reliability(CONF, CORR)
    assert len(rel["bins"]) == 15 and sum(b["n"] for b in rel["bins"]) == 4
    assert S.reliability([1.0], [1])["bins"][-1]["n"] == 1  # the last bin is closed


def test_brier_auroc():
    assert S.brier(CONF, CORR) == pytest.approx((0.1**2 + 0.8**2 + 0.7**2 + 0.1**2) / 4)
    # positive/negative pairs ranked right: (0.9>0.8) (0.9>0.1) (0.3>0.1), not (0.3>0.8)
    assert S.auroc(CONF, CORR) == pytest.approx(3 / 4)
    assert S.auroc([0.2, 0.4], [1, 1]) is None


def test_risk_coverage_and_aurc():
    # in order 0.9 (right), 0.8 (wrong), 0.3 (right), 0.1 (wrong)
    risks = [1 - 1 / 1, 1 - 1 / 2, 1 - 2 / 3, 1 - 2 / 4]
    curve = S.risk_coverage(CONF, CORR)
    assert [p["coverage"] for p in curve] == [1 / 4, 2 / 4, 3 / 4, 4 / 4]
    assert [p["risk"] for p in curve] == pytest.approx(risks)
    assert S.aurc(CONF, CORR) == pytest.approx(sum(risks) / 4)


def test_risk_coverage_ties_enter_together():
    conf, corr = [0.7, 0.7, 0.2], [0, 1, 1]
    curve = S.risk_coverage(conf, corr)
    assert [(p["threshold"], p["coverage"]) for p in curve] == [(0.7, 2 / 3), (0.2, 1.0)]
    assert [p["risk"] for p in curve] == pytest.approx([1 - 1 / 2, 1 - 2 / 3])
    # both tied questions carry the risk of their group: the order within ties is irrelevant
    assert S.aurc(conf, corr) == pytest.approx((0.5 + 0.5 + 1 / 3) / 3)
    assert S.aurc(conf, corr) == pytest.approx(S.aurc([0.7, 0.7, 0.2], [1, 0, 1]))


def test_bootstrap_seeded_and_skips_undefined():
    y = np.asarray(CORR)
    a = S.bootstrap(lambda ix: float(y[ix].mean()), 4, resamples=200, seed=3)
    b = S.bootstrap(lambda ix: float(y[ix].mean()), 4, resamples=200, seed=3)
    assert a == b and 0.0 <= a["lo"] <= 0.5 <= a["hi"] <= 1.0
    c = S.bootstrap(lambda ix: None, 4, resamples=10)
    assert c["skipped"] == 10 and c["lo"] is None


def test_cluster_bootstrap_draws_whole_groups():
    # two conversations: every question of "a" is right, every question of "b" wrong. A draw
    # of whole groups can only give the means of {a,a}, {a,b}, {b,b}: 1, 3/5 or 2/5 (a has 3
    # questions, b has 2) and 0; a question-level draw gives other values too
    y = np.asarray([1, 1, 1, 0, 0])
    groups = ["a", "a", "a", "b", "b"]
    seen: set[float] = set()

    def stat(ix: np.ndarray) -> float:
        seen.add(round(float(y[ix].mean()), 9))
        assert len(ix) in (4, 5, 6)  # two groups drawn, 2 or 3 questions each
        return float(y[ix].mean())

    r = S.bootstrap(stat, 5, resamples=300, seed=1, groups=groups)
    assert seen <= {1.0, 0.6, 0.0} and len(seen) == 3
    assert r["unit"] == "group" and r["groups"] == 2
    assert r["lo"] == 0.0 and r["hi"] == 1.0
    assert S.bootstrap(stat, 5, resamples=50, seed=1, groups=groups) == \
        S.bootstrap(stat, 5, resamples=50, seed=1, groups=groups)
    with pytest.raises(ValueError, match="2 labels for 5"):
        S.bootstrap(stat, 5, groups=["a", "b"])


# --------------------------------------------------------------------------- features


def test_candidate_features_by_formula():
    from engram_eval.production.features import FEATURES_V3, candidate_features

    sig = {"dense": np.array([0.2, 0.7, 0.5, 0.1]), "bm25": np.array([3.0, 1.0, 0.0, 0.5]),
           "terms": [0.5, 1.0, 0.0, 0.25], "time": np.array([0.0, 1.0, -1.0, 0.0])}
    cands = [1, 0, 2]  # pipeline order; memory 3 is not a candidate
    x = candidate_features("Where did Priya move for work?", sig, cands)
    f = {name: x[:, k] for k, name in enumerate(FEATURES_V3)}
    assert f["dense"].tolist() == [0.7, 0.2, 0.5]
    assert f["first"].tolist() == [1, 0, 0]
    assert f["log_rank"].tolist() == pytest.approx([0, math.log(2), math.log(3)])
    # gap to the best other candidate
    assert f["dense_gap"].tolist() == pytest.approx([0.7 - 0.5, 0.2 - 0.7, 0.5 - 0.7])
    assert f["terms_gap"].tolist() == pytest.approx([1.0 - 0.5, 0.5 - 1.0, 0.0 - 1.0])
    assert f["dense_top"].tolist() == [1, 0, 0] and f["lexical_top"].tolist() == [0, 1, 0]
    assert f["agree"].tolist() == [0, 0, 0]
    # content terms: where? did? -> "priya", "move", "work" (stop words dropped)
    from engram_eval.retrieval.passages import content_terms

    assert f["query_terms"].tolist() == [math.log1p(len(content_terms(
        "Where did Priya move for work?")))] * 3
    # an excerpt in memory 0's place changes its absolute signals and the others' gaps
    y = candidate_features("Where did Priya move for work?", sig, cands,
                           {0: {"dense": 0.9, "terms": 0.5}})
    assert y[1, 0] == 0.9 and y[0, FEATURES_V3.index("dense_gap")] == pytest.approx(0.7 - 0.9)


# --------------------------------------------------------------------------- fit


def _synthetic_part(label: str, seed: int, n: int = 60, fmt: str = "longmemeval"):
    from engram_eval.production.features import FEATURES_V3
    from engram_eval.production_eval.calibrate_real import PartData

    rng = np.random.default_rng(seed)
    records = []
    for q in range(n):
        unans = q % 5 == 0
        k = 4
        x = rng.normal(size=(k, len(FEATURES_V3)))
        gold_at = None if unans else int(rng.integers(0, k))
        if gold_at is not None:
            x[gold_at, 0] += 2.0  # gold memories have a higher dense score
        ids = [f"s{j}" for j in range(k)]
        records.append({"question_id": f"{label}-{q}" + ("_abs" if unans else ""),
                        "group": f"{label}-{q // 3}", "unanswerable": unans,
                        "gold": [] if gold_at is None else [ids[gold_at]], "candidates": ids,
                        "x": x, "y": np.asarray([1.0 if j == gold_at else 0.0
                                                 for j in range(k)])})
    return PartData(label, f"{label}.json", "0" * 64, fmt, records)


@pytest.fixture(scope="module")
def tiny_engine(tiny_embedding_model):
    from engram_eval.production.search import Engine
    from engram_eval.production.settings import ProductionSettings

    return Engine(ProductionSettings(embedding_model=tiny_embedding_model, excerpt_retry=False,
                                     candidates=4, rerank=False))  # the calibrated gate


def test_fit_stores_numbers_that_reproduce_sklearn(tiny_engine, tmp_path):
    from sklearn.isotonic import IsotonicRegression

    from engram_eval.production.confidence import ContextCalibration, load_calibration
    from engram_eval.production_eval import calibrate_real as C

    parts = [_synthetic_part("a", 0), _synthetic_part("b", 1)]
    doc = C.fit(parts, tiny_engine, folds=3, calibrate_on="pairs", target_precision=0.5,
                min_returned=5)
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(doc))
    cal = load_calibration(p)
    assert isinstance(cal, ContextCalibration) and cal.cutoff == doc["cutoff"]["value"]
    # coefficients in raw units = the sklearn pipeline's decision function
    x, y, groups, _ = C._pairs(parts)
    model = C._score_model(1.0).fit(x, y)
    assert np.allclose(cal.scores(x), model.decision_function(x), atol=1e-6)
    # the stored isotonic steps, applied with numpy, = IsotonicRegression(clip).predict
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1)
    z = np.linspace(-5, 5, 7)
    iso.fit(z, [0, 0, 1, 0, 1, 1, 1])
    cal2 = ContextCalibration(0.0, (0.0,) * 11, "isotonic", tuple(iso.X_thresholds_),
                              tuple(iso.y_thresholds_), (1.0, 0.0), None, "", {})
    zz = np.linspace(-8, 8, 33)
    assert np.allclose(cal2.map_scores(zz), iso.predict(zz))
    # deterministic: the same inputs give the same document
    assert C.fit(parts, tiny_engine, folds=3, calibrate_on="pairs", target_precision=0.5,
                 min_returned=5) == doc
    assert doc["model_sha256"] and [d["part"] for d in doc["data"]] == ["a", "b"]
    assert set(doc["tuning_parts_out_of_fold"]) == {"a", "b"}


def test_fit_refuses_excerpt_retry(tiny_embedding_model):
    from engram_eval.errors import ConfigError
    from engram_eval.production.search import Engine
    from engram_eval.production.settings import ProductionSettings
    from engram_eval.production_eval import calibrate_real as C

    with pytest.raises(ConfigError, match="excerpt_retry"):
        C.fit([_synthetic_part("a", 0)],
              Engine(ProductionSettings(embedding_model=tiny_embedding_model,
                                        excerpt_retry=True)))


def test_choose_cutoff_smallest_meeting_target_on_every_part():
    from engram_eval.production_eval.calibrate_real import at_cutoff, choose_cutoff

    def q(conf, correct, unans=False):
        return {"confidence": conf, "correct": correct, "unanswerable": unans}

    a = [q(0.95, 1), q(0.85, 1), q(0.75, 0), q(0.5, 0, True)]
    b = [q(0.9, 1), q(0.8, 0), q(0.7, 1)]
    got = choose_cutoff({"a": a, "b": b}, target=0.9, min_returned=1)
    # a meets 0.9 from 0.76 (two right of two), b from 0.81 (one of one): the larger wins
    assert got["value"] == 0.81 and got["met_on_tuning_parts"]
    r = at_cutoff(a, 0.81)
    assert r["returned"] == 2 and r["answerable_returned_rate"] == 2 / 3
    assert r["unanswerable_abstained_rate"] == 1.0 and r["returned_top_gold_rate"] == 1.0


def test_extract_refuses_a_heldout_part(tiny_engine, tmp_path):
    from engram_eval.data.split import split_dataset
    from engram_eval.errors import ProvenanceError
    from engram_eval.production_eval import calibrate_real as C

    split_dataset(REPO / "fixtures" / "longmemeval_tiny.json", holdout=0.3, salt="t",
                  output_dir=tmp_path)
    held = next(tmp_path.glob("*.heldout.json*"))
    held = held if not held.name.endswith(".split.json") else Path(
        str(held).removesuffix(".split.json"))
    with pytest.raises(ProvenanceError, match="held-out"):
        C.extract(tiny_engine, "x", held)


def test_search_applies_v3_as_fitted(tiny_engine, tmp_path):
    """End to end on the tiny datasets: extract, fit, write; the gated search under the
    written calibration gives each candidate the confidence the model gives its features."""
    import dataclasses

    from engram_eval.production.search import Engine
    from engram_eval.production_eval import calibrate_real as C
    from engram_eval.production_eval.sessions import search_all, session_questions

    parts = [C.extract(tiny_engine, "lme", REPO / "fixtures" / "longmemeval_tiny.json"),
             C.extract(tiny_engine, "locomo", REPO / "fixtures" / "locomo_tiny.json")]
    assert parts[0].records and any(r["unanswerable"] for r in parts[0].records)
    assert parts[1].records and all(r["group"] == r["question_id"].split(":")[0] for r in parts[1].records)
    doc = C.fit(parts, tiny_engine, folds=2, target_precision=0.5, min_returned=1,
                mapping="platt")
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(doc))
    eng = Engine(dataclasses.replace(tiny_engine.settings, calibration=str(cal)))
    from engram_eval.data.datasets import load_questions

    _, qs = load_questions(REPO / "fixtures" / "longmemeval_tiny.json", "longmemeval")
    c = eng.calibration()
    for sq, rec in zip(session_questions(eng, list(qs), "longmemeval"), parts[0].records,
                       strict=True):
        resp = search_all(eng, sq)
        got = [cd["confidence"] for cd in resp.candidates]
        assert [cd["id"] for cd in resp.candidates] == rec["candidates"]
        assert np.allclose(got, c.confidences(rec["x"]))
    m = C.measure(eng, REPO / "fixtures" / "longmemeval_tiny.json", cutoff=0.5, resamples=20)
    assert m["summary"]["n"] == len(parts[0].records)
    assert set(m["intervals"]) >= {"ece", "brier", "auroc", "aurc"}
    png = C.plot(m, tmp_path / "x.png", "tiny")
    assert png[:4] == b"\x89PNG"


def test_select_keeps_every_unanswerable_and_every_kth_other():
    from engram_eval.data.records import Question
    from engram_eval.production_eval.calibrate_real import select

    qs = [Question(f"q{i}" + ("_abs" if i in (2, 5) else ""), "t", "?", "", "", (), ())
          for i in range(9)]
    got = [q.question_id for q in select(qs, every=3)]
    # others in file order: q0 q1 q3 q4 q6 q7 q8 -> the 0th, 3rd and 6th: q0, q4, q8
    assert got == ["q0", "q2_abs", "q4", "q5_abs", "q8"]
    assert [q.question_id for q in select(qs, max_questions=2)] == ["q0", "q1"]


def test_validation_v3_fixture():
    """Written and frozen before the calibration on real sessions: >= 15 cases, >= 75
    questions, held out, with absent-answer questions in every case."""
    from engram_eval.production_eval.fixture import load_fixture

    view, gold = load_fixture(REPO / "fixtures" / "production" / "validation_v3.json")
    qs = [q for c in view.cases for q in c.queries]
    assert view.heldout and len(view.cases) >= 15 and len(qs) >= 75
    assert all(any(gold(q.question_id) == () for q in c.queries) for c in view.cases)
    from published_files import published_bytes

    frozen = json.loads(published_bytes(
        "results/confidence/validation_v3.before_calibration.frozen.json"))
    from engram_eval.io import sha256_file

    assert frozen["input"]["sha256"] == sha256_file(
        REPO / "fixtures" / "production" / "validation_v3.json")


def test_choose_cutoff_unreachable_target_takes_the_best_rate():
    from engram_eval.production_eval.calibrate_real import choose_cutoff

    top = [{"confidence": c, "correct": r, "unanswerable": False}
           for c, r in ((0.9, 0), (0.8, 1), (0.7, 1), (0.6, 0), (0.5, 0))]
    got = choose_cutoff({"a": top}, target=0.95, min_returned=2)
    # returned >= 2 from 0.71 down: rates at 0.71-0.80 = 1/2, at 0.61-0.70 = 2/3, 0.51-0.60 2/4
    assert got["value"] == 0.61 and not got["met_on_tuning_parts"] and "fallback" in got
