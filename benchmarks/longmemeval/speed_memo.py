#!/usr/bin/env python
"""Seconds per question of ``memo-lexical`` beside ``bm25`` and the default hybrid, on the
same machine, the same questions, each pass a fresh subprocess with an empty cache.

Passes (every one an ordinary ``engram-eval run`` of the first ``--limit`` questions of each
dataset given): ``memo-lexical``, ``bm25`` and ``default`` (the package default; with
``--embedding-backend sentence_transformers`` as the published default runs, so its cold
pass encodes every user piece). Reported per dataset and pass: the median and mean of the
rows' own ``timing.seconds`` (ranking one question: index + search, what the runner times),
the wall seconds per question of the whole process (start-up, model load and dataset reading
included), peak RSS and the model seconds. Not a test: it measures, never asserts; the
output JSON starts with a provenance header.

    python benchmarks/longmemeval/speed_memo.py --longmemeval LME --locomo LOCOMO \\
        --output OUT.json [--limit 30] [--scratch DIR]
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

from engram_eval.retrieval.flags import ArgumentParser, output_file

PASSES: dict[str, list[str]] = {
    "memo-lexical": ["--retriever", "memo-lexical"],
    "bm25": ["--retriever", "bm25", "--embedding-backend", "sentence_transformers"],
    "default": ["--embedding-backend", "sentence_transformers"],
}


def _row_seconds(rows: Path) -> list[float]:
    return [float(json.loads(line)["timing"]["seconds"])
            for line in rows.read_text(encoding="utf-8").splitlines() if line.strip()]


def main() -> int:
    ap = ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--longmemeval", help="LongMemEval file (e.g. the S development split)")
    ap.add_argument("--locomo", help="LoCoMo file")
    ap.add_argument("--output", required=True, type=output_file,
                    help="measurement JSON (must not exist)")
    ap.add_argument("--scratch", help="directory for scratch rows and caches")
    ap.add_argument("--limit", type=int, default=30, help="first N questions of each dataset")
    args = ap.parse_args()
    doc = common.claim(args.output)  # refused if it exists; progress in OUTPUT.partial
    datasets = {k: v for k, v in (("longmemeval", args.longmemeval),
                                  ("locomo", args.locomo)) if v}
    if not datasets:
        raise SystemExit("give --longmemeval and/or --locomo")
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="engram-speed-memo-"))
    scratch.mkdir(parents=True, exist_ok=True)
    header = common.provenance_header(__file__, datasets, {
        "limit": args.limit, "passes": PASSES,
        "timing": "rows' timing.seconds (median, mean) and process wall / question"})
    from engram_eval.provenance.sidecar import source_hashes
    from engram_eval.provenance.sources import run_sources
    from engram_eval.retrieval.sources import MEMO_LEXICAL_SOURCES

    header["memo_lexical_sources"] = source_hashes(run_sources(MEMO_LEXICAL_SOURCES))
    out: dict[str, Any] = {**header, "benchmark": "seconds per question, cold cache",
                           "results": {}}
    for dname, path in datasets.items():
        out["results"][dname] = {}
        for name, opts in PASSES.items():
            tag = f"{dname}-{name}"
            cache = scratch / f"cache-{tag}"
            if cache.exists():
                raise SystemExit(f"{cache} exists; a cold pass needs an empty cache")
            res = common.one_pass(tag, path, scratch, cache,
                                  [*opts, "--limit", str(args.limit)])
            secs = _row_seconds(scratch / f"{tag}.jsonl")
            entry = {"questions": len(secs),
                     "median_seconds_per_question": round(statistics.median(secs), 4),
                     "mean_seconds_per_question": round(statistics.fmean(secs), 4),
                     "wall_seconds_per_question": res["seconds_per_question"],
                     "wall_seconds": res["wall_seconds"], "peak_rss_gib": res["peak_rss_gib"],
                     "model_inference_seconds": res["model_inference_seconds"],
                     "fingerprint": res["fingerprint"]}
            out["results"][dname][name] = entry
            print(json.dumps({tag: {k: entry[k] for k in (
                "median_seconds_per_question", "wall_seconds_per_question")}}), flush=True)
            doc.save(out)
    doc.finish(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
