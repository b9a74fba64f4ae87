"""TREC run/qrels export and metric parity with ir_measures (where the definitions agree)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import DataError
from engram_eval.runs.trec import export_run, trec_export
from engram_eval.scoring.metrics import question_metrics

KS = (1, 3, 5, 10)

# (question id, ranking, gold): single and multi gold, gold at rank 1, 2, deep, never ranked,
# and an ideal multi-gold ranking.
CASES = [
    ("q_first", ["a", "b", "c", "d", "e", "f"], ["a"]),
    ("q_second", ["b", "a", "c", "d", "e", "f"], ["a"]),
    ("q_deep", ["b", "c", "d", "e", "f", "g", "a"], ["a"]),
    ("q_multi", ["x", "a", "y", "b", "z", "c", "w"], ["a", "b", "c"]),
    ("q_ideal", ["a", "b", "x", "y", "z"], ["a", "b"]),
    ("q_unranked", ["x", "a", "y", "z"], ["a", "ghost"]),
    ("q_none", ["x", "y", "z", "w"], ["a"]),
]


def make_rows(ties: bool = False) -> list[dict[str, Any]]:
    rows = []
    for qid, ranking, gold in CASES:
        ranking, gold = list(ranking), list(gold)  # rows are mutated by some tests
        n = len(ranking)
        scores = [1.0 - i / n for i in range(n)]
        if ties:
            scores[-1] = scores[-2]
        rows.append({"question_id": qid, "question_type": "t", "ranked_session_ids": ranking,
                     "scores": scores, "gold": {"answerable": gold},
                     "metrics": {"answerable": question_metrics(gold, ranking, KS)}})
    rows.append({"question_id": "q_skipped", "question_type": "t",
                 "ranked_session_ids": ["a"], "scores": [1.0], "gold": {"answerable": None},
                 "metrics": {"answerable": None}})
    return rows


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(k, raising=False)


def test_run_and_qrels_format() -> None:
    out = trec_export(make_rows(), tag="t1")
    assert out.score_source == "stored" and out.n_questions == len(CASES)
    lines = [ln.split() for ln in out.run_text.splitlines()]
    assert all(len(p) == 6 and p[1] == "Q0" and p[5] == "t1" for p in lines)
    assert "q_skipped" not in out.run_text and "q_skipped" not in out.qrels_text
    for qid, ranking, _ in CASES:
        mine = [p for p in lines if p[0] == qid]
        assert [p[2] for p in mine] == ranking
        assert [int(p[3]) for p in mine] == list(range(1, len(ranking) + 1))
        sc = [float(p[4]) for p in mine]
        assert all(a > b for a, b in zip(sc, sc[1:], strict=False))
    qrels = [ln.split() for ln in out.qrels_text.splitlines()]
    assert ["q_unranked", "0", "ghost", "1"] in qrels  # never-ranked gold is judged too
    assert len(qrels) == sum(len(g) for _, _, g in CASES)


def test_ties_fall_back_to_rank_scores_or_are_refused() -> None:
    out = trec_export(make_rows(ties=True))
    assert out.score_source == "rank" and "tie" in out.reason
    first = [ln.split() for ln in out.run_text.splitlines() if ln.startswith("q_first ")]
    assert [float(p[4]) for p in first] == [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    with pytest.raises(DataError, match="tie or increase"):
        trec_export(make_rows(ties=True), scores="stored")
    bad = make_rows()
    bad[0]["ranked_session_ids"][1] = "has space"
    with pytest.raises(DataError, match="whitespace"):
        trec_export(bad)


def test_parity_with_ir_measures(tmp_path: Path) -> None:
    ir = pytest.importorskip("ir_measures")
    from ir_measures import RR, R, Success, nDCG

    rows = make_rows()
    out = trec_export(rows)
    (tmp_path / "r.run").write_text(out.run_text)
    (tmp_path / "r.qrels").write_text(out.qrels_text)
    measures = [RR] + [m @ k for k in KS for m in (Success, R, nDCG)]
    got: dict[tuple[str, str], float] = {}
    for m in ir.iter_calc(measures, ir.read_trec_qrels(str(tmp_path / "r.qrels")),
                          ir.read_trec_run(str(tmp_path / "r.run"))):
        got[(m.query_id, str(m.measure))] = m.value
    agree = differ = 0
    for r in rows[: len(CASES)]:
        qid, ours = r["question_id"], r["metrics"]["answerable"]
        gold, ranking = set(r["gold"]["answerable"]), r["ranked_session_ids"]
        assert ours["mrr"] == pytest.approx(got[(qid, "RR")])
        for k in KS:
            assert ours[f"recall_any@{k}"] == got[(qid, f"Success@{k}")]
            assert ours[f"hit@{k}"] == got[(qid, f"Success@{k}")]
            assert ours[f"recall_all@{k}"] == float(got[(qid, f"R@{k}")] == 1.0)
            # nDCG: equal exactly where the two discounts give the same normalised value:
            # no gold in the top k, or the top k is ideal (min(|gold|, k) gold ids first)
            top = ranking[:k]
            n_ideal = min(len(gold), k)
            ideal = all(s in gold for s in top[:n_ideal])
            if not gold & set(top) or ideal:
                assert ours[f"ndcg_any@{k}"] == pytest.approx(got[(qid, f"nDCG@{k}")])
                agree += 1
            else:
                assert ours[f"ndcg_any@{k}"] != pytest.approx(got[(qid, f"nDCG@{k}")])
                differ += 1
    assert agree and differ


def test_hand_computed_dcg_variants_differ() -> None:
    """One gold id at rank 2 (q_second), k = 5: the official LongMemEval DCG gives rank 2 the
    full weight 1/log2(2) = 1, standard nDCG gives 1/log2(3); both ideal DCGs are 1."""
    ir = pytest.importorskip("ir_measures")
    from ir_measures import nDCG

    row = next(r for r in make_rows() if r["question_id"] == "q_second")
    official = 1 / math.log2(2) / 1.0
    standard = 1 / math.log2(2 + 1) / 1.0
    assert row["metrics"]["answerable"]["ndcg_any@5"] == pytest.approx(official) == 1.0
    out = trec_export([row])
    qrels = list(ir.read_trec_qrels(_lines(out.qrels_text)))
    run = list(ir.read_trec_run(_lines(out.run_text)))
    assert ir.calc_aggregate([nDCG @ 5], qrels, run)[nDCG @ 5] == pytest.approx(standard)
    # multi-gold q_multi (gold at 2, 4, 6; |gold| = 3), k = 5:
    # ours  = (1/log2 2 + 1/log2 4) / (1 + 1/log2 2 + 1/log2 3)
    # TREC  = (1/log2 3 + 1/log2 5) / (1/log2 2 + 1/log2 3 + 1/log2 4)
    multi = next(r for r in make_rows() if r["question_id"] == "q_multi")
    ours = (1 + 1 / 2) / (1 + 1 + 1 / math.log2(3))
    trec = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3) + 1 / 2)
    assert multi["metrics"]["answerable"]["ndcg_any@5"] == pytest.approx(ours)
    out = trec_export([multi])
    val = ir.calc_aggregate([nDCG @ 5], list(ir.read_trec_qrels(_lines(out.qrels_text))),
                            list(ir.read_trec_run(_lines(out.run_text))))[nDCG @ 5]
    assert val == pytest.approx(trec)


def _lines(text: str) -> Any:
    import io

    return io.StringIO(text)


def test_cli_trec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "run.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in make_rows()))
    Path(str(p) + ".summary.json").write_text(json.dumps(
        {"dataset_sha256": "a" * 64, "retriever": "hybrid"}))
    args = ["trec", str(p), "--trec-run", str(tmp_path / "o.run"),
            "--trec-qrels", str(tmp_path / "o.qrels")]
    assert cli.main(args) == 0
    assert (tmp_path / "o.run").read_text().splitlines()[0].endswith(" hybrid")
    assert "score column: stored" in capsys.readouterr().out
    assert cli.main(args) == 2
    out = export_run(p, run_out=None, qrels_out=tmp_path / "only.qrels", protocol="answerable")
    assert (tmp_path / "only.qrels").read_text() == out.qrels_text
