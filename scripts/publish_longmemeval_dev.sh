#!/usr/bin/env bash
# Re-create every published LongMemEval_S *development-split* result and verify each one.
#
#   scripts/publish_longmemeval_dev.sh DATA CACHE [OUTDIR]
#
# DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (sha256 8aecf3b5...).
# CACHE: embedding cache directory (only changes speed). OUTDIR: default
# results/longmemeval_s_dev. Relative paths are taken from the directory you call it from.
#
# Runs (each: `engram-eval run`, `verify --dataset`, `compress` -> RUN.jsonl.gz + sidecar
# RUN.jsonl.gz.metadata.json + summary RUN.jsonl.gz.summary.json):
#   flat_bm25             --retriever flat-bm25 (the reference baseline)
#   hybrid_default        package defaults
#   dense_only            --retriever dense
#   bm25_only             --retriever bm25
#   hybrid_rrf_landed     the landed RRF defaults, stated explicitly (LANDED below)
#   hybrid_temporal_flip  the defaults with the temporal step flipped ($TEMPORAL_FLIP_ARGS;
#                         default: the opposite of the package default, `--temporal` when
#                         the default has it off)
# then: ABLATIONS.md (from the summaries), MISSES_hybrid_default.md, analyze_hybrid_default.json
# and curves_hybrid_default.png (each with its .metadata.json sidecar), dense_pieces.json.
# Refuses to start when OUTDIR already holds any of these files: nothing is overwritten.
#
# Smoke-test overrides (see scripts/_publish_lib.sh): ENGRAM_EVAL, PUBLISH_PYTHON,
# PUBLISH_RETRIEVER, PUBLISH_EXTRA_ARGS; TEMPORAL_FLIP_ARGS; PUBLISH_LABEL (the dataset label
# of ABLATIONS.md); PUBLISH_SKIP_DENSE_PIECES=1 skips dense_pieces.json.
set -euo pipefail
# shellcheck source=scripts/_publish_args.sh
source "$(dirname "$0")/_publish_args.sh" results/longmemeval_s_dev "$@"
FORMAT=longmemeval
LABEL="${PUBLISH_LABEL:-development split of LongMemEval_S (not held out: the data was looked at while building the retriever)}"
# shellcheck source=scripts/_publish_lib.sh
source scripts/_publish_lib.sh

LANDED=(--fusion rrf --normalisation minmax --rrf-k 60
        --use-dense --use-bm25-user --use-bm25-assistant
        --no-use-bm25-turn --no-use-bm25-prf --no-use-dense-rocchio
        --weight-dense 1 --weight-bm25-user 1 --weight-bm25-assistant 0.5
        --weight-bm25-turn 0 --weight-bm25-prf 0 --weight-dense-rocchio 0
        --temporal --temporal-boost 1.25)
RUNS=(flat_bm25 hybrid_default dense_only bm25_only hybrid_rrf_landed hybrid_temporal_flip)
DERIVED=(ABLATIONS.md MISSES_hybrid_default.md analyze_hybrid_default.json
         curves_hybrid_default.png)
if [ "${PUBLISH_SKIP_DENSE_PIECES:-0}" != 1 ]; then DERIVED+=(dense_pieces.json); fi

refuse_planned
temporal_flip

publish flat_bm25            --retriever flat-bm25
publish hybrid_default
publish dense_only           --retriever dense
publish bm25_only            --retriever bm25
publish hybrid_rrf_landed    "${LANDED[@]}"
publish hybrid_temporal_flip "${FLIP[@]}"
verify_all  # every compressed result again, against the dataset

"$PUBLISH_PYTHON" scripts/ablation_table.py "$OUT" --label "$LABEL" --output "$OUT/ABLATIONS.md"
"$PUBLISH_PYTHON" scripts/misses.py "$OUT/hybrid_default.jsonl.gz" \
  --output "$OUT/MISSES_hybrid_default.md"
"$ENGRAM_EVAL" analyze "$OUT/hybrid_default.jsonl.gz" --output "$OUT/analyze_hybrid_default.json" \
  | tail -n 3
"$ENGRAM_EVAL" plot "$OUT/hybrid_default.jsonl.gz" --output "$OUT/curves_hybrid_default.png"
if [ "${PUBLISH_SKIP_DENSE_PIECES:-0}" != 1 ]; then
  "$PUBLISH_PYTHON" benchmarks/longmemeval/dense_pieces.py "$DATA" \
    --output "$OUT/dense_pieces.json" > /dev/null
fi
"$PUBLISH_PYTHON" scripts/derived_sidecars.py "$OUT"
echo "published: $OUT"
