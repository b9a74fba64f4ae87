"""engram-eval tune (engram_eval.analysis.tune): offline re-fusion, refusal, hand-checkable optimum."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from engram_eval.analysis.tune import tune
from engram_eval.cli import main as cli
from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.provenance.sidecar import sidecar_path
from engram_eval.retrieval import fusion as F
from engram_eval.runs import runner
from engram_eval.runs.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "longmemeval_tiny.json"
EXAMPLE_GRID = ROOT / "benchmarks" / "longmemeval" / "tune_grid.yaml"

# A BM25-only hybrid run (no model needed) that computes and traces every lexical signal.
LEXICAL_RUN = dict(retriever="hybrid", use_dense=False, use_dense_rocchio=False, use_bm25_turn=True, use_bm25_prf=True,
                   feedback_source="bm25_user", progress=False, use_cache=False, rerank=False)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tune-run") / "run.jsonl"
    runner.run(RunConfig(**LEXICAL_RUN), FIXTURE, out, echo=lambda m: None)
    return out


def write_grid(path: Path, grid: dict) -> Path:
    path.write_text(yaml.safe_dump(grid))
    return path


def test_tune_reproduces_the_run_and_writes_a_loadable_config(real_run: Path,
                                                              tmp_path: Path) -> None:
    grid = write_grid(tmp_path / "g.yaml", {
        "fusion": ["rrf", "convex"], "normalisation": ["minmax", "zscore"], "rrf_k": [0, 60],
        "weights": {"bm25_user": [0.5], "bm25_assistant": [0.1, 0.5], "bm25_turn": [0, 0.3],
                    "weight_bm25_prf": [0, 0.3]},
        "temporal": [False, True], "temporal_boost": [1.25, 2.0]})
    # the run's own settings (the package defaults) are one of the candidates, so the
    # in-sample best cannot score below them
    d = RunConfig()
    assert (d.fusion, d.normalisation, d.weight_bm25_user, d.weight_bm25_assistant,
            d.weight_bm25_turn, d.weight_bm25_prf, d.temporal, d.temporal_boost) == (
        "convex", "minmax", 0.5, 0.1, 0.3, 0.3, True, 1.25)
    out = tmp_path / "chosen.yaml"
    res = tune(real_run, grid, out, protocol="all", folds=2)
    r = res.report
    # 4 fusion settings x 8 weight combinations x 3 temporal settings
    assert r["n_candidates"] == 4 * 8 * 3
    assert r["signals"] == ["bm25_user", "bm25_assistant", "bm25_turn", "bm25_prf"]
    assert r["in_sample_score"] >= r["run_settings_score"]
    assert 0.0 <= r["cross_validation"]["estimate"] <= 1.0
    assert r["run"]["rows_sha256"] and r["dataset"]["sha256"]
    text = out.read_text()
    assert text.startswith("# engram-eval tune") and r["run"]["rows_sha256"] in text
    cfg = RunConfig.from_yaml(out)  # loadable by --config
    assert cfg.fusion == r["chosen"]["fusion"] and cfg.rrf_k == r["chosen"]["rrf_k"]
    assert cfg.use_dense is False and cfg.feedback_source == "bm25_user"
    assert json.loads(res.report_path.read_text())["chosen"] == r["chosen"]
    with pytest.raises(FileExistsError):
        tune(real_run, grid, out, protocol="all")


def test_tune_refuses_a_run_it_cannot_reproduce(real_run: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    rows = [json.loads(x) for x in real_run.read_text().splitlines()]
    t = rows[0]["trace"]["sessions"][0]
    t["bm25_user"] = t["bm25_user"] * 0.5 + 1e-9  # a signal no longer matching the ranking
    rows[0]["trace"]["sessions"][-1]["bm25_user"] += 100.0
    rows[0]["trace"]["sessions"][-1]["bm25_user_rank"] = 1
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    shutil.copy(sidecar_path(real_run), sidecar_path(bad))
    grid = write_grid(tmp_path / "g.yaml", {"rrf_k": [10]})
    with pytest.raises(ProvenanceError, match="does not reproduce"):
        tune(bad, grid, tmp_path / "c.yaml", protocol="all")
    assert not (tmp_path / "c.yaml").exists()
    # a grid asking for a signal the run did not compute
    grid2 = write_grid(tmp_path / "g2.yaml", {"weights": {"dense": [0.5]}})
    with pytest.raises(ConfigError, match="dense"):
        tune(real_run, grid2, tmp_path / "c2.yaml", protocol="all")


def test_tune_reads_gzipped_runs(real_run: Path, tmp_path: Path) -> None:
    gz = tmp_path / "run.jsonl.gz"
    gz.write_bytes(gzip.compress(real_run.read_bytes()))
    shutil.copy(sidecar_path(real_run), sidecar_path(gz))
    grid = write_grid(tmp_path / "g.yaml", {"fusion": ["convex"]})
    res = tune(gz, grid, tmp_path / "c.yaml", protocol="all", folds=2)
    assert res.report["n_candidates"] == 1


# --------------------------------------------------------------------------- hand-built run

# Two questions, three sessions each: (dense scores, bm25_user scores (0 = no match), gold).
HAND = {
    "q1": ([0.9, 0.5, 0.1], [0.0, 5.0, 0.0], "s1"),
    "q2": ([0.8, 0.7, 0.2], [1.0, 0.0, 0.0], "s0"),
}
OWN = {"method": "rrf", "normalisation": "minmax", "k": 60.0,
       "weights": {"dense": 1.0, "bm25_user": 0.0}}


def hand_rows(hand: dict | None = None) -> list[dict]:
    rows = []
    for qid, (dense, bm25, gold) in (hand or HAND).items():
        sig = {"dense": F.Signal.of(dense), "bm25_user": F.Signal.of(bm25, np.array(bm25) > 0)}
        fused = F.fuse(sig, method="rrf", weights=OWN["weights"], k=60.0)
        final = F.temporal_scores(fused, np.ones(3))
        order = F.order(final)
        sessions = []
        for i in order:
            t = {"corpus_index": i, "temporal": 1.0, "in_window": None, "reranked": False}
            for name, s in sig.items():
                ranks = F.signal_ranks(s.scores, s.informative)
                t[name], t[name + "_rank"] = float(s.scores[i]), ranks[i]
            sessions.append(t)
        rows.append({"question_id": qid, "question_type": "t",
                     "ranked_session_ids": [f"s{i}" for i in order],
                     "scores": [float(final[i]) for i in order], "metrics": {},
                     "gold": {"answerable": [gold]},
                     "trace": {"question": {"signals": ["dense", "bm25_user"], "fusion": OWN,
                                            "temporal": False, "temporal_boost": 1.25},
                               "sessions": sessions}})
    return rows


def hand_run(real_run: Path, run: Path, hand: dict | None = None) -> Path:
    """``run``: the rows of ``hand`` (default HAND) under a copy of ``real_run``'s sidecar
    (any valid sidecar without rerank, selecting the hand rows, else a partial run)."""
    hand = hand or HAND
    run.write_text("".join(json.dumps(r) + "\n" for r in hand_rows(hand)))
    meta = json.loads(sidecar_path(real_run).read_text())
    meta["selection"].update(n=len(hand), ids=list(hand))
    sidecar_path(run).write_text(json.dumps(meta))
    return run


def test_tune_finds_the_hand_checked_optimum(real_run: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(k, raising=False)  # cli.main sets them; keep them from leaking
    run = hand_run(real_run, tmp_path / "hand.jsonl")
    grid = write_grid(tmp_path / "g.yaml", {"fusion": ["convex", "rrf"], "rrf_k": [60],
                                             "weights": {"dense": [1], "bm25_user": [0, 1]}})
    out = tmp_path / "c.yaml"
    code = cli.main(["tune", str(run), "--grid", str(grid), "--output", str(out),
                     "--objective", "recall_any@1", "--folds", "2"])
    assert code == 0
    r = json.loads(Path(str(out) + ".tuning.json").read_text())
    # candidates in grid order: convex w0, convex w1, rrf w0, rrf w1.
    # q1 (gold s1): dense alone ranks s0 first (0); adding bm25_user lifts s1: convex
    #   (1 + 0)/2 = 0.5 < (0.5 + 1)/2 = 0.75, rrf 1/61 < 1/62 + 1/61 -> 1.
    # q2 (gold s0): s0 is first with or without bm25_user -> 1.
    assert r["n_candidates"] == 4 and r["n_questions"] == 2
    assert r["chosen"]["fusion"] == "convex"  # first of the two optima (grid order)
    assert r["chosen"]["weights"] == {"dense": 1.0, "bm25_user": 1.0}
    assert r["in_sample_score"] == 1.0 and r["run_settings_score"] == 0.5
    # 2 folds of one question: trained on q2 alone every candidate scores 1, the first
    # (convex, bm25_user 0) is chosen and scores 0 on q1; trained on q1 the optimum scores 1
    # on q2 -> estimate (0 + 1) / 2
    assert r["cross_validation"]["estimate"] == 0.5
    cfg = yaml.safe_load(out.read_text())
    assert cfg["fusion"] == "convex" and cfg["weight_bm25_user"] == 1.0
    assert cfg["use_bm25_user"] is True


# Six LoCoMo-shaped questions (ids CONVERSATION:QUESTION) in conversations of 1, 2 and 3.
CONVERSATIONS = {"ca": 1, "cb": 2, "cc": 3}
BY_CONVERSATION = {f"{c}:{k}": HAND["q1" if k % 2 else "q2"]
                   for c, n in CONVERSATIONS.items() for k in range(n)}


@pytest.mark.parametrize("cluster", ["id-prefix", "none", None])
def test_one_run_honours_the_cross_validation_unit(real_run: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   cluster: str | None) -> None:
    """``tune`` of one run deals folds by conversation (the id before ':') by default and with
    ``--cluster id-prefix``, by question with ``--cluster none``: with 3 folds, each fold holds
    out one whole conversation (1, 2 and 3 questions) or 6 / 3 = 2 questions."""
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(k, raising=False)
    run = hand_run(real_run, tmp_path / "conv.jsonl", BY_CONVERSATION)
    grid = write_grid(tmp_path / "g.yaml", {"weights": {"dense": [1], "bm25_user": [0, 1]}})
    out = tmp_path / "c.yaml"
    argv = ["tune", str(run), "--grid", str(grid), "--output", str(out), "--folds", "3"]
    code = cli.main(argv + (["--cluster", cluster] if cluster else []))
    assert code == 0
    cv = json.loads(Path(str(out) + ".tuning.json").read_text())["cross_validation"]
    n_test = sorted(f["n_test"] for f in cv["per_fold"])
    if cluster == "none":
        assert cv["unit"] == "question" and n_test == [len(BY_CONVERSATION) // 3] * 3
    else:
        assert cv["unit"] == "id-prefix" and n_test == sorted(CONVERSATIONS.values())


def test_one_run_is_the_search_over_parts_with_one_part(real_run: Path, tmp_path: Path) -> None:
    """Single-run ``tune`` and ``tune_parts`` given that one run (rule ``mean``: the part's own
    score) choose alike, with the same in-sample, own-settings and out-of-fold scores."""
    from engram_eval.analysis.tune_parts import tune_parts

    grid = write_grid(tmp_path / "g.yaml", {"fusion": ["rrf", "convex"],
                                            "normalisation": ["minmax", "zscore"],
                                            "weights": {"bm25_user": [0.3, 1.0],
                                                        "bm25_turn": [0, 0.5]},
                                            "temporal": [False, True]})
    one = tune(real_run, grid, tmp_path / "one.yaml", folds=3).report
    parts = tune_parts([real_run], grid, tmp_path / "parts.yaml", protocols=["answerable"],
                       rule="mean", folds=3).report
    (structure,) = parts["structures"].values()
    (part,) = structure["parts"]
    assert structure["chosen"] == one["chosen"]
    assert structure["n_candidates"] == one["n_candidates"]
    assert part["in_sample_score"] == one["in_sample_score"]
    assert part["run_settings_score"] == one["run_settings_score"]
    assert part["cv_estimate"] == one["cross_validation"]["estimate"]
    assert part["in_sample_metrics"] == one["in_sample_metrics"]
    assert ([f["chosen"] for f in structure["cross_validation"]["per_fold"]]
            == [f["chosen"] for f in one["cross_validation"]["per_fold"]])


def test_example_grid_loads() -> None:
    from engram_eval.analysis.tune import load_grid

    g = load_grid(EXAMPLE_GRID)
    assert set(g["fusion"]) == {"rrf", "convex"} and "weights" in g


def _load_grid(path: Path) -> object:
    from engram_eval.analysis.tune import load_grid

    return load_grid(path)


@pytest.mark.parametrize(("loader", "text", "expect"), [
    (_load_grid, "- rrf\n- convex\n", "grid top level must be a mapping of grid fields"),
    (_load_grid, "fusion: [rrf\n", "cannot read grid"),
    (RunConfig.from_yaml, "- fusion\n", "config top level must be a mapping of config fields"),
    (RunConfig.from_yaml, "fusion: [rrf\n", "cannot read config"),
])
def test_bad_yaml_file_names_the_file(tmp_path: Path, loader, text: str, expect: str) -> None:  # type: ignore[no-untyped-def]
    """``tune --grid`` and ``run --config`` share one YAML reader and its errors."""
    bad = tmp_path / "in.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=expect) as e:
        loader(bad)
    assert str(e.value).startswith(f"{bad}: ")
    with pytest.raises(ConfigError, match="cannot read"):
        loader(tmp_path / "absent.yaml")
