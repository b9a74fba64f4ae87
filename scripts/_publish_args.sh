# Sourced first by scripts/publish_longmemeval_dev.sh and scripts/publish_locomo.sh, with the
# script's arguments (`source "$(dirname "$0")/_publish_args.sh" DEFAULT_OUT "$@"`): checks
# them (DATA CACHE [OUTDIR]; usage and exit 2 otherwise), moves to the repository root and sets
# DATA, CACHE and OUT, relative paths taken from the directory the script was called from.
_default_out="$1"
shift
if [ "$#" -lt 2 ] || [ "$#" -gt 3 ]; then
  echo "usage: $0 DATA CACHE [OUTDIR]   (OUTDIR default $_default_out)" >&2
  exit 2
fi
here=$PWD
cd "$(dirname "$0")/.."
root=$PWD
abspath() { case "$1" in /*) printf '%s\n' "$1";; *) if [ "$here" = "$root" ]; then printf '%s\n' "$1"; else printf '%s\n' "$here/$1"; fi;; esac; }
DATA=$(abspath "$1")
CACHE=$(abspath "$2")
OUT=$(abspath "${3:-$_default_out}")
