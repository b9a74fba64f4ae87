#!/usr/bin/env bash
# Turn-level top m (issue 27 item 3): how many of a session's best turns the turn-level signals
# add up (dense_turn_top_m, bm25_turn_top_m), chosen per chat structure on the tuning parts
# only, with section 14's frozen analyser and speaker rule, then the rerank stage re-checked
# out of fold on the new chat first stage.
#
#   scripts/publish_topm.sh STEP LME_DATA LOCOMO_DATA CACHE [SCRATCH]
#   STEP: topm|people|rerank|retrain|heldout|ship|heldout-v3|speed|absent|runs-lme[:VARIANT]|runs-loc[:VARIANT]
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split);
# LOCOMO_DATA: ../shared/data/locomo/locomo10.json. Run from the repository root of a clean
# checkout. Nothing in OUT is overwritten; a step whose output exists is skipped. Every run
# embeds with the package default (ONNX fp32). Rules fixed before any run of this script:
#
# topm  1. both published splits re-created (every part's sha256 checked against its
#          manifest); 2. tuning runs (scratch) that compute and trace every signal, with
#          section 14's analyser (stem: Snowball English + en-v1 stopwords; LoCoMo: speaker
#          prefix), for each VARIANT dDbB (dense_turn_top_m D, bm25_turn_top_m B): d1b1 (the
#          best turn, the baseline), d2b1, d3b1, d1b2, d1b3; 3. each variant's two runs tuned
#          together by one multi-run `engram-eval tune` (section 14's grid and settings: 5
#          folds, seed 0, folds by conversation on LoCoMo, worst-ratio) -> topm_VARIANT.yaml;
#          4. per structure, the variant with the best cross-validated estimate
#          (turn_top_m.json: per fold, against the baseline, and the nested estimate);
#          5. the chosen runs (published as topm_lme_V / topm_loc_V) tuned together ->
#          topm_first_stage.yaml (chat settings + people_overrides), and without its rerank
#          fields -> topm_heldout_config.yaml (the first stage to freeze).
# rerank  only when the chat choice is not the baseline (the chat first stage changed):
#          section 14's rerank step on the new first stage: each half of the LongMemEval tune
#          part ranked by topm_first_stage.yaml alone (fold{0,1}_none) and reranked by the
#          fold cross-encoder that never saw it (section 6's fold models retrained with its
#          command by `scripts/publish_lexical.sh train`, checked against the published
#          cards), ONNX int8, turn unit, 128 tokens, depth 20 (section 14's choice, kept as
#          section 15 did), at fusion_alpha 0.8 (the shipped blend, listed first so that a tie
#          keeps it), 0.7, 0.9 (section 15's grid without 0.6, its worst by 0.008);
#          choose_rerank.py by section 6's objective -> topm_rerank_choice.json.
# heldout  after topm, rules fixed before any held-out run: the frozen first stage is
#          topm_heldout_config.yaml (both structures' choices), the reranker
#          engram-ce-minilm-v2 with its card's settings (depth 20, blend 0.8). The rerank
#          re-check above runs beside it and is reported, not used: a blend it would change is
#          a next model version (issue 27) and a regression check, never this run's choice;
#          the configurations lme_first_stage (no rerank), lme_default (reranked) and
#          locomo_default (the people settings; their rerank stays off) frozen before any
#          run, then each held-out part run once (heldout_topm_*), and each compared, paired,
#          with section 14's run of the same role, the reranked one also with section 6's
#          reranked run and with its own first stage, LoCoMo's also with section 14's BM25-only
#          run (same analyser; top m does not change it) (compare_topm_*). Whatever the held-out
#          figures, the package defaults follow the choice made on the tune parts.
# retrain, ship, heldout-v3, speed: the next model version (issue 27 item 5): retrain the
#          fold cross-encoders on this first stage's candidates and re-choose out of fold;
#          when a retrained candidate wins, train on the whole tune part and ship it
#          (engram-ce-minilm-v3), then its one held-out regression check and its cost (the
#          rules are in each function below).
# absent   issue 30 item 1's "nothing here" reranker, out of fold on the tune part (rules in
#          the function).
set -euo pipefail
STEP="$1"
LME="$2"
LOCOMO="$3"
CACHE="$4"
SCRATCH="${5:-/tmp/w/topm}"
OUT=results/turn_top_m
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
COMMON=(--cache-dir "$CACHE" --no-progress)
ALL_SIGNALS=(--use-dense --use-bm25-user --use-bm25-assistant --use-bm25-turn --use-bm25-prf
             --use-dense-rocchio --no-rerank)
STEM=(--lexical-stemmer snowball-english --lexical-stopwords en-v1)
VARIANTS=(d1b1 d2b1 d3b1 d1b2 d1b3)
ALPHAS=(0.8 0.7 0.9)
DEPTH=20
V3=engram-ce-minilm-v3  # the next model version (ship, heldout-v3, speed)
mkdir -p "$OUT" "$SCRATCH"
source "$(dirname "$0")/_rerank_lib.sh"

recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
recreate_split results/structure/locomo_split_manifest.json "$LOCOMO" "$SCRATCH/loc"
LME_TUNE=$(part_of "$SCRATCH/lme" tune)
LOC_TUNE=$(part_of "$SCRATCH/loc" tune)
LME_HELD=$(part_of "$SCRATCH/lme" heldout)
LOC_HELD=$(part_of "$SCRATCH/loc" heldout)

topm_args() {  # VARIANT dDbB -> the two options
  local v="$1" d b
  d=${v#d}; d=${d%%b*}; b=${v#*b}
  echo "--dense-turn-top-m $d --bm25-turn-top-m $b"
}

runs_lme() {
  local v
  for v in "${VARIANTS[@]}"; do
    # shellcheck disable=SC2046
    run_to "$LME_TUNE" "$SCRATCH/topm_lme_$v.jsonl" "${ALL_SIGNALS[@]}" "${STEM[@]}" \
      $(topm_args "$v")
  done
}

runs_loc() {
  local v
  for v in "${VARIANTS[@]}"; do
    # shellcheck disable=SC2046
    run_to "$LOC_TUNE" "$SCRATCH/topm_loc_$v.jsonl" "${ALL_SIGNALS[@]}" "${STEM[@]}" \
      --lexical-speaker prefix $(topm_args "$v")
  done
}

topm() {
  local v
  echo "== 2. tuning runs (scratch: rows hashes are in the tune reports)"
  runs_lme
  runs_loc
  echo "== 3. each variant's two runs tuned together (per structure; LoCoMo by conversation)"
  for v in "${VARIANTS[@]}"; do
    [ -e "$OUT/topm_$v.yaml" ] || "$E" tune "$SCRATCH/topm_lme_$v.jsonl.gz" \
      "$SCRATCH/topm_loc_$v.jsonl.gz" --grid benchmarks/longmemeval/tune_grid.yaml \
      --output "$OUT/topm_$v.yaml" --protocol answerable --protocol locomo \
      --combine worst-ratio --cluster id-prefix --folds 5 --seed 0 | tail -n 5
  done
  echo "== 4. choice per structure: the best cross-validated estimate (ties: listed first)"
  [ -e "$OUT/turn_top_m.json" ] || "$PY" -m engram_eval.analysis.turn_top_m "$OUT" \
    "${VARIANTS[*]}"
  local chat people
  chat=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['structures']['chat']['chosen'])" "$OUT/turn_top_m.json")
  people=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['structures']['people']['chosen'])" "$OUT/turn_top_m.json")
  echo "== 5. the chosen runs tuned together (chat: $chat, people: $people)"
  [ -e "$OUT/topm_lme_$chat.jsonl.gz" ] || cp "$SCRATCH/topm_lme_$chat".jsonl.gz* "$OUT/"
  [ -e "$OUT/topm_loc_$people.jsonl.gz" ] || cp "$SCRATCH/topm_loc_$people".jsonl.gz* "$OUT/"
  first_stage "$OUT/topm_lme_$chat.jsonl.gz" "$OUT/topm_loc_$people.jsonl.gz" topm
  "$PY" scripts/derived_sidecars.py "$OUT"
}

first_stage() {  # CHAT_RUN PEOPLE_RUN NAME
  # the two runs tuned together (section 14's grid, 5 folds, seed 0, folds by conversation on
  # LoCoMo, worst-ratio) -> NAME_first_stage.yaml, and without its rerank fields ->
  # NAME_heldout_config.yaml (the first stage to freeze)
  local cfg="$OUT/${3}_first_stage.yaml"
  [ -e "$cfg" ] || "$E" tune "$1" "$2" --grid benchmarks/longmemeval/tune_grid.yaml \
    --output "$cfg" --protocol answerable --protocol locomo \
    --combine worst-ratio --cluster id-prefix --folds 5 --seed 0 | tail -n 5
  [ -e "$OUT/${3}_heldout_config.yaml" ] || "$PY" -m engram_eval.analysis.first_stage \
    "$cfg" "$OUT/${3}_heldout_config.yaml"
}

people() {
  # topm for people's chats alone (the LoCoMo runs; used when the LongMemEval runs are not
  # made): each variant's LoCoMo run tuned alone by tune_parts (the multi-part report that
  # analysis/turn_top_m.py reads; folds by conversation; when this step was run, single-run
  # `tune` still ignored --cluster) -> topm_loc_VARIANT.yaml, the choice
  # -> turn_top_m_people.json; when it is not the baseline, the chosen run (published) tuned
  # together with section 14's chat run (results/lexical/tune_lme_stem, the chat first stage
  # unchanged) -> topm_people_first_stage.yaml, and without its rerank fields ->
  # topm_people_heldout_config.yaml
  local v
  for v in "${VARIANTS[@]}"; do
    [ -e "$OUT/topm_loc_$v.yaml" ] || "$PY" -c "import sys
from engram_eval.analysis.tune_parts import tune_parts
r = tune_parts([sys.argv[1]], 'benchmarks/longmemeval/tune_grid.yaml', sys.argv[2],
               protocols=['locomo'], rule='worst-ratio', folds=5, seed=0, cluster='id-prefix')
p = r.report['structures']['people']['parts'][0]
print(f\"{sys.argv[2]}: in-sample {p['in_sample_score']:.4f}, CV {p['cv_estimate']:.4f}\")" \
      "$SCRATCH/topm_loc_$v.jsonl.gz" "$OUT/topm_loc_$v.yaml"
  done
  [ -e "$OUT/turn_top_m_people.json" ] || "$PY" -m engram_eval.analysis.turn_top_m "$OUT" \
    "${VARIANTS[*]}" topm_loc_ turn_top_m_people.json
  local people base
  people=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['structures']['people']['chosen'])" "$OUT/turn_top_m_people.json")
  base=${VARIANTS[0]}
  if [ "$people" != "$base" ]; then
    [ -e "$OUT/topm_loc_$people.jsonl.gz" ] || cp "$SCRATCH/topm_loc_$people".jsonl.gz* "$OUT/"
    first_stage results/lexical/tune_lme_stem.jsonl.gz "$OUT/topm_loc_$people.jsonl.gz" \
      topm_people
  fi
  "$PY" scripts/derived_sidecars.py "$OUT"
}

rerank() {
  local chat
  chat=$("$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['structures']['chat']['chosen'] != r['baseline'])" "$OUT/turn_top_m.json")
  if [ "$chat" != True ]; then
    echo "the chat first stage did not change (the baseline won): nothing to re-check"; return 0
  fi
  local i
  for i in 0 1; do
    [ -e "$SCRATCH/ce_fold$i" ] || { echo "missing $SCRATCH/ce_fold$i:" \
      "run scripts/publish_lexical.sh train with this SCRATCH first" >&2; exit 1; }
    "$PY" scripts/compare_card.py results/lexical/ce_fold$i.card.json \
      "$SCRATCH/ce_fold$i.card.json"
  done
  echo "== each half of the tune part: the new first stage, then reranked out of fold"
  rerank_folds "$LME_TUNE" "$OUT/topm_first_stage.yaml" "$OUT" "$OUT/topm_rerank_choice.json" \
    "$DEPTH" "${ALPHAS[*]}"
  "$PY" scripts/derived_sidecars.py "$OUT"
}

heldout() {
  local v2=engram-ce-minilm-v2
  local cfg="$OUT/topm_heldout_config.yaml"
  [ -e "$cfg" ] || { echo "missing $cfg: run the topm step first" >&2; exit 1; }
  declare -A PART CFG
  PART[lme_first_stage]="$LME_HELD"; CFG[lme_first_stage]="--config $cfg --no-rerank"
  PART[lme_default]="$LME_HELD"; CFG[lme_default]="--config $cfg --rerank --reranker-model $v2"
  PART[locomo_default]="$LOC_HELD"
  CFG[locomo_default]="--config $cfg --rerank --reranker-model $v2"
  freeze_all_then_run heldout_topm_ lme_first_stage lme_default locomo_default
  echo "== paired comparisons: section 14's runs of the same role, section 6's reranked run,"
  echo "   and the reranked run against its own first stage"
  local pairs=("results/lexical/heldout_lme_first_stage.jsonl.gz lme_first_stage lme_first_stage"
    "results/lexical/heldout_lme_default.jsonl.gz lme_default lme_default"
    "results/lexical/heldout_locomo_default.jsonl.gz locomo_default locomo_default"
    "results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz lme_default lme_default_vs_section6"
    "$OUT/heldout_topm_lme_first_stage.jsonl.gz lme_default lme_default_vs_first_stage"
    "results/lexical/heldout_locomo_bm25_only.jsonl.gz locomo_default locomo_default_vs_bm25_only")
  compare_pairs heldout_topm_ compare_topm_ "${pairs[@]}"
  "$PY" scripts/derived_sidecars.py "$OUT"
}

retrain() {
  # issue 27 item 5: retrain on the new first stage's candidates (its two fold runs of the
  # rerank step, merged), fold cross-encoders with section 6's settings (TRAIN), each half
  # reranked by the one that never saw it at the card's depth and blends 0.8 0.7 0.9; the
  # choice pools none, the shipped family's d20_a0.8 (rerank step) and the retrained family
  local cand="$SCRATCH/topm_candidates.jsonl" a
  merged_candidates "$OUT" "$LME_TUNE" "$cand"
  train_folds "$LME_TUNE" "$cand" ce_topm_fold
  echo "== each half reranked by the retrained fold cross-encoder that never saw it"
  CE_NAME=ce_topm_fold RUN_TAG=new_ rerank_folds "$LME_TUNE" "$OUT/topm_first_stage.yaml" \
    "$OUT" "" "$DEPTH" "${ALPHAS[*]}"
  CANDS=()
  add_candidate none "$OUT" none
  add_candidate "v2_d${DEPTH}_a0.8" "$OUT" "d${DEPTH}_a0.8"
  for a in "${ALPHAS[@]}"; do add_candidate "new_d${DEPTH}_a$a" "$OUT" "new_d${DEPTH}_a$a"; done
  [ -e "$OUT/topm_retrain_choice.json" ] || "$PY" benchmarks/longmemeval/choose_rerank.py \
    "${CANDS[@]}" --output "$OUT/topm_retrain_choice.json" | tail -n 12
  "$PY" scripts/derived_sidecars.py "$OUT"
}

ship() {
  # issue 27 item 5, after retrain: when its choice is a retrained candidate, the next model
  # version. Rules fixed before the training: a cross-encoder trained with TRAIN on the whole
  # tune part's candidates of the new first stage (the merged fold runs the retrain step
  # trained its fold models from), stored in section 12's form (ONNX int8, the shipped
  # scheme), its card's settings those of the choice (depth and blend from its name; turn
  # unit, 128 tokens, people's rerank off, as v2's card) -> engram_eval/models/$V3
  local cand="$SCRATCH/topm_candidates.jsonl" chosen d a
  chosen=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['chosen'])" \
    "$OUT/topm_retrain_choice.json")
  case "$chosen" in
    new_d*_a*) ;;
    *) echo "the retrain choice is $chosen, not a retrained candidate: no new version"; return 0;;
  esac
  d=${chosen#new_d}; d=${d%%_a*}; a=${chosen##*_a}
  merged_candidates "$OUT" "$LME_TUNE" "$cand"
  [ -e "$SCRATCH/ce_topm_tune" ] || "$E" train-reranker "$LME_TUNE" --run "$cand" \
    --output "$SCRATCH/ce_topm_tune" "${TRAIN[@]}" 2>/dev/null | tail -n 2
  [ -e "$OUT/ce_topm_tune.card.json" ] || cp "$SCRATCH/ce_topm_tune.card.json" "$OUT/"
  "$PY" scripts/derived_sidecars.py "$OUT"
  [ -e "engram_eval/models/$V3" ] && return 0
  printf '{"rerank_unit": "turn", "rerank_max_length": 128, "rerank_candidates": %s, "fusion_alpha": %s, "reranker_backend": "onnx", "reranker_precision": "int8", "people_overrides": {"rerank": false}}\n' \
    "$d" "$a" > "$SCRATCH/${V3}_settings.json"
  "$PY" scripts/ship_reranker.py "$SCRATCH/ce_topm_tune" "$SCRATCH/ce_topm_tune.card.json" \
    "$V3" --version 3 --settings "$SCRATCH/${V3}_settings.json" --chosen-by \
    "rerank_candidates $d and fusion_alpha $a chosen out of fold on the tune part of the LongMemEval_S dev split, on the first stage chosen there for issue 27 item 3 (results/turn_top_m/topm_first_stage.yaml: dense_turn_top_m 3): each half reranked by a fold cross-encoder trained, with these weights' settings, on the other half's candidates of that first stage (results/turn_top_m/topm_retrain_choice.json, candidate $chosen, against the first stage alone and engram-ce-minilm-v2's family); rerank_unit, rerank_max_length and people_overrides as engram-ce-minilm-v2; int8 as section 12's stored form"
}

heldout_v3() {
  # the next model version's held-out regression check, rules fixed before any run: the
  # frozen first stage of the heldout step (topm_heldout_config.yaml) with $V3 at its card's
  # settings (lme_v3), and with the fp32 model it was exported from at the same settings
  # (lme_v3_fp32, the stored form's check, as section 12); both frozen, then each run once;
  # paired: v3 against its fp32 source, against v2 (heldout_topm_lme_default), section 6's
  # reranked run and its own first stage. People's chats: the card keeps their rerank off,
  # so a LoCoMo run would repeat heldout_topm_locomo_default; none is made.
  local cfg="$OUT/topm_heldout_config.yaml"
  [ -e "engram_eval/models/$V3" ] || { echo "missing engram_eval/models/$V3: ship first" >&2
    exit 1; }
  [ -e "$SCRATCH/ce_topm_tune" ] || { echo "missing $SCRATCH/ce_topm_tune: ship first" >&2
    exit 1; }
  local d a
  read -r d a < <("$PY" -c "import json,sys; s=json.load(open(sys.argv[1]))['settings']; print(s['rerank_candidates'], s['fusion_alpha'])" "engram_eval/models/$V3/card.json")
  declare -A PART CFG
  PART[lme_v3]="$LME_HELD"; CFG[lme_v3]="--config $cfg --rerank --reranker-model $V3"
  PART[lme_v3_fp32]="$LME_HELD"
  CFG[lme_v3_fp32]="--config $cfg --rerank --reranker-model $SCRATCH/ce_topm_tune \
--reranker-backend onnx --reranker-precision fp32 --rerank-unit turn --rerank-max-length 128 \
--rerank-candidates $d --fusion-alpha $a"
  freeze_all_then_run heldout_topm_ lme_v3 lme_v3_fp32
  local pairs=("$OUT/heldout_topm_lme_v3_fp32.jsonl.gz lme_v3 lme_v3_vs_fp32"
    "$OUT/heldout_topm_lme_default.jsonl.gz lme_v3 lme_v3_vs_v2"
    "results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz lme_v3 lme_v3_vs_section6"
    "$OUT/heldout_topm_lme_first_stage.jsonl.gz lme_v3 lme_v3_vs_first_stage")
  compare_pairs heldout_topm_ compare_topm_ "${pairs[@]}"
  "$PY" scripts/derived_sidecars.py "$OUT"
}

speed() {
  # cost under this first stage, each pass 3 times cold, each in a fresh process (nothing
  # else running; the ratios are of the medians):
  # the first 30 LongMemEval tune questions, first stage and + $V3 at its card's settings,
  # then the first stage before section 14 (the analyser and fusion calibration v4 was fitted
  # under, BEFORE_14: issue 27's "today"); the LoCoMo tune conversations, first stage
  # (people's chats are not reranked)
  local before=(--dense-turn-top-m 1 --no-use-bm25-prf --weight-bm25-prf 0.0
                --lexical-stemmer none --lexical-stopwords none --weight-bm25-user 0.3)
  [ -e "$OUT/speed_tune30.json" ] || "$PY" benchmarks/longmemeval/speed_rerank.py "$LME_TUNE" \
    --limit 30 --reranker-model "$SCRATCH/ce_topm_tune" --shipped "$V3" \
    --passes rerank-shipped --scratch "$SCRATCH/speed_lme" --output "$OUT/speed_tune30.json" \
    --config "$OUT/topm_heldout_config.yaml" --repeats 3
  [ -e "$OUT/speed_tune30_before.json" ] || "$PY" benchmarks/longmemeval/speed_rerank.py \
    "$LME_TUNE" --limit 30 --reranker-model "$SCRATCH/ce_topm_tune" --passes "" \
    --scratch "$SCRATCH/speed_lme_before" --output "$OUT/speed_tune30_before.json" \
    "${before[@]}" --repeats 3
  [ -e "$OUT/speed_locomo_tune.json" ] || "$PY" benchmarks/longmemeval/speed_rerank.py \
    "$LOC_TUNE" --reranker-model "$SCRATCH/ce_topm_tune" --passes "" --protocol locomo \
    --scratch "$SCRATCH/speed_loc" --output "$OUT/speed_locomo_tune.json" \
    --config "$OUT/topm_heldout_config.yaml" --repeats 3
  "$PY" scripts/derived_sidecars.py "$OUT"
}

absent() {
  # issue 30 item 1's candidate, a reranker that learns "nothing here". Rules fixed before any
  # training: the retrain step's fold cross-encoders (TRAIN, the same candidates) trained with
  # --unanswerable-negatives 5 (each _abs question of the other half gives its first 5 ranked
  # sessions as an all-negative group; 5 = TRAIN's hard negatives) -> ce_absent_fold{0,1};
  # each half of the tune part reranked by the one that never saw it at the card's depth and
  # blend (fold?_absent_d20_a0.8); then, on the same questions, engram-eval confidence-study
  # (its defaults) over these runs and over the retrained family's (fold?_new_d20_a0.8) ->
  # study_absent.json, study_new.json, and choose_rerank.py over none, the family and the
  # candidate -> absent_choice.json. The candidate would replace the family only if its
  # study's combined out-of-fold AUROC for "the top result is gold" is higher and the rerank
  # objective not lower; otherwise it is dropped (PROVENANCE says which).
  local cand="$SCRATCH/topm_candidates.jsonl" r
  merged_candidates "$OUT" "$LME_TUNE" "$cand"
  train_folds "$LME_TUNE" "$cand" ce_absent_fold --unanswerable-negatives 5
  echo "== each half reranked by the 'nothing here' fold cross-encoder that never saw it"
  CE_NAME=ce_absent_fold RUN_TAG=absent_ rerank_folds "$LME_TUNE" \
    "$OUT/topm_first_stage.yaml" "$OUT" "" "$DEPTH" 0.8
  for r in new absent; do
    [ -e "$OUT/study_$r.json" ] || "$E" confidence-study "$OUT/fold0_${r}_d${DEPTH}_a0.8.jsonl.gz" \
      "$OUT/fold1_${r}_d${DEPTH}_a0.8.jsonl.gz" --dataset "$LME_TUNE" \
      --output "$OUT/study_$r.json" --plot "$OUT/study_$r.png"
  done
  CANDS=()
  for r in none "new_d${DEPTH}_a0.8" "absent_d${DEPTH}_a0.8"; do add_candidate "$r" "$OUT" "$r"; done
  [ -e "$OUT/absent_choice.json" ] || "$PY" benchmarks/longmemeval/choose_rerank.py \
    "${CANDS[@]}" --output "$OUT/absent_choice.json" | tail -n 6
  "$PY" scripts/derived_sidecars.py "$OUT"
}

case "$STEP" in
  # step 2 of topm for one dataset only, or one variant of it (runs may go side by side)
  runs-lme:*|runs-loc:*) VARIANTS=("${STEP#*:}"); "runs_${STEP:5:3}";;
  runs-lme) runs_lme;;
  runs-loc) runs_loc;;
  topm) topm;;
  people) people;;
  rerank) rerank;;
  retrain) retrain;;
  heldout) heldout;;
  ship) ship;;
  heldout-v3) heldout_v3;;
  speed) speed;;
  absent) absent;;
  *) echo "unknown step $STEP (topm|people|rerank|retrain|heldout|ship|heldout-v3|speed|absent|runs-lme|runs-loc)" >&2
     exit 2;;
esac
