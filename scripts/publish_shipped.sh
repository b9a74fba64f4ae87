#!/usr/bin/env bash
# The shipped reranker (issue 26): re-publish the reranked configuration from the weights the
# package ships (engram_eval/models/engram-ce-minilm-v1), so every run here re-executes from a
# fresh clone (`verify --rerun 3`).
#
#   scripts/publish_shipped.sh lme|locomo|speed LME_DATA LOCOMO_DATA CACHE [SCRATCH] [FP32_MODEL]
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split);
# LOCOMO_DATA: ../shared/data/locomo/locomo10.json. Run from the repository root of a clean
# checkout. Nothing in OUT is overwritten; a step whose output exists is skipped.
# FP32_MODEL: the train-reranker output the shipped graph was exported from (the fp32
# comparator; `scripts/publish_rerank.sh` step 5 re-creates it, in float noise).
#
# lme     the LongMemEval dev split's held-out part (re-created from the published manifest and
#         hash-checked), frozen then run once with `--rerank --reranker-model NAME` (the card's
#         settings) and once with the fp32 model at the same settings; both verified with
#         --rerun 3; paired comparisons: shipped vs fp32 (the stored form's check), vs §6's
#         reranked run, vs §1's no-rerank default. Regression checks by the ledger.
# locomo  the LoCoMo held-out conversations (split by conversation, §7), the same `--rerank`:
#         people's chats are not reranked by the card; compared with §7's default and BM25.
# speed   benchmarks/longmemeval/speed_rerank.py on the first 30 questions of the tune part:
#         first stage, the fp32 model (ONNX), the shipped form, each cold in a fresh process.
set -euo pipefail
STEP="$1"
LME="$2"
LOCOMO="$3"
CACHE="$4"
SCRATCH="${5:-$(mktemp -d /tmp/engram-shipped.XXXXXX)}"
FP32="${6:-$SCRATCH/ce_tune}"
OUT=results/shipped_reranker
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
NAME=engram-ce-minilm-v1
COMMON=(--cache-dir "$CACHE" --no-progress)
# the fp32 comparator at the card's settings (the card chose them for this model)
FP32_ARGS=(--rerank --reranker-model "$FP32" --reranker-backend onnx --reranker-precision fp32
           --rerank-unit turn --rerank-max-length 128 --rerank-candidates 35 --fusion-alpha 0.8)
mkdir -p "$OUT" "$SCRATCH"
# shellcheck source=scripts/_rerank_lib.sh
source "$(dirname "$0")/_rerank_lib.sh"

# each held-out run: frozen first, one run, verify, compress (freeze_then_run, _publish_lib.sh)
# shellcheck disable=SC2034  # read by freeze_then_run (scripts/_publish_lib.sh)
HELDOUT_RUN=("$PY" benchmarks/longmemeval/run.py)

compare() {  # $1 baseline result, $2 result, $3 name, rest: compare options
  local a="$1" b="$2" n="$3"
  shift 3
  [ -e "$OUT/compare_$n.json" ] && return 0
  "$E" compare "$a" "$b" --output "$OUT/compare_$n.json" --plot "$OUT/compare_$n.png" "$@" \
    | tail -n 25
}

case "$STEP" in
  lme)
    recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
    HELD=$(part_of "$SCRATCH/lme" heldout)
    freeze_then_run "$HELD" heldout_lme_shipped --rerank --reranker-model "$NAME"
    freeze_then_run "$HELD" heldout_lme_fp32 "${FP32_ARGS[@]}"
    compare "$OUT/heldout_lme_fp32.jsonl.gz" "$OUT/heldout_lme_shipped.jsonl.gz" shipped_vs_fp32
    compare results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz \
      "$OUT/heldout_lme_shipped.jsonl.gz" shipped_vs_section6
    compare results/longmemeval_s_dev_split/heldout_default.jsonl.gz \
      "$OUT/heldout_lme_shipped.jsonl.gz" shipped_vs_no_rerank
    ;;
  locomo)
    recreate_split results/structure/locomo_split_manifest.json "$LOCOMO" "$SCRATCH/loc"
    HELD=$(part_of "$SCRATCH/loc" heldout)
    freeze_then_run "$HELD" heldout_locomo_shipped --rerank --reranker-model "$NAME"
    for n in tuned bm25_only; do
      compare "results/structure/heldout_locomo_$n.jsonl.gz" \
        "$OUT/heldout_locomo_shipped.jsonl.gz" "locomo_shipped_vs_$n" --cluster id-prefix
    done
    ;;
  speed)
    recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
    TUNE=$(part_of "$SCRATCH/lme" tune)
    [ -e "$OUT/speed_shipped_tune30.json" ] || "$PY" benchmarks/longmemeval/speed_rerank.py \
      "$TUNE" --limit 30 --reranker-model "$FP32" --shipped "$NAME" \
      --passes rerank-onnx-fp32,rerank-shipped --scratch "$SCRATCH/speed" \
      --output "$OUT/speed_shipped_tune30.json" --rerank-unit turn --rerank-max-length 128 \
      --rerank-candidates 35 --fusion-alpha 0.8
    ;;
  *) echo "unknown step $STEP (lme, locomo, speed)" >&2; exit 2 ;;
esac
"$PY" scripts/derived_sidecars.py "$OUT"   # the frozen manifests, compares, speed file
echo "done: $STEP -> $OUT"
