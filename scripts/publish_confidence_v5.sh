#!/usr/bin/env bash
# Calibration v5: calibration v4's per-shape fit (same features, same rules) refitted under the
# package's current default pipeline, so that production search runs that pipeline -- the
# section 18 first stage and, for chats, the rerank with the shipped cross-encoder
# engram-ce-minilm-v3 (issue 26 item 3, issue 30 item 3; PROVENANCE.md section 19).
#
#   scripts/publish_confidence_v5.sh fit|measure LME_DATA LOCOMO_DATA CACHE [SCRATCH]
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split);
# LOCOMO_DATA: ../shared/data/locomo/locomo10.json; CACHE: an embedding cache directory
# (speed only). Run from the repository root of a clean checkout whose package defaults are
# section 18's with engram-ce-minilm-v3. Nothing is overwritten. Rules fixed before any fit:
#
# fit  1. the published splits re-created in SCRATCH (each part's sha256 checked);
#      2. people: the LoCoMo tune conversations run once with the package default
#         (-> OUT/locomo_tune_default.jsonl.gz, every session traced, the run default;
#         verified with --rerun 3);
#      3. engram-eval production calibrate-sessions --per-shape --feature-set v4, calibration
#         v4's fit settings unchanged (Platt on each question's top candidate, GroupKFold(5) by
#         question / conversation / case, C 1, cut-off target 0.9 of returned top results
#         right, people 0.7, at least 20 returning), on
#         - chat: the LongMemEval tune part through section 18's out-of-fold runs of the
#           shipped configuration's family (results/turn_top_m/fold{0,1}_new_d20_a0.8: each
#           half of the tune part under the section 18 first stage, reranked by the fold
#           cross-encoder trained with engram-ce-minilm-v3's settings without it; 5 sessions
#           traced per question, as calibration v4's chat data);
#         - people: step 2's run (10 candidates);
#         - short: fixtures/production/train_short.json through production search under the
#           package's production defaults (the default pipeline, rerank on), excerpt retry off;
#         -> engram_eval/production/data/calibration_v5.json (+ settings_v5.json) and
#         OUT/calibration_v5.report.{json,png}.
# measure  after the fit is committed with the default switched to it: every manifest frozen
#      before any measurement, then each measured once with the package default gate:
#      - chat: the LongMemEval held-out part read from section 18's held-out run of the
#        shipped default (results/turn_top_m/heldout_topm_lme_v3), first 5 results;
#      - people: the LoCoMo held-out conversations read from section 18's held-out run of the
#        package default (results/turn_top_m/heldout_topm_locomo_default), first 10 results;
#      - short: production search over every production fixture but train_short (dev, holdout,
#        validation_v2, validation_v3, validation_v4);
#      all are regression checks by the ledger (each was measured before, sections 4, 12, 17).
set -euo pipefail
PHASE="$1"
LME="$2"
LOCOMO="$3"
CACHE="$4"
SCRATCH="${5:-/tmp/w/conf5}"
OUT=results/confidence_v5
CAL=engram_eval/production/data/calibration_v5.json
SETTINGS=engram_eval/production/data/settings_v5.json
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY)
COMMON=(--cache-dir "$CACHE" --no-progress)
FIXTURES=(dev holdout validation_v2 validation_v3 validation_v4)
MEASURED=(heldout_lme heldout_locomo "${FIXTURES[@]}")
case "$PHASE" in
  fit) refuse_existing "$CAL" "$SETTINGS" "$OUT/calibration_v5.report.json" \
         "$OUT/calibration_v5.report.png";;
  measure)
    planned=()
    for n in "${MEASURED[@]}"; do planned+=("$OUT/$n.json" "$OUT/$n.frozen.json"); done
    refuse_existing "${planned[@]}";;
  *) echo "unknown phase $PHASE (fit, measure)" >&2; exit 2;;
esac
if [ -n "$(git status --porcelain -- engram_eval benchmarks)" ]; then
  echo "engram_eval/ or benchmarks/ differ from the commit: commit first" >&2; exit 1
fi
mkdir -p "$SCRATCH" "$OUT"
source "$(dirname "$0")/_rerank_lib.sh"  # recreate_split, part_of, run_to

echo "== 1. the parts"
recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
recreate_split results/structure/locomo_split_manifest.json "$LOCOMO" "$SCRATCH/loc"
LME_TUNE=$(part_of "$SCRATCH/lme" tune)
LOC_TUNE=$(part_of "$SCRATCH/loc" tune)

if [ "$PHASE" = measure ]; then
  LME_HELD=$(part_of "$SCRATCH/lme" heldout)
  LOC_HELD=$(part_of "$SCRATCH/loc" heldout)
  # shellcheck disable=SC2034  # read by production_freeze_all_then_measure
  declare -A WHAT LABEL
  WHAT[heldout_lme]="measure $LME_HELD --run results/turn_top_m/heldout_topm_lme_v3.jsonl.gz --candidates 5 --cache-dir $CACHE"
  WHAT[heldout_locomo]="measure $LOC_HELD --run results/turn_top_m/heldout_topm_locomo_default.jsonl.gz --candidates 10 --cache-dir $CACHE"
  for n in "${FIXTURES[@]}"; do WHAT[$n]="run --fixture fixtures/production/$n.json"; done
  LABEL[heldout_lme]="LongMemEval S cleaned, development split: held-out part"
  LABEL[heldout_locomo]="LoCoMo10: held-out conversations"
  # shellcheck disable=SC2034  # read by production_freeze_all_then_measure
  GATE=()
  production_freeze_all_then_measure "${MEASURED[@]}"
  "$PY" scripts/derived_sidecars.py "$OUT"
  exit 0
fi

echo "== 2. people: the LoCoMo tune conversations under the package default"
run_to "$LOC_TUNE" "$OUT/locomo_tune_default.jsonl"

echo "== 3. calibration v5 per memory shape (tuning data only)"
"$E" production calibrate-sessions --per-shape --feature-set v4 \
  --run lme_tune=results/turn_top_m/fold0_new_d20_a0.8.jsonl.gz \
  --run lme_tune=results/turn_top_m/fold1_new_d20_a0.8.jsonl.gz --run-data lme_tune="$LME_TUNE" \
  --run locomo_tune="$OUT/locomo_tune_default.jsonl.gz" --run-data locomo_tune="$LOC_TUNE" \
  --fixture train_short=fixtures/production/train_short.json \
  --no-excerpt-retry --cache-dir "$CACHE" \
  --mapping platt --calibrate-on top --folds 5 --C 1.0 --target-precision 0.9 \
  --shape-target people=0.7 --min-returned 20 \
  --output "$CAL" --settings-output "$SETTINGS" --report "$OUT/calibration_v5.report.json"

echo "== 4. sidecars"
"$PY" scripts/derived_sidecars.py "$OUT"
