#!/usr/bin/env bash
# Report pages (issue 31): `engram-eval report` of two published paired comparisons on the
# LongMemEval_S dev split's held-out part, with the part given as --dataset (so both runs of
# each page verify, and the question and best-turn texts show).
#
#   scripts/publish_reports.sh LME_DATA [SCRATCH]
#
# LME_DATA: ../shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz (a development split
# of LongMemEval_S). The held-out part is re-created in SCRATCH/lme from §1's split manifest and
# hash-checked. Run from the repository root of a clean checkout. A page that exists is kept;
# the script stops at a page whose runs do not both verify.
#
#   heldout_default_vs_bm25_only.html   §1: the tuned first stage against BM25 only
#   heldout_shipped_vs_no_rerank.html   §12: the shipped reranker against §1's default (no
#                                       rerank); each run verifies at its publishing commit
set -euo pipefail
LME="$1"
SCRATCH="${2:-$(mktemp -d /tmp/engram-reports.XXXXXX)}"
OUT=results/reports
# shellcheck source=scripts/_publish_lib.sh
source "$(dirname "$0")/_publish_lib.sh"  # ENGRAM_EVAL (E), PUBLISH_PYTHON (PY), refuse_existing
SPLIT=results/longmemeval_s_dev_split
mkdir -p "$OUT" "$SCRATCH"
# shellcheck source=scripts/_rerank_lib.sh
source "$(dirname "$0")/_rerank_lib.sh"
recreate_split "$SPLIT/split_manifest.json" "$LME" "$SCRATCH/lme"
PART=$(part_of "$SCRATCH/lme" heldout)
DATA="Data: the held-out part (120 questions) of a development split of LongMemEval_S (397 of \
its 500 questions), not the full file; question and turn texts from LongMemEval (Wu et al., \
ICLR 2025), MIT license."
added() { git log --diff-filter=A --format=%h -1 -- "$1"; }

report() {  # NAME RUN AGAINST NOTE
  local out="$OUT/$1"
  if [ -e "$out" ]; then echo "kept $out"; return 0; fi
  local said
  said=$("$E" report "$2" --against "$3" --dataset "$PART" --sources-at "$(added "$2")" \
         --against-sources-at "$(added "$3")" --note "$DATA $4" --output "$out")
  echo "$said"
  [ "$(head -n 1 <<< "$said")" = VERIFIED ] || { echo "$out: not verified" >&2; return 1; }
}

report heldout_default_vs_bm25_only.html "$SPLIT/heldout_default.jsonl.gz" \
  "$SPLIT/heldout_bm25_only.jsonl.gz" \
  "The tuned first stage (no rerank; PROVENANCE.md section 1) against BM25 only."
report heldout_shipped_vs_no_rerank.html results/shipped_reranker/heldout_lme_shipped.jsonl.gz \
  "$SPLIT/heldout_default.jsonl.gz" \
  "The shipped reranker engram-ce-minilm-v1 (PROVENANCE.md section 12) against the same \
first stage without rerank (section 1)."
