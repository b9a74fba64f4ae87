#!/usr/bin/env bash
# Calibration v7 (issue 45): the gate decides whether to answer, the pipeline the order.
#
#   scripts/publish_confidence_v7.sh choose|fit|measure LME_DATA LOCOMO_DATA CACHE [SCRATCH]
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split);
# LOCOMO_DATA: ../shared/data/locomo/locomo10.json; CACHE: an embedding cache directory
# (speed only). Run from the repository root of a clean checkout. Nothing is overwritten.
# Rules, written before any step ran:
# choose (tuning data only)
#   1. the published splits re-created in SCRATCH (each part's sha256 checked);
#   2. people: the LoCoMo tune conversations run once with the people pipeline the package
#      default takes for people's chats (benchmarks/locomo/conv_v1_people_config.yaml,
#      PROVENANCE.md section 22) -> OUT/locomo_tune_conv_v1.jsonl.gz (every session
#      traced; verified with --rerun 3);
#   3. the feature study (section 16's machinery, with issue 45's candidates
#      rerank_prob_first and rerank_margin_first) on the LongMemEval tune part through
#      section 20's out-of-fold runs of the default chat pipeline (5 candidates) ->
#      OUT/study_lme_tune.{json,png} (people's chats are not reranked, so the new candidates
#      are undefined there; section 16 studied the rest on LoCoMo);
#   4. the change of order made visible on the tune parts: production measure with
#      calibration v6 (the gate before this section; --settings settings_v6.json) under
#      result_order pipeline, both orders reported -> OUT/order_{lme,locomo}_tune_v6.json;
#   5. candidates, each one per memory shape on every tuning part (chat: section 20's runs;
#      people: step 2's run; short: fixtures/production/train_short.json through production
#      search), feature set v4, Platt on each question's top result -- now the pipeline's
#      first -- GroupKFold(5), cut-off target 0.9 of answered top results right (people 0.7),
#      at least 20 answering, judged by nested cross-validation: C 1 (calibration v6's fit)
#      and C 0.1 -> OUT/cand_c{1,0.1}.{json,report.json,report.png};
#   6. per shape, the highest nested cross-validated AUROC (ties: C 1), paired intervals ->
#      OUT/gate_choice.json.
# fit   the choice, per shape, refitted once with (people's
#       chats get no gate unless their nested AUROC reaches 0.70) -> CAL, SETTINGS,
#       OUT/calibration_v7.report.{json,png}.
# measure  after the default is switched to CAL (its own commit): every manifest frozen
#       before any measurement, then each measured once with the package default gate
#       (regression checks by the ledger): chat: the LongMemEval held-out part read from
#       section 20's held-out run of the default (first 5 results); people: the LoCoMo
#       held-out conversations read from section 22's held-out run of the people pipeline
#       (results/dense_encoder/heldout_locomo_conv_v1, first 10 results); short: production
#       search over every production fixture but train_short.
set -euo pipefail
PHASE="$1"
LME="$2"
LOCOMO="$3"
CACHE="$4"
SCRATCH="${5:-/tmp/w/conf7}"
OUT=results/confidence_v7
CAL=engram_eval/production/data/calibration_v7.json
SETTINGS=engram_eval/production/data/settings_v7.json
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY)
COMMON=(--cache-dir "$CACHE" --no-progress)
A=$("$PY" -c "import json,sys; s=json.load(open(sys.argv[1]))['settings']; assert s['rerank_prior'] == 'score'; print(s['fusion_alpha'])" engram_eval/models/engram-ce-minilm-v4/card.json)
CHAT_RUNS=("results/rerank_prior/fold0_score_d20_a$A.jsonl.gz"
           "results/rerank_prior/fold1_score_d20_a$A.jsonl.gz")
HELD_CHAT_RUN=results/rerank_prior/heldout_prior_lme_v4.jsonl.gz
HELD_PEOPLE_RUN=results/dense_encoder/heldout_locomo_conv_v1.jsonl.gz
PEOPLE_CONFIG=benchmarks/locomo/conv_v1_people_config.yaml
V6=(--calibration engram_eval/production/data/calibration_v6.json
    --settings engram_eval/production/data/settings_v6.json --result-order pipeline)
FIT=(--per-shape --feature-set v4 --mapping platt --calibrate-on top --folds 5
     --target-precision 0.9 --shape-target people=0.7 --min-returned 20 --nested-cv
     --no-excerpt-retry --cache-dir "$CACHE")
CANDIDATES=(1 0.1)

case "$PHASE" in
  choose)
    planned=("$OUT/gate_choice.json")
    for c in "${CANDIDATES[@]}"; do planned+=("$OUT/cand_c$c.json" "$OUT/cand_c$c.report.json"); done
    refuse_existing "${planned[@]}";;
  fit) refuse_existing "$CAL" "$SETTINGS" "$OUT/calibration_v7.report.json";;
  measure)
    planned=()
    for n in heldout_lme heldout_locomo dev holdout validation_v2 validation_v3 validation_v4; do
      planned+=("$OUT/$n.json" "$OUT/$n.frozen.json"); done
    refuse_existing "${planned[@]}";;
  *) echo "unknown phase $PHASE (choose, fit, measure)" >&2; exit 2;;
esac
if [ -n "$(git status --porcelain -- engram_eval benchmarks scripts)" ]; then
  echo "engram_eval/, benchmarks/ or scripts/ differ from the commit: commit first" >&2; exit 1
fi
mkdir -p "$SCRATCH" "$OUT"
source "$(dirname "$0")/_rerank_lib.sh"  # recreate_split, part_of, run_to

echo "== 1. the parts"
recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
recreate_split results/structure/locomo_split_manifest.json "$LOCOMO" "$SCRATCH/loc"
lme_tune=$(part_of "$SCRATCH/lme" tune)
loc_tune=$(part_of "$SCRATCH/loc" tune)
people=(--run locomo_tune="$OUT/locomo_tune_conv_v1.jsonl.gz" --run-data locomo_tune="$loc_tune")
chat=(--run lme_tune="${CHAT_RUNS[0]}" --run lme_tune="${CHAT_RUNS[1]}" --run-data lme_tune="$lme_tune")

if [ "$PHASE" = choose ]; then
  echo "== 2. people: the LoCoMo tune conversations under the people pipeline"
  run_to "$loc_tune" "$OUT/locomo_tune_conv_v1.jsonl" --config "$PEOPLE_CONFIG"

  echo "== 3. the feature study"
  [ -e "$OUT/study_lme_tune.json" ] || "$E" confidence-study "${CHAT_RUNS[@]}" \
    --dataset "$lme_tune" --candidates 5 --output "$OUT/study_lme_tune.json" \
    --plot "$OUT/study_lme_tune.png" | tail -n 22

  echo "== 4. both orders under calibration v6 on the tune parts"
  [ -e "$OUT/order_lme_tune_v6.json" ] || "$E" production measure "$lme_tune" \
    --run "${CHAT_RUNS[0]}" --run "${CHAT_RUNS[1]}" --candidates 5 "${V6[@]}" \
    --cache-dir "$CACHE" --source-root . --dataset-label "LongMemEval tune part (v6, both orders)" \
    --output "$OUT/order_lme_tune_v6.json" > /dev/null
  [ -e "$OUT/order_locomo_tune_v6.json" ] || "$E" production measure "$loc_tune" \
    --run "$OUT/locomo_tune_conv_v1.jsonl.gz" --candidates 10 "${V6[@]}" \
    --cache-dir "$CACHE" --source-root . --dataset-label "LoCoMo tune conversations (v6, both orders)" \
    --output "$OUT/order_locomo_tune_v6.json" > /dev/null

  echo "== 5. candidates, nested cross-validation"
  for c in "${CANDIDATES[@]}"; do
    "$E" production calibrate-sessions "${FIT[@]}" --C "$c" "${chat[@]}" "${people[@]}" \
      --fixture train_short=fixtures/production/train_short.json \
      --output "$OUT/cand_c$c.json" --report "$OUT/cand_c$c.report.json" > /dev/null
  done

  echo "== 6. the choice"
  args=()
  for c in "${CANDIDATES[@]}"; do args+=(--candidate "c$c=$OUT/cand_c$c.report.json"); done
  "$PY" scripts/choose_gate.py "${args[@]}" --output "$OUT/gate_choice.json"
  "$PY" scripts/derived_sidecars.py "$OUT"
  exit 0
fi

if [ "$PHASE" = fit ]; then
  read -r -a shape_c < <("$PY" -c "import json,sys; print(' '.join(f'--shape-C {s}={v[\"chosen\"][1:]}' for s, v in sorted(json.load(open(sys.argv[1]))['shapes'].items())))" "$OUT/gate_choice.json")
  echo "== the chosen fit: ${shape_c[*]}"
  "$E" production calibrate-sessions "${FIT[@]}" "${shape_c[@]}" "${chat[@]}" "${people[@]}" \
    --fixture train_short=fixtures/production/train_short.json \
    --output "$CAL" --settings-output "$SETTINGS" --report "$OUT/calibration_v7.report.json"
  "$PY" scripts/derived_sidecars.py "$OUT"
  exit 0
fi

lme_held=$(part_of "$SCRATCH/lme" heldout)
loc_held=$(part_of "$SCRATCH/loc" heldout)
declare -A WHAT LABEL
WHAT[heldout_lme]="measure $lme_held --run $HELD_CHAT_RUN --candidates 5 --cache-dir $CACHE"
WHAT[heldout_locomo]="measure $loc_held --run $HELD_PEOPLE_RUN --candidates 10 --cache-dir $CACHE"
fixtures=(dev holdout validation_v2 validation_v3 validation_v4)
for n in "${fixtures[@]}"; do WHAT[$n]="run --fixture fixtures/production/$n.json"; done
LABEL[heldout_lme]="LongMemEval S cleaned, development split: held-out part"
LABEL[heldout_locomo]="LoCoMo10: held-out conversations"
GATE=()
production_freeze_all_then_measure heldout_lme heldout_locomo "${fixtures[@]}"
"$PY" scripts/derived_sidecars.py "$OUT"
