#!/usr/bin/env bash
# Calibration v6: calibration v5's per-shape fit (calibration v4's features and rules)
# refitted under the package's default pipeline with engram-ce-minilm-v4 (section 20's rerank
# prior), so that production search keeps running the default pipeline with a calibration
# fitted under it (issue 26 item 3; PROVENANCE.md section 20).
#
#   scripts/publish_confidence_v6.sh fit|measure LME_DATA LOCOMO_DATA CACHE [SCRATCH]
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split);
# LOCOMO_DATA: ../shared/data/locomo/locomo10.json; CACHE: an embedding cache directory
# (speed only). Run from the repository root of a clean checkout whose package defaults are
# section 18's first stage with engram-ce-minilm-v4. Nothing is overwritten.
#
# The steps and their rules are default_gate's (scripts/_default_gate_lib.sh), with:
#   chat data       section 20's out-of-fold runs of v4's configuration
#                   (results/rerank_prior/fold{0,1}_score_d20_aA, A the blend v4's card
#                   chose: each half of the tune part under the section 18 first stage,
#                   reranked with the score prior by the fold cross-encoder of v3's family
#                   trained without it);
#   chat held out   section 20's held-out run of v4 (results/rerank_prior/heldout_prior_lme_v4).
set -euo pipefail
PHASE="$1"
LME="$2"
LOCOMO="$3"
CACHE="$4"
SCRATCH="${5:-/tmp/w/conf6}"
OUT=results/confidence_v6
CAL=engram_eval/production/data/calibration_v6.json
SETTINGS=engram_eval/production/data/settings_v6.json
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY)
# shellcheck source=scripts/_default_gate_lib.sh
source "$(dirname "$0")/_default_gate_lib.sh"
A=$("$PY" -c "import json,sys; s=json.load(open(sys.argv[1]))['settings']; assert s['rerank_prior'] == 'score'; print(s['fusion_alpha'])" engram_eval/models/engram-ce-minilm-v4/card.json)
CHAT_RUNS=("results/rerank_prior/fold0_score_d20_a$A.jsonl.gz"
           "results/rerank_prior/fold1_score_d20_a$A.jsonl.gz")
HELD_CHAT_RUN=results/rerank_prior/heldout_prior_lme_v4.jsonl.gz
COMMON=(--cache-dir "$CACHE" --no-progress)
default_gate "$PHASE"
