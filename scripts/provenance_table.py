#!/usr/bin/env python
"""Every published result with its command, fingerprint and dataset hash (Markdown).

The command PROVENANCE.md names, kept as a thin wrapper: it runs ``python -m
engram_eval.analysis.provenance_table`` with the same arguments (see that module).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_eval.analysis.provenance_table import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
