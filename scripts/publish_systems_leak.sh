#!/usr/bin/env bash
# The id leak, shown and closed (issue 44): two systems from outside the package, each run on
# the TUNE part of the LongMemEval_S development split with the opaque ids every outside
# system sees by default and with --real-ids ("ids visible"):
#   prefix-leak  (examples/systems/prefix_leak) ranks by the answer_ prefix of the ids only;
#   bm25s        (examples/systems/bm25s_system) BM25 over the sessions' text, an honest system.
#
#   scripts/publish_systems_leak.sh DATA [OUT] [SCRATCH]
#
# DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (the development split);
# the tune part is re-created from it by `engram-eval split` with the published manifest's
# holdout and salt (results/longmemeval_s_dev_split/split_manifest.json) and checked by hash.
# Why the tune part: the demonstration chooses nothing, so it needs no held-out question; a
# run of the held-out part would spend it (the ledger would label its next run a regression
# check), and a run of the whole development file is labelled "contains held-out questions:
# not a measurement".
# Needs both examples installed (pip install ./examples/systems/prefix_leak
# ./examples/systems/bm25s_system); run from the repository root of a clean checkout of the
# publishing commit (the runs record the sha256 of the code that ranked them).
#
# 1. four runs (each: run, verify --dataset --rerun 3 --rerun-seed 0, compress);
# 2. paired compares, B = real ids, A = opaque ids, for each system (answerable protocol);
# 3. a report page of the leak with real ids against opaque ids.
set -euo pipefail
DATA="$1"
OUT="${2:-results/systems_leak}"
SCRATCH="${3:-$(mktemp -d /tmp/engram-leak.XXXXXX)}"
SPLIT=results/longmemeval_s_dev_split/split_manifest.json
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
RUNS=(prefix_leak_opaque prefix_leak_real_ids bm25s_opaque bm25s_real_ids)
PLANNED=()
for r in "${RUNS[@]}"; do PLANNED+=("$OUT/$r.jsonl" "$OUT/$r.jsonl.gz"); done
PLANNED+=("$OUT/compare_prefix_leak_real_vs_opaque.json" "$OUT/compare_bm25s_real_vs_opaque.json"
          "$OUT/compare_prefix_leak_real_vs_opaque.png" "$OUT/compare_bm25s_real_vs_opaque.png"
          "$OUT/report_prefix_leak_real_vs_opaque.html")
mapfile -t PLANNED < <(with_companions "${PLANNED[@]}")
refuse_existing "${PLANNED[@]}"
if [ -n "$(git status --porcelain engram_eval examples scripts)" ]; then
  echo "engram_eval/, examples/ or scripts/ has uncommitted changes: commit the code first" >&2
  exit 1
fi
mkdir -p "$OUT" "$SCRATCH"

echo "== 0. the tune part"
HOLDOUT=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['holdout'])" "$SPLIT")
SALT=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['salt'])" "$SPLIT")
WANT=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['parts']['tune']['sha256'])" "$SPLIT")
if [ ! -e "$SCRATCH/split_manifest.json" ]; then
  "$E" split "$DATA" --holdout "$HOLDOUT" --salt "$SALT" --output-dir "$SCRATCH" | tail -n 2
fi
TUNE=$(ls "$SCRATCH"/*.tune.json* | grep -v '\.split\.json$')
GOT=$(sha256sum "$TUNE" | cut -d' ' -f1)
[ "$GOT" = "$WANT" ] || { echo "$TUNE has sha256 $GOT, the manifest's tune part $WANT" >&2; exit 1; }

echo "== 1. runs"
for sys in prefix-leak bm25s; do
  name=${sys//-/_}
  "$E" run "$TUNE" --retriever "$sys" --no-progress --output "$OUT/${name}_opaque.jsonl" \
    | grep -A 9 "protocol=answerable"
  "$E" run "$TUNE" --retriever "$sys" --real-ids --no-progress \
    --output "$OUT/${name}_real_ids.jsonl" | grep -A 9 "protocol=answerable"
done
for r in "${RUNS[@]}"; do
  "$E" verify "$OUT/$r.jsonl" --dataset "$TUNE" --rerun 3 --rerun-seed 0 | tail -n 1
  "$E" compress "$OUT/$r.jsonl"
done

echo "== 2. paired compares (B = real ids, A = opaque ids)"
for name in prefix_leak bm25s; do
  "$E" compare "$OUT/${name}_opaque.jsonl.gz" "$OUT/${name}_real_ids.jsonl.gz" \
    --protocol answerable --output "$OUT/compare_${name}_real_vs_opaque.json" \
    --plot "$OUT/compare_${name}_real_vs_opaque.png" | tail -n 25
done

echo "== 3. report page"
"$E" report "$OUT/prefix_leak_real_ids.jsonl.gz" --against "$OUT/prefix_leak_opaque.jsonl.gz" \
  --dataset "$TUNE" --output "$OUT/report_prefix_leak_real_vs_opaque.html" \
  --note "LongMemEval_S development split, tune part (277 questions): the prefix-leak system with the real ids against the same system with opaque ids"
"$PY" scripts/derived_sidecars.py "$OUT"
chmod 644 "$OUT"/*
