#!/usr/bin/env bash
# Create .venv and install engram-eval with its test tools.
#
# torch is installed first and pinned to 2.13.0, the CPU build these machines keep on
# disk; the package itself only asks for torch>=2.1, which that build then satisfies, so
# pip never pulls a multi-GB CUDA build. Elsewhere, install the torch build you want first
# (or set ENGRAM_TORCH_SPEC, e.g. ENGRAM_TORCH_SPEC="torch>=2.1").
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "${ENGRAM_TORCH_SPEC:-torch==2.13.0}"
.venv/bin/python -m pip install -q -e ".[dev]"
.venv/bin/python -c "import torch; print('engram-eval installed; torch', torch.__version__)"
