# Shared by the rerank publish scripts (sourced, not run): publish_rerank.sh,
# publish_rerank_locomo.sh, publish_rerank_unit.sh and the later ones. Source
# scripts/_publish_lib.sh first (it sets E, the engram-eval command, and PY, python). Every
# function leaves existing outputs alone (a stopped publication resumes) and returns non-zero
# on a mismatch, which stops a `set -e` script.
#   recreate_split MANIFEST SRC DIR   re-create a published split of SRC in DIR (same salt and
#                                     held-out share); every part's sha256 must equal MANIFEST's
#   part_of DIR tune|heldout          the path of that part in DIR
#   run_to DATA OUTFILE [options]     one `engram-eval run` of DATA into OUTFILE (with COMMON),
#                                     verified with --rerun 3, then compressed; skipped when
#                                     OUTFILE.gz exists
#   merged_candidates RR_DIR TUNE OUT the no-rerank fold runs of section 6 (RR_DIR/fold{0,1}_none)
#                                     merged into OUT: the first stage its rerankers trained from
#   train_folds DATA CANDIDATES NAME [options]
#                                     two fold cross-encoders on DATA from the CANDIDATES run:
#                                     $SCRATCH/NAME{0,1}, each trained with TRAIN (and the
#                                     options) without the half `run --shard I/2` selects,
#                                     each card copied to $OUT
#   rerank_folds DATA CONFIG DIR CHOICE DEPTHS ALPHAS
#                                     the out-of-fold rerank check of a first stage: each half
#                                     of DATA ranked by CONFIG alone (DIR/fold{0,1}_none) and
#                                     reranked by the fold cross-encoder that never saw it
#                                     ($SCRATCH/ce_fold{0,1}; ONNX int8, turn unit, max length
#                                     128) at every depth in DEPTHS and blend in ALPHAS (each a
#                                     space-separated list); choose_rerank.py picks by section
#                                     6's objective -> CHOICE (none when CHOICE is empty: the
#                                     caller pools the runs itself). CE_NAME (default ce_fold) names
#                                     other fold cross-encoders ($SCRATCH/CE_NAME{0,1}),
#                                     RUN_TAG (default empty) prefixes their reranked runs'
#                                     names (DIR/fold{0,1}_RUN_TAGd..._a...), RERANK_ARGS
#                                     (word-split, default empty) adds rerank options to
#                                     them, and FIRST_DIR (default DIR) holds the
#                                     first-stage runs fold{0,1}_none
#   add_candidate NAME DIR RUN        appends one candidate of choose_rerank.py to CANDS:
#                                     --candidate NAME DIR/fold0_RUN.jsonl.gz
#                                     DIR/fold1_RUN.jsonl.gz (its two out-of-fold halves)
# and the settings every published reranker run shares, defined once here:
#   FIRST   the first stage of the published rerank runs (torch embeddings, as the held-out
#           runs they are compared with)
#   TRAIN   train-reranker settings, fixed before any fold was scored (a first try at 1 epoch,
#           lr 2e-5, 3 hard + 2 random negatives moved the loss only from 0.69 to 0.65 in ~50
#           steps, and was stopped unscored)

FIRST=(--embedding-backend sentence_transformers)
TRAIN=(--max-length 128 --epochs 3 --batch-size 16 --learning-rate 4e-5 --hard-negatives 5
       --random-negatives 3 --seed 0)

_part_hashes() {
  "$PY" -c "import json,sys; print({k: v['sha256'] for k, v in json.load(open(sys.argv[1]))['parts'].items()})" "$1"
}

recreate_split() {
  local salt hold
  if [ ! -e "$3/split_manifest.json" ]; then
    read -r salt hold < <("$PY" -c "import json,sys; m=json.load(open(sys.argv[1])); print(m['salt'], m['holdout'])" "$1")
    "$E" split "$2" --holdout "$hold" --salt "$salt" --output-dir "$3" > /dev/null
  fi
  cmp <(_part_hashes "$3/split_manifest.json") <(_part_hashes "$1")
}

part_of() {
  ls "$1"/*."$2".json* | grep -v '\.split\.json$'
}

run_to() {
  local data="$1" f="$2"
  shift 2
  [ -e "$f.gz" ] && return 0
  "$E" run "$data" --output "$f" "${COMMON[@]}" "$@" | tail -n 1
  "$E" verify "$f" --dataset "$data" --rerun 3 --rerun-seed 0 > /dev/null
  "$E" compress "$f" > /dev/null
}

merged_candidates() {
  [ -e "$3" ] && return 0
  "$E" merge "$1/fold0_none.jsonl.gz" "$1/fold1_none.jsonl.gz" --dataset "$2" --output "$3" \
    --sources-at "$(git log --diff-filter=A --format=%H -1 -- "$1/fold0_none.jsonl.gz")" \
    | tail -n 1
}

train_folds() {
  local data="$1" cand="$2" name="$3" i
  shift 3
  for i in 0 1; do
    [ -e "$SCRATCH/$name$i" ] || "$E" train-reranker "$data" --run "$cand" \
      --output "$SCRATCH/$name$i" --exclude-shard "$i/2" "${TRAIN[@]}" "$@" 2>/dev/null \
      | tail -n 2
    [ -e "$OUT/$name$i.card.json" ] || cp "$SCRATCH/$name$i.card.json" "$OUT/"
  done
}

add_candidate() {
  CANDS+=(--candidate "$1" "$2/fold0_$3.jsonl.gz" "$2/fold1_$3.jsonl.gz")
}

rerank_folds() {
  local data="$1" cfg="$2" dir="$3" choice="$4" i a d f args=(--candidate none)
  local -a depths alphas extra
  read -r -a depths <<< "$5"
  read -r -a alphas <<< "$6"
  read -r -a extra <<< "${RERANK_ARGS:-}"
  for i in 0 1; do
    f="${FIRST_DIR:-$dir}/fold${i}_none.jsonl"
    run_to "$data" "$f" --config "$cfg" --shard "$i/2" --trace-sessions 5 --no-rerank
    args+=("$f.gz")
  done
  for d in "${depths[@]}"; do
    for a in "${alphas[@]}"; do
      args+=(--candidate "${RUN_TAG:-}d${d}_a$a")
      for i in 0 1; do
        f="$dir/fold${i}_${RUN_TAG:-}d${d}_a$a.jsonl"
        run_to "$data" "$f" --config "$cfg" --shard "$i/2" \
          --trace-sessions 5 --rerank --reranker-model "$SCRATCH/${CE_NAME:-ce_fold}$i" \
          --reranker-backend onnx --reranker-precision int8 --rerank-unit turn \
          --rerank-max-length 128 --rerank-candidates "$d" --fusion-alpha "$a" \
          ${extra[@]+"${extra[@]}"}
        args+=("$f.gz")
      done
    done
  done
  [ -z "$choice" ] || [ -e "$choice" ] || "$PY" benchmarks/longmemeval/choose_rerank.py \
    "${args[@]}" --output "$choice" | tail -n 12
}
