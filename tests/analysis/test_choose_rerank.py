"""``engram_eval.analysis.choose_rerank`` (run by ``benchmarks/longmemeval/choose_rerank.py``):
out-of-fold choice of the rerank blend, on the tiny fixture with tiny models trained per fold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engram_eval.analysis import choose_rerank as mod
from engram_eval.analysis.train_reranker import TrainSettings, train
from engram_eval.cli import main as cli
from engram_eval.errors import ProvenanceError
from engram_eval.runs.reader import read_run
from engram_eval.scoring.summary import summarize_rows

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "fixtures" / "longmemeval_tiny.json"
SCRIPT = ROOT / "benchmarks" / "longmemeval" / "choose_rerank.py"


@pytest.fixture(scope="module")
def folds(tmp_path_factory: pytest.TempPathFactory, tiny_embedding_model: str
          ) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("choose")
    cand = d / "cand.jsonl"
    common = ["--embedding-model", tiny_embedding_model, "--embedding-backend",
              "sentence_transformers", "--cache-dir", str(d / "cache"),
              "--no-rerank"]  # the first stage; a reranked candidate says --rerank after it
    assert cli.main(["run", str(TINY), "--output", str(cand), *common]) == 0
    models = {}
    for i in (0, 1):
        models[i] = d / f"ce{i}"
        train(TINY, cand, models[i], TrainSettings(base_model=tiny_embedding_model,
                                                   max_steps=2, batch_size=8,
                                                   exclude_shard=f"{i}/2"))
    runs: dict[str, list[Path]] = {"none": [], "a0.5": []}
    for i in (0, 1):
        for name, extra in (("none", []), ("a0.5", [
                "--rerank", "--reranker-model", str(models[i]), "--rerank-unit", "turn",
                "--rerank-max-length", "64", "--fusion-alpha", "0.5"])):
            out = d / f"f{i}_{name}.jsonl"
            assert cli.main(["run", str(TINY), "--shard", f"{i}/2", "--output", str(out),
                             *common, *extra]) == 0
            runs[name].append(out)
    return {"dir": d, "runs": runs, "models": models, "common": common}


def test_choice_pools_the_folds_and_picks_the_best(folds: dict[str, Any]) -> None:
    cands = [(n, folds["runs"][n]) for n in ("none", "a0.5")]
    report = mod.choose(cands, ["recall_any@1", "recall_all@5"], "answerable").report
    for c in report["candidates"]:
        rows = [r for p in folds["runs"][c["name"]] for r in read_run(p).rows]
        means = summarize_rows(rows, ["answerable"])["protocols"]["answerable"]["metrics"]
        assert c["objective"] == pytest.approx((means["recall_any@1"] +
                                                means["recall_all@5"]) / 2)
        assert c["n"] == sum(1 for r in rows if r["metrics"].get("answerable") is not None)
    best = max(report["candidates"], key=lambda c: c["objective"])
    assert report["chosen"] == best["name"]
    reranked = report["candidates"][1]["folds"]
    assert [f["shard"] for f in reranked] == ["0/2", "1/2"]
    assert all("reranker_card" in f for f in reranked)


def test_cli_writes_report_and_sidecar_and_refuses_overwrite(folds: dict[str, Any],
                                                             tmp_path: Path) -> None:
    out = tmp_path / "choice.json"
    args = ["--candidate", "none", *map(str, folds["runs"]["none"]),
            "--candidate", "a0.5", *map(str, folds["runs"]["a0.5"]), "--output", str(out)]
    assert mod.main(args) == 0
    report = json.loads(out.read_text())
    side = json.loads(Path(str(out) + ".metadata.json").read_text())
    assert side["generator"]["path"] == mod.GENERATOR == "engram_eval/analysis/choose_rerank.py"
    assert len(side["inputs"]) == 4 and report["chosen"] in {"none", "a0.5"}
    assert mod.main(args) == 2


def test_the_recorded_script_is_the_module(folds: dict[str, Any], tmp_path: Path) -> None:
    """``benchmarks/longmemeval/choose_rerank.py`` (the command the publish scripts and
    PROVENANCE.md record) writes the same report as the module, byte for byte."""
    args = ["--candidate", "none", *map(str, folds["runs"]["none"]),
            "--candidate", "a0.5", *map(str, folds["runs"]["a0.5"])]
    assert mod.main([*args, "--output", str(tmp_path / "module.json")]) == 0
    done = subprocess.run([sys.executable, str(SCRIPT), *args, "--output",
                           str(tmp_path / "script.json")], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "chosen: " in done.stdout
    assert (tmp_path / "script.json").read_bytes() == (tmp_path / "module.json").read_bytes()
    side = json.loads((tmp_path / "script.json.metadata.json").read_text())
    assert side["generator"]["path"] == mod.GENERATOR
    assert side["command"][0] == str(SCRIPT)


def test_a_fold_scored_by_a_model_that_saw_it_is_refused(folds: dict[str, Any]) -> None:
    d = folds["dir"]
    out = d / "f0_wrong.jsonl"  # fold 0 scored by the model trained on fold 0
    assert cli.main(["run", str(TINY), "--shard", "0/2", "--output", str(out),
                     *folds["common"], "--rerank", "--reranker-model", str(folds["models"][1]),
                     "--rerank-unit", "turn", "--rerank-max-length", "64"]) == 0
    with pytest.raises(ProvenanceError, match="may have seen"):
        mod.choose([("bad", [out, folds["runs"]["a0.5"][1]])], ["recall_any@1"], "answerable")


def test_folds_must_be_disjoint_and_candidates_cover_the_same_questions(
        folds: dict[str, Any]) -> None:
    none = folds["runs"]["none"]
    with pytest.raises(ProvenanceError, match="overlap"):
        mod.choose([("dup", [none[0], none[0]])], ["recall_any@1"], "answerable")
    with pytest.raises(ProvenanceError, match="other questions"):
        mod.choose([("all", none), ("half", none[:1])], ["recall_any@1"], "answerable")


LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"


def test_a_reranker_trained_on_other_data_may_score_a_whole_part(
        folds: dict[str, Any], tiny_embedding_model: str) -> None:
    """Trained on the LoCoMo fixture only: its card lists the questions it trained on, none of
    which is in the LongMemEval fixture, so it may score that part whole (no fold)."""
    d = folds["dir"]
    loc_run = d / "loc.jsonl"
    assert cli.main(["run", str(LOCOMO), "--retriever", "bm25", "--output", str(loc_run)]) == 0
    other = d / "ce_other"
    card = train(LOCOMO, loc_run, other, TrainSettings(base_model=tiny_embedding_model,
                                                       max_steps=1, batch_size=8))
    assert card["parts"][0]["trained_question_ids"]
    rr = ["--rerank", "--reranker-model", str(other), "--rerank-unit", "turn",
          "--rerank-max-length", "64", "--fusion-alpha", "0.5"]
    whole = d / "whole_other.jsonl"
    assert cli.main(["run", str(TINY), "--output", str(whole), *folds["common"], *rr]) == 0
    plain = d / "whole_none.jsonl"
    assert cli.main(["run", str(TINY), "--output", str(plain), *folds["common"]]) == 0
    report = mod.choose([("none", [plain]), ("other", [whole])], ["recall_any@1"],
                        "answerable").report
    f = report["candidates"][1]["folds"][0]
    assert f["shard"] == "" and f["unseen_by"].startswith("other parts only")
    # a whole-part run scored by a model trained on that part is refused
    same = d / "whole_same.jsonl"
    assert cli.main(["run", str(TINY), "--output", str(same), *folds["common"], "--rerank",
                     "--reranker-model", str(folds["models"][0]), "--rerank-unit", "turn",
                     "--rerank-max-length", "64"]) == 0
    with pytest.raises(ProvenanceError, match="not a fold run"):
        mod.choose([("same", [same])], ["recall_any@1"], "answerable")
    # a card that cannot list its questions proves nothing; one that lists a run's question
    # is refused by name
    card_path = Path(str(other) + ".card.json")
    saved = card_path.read_text()
    try:
        bad = json.loads(saved)
        for p in bad["parts"]:
            del p["trained_question_ids"]
        card_path.write_text(json.dumps(bad))
        with pytest.raises(ProvenanceError, match="does not list the questions"):
            mod.choose([("other", [whole])], ["recall_any@1"], "answerable")
        first = read_run(whole).rows[0]["question_id"]
        bad["parts"][0]["trained_question_ids"] = [first]
        card_path.write_text(json.dumps(bad))
        with pytest.raises(ProvenanceError, match=f"first {first!r}"):
            mod.choose([("other", [whole])], ["recall_any@1"], "answerable")
    finally:
        card_path.write_text(saved)


def test_folds_by_conversation(tiny_embedding_model: str, tmp_path: Path) -> None:
    """LoCoMo folds keep conversations together: a fold's run (its question ids) scored by a
    people's reranker trained with ``exclude_fold`` of that fold passes; the other fold's
    reranker, which trained on these conversations, is refused."""
    from engram_eval.analysis.train_encoder import in_fold
    from engram_eval.data.datasets import load_questions

    loc_run = tmp_path / "loc.jsonl"
    assert cli.main(["run", str(LOCOMO), "--retriever", "bm25", "--output", str(loc_run)]) == 0
    _, qs = load_questions(LOCOMO)
    models = {i: tmp_path / f"ce{i}" for i in (0, 1)}
    for i, m in models.items():
        train(LOCOMO, loc_run, m, TrainSettings(base_model=tiny_embedding_model, max_steps=1,
                                                batch_size=8, exclude_fold=f"{i}/2"))
    config = tmp_path / "people_rerank.yaml"
    config.write_text("people_overrides:\n  rerank: true\n")
    common = ["--embedding-model", tiny_embedding_model, "--embedding-backend",
              "sentence_transformers", "--cache-dir", str(tmp_path / "cache"), "--config",
              str(config), "--rerank-unit", "turn", "--rerank-max-length", "64"]

    def fold_run(i: int, model: Path, name: str) -> Path:
        ids = [q.question_id for q in qs if in_fold(q.question_id, (i, 2))]
        out = tmp_path / f"{name}.jsonl"
        assert cli.main(["run", str(LOCOMO), "--output", str(out), *common,
                         "--reranker-model", str(model),
                         *[a for qid in ids for a in ("--question-id", qid)]]) == 0
        return out

    runs = [fold_run(i, models[i], f"f{i}") for i in (0, 1)]
    report = mod.choose([("people", runs)], ["recall_any@1"], "locomo").report
    folds = report["candidates"][0]["folds"]
    assert [f["fold"] for f in folds] == ["0/2", "1/2"]
    assert all(f["rerank"] and f["unseen_by"].startswith("the same part with this fold")
               for f in folds)
    assert sum(f["n"] for f in folds) == len(qs)  # every question scored, in one fold
    wrong = fold_run(0, models[1], "f0_wrong")
    with pytest.raises(ProvenanceError, match="outside fold 1/2"):
        mod.choose([("bad", [wrong])], ["recall_any@1"], "locomo")


def test_a_people_run_and_the_shipped_reranker(tmp_path: Path) -> None:
    """A LoCoMo run of the defaults reranks nothing (its chats would be, but it has none); the
    shipped reranker switched on for people's chats is proven unseen by the training card its
    settings card carries (trained on another dataset's questions)."""
    plain = tmp_path / "plain.jsonl"
    common = ["--cache-dir", str(tmp_path / "cache"), "--rerank-max-length", "64"]
    assert cli.main(["run", str(LOCOMO), "--output", str(plain), *common]) == 0
    config = tmp_path / "people_rerank.yaml"
    config.write_text("people_overrides:\n  rerank: true\n")
    people = tmp_path / "people.jsonl"
    assert cli.main(["run", str(LOCOMO), "--output", str(people), "--config", str(config),
                     *common]) == 0
    assert read_run(plain).metadata["config"]["rerank"]  # on for chats, yet nothing reranked
    report = mod.choose([("none", [plain]), ("v4", [people])], ["recall_any@1"],
                        "locomo").report
    none, v4 = (c["folds"][0] for c in report["candidates"])
    assert not none["rerank"] and "reranker_card" not in none
    assert v4["rerank"] and v4["unseen_by"].startswith("other parts only")
    assert v4["reranker_card"]["file"].endswith("engram-ce-minilm-v4/card.json")


def test_paired_difference_against_the_first_candidate(folds: dict[str, Any]) -> None:
    """With a cluster rule every later candidate is paired with the first: the mean of the
    per-question objective differences, its metrics', an interval around it, and the counts;
    without one the report has no pairing (reports made before it stay as they were)."""
    import numpy as np

    cands = [(n, folds["runs"][n]) for n in ("none", "a0.5")]
    objective = ["recall_any@1", "recall_all@5"]
    plain = mod.choose(cands, objective, "answerable").report
    assert "paired" not in plain and all("paired" not in c for c in plain["candidates"])
    report = mod.choose(cands, objective, "answerable", cluster="question").report
    assert report["paired"]["against"] == "none" and "paired" not in report["candidates"][0]

    def per_q(name: str) -> dict[str, list[float]]:
        rows = [r for p in folds["runs"][name] for r in read_run(p).rows]
        return {r["question_id"]: [r["metrics"]["answerable"][m] for m in objective]
                for r in rows if r["metrics"].get("answerable") is not None}

    a, b = per_q("none"), per_q("a0.5")
    d = {q: (np.mean(b[q]) - np.mean(a[q]), [y - x for x, y in zip(a[q], b[q], strict=True)])
         for q in a}
    got = report["candidates"][1]["paired"]
    assert got["n"] == len(d) and got["clusters"] == len(d)
    assert got["difference"]["objective"] == pytest.approx(np.mean([v[0] for v in d.values()]))
    for j, m in enumerate(objective):
        assert got["difference"][m] == pytest.approx(np.mean([v[1][j] for v in d.values()]))
    lo, hi = got["interval_95"]["objective"]
    assert lo <= got["difference"]["objective"] <= hi
    assert got["better"] == sum(v[0] > 0 for v in d.values())
    assert got["worse"] == sum(v[0] < 0 for v in d.values())
    assert got["interval_excludes_zero"] == (lo > 0 or hi < 0)
    chosen = report["chosen"]
    clear = chosen == "none" or report["candidates"][1]["paired"]["interval_95"]["objective"][0] > 0
    assert report["adopted"] == (chosen if clear else "none") and "adopted" not in plain
