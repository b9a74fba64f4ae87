#!/usr/bin/env bash
# Fusion settings by chat structure, chosen on both datasets' tuning parts and proven on their
# held-out parts (issue 17).
#
#   scripts/publish_structure.sh LME_DATA LOCOMO_DATA CACHE [OUT] [SCRATCH]
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (development split);
# LOCOMO_DATA: ../shared/data/locomo/locomo10.json. Run from the repository root of a clean
# checkout of the publishing commit.
#
# 1. parts: the LongMemEval split is re-created from its published manifest (same salt; the
#    parts must come out byte-identical: same sha256); LoCoMo10 is split by conversation (30% held out);
# 2. one tuning run over the LoCoMo tune conversations that computes and traces every signal
#    (the LongMemEval tuning run is the published results/longmemeval_s_dev_split/tuning_run);
# 3. `engram-eval tune` over both tuning runs at once: one choice per chat structure (user and
#    assistant chats / people talking to each other), combined by the worst ratio to each
#    part's best, 5-fold cross-validation by conversation;
# 4. every configuration is frozen BEFORE any held-out run: on the LoCoMo held-out
#    conversations the tuned configuration, today's default and BM25 only; on the LongMemEval
#    held-out part the tuned configuration (that part was measured before: the ledger labels
#    this run a regression check);
# 5. one run each under its manifest; 6. paired comparisons (LoCoMo clustered by conversation).
set -euo pipefail
LME="$1"
LOCOMO="$2"
CACHE="$3"
OUT="${4:-results/structure}"
SCRATCH="${5:-$(mktemp -d /tmp/engram-structure.XXXXXX)}"
SALT_LME="${SALT_LME:-engram-eval-2026-11-30}"           # results/longmemeval_s_dev_split
SALT_LOC="${SALT_LOC:-engram-eval-locomo-2026-12-01}"
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
LME_SPLIT=results/longmemeval_s_dev_split
refuse_existing "$OUT"/locomo_split_manifest.json "$OUT"/locomo_tuning_run.jsonl.gz \
  "$OUT"/tuned_by_structure.yaml
mkdir -p "$OUT" "$SCRATCH/lme" "$SCRATCH/loc"
# torch embeddings, as every published LongMemEval and LoCoMo run (so the held-out comparisons
# against them differ in the fusion settings only)
FIRST=(--embedding-backend sentence_transformers)
COMMON=(--cache-dir "$CACHE" --no-progress)

echo "== 1. parts"
[ -e "$SCRATCH/lme/split_manifest.json" ] || \
  "$E" split "$LME" --holdout 0.3 --salt "$SALT_LME" --output-dir "$SCRATCH/lme" > /dev/null
part_hashes() { "$PY" -c "import json,sys; print({k: v['sha256'] for k, v in json.load(open(sys.argv[1]))['parts'].items()})" "$1"; }
cmp <(part_hashes "$SCRATCH/lme/split_manifest.json") <(part_hashes "$LME_SPLIT/split_manifest.json")
[ -e "$SCRATCH/loc/split_manifest.json" ] || \
  "$E" split "$LOCOMO" --holdout 0.3 --salt "$SALT_LOC" --output-dir "$SCRATCH/loc"
LME_HELD=$(ls "$SCRATCH"/lme/*.heldout.json* | grep -v '\.split\.json$')
LOC_TUNE=$(ls "$SCRATCH"/loc/*.tune.json* | grep -v '\.split\.json$')
LOC_HELD=$(ls "$SCRATCH"/loc/*.heldout.json* | grep -v '\.split\.json$')
cp "$SCRATCH/loc/split_manifest.json" "$OUT/locomo_split_manifest.json"
cp "$SCRATCH/loc/split_manifest.json.metadata.json" "$OUT/locomo_split_manifest.json.metadata.json"

echo "== 2. LoCoMo tuning run (every candidate signal computed and traced)"
"$E" run "$LOC_TUNE" --output "$OUT/locomo_tuning_run.jsonl" "${COMMON[@]}" "${FIRST[@]}" \
  --use-dense --use-bm25-user --use-bm25-assistant --use-bm25-turn --use-bm25-prf \
  --use-dense-rocchio --no-rerank | tail -n 3
"$E" verify "$OUT/locomo_tuning_run.jsonl" --dataset "$LOC_TUNE" --rerun 3 --rerun-seed 0 > /dev/null
"$E" compress "$OUT/locomo_tuning_run.jsonl" > /dev/null

echo "== 3. tune both tuning parts at once, per chat structure"
"$E" tune "$LME_SPLIT/tuning_run.jsonl.gz" "$OUT/locomo_tuning_run.jsonl.gz" \
  --grid benchmarks/longmemeval/tune_grid.yaml --output "$OUT/tuned_by_structure.yaml" \
  --protocol answerable --protocol locomo --combine worst-ratio --cluster id-prefix \
  --folds 5 --seed 0

echo "== 4-5. every configuration frozen before any held-out run, then one run each"
declare -A PART CFG
PART[locomo_tuned]="$LOC_HELD"
CFG[locomo_tuned]="${FIRST[*]} --config $OUT/tuned_by_structure.yaml"
PART[locomo_default]="$LOC_HELD";   CFG[locomo_default]="${FIRST[*]}"
PART[locomo_bm25_only]="$LOC_HELD"; CFG[locomo_bm25_only]="${FIRST[*]} --retriever bm25"
PART[lme_tuned]="$LME_HELD"
CFG[lme_tuned]="${FIRST[*]} --config $OUT/tuned_by_structure.yaml"
freeze_all_then_run heldout_ locomo_tuned locomo_default locomo_bm25_only lme_tuned

echo "== 6. paired comparisons"
for n in bm25_only default; do
  "$E" compare "$OUT/heldout_locomo_$n.jsonl.gz" "$OUT/heldout_locomo_tuned.jsonl.gz" \
    --cluster id-prefix --output "$OUT/compare_locomo_tuned_vs_$n.json" \
    --plot "$OUT/compare_locomo_tuned_vs_$n.png" | tail -n 25
done
for n in default bm25_only; do
  "$E" compare "$LME_SPLIT/heldout_$n.jsonl.gz" "$OUT/heldout_lme_tuned.jsonl.gz" \
    --output "$OUT/compare_lme_tuned_vs_$n.json" | tail -n 25
done
"$PY" scripts/derived_sidecars.py "$OUT"   # tuned_by_structure.yaml, manifests
echo "done: $OUT (parts in $SCRATCH)"
