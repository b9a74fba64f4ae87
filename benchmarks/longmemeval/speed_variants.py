#!/usr/bin/env python
"""Embedding backend/precision variants: cold vs warm cache, and paired metrics vs torch fp32.

For each variant (``torch-fp32`` = sentence_transformers fp32, the paired baseline and the
backend of the published runs; ``onnx-fp32``, the default embedding backend since this
measurement; ``onnx-int8``, scheme chosen for this CPU) the same run is made twice, each in a fresh
subprocess: cold (an empty vector cache; the ONNX export is prepared beforehand, outside the
measurement, in the same cache directory) and warm (the cache the cold pass filled).
Reported per pass: s/question, wall, peak RSS, model-inference seconds and their share of
wall (``wall_over_inference``: 1.0 = all time in the model). Each variant's cold rows are
compared with torch fp32's, paired over the same questions (``engram-eval compare``:
bootstrap interval, exact McNemar), on the ``answerable`` protocol.

Not a test: it measures, never asserts. The output JSON (written atomically; an existing
one is refused) starts with a provenance header (dataset hash, settings, commit, source
hashes).

    python benchmarks/longmemeval/speed_variants.py DATA --output OUT.json \\
        [--limit 40] [--variants torch-fp32,onnx-fp32,onnx-int8] [--scratch DIR] [run options]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import _scale_common as common

from engram_eval.retrieval.cache import CACHE_FILE
from engram_eval.retrieval.flags import ArgumentParser, output_file

VARIANTS = {"torch-fp32": ("sentence_transformers", "fp32"), "onnx-fp32": ("onnx", "fp32"),
            "onnx-int8": ("onnx", "int8"), "torch-bf16": ("sentence_transformers", "bf16")}
HEADLINE = ("recall_any@1", "recall_any@5", "recall_all@5", "ndcg_any@5")


def _prepare(backend: str, precision: str, cache: Path, model: str) -> dict[str, Any] | None:
    if backend != "onnx":
        return None
    from engram_eval.retrieval.models import resolve_model
    from engram_eval.retrieval.onnx_export import export_onnx

    ref = export_onnx(resolve_model(model, "embedding"), precision, cache)
    return {"path": ref.path, "sha256": ref.sha256, "revision": ref.revision}


def _paired(base: Path, other: Path, protocol: str = "answerable") -> dict[str, Any]:
    from engram_eval.analysis.compare import compare_runs
    from engram_eval.runs.reader import read_run

    rep = compare_runs(read_run(base), read_run(other), protocol=protocol, n_boot=2000)
    overall = rep["groups"]["overall"]
    return {"protocol": protocol, "n": overall["n"], "settings": rep["settings"],
            "metrics": {m: overall["metrics"][m] for m in HEADLINE if m in overall["metrics"]}}


def main() -> int:
    ap = ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("--output", required=True, type=output_file,
                    help="measurement JSON (must not exist)")
    ap.add_argument("--scratch", help="directory for scratch rows and caches")
    ap.add_argument("--limit", type=int, help="first N questions only (smaller version)")
    ap.add_argument("--variants", default="torch-fp32,onnx-fp32,onnx-int8")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm passes")
    ap.add_argument("--embedding-model", default="all-MiniLM-L6-v2")
    args, extra = ap.parse_known_args()
    doc = common.claim(args.output)  # refused if it exists; progress in OUTPUT.partial
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {sorted(VARIANTS)}")
    if "torch-fp32" not in names:
        names.insert(0, "torch-fp32")  # the paired baseline
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="engram-variants-"))
    scratch.mkdir(parents=True, exist_ok=True)
    run_opts = list(extra) + (["--limit", str(args.limit)] if args.limit else [])
    run_opts += ["--embedding-model", args.embedding_model]
    header = common.provenance_header(__file__, {"dataset": args.dataset},
                                      {"variants": names, "limit": args.limit,
                                       "run_options": run_opts, "warm": not args.no_warm})
    out: dict[str, Any] = {**header, "benchmark": "embedding backend variants, cold vs warm",
                           "variants": {}}
    for name in names:
        backend, precision = VARIANTS[name]
        cache = scratch / f"cache-{name}"
        if (cache / CACHE_FILE).exists():
            raise SystemExit(f"{cache} holds vectors; the cold pass needs an empty cache")
        export = _prepare(backend, precision, cache, args.embedding_model)
        opts = run_opts + ["--embedding-backend", backend, "--embedding-precision", precision]
        cold = common.one_pass(f"{name}-cold", args.dataset, scratch, cache, opts)
        print(json.dumps({name: "cold", **{k: cold[k] for k in (
            "seconds_per_question", "inference_share_of_wall", "peak_rss_gib")}}), flush=True)
        entry: dict[str, Any] = {"backend": backend, "precision": precision,
                                 "onnx_export": export, "cold": cold}
        if not args.no_warm:
            warm = common.one_pass(f"{name}-warm", args.dataset, scratch, cache, opts)
            entry["warm"] = warm
            entry["warm_speedup"] = round(cold["wall_seconds"] / warm["wall_seconds"], 2)
        if name != "torch-fp32":
            entry["paired_vs_torch_fp32"] = _paired(scratch / "torch-fp32-cold.jsonl",
                                                    scratch / f"{name}-cold.jsonl")
        out["variants"][name] = entry
        doc.save(out)
    doc.finish(out)
    print(json.dumps({n: {"s_per_q_cold": e["cold"]["seconds_per_question"],
                          "warm_speedup": e.get("warm_speedup")}
                      for n, e in out["variants"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
