#!/usr/bin/env bash
# Calibration v4, one confidence model per memory shape, with the features the confidence
# study kept (issue 30 item 2, PROVENANCE.md section 17): fitted out of fold on tuning data
# only, from finished runs where they exist.
#
#   scripts/publish_confidence_v4.sh LME_DATA LOCOMO_DATA CACHE [SCRATCH]
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split);
# LOCOMO_DATA: ../shared/data/locomo/locomo10.json; CACHE: an embedding cache directory
# (speed only). Run from the repository root of a clean checkout. Nothing is overwritten.
#
# 1. the published splits re-created in SCRATCH (sha256 of each part checked against its
#    manifest);
# 2. engram-eval production calibrate-sessions --per-shape --feature-set v4 on
#    - chat: the LongMemEval tune part through section 14's out-of-fold runs of the shipped
#      configuration (results/lexical/fold{0,1}_d20_a0.8.jsonl.gz: each half reranked by the
#      fold cross-encoder that never saw it; they trace 5 sessions per question);
#    - people: the LoCoMo tune conversations through section 16's run of the package default
#      (results/confidence_study/locomo_tune_default.jsonl.gz);
#    - short: fixtures/production/train_short.json through production search (its settings:
#      the package's production defaults, excerpt retry off);
#    runs made before the pipeline traced gate_features have them computed from their traces
#    by the same functions (engram_eval/retrieval/gate_features.py). Platt on each question's
#    top candidate, GroupKFold(5) by question / conversation / case, C 1; cut-off target 0.9
#    of returned top results right (people 0.7, as calibration v3), at least 20 returning;
#    -> engram_eval/production/data/calibration_v4.json (+ settings_v4.json) and
#    OUT/calibration_v4.report.{json,png} (the out-of-fold selective report per shape);
# 3. a sidecar for every derived file in OUT.
set -euo pipefail
LME="$1"
LOCOMO="$2"
CACHE="$3"
SCRATCH="${4:-/tmp/w/conf4}"
OUT=results/confidence_v4
CAL=engram_eval/production/data/calibration_v4.json
SETTINGS=engram_eval/production/data/settings_v4.json
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY)
refuse_existing "$CAL" "$SETTINGS" "$OUT/calibration_v4.report.json" \
  "$OUT/calibration_v4.report.png"
mkdir -p "$SCRATCH"
source "$(dirname "$0")/_rerank_lib.sh"  # recreate_split, part_of

echo "== 1. the tuning parts"
recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
recreate_split results/structure/locomo_split_manifest.json "$LOCOMO" "$SCRATCH/loc"
LME_TUNE=$(part_of "$SCRATCH/lme" tune)
LOC_TUNE=$(part_of "$SCRATCH/loc" tune)

echo "== 2. calibration v4 per memory shape (tuning data only)"
"$E" production calibrate-sessions --per-shape --feature-set v4 \
  --run lme_tune=results/lexical/fold0_d20_a0.8.jsonl.gz \
  --run lme_tune=results/lexical/fold1_d20_a0.8.jsonl.gz --run-data lme_tune="$LME_TUNE" \
  --run locomo_tune=results/confidence_study/locomo_tune_default.jsonl.gz \
  --run-data locomo_tune="$LOC_TUNE" \
  --fixture train_short=fixtures/production/train_short.json \
  --no-excerpt-retry --cache-dir "$CACHE" \
  --mapping platt --calibrate-on top --folds 5 --C 1.0 --target-precision 0.9 \
  --shape-target people=0.7 --min-returned 20 \
  --output "$CAL" --settings-output "$SETTINGS" --report "$OUT/calibration_v4.report.json"

echo "== 3. sidecars"
"$PY" scripts/derived_sidecars.py "$OUT"
