#!/usr/bin/env python
"""LoCoMo evidence-session retrieval: ``python benchmarks/locomo/run.py locomo10.json
--output OUT.jsonl``. Same as ``engram-eval run`` with the LoCoMo layout."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engram_eval.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["run", "--dataset-format", "locomo", *sys.argv[1:]]))
