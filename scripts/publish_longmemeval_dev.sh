#!/usr/bin/env bash
# Re-create every published LongMemEval_S *development-split* result in results/longmemeval_s_dev/
# and verify each one. Usage: scripts/publish_longmemeval_dev.sh DATA [CACHE_DIR]
# DATA: longmemeval_s_cleaned.dev.json.gz (sha256 8aecf3b5...). Existing outputs are refused,
# never overwritten: move old results away first. The cache only changes speed.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="$1"
CACHE="${2:-$HOME/.cache/engram-eval}"
OUT=results/longmemeval_s_dev
BENCH=benchmarks/longmemeval/run.py
# shellcheck source=scripts/_publish_lib.sh
source scripts/_publish_lib.sh
run flat_bm25            --retriever flat-bm25
run bm25_only            --retriever bm25 --no-temporal --no-preserve-prior
run dense_only           --retriever dense --no-temporal --no-preserve-prior
run hybrid_no_temporal   --no-temporal --no-preserve-prior
run hybrid_temporal_no_prior --no-preserve-prior
run hybrid_default
# precision effect on the first 8 questions (bf16 autocast is ~5x slower than fp32 on these CPUs)
run precision_fp32_first8 --limit 8
run precision_bf16_first8 --limit 8 --embedding-precision bf16
verify_all
.venv/bin/python scripts/ablation_table.py "$OUT" "LongMemEval_S development split" > "$OUT/ABLATIONS.md"
.venv/bin/python scripts/misses.py "$OUT/hybrid_default.jsonl" > "$OUT/MISSES_hybrid_default.md"
.venv/bin/python benchmarks/longmemeval/dense_pieces.py "$DATA" --output "$OUT/dense_pieces.json" > /dev/null
.venv/bin/python scripts/derived_sidecars.py "$OUT"
