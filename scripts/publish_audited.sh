#!/usr/bin/env bash
# LoCoMo10 on the dataset's evidence and on the public audit's corrected evidence (issue 44,
# point 5; PROVENANCE section 24): the people default, BM25 only and memo-lexical, each run
# over all ten conversations with --gold-overlay, and the default compared with each
# baseline on both golds.
#
#   scripts/publish_audited.sh LOCOMO_DATA AUDIT CACHE [DEFAULT_CONFIG]
#
# LOCOMO_DATA: ../shared/data/locomo/locomo10.json; AUDIT:
# ../shared/data/locomo/audit/locomo_audit_errors.json; DEFAULT_CONFIG: a config file for the
# default run (empty: the package default), e.g. benchmarks/locomo/conv_v1_people_config.yaml
# where the package default is not yet the people pipeline it gives. Run from the repository
# root of a clean checkout of the publishing commit (the code is committed first).
#
# This is the whole public benchmark, the held-out conversations of the LoCoMo split
# included: the package labels each run "contains held-out questions" (a run of the split's
# source), and nothing is chosen on these runs.
#
# 1. results/locomo_audited/{default,bm25_only,memo_lexical}.jsonl.gz: run --gold-overlay,
#    verify --dataset --gold-overlay --rerun $VERIFY_RERUN --rerun-seed 0, compress;
# 2. compare_default_vs_{bm25_only,memo_lexical}.json: B = default, protocol locomo,
#    resampled and tested by conversation (--cluster id-prefix), on both golds
#    (--gold-overlay, --dataset).
# The report page with its "Audited labels" block is not published (4.5 MB for 1,986 items);
# PROVENANCE section 24 gives the command that builds it from these files.
set -euo pipefail
LOCOMO="$1"
AUDIT="$2"
CACHE="$3"
DEFAULT_CONFIG="${4:-}"
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), refuse_existing, with_companions
O=results/locomo_audited
PLANNED=()
for n in default bm25_only memo_lexical; do PLANNED+=("$O/$n.jsonl" "$O/$n.jsonl.gz"); done
for b in bm25_only memo_lexical; do PLANNED+=("$O/compare_default_vs_$b.json"); done
mapfile -t PLANNED < <(with_companions "${PLANNED[@]}")
refuse_existing "${PLANNED[@]}"
if [ -n "$(git status --porcelain engram_eval benchmarks scripts)" ]; then
  echo "engram_eval/, benchmarks/ or scripts/ has uncommitted changes: commit the code first" >&2
  exit 1
fi
mkdir -p "$O"
COMMON=(--gold-overlay "$AUDIT" --cache-dir "$CACHE" --no-progress "${PUBLISH_EXTRA[@]}")

echo "== 1. runs on both golds"
one() {  # NAME [options]
  local name="$1"
  shift
  "$E" run "$LOCOMO" "$@" "${COMMON[@]}" --output "$O/$name.jsonl" | tail -n 40
  "$E" verify "$O/$name.jsonl" --dataset "$LOCOMO" --gold-overlay "$AUDIT" \
    --rerun "$VERIFY_RERUN" --rerun-seed 0 | tail -n 1
  "$E" compress "$O/$name.jsonl"
}
if [ -n "$DEFAULT_CONFIG" ]; then one default --config "$DEFAULT_CONFIG"; else one default; fi
one bm25_only --retriever "${PUBLISH_RETRIEVER:-bm25}"
one memo_lexical --retriever "${PUBLISH_RETRIEVER:-memo-lexical}"

echo "== 2. paired compares on both golds (B = default)"
for b in bm25_only memo_lexical; do
  "$E" compare "$O/$b.jsonl.gz" "$O/default.jsonl.gz" --protocol locomo --cluster id-prefix \
    --gold-overlay "$AUDIT" --dataset "$LOCOMO" \
    --output "$O/compare_default_vs_$b.json" | tail -n 45
done

chmod 644 "$O"/*
echo "done"
