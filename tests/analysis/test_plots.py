"""Plots: curve data from rows (with the random baseline), labelled figures, atomic writes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from engram_eval.analysis.plots import FigureLabels, curves_from_rows, delta_chart, recall_curves
from engram_eval.cli import main as cli
from engram_eval.scoring.metrics import question_metrics, random_baseline

pytest.importorskip("matplotlib")

KS = (1, 3, 5)
LABELS = FigureLabels(dataset="tiny.json (sha256 abc)", split="held-out part",
                      denominator="answerable: questions with answer_session_ids; n=3",
                      settings="hybrid convex minmax")


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(k, raising=False)


def rows() -> list[dict[str, Any]]:
    spec = [("a", ["s1", "s2", "s3", "s4"], ["s1"]),
            ("b", ["s2", "s1", "s3", "s4", "s5", "s6"], ["s1", "s6"]),
            ("c", ["s3", "s2", "s1", "s4"], ["s4"])]
    out = []
    for (qid, ranking, gold), qt in zip(spec, ["x", "y", "x"], strict=True):
        out.append({"question_id": qid, "question_type": qt, "ranked_session_ids": ranking,
                    "scores": [float(-i) for i in range(len(ranking))],
                    "gold": {"answerable": gold},
                    "metrics": {"answerable": question_metrics(gold, ranking, KS)}})
    out.append({"question_id": "d", "question_type": "x", "ranked_session_ids": ["s1"],
                "scores": [0.0], "gold": {"answerable": None}, "metrics": {"answerable": None}})
    return out


def test_curves_from_rows() -> None:
    c = curves_from_rows(rows(), "answerable", KS)
    assert list(c) == ["overall", "x", "y"]
    assert c["overall"]["n"] == 3 and c["x"]["n"] == 2
    # recall_any@1: a hit, b miss, c miss; recall_all@5: a 1, b 0 (s6 at 6), c 1
    assert c["overall"]["recall_any"][0] == pytest.approx(1 / 3)
    assert c["overall"]["recall_all"][2] == pytest.approx(2 / 3)
    # random baseline: 1 - C(pool - g, k) / C(pool, k), per question, averaged
    want = (1 - math.comb(3, 3) / math.comb(4, 3) + 1 - math.comb(4, 3) / math.comb(6, 3)
            + 1 - math.comb(3, 3) / math.comb(4, 3)) / 3
    assert c["overall"]["random_any"][1] == pytest.approx(want)
    assert c["y"]["random_all"][2] == pytest.approx(random_baseline(2, 6, 5)["recall_all@5"])


def test_recall_curves_labelled_and_atomic(tmp_path: Path) -> None:
    out = tmp_path / "curves.svg"
    recall_curves(curves_from_rows(rows(), "answerable", KS), KS, LABELS, out, title="T")
    text = out.read_text()
    for s in ("tiny.json (sha256 abc)", "held-out part", "answerable: questions with",
              "hybrid convex minmax", "random recall_any@k"):
        assert s in text, s
    assert not [p for p in tmp_path.iterdir() if p.name != "curves.svg"]  # no temp left
    with pytest.raises(FileExistsError):
        recall_curves(curves_from_rows(rows(), "answerable", KS), KS, LABELS, out)
    before = out.read_bytes()
    recall_curves(curves_from_rows(rows(), "answerable", (1, 3)), (1, 3), LABELS, out,
                  overwrite=True)
    assert out.read_bytes() != before
    png = tmp_path / "c.png"
    recall_curves(curves_from_rows(rows(), "answerable", KS), KS, LABELS, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_delta_chart(tmp_path: Path) -> None:
    e = {"a": 0.5, "b": 0.6, "delta": 0.1, "ci": [-0.05, 0.2], "binary": True,
         "mcnemar": {"p": 0.25}, "significant": False}
    rep = {"metrics": ["recall_any@1"], "settings": {"confidence": 0.95},
           "groups": {"overall": {"n": 4, "metrics": {"recall_any@1": e}},
                      "x": {"n": 2, "metrics": {"recall_any@1": e}}}}
    out = tmp_path / "d.svg"
    delta_chart(rep, ["recall_any@1", "absent"], LABELS, out)
    text = out.read_text()
    assert "overall (n=4)" in text and "p=0.25" in text and "held-out part" in text


def test_cli_plot(tmp_path: Path) -> None:
    p = tmp_path / "run.jsonl"
    rs = rows()
    for r in rs:  # the CLI plots KS = (1, 3, 5, 10, 30, 50)
        if r["metrics"]["answerable"] is not None:
            r["metrics"]["answerable"] = question_metrics(r["gold"]["answerable"],
                                                          r["ranked_session_ids"])
    p.write_text("".join(json.dumps(r) + "\n" for r in rs))
    Path(str(p) + ".summary.json").write_text(json.dumps(
        {"dataset": "x.heldout.json", "dataset_sha256": "a" * 64, "retriever": "hybrid"}))
    out = tmp_path / "c.svg"
    assert cli.main(["plot", str(p), "--output", str(out)]) == 0
    assert "held-out part" in out.read_text()


def test_delta_chart_clustered_annotates_cluster_test_p(tmp_path: Path) -> None:
    ct = {"p": 0.0312, "clusters": 5, "method": "exact sign-flip", "sign_vectors": 32,
          "min_p": 2 / 32}
    binary = {"a": 0.5, "b": 0.6, "delta": 0.1, "ci": [0.02, 0.2], "binary": True,
              "mcnemar": {"p": 0.25, "lost": 1, "gained": 3}, "cluster_test": ct,
              "significant": True}
    graded = {"a": 0.5, "b": 0.55, "delta": 0.05, "ci": [-0.01, 0.1], "binary": False,
              "cluster_test": {**ct, "p": 0.4375}, "significant": False}
    rep = {"metrics": ["recall_any@1", "mrr"], "settings": {"confidence": 0.95},
           "groups": {"overall": {"n": 4, "clusters": 5,
                                  "metrics": {"recall_any@1": binary, "mrr": graded}}}}
    out = tmp_path / "d.svg"
    delta_chart(rep, ["recall_any@1", "mrr"], LABELS, out)
    text = out.read_text()
    assert "p=0.031" in text and "p=0.44" in text
    assert "p=0.25" not in text  # the McNemar p is not what decided
