#!/usr/bin/env bash
# The feature study for the production confidence (issue 30 item 1, PROVENANCE.md section 16):
# which traced signals say "the answer is here", out of fold on tuning parts only.
#
#   scripts/publish_confidence_study.sh LME_DATA LOCOMO_DATA CACHE [SCRATCH]
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split);
# LOCOMO_DATA: ../shared/data/locomo/locomo10.json. Run from the repository root of a clean
# checkout. Nothing in OUT is overwritten; a step whose output exists is skipped.
#
# 1. the published splits re-created in SCRATCH (sha256 of each part checked against its
#    manifest): the LongMemEval dev split of section 1, the LoCoMo split of section 7;
# 2. LoCoMo: the package default (no rerank on chats between people) on the tune
#    conversations -> OUT/locomo_tune_default.jsonl.gz (verified with --rerun 3, compressed);
#    LongMemEval: no new run, section 14's out-of-fold runs of the shipped configuration on
#    the two halves of the tune part (results/lexical/fold{0,1}_d20_a0.8.jsonl.gz, each half
#    reranked by the fold cross-encoder that never saw it) are read as they are;
# 3. engram-eval confidence-study on each (default settings: 20 candidates, 5 folds, C 1,
#    1000 resamples, seed 0) -> OUT/lme_tune.{json,png}, OUT/locomo_tune.{json,png}.
set -euo pipefail
LME="$1"
LOCOMO="$2"
CACHE="$3"
SCRATCH="${4:-/tmp/w/lex27}"
OUT=results/confidence_study
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY)
COMMON=(--cache-dir "$CACHE" --no-progress)
mkdir -p "$OUT" "$SCRATCH"
source "$(dirname "$0")/_rerank_lib.sh"  # recreate_split, part_of, run_to

echo "== 1. the tuning parts"
recreate_split results/longmemeval_s_dev_split/split_manifest.json "$LME" "$SCRATCH/lme"
recreate_split results/structure/locomo_split_manifest.json "$LOCOMO" "$SCRATCH/loc"
LME_TUNE=$(part_of "$SCRATCH/lme" tune)
LOC_TUNE=$(part_of "$SCRATCH/loc" tune)

echo "== 2. the LoCoMo tune conversations under the package default"
run_to "$LOC_TUNE" "$OUT/locomo_tune_default.jsonl"

echo "== 3. the studies"
study() {
  local name="$1" data="$2"
  shift 2
  [ -e "$OUT/$name.json" ] && return 0
  "$E" confidence-study "$@" --dataset "$data" --output "$OUT/$name.json" \
    --plot "$OUT/$name.png"
}
study lme_tune "$LME_TUNE" results/lexical/fold0_d20_a0.8.jsonl.gz \
  results/lexical/fold1_d20_a0.8.jsonl.gz
study locomo_tune "$LOC_TUNE" "$OUT/locomo_tune_default.jsonl.gz"
