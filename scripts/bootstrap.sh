#!/usr/bin/env bash
# Create .venv and install engram-eval with its test tools.
#
# torch is installed first and pinned to 2.13.0, the CPU build these machines keep on
# disk; the package itself only asks for torch>=2.1, which that build then satisfies, so
# pip never pulls a multi-GB CUDA build. Elsewhere, install the torch build you want first
# (or set ENGRAM_TORCH_SPEC, e.g. ENGRAM_TORCH_SPEC="torch>=2.1").
#
# ENGRAM_EVAL_BROWSER_TESTS=1 also installs Debian's chromium (apt-get, as root or with
# passwordless sudo) when no chromium is on PATH: tests/report/test_report_browser.py opens the
# `engram-eval report` pages in it and skips, saying why, where it is absent. .ci/run sets it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "${ENGRAM_TORCH_SPEC:-torch==2.13.0}"
.venv/bin/python -m pip install -q -e ".[dev]"
# the example systems from outside the package (examples/systems/): the published leak runs
# (PROVENANCE.md section 23) are re-executed with them
.venv/bin/python -m pip install -q --no-build-isolation ./examples/systems/prefix_leak \
  ./examples/systems/bm25s_system
rm -rf examples/systems/*/build examples/systems/*/*.egg-info
.venv/bin/python -c "import torch; print('engram-eval installed; torch', torch.__version__)"
if [ "${ENGRAM_EVAL_BROWSER_TESTS:-0}" = "1" ] && ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = "0" ] || SUDO="sudo -n"
  APT="$SUDO env DEBIAN_FRONTEND=noninteractive apt-get"
  if command -v apt-get >/dev/null 2>&1 && \
     { $APT install -y -q chromium >/dev/null 2>&1 || \
       { $APT update -q >/dev/null 2>&1 && $APT install -y -q chromium >/dev/null 2>&1; }; }; then
    echo "installed chromium for the report browser tests: $(chromium --version 2>/dev/null)"
  else
    echo "warning: could not install chromium (apt-get); the report browser tests will skip" >&2
  fi
fi
