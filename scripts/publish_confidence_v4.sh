#!/usr/bin/env bash
# Calibration v4, one confidence model per memory shape, with the features the confidence
# study kept (issue 30 item 2, PROVENANCE.md section 17): fitted out of fold on tuning data
# only, from finished runs where they exist.
#
#   scripts/publish_confidence_v4.sh [fit|measure] LME_DATA LOCOMO_DATA CACHE [SCRATCH]
#
# fit (the default) is the fit below; measure is the held-out measurement of the package
# default gate of the time (calibration v4, each shape's recorded cut-off, no excerpt retry)
# after it. Production's defaults have since become the benchmark runner's pipeline (issue 26
# item 3), so both phases name the settings v4 was fitted under (SETTINGS, settings_v4.json;
# measure: with --cutoff calibrated, as the frozen manifests record):
#   every manifest frozen before any measurement (OUT/*.frozen.json), then each run once:
#   - chat: the LongMemEval held-out part read from section 14's held-out run of the same
#     configuration the chat model was fitted on (results/lexical/heldout_lme_default), its
#     first 5 results per question (the depth of the fit) -> OUT/heldout_lme.json;
#   - people: the LoCoMo held-out conversations read from section 14's held-out run of the
#     package default (results/lexical/heldout_locomo_default), its first 10 results ->
#     OUT/heldout_locomo.json;
#   - short: production search over fixtures/production/validation_v4.json (frozen before any
#     fit, never run before) -> OUT/validation_v4.json, and validation_v3.json (a regression
#     check by the ledger) -> OUT/validation_v3.json;
#   the held-out ledger (results/heldout_ledger.json) labels each.
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
#      the package's production defaults of the time, excerpt retry off; a refit reads them
#      from settings_v4.json as committed, since the working tree's copy is this step's
#      output);
#    runs made before the pipeline traced gate_features have them computed from their traces
#    by the same functions (engram_eval/retrieval/gate_features.py). Platt on each question's
#    top candidate, GroupKFold(5) by question / conversation / case, C 1; cut-off target 0.9
#    of returned top results right (people 0.7, as calibration v3), at least 20 returning;
#    -> engram_eval/production/data/calibration_v4.json (+ settings_v4.json) and
#    OUT/calibration_v4.report.{json,png} (the out-of-fold selective report per shape);
# 3. a sidecar for every derived file in OUT.
set -euo pipefail
PHASE=fit
case "${1:-}" in fit|measure) PHASE="$1"; shift;; esac
LME="$1"
LOCOMO="$2"
CACHE="$3"
SCRATCH="${4:-/tmp/w/conf4}"
OUT=results/confidence_v4
CAL=engram_eval/production/data/calibration_v4.json
SETTINGS=engram_eval/production/data/settings_v4.json
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY)
# shellcheck source=scripts/_default_gate_lib.sh
source "$(dirname "$0")/_default_gate_lib.sh"  # V4_MODEL, V4_FIT
MEASURED=(heldout_lme heldout_locomo validation_v4 validation_v3)
if [ "$PHASE" = fit ]; then
  refuse_existing "$CAL" "$SETTINGS" "$OUT/calibration_v4.report.json" \
    "$OUT/calibration_v4.report.png"
else
  planned=()
  for n in "${MEASURED[@]}"; do planned+=("$OUT/$n.json" "$OUT/$n.frozen.json"); done
  refuse_existing "${planned[@]}"
  if [ -n "$(git status --porcelain -- engram_eval benchmarks)" ]; then
    echo "engram_eval/ or benchmarks/ differ from the commit: commit first" >&2; exit 1
  fi
fi
mkdir -p "$SCRATCH"
source "$(dirname "$0")/_rerank_lib.sh"  # recreate_split, part_of

echo "== 1. the parts"
recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
recreate_split results/structure/locomo_split_manifest.json "$LOCOMO" "$SCRATCH/loc"
LME_TUNE=$(part_of "$SCRATCH/lme" tune)
LOC_TUNE=$(part_of "$SCRATCH/loc" tune)

if [ "$PHASE" = measure ]; then
  LME_HELD=$(part_of "$SCRATCH/lme" heldout)
  LOC_HELD=$(part_of "$SCRATCH/loc" heldout)
  # shellcheck disable=SC2034  # WHAT, LABEL: read by production_freeze_all_then_measure
  declare -A WHAT
  WHAT[heldout_lme]="measure $LME_HELD --run results/lexical/heldout_lme_default.jsonl.gz --candidates 5 --cache-dir $CACHE"
  WHAT[heldout_locomo]="measure $LOC_HELD --run results/lexical/heldout_locomo_default.jsonl.gz --candidates 10 --cache-dir $CACHE"
  WHAT[validation_v4]="run --fixture fixtures/production/validation_v4.json"
  WHAT[validation_v3]="run --fixture fixtures/production/validation_v3.json"
  declare -A LABEL
  LABEL[heldout_lme]="LongMemEval S cleaned, development split: held-out part"
  LABEL[heldout_locomo]="LoCoMo10: held-out conversations"
  # shellcheck disable=SC2034  # read by production_freeze_all_then_measure
  GATE=(--settings "$SETTINGS" --cutoff calibrated)
  production_freeze_all_then_measure "${MEASURED[@]}"
  "$PY" scripts/derived_sidecars.py "$OUT"
  exit 0
fi

echo "== 2. calibration v4 per memory shape (tuning data only)"
FITTED_UNDER="$SCRATCH/settings_v4.fitted_under.json"
git show "HEAD:$SETTINGS" > "$FITTED_UNDER"
"$E" production calibrate-sessions "${V4_MODEL[@]}" --settings "$FITTED_UNDER" \
  --run lme_tune=results/lexical/fold0_d20_a0.8.jsonl.gz \
  --run lme_tune=results/lexical/fold1_d20_a0.8.jsonl.gz --run-data lme_tune="$LME_TUNE" \
  --run locomo_tune=results/confidence_study/locomo_tune_default.jsonl.gz \
  --run-data locomo_tune="$LOC_TUNE" \
  --fixture train_short=fixtures/production/train_short.json \
  --no-excerpt-retry --cache-dir "$CACHE" "${V4_FIT[@]}" \
  --output "$CAL" --settings-output "$SETTINGS" --report "$OUT/calibration_v4.report.json"

echo "== 3. sidecars"
"$PY" scripts/derived_sidecars.py "$OUT"
