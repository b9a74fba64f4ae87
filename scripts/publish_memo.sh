#!/usr/bin/env bash
# Memo's lexical session search reproduced (issue 19): memo-lexical on the LongMemEval_S
# DEVELOPMENT split and on LoCoMo10, published beside the default and BM25 runs, each
# compared against both, plus seconds per question on this machine.
#
#   scripts/publish_memo.sh LME_DATA LOCOMO_DATA CACHE [SCRATCH]
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split,
# 397 questions); LOCOMO_DATA: ../shared/data/locomo/locomo10.json. Run from the repository
# root of a clean checkout of the publishing commit (the code is committed first; the runs'
# recorded source hashes must equal the files at the commit that adds them).
#
# 1. results/longmemeval_s_dev/memo_lexical.jsonl.gz and results/locomo10/memo_lexical.jsonl.gz
#    (each: run, verify --dataset --rerun 3 --rerun-seed 0, compress);
# 2. paired compares, deltas = memo_lexical - baseline, against the published hybrid_default
#    and bm25_only runs: LongMemEval under `all` (every question, Memo's denominator), LoCoMo
#    under `locomo` (the protocol the published LoCoMo runs record) resampled and tested by
#    conversation (--cluster id-prefix); both with the segmented check (--segment-size: five
#    fixed segments in dataset order, Memo's falsifier);
# 3. results/longmemeval_s_dev/speed_memo.json: s/question of memo-lexical, bm25 and the
#    default on the first 30 questions of each dataset, cold caches
#    (benchmarks/longmemeval/speed_memo.py), with its sidecar.
set -euo pipefail
LME="$1"
LOCOMO="$2"
CACHE="$3"
SCRATCH="${4:-$(mktemp -d /tmp/engram-memo.XXXXXX)}"
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
L=results/longmemeval_s_dev
C=results/locomo10
PLANNED=("$L/memo_lexical.jsonl" "$L/memo_lexical.jsonl.gz" "$C/memo_lexical.jsonl"
         "$C/memo_lexical.jsonl.gz" "$L/speed_memo.json")
for b in hybrid_default bm25_only; do
  PLANNED+=("$L/compare_memo_lexical_vs_$b.json" "$C/compare_memo_lexical_vs_$b.json")
done
mapfile -t PLANNED < <(with_companions "${PLANNED[@]}")
refuse_existing "${PLANNED[@]}"
if [ -n "$(git status --porcelain engram_eval benchmarks scripts)" ]; then
  echo "engram_eval/, benchmarks/ or scripts/ has uncommitted changes: commit the code first" >&2
  exit 1
fi
mkdir -p "$SCRATCH"

echo "== 1. memo-lexical runs"
"$E" run "$LME" --retriever memo-lexical --cache-dir "$CACHE" --no-progress \
  --output "$L/memo_lexical.jsonl" | tail -n 3
"$E" run "$LOCOMO" --retriever memo-lexical --cache-dir "$CACHE" --no-progress \
  --output "$C/memo_lexical.jsonl" | tail -n 3
"$E" verify "$L/memo_lexical.jsonl" --dataset "$LME" --rerun 3 --rerun-seed 0 | tail -n 1
"$E" verify "$C/memo_lexical.jsonl" --dataset "$LOCOMO" --rerun 3 --rerun-seed 0 | tail -n 1
"$E" compress "$L/memo_lexical.jsonl"
"$E" compress "$C/memo_lexical.jsonl"

echo "== 2. paired compares (B = memo_lexical)"
for b in hybrid_default bm25_only; do
  "$E" compare "$L/$b.jsonl.gz" "$L/memo_lexical.jsonl.gz" --protocol all --segment-size 80 \
    --output "$L/compare_memo_lexical_vs_$b.json" | tail -n 30
  "$E" compare "$C/$b.jsonl.gz" "$C/memo_lexical.jsonl.gz" --protocol locomo \
    --cluster id-prefix --segment-size 400 \
    --output "$C/compare_memo_lexical_vs_$b.json" | tail -n 30
done

echo "== 3. seconds per question (cold caches, first 30 questions)"
"$PY" benchmarks/longmemeval/speed_memo.py --longmemeval "$LME" --locomo "$LOCOMO" \
  --limit 30 --scratch "$SCRATCH/speed" --output "$L/speed_memo.json"
"$PY" scripts/derived_sidecars.py "$L"
echo "done (scratch in $SCRATCH)"
