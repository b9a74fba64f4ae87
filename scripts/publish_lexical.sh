#!/usr/bin/env bash
# The lexical half and people's chats (issue 27), with the shipped reranker in place for chats
# (issue 26): the analyser, the speaker rule and the fusion chosen per chat structure on the
# tuning parts only, the rerank blend and depth re-chosen out of fold on the new first stage,
# everything frozen, then each held-out part run once.
#
#   scripts/publish_lexical.sh first|rerank|heldout|speed LME_DATA LOCOMO_DATA CACHE [SCRATCH]
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split);
# LOCOMO_DATA: ../shared/data/locomo/locomo10.json. Run from the repository root of a clean
# checkout. Nothing in OUT is overwritten; a step whose output exists is skipped. Every run
# embeds with the package default (ONNX fp32).
#
# first    1. both published splits re-created (every part's sha256 checked against its
#             manifest); 2. tuning runs that compute and trace every signal: the LongMemEval
#             tune part with each analyser (plain: word tokens; stem: + Snowball English
#             stemming + the en-v1 stopwords), the LoCoMo tune conversations with each analyser
#             and each speaker rule (none, prefix); 3. `engram-eval tune` on each (5-fold,
#             by conversation on LoCoMo); 4. per structure, the variant with the best
#             cross-validated estimate (lexical_choice.json); 5. the two chosen runs tuned
#             together -> tuned_first_stage.yaml (chat settings + people_overrides).
# train    section 6's fold cross-encoders retrained (its command, its candidates), each card
#          compared with the published one (same pairs; weights in float noise, section 6b)
# rerank   the rerank stage on the chosen chat first stage, out of fold: each half of the
#          LongMemEval tune part ranked by the chosen first stage alone and reranked by the
#          fold cross-encoder that never saw it (section 6's fold models, retrained with
#          section 6's command and checked against their published cards), ONNX int8 (the
#          shipped form), at each blend and depth; depths limited beforehand to what keeps
#          the stage within 0.5x the first stage's cost (section 12 measured 0.59x at 35;
#          pairs scale with depth), the blend kept at section 6's out-of-fold choice (0.8:
#          a blend grid was dropped for time before any fold run was scored);
#          choose_rerank.py picks by section 6's objective -> rerank_choice.json.
# heldout  every configuration frozen before any held-out run, then one run each: LongMemEval
#          held-out part (the chosen first stage; + the chosen rerank with the shipped model),
#          LoCoMo held-out conversations (the chosen configuration; BM25 only with the same
#          analyser); verified with --rerun 3; paired comparisons.
# speed    speed_rerank.py on the first 30 tune questions (first stage, + the shipped rerank at
#          the chosen depth; and the first stage before), and the LoCoMo first stage cold on
#          the tune conversations (chosen and before).
set -euo pipefail
STEP="$1"
LME="$2"
LOCOMO="$3"
CACHE="$4"
SCRATCH="${5:-/tmp/w/lex27}"
OUT=results/lexical
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
COMMON=(--cache-dir "$CACHE" --no-progress)
ALL_SIGNALS=(--use-dense --use-bm25-user --use-bm25-assistant --use-bm25-turn --use-bm25-prf
             --use-dense-rocchio --no-rerank)
declare -A LEX=([plain]="--lexical-stemmer none --lexical-stopwords none"
                [stem]="--lexical-stemmer snowball-english --lexical-stopwords en-v1")
declare -A SPK=([none]="--lexical-speaker none" [prefix]="--lexical-speaker prefix")
LME_VARIANTS=(plain stem)
LOC_VARIANTS=(plain_none stem_none plain_prefix stem_prefix)
ALPHAS=(0.8)
DEPTHS=(15 20 25)
mkdir -p "$OUT" "$SCRATCH"
source "$(dirname "$0")/_rerank_lib.sh"

recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
recreate_split results/structure/locomo_split_manifest.json "$LOCOMO" "$SCRATCH/loc"
LME_TUNE=$(part_of "$SCRATCH/lme" tune)
LME_HELD=$(part_of "$SCRATCH/lme" heldout)
LOC_TUNE=$(part_of "$SCRATCH/loc" tune)
LOC_HELD=$(part_of "$SCRATCH/loc" heldout)

tune_one() {  # RUN PROTOCOL GRID OUT [cluster args]
  local r="$1" p="$2" g="$3" o="$4"
  shift 4
  [ -e "$o" ] || "$E" tune "$r" --grid "$g" --output "$o" \
    --protocol "$p" --folds 5 --seed 0 "$@" | tail -n 2
}

first() {
  echo "== 2. tuning runs (scratch: rows hashes are in the tune reports)"
  for v in "${LME_VARIANTS[@]}"; do
    # shellcheck disable=SC2086
    run_to "$LME_TUNE" "$SCRATCH/tune_lme_$v.jsonl" "${ALL_SIGNALS[@]}" ${LEX[$v]}
  done
  for v in "${LOC_VARIANTS[@]}"; do
    # shellcheck disable=SC2086
    run_to "$LOC_TUNE" "$SCRATCH/tune_loc_$v.jsonl" "${ALL_SIGNALS[@]}" ${LEX[${v%_*}]} ${SPK[${v#*_}]}
  done
  echo "== 3. tune each variant on its own part"
  for v in "${LME_VARIANTS[@]}"; do
    tune_one "$SCRATCH/tune_lme_$v.jsonl.gz" answerable benchmarks/longmemeval/tune_grid.yaml \
      "$OUT/tune_lme_$v.yaml"
  done
  for v in "${LOC_VARIANTS[@]}"; do
    # no assistant role between people: the same grid with bm25_assistant at 0
    tune_one "$SCRATCH/tune_loc_$v.jsonl.gz" locomo benchmarks/longmemeval/tune_grid_people.yaml \
      "$OUT/tune_loc_$v.yaml" --cluster id-prefix
  done
  echo "== 4. choice per structure: the best cross-validated estimate (ties: listed first)"
  [ -e "$OUT/lexical_choice.json" ] || "$PY" -m engram_eval.analysis.lexical_choice "$OUT" \
    "${LME_VARIANTS[*]}" "${LOC_VARIANTS[*]}"
  local chat people
  chat=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['structures']['chat']['chosen'])" "$OUT/lexical_choice.json")
  people=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['structures']['people']['chosen'])" "$OUT/lexical_choice.json")
  echo "== 5. the chosen runs tuned together (chat: $chat, people: $people)"
  for f in "$SCRATCH/tune_lme_$chat" "$SCRATCH/tune_loc_$people"; do
    b=$(basename "$f")
    [ -e "$OUT/$b.jsonl.gz" ] || cp "$f".jsonl.gz* "$OUT/"
  done
  [ -e "$OUT/tuned_first_stage.yaml" ] || "$E" tune "$OUT/tune_lme_$chat.jsonl.gz" \
    "$OUT/tune_loc_$people.jsonl.gz" --grid benchmarks/longmemeval/tune_grid.yaml \
    --output "$OUT/tuned_first_stage.yaml" --protocol answerable --protocol locomo \
    --combine worst-ratio --cluster id-prefix --folds 5 --seed 0 | tail -n 4
}

train() {
  echo "== fold cross-encoders, retrained with section 6's command on section 6's candidates"
  local cand="$SCRATCH/tune_candidates.jsonl"
  merged_candidates results/longmemeval_s_dev_rerank "$LME_TUNE" "$cand"
  for i in 0 1; do
    [ -e "$SCRATCH/ce_fold$i" ] || "$E" train-reranker "$LME_TUNE" --run "$cand" \
      --output "$SCRATCH/ce_fold$i" --exclude-shard "$i/2" "${TRAIN[@]}" 2>/dev/null | tail -n 2
    "$PY" scripts/compare_card.py results/longmemeval_s_dev_rerank/ce_fold$i.card.json \
      "$SCRATCH/ce_fold$i.card.json"
    [ -e "$OUT/ce_fold${i}.card.json" ] || cp "$SCRATCH/ce_fold$i.card.json" "$OUT/ce_fold${i}.card.json"
  done
}

rerank() {
  echo "== each half of the tune part: the chosen first stage, then reranked out of fold"
  rerank_folds "$LME_TUNE" "$OUT/tuned_first_stage.yaml" "$OUT" "$OUT/rerank_choice.json" \
    "${DEPTHS[*]}" "${ALPHAS[*]}"
}

heldout() {
  local v2=engram-ce-minilm-v2
  echo "== the frozen first stage: tuned_first_stage.yaml without its rerank fields (a YAML"
  echo "   value is explicit and would override the reranker's card)"
  [ -e "$OUT/heldout_config.yaml" ] || "$PY" -m engram_eval.analysis.first_stage \
    "$OUT/tuned_first_stage.yaml" "$OUT/heldout_config.yaml"
  declare -A PART CFG
  local cfg="--config $OUT/heldout_config.yaml"
  PART[lme_first_stage]="$LME_HELD";  CFG[lme_first_stage]="$cfg --no-rerank"
  PART[lme_default]="$LME_HELD";      CFG[lme_default]="$cfg --rerank --reranker-model $v2"
  PART[locomo_default]="$LOC_HELD";   CFG[locomo_default]="$cfg --rerank --reranker-model $v2"
  PART[locomo_bm25_only]="$LOC_HELD"; CFG[locomo_bm25_only]="$cfg --retriever bm25 --no-rerank"
  freeze_all_then_run heldout_ lme_first_stage lme_default locomo_default locomo_bm25_only
  echo "== paired comparisons"
  local pairs=(
    "results/longmemeval_s_dev_split/heldout_default.jsonl.gz lme_first_stage first_stage_vs_section1_default"
    "results/longmemeval_s_dev_split/heldout_bm25_only.jsonl.gz lme_first_stage first_stage_vs_section1_bm25_only"
    "results/shipped_reranker/heldout_lme_shipped.jsonl.gz lme_default default_vs_shipped_v1"
    "$OUT/heldout_lme_first_stage.jsonl.gz lme_default default_vs_first_stage"
    "results/structure/heldout_locomo_tuned.jsonl.gz locomo_default locomo_default_vs_section7_default"
    "$OUT/heldout_locomo_bm25_only.jsonl.gz locomo_default locomo_default_vs_bm25_only"
    "results/structure/heldout_locomo_bm25_only.jsonl.gz locomo_default locomo_default_vs_section7_bm25_only")
  # (clustered by conversation: exactly the LoCoMo pairs, whose names start locomo)
  compare_pairs heldout_ compare_ "${pairs[@]}"
  "$PY" scripts/derived_sidecars.py "$OUT"
}

speed() {
  # LongMemEval: the first 30 tune questions, the chosen first stage and + the shipped rerank,
  # then the first stage of the defaults before (no config); LoCoMo: the tune conversations
  # (a held-out part is not run for a timing), the chosen first stage and the one before
  [ -e "$OUT/speed_tune30.json" ] || "$PY" benchmarks/longmemeval/speed_rerank.py "$LME_TUNE" \
    --limit 30 --reranker-model "$SCRATCH/ce_fold0" --shipped engram-ce-minilm-v2 \
    --passes rerank-shipped --scratch "$SCRATCH/speed_lme" --output "$OUT/speed_tune30.json" \
    --config "$OUT/heldout_config.yaml"
  [ -e "$OUT/speed_tune30_before.json" ] || "$PY" benchmarks/longmemeval/speed_rerank.py \
    "$LME_TUNE" --limit 30 --reranker-model "$SCRATCH/ce_fold0" --passes "" \
    --scratch "$SCRATCH/speed_lme_before" --output "$OUT/speed_tune30_before.json"
  [ -e "$OUT/speed_locomo_tune.json" ] || "$PY" benchmarks/longmemeval/speed_rerank.py \
    "$LOC_TUNE" --reranker-model "$SCRATCH/ce_fold0" --passes "" --protocol locomo \
    --scratch "$SCRATCH/speed_loc" --output "$OUT/speed_locomo_tune.json" \
    --config "$OUT/heldout_config.yaml"
  [ -e "$OUT/speed_locomo_tune_before.json" ] || "$PY" benchmarks/longmemeval/speed_rerank.py \
    "$LOC_TUNE" --reranker-model "$SCRATCH/ce_fold0" --passes "" --protocol locomo \
    --scratch "$SCRATCH/speed_loc_before" --output "$OUT/speed_locomo_tune_before.json"
}

case "$STEP" in
  heldout) heldout;;
  speed) speed;;
  first) first;;
  train) train;;
  rerank) rerank;;
  *) echo "unknown step $STEP (first|rerank|heldout|speed)" >&2; exit 2;;
esac
