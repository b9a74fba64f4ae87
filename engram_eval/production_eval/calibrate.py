"""Fit the offline confidence calibration on a (development) fixture.

Data: every (question, memory) pair of every case of the fixture, features
:data:`~engram_eval.production.confidence.FEATURES` computed by the search code from a
store written and reopened as in a run, label 1 when the memory is gold for the question.
Fit: L2-regularised logistic regression (:func:`~.confidence.fit_logistic`). Recorded: the
coefficients, the fixture's sha256, the model files' hash, the settings, the pair counts,
the expected calibration error (10 equal-width bins) and log loss on the fitting data
(in-sample), with a reliability plot.

The calibration file is deterministic (no timestamps), so re-running the fit on the same
inputs rewrites identical bytes.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from engram_eval.io import atomic_write, sha256_file
from engram_eval.production.confidence import (
    CALIBRATION_KIND,
    FEATURES,
    fit_logistic,
    log_loss,
    reliability,
)
from engram_eval.production.search import Engine, memory_signals
from engram_eval.production.store import MemoryStore
from engram_eval.production_eval.fixture import load_fixture


def calibration_data(fixture: str | Path, engine: Engine) -> tuple[np.ndarray, np.ndarray,
                                                                   list[dict[str, Any]]]:
    view, gold = load_fixture(fixture)
    xs, ys, pairs = [], [], []
    with tempfile.TemporaryDirectory(prefix="engram-calibrate-") as tmp:
        for case in view.cases:
            path = Path(tmp) / f"{case.case_id}.sqlite"
            store = MemoryStore.create(path, engine)
            store.add(case.memories)
            store.close()
            with MemoryStore.open(path, engine) as st:
                mems = st.memories()
                pieces, vecs = st.pieces()
                for q in case.queries:
                    sig = memory_signals(engine, q.query, q.now, mems, pieces, vecs)
                    g = set(gold(q.question_id))
                    for i, m in enumerate(mems):
                        x = [float(sig["dense"][i]), float(sig["terms"][i]), float(sig["time"][i])]
                        xs.append(x)
                        ys.append(1 if m.id in g else 0)
                        pairs.append({"question_id": q.question_id, "memory_id": m.id})
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64), pairs


def fit(fixture: str | Path, engine: Engine, l2: float = 1e-3) -> dict[str, Any]:
    x, y, pairs = calibration_data(fixture, engine)
    intercept, w = fit_logistic(x, y, l2=l2)
    z = intercept + x @ w
    prob = 1.0 / (1.0 + np.exp(-z))
    rel = reliability(prob.tolist(), y.astype(int).tolist())
    ref = engine.embedding_ref
    return {
        "kind": CALIBRATION_KIND,
        "version": 1,
        "features": list(FEATURES),
        "formula": "confidence = sigmoid(intercept + dense*w_dense + terms*w_terms + time*w_time)",
        "coefficients": {"intercept": round(intercept, 10),
                         **{f: round(float(v), 10) for f, v in zip(FEATURES, w, strict=True)}},
        "fit": {"method": "logistic regression, Newton/IRLS", "l2": l2,
                "data": "every (question, memory) pair of the fixture; label = memory is gold"},
        "data": {"fixture": Path(fixture).name, "fixture_sha256": sha256_file(fixture),
                 "pairs": int(len(y)), "positives": int(y.sum()),
                 "pairs_sha256": _pairs_hash(pairs, y)},
        "embedding_model": {"name": engine.settings.embedding_model, "sha256": ref.sha256,
                            "revision": ref.revision},
        "settings": engine.settings.retrieval_part(),
        "in_sample": {"ece_10_bins": round(rel["ece"], 6),
                      "log_loss": round(log_loss(prob.tolist(), y.astype(int).tolist()), 6),
                      "reliability": rel["bins"]},
        "note": "min_confidence is a relevance threshold, not a probability of correctness; "
                "ECE is in-sample on a small synthetic fixture",
    }


def _pairs_hash(pairs: list[dict[str, Any]], y: np.ndarray) -> str:
    from engram_eval.io import sha256_json

    return sha256_json([{**p, "label": int(v)} for p, v in zip(pairs, y, strict=True)])


def write_calibration(doc: dict[str, Any], path: str | Path) -> None:
    atomic_write(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")


def reliability_plot(doc: dict[str, Any], path: str | Path) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bins = [b for b in doc["in_sample"]["reliability"] if b["n"]]
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], "--", color="grey", label="perfect calibration")
    ax.plot([b["mean_confidence"] for b in bins], [b["fraction_gold"] for b in bins], "o-",
            label="fixture pairs")
    for b in bins:
        ax.annotate(str(b["n"]), (b["mean_confidence"], b["fraction_gold"]), fontsize=7,
                    textcoords="offset points", xytext=(3, 3))
    ax.set_xlabel("confidence (bin mean)")
    ax.set_ylabel("fraction of pairs that are gold")
    ax.set_title(f"Production confidence calibration (in-sample)\n{doc['data']['fixture']} "
                 f"sha256 {doc['data']['fixture_sha256'][:12]}…, "
                 f"ECE {doc['in_sample']['ece_10_bins']:.3f}", fontsize=9)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight",
                metadata={"Software": None})
    plt.close(fig)
    atomic_write(path, buf.getvalue())
