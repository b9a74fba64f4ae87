"""Production-confidence checks: store, gate, fixture runner, frozen manifests, ledger.

Uses the tiny locally built embedding model (tests/tiny_models.py) and a calibration fitted
for it on a tiny fixture written here.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from engram_eval.errors import DataError, ProvenanceError
from engram_eval.production.settings import ProductionSettings
from engram_eval.production.store import Memory, MemoryStore
from engram_eval.production_eval.runner import SOURCES
from engram_eval.provenance import frozen as F

REPO = Path(__file__).resolve().parents[2]
LONG = ("The meeting started late. " * 3 + "Attendees discussed the budget and the printer. "
        + "The puppy Juno weighs six kilograms after the vet visit. "
        + "Logistics: the room is booked until five and coffee is on the second floor. " * 12)

FIXTURE = {
    "name": "tiny", "version": 1, "heldout": False,
    "cases": [
        {"case_id": "c1",
         "memories": [
             {"id": "a", "text": "I adopted a border collie puppy from the shelter.",
              "date": "2024-03-02"},
             {"id": "b", "text": "My sister bought a cake for the wedding.", "date": "2024-03-10"},
             {"id": "c", "text": LONG, "date": "2024-04-01"},
             {"id": "d", "text": "I listen to podcasts on the train commute.", "date": "2024-04-05"}],
         "questions": [
             {"question_id": "c1-1", "query": "What breed is the puppy I adopted?",
              "now": "2024-05-01", "gold": ["a"]},
             {"question_id": "c1-2", "query": "How much does the puppy weigh?",
              "now": "2024-05-01", "gold": ["c"]},
             {"question_id": "c1-3", "query": "Which hotel did I book in Denver?",
              "now": "2024-05-01", "gold": []}]},
        {"case_id": "c2",
         "memories": [
             {"id": "x", "text": "My best 10k running race time is 47 minutes.",
              "date": "2023-10-08"},
             {"id": "y", "text": "I bought an espresso coffee machine.", "date": "2023-11-20"},
             {"id": "z", "text": "I play the ukulele and the piano.", "date": "2023-12-01"}],
         "questions": [
             {"question_id": "c2-1", "query": "What is my best running time?",
              "now": "2024-01-01", "gold": ["x"]},
             {"question_id": "c2-2", "query": "Which coffee machine did I buy two weeks ago?",
              "now": "2023-12-04", "gold": ["y"]},
             {"question_id": "c2-3", "query": "Who is my landlord?", "now": "2024-01-01",
              "gold": []}]},
    ],
}


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc, indent=2))
    return path


@pytest.fixture(scope="module")
def calibrated(tiny_embedding_model, tmp_path_factory):
    """(settings, calibration path) for the tiny model, fitted on the tiny fixture."""
    from engram_eval.production.search import Engine
    from engram_eval.production_eval import calibrate as C

    d = tmp_path_factory.mktemp("calibration")
    fx = _write(d / "tiny.json", FIXTURE)
    settings = ProductionSettings(embedding_model=tiny_embedding_model,
                                  rerank=False)  # the calibrated gate (no cross-encoder)
    doc = C.fit(fx, Engine(settings))
    cal = d / "calibration.json"
    C.write_calibration(doc, cal)
    return settings.replace(calibration=str(cal))


@pytest.fixture()
def source_root(tmp_path):
    """A copy of the production sources (the hashed files) to change without touching the
    working tree."""
    root = tmp_path / "src"
    for rel in SOURCES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, root / rel)
    return root


def _engine(settings):
    from engram_eval.production.search import Engine

    return Engine(settings)


def _store(tmp_path, settings, memories):
    store = MemoryStore.create(tmp_path / "store.sqlite", _engine(settings))
    store.add(memories)
    store.close()
    return tmp_path / "store.sqlite"


MEMS = [Memory(m["id"], m["text"], m["date"]) for m in FIXTURE["cases"][0]["memories"]]
#: A calibration of versions 1-3: with the rerank stage on, the gate does not apply it (the
#: confidence is the cross-encoder's sigmoid), so it is read but never checked.
NOT_PER_SHAPE = "engram_eval/production/data/calibration_v2.json"


def test_gate_cutoff_and_limit(tmp_path, calibrated):
    """Results in the pipeline's order (issue 45): with no cut-off every candidate, in the
    candidates' (pipeline) order; the limit takes the pipeline's first; a cut-off drops the
    later candidates under it, and abstains when the first is under it."""
    path = _store(tmp_path, calibrated, MEMS)
    with MemoryStore.open(path, _engine(calibrated)) as st:
        q = "What breed is the puppy I adopted?"
        everything = st.search(q, now="2024-05-01", limit=100, min_confidence=0.0)
        confs = [c["confidence"] for c in everything.candidates]  # the pipeline's order
        assert len(everything.results) == len(MEMS)
        assert all(0.0 <= c <= 1.0 for c in confs)
        assert [r.id for r in everything.results] == [c["id"] for c in everything.candidates]
        assert [r.confidence for r in everything.results] == confs
        top = st.search(q, now="2024-05-01", limit=2, min_confidence=0.0)
        assert [r.confidence for r in top.results] == confs[:2]
        later = sorted(set(confs[1:]))
        cut = min(confs[0], later[len(later) // 2])  # the first passes, some later do not
        gated = st.search(q, now="2024-05-01", limit=100, min_confidence=cut)
        assert all(r.confidence >= cut for r in gated.results)
        assert [r.confidence for r in gated.results] == [c for c in confs if c >= cut]
        assert gated.results[0].id == everything.candidates[0]["id"]
        if max(confs) > confs[0]:  # a cut-off above the first: abstain, whatever the rest
            over = st.search(q, now="2024-05-01", limit=3,
                             min_confidence=(confs[0] + max(confs)) / 2)
            assert over.results == ()
        above = max(confs)
        nothing = st.search(q, now="2024-05-01", limit=3, min_confidence=min(1.0, above + 1e-9))
        if above < 1.0:
            assert nothing.results == ()


def test_store_survives_close_and_reopen(tmp_path, calibrated):
    path = _store(tmp_path, calibrated, MEMS)
    queries = [("How much does the puppy weigh?", "2024-05-01"), ("wedding cake", "2024-03-20")]

    def run():
        with MemoryStore.open(path, _engine(calibrated)) as st:
            return [[(r.id, r.confidence) for r in
                     st.search(q, now=n, limit=3, min_confidence=0.0).results]
                    for q, n in queries]

    first = run()
    assert first == run()
    with MemoryStore.open(path, _engine(calibrated)) as st:
        assert [m.id for m in st.memories()] == [m.id for m in MEMS]
        with pytest.raises(DataError, match="already in the store"):
            st.add([MEMS[0]])


def test_store_refuses_other_model(tmp_path, calibrated, tiny_embedding_model):
    path = _store(tmp_path, calibrated, MEMS[:1])
    other = tmp_path / "model-copy"
    shutil.copytree(tiny_embedding_model, other)
    (other / "config_sentence_transformers.json").write_text("{}")
    with pytest.raises(ProvenanceError, match="embedding_sha256"):
        MemoryStore.open(path, _engine(calibrated.replace(embedding_model=str(other))))


def _run(fx, out, work, settings, root, **kw):
    from engram_eval.production_eval.runner import run_fixture

    return run_fixture(fx, out, work, _engine(settings), root, **kw)


def _freeze(fx, settings, root, path):
    from engram_eval.production_eval.runner import validate_only

    return validate_only(fx, _engine(settings), root, path)


def test_dev_run_scores_and_refuses_existing_output(tmp_path, calibrated, source_root):
    fx = _write(tmp_path / "tiny.json", FIXTURE)
    out = tmp_path / "out" / "tiny.json"
    doc = _run(fx, out, tmp_path / "work", calibrated, source_root)
    s = doc["summary"]
    rows = doc["questions"]
    assert s["answerable"] == 4 and s["absent_answer"] == 2
    assert s["answerable_hits"] == sum(1 for r in rows if r["outcome"] == "hit")
    assert s["memories_returned"] == sum(len(r["accepted"]) for r in rows)
    assert s["non_gold_memories_returned"] == sum(len(r["non_gold_returned"]) for r in rows)
    assert all(len(r["accepted"]) <= calibrated.limit for r in rows)
    assert doc["label"].startswith("development")
    side = json.loads(Path(str(out) + ".metadata.json").read_text())
    assert side["manifest"]["sources"]["engram_eval/production/search.py"]
    assert side["models"][0]["files_sha256"]
    assert (tmp_path / "work" / "tiny" / "c1.sqlite").is_file()
    with pytest.raises(ProvenanceError, match="already exists"):
        _run(fx, out, tmp_path / "work2", calibrated, source_root)


def test_search_never_sees_gold(tmp_path, calibrated, source_root):
    fx = _write(tmp_path / "tiny.json", FIXTURE)
    blind = copy.deepcopy(FIXTURE)
    for case in blind["cases"]:
        for q in case["questions"]:
            q["gold"] = []
    fx_blind = _write(tmp_path / "blind.json", blind)
    a = _run(fx, tmp_path / "a.json", tmp_path / "wa", calibrated, source_root)
    b = _run(fx_blind, tmp_path / "b.json", tmp_path / "wb", calibrated, source_root)
    assert [(r["question_id"], r["accepted"]) for r in a["questions"]] == \
           [(r["question_id"], r["accepted"]) for r in b["questions"]]
    # and the search path's inputs carry no gold field at all
    from engram_eval.production_eval.fixture import load_fixture

    view, gold = load_fixture(fx)
    assert "gold" not in json.dumps([[q.__dict__ for q in c.queries] for c in view.cases])
    assert gold("c1-1") == ("a",)


def _heldout(tmp_path, name="held.json"):
    doc = copy.deepcopy(FIXTURE)
    doc["heldout"] = True
    doc["name"] = "held"
    return _write(tmp_path / name, doc)


def test_heldout_refused_without_and_with_stale_manifest(tmp_path, calibrated, source_root,
                                                         tiny_embedding_model):
    fx = _heldout(tmp_path)
    ledger = tmp_path / "ledger.json"
    with pytest.raises(ProvenanceError, match="held out"):
        _run(fx, tmp_path / "o.json", tmp_path / "w", calibrated, source_root, ledger=ledger)
    model = tmp_path / "model"
    shutil.copytree(tiny_embedding_model, model)
    settings = calibrated.replace(embedding_model=str(model))
    manifest = tmp_path / "frozen.json"
    _freeze(fx, settings, source_root, manifest)
    with pytest.raises(ProvenanceError, match="never overwritten"):
        _freeze(fx, settings, source_root, manifest)

    def refused(match):
        with pytest.raises(ProvenanceError, match=match):
            _run(fx, tmp_path / "o.json", tmp_path / "w", settings, source_root,
                 frozen_source=manifest, ledger=ledger)
        assert not (tmp_path / "o.json").exists() and not ledger.exists()

    src = source_root / "engram_eval/production/search.py"
    original = src.read_bytes()
    src.write_bytes(original + b"\n")
    refused("source engram_eval/production/search.py")
    src.write_bytes(original)
    cfg = model / "config_sentence_transformers.json"
    cfg_bytes = cfg.read_bytes()
    cfg.write_bytes(cfg_bytes + b" ")
    refused("model embedding .* file config_sentence_transformers.json")
    cfg.write_bytes(cfg_bytes)
    fx_bytes = fx.read_bytes()
    fx.write_bytes(fx_bytes + b"\n")
    refused("fixture held.json")
    fx.write_bytes(fx_bytes)
    refused_setting = settings.replace(min_confidence=0.5)
    with pytest.raises(ProvenanceError, match="setting min_confidence: 0.6 -> 0.5"):
        _run(fx, tmp_path / "o.json", tmp_path / "w", refused_setting, source_root,
             frozen_source=manifest, ledger=ledger)


def test_hashes_rechecked_after_inference(tmp_path, calibrated, source_root):
    fx = _write(tmp_path / "tiny.json", FIXTURE)
    src = source_root / "engram_eval/retrieval/bm25.py"

    def change(case_id):
        src.write_bytes(src.read_bytes() + b"# edited mid-run\n")

    with pytest.raises(ProvenanceError, match="(?s)changed during the run.*source engram_eval/"
                                              "retrieval/bm25.py"):
        _run(fx, tmp_path / "o.json", tmp_path / "w", calibrated, source_root, on_case=change)
    assert not (tmp_path / "o.json").exists()
    assert not Path(str(tmp_path / "o.json") + ".metadata.json").exists()


def test_ledger_labels_rerun_against_changed_source(tmp_path, calibrated, source_root):
    fx = _heldout(tmp_path)
    ledger = tmp_path / "results" / "ledger.json"
    m1 = tmp_path / "frozen1.json"
    _freeze(fx, calibrated, source_root, m1)
    first = _run(fx, tmp_path / "r1.json", tmp_path / "w1", calibrated, source_root,
                 frozen_source=m1, ledger=ledger)
    assert first["label"] == F.HELDOUT
    summary = json.loads(Path(str(tmp_path / "r1.json") + ".summary.json").read_text())
    assert summary["label"] == F.HELDOUT
    src = source_root / "engram_eval/production/confidence.py"
    src.write_bytes(src.read_bytes() + b"\n# a later change\n")
    m2 = tmp_path / "frozen2.json"
    _freeze(fx, calibrated, source_root, m2)
    second = _run(fx, tmp_path / "r2.json", tmp_path / "w2", calibrated, source_root,
                  frozen_source=m2, ledger=ledger)
    assert second["label"] == F.REGRESSION
    assert second["source_fingerprint"] != first["source_fingerprint"]
    summary2 = json.loads(Path(str(tmp_path / "r2.json") + ".summary.json").read_text())
    assert summary2["label"] == F.REGRESSION


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d["cases"][1]["memories"][0].pop("text"), "memories[0]"),
    (lambda d: d["cases"][1]["memories"].append(dict(d["cases"][1]["memories"][0])),
     "memories[3].id"),
    (lambda d: d["cases"][1]["questions"][0].__setitem__("query", "   "), "questions[0].query"),
    (lambda d: d["cases"][1]["questions"][0].__setitem__("gold", ["nope"]), "questions[0].gold"),
])
def test_bad_fixture_named_and_nothing_written(tmp_path, calibrated, source_root, mutate, field):
    doc = copy.deepcopy(FIXTURE)
    mutate(doc)
    fx = _write(tmp_path / "bad.json", doc)
    with pytest.raises(DataError) as e:
        _run(fx, tmp_path / "o.json", tmp_path / "w", calibrated, source_root)
    msg = str(e.value)
    assert "bad.json" in msg and "case 'c2'" in msg and field in msg
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "w").exists()


def test_packaged_fixtures_validate():
    from engram_eval.production_eval.fixture import load_fixture

    seen = {}
    for name in ("dev", "holdout", "validation_v2"):
        view, gold = load_fixture(REPO / "fixtures" / "production" / f"{name}.json")
        seen[name] = view.heldout
        assert len(view.cases) >= 10
        assert any(gold(q.question_id) == () for c in view.cases for q in c.queries)
    assert seen == {"dev": False, "holdout": True, "validation_v2": True}


def test_cli_validate_only_freezes(tmp_path):
    import subprocess
    import sys

    fx = _heldout(tmp_path)
    # bad input: one clear error, exit 2
    bad = copy.deepcopy(FIXTURE)
    bad["cases"][0]["questions"][0]["query"] = ""
    bfx = _write(tmp_path / "bad.json", bad)
    r = subprocess.run([sys.executable, str(REPO / "benchmarks/production_retrieval/run.py"),
                        "--fixture", str(bfx), "--source-root", str(REPO), "--validate-only",
                        "--embedding-model", "/nonexistent-model"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert fx.exists()


def test_rerank_scores_each_candidate_once(tmp_path, tiny_embedding_model, tiny_cross_encoder):
    """With the rerank stage on (turn unit) and a calibration of versions 1-3, the gate's
    confidence is the sigmoid of the logit the pipeline's rerank stage already computed for
    (query, memory text): no pair is given to the cross-encoder twice."""
    from engram_eval.retrieval.rerank import sigmoid

    settings = ProductionSettings(embedding_model=tiny_embedding_model, rerank=True,
                                  reranker_model=tiny_cross_encoder, rerank_unit="turn",
                                  reranker_backend="onnx", fusion_alpha=0.8,
                                  excerpt_retry=False, calibration=NOT_PER_SHAPE)
    path = _store(tmp_path, settings, MEMS)
    engine = _engine(settings)
    cross = engine.cross()
    seen: list[tuple[str, str]] = []
    inner = cross.raw_scores  # the cached scorer: a pair asked twice is asked twice here

    def counting(pairs):  # type: ignore[no-untyped-def]
        seen.extend(pairs)
        return inner(pairs)

    cross.raw_scores = counting
    with MemoryStore.open(path, engine) as st:
        res = st.search("What breed is the puppy I adopted?", now="2024-05-01", limit=100,
                        min_confidence=0.0)
    assert seen and len(seen) == len(set(seen))  # every pair scored once
    scored = dict(zip(seen, inner(seen), strict=True))
    for c in res.candidates:
        text = next(m.text for m in MEMS if m.id == c["id"])
        key = ("What breed is the puppy I adopted?", text)
        assert c["confidence"] == pytest.approx(sigmoid(scored[key]), abs=1e-6)


class CountingCrossEncoder:
    """A fake cross-encoder: a deterministic logit per (query, text) pair from their shared
    words, every pair it is given kept in ``seen`` (no cache in front of it)."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset
        self.seen: list[tuple[str, str]] = []
        self.n_model = self.n_cached = 0
        self.model_seconds = 0.0

    def raw_scores(self, pairs):  # type: ignore[no-untyped-def]
        self.seen.extend(pairs)
        return [self.offset + 0.25 * len(set(q.lower().split()) & set(d.lower().split()))
                - 0.001 * len(d) for q, d in pairs]


@pytest.mark.parametrize("unit", ["passage", "session", "turn"])
@pytest.mark.parametrize("offset", [0.0, -12.0])  # -12: every sigmoid under the passage floor
def test_search_scores_each_candidate_once(tmp_path, tiny_embedding_model, tiny_cross_encoder,
                                           unit, offset):
    """The gate's full-text confidence of a memory the pipeline reranked is the logit the
    rerank stage computed; the memories it did not rerank are scored once by the gate; an
    excerpt the pipeline's passage fallback already scored is not scored again. Counted on a
    fake cross-encoder held by the engine's model holder."""
    from engram_eval.production.search import Engine
    from engram_eval.retrieval.holder import ModelHolder
    from engram_eval.retrieval.rerank import sigmoid
    from engram_eval.retrieval.settings import RetrievalSettings

    settings = ProductionSettings(embedding_model=tiny_embedding_model, rerank=True,
                                  reranker_model=tiny_cross_encoder, rerank_unit=unit,
                                  reranker_backend="onnx", rerank_candidates=2, candidates=4,
                                  excerpt_retry=True, calibration=NOT_PER_SHAPE)
    path = _store(tmp_path, settings, MEMS)
    fake = CountingCrossEncoder(offset)
    engine = Engine(settings, holder=ModelHolder(RetrievalSettings.of(settings),
                                                 cross_encoder=fake))
    query = "How much does the puppy weigh after the vet visit?"
    with MemoryStore.open(path, engine) as st:
        res = st.search(query, now="2024-05-01", limit=100, min_confidence=0.999)
    assert len(res.candidates) == 4
    assert len(fake.seen) == len(set(fake.seen))  # no pair given to the model twice
    for m in MEMS:  # each memory's whole text scored at most once
        assert sum(d.strip() == m.text.strip() for _, d in fake.seen) <= 1, m.id
    logit = dict(zip(fake.seen, CountingCrossEncoder(offset).raw_scores(fake.seen),
                     strict=True))
    for c in res.candidates:
        text = next(m.text for m in MEMS if m.id == c["id"])
        doc = next(d for _, d in fake.seen if d.strip() == text.strip())
        assert c["confidence_full"] == pytest.approx(sigmoid(logit[(query, doc)]), abs=1e-12)
        if "excerpt" in c:
            assert c["excerpt"]["confidence"] < 0.999
