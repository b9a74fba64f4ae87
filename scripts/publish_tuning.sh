#!/usr/bin/env bash
# Choose settings on a tuning split, prove them once on the held-out split (issue 9).
#
#   scripts/publish_tuning.sh DATA CACHE [OUT] [SCRATCH]
#
# DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (the development split).
# Run from the repository root of a clean checkout of the publishing commit, whose package
# defaults already are the configuration this script chooses (it stops otherwise).
#
# 1. split DATA into tune (70%) / held-out (30%) parts, stratified by question type (the
#    parts go to SCRATCH: `engram-eval split` re-creates them byte for byte from the
#    published split manifest; only the manifest is published);
# 2. one tuning run over the tune part that computes and traces every candidate signal;
# 3. `engram-eval tune` re-fuses it offline over the grid (in-sample score and a 5-fold
#    estimate recorded) and the chosen configuration must equal the package defaults;
# 4. four configurations are frozen (manifests written) BEFORE the held-out part is run at
#    all: the new default, the landed RRF default, dense only, BM25 only;
# 5. each runs once on the held-out part under its manifest (the ledger labels these
#    "held-out measurement"; any later run is labelled a regression check);
# 6. paired comparisons (bootstrap intervals, exact McNemar, flips, segments) + plots.
set -euo pipefail
DATA="$1"
CACHE="$2"
OUT="${3:-results/longmemeval_s_dev_split}"
SCRATCH="${4:-$(mktemp -d /tmp/engram-split.XXXXXX)}"
SALT="${SALT:-engram-eval-2026-11-30}"
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
refuse_existing "$OUT"/split_manifest.json "$OUT"/tuning_run.jsonl.gz "$OUT"/tuned.yaml
mkdir -p "$OUT"
COMMON=(--cache-dir "$CACHE" --no-progress)

echo "== 1. split"
if [ ! -e "$SCRATCH/split_manifest.json" ]; then
  "$E" split "$DATA" --holdout 0.3 --salt "$SALT" --output-dir "$SCRATCH"
fi
TUNE=$(ls "$SCRATCH"/*.tune.json*  | grep -v '\.split\.json$')
HELD=$(ls "$SCRATCH"/*.heldout.json* | grep -v '\.split\.json$')
cp "$SCRATCH/split_manifest.json" "$OUT/split_manifest.json"
cp "$SCRATCH/split_manifest.json.metadata.json" "$OUT/split_manifest.json.metadata.json"

echo "== 2. tuning run (every candidate signal computed and traced)"
"$E" run "$TUNE" --output "$OUT/tuning_run.jsonl" "${COMMON[@]}" \
  --use-dense --use-bm25-user --use-bm25-assistant --use-bm25-turn --use-bm25-prf \
  --use-dense-rocchio --no-rerank | tail -n 3
"$E" verify "$OUT/tuning_run.jsonl" --dataset "$TUNE" --rerun 3 > /dev/null

echo "== 3. tune on the tuning run only"
"$E" tune "$OUT/tuning_run.jsonl" --grid benchmarks/longmemeval/tune_grid.yaml \
  --output "$OUT/tuned.yaml" --protocol answerable --folds 5 --seed 0
"$PY" - "$OUT/tuned.yaml" <<'EOF'
import sys
from engram_eval.runs.config import RunConfig
from engram_eval.retrieval.settings import RetrievalSettings
from dataclasses import fields
tuned = RunConfig.from_yaml(sys.argv[1])
default = RunConfig()
diff = [f.name for f in fields(RetrievalSettings)
        if getattr(tuned, f.name) != getattr(default, f.name)]
if diff:
    sys.exit("the tuned configuration differs from the package defaults in: "
             + ", ".join(f"{n} (tuned {getattr(tuned, n)!r}, default {getattr(default, n)!r})"
                         for n in diff) + "\nset the defaults first, then publish")
print("tuned configuration == package defaults")
EOF
"$E" compress "$OUT/tuning_run.jsonl" > /dev/null

echo "== 4-5. every configuration frozen, then one run each on the held-out part"
declare -A PART CFG
CFG[default]=""
CFG[rrf_landed]="--fusion rrf --rrf-k 60 --weight-dense 1 --weight-bm25-user 1 --weight-bm25-assistant 0.5 --use-bm25-user --use-bm25-assistant --no-use-bm25-turn --no-use-bm25-prf --no-use-dense-rocchio --weight-bm25-turn 0 --weight-bm25-prf 0 --weight-dense-rocchio 0 --temporal --temporal-boost 1.25"
CFG[dense_only]="--retriever dense"
CFG[bm25_only]="--retriever bm25"
NAMES=(default rrf_landed dense_only bm25_only)
for n in "${NAMES[@]}"; do PART[$n]="$HELD"; done
freeze_all_then_run heldout_ "${NAMES[@]}"

echo "== 6. paired comparisons of the new default against each"
for n in rrf_landed dense_only bm25_only; do
  "$E" compare "$OUT/heldout_$n.jsonl.gz" "$OUT/heldout_default.jsonl.gz" \
    --output "$OUT/compare_default_vs_$n.json" --plot "$OUT/compare_default_vs_$n.png" \
    | tail -n 25
done
"$E" analyze "$OUT/heldout_default.jsonl.gz" --k 5 --output "$OUT/analyze_heldout_default.json" \
  | tail -n 15
"$PY" scripts/derived_sidecars.py "$OUT"   # tuned.yaml, the manifests
echo "done: $OUT (parts in $SCRATCH)"
