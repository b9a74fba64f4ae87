# The one preamble of every scripts/publish_*.sh (sourced, not run):
#   source "$(dirname "$0")/_publish_lib.sh"
# It sets how the package is called, the same way for every script:
#   ENGRAM_EVAL (short name E)       the engram-eval command (default .venv/bin/engram-eval)
#   PUBLISH_PYTHON (short name PY)   python for benchmarks/ and scripts/ (default .venv/bin/python)
# (paths relative to the repository root, where every publish script runs), and defines
#   refuse_existing FILE ...   stop before anything runs when a file the publication would write
#                              already exists (nothing is ever overwritten); creates OUT when set
#   with_companions FILE ...   print each FILE and its .metadata.json and .summary.json
#   production_freeze_all_then_measure NAME...
#                              the same protocol for production fixture runs and confidence
#                              measurements (WHAT, LABEL, GATE set by the caller; see below)
#   freeze_then_run [--freeze-only] DATA NAME [options]
#                              the held-out protocol of one configuration, in OUT: freeze
#                              OUT/NAME.frozen.json (`engram-eval run DATA --validate-only
#                              --freeze-source`, with the options) unless it exists, then run
#                              DATA once under it into OUT/NAME.jsonl (the options and COMMON,
#                              e.g. the cache), verify it (--rerun $VERIFY_RERUN --rerun-seed 0,
#                              against DATA) and compress it; nothing when OUT/NAME.jsonl.gz
#                              exists. --freeze-only: the manifest alone, for scripts that
#                              freeze every configuration before any held-out run (the later
#                              freeze_then_run finds it). HELDOUT_RUN (an array; default
#                              $ENGRAM_EVAL run) is the command of the run.
#
# scripts/publish_longmemeval_dev.sh and scripts/publish_locomo.sh also set DATA, CACHE and OUT
# (and optionally FORMAT: longmemeval|locomo; scripts/_publish_args.sh) and use
#   publish NAME [options]     `engram-eval run` into OUT/NAME.jsonl, verify it against the
#                              dataset (verify_all), then `engram-eval compress` it, so only
#                              NAME.jsonl.gz (+ .metadata.json, .summary.json) remain
#   verify_all [RESULT ...]    verify every result in OUT (or the ones named) with --dataset
#                              and --rerun $VERIFY_RERUN (K questions re-ranked, cache off)
#   run_files NAME             every path a run NAME may write (plain and compressed)
#   refuse_planned             refuse_existing for every file of the runs named in RUNS and of
#                              the DERIVED files in OUT (each with its .metadata.json)
#   temporal_flip              FLIP = $TEMPORAL_FLIP_ARGS (word-split); unset, the option that
#                              flips the package default's temporal step
#
# Failures stop the publication: pipefail makes a failed run visible through `| tail`, and
# verify_all returns non-zero at the first result that does not verify (every check ok,
# dataset re-hashed and gold re-derived: `engram-eval verify` exit status 0).
#
# Environment overrides (for smoke tests on tiny fixtures; never set them to publish):
#   ENGRAM_EVAL         the engram-eval command (default .venv/bin/engram-eval)
#   PUBLISH_PYTHON      python for the table scripts (default .venv/bin/python)
#   PUBLISH_RETRIEVER   replaces every run's --retriever (e.g. dummy, flat-bm25, bm25)
#   PUBLISH_EXTRA_ARGS  appended to every run (word-split), e.g. "--limit 3"
#   VERIFY_RERUN        questions `verify --rerun` re-ranks per result (default 3)
set -o pipefail
VERIFY_RERUN="${VERIFY_RERUN:-3}"
ENGRAM_EVAL="${ENGRAM_EVAL:-.venv/bin/engram-eval}"
PUBLISH_PYTHON="${PUBLISH_PYTHON:-.venv/bin/python}"
E="$ENGRAM_EVAL"
PY="$PUBLISH_PYTHON"
read -r -a PUBLISH_EXTRA <<< "${PUBLISH_EXTRA_ARGS:-}"

freeze_then_run() {
  local freeze_only=0 data name frozen
  if [ "${1:-}" = --freeze-only ]; then freeze_only=1; shift; fi
  data="$1" name="$2"
  shift 2
  frozen="$OUT/$name.frozen.json"
  [ -e "$OUT/$name.jsonl.gz" ] && return 0
  mkdir -p "$OUT"
  [ -e "$frozen" ] || "$ENGRAM_EVAL" run "$data" --validate-only --freeze-source "$frozen" \
    "$@" | tail -n 2
  [ "$freeze_only" -eq 1 ] && return 0
  local runner=("$ENGRAM_EVAL" run)
  if [ -n "${HELDOUT_RUN+x}" ]; then runner=("${HELDOUT_RUN[@]}"); fi
  "${runner[@]}" "$data" --frozen-source "$frozen" --output "$OUT/$name.jsonl" "$@" \
    ${COMMON[@]+"${COMMON[@]}"} | tail -n 12
  "$ENGRAM_EVAL" verify "$OUT/$name.jsonl" --dataset "$data" --rerun "$VERIFY_RERUN" \
    --rerun-seed 0 | tail -n 2
  "$ENGRAM_EVAL" compress "$OUT/$name.jsonl" > /dev/null
}

# The held-out protocol of several configurations: every one frozen before any of them runs,
# then each run once (freeze_then_run). PREFIX NAME...: the runs are PREFIX+NAME; the caller
# sets PART[NAME] (the held-out part) and CFG[NAME] (its run arguments, word-split).
freeze_all_then_run() {
  local prefix="$1" n
  shift
  echo "== every configuration frozen before any held-out run"
  for n in "$@"; do
    # shellcheck disable=SC2086
    freeze_then_run --freeze-only "${PART[$n]}" "$prefix$n" ${CFG[$n]}
  done
  echo "== one run each"
  for n in "$@"; do
    # shellcheck disable=SC2086
    freeze_then_run "${PART[$n]}" "$prefix$n" ${CFG[$n]}
  done
}

# The held-out protocol of production measurements (`engram-eval production run|measure`):
# every manifest frozen before any measurement, then each measured once under its own, into
# OUT/NAME.json (a store per case under SCRATCH/work_NAME; a measurement labelled LABEL[NAME]).
# The caller sets WHAT[NAME] (the subcommand and its arguments, word-split), LABEL[NAME] (for
# `measure` parts) and GATE (an array of gate options for both steps, possibly empty).
production_freeze_all_then_measure() {
  local n cmd extra
  echo "== every manifest frozen before any measurement"
  for n in "$@"; do
    read -r -a cmd <<< "${WHAT[$n]}"
    "$ENGRAM_EVAL" production "${cmd[@]}" --source-root . --validate-only \
      ${GATE[@]+"${GATE[@]}"} --freeze-source "$OUT/$n.frozen.json" | tail -n 1
  done
  echo "== each measured once under its manifest"
  for n in "$@"; do
    read -r -a cmd <<< "${WHAT[$n]}"
    extra=(--work-dir "$SCRATCH/work_$n")  # run: a store per case
    [ "${cmd[0]}" = measure ] && extra=(--dataset-label "${LABEL[$n]}")
    "$ENGRAM_EVAL" production "${cmd[@]}" --source-root . --frozen-source "$OUT/$n.frozen.json" \
      ${GATE[@]+"${GATE[@]}"} --output "$OUT/$n.json" "${extra[@]}" | tail -n 30
  done
}

# Paired comparisons of held-out runs, each once (an existing output is kept): RUN_PREFIX
# OUT_PREFIX "A B O"...: compare run A with $OUT/RUN_PREFIX+B.jsonl.gz into
# $OUT/OUT_PREFIX+O.{json,png}, clustered by conversation where B is a LoCoMo run (locomo*).
compare_pairs() {
  local run_prefix="$1" out_prefix="$2" p a b o cl
  shift 2
  for p in "$@"; do
    read -r a b o <<< "$p"
    o="$OUT/$out_prefix$o"
    cl=(); [[ "$b" == locomo* ]] && cl=(--cluster id-prefix)
    [ -e "$o.json" ] || "$E" compare "$a" "$OUT/$run_prefix$b.jsonl.gz" "${cl[@]}" \
      --output "$o.json" --plot "$o.png" | tail -n 14
  done
}

run_files() {
  local b="$OUT/$1.jsonl" s
  for s in "" .metadata.json .summary.json; do printf '%s\n' "$b$s" "$b.gz$s"; done
}

refuse_existing() {
  local f first="" n=0
  for f in "$@"; do
    if [ -e "$f" ] || [ -L "$f" ]; then n=$((n + 1)); [ -n "$first" ] || first="$f"; fi
  done
  if [ "$n" -ne 0 ]; then
    echo "refusing to publish: ${OUT:-the results} already holds $n file(s) this script writes (e.g. $first); move or delete the old results first (nothing was run)" >&2
    return 1
  fi
  if [ -n "${OUT:-}" ]; then mkdir -p "$OUT"; fi
}

with_companions() {
  local f
  for f in "$@"; do printf '%s\n' "$f" "$f.metadata.json" "$f.summary.json"; done
}

refuse_planned() {
  local planned=() n f d
  for n in "${RUNS[@]}"; do while read -r f; do planned+=("$f"); done < <(run_files "$n"); done
  for d in "${DERIVED[@]}"; do planned+=("$OUT/$d" "$OUT/$d.metadata.json"); done
  refuse_existing "${planned[@]}"
}

temporal_flip() {
  local default_temporal
  if [ -z "${TEMPORAL_FLIP_ARGS+x}" ]; then  # flip the package default's temporal step
    default_temporal=$("$PUBLISH_PYTHON" -c 'from engram_eval.runs.config import RunConfig; print(RunConfig().temporal)')
    case "$default_temporal" in
      True) TEMPORAL_FLIP_ARGS="--no-temporal";;
      False) TEMPORAL_FLIP_ARGS="--temporal";;
      *) echo "cannot read the package default of temporal ($default_temporal)" >&2; exit 1;;
    esac
  fi
  read -r -a FLIP <<< "$TEMPORAL_FLIP_ARGS"
}

# The options of one run after the overrides: PUBLISH_RETRIEVER replaces --retriever X.
_run_args() {
  RUN_ARGS=()
  local skip=0 a
  for a in "$@"; do
    if [ "$skip" -eq 1 ]; then skip=0; continue; fi
    if [ -n "${PUBLISH_RETRIEVER:-}" ]; then
      case "$a" in
        --retriever) skip=1; continue;;
        --retriever=*) continue;;
      esac
    fi
    RUN_ARGS+=("$a")
  done
  if [ -n "${PUBLISH_RETRIEVER:-}" ]; then RUN_ARGS+=(--retriever "$PUBLISH_RETRIEVER"); fi
  RUN_ARGS+=("${PUBLISH_EXTRA[@]}")
}

run() {
  local name="$1"; shift
  _run_args "$@"
  echo "== $name: ${RUN_ARGS[*]}"
  mkdir -p "$OUT"
  local RUN=("$ENGRAM_EVAL" run "$DATA" --cache-dir "$CACHE" --no-progress)
  if [ -n "${FORMAT:-}" ]; then RUN+=(--dataset-format "$FORMAT"); fi
  "${RUN[@]}" --output "$OUT/$name.jsonl" "${RUN_ARGS[@]}" | tail -n 5
}

publish() {
  local name="$1"
  run "$@"
  verify_all "$OUT/$name.jsonl"
  "$ENGRAM_EVAL" compress "$OUT/$name.jsonl"
}

verify_all() {
  local f out status n=0
  if [ "$#" -eq 0 ]; then
    shopt -s nullglob
    set -- "$OUT"/*.jsonl "$OUT"/*.jsonl.gz
    shopt -u nullglob
  fi
  if [ "$#" -eq 0 ]; then
    echo "verify_all: no result files in $OUT" >&2
    return 1
  fi
  for f in "$@"; do
    status=0
    out=$("$ENGRAM_EVAL" verify "$f" --dataset "$DATA" --rerun "$VERIFY_RERUN" 2>&1) || status=$?
    if [ "$status" -ne 0 ]; then
      printf '%s\n' "$out" >&2
      echo "verify_all: $f did not verify (exit status $status); stopping" >&2
      return 1
    fi
    n=$((n + 1))
    echo "verified $f"
  done
  echo "verify_all: $n result(s) verified"
}
