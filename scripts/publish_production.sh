#!/usr/bin/env bash
# Publish the production-confidence checks (issue 8). Run from the repository root of a clean
# checkout of the publishing commit. Order matters: the holdout manifest is frozen BEFORE the
# holdout's first run, so that run is labelled "held-out measurement" in the ledger.
#   OUT=results/production LME=../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz \
#   LOCOMO=../shared/data/locomo/locomo10.json WORK=/tmp/prod-work scripts/publish_production.sh
# Tiny check:  OUT=/tmp/pp SWEEP_ARGS="--max-questions 5 --no-cache" ENGRAM_EVAL_LEDGER=/tmp/pp/ledger.json ...
set -euo pipefail
OUT="${OUT:-results/production}"
WORK="${WORK:-$(mktemp -d /tmp/prod-work.XXXXXX)}"
LME="${LME:-../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz}"
LOCOMO="${LOCOMO:-../shared/data/locomo/locomo10.json}"
SWEEP_ARGS="${SWEEP_ARGS:-}"
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
B=benchmarks/production_retrieval
# The published runs were made under these recorded settings (calibration_v1.json was fitted
# under them); the package defaults have moved on (calibration_v4.json), so every step names them.
SETTINGS="--settings engram_eval/production/data/settings_v1.json"
mkdir -p "$OUT"
echo "== calibration report (coefficients file must be unchanged by the refit)"
before=$(sha256sum engram_eval/production/data/calibration_v1.json | cut -d' ' -f1)
$PY $B/calibrate.py $SETTINGS --fixture fixtures/production/dev.json \
  --output engram_eval/production/data/calibration_v1.json --report "$OUT/calibration_v1.report.json"
after=$(sha256sum engram_eval/production/data/calibration_v1.json | cut -d' ' -f1)
[ "$before" = "$after" ] || { echo "calibration_v1.json changed: commit it first" >&2; exit 1; }
echo "== freeze manifests before any held-out run"
$PY $B/run.py $SETTINGS --fixture fixtures/production/dev.json --source-root . --validate-only \
  --freeze-source "$OUT/dev.frozen.json"
$PY $B/run.py $SETTINGS --fixture fixtures/production/holdout.json --source-root . --validate-only \
  --freeze-source "$OUT/holdout.frozen.json"
$PY $B/run.py $SETTINGS --fixture fixtures/production/validation_v2.json --source-root . --validate-only \
  --freeze-source "$OUT/validation_v2.frozen.json"
echo "== dev run"
$PY $B/run.py $SETTINGS --fixture fixtures/production/dev.json --source-root . \
  --frozen-source "$OUT/dev.frozen.json" --output "$OUT/dev.json" --work-dir "$WORK"
echo "== holdout run under its manifest"
$PY $B/run.py $SETTINGS --fixture fixtures/production/holdout.json --source-root . \
  --frozen-source "$OUT/holdout.frozen.json" --output "$OUT/holdout.json" --work-dir "$WORK"
if [ "${RUN_V2:-0}" = 1 ]; then
  $PY $B/run.py $SETTINGS --fixture fixtures/production/validation_v2.json --source-root . \
    --frozen-source "$OUT/validation_v2.frozen.json" --output "$OUT/validation_v2.json" --work-dir "$WORK"
fi
echo "== abstention sweeps"
$PY $B/abstention_sweep.py $SETTINGS "$LME" --dataset-label "LongMemEval S cleaned, development split" \
  --output "$OUT/abstention_longmemeval_s_dev.json" $SWEEP_ARGS
$PY $B/abstention_sweep.py $SETTINGS "$LOCOMO" --dataset-label "LoCoMo10" \
  --output "$OUT/abstention_locomo10.json" $SWEEP_ARGS
$PY scripts/derived_sidecars.py "$OUT"   # sweeps, calibration report, manifests
echo "done: $OUT"
