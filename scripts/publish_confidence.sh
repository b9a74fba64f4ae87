#!/usr/bin/env bash
# Publish the production confidence calibrated on real sessions (issue 18), in two phases,
# from the repository root of a clean checkout:
#
#   scripts/publish_confidence.sh fit LME_DEV LOCOMO CACHE      # tune parts only
#   git add engram_eval/production/data/*_v3_*_full.json results/confidence/full && git commit
#   scripts/publish_confidence.sh measure LME_DEV LOCOMO CACHE  # frozen manifests, then runs
#
# This publishes calibration v3 fitted on EVERY question of both tune parts
# (calibration_v3_{chat,people}_full.json, results/confidence/full/). The first publication,
# fitted on subsets of the tune parts (calibration_v3_{chat,people}.json and the files directly
# in results/confidence/), was made by this script as committed in 27687ac (fit) and 0065d3e
# (measure); PROVENANCE.md section 10 tells both.
#
# LME_DEV: longmemeval_s_cleaned.dev.json.gz (a development split of LongMemEval_S);
# LOCOMO: locomo10.json; CACHE: an embedding cache directory (speed only). Both splits are
# re-created with `engram-eval split` and checked against the published split manifests.
# validation_v3 was written and frozen (validation_v3.before_calibration.frozen.json) before
# any of this code existed; its first run was the first publication's phase 2, so every part
# and fixture measured here is a regression check (the ledger says so).
set -euo pipefail
[ "$#" = 4 ] || { echo "usage: $0 fit|measure LME_DEV LOCOMO CACHE" >&2; exit 2; }
PHASE=$1; LME=$(realpath "$2"); LOCOMO=$(realpath "$3"); CACHE=$(realpath -m "$4")
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_publish_lib.sh
source scripts/_publish_lib.sh  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
OUT=results/confidence/full
B=benchmarks/production_retrieval
SPLITS=${SPLITS:-$(mktemp -d /tmp/confidence-splits.XXXXXX)}
WORK=${WORK:-$(mktemp -d /tmp/confidence-work.XXXXXX)}
mkdir -p "$OUT"

echo "== splits (re-created; sha256 must equal the published manifests)"
[ -e "$SPLITS/lme/split_manifest.json" ] || $PY -m engram_eval.cli.main split "$LME" --holdout 0.3 \
  --salt engram-eval-2026-11-30 --output-dir "$SPLITS/lme"
[ -e "$SPLITS/locomo/split_manifest.json" ] || $PY -m engram_eval.cli.main split "$LOCOMO" \
  --holdout 0.3 --salt engram-eval-locomo-2026-12-01 --output-dir "$SPLITS/locomo"
$PY - "$SPLITS" <<'PYEOF'
import hashlib, json, sys
s = sys.argv[1]
for sub, man in (("lme", "results/longmemeval_s_dev_split/split_manifest.json"),
                 ("locomo", "results/structure/locomo_split_manifest.json")):
    for part in json.load(open(man))["parts"].values():
        f = f"{s}/{sub}/{part['file'] if 'file' in part else part['name']}"
        got = hashlib.sha256(open(f, "rb").read()).hexdigest()
        assert got == part["sha256"], (f, got, part["sha256"])
print("split parts match the published manifests")
PYEOF
LME_TUNE=$SPLITS/lme/longmemeval_s_cleaned.dev.tune.json.gz
LME_HELD=$SPLITS/lme/longmemeval_s_cleaned.dev.heldout.json.gz
LOC_TUNE=$SPLITS/locomo/locomo10.tune.json
LOC_HELD=$SPLITS/locomo/locomo10.heldout.json

# One calibration per chat structure, as the package's settings differ by structure (read
# from a haystack's roles, never from a dataset's name): "chat" (a user with an assistant:
# the LongMemEval tune part; also the production fixtures, a user's own memories) and
# "people" (people talking to each other: the LoCoMo tune conversations).
CHAT=engram_eval/production/data/settings_v3_chat_full.json
PEOPLE=engram_eval/production/data/settings_v3_people_full.json
if [ "$PHASE" = fit ]; then
  echo "== fit calibration v3 on the tune parts only (a held-out part is refused)"
  # Every question of both tune parts (the first publication used subsets, which made
  # unanswerable questions 18% of the chat fit against 7% of the tune part). The other
  # choices are the first publication's, unchanged: Platt on the top candidate, 5 grouped
  # folds, C 1; target >= 90% of returned top results gold (chat) and 70% (people, where 90%
  # was out of reach), >= 20 questions returning; an unreachable target falls back to the
  # best-rate cut-off.
  $PY $B/confidence.py fit --no-excerpt-retry --cache-dir "$CACHE" \
    --part lme_tune="$LME_TUNE" --mapping platt --calibrate-on top \
    --folds 5 --C 1.0 --target-precision 0.9 --min-returned 20 \
    --output engram_eval/production/data/calibration_v3_chat_full.json --settings-output $CHAT \
    --report $OUT/calibration_v3_chat_full.report.json
  $PY $B/confidence.py fit --no-excerpt-retry --cache-dir "$CACHE" \
    --part locomo_tune="$LOC_TUNE" --mapping platt --calibrate-on top \
    --folds 5 --C 1.0 --target-precision 0.7 --min-returned 20 \
    --output engram_eval/production/data/calibration_v3_people_full.json --settings-output $PEOPLE \
    --report $OUT/calibration_v3_people_full.report.json
  $PY scripts/derived_sidecars.py $OUT
  echo "now commit engram_eval/production/data/*_v3_*_full.json and $OUT, then run: $0 measure ..."
  exit 0
fi
[ "$PHASE" = measure ] || { echo "phase must be fit or measure" >&2; exit 2; }
if [ -n "$(git status --porcelain -- engram_eval benchmarks)" ]; then
  echo "engram_eval/ or benchmarks/ differ from the commit: commit first (publishing rule)" >&2
  exit 1
fi
echo "== freeze every manifest before any measurement"
$PY $B/confidence.py measure "$LME_HELD" --settings $CHAT --source-root . --validate-only \
  --freeze-source $OUT/heldout_longmemeval_s_dev.frozen.json --cache-dir "$CACHE"
$PY $B/confidence.py measure "$LOC_HELD" --settings $PEOPLE --source-root . --validate-only \
  --freeze-source $OUT/heldout_locomo10.frozen.json --cache-dir "$CACHE"
for f in dev holdout validation_v2 validation_v3; do
  $PY $B/run.py --settings $CHAT --fixture fixtures/production/$f.json --source-root . \
    --validate-only --freeze-source $OUT/$f.frozen.json
done
echo "== selective retrieval on the held-out parts"
$PY $B/confidence.py measure "$LME_HELD" --settings $CHAT --source-root . --cache-dir "$CACHE" \
  --frozen-source $OUT/heldout_longmemeval_s_dev.frozen.json \
  --dataset-label "LongMemEval S cleaned, development split: held-out part" \
  --output $OUT/heldout_longmemeval_s_dev.selective.json
$PY $B/confidence.py measure "$LOC_HELD" --settings $PEOPLE --source-root . --cache-dir "$CACHE" \
  --frozen-source $OUT/heldout_locomo10.frozen.json \
  --dataset-label "LoCoMo10: held-out conversations" \
  --output $OUT/heldout_locomo10.selective.json
echo "== production fixtures under calibration v3 full (dev; holdout, validation_v2, validation_v3: regression checks)"
for f in dev holdout validation_v2 validation_v3; do
  $PY $B/run.py --settings $CHAT --fixture fixtures/production/$f.json --source-root . \
    --frozen-source $OUT/$f.frozen.json --output $OUT/$f.json --work-dir "$WORK"
done
$PY scripts/derived_sidecars.py $OUT
echo "done: $OUT"
