#!/usr/bin/env python
"""A retrained cross-encoder's card against the published card of the same model.

The command the rerank publish scripts record, kept as a thin wrapper: it runs ``python -m
engram_eval.analysis.compare_card`` with the same arguments (see that module).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_eval.analysis.compare_card import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
