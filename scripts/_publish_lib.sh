# Shared by scripts/publish_*.sh (sourced, not run). Set DATA, CACHE, OUT and BENCH (the
# benchmark script) before sourcing; then call `run NAME [options]` per published run and
# `verify_all` at the end.
RUN=(.venv/bin/python "$BENCH" "$DATA" --cache-dir "$CACHE" --no-progress)
mkdir -p "$OUT"
run() { name="$1"; shift; echo "== $name: $*"; "${RUN[@]}" --output "$OUT/$name.jsonl" "$@" | tail -n 3; }
verify_all() {
  for f in "$OUT"/*.jsonl; do
    .venv/bin/engram-eval verify "$f" --dataset "$DATA" > /dev/null && echo "verified $f"
  done
}
