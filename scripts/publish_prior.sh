#!/usr/bin/env bash
# The rerank prior (issue 26): the blend of the cross-encoder with the first stage re-chosen
# out of fold on the tune part, with the fused *score* as the prior beside the fused rank, and
# the settings-only model version it gives (PROVENANCE.md section 20).
#
#   scripts/publish_prior.sh STEP LME_DATA LOCOMO_DATA CACHE [SCRATCH]
#
# STEP: choose|ship|heldout|speed. LME_DATA: ../shared/data/longmemeval/
# longmemeval_s_cleaned.dev.json.gz (development split); LOCOMO_DATA:
# ../shared/data/locomo/locomo10.json (only its split is re-created); CACHE: an embedding cache
# directory (speed only); SCRATCH (default /tmp/w/topm) holds section 18's fold cross-encoders
# ce_topm_fold{0,1} (`scripts/publish_topm.sh retrain` makes them again: their cards are
# results/turn_top_m/ce_topm_fold*.card.json). Run from the repository root of a clean
# checkout. Nothing published is overwritten (a stopped step resumes). Rules, fixed in this
# script before any of its runs:
#
# choose   each half of the tune part (--shard I/2) under section 18's first stage
#          (results/turn_top_m/topm_first_stage.yaml), reranked by the fold cross-encoder of
#          engram-ce-minilm-v3's family that never saw it (ce_topm_fold{0,1}; int8, turn unit,
#          128 tokens, depth 20: the card's) with --rerank-prior score at fusion_alpha 0.5,
#          0.6 and 0.7 (fold{0,1}_score_d20_a*). choose_rerank.py (section 6's objective: the
#          mean of R@1, Rall@5 and NDCG@5 over the pooled answerable questions, highest wins,
#          ties to the first listed) over: the first stage alone and the card's configuration
#          (rank prior, blend 0.8), both section 18's runs of the same halves
#          (results/turn_top_m/fold{0,1}_none, fold{0,1}_new_d20_a0.8), listed first, then the
#          three new candidates -> prior_choice.json. The depth stays the card's so that the
#          cost stays the one measured (section 18: 0.335x the first stage); the weights stay
#          engram-ce-minilm-v3's (a new model would not fit issue 26's 50 MB budget).
# ship     when a score candidate wins: engram-ce-minilm-v4, a settings-only version of
#          engram-ce-minilm-v3 (its weights, checked by hash), its card's settings v3's with
#          rerank_prior score and the chosen blend. Otherwise nothing is shipped.
# heldout  v4's one held-out regression check (the part ran before, sections 1-18):
#          section 18's frozen first stage (topm_heldout_config.yaml) with v4 at its card's
#          settings, frozen, then run once (heldout_prior_lme_v4); compared, paired, with v3's
#          run (the current default), v2's, section 6's reranked run and the first stage
#          alone. People's chats: the card keeps their rerank off, so a LoCoMo run would
#          repeat section 18's heldout_topm_locomo_default; none is made. Whatever the
#          figures, the default follows the choice on the tune part.
# speed    the cost on the first 30 tune questions, as section 18's speed step (3 cold
#          repeats each, medians): the first stage and + v4 at its card's settings.
set -euo pipefail
STEP="$1"
LME="$2"
LOCOMO="$3"
CACHE="$4"
SCRATCH="${5:-/tmp/w/topm}"
OUT=results/rerank_prior
TOPM=results/turn_top_m
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY)
COMMON=(--cache-dir "$CACHE" --no-progress)
ALPHAS="0.5 0.6 0.7"
DEPTH=20
V3=engram-ce-minilm-v3
V4=engram-ce-minilm-v4
if [ -n "$(git status --porcelain -- engram_eval benchmarks)" ]; then
  echo "engram_eval/ or benchmarks/ differ from the commit: commit first" >&2; exit 1
fi
mkdir -p "$OUT" "$SCRATCH"
source "$(dirname "$0")/_rerank_lib.sh"  # recreate_split, part_of, run_to, rerank_folds

recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
recreate_split results/structure/locomo_split_manifest.json "$LOCOMO" "$SCRATCH/loc"
LME_TUNE=$(part_of "$SCRATCH/lme" tune)
LME_HELD=$(part_of "$SCRATCH/lme" heldout)

choose() {
  local a
  for a in 0 1; do
    [ -e "$SCRATCH/ce_topm_fold$a" ] || { echo "missing $SCRATCH/ce_topm_fold$a: run" \
      "scripts/publish_topm.sh retrain first" >&2; exit 1; }
  done
  echo "== each half reranked with the score prior by the fold cross-encoder that never saw it"
  CE_NAME=ce_topm_fold RUN_TAG=score_ RERANK_ARGS="--rerank-prior score" FIRST_DIR="$TOPM" \
    rerank_folds "$LME_TUNE" "$TOPM/topm_first_stage.yaml" "$OUT" "" "$DEPTH" "$ALPHAS"
  CANDS=()
  add_candidate none "$TOPM" none
  add_candidate "rank_d${DEPTH}_a0.8" "$TOPM" "new_d${DEPTH}_a0.8"
  for a in $ALPHAS; do add_candidate "score_d${DEPTH}_a$a" "$OUT" "score_d${DEPTH}_a$a"; done
  [ -e "$OUT/prior_choice.json" ] || "$PY" benchmarks/longmemeval/choose_rerank.py \
    "${CANDS[@]}" --output "$OUT/prior_choice.json" | tail -n 8
  "$PY" scripts/derived_sidecars.py "$OUT"
}

ship() {
  local chosen a
  chosen=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['chosen'])" \
    "$OUT/prior_choice.json")
  case "$chosen" in
    score_d*_a*) ;;
    *) echo "the choice is $chosen, not a score-prior candidate: no new version"; return 0;;
  esac
  a=${chosen##*_a}
  [ -e "engram_eval/models/$V4" ] && return 0
  "$PY" - "$V3" "$a" "$SCRATCH/${V4}_settings.json" <<'PYEOF'
import json, sys
from engram_eval.retrieval.models import SHIPPED_ROOT, read_card
settings = dict(read_card(SHIPPED_ROOT / sys.argv[1])["settings"])
settings.update(rerank_prior="score", fusion_alpha=float(sys.argv[2]))
open(sys.argv[3], "w").write(json.dumps(settings, sort_keys=True) + "\n")
PYEOF
  "$PY" scripts/ship_reranker.py --weights-from "$V3" "$V4" --version 4 \
    --settings "$SCRATCH/${V4}_settings.json" --chosen-by \
    "rerank_prior score and fusion_alpha $a chosen out of fold on the tune part of the LongMemEval_S dev split under section 18's first stage (results/rerank_prior/prior_choice.json, candidate $chosen, against the first stage alone and $V3's configuration, rank prior and blend 0.8): each half reranked by the fold cross-encoder of $V3's family that never saw it (results/turn_top_m/ce_topm_fold*.card.json); the weights, depth, unit, max length and people_overrides are $V3's"
}

heldout() {
  [ -e "engram_eval/models/$V4" ] || { echo "missing engram_eval/models/$V4: ship first" >&2
    exit 1; }
  declare -A PART CFG
  PART[lme_v4]="$LME_HELD"
  CFG[lme_v4]="--config $TOPM/topm_heldout_config.yaml --rerank --reranker-model $V4"
  freeze_all_then_run heldout_prior_ lme_v4
  local pairs=("$TOPM/heldout_topm_lme_v3.jsonl.gz lme_v4 lme_v4_vs_v3"
    "$TOPM/heldout_topm_lme_default.jsonl.gz lme_v4 lme_v4_vs_v2"
    "results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz lme_v4 lme_v4_vs_section6"
    "$TOPM/heldout_topm_lme_first_stage.jsonl.gz lme_v4 lme_v4_vs_first_stage")
  compare_pairs heldout_prior_ compare_prior_ "${pairs[@]}"
  "$PY" scripts/derived_sidecars.py "$OUT"
}

speed() {
  [ -e "$OUT/speed_tune30.json" ] || "$PY" benchmarks/longmemeval/speed_rerank.py "$LME_TUNE" \
    --limit 30 --reranker-model "$SCRATCH/ce_topm_tune" --shipped "$V4" \
    --passes rerank-shipped --scratch "$SCRATCH/speed_prior" --output "$OUT/speed_tune30.json" \
    --config "$TOPM/topm_heldout_config.yaml" --repeats 3
  "$PY" scripts/derived_sidecars.py "$OUT"
}

case "$STEP" in
  choose) choose;;
  ship) ship;;
  heldout) heldout;;
  speed) speed;;
  *) echo "unknown step $STEP (choose|ship|heldout|speed)" >&2; exit 2;;
esac
