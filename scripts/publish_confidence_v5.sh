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
# section 18's with engram-ce-minilm-v3. Nothing is overwritten.
#
# The steps and their rules are default_gate's (scripts/_default_gate_lib.sh), with:
#   chat data       section 18's out-of-fold runs of the shipped configuration's family
#                   (results/turn_top_m/fold{0,1}_new_d20_a0.8: each half of the tune part
#                   under the section 18 first stage, reranked by the fold cross-encoder
#                   trained with engram-ce-minilm-v3's settings without it);
#   chat held out   section 18's held-out run of the shipped default
#                   (results/turn_top_m/heldout_topm_lme_v3).
set -euo pipefail
PHASE="$1"
LME="$2"
LOCOMO="$3"
CACHE="$4"
SCRATCH="${5:-/tmp/w/conf5}"
OUT=results/confidence_v5
CAL=engram_eval/production/data/calibration_v5.json
SETTINGS=engram_eval/production/data/settings_v5.json
CHAT_RUNS=(results/turn_top_m/fold0_new_d20_a0.8.jsonl.gz
           results/turn_top_m/fold1_new_d20_a0.8.jsonl.gz)
HELD_CHAT_RUN=results/turn_top_m/heldout_topm_lme_v3.jsonl.gz
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY)
# shellcheck source=scripts/_default_gate_lib.sh
source "$(dirname "$0")/_default_gate_lib.sh"
COMMON=(--cache-dir "$CACHE" --no-progress)
default_gate "$PHASE"
