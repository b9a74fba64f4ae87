#!/usr/bin/env python
"""What the rerank stage costs: the same questions run cold (empty vector/score cache), each
pass in a fresh subprocess, once without a rerank and once per cross-encoder backend.

Passes: ``first-stage`` (ONNX fp32 embeddings, ``--no-rerank``), then the same
plus the rerank stage (``--rerank --reranker-model MODEL`` and the rerank options given) on
``onnx`` fp32, ``onnx`` int8 and ``sentence_transformers`` (torch). ONNX exports are made
beforehand, outside the measurement, in each pass's own cache directory. Reported per pass:
s/question, wall, peak RSS and the model seconds per role (``embedding``, ``rerank``: the
runner's own counters); per rerank pass: its rerank seconds per question and their ratio to
the first stage's s/question (``rerank_over_first_stage``; with ``--repeats N``, each pass runs
N times cold and both are medians over the repeats), and the paired metrics against the
onnx fp32 rerank pass (``engram-eval compare``, ``--protocol``: answerable by default,
``locomo`` for a LoCoMo file). Not a test: it
measures, never asserts; the output JSON starts with a provenance header.

    python benchmarks/longmemeval/speed_rerank.py DATA --reranker-model MODEL --output OUT.json \\
        [--limit 30] [--scratch DIR] [run options, e.g. --rerank-unit turn --fusion-alpha 0.8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import _scale_common as common
from speed_variants import _paired  # the paired metrics of a variant against its baseline

from engram_eval.retrieval.cache import CACHE_FILE
from engram_eval.retrieval.flags import ArgumentParser, output_file

PASSES = {"rerank-onnx-fp32": ("onnx", "fp32"), "rerank-onnx-int8": ("onnx", "int8"),
          "rerank-torch-fp32": ("sentence_transformers", "fp32"),
          # a model shipped in the package (--shipped NAME), in its stored form and with its
          # card's settings for every rerank option not given
          "rerank-shipped": ("onnx", "shipped")}


def _prepare(cache: Path, embedding_model: str, reranker: tuple[str, str, str] | None
             ) -> dict[str, Any]:
    from engram_eval.retrieval.models import resolve_model
    from engram_eval.retrieval.onnx_export import export_onnx, export_reranker_onnx

    ref = export_onnx(resolve_model(embedding_model, "embedding"), "fp32", cache)
    out = {"embedding": {"path": ref.path, "sha256": ref.sha256}}
    if reranker and reranker[2] == "shipped":
        rr = resolve_model(reranker[0], "reranker")  # stored as an ONNX graph: no export
        out["reranker"] = {"path": rr.path, "sha256": rr.sha256}
    elif reranker and reranker[1] == "onnx":
        rr = export_reranker_onnx(resolve_model(reranker[0], "reranker"), reranker[2], cache)
        out["reranker"] = {"path": rr.path, "sha256": rr.sha256}
    return out


def main() -> int:
    ap = ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("--output", required=True, type=output_file,
                    help="measurement JSON (must not exist)")
    ap.add_argument("--reranker-model", required=True, help="cross-encoder directory")
    ap.add_argument("--shipped", default="", help="a shipped reranker's name (for the "
                    "rerank-shipped pass)")
    ap.add_argument("--scratch", help="directory for scratch rows and caches")
    ap.add_argument("--limit", type=int, help="first N questions only")
    ap.add_argument("--passes", default=",".join(PASSES), help="rerank passes to make")
    ap.add_argument("--embedding-model", default="all-MiniLM-L6-v2")
    ap.add_argument("--protocol", default="answerable",
                    help="denominator of the paired metrics (locomo for a LoCoMo file)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="cold runs of each pass, each in a fresh process and cache; the "
                    "ratios use the medians (default 1)")
    args, extra = ap.parse_known_args()
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    doc = common.claim(args.output)  # refused if it exists; progress in OUTPUT.partial
    names = [p.strip() for p in args.passes.split(",") if p.strip()]
    unknown = [p for p in names if p not in PASSES]
    if unknown:
        raise SystemExit(f"unknown pass(es) {unknown}; choose from {sorted(PASSES)}")
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="engram-speed-rerank-"))
    scratch.mkdir(parents=True, exist_ok=True)
    run_opts = list(extra) + (["--limit", str(args.limit)] if args.limit else [])
    run_opts += ["--embedding-model", args.embedding_model, "--embedding-backend", "onnx"]
    header = common.provenance_header(__file__, {"dataset": args.dataset},
                                      {"passes": ["first-stage", *names], "limit": args.limit,
                                       "repeats": args.repeats, "run_options": run_opts,
                                       "reranker_model": args.reranker_model,
                                       "shipped": args.shipped or None})
    out: dict[str, Any] = {**header, "benchmark": "rerank stage cost, cold cache",
                           "passes": {}}
    plan: list[tuple[str, tuple[str, str, str] | None]] = [("first-stage", None)]
    if "rerank-shipped" in names and not args.shipped:
        raise SystemExit("the rerank-shipped pass needs --shipped NAME")
    plan += [(n, (args.shipped if PASSES[n][1] == "shipped" else args.reranker_model,
                  *PASSES[n])) for n in names]
    first_spq = None
    for name, rr in plan:
        opts = list(run_opts)
        if rr is None:
            opts += ["--no-rerank"]  # the package default reranks chats
        elif rr[2] == "shipped":
            opts += ["--rerank", "--reranker-model", rr[0]]
        elif rr:
            opts += ["--rerank", "--reranker-model", rr[0], "--reranker-backend", rr[1],
                     "--reranker-precision", rr[2]]
        runs, exports = [], {}
        for r in range(args.repeats):  # repeat r: its own process, cache and rows
            tag = name if r == 0 else f"{name}-r{r + 1}"
            cache = scratch / f"cache-{tag}"
            if (cache / CACHE_FILE).exists():
                raise SystemExit(f"{cache} holds vectors; a cold pass needs an empty cache")
            exports = _prepare(cache, args.embedding_model, rr)
            runs.append(common.one_pass(tag, args.dataset, scratch, cache, opts))
        res = runs[0]
        spq = statistics.median(x["seconds_per_question"] for x in runs)
        entry: dict[str, Any] = {"exports": exports, "cold": res}
        if args.repeats > 1:
            entry["cold_repeats"] = runs[1:]
            entry["median_seconds_per_question"] = round(spq, 3)
        if rr is None:
            first_spq = spq
        else:
            per_q = statistics.median(
                x["model_stats"].get("rerank", {}).get("model_seconds", 0.0) / x["questions"]
                for x in runs)
            entry["rerank_seconds_per_question"] = round(per_q, 3)
            entry["rerank_over_first_stage"] = round(per_q / first_spq, 3) if first_spq else None
            if name != "rerank-onnx-fp32" and "rerank-onnx-fp32" in out["passes"]:
                entry["paired_vs_rerank_onnx_fp32"] = _paired(
                    scratch / "rerank-onnx-fp32.jsonl", scratch / f"{name}.jsonl",
                    args.protocol)
        out["passes"][name] = entry
        shown = {"seconds_per_question": [x["seconds_per_question"] for x in runs],
                 **{k: entry[k] for k in ("rerank_seconds_per_question",
                                          "rerank_over_first_stage") if k in entry}}
        print(json.dumps({name: shown}), flush=True)
        doc.save(out)
    doc.finish(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
