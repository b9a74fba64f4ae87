# Shared by the publications of the package's default gate (sourced, not run):
# publish_confidence_v5.sh and publish_confidence_v6.sh. One calibration per memory shape
# (calibration v4's fit settings, unchanged) refitted under the package's current default
# pipeline, then measured. The caller sets, before `default_gate PHASE`:
#   LME LOCOMO CACHE SCRATCH   the arguments of the script
#   OUT CAL SETTINGS           the output directory, the calibration and its settings files
#   CHAT_RUNS                  the two out-of-fold runs of the tune part's halves under the
#                              default configuration's family (chat data; 5 sessions traced)
#   HELD_CHAT_RUN              the held-out run of the default (chat measurement)
# and sources scripts/_publish_lib.sh first (E, PY, refuse_existing,
# production_freeze_all_then_measure). Rules:
# fit  1. the published splits re-created in SCRATCH (each part's sha256 checked);
#      2. people: the LoCoMo tune conversations run once with the package default
#         (-> OUT/locomo_tune_default.jsonl.gz, every session traced, the run default;
#         verified with --rerun 3);
#      3. engram-eval production calibrate-sessions --per-shape --feature-set v4 (Platt on
#         each question's top candidate, GroupKFold(5) by question / conversation / case, C 1,
#         cut-off target 0.9 of returned top results right, people 0.7, at least 20
#         returning) on chat: CHAT_RUNS; people: step 2's run (10 candidates); short:
#         fixtures/production/train_short.json through production search under the package's
#         production defaults, excerpt retry off -> CAL (+ SETTINGS) and
#         OUT/calibration_vN.report.{json,png}.
# measure  after the fit is committed with the default switched to it: every manifest frozen
#      before any measurement, then each measured once with the package default gate: chat:
#      the LongMemEval held-out part read from HELD_CHAT_RUN, first 5 results; people: the
#      LoCoMo held-out conversations read from section 18's held-out run of the package
#      default (results/turn_top_m/heldout_topm_locomo_default; people's chats are not
#      reranked), first 10 results; short: production search over every production fixture
#      but train_short (dev, holdout, validation_v2, validation_v3, validation_v4); all
#      regression checks by the ledger.

# Calibration v4's model and fit settings (PROVENANCE.md section 17), kept by every later
# default gate: one model per memory shape on feature set v4 (V4_MODEL); Platt on each
# question's top candidate, GroupKFold(5), C 1, cut-off target 0.9 of returned top results
# right (people 0.7), at least 20 questions returning (V4_FIT).
V4_MODEL=(--per-shape --feature-set v4)
V4_FIT=(--mapping platt --calibrate-on top --folds 5 --C 1.0 --target-precision 0.9
        --shape-target people=0.7 --min-returned 20)

default_gate() {
  local phase="$1" report n
  report="$OUT/$(basename "${CAL%.json}").report"
  local fixtures=(dev holdout validation_v2 validation_v3 validation_v4)
  local measured=(heldout_lme heldout_locomo "${fixtures[@]}")
  case "$phase" in
    fit) refuse_existing "$CAL" "$SETTINGS" "$report.json" "$report.png";;
    measure)
      local planned=()
      for n in "${measured[@]}"; do planned+=("$OUT/$n.json" "$OUT/$n.frozen.json"); done
      refuse_existing "${planned[@]}";;
    *) echo "unknown phase $phase (fit, measure)" >&2; exit 2;;
  esac
  if [ -n "$(git status --porcelain -- engram_eval benchmarks)" ]; then
    echo "engram_eval/ or benchmarks/ differ from the commit: commit first" >&2; exit 1
  fi
  mkdir -p "$SCRATCH" "$OUT"
  source "$(dirname "${BASH_SOURCE[0]}")/_rerank_lib.sh"  # recreate_split, part_of, run_to

  echo "== 1. the parts"
  recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
  recreate_split results/structure/locomo_split_manifest.json "$LOCOMO" "$SCRATCH/loc"
  local lme_tune loc_tune
  lme_tune=$(part_of "$SCRATCH/lme" tune)
  loc_tune=$(part_of "$SCRATCH/loc" tune)

  if [ "$phase" = measure ]; then
    local lme_held loc_held
    lme_held=$(part_of "$SCRATCH/lme" heldout)
    loc_held=$(part_of "$SCRATCH/loc" heldout)
    # shellcheck disable=SC2034  # read by production_freeze_all_then_measure
    declare -A WHAT LABEL
    WHAT[heldout_lme]="measure $lme_held --run $HELD_CHAT_RUN --candidates 5 --cache-dir $CACHE"
    WHAT[heldout_locomo]="measure $loc_held --run results/turn_top_m/heldout_topm_locomo_default.jsonl.gz --candidates 10 --cache-dir $CACHE"
    for n in "${fixtures[@]}"; do WHAT[$n]="run --fixture fixtures/production/$n.json"; done
    LABEL[heldout_lme]="LongMemEval S cleaned, development split: held-out part"
    LABEL[heldout_locomo]="LoCoMo10: held-out conversations"
    # shellcheck disable=SC2034  # read by production_freeze_all_then_measure
    GATE=()
    production_freeze_all_then_measure "${measured[@]}"
    "$PY" scripts/derived_sidecars.py "$OUT"
    return 0
  fi

  echo "== 2. people: the LoCoMo tune conversations under the package default"
  run_to "$loc_tune" "$OUT/locomo_tune_default.jsonl"

  echo "== 3. $(basename "${CAL%.json}") per memory shape (tuning data only)"
  "$E" production calibrate-sessions "${V4_MODEL[@]}" \
    --run lme_tune="${CHAT_RUNS[0]}" --run lme_tune="${CHAT_RUNS[1]}" \
    --run-data lme_tune="$lme_tune" \
    --run locomo_tune="$OUT/locomo_tune_default.jsonl.gz" --run-data locomo_tune="$loc_tune" \
    --fixture train_short=fixtures/production/train_short.json \
    --no-excerpt-retry --cache-dir "$CACHE" "${V4_FIT[@]}" \
    --output "$CAL" --settings-output "$SETTINGS" --report "$report.json"

  echo "== 4. sidecars"
  "$PY" scripts/derived_sidecars.py "$OUT"
}
