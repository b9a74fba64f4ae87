#!/usr/bin/env bash
# The rerank unit, chosen out of fold on the tuning part (issue 16): section 6 fixed the unit
# (turn) from the prototype and chose only the blend; this script scores the other two units
# (session, passage) on the same halves of the LongMemEval dev split's tune part with the
# same fold rerankers, and pools them with section 6's published turn fold runs, so the unit
# and the blend are chosen together, by the same objective, on questions each reranker never
# saw.
#
#   scripts/publish_rerank_unit.sh DATA CACHE [OUT] [SCRATCH]
#
# DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split).
# SCRATCH must be the directory section 6's fold runs name as their reranker's home (/tmp/w,
# the default): choose_rerank.py reads each reranker's card beside its model there.
# Run from the repository root of a clean checkout; steps whose output exists are skipped,
# nothing in OUT is overwritten.
#
# 1. the published split re-created; the parts' sha256 must equal the manifest's;
# 2. candidates: section 6's published no-rerank fold runs merged (the first stage its
#    rerankers were trained from);
# 3. the two fold rerankers retrained exactly as section 6 (same pairs, same settings); their
#    file hashes are compared with the published cards and the result printed; the retrained
#    models' cards are published as ce_fold{0,1}_retrained.card.json (the runs below use them);
# 4. units session and passage (session text; passage adds the excerpt fallback), 256 tokens
#    (the prototype's session length: 128 tokens would see only a session's first turn),
#    ONNX, 35 candidates, blends {0, 0.5, 0.7, 0.8, 0.9}, each half scored by the reranker
#    that never saw it; verify --rerun 2 each;
# 5. choose_rerank.py over every candidate (no rerank, turn x 6 blends from section 6,
#    session x 5, passage x 5), objective and protocol as in section 6;
# 6. only when the choice differs from section 6's (turn, 0.8): freeze it and run it once on
#    the held-out part (the ledger labels that run a regression check: the part has been run).
set -euo pipefail
DATA="$1"
CACHE="$2"
OUT="${3:-results/longmemeval_s_dev_rerank}"
SCRATCH="${4:-/tmp/w}"
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
SPLIT=results/longmemeval_s_dev_split
COMMON=(--cache-dir "$CACHE" --no-progress)
UNITS=(session passage)
ALPHAS=(0.0 0.5 0.7 0.8 0.9)
TURN_NAMES=(a0.0 a0.3 a0.5 a0.7 a0.8 a0.9)   # section 6's published turn fold runs
refuse_existing "$OUT/rerank_unit_choice.json"
mkdir -p "$OUT" "$SCRATCH"

# shellcheck source=scripts/_rerank_lib.sh
source "$(dirname "$0")/_rerank_lib.sh"

echo "== 1. split"
recreate_split "$SPLIT/split_manifest.json" "$DATA" "$SCRATCH/parts"
TUNE=$(part_of "$SCRATCH/parts" tune)
HELD=$(part_of "$SCRATCH/parts" heldout)

echo "== 2. candidates (section 6's no-rerank fold runs, merged)"
CAND="$SCRATCH/tune_candidates.jsonl"
merged_candidates "$OUT" "$TUNE" "$CAND"

echo "== 3. fold rerankers, retrained as published"
for i in 0 1; do
  [ -e "$SCRATCH/ce_fold$i" ] || "$E" train-reranker "$TUNE" --run "$CAND" \
    --output "$SCRATCH/ce_fold$i" --exclude-shard "$i/2" "${TRAIN[@]}" | tail -n 2
  "$PY" scripts/compare_card.py "$OUT/ce_fold$i.card.json" "$SCRATCH/ce_fold$i.card.json"
  # the runs below record the retrained weights' hashes: that model's card is published too
  [ -e "$OUT/ce_fold${i}_retrained.card.json" ] || \
    cp "$SCRATCH/ce_fold$i.card.json" "$OUT/ce_fold${i}_retrained.card.json"
done

echo "== 4. units session and passage on each half"
ARGS=(--candidate none "$OUT/fold0_none.jsonl.gz" "$OUT/fold1_none.jsonl.gz")
for n in "${TURN_NAMES[@]}"; do
  ARGS+=(--candidate "turn_$n" "$OUT/fold0_$n.jsonl.gz" "$OUT/fold1_$n.jsonl.gz")
done
for u in "${UNITS[@]}"; do
  for a in "${ALPHAS[@]}"; do
    ARGS+=(--candidate "${u}_a$a")
    for i in 0 1; do
      f="$OUT/fold${i}_${u}_a$a.jsonl"
      if [ ! -e "$f.gz" ]; then
        "$E" run "$TUNE" --shard "$i/2" --output "$f" "${FIRST[@]}" "${COMMON[@]}" \
          --trace-sessions 5 --rerank --rerank-unit "$u" --rerank-max-length 256 \
          --rerank-candidates 35 --reranker-backend onnx --reranker-model "$SCRATCH/ce_fold$i" \
          --fusion-alpha "$a" | tail -n 1
        "$E" verify "$f" --dataset "$TUNE" --rerun 2 --rerun-seed 0 > /dev/null
        "$E" compress "$f" > /dev/null
      fi
      ARGS+=("$f.gz")
    done
  done
done

echo "== 5. choice over units and blends"
"$PY" benchmarks/longmemeval/choose_rerank.py "${ARGS[@]}" --output "$OUT/rerank_unit_choice.json"
CHOSEN=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['chosen'])" \
  "$OUT/rerank_unit_choice.json")
echo "chosen: $CHOSEN"

if [ "$CHOSEN" = turn_a0.8 ]; then
  echo "== 6. the published held-out run (section 6: turn, 0.8) is the chosen configuration"
else
  echo "== 6. $CHOSEN differs from section 6's choice: frozen, then one run on the held-out part"
  [ -e "$SCRATCH/ce_tune" ] || "$E" train-reranker "$TUNE" --run "$CAND" \
    --output "$SCRATCH/ce_tune" "${TRAIN[@]}" | tail -n 2
  case "$CHOSEN" in
    none) FINAL=();;
    turn_a*) FINAL=(--rerank --rerank-unit turn --rerank-max-length 128 --rerank-candidates 35
                    --reranker-backend onnx --reranker-model "$SCRATCH/ce_tune"
                    --fusion-alpha "${CHOSEN#turn_a}");;
    *) FINAL=(--rerank --rerank-unit "${CHOSEN%_a*}" --rerank-max-length 256
              --rerank-candidates 35 --reranker-backend onnx
              --reranker-model "$SCRATCH/ce_tune" --fusion-alpha "${CHOSEN##*_a}");;
  esac
  freeze_then_run "$HELD" heldout_rerank_unit "${FIRST[@]}" "${FINAL[@]}"
  "$E" compare "$OUT/heldout_rerank.jsonl.gz" "$OUT/heldout_rerank_unit.jsonl.gz" \
    --output "$OUT/compare_rerank_unit_vs_rerank.json" | tail -n 20
fi
"$PY" scripts/derived_sidecars.py "$OUT"
echo "done: $OUT"
