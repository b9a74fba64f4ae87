#!/usr/bin/env bash
# The rerank stage re-chosen on the new chat first stage (issue 27 item 5, issue 26): the
# blend grid that publish_lexical.sh dropped for time, and cross-encoders retrained on the
# new first stage's candidates, each scored out of fold on the LongMemEval tune part.
#
#   scripts/publish_retrain.sh folds LME_DATA CACHE [SCRATCH]
#
# (the ship and heldout steps below are the rules fixed now; their code is added once the
# choice is known, and only the one the choice calls for)
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split).
# Run from the repository root of a clean checkout. Nothing in OUT is overwritten; a step whose
# output exists is skipped. Rules fixed before any fold run of this script was scored:
#
# folds  1. the published split re-created (sha256 of each part checked against its manifest);
#        2. candidates: results/lexical/fold{0,1}_none merged (the chosen first stage,
#           tuned_first_stage.yaml, on the whole tune part);
#        3. two cross-encoders retrained with section 6's settings (_rerank_lib.sh TRAIN) on
#           those candidates, each without one half of the tune part (--exclude-shard I/2);
#        4. each half reranked at depth 20 (rerank_choice.json of section 14, kept) by the
#           fold model that never saw it, ONNX int8 (the shipped form), for two model families:
#           "v2" (section 6's fold models, the weights engram-ce-minilm-v2 ships) and "new"
#           (step 3), each at fusion_alpha 0.6, 0.7, 0.8, 0.9; v2 at 0.8 is section 14's
#           published fold runs, reused;
#        5. choose_rerank.py over none, v2_a0.8 (listed first among the reranked, so a tie
#           keeps the shipped configuration), the other v2 blends, then the new ones, by
#           section 6's objective -> retrain_choice.json.
# ship   only when step 5 did not choose v2_a0.8: "new_*" -> a cross-encoder trained with the
#        same settings on the whole tune part, shipped as engram-ce-minilm-v3 (int8, its card
#        with the chosen blend and depth); "v2_*" -> engram-ce-minilm-v3 as a settings-only
#        version of v2 with the chosen blend.
# heldout  the shipped v3 frozen, then one run on the LongMemEval dev held-out part (a
#        regression check by the ledger's rule: the part has been run before), verified with
#        --rerun 3, compared (paired) with section 14's default (v2) and first stage.
set -euo pipefail
STEP="$1"
LME="$2"
CACHE="$3"
SCRATCH="${4:-/tmp/w/lex27}"
OUT=results/rerank_retrain
LEX=results/lexical
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
COMMON=(--cache-dir "$CACHE" --no-progress)
ALPHAS=(0.6 0.7 0.8 0.9)
DEPTH=20
mkdir -p "$OUT" "$SCRATCH"
source "$(dirname "$0")/_rerank_lib.sh"

recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
LME_TUNE=$(part_of "$SCRATCH/lme" tune)
LME_HELD=$(part_of "$SCRATCH/lme" heldout)

# fold_model FAMILY I: the cross-encoder that scores half I
fold_model() {
  if [ "$1" = v2 ]; then echo "$SCRATCH/ce_fold$2"; else echo "$SCRATCH/ce_new_fold$2"; fi
}

folds() {
  local cand="$SCRATCH/new_candidates.jsonl" i a fam f
  echo "== 2. candidates: the chosen first stage on the whole tune part"
  # the commit whose sources made those runs (tests/published_checks.py SOURCES_AT)
  [ -e "$cand" ] || "$E" merge "$LEX/fold0_none.jsonl.gz" "$LEX/fold1_none.jsonl.gz" \
    --dataset "$LME_TUNE" --output "$cand" --sources-at 8012952 | tail -n 1
  echo "== 3. fold cross-encoders on those candidates"
  train_folds "$LME_TUNE" "$cand" ce_new_fold
  for i in 0 1; do
    [ -e "$SCRATCH/ce_fold$i" ] || { echo "missing $SCRATCH/ce_fold$i:" \
      "run scripts/publish_lexical.sh train first" >&2; exit 1; }
  done
  echo "== 4. each half reranked out of fold, depth $DEPTH, each family and blend"
  local args=(--candidate none "$LEX/fold0_none.jsonl.gz" "$LEX/fold1_none.jsonl.gz"
              --candidate v2_a0.8 "$LEX/fold0_d${DEPTH}_a0.8.jsonl.gz"
              "$LEX/fold1_d${DEPTH}_a0.8.jsonl.gz")
  for fam in v2 new; do
    for a in "${ALPHAS[@]}"; do
      [ "$fam/$a" = v2/0.8 ] && continue
      args+=(--candidate "${fam}_a$a")
      for i in 0 1; do
        f="$OUT/fold${i}_${fam}_a$a.jsonl"
        run_to "$LME_TUNE" "$f" --config "$LEX/tuned_first_stage.yaml" --shard "$i/2" \
          --trace-sessions 5 --rerank --reranker-model "$(fold_model "$fam" "$i")" \
          --reranker-backend onnx --reranker-precision int8 --rerank-unit turn \
          --rerank-max-length 128 --rerank-candidates "$DEPTH" --fusion-alpha "$a"
        args+=("$f.gz")
      done
    done
  done
  echo "== 5. the choice"
  [ -e "$OUT/retrain_choice.json" ] || "$PY" benchmarks/longmemeval/choose_rerank.py \
    "${args[@]}" --output "$OUT/retrain_choice.json" | tail -n 14
}

case "$STEP" in
  folds) folds;;
  *) echo "unknown step $STEP (folds)" >&2; exit 2;;
esac
