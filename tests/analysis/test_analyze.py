"""engram-eval analyze: miss classes on hand-built traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engram_eval.analysis.analyze import analyze_rows, classify
from engram_eval.cli import main as cli
from engram_eval.errors import DataError


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(k, raising=False)


def sess(dense: int | None, bm25: int | None, fused: int, temporal: int,
         rerank: int | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"dense": 0.0, "dense_rank": dense, "bm25_user": 0.0,
                         "bm25_user_rank": bm25, "fused": 0.0, "fused_rank": fused,
                         "temporal": 1.0, "temporal_rank": temporal,
                         "reranked": rerank is not None}
    if rerank is not None:
        t["rerank_rank"] = rerank
    return t


def row(qid: str, qtype: str, ranked: list[str], traces: list[dict[str, Any]],
        gold: list[str], k: int = 2) -> dict[str, Any]:
    top = set(ranked[:k])
    return {"question_id": qid, "question_type": qtype, "ranked_session_ids": ranked,
            "scores": [float(-i) for i in range(len(ranked))],
            "gold": {"answerable": gold},
            "metrics": {"answerable": {f"recall_any@{k}": float(bool(top & set(gold))),
                                       f"recall_all@{k}": float(set(gold) <= top)}},
            "trace": {"question": {"signals": ["dense", "bm25_user"], "time_window": None},
                      "sessions": traces}}


# k = 2, window = 4. Final order is s1..s6 (position i+1).
NO_RERANK = [
    # found by every stage: hit, not analysed
    row("hit", "A", ["g", "x", "y"], [sess(1, 1, 1, 1), sess(2, 2, 2, 2), sess(3, 3, 3, 3)],
        ["g"]),
    # dense rank 1, fusion puts it 3rd -> lost in fusion
    row("fus", "A", ["x", "y", "g"], [sess(2, 1, 1, 1), sess(3, 2, 2, 2), sess(1, 5, 3, 3)],
        ["g"]),
    # fused 2nd, temporal step pushes it to 3rd -> lost in the temporal step
    row("tmp", "B", ["x", "y", "g"], [sess(1, 1, 1, 1), sess(3, 3, 3, 2), sess(2, 2, 2, 3)],
        ["g"]),
    # best signal rank 4 (within the window, never top 2) -> cut by the window
    row("cut", "B", ["x", "y", "g"], [sess(1, 1, 1, 1), sess(2, 2, 2, 2), sess(4, 6, 3, 3)],
        ["g"]),
    # ranks 5 and null: outside the window -> not discovered; plus a gold id not in the corpus
    row("und", "B", ["x", "y", "g"], [sess(1, 1, 1, 1), sess(2, 2, 2, 2),
                                      sess(5, None, 3, 3)], ["g", "gone"]),
]


def test_classes_without_rerank() -> None:
    rep = analyze_rows(NO_RERANK, k=2, window=4)
    got = {(q["question_id"], g["session_id"]): g["class"] for q in rep["questions"]
           for g in q["missed"]}
    assert got == {("fus", "g"): "lost_in_fusion", ("tmp", "g"): "lost_in_temporal",
                   ("cut", "g"): "cut_by_window", ("und", "g"): "not_discovered",
                   ("und", "gone"): "not_in_corpus"}
    assert rep["classes"] == {"not_in_corpus": 1, "not_discovered": 1, "lost_in_fusion": 1,
                              "lost_in_temporal": 1, "lost_in_rerank": 0, "cut_by_window": 1,
                              "untraced": 0}
    assert rep["by_type"]["A"]["lost_in_fusion"] == 1 and rep["by_type"]["A"]["n_questions"] == 2
    assert rep["by_type"]["B"]["not_discovered"] == 1
    assert rep["n_questions"] == 5 and rep["n_questions_missing_some_gold"] == 4
    assert rep["n_questions_missing_all_gold"] == 4
    fus = next(q for q in rep["questions"] if q["question_id"] == "fus")["missed"][0]
    assert fus == {"session_id": "g", "final_rank": 3,
                   "signal_ranks": {"dense": 1, "bm25_user": 5}, "fused_rank": 3,
                   "temporal_rank": 3, "rerank_rank": None, "reranked": False,
                   "class": "lost_in_fusion"}


def test_classes_with_rerank() -> None:
    rows = [
        # reranked candidate placed 3rd by the rerank -> lost in rerank
        row("rr", "A", ["x", "y", "g", "z"],
            [sess(1, 1, 1, 1, 1), sess(2, 2, 3, 3, 2), sess(3, 2, 2, 2, 3), sess(4, 4, 4, 4)],
            ["g"]),
        # a signal had it at 3 (inside window 4) but fusion put it 5th, outside the rerank
        # candidates -> lost in fusion
        row("rf", "A", ["x", "y", "z", "w", "g"],
            [sess(1, 1, 1, 1, 1), sess(2, 2, 2, 2, 2), sess(4, 4, 3, 3, 3),
             sess(5, 5, 4, 4, 4), sess(3, 6, 5, 5)], ["g"]),
    ]
    rep = analyze_rows(rows, k=2, window=4)
    got = {q["question_id"]: q["missed"][0]["class"] for q in rep["questions"]}
    assert got == {"rr": "lost_in_rerank", "rf": "lost_in_fusion"}
    assert rep["questions"][0]["missed"][0]["rerank_rank"] == 3


def test_classify_edges_and_tolerated_missing_keys() -> None:
    kw = dict(k=5, window=10, in_corpus=True, reranked=False, run_reranks=False)
    assert classify(signal_ranks={}, fused_rank=7, temporal_rank=7, **kw) == "not_discovered"
    assert classify(signal_ranks={"d": 10}, fused_rank=12, temporal_rank=12,
                    **kw) == "cut_by_window"
    assert classify(signal_ranks={"d": 11}, fused_rank=6, temporal_rank=6,
                    **kw) == "not_discovered"
    assert classify(signal_ranks={"d": 5}, fused_rank=6, temporal_rank=6,
                    **kw) == "lost_in_fusion"
    # rows written before temporal_rank / fused_rank existed (prior_rank; final order used)
    old = row("old", "A", ["x", "y", "g"], [sess(1, 1, 1, 1), sess(2, 2, 2, 2),
                                            sess(1, 3, 3, 3)], ["g"])
    for t in old["trace"]["sessions"]:
        t["prior_rank"] = t.pop("fused_rank")
        del t["temporal_rank"]
    del old["trace"]["question"]["signals"]
    g = analyze_rows([old], k=2, window=4)["questions"][0]["missed"][0]
    assert g["signal_ranks"] == {"dense": 1, "bm25_user": 3}
    assert g["fused_rank"] == 3 and g["temporal_rank"] == 3 and g["class"] == "lost_in_fusion"


def test_missing_or_truncated_trace() -> None:
    r = row("fus", "A", ["x", "y", "g"], [], ["g"])
    with pytest.raises(DataError, match="trace"):
        analyze_rows([r], k=2, window=4)
    # --trace-sessions 2: the gold at rank 3 has no trace -> untraced, counted
    r = row("fus", "A", ["x", "y", "g"], [sess(2, 1, 1, 1), sess(3, 2, 2, 2)], ["g"])
    rep = analyze_rows([r], k=2, window=4)
    assert rep["classes"]["untraced"] == 1 and rep["n_questions_with_truncated_trace"] == 1
    assert rep["questions"][0]["missed"][0]["final_rank"] == 3


def test_cli_analyze(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "run.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in NO_RERANK))
    Path(str(p) + ".metadata.json").write_text(json.dumps(
        {"dataset": {"name": "d", "sha256": "a" * 64}, "config": {"rerank_candidates": 4}}))
    out = tmp_path / "rep.json"
    assert cli.main(["analyze", str(p), "--k", "2", "--output", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["window"] == 4 and rep["window_source"] == "sidecar rerank_candidates"
    assert rep["classes"]["lost_in_temporal"] == 1
    assert "lost_in_fusion" in capsys.readouterr().out
