#!/usr/bin/env python
"""Per-type misses analysis of a published run (Markdown).

The command the publish scripts record and the analyses name, kept as a thin wrapper: it
runs ``python -m engram_eval.analysis.misses`` with the same arguments (see that module).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_eval.analysis.misses import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
