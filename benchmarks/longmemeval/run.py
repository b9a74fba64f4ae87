#!/usr/bin/env python
"""LongMemEval session-retrieval benchmark: ``python benchmarks/longmemeval/run.py DATA
--output OUT.jsonl [--retriever NAME] [--rerank ...]``. Same as ``engram-eval run``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engram_eval.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
