"""Abstention on real data: the production gate applied at session level.

For every question, its haystack sessions are the memories (user text for LongMemEval; every
turn for LoCoMo, which has no chat roles), searched with the production code
(engram_eval.production.search) and the pinned production settings. Unanswerable questions:
LongMemEval ``_abs`` questions, LoCoMo category 5 (adversarial). Answerable: the rest with
gold sessions (LongMemEval ``answerable`` protocol; LoCoMo ``locomo_no_adversarial``:
evidence sessions of the items of categories 1-4).

For each cut-off c in the sweep: answerable acceptance rate (at least one session passes c),
top-accepted-is-gold rate (the best accepted session is gold; denominator: all answerable
questions), unanswerable abstention rate (nothing passes c). The excerpt retry is applied as
the gate applies it: confidence = max(full, excerpt), which passes c exactly when the gate
at c would accept. The cut-off is a relevance threshold, not a probability of correctness.

    python benchmarks/production_retrieval/abstention_sweep.py DATA --dataset-label \
        "LongMemEval S (dev split)" --output results/production/abstention_longmemeval_s_dev.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import _common

CUTS = [round(0.05 * i, 2) for i in range(1, 20)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("dataset")
    p.add_argument("--dataset-label", required=True,
                   help='e.g. "LongMemEval S cleaned, development split"')
    p.add_argument("--output", required=True, help="JSON (must not exist); PNG written beside")
    p.add_argument("--max-questions", type=int, help="first N questions only (wiring checks)")
    p.add_argument("--cache-dir", help="embedding cache (default ~/.cache/engram-eval)")
    p.add_argument("--no-cache", action="store_true")
    _common.add_settings_arguments(p)
    args = p.parse_args(argv)
    _common.offline()
    from pathlib import Path

    from engram_eval.data.datasets import load_questions, resolve_format
    from engram_eval.errors import EngramEvalError
    from engram_eval.io import dump_json, exclusive_write, sha256_file
    from engram_eval.production.search import Engine
    from engram_eval.production.sessions import search_all, session_questions
    from engram_eval.provenance.guard import refuse_heldout

    out = Path(args.output)
    png = out.with_suffix(".png")
    try:
        for f in (out, png):
            if f.exists():
                raise EngramEvalError(f"{f} already exists; refusing to overwrite")
        # the one held-out guard: a sweep chooses a cut-off, so it never reads held-out data
        refuse_heldout(args.dataset, "the abstention sweep chooses settings, on tuning data "
                       "only")
        cache = None
        if not args.no_cache:
            from engram_eval.retrieval.cache import VectorCache, default_cache_dir

            cache = VectorCache(args.cache_dir or default_cache_dir())
        engine = Engine(_common.settings_from(args), vector_cache=cache)
        fmt = resolve_format(args.dataset, "auto")
        _, questions = load_questions(args.dataset, fmt)
        questions = list(questions)[: args.max_questions] if args.max_questions else list(questions)
        engine.calibration() if not engine.settings.rerank else None
        t0 = time.time()
        per_q = []
        for sq in session_questions(engine, questions, fmt):
            resp = search_all(engine, sq)
            confs = sorted(((c["confidence"], -c["fused_rank"], c["id"]) for c in resp.candidates),
                           reverse=True)
            per_q.append({"question_id": sq.question.question_id,
                          "unanswerable": sq.unanswerable, "gold": list(sq.gold),
                          "ranked": [[cid, round(cf, 6)] for cf, _, cid in confs]})
        table = []
        ans = [r for r in per_q if not r["unanswerable"]]
        una = [r for r in per_q if r["unanswerable"]]
        for c in CUTS:
            acc = [r for r in ans if r["ranked"] and r["ranked"][0][1] >= c]
            top_gold = [r for r in acc if r["ranked"][0][0] in r["gold"]]
            abst = [r for r in una if not (r["ranked"] and r["ranked"][0][1] >= c)]
            table.append({"cutoff": c,
                          "answerable_acceptance_rate": len(acc) / len(ans) if ans else None,
                          "top_accepted_gold_rate": len(top_gold) / len(ans) if ans else None,
                          "unanswerable_abstention_rate": len(abst) / len(una) if una else None})
        doc = {"kind": "engram-eval/abstention-sweep", "dataset_label": args.dataset_label,
               "dataset": {"name": Path(args.dataset).name,
                           "sha256": sha256_file(args.dataset), "format": fmt},
               "split_note": ("LongMemEval file is a development split: a development "
                              "measurement, not held-out" if fmt != "locomo" else
                              "LoCoMo10, whole file"),
               "denominators": {"answerable": len(ans), "unanswerable": len(una),
                                "rule_unanswerable": ("question id ends with _abs" if fmt !=
                                                      "locomo" else "category 5 (adversarial)"),
                                "rule_answerable": ("answerable protocol gold sessions" if fmt
                                                    != "locomo" else "evidence sessions "
                                                    "resolved, categories 1-4 "
                                                    "(locomo_no_adversarial protocol)"),
                                "top_accepted_gold_rate": "over all answerable questions"},
               "max_questions": args.max_questions, "settings": engine.settings.to_json(),
               "models": [m.to_json(with_path=False) for m in engine.models()],
               "calibration": (None if engine.settings.rerank else
                               {"path": str(engine.calibration_path()),
                                "sha256": sha256_file(engine.calibration_path())}),
               "production_cutoff": engine.settings.min_confidence,
               "threshold_note": "the cut-off is a relevance threshold, not a probability of "
                                 "correctness; the offline calibration was fitted on a small "
                                 "synthetic fixture of short memories",
               "sweep": table, "wall_seconds": round(time.time() - t0, 2),
               "command": sys.argv, "questions": per_q}
        _plot(doc, png)
        exclusive_write(out, dump_json(doc))
    except EngramEvalError as e:
        print(f"abstention sweep: error: {e}", file=sys.stderr)
        return 2
    at = next(r for r in table if abs(r["cutoff"] - engine.settings.min_confidence) < 1e-9)
    print(json.dumps({"denominators": doc["denominators"], "at_production_cutoff": at}, indent=2))
    return 0


def _plot(doc: dict, path) -> None:  # type: ignore[no-untyped-def]
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from engram_eval.io import exclusive_write

    t = doc["sweep"]
    x = [r["cutoff"] for r in t]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    d = doc["denominators"]
    ax.plot(x, [r["answerable_acceptance_rate"] for r in t], "o-",
            label=f"answerable accepted (n={d['answerable']})")
    ax.plot(x, [r["top_accepted_gold_rate"] for r in t], "s-",
            label=f"top accepted session is gold (n={d['answerable']})")
    ax.plot(x, [r["unanswerable_abstention_rate"] for r in t], "^-",
            label=f"unanswerable abstained (n={d['unanswerable']})")
    ax.axvline(doc["production_cutoff"], color="grey", ls="--", lw=1, label="production cut-off")
    ax.set_xlabel("confidence cut-off (relevance threshold, not a probability of correctness)",
                  fontsize=8)
    ax.set_ylabel("rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{doc['dataset_label']}: session-level gate sweep\n"
                 f"{doc['dataset']['name']} sha256 {doc['dataset']['sha256'][:12]}…"
                 + (f", first {doc['max_questions']} questions" if doc["max_questions"] else ""), fontsize=9)
    ax.legend(fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    exclusive_write(path, buf.getvalue())


if __name__ == "__main__":
    sys.exit(main())
