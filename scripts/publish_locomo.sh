#!/usr/bin/env bash
# Re-create the published LoCoMo10 evidence-session retrieval runs in results/locomo10/ and
# verify them. Usage: scripts/publish_locomo.sh locomo10.json [CACHE_DIR]
# (locomo10.json sha256 79fa87e9...; CC BY-NC 4.0). Existing outputs are refused.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="$1"
CACHE="${2:-$HOME/.cache/engram-eval}"
OUT=results/locomo10
BENCH=benchmarks/locomo/run.py
# shellcheck source=scripts/_publish_lib.sh
source scripts/_publish_lib.sh
run bm25_only  --retriever bm25 --no-temporal --no-preserve-prior
run dense_only --retriever dense --no-temporal --no-preserve-prior
run hybrid_default
verify_all
.venv/bin/python scripts/ablation_table.py "$OUT" "LoCoMo10, all 10 conversations" > "$OUT/ABLATIONS.md"
.venv/bin/python scripts/derived_sidecars.py "$OUT"
