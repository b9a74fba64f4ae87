#!/usr/bin/env python
"""Choose the rerank blend out of fold.

The command the catalogue and PROVENANCE.md record, kept as a thin wrapper: it
runs ``python -m engram_eval.analysis.choose_rerank`` with the same arguments (see that
module).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engram_eval.analysis.choose_rerank import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
