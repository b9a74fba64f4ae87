"""engram-eval compare: McNemar by formula, fixed-seed bootstrap, flips, segments, refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from run_files import SHA, binary, write_run

from engram_eval.analysis.compare import (
    cluster_bootstrap_deltas,
    compare_runs,
    format_report,
    is_binary_metric,
    mcnemar_exact,
    sign_flip_test,
)
from engram_eval.cli import main as cli
from engram_eval.errors import ConfigError, DataError, ProvenanceError
from engram_eval.runs.reader import read_run


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(k, raising=False)


def test_binary_decided_by_name() -> None:
    assert is_binary_metric("recall_any@5") and is_binary_metric("recall_all@10")
    assert is_binary_metric("hit@1")
    assert not is_binary_metric("mrr") and not is_binary_metric("ndcg_any@5")


def test_mcnemar_matches_hand_computed_p(tmp_path: Path) -> None:
    # 1 lost (1 -> 0), 6 gained (0 -> 1), 3 ties: n = 7 discordant
    a = [1, 0, 0, 0, 0, 0, 0, 1, 1, 0]
    b = [0, 1, 1, 1, 1, 1, 1, 1, 1, 0]
    ra = read_run(write_run(tmp_path / "a.jsonl", binary(a)))
    rb = read_run(write_run(tmp_path / "b.jsonl", binary(b)))
    rep = compare_runs(ra, rb, n_boot=200)
    e = rep["groups"]["overall"]["metrics"]["recall_any@1"]
    n, lo = 7, 1
    p = min(1.0, 2 * sum(math.comb(n, i) for i in range(lo + 1)) / 2 ** n)  # = 16/128
    assert p == pytest.approx(0.125)
    assert e["mcnemar"] == {"lost": 1, "gained": 6, "discordant": 7, "p": pytest.approx(p)}
    assert e["delta"] == pytest.approx((6 - 1) / 10)
    assert e["significant"] is False  # 0.125 >= 0.05
    # mrr has the same 0/1 values but is not binary by name: no McNemar
    assert "mcnemar" not in rep["groups"]["overall"]["metrics"]["mrr"]
    assert rep["flips"]["recall_any@1"] == {"gained": ["q01", "q02", "q03", "q04", "q05", "q06"],
                                            "lost": ["q00"]}
    assert "mrr" not in rep["flips"]
    # mrr (same values, not binary by name) uses the interval: all-positive resamples?
    assert rep["verdict"]["significantly_worse"] == []


def test_mcnemar_formula_more_cases() -> None:
    for lost, gained in [(0, 0), (0, 5), (2, 9), (10, 10), (3, 0)]:
        a = [1] * lost + [0] * gained + [1, 0]
        b = [0] * lost + [1] * gained + [1, 0]
        n = lost + gained
        want = 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, i) for i in
                                                  range(min(lost, gained) + 1)) / 2 ** n)
        assert mcnemar_exact(a, b)["p"] == pytest.approx(want)


def test_bootstrap_interval_reproduced_with_fixed_seed(tmp_path: Path) -> None:
    rng = np.random.default_rng(123)
    n = 30
    a_vals = rng.random(n).round(3)
    b_vals = rng.random(n).round(3)
    types = ["x" if i % 3 else "y" for i in range(n)]
    ra = read_run(write_run(tmp_path / "a.jsonl", [{"ndcg_any@5": float(v)} for v in a_vals],
                            types=types))
    rb = read_run(write_run(tmp_path / "b.jsonl", [{"ndcg_any@5": float(v)} for v in b_vals],
                            types=types))
    rep = compare_runs(ra, rb, n_boot=500, seed=7)
    rep2 = compare_runs(ra, rb, n_boot=500, seed=7)
    assert rep["groups"] == rep2["groups"]
    d = np.array([float(y) - float(x) for x, y in zip(a_vals, b_vals, strict=True)])
    for group, mask in (("overall", [True] * n), ("y", [t == "y" for t in types])):
        dg = d[np.array(mask)]
        # the documented procedure, written out independently: fresh rng(seed) per group
        g_rng = np.random.default_rng(7)
        idx = g_rng.integers(0, len(dg), size=(500, len(dg)))
        reps = np.array([dg[idx[r]].mean() for r in range(500)])
        lo, hi = np.quantile(reps, [0.025, 0.975])
        e = rep["groups"][group]["metrics"]["ndcg_any@5"]
        assert e["ci"] == pytest.approx([lo, hi], abs=1e-12)
        assert e["delta"] == pytest.approx(dg.mean())
        assert lo <= dg.mean() <= hi
        assert e["significant"] == bool(lo > 0 or hi < 0)
    other = compare_runs(ra, rb, n_boot=500, seed=8)
    assert other["groups"]["overall"]["metrics"]["ndcg_any@5"]["ci"] != \
        rep["groups"]["overall"]["metrics"]["ndcg_any@5"]["ci"]


def test_constant_difference_gives_a_point_interval(tmp_path: Path) -> None:
    ra = read_run(write_run(tmp_path / "a.jsonl", [{"mrr": 0.25}] * 8))
    rb = read_run(write_run(tmp_path / "b.jsonl", [{"mrr": 0.5}] * 8))
    e = compare_runs(ra, rb, n_boot=100)["groups"]["overall"]["metrics"]["mrr"]
    assert e["ci"] == pytest.approx([0.25, 0.25])
    assert e["significant"] is True
    assert compare_runs(ra, rb, n_boot=100)["verdict"]["significantly_better"] == ["mrr"]
    assert compare_runs(rb, ra, n_boot=100)["verdict"]["significantly_worse"] == ["mrr"]


def test_segment_consistency_flags_a_gain_that_flips(tmp_path: Path) -> None:
    # order segments of 4: gains +3, +3, then a segment that loses 1 -> overall > 0, not robust
    a = [0, 0, 0, 0] + [0, 0, 0, 0] + [1, 0, 0, 0]
    b = [1, 1, 1, 0] + [1, 1, 1, 0] + [0, 0, 0, 0]
    ra = read_run(write_run(tmp_path / "a.jsonl", binary(a)))
    rb = read_run(write_run(tmp_path / "b.jsonl", binary(b)))
    rep = compare_runs(ra, rb, n_boot=50, segments=3, segment_by="order")
    s = rep["segment_consistency"]["by_metric"]["recall_any@1"]
    assert s["deltas"] == pytest.approx([0.75, 0.75, -0.25])
    assert s["flipped_segments"] == [2] and s["robust"] is False and s["verdict"] == "not robust"
    rep = compare_runs(ra, rb, n_boot=50, segments=2, segment_by="order")
    s = rep["segment_consistency"]["by_metric"]["recall_any@1"]
    # halves: d = [1,1,1,0,1,1] and [1,0,-1,0,0,0]: 5/6 and 0 (a zero segment is no flip)
    assert s["deltas"] == pytest.approx([5 / 6, 0.0]) and s["robust"] is True
    same = compare_runs(ra, ra, n_boot=50)
    assert same["segment_consistency"]["by_metric"]["recall_any@1"]["verdict"] == "no difference"
    # hash segments: fixed by sha256(question_id), sizes from numpy.array_split
    h = compare_runs(ra, rb, n_boot=50, segments=5)
    assert h["segment_consistency"]["segments"] == [3, 3, 2, 2, 2]


def test_refuses_different_datasets(tmp_path: Path) -> None:
    ra = read_run(write_run(tmp_path / "a.jsonl", binary([1, 0])))
    rb = read_run(write_run(tmp_path / "b.jsonl", binary([1, 1]), sha="b" * 64))
    with pytest.raises(ProvenanceError, match="different datasets"):
        compare_runs(ra, rb)
    rc = read_run(write_run(tmp_path / "c.jsonl", binary([1, 1]), summary=False))
    with pytest.raises(ProvenanceError, match="sha256"):
        compare_runs(ra, rc)


def test_dataset_hash_from_sidecar_and_disagreement(tmp_path: Path) -> None:
    p = write_run(tmp_path / "a.jsonl", binary([1, 0]), summary=False)
    Path(str(p) + ".metadata.json").write_text(json.dumps(
        {"dataset": {"name": "d.json", "sha256": SHA}, "fingerprint": "f"}))
    assert read_run(p).dataset_sha256 == SHA
    Path(str(p) + ".summary.json").write_text(json.dumps({"dataset_sha256": "c" * 64}))
    with pytest.raises(ProvenanceError, match="summary and sidecar"):
        read_run(p)


def test_refuses_different_question_sets_and_gold(tmp_path: Path) -> None:
    ra = read_run(write_run(tmp_path / "a.jsonl", binary([1, 0, 1])))
    rb = read_run(write_run(tmp_path / "b.jsonl", binary([1, 0, 1]), ids=["q00", "q01", "zz"]))
    with pytest.raises(ProvenanceError, match="different question sets"):
        compare_runs(ra, rb)
    rc = read_run(write_run(tmp_path / "c.jsonl", binary([1, 0]), ids=["q00", "q01"]))
    with pytest.raises(ProvenanceError, match="different question sets"):
        compare_runs(ra, rc)
    rd = read_run(write_run(tmp_path / "d.jsonl", binary([1, 0, 1]),
                            gold=[["s1"], ["s2"], ["s1"]]))
    with pytest.raises(ProvenanceError, match="gold"):
        compare_runs(ra, rd)


def test_non_binary_value_for_a_binary_metric_is_an_error(tmp_path: Path) -> None:
    ra = read_run(write_run(tmp_path / "a.jsonl", [{"hit@1": 0.5}, {"hit@1": 1.0}]))
    rb = read_run(write_run(tmp_path / "b.jsonl", [{"hit@1": 1.0}, {"hit@1": 1.0}]))
    with pytest.raises(DataError, match="binary metric"):
        compare_runs(ra, rb)


def test_per_type_groups(tmp_path: Path) -> None:
    types = ["x", "y", "x", "y"]
    ra = read_run(write_run(tmp_path / "a.jsonl", binary([0, 0, 1, 1]), types=types))
    rb = read_run(write_run(tmp_path / "b.jsonl", binary([1, 0, 1, 0]), types=types))
    g = compare_runs(ra, rb, n_boot=50)["groups"]
    assert list(g) == ["overall", "x", "y"]
    assert g["x"]["n"] == 2 and g["x"]["metrics"]["recall_any@1"]["delta"] == pytest.approx(0.5)
    assert g["y"]["metrics"]["recall_any@1"]["delta"] == pytest.approx(-0.5)
    assert g["overall"]["metrics"]["recall_any@1"]["delta"] == pytest.approx(0.0)


def test_cli_compare_writes_report_and_plot(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    types = ["x", "y"] * 5
    a = write_run(tmp_path / "a.jsonl", [{"recall_any@1": float(v), "recall_any@5": 1.0,
                                          "recall_all@5": float(v), "ndcg_any@5": v / 2}
                                         for v in [1, 0] * 5], types=types, retriever="dense")
    b = write_run(tmp_path / "b.jsonl", [{"recall_any@1": 1.0, "recall_any@5": 1.0,
                                          "recall_all@5": 1.0, "ndcg_any@5": 0.75}
                                         for _ in range(10)], types=types, retriever="hybrid")
    out, png = tmp_path / "rep.json", tmp_path / "delta.png"
    args = ["compare", str(a), str(b), "--bootstrap", "100", "--output", str(out),
            "--plot", str(png)]
    assert cli.main(args) == 0
    rep: dict[str, Any] = json.loads(out.read_text())
    assert rep["kind"] == "engram-eval compare report" and rep["n"] == 10
    assert rep["a"]["retriever"] == "dense" and rep["b"]["retriever"] == "hybrid"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "McNemar p=" in capsys.readouterr().out
    assert cli.main(args) == 2
    assert "refusing to overwrite" in capsys.readouterr().err


def test_gzipped_rows_and_summary_rows_hash(tmp_path: Path) -> None:
    import gzip
    import hashlib

    p = write_run(tmp_path / "a.jsonl", binary([1, 0, 1]))
    raw = p.read_bytes()
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(raw))
    Path(str(gz) + ".summary.json").write_text(json.dumps(
        {"dataset_sha256": SHA, "rows_sha256": hashlib.sha256(raw).hexdigest()}))
    run = read_run(gz)
    assert run.rows_sha256 == hashlib.sha256(raw).hexdigest()
    rep = compare_runs(read_run(p), run, n_boot=10)
    assert rep["groups"]["overall"]["metrics"]["recall_any@1"]["delta"] == 0.0
    Path(str(gz) + ".summary.json").write_text(json.dumps(
        {"dataset_sha256": SHA, "rows_sha256": "0" * 64}))
    with pytest.raises(ProvenanceError, match="rows_sha256"):
        read_run(gz)


def test_cli_writes_derived_sidecars(tmp_path: Path) -> None:
    """The report and the figure each get <file>.metadata.json: the file's sha256, the
    generator modules, the dataset and the input runs (relative paths, hashes)."""
    import hashlib

    pytest.importorskip("matplotlib")
    a = write_run(tmp_path / "a.jsonl", binary([1, 0, 1, 0]))
    b = write_run(tmp_path / "b.jsonl", binary([1, 1, 1, 0]))
    out, png = tmp_path / "r" / "rep.json", tmp_path / "r" / "d.png"
    out.parent.mkdir()
    assert cli.main(["compare", str(a), str(b), "--bootstrap", "20", "--output", str(out),
                     "--plot", str(png), "--plot-metrics", "recall_any@1"]) == 0
    for f, gen in ((out, "engram_eval/analysis/compare.py"), (png, "engram_eval/analysis/plots.py")):
        meta = json.loads(Path(str(f) + ".metadata.json").read_text())
        assert meta["kind"] == "engram-eval/derived" and meta["file"] == f.name
        assert meta["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()
        assert meta["generator"]["path"] == gen
        assert meta["dataset"] == {"name": "d.json", "sha256": SHA}
        for inp, src in zip(meta["inputs"], (a, b), strict=True):
            assert (f.parent / inp["file"]).resolve() == src.resolve()
            assert inp["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    # an existing sidecar alone is enough to refuse, before any work
    out2 = tmp_path / "r" / "rep2.json"
    Path(str(out2) + ".metadata.json").write_text("{}")
    assert cli.main(["compare", str(a), str(b), "--output", str(out2)]) == 2
    assert not out2.exists()
    assert cli.main(["compare", str(a), str(b), "--output", str(out2), "--no-sidecar",
                     "--bootstrap", "20"]) == 0


# -- clustered resampling (cluster="id-prefix") ---------------------------------------------------
def sign_flip_p(sums: list[float]) -> float:
    """The exact sign-flip p written out: share of all 2^G sign vectors at least as extreme."""
    import itertools

    obs = abs(sum(sums))
    vecs = list(itertools.product((-1, 1), repeat=len(sums)))
    hits = sum(1 for e in vecs if abs(sum(x * s for x, s in zip(e, sums, strict=True)))
               >= obs - 1e-12)
    return hits / len(vecs)


def clustered_pair(tmp_path: Path) -> tuple[Any, Any, list[str]]:
    """3 clusters: c1 has 4 questions (3 gained), c2 has 2 (1 gained), c3 has 3 (2 gained), so
    the cluster sums of d for recall_any@1 are S = [3, 1, 2] and the sizes n = [4, 2, 3]."""
    ids = ["c1:q0", "c1:q1", "c1:q2", "c1:q3", "c2:q0", "c2:q1", "c3:q0", "c3:q1", "c3:q2"]
    a = [0, 0, 0, 1, 0, 1, 0, 0, 0]
    b = [1, 1, 1, 1, 1, 1, 1, 1, 0]
    ra = read_run(write_run(tmp_path / "a.jsonl", binary(a), ids=ids))
    rb = read_run(write_run(tmp_path / "b.jsonl", binary(b), ids=ids))
    return ra, rb, ids


def test_sign_flip_test_by_formula() -> None:
    p, info = sign_flip_test(np.array([[3.0], [1.0], [2.0]]), seed=0)
    # sign sums: +-6 (2 of 8 vectors reach |6|), +-4, +-2, 0, 0
    assert p[0] == 2 / 8 == sign_flip_p([3, 1, 2])
    assert info == {"method": "exact sign-flip", "sign_vectors": 8, "min_p": 2 / 8}
    p, _ = sign_flip_test(np.array([[1.0, 3.0, 0.0]] * 5 + [[-1.0, -1.0, 0.0]]), seed=0)
    assert p.tolist() == pytest.approx([sign_flip_p([1] * 5 + [-1]),
                                        sign_flip_p([3] * 5 + [-1]), 1.0])
    # S = [3]*5 + [-1], |sum| = 14: only +-(1,1,1,1,1,1) (14) and +-(1,1,1,1,1,-1) (16)
    assert p[1] == 4 / 2 ** 6


def test_cluster_sign_flip_decides_binary_metrics(tmp_path: Path) -> None:
    ra, rb, _ = clustered_pair(tmp_path)
    rep = compare_runs(ra, rb, n_boot=200, cluster="id-prefix")
    e = rep["groups"]["overall"]["metrics"]["recall_any@1"]
    assert e["delta"] == pytest.approx((3 + 1 + 2) / (4 + 2 + 3))
    assert e["cluster_test"] == {"p": 2 / 8, "clusters": 3, "method": "exact sign-flip",
                                 "sign_vectors": 8, "min_p": 2 / 8}
    # McNemar stays in the entry as description: 6 gained, 0 lost, p = 2 / 2^6 < 0.05 ...
    assert e["mcnemar"] == {"lost": 0, "gained": 6, "discordant": 6, "p": pytest.approx(2 / 64)}
    # ... but with clusters the sign-flip p = 0.25 decides: not significant
    assert e["significant"] is False
    assert rep["verdict"]["significantly_better"] == []
    # mrr (not binary by name): the same cluster test, and no McNemar
    m = rep["groups"]["overall"]["metrics"]["mrr"]
    assert m["cluster_test"]["p"] == 2 / 8 and "mcnemar" not in m and m["significant"] is False
    assert rep["groups"]["overall"]["clusters"] == 3
    st = rep["settings"]
    assert st["resampling_unit"] == "cluster (question id prefix before ':')"
    assert st["cluster"] == "id-prefix" and st["clusters"] == 3
    assert "sign-flip" in st["binary_test"] and "cluster bootstrap" in st["interval"]
    # flips stay per question
    assert rep["flips"]["recall_any@1"]["gained"] == ["c1:q0", "c1:q1", "c1:q2", "c2:q0",
                                                      "c3:q0", "c3:q1"]
    text = format_report(rep)
    assert "resampling unit: cluster (question id prefix before ':'), 3 clusters" in text
    assert "sign-flip p=0.25 (exact) (+6/-0 questions)" in text
    assert "McNemar p=" not in text


def test_cluster_bootstrap_reproduced_with_fixed_seed(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    # rows interleave clusters: numbering is by first appearance in the rows of A
    ids = ["k2:a", "k1:a", "k2:b", "k3:a", "k1:b", "k1:c", "k4:a", "k3:b", "k2:c", "k4:b",
           "k5:a", "k5:b", "k5:c"]
    types = ["x", "y", "x", "x", "y", "x", "y", "x", "y", "x", "y", "x", "x"]
    a_vals = rng.random(len(ids)).round(3)
    b_vals = rng.random(len(ids)).round(3)
    ra = read_run(write_run(tmp_path / "a.jsonl", [{"ndcg_any@5": float(v)} for v in a_vals],
                            ids=ids, types=types))
    rb = read_run(write_run(tmp_path / "b.jsonl", [{"ndcg_any@5": float(v)} for v in b_vals],
                            ids=ids, types=types))
    n_boot, seed = 400, 11
    rep = compare_runs(ra, rb, n_boot=n_boot, seed=seed, cluster="id-prefix")
    d = [float(y) - float(x) for x, y in zip(a_vals, b_vals, strict=True)]
    for group in ("overall", "x", "y"):
        rows = [i for i in range(len(ids)) if group == "overall" or types[i] == group]
        keys = list(dict.fromkeys(ids[i].split(":")[0] for i in rows))
        S = np.array([sum(d[i] for i in rows if ids[i].startswith(k + ":")) for k in keys])
        n = np.array([sum(1 for i in rows if ids[i].startswith(k + ":")) for k in keys])
        G = len(keys)
        idx = np.random.default_rng(seed).integers(0, G, size=(n_boot, G))
        reps = np.array([S[idx[r]].sum() / n[idx[r]].sum() for r in range(n_boot)])
        lo, hi = np.quantile(reps, [0.025, 0.975])
        e = rep["groups"][group]["metrics"]["ndcg_any@5"]
        assert rep["groups"][group]["clusters"] == G
        assert e["ci"] == pytest.approx([lo, hi], abs=1e-12)
        assert e["delta"] == pytest.approx(S.sum() / n.sum())
        assert e["cluster_test"]["p"] == pytest.approx(sign_flip_p(S.tolist()))
        assert e["significant"] == (e["cluster_test"]["p"] < 0.05)
        # the replicates themselves, through the public helper
        got = cluster_bootstrap_deltas(S[:, None], n, n_boot, seed)[:, 0]
        assert got == pytest.approx(reps, abs=1e-12)
    assert rep["groups"]["y"]["clusters"] == 4  # k3 has no question of type y
    assert rep["settings"]["clusters"] == 5


def test_question_mode_report_unchanged(tmp_path: Path) -> None:
    ra, rb, _ = clustered_pair(tmp_path)
    rep = compare_runs(ra, rb, n_boot=100, seed=3)
    assert rep == compare_runs(ra, rb, n_boot=100, seed=3, cluster="question")
    assert list(rep["settings"]) == ["bootstrap", "seed", "confidence", "alpha", "interval",
                                     "segments", "segment_by", "binary_metrics", "binary_test"]
    assert "resampling_unit" not in rep["settings"]
    assert rep["settings"]["binary_test"] == "exact McNemar (scipy.stats.binomtest, two-sided)"
    assert rep["settings"]["interval"] == "paired bootstrap percentile"
    for gv in rep["groups"].values():
        assert list(gv) == ["n", "metrics"]
        for e in gv["metrics"].values():
            assert "cluster_test" not in e
    e = rep["groups"]["overall"]["metrics"]["recall_any@1"]
    assert list(e) == ["a", "b", "delta", "ci", "binary", "mcnemar", "significant"]
    assert e["significant"] is True  # McNemar p = 2/64 decides in question mode
    assert "resampling unit: question" in format_report(rep)


def test_cluster_refusals(tmp_path: Path) -> None:
    ids = ["c1:q0", "lonely", "c2:q0"]
    ra = read_run(write_run(tmp_path / "a.jsonl", binary([0, 1, 0]), ids=ids))
    rb = read_run(write_run(tmp_path / "b.jsonl", binary([1, 1, 0]), ids=ids))
    with pytest.raises(ConfigError, match="'lonely'"):
        compare_runs(ra, rb, n_boot=10, cluster="id-prefix")
    assert compare_runs(ra, rb, n_boot=10)["n"] == 3  # question mode needs no prefix
    with pytest.raises(ConfigError, match="cluster"):
        compare_runs(ra, rb, n_boot=10, cluster="conversation")


def test_cluster_monte_carlo_above_16_clusters(tmp_path: Path) -> None:
    G, seed = 17, 4
    # cluster g has 2 questions; d sums S_g = +1 for 12 clusters, -1 for 3, 0 for 2
    s_want = [1] * 12 + [-1] * 3 + [0] * 2
    ids, a, b = [], [], []
    for g, sg in enumerate(s_want):
        ids += [f"conv-{g}:q0", f"conv-{g}:q1"]
        a += [0 if sg > 0 else 1 if sg < 0 else 0, 0]
        b += [1 if sg > 0 else 0 if sg < 0 else 0, 0]
    ra = read_run(write_run(tmp_path / "a.jsonl", binary(a), ids=ids))
    rb = read_run(write_run(tmp_path / "b.jsonl", binary(b), ids=ids))
    rep = compare_runs(ra, rb, n_boot=50, seed=seed, cluster="id-prefix")
    ct = rep["groups"]["overall"]["metrics"]["recall_any@1"]["cluster_test"]
    S = np.array(s_want, dtype=float)
    e = np.where(np.random.default_rng(seed).random((100000, G)) < 0.5, -1.0, 1.0)
    count = int((np.abs(e @ S) >= abs(S.sum()) - 1e-12).sum())
    assert ct == {"p": pytest.approx((1 + count) / (1 + 100000)), "clusters": 17,
                  "method": "monte-carlo sign-flip", "sign_vectors": 100000,
                  "min_p": 1 / 100001, "seed": seed}
    # sanity: close to the exact value |sum e S| >= 9 over the 2^15 non-zero signs
    assert ct["p"] == pytest.approx(sign_flip_p(s_want[:15]), abs=0.01)
    assert "(Monte-Carlo)" in format_report(rep)
    # 16 clusters: still exact
    rep16 = compare_runs(*(read_run(write_run(tmp_path / f"{x}16.jsonl", binary(v[:32]),
                                              ids=ids[:32])) for x, v in (("a", a), ("b", b))),
                         n_boot=50, cluster="id-prefix")
    ct16 = rep16["groups"]["overall"]["metrics"]["recall_any@1"]["cluster_test"]
    assert ct16["method"] == "exact sign-flip" and ct16["sign_vectors"] == 2 ** 16
    assert ct16["p"] == pytest.approx(sign_flip_p(s_want[:16]))


def test_cluster_sums_all_zero_give_p_one(tmp_path: Path) -> None:
    # every cluster has one gain and one loss: d != 0 per question but every S_g = 0
    for G in (3, 17):
        ids = [f"c{g}:{q}" for g in range(G) for q in ("a", "b")]
        ra = read_run(write_run(tmp_path / f"a{G}.jsonl", binary([1, 0] * G), ids=ids))
        rb = read_run(write_run(tmp_path / f"b{G}.jsonl", binary([0, 1] * G), ids=ids))
        rep = compare_runs(ra, rb, n_boot=30, cluster="id-prefix")
        e = rep["groups"]["overall"]["metrics"]["recall_any@1"]
        assert e["cluster_test"]["p"] == 1.0 and e["significant"] is False
        assert e["delta"] == 0.0 and e["ci"] == [0.0, 0.0]
        assert e["mcnemar"]["discordant"] == 2 * G
    p, _ = sign_flip_test(np.zeros((20, 2)), seed=0)
    assert p.tolist() == [1.0, 1.0]


def test_cli_cluster_flag_reaches_compare_and_plot_label(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    import engram_eval.analysis.compare as compare_mod
    import engram_eval.analysis.plots as plots_mod

    seen: dict[str, Any] = {}
    real_compare, real_chart = compare_mod.compare_runs, plots_mod.delta_chart

    def spy_compare(*args: Any, **kwargs: Any) -> Any:
        seen["cluster"] = kwargs.get("cluster")
        return real_compare(*args, **kwargs)

    def spy_chart(report: Any, metrics: Any, labels: Any, output: Any, **kw: Any) -> Any:
        seen["settings_label"] = labels.settings
        return real_chart(report, metrics, labels, output, **kw)

    monkeypatch.setattr(compare_mod, "compare_runs", spy_compare)
    monkeypatch.setattr(plots_mod, "delta_chart", spy_chart)
    clustered_pair(tmp_path)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    out, png = tmp_path / "rep.json", tmp_path / "d.svg"
    assert cli.main(["compare", str(a), str(b), "--bootstrap", "40", "--cluster", "id-prefix",
                     "--output", str(out), "--plot", str(png), "--no-sidecar",
                     "--plot-metrics", "recall_any@1", "mrr"]) == 0
    assert seen["cluster"] == "id-prefix"
    assert "cluster bootstrap by conversation (id prefix), 3 clusters; exact sign-flip test" \
        in seen["settings_label"]
    assert "McNemar" not in seen["settings_label"]
    rep = json.loads(out.read_text())
    assert rep["settings"]["resampling_unit"] == "cluster (question id prefix before ':')"
    assert "p=0.25" in png.read_text()  # the chart annotates the cluster-test p
    assert "sign-flip p=" in capsys.readouterr().out
    out2, png2 = tmp_path / "rep2.json", tmp_path / "d2.svg"
    assert cli.main(["compare", str(a), str(b), "--bootstrap", "40", "--output", str(out2),
                     "--plot", str(png2), "--no-sidecar"]) == 0
    assert seen["cluster"] == "question" and seen["settings_label"].endswith(
        "95% paired bootstrap, 40 resamples, seed 0; exact McNemar")
    assert "resampling_unit" not in json.loads(out2.read_text())["settings"]
    with pytest.raises(SystemExit) as exc:  # argparse choices: question, id-prefix
        cli.main(["compare", str(a), str(b), "--cluster", "conv"])
    assert exc.value.code == 2
