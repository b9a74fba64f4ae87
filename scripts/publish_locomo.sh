#!/usr/bin/env bash
# Re-create the published LoCoMo10 evidence-session retrieval runs and verify them.
#
#   scripts/publish_locomo.sh DATA CACHE [OUTDIR]
#
# DATA: ../shared/data/locomo/locomo10.json (sha256 79fa87e9...; CC BY-NC 4.0). CACHE:
# embedding cache directory (only changes speed). OUTDIR: default results/locomo10.
# Relative paths are taken from the directory you call it from.
#
# Runs (each: `engram-eval run`, `verify --dataset`, `compress` -> RUN.jsonl.gz + sidecar
# RUN.jsonl.gz.metadata.json + summary RUN.jsonl.gz.summary.json):
#   bm25_only, dense_only, hybrid_default (package defaults), hybrid_temporal_flip (the
#   defaults with the temporal step flipped: $TEMPORAL_FLIP_ARGS, default the opposite of the
#   package default), flat_bm25
# then: ABLATIONS.md, analyze_hybrid_default.json, curves_hybrid_default.png and
# compare_hybrid_default_vs_bm25_only.{json,png} (paired, deltas = hybrid_default - bm25_only;
# resampled and tested by conversation, --cluster id-prefix: QA items of one conversation are
# not independent),
# each with its .metadata.json sidecar. Refuses to start when OUTDIR already holds any of
# these files: nothing is overwritten.
#
# Smoke-test overrides (see scripts/_publish_lib.sh): ENGRAM_EVAL, PUBLISH_PYTHON,
# PUBLISH_RETRIEVER, PUBLISH_EXTRA_ARGS; TEMPORAL_FLIP_ARGS; PUBLISH_LABEL.
set -euo pipefail
# shellcheck source=scripts/_publish_args.sh
source "$(dirname "$0")/_publish_args.sh" results/locomo10 "$@"
FORMAT=locomo
LABEL="${PUBLISH_LABEL:-LoCoMo10, all 10 conversations (not held out: the data was looked at while building the retriever)}"
# shellcheck source=scripts/_publish_lib.sh
source scripts/_publish_lib.sh

RUNS=(bm25_only dense_only hybrid_default hybrid_temporal_flip flat_bm25)
DERIVED=(ABLATIONS.md analyze_hybrid_default.json curves_hybrid_default.png
         compare_hybrid_default_vs_bm25_only.json compare_hybrid_default_vs_bm25_only.png)

refuse_planned
temporal_flip

publish bm25_only            --retriever bm25
publish dense_only           --retriever dense
publish hybrid_default
publish hybrid_temporal_flip "${FLIP[@]}"
publish flat_bm25            --retriever flat-bm25
verify_all  # every compressed result again, against the dataset

"$PUBLISH_PYTHON" scripts/ablation_table.py "$OUT" --label "$LABEL" --output "$OUT/ABLATIONS.md"
"$ENGRAM_EVAL" analyze "$OUT/hybrid_default.jsonl.gz" --output "$OUT/analyze_hybrid_default.json" \
  | tail -n 3
"$ENGRAM_EVAL" plot "$OUT/hybrid_default.jsonl.gz" --output "$OUT/curves_hybrid_default.png"
"$ENGRAM_EVAL" compare "$OUT/bm25_only.jsonl.gz" "$OUT/hybrid_default.jsonl.gz" --cluster id-prefix \
  --output "$OUT/compare_hybrid_default_vs_bm25_only.json" \
  --plot "$OUT/compare_hybrid_default_vs_bm25_only.png" | tail -n 5
"$PUBLISH_PYTHON" scripts/derived_sidecars.py "$OUT"
echo "published: $OUT"
