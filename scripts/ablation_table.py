#!/usr/bin/env python
"""A Markdown ablation table from the run summaries in a results directory.

The command the publish scripts record and the tables name, kept as a thin wrapper: it runs
``python -m engram_eval.analysis.ablation_table`` with the same arguments (see that module).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_eval.analysis.ablation_table import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
