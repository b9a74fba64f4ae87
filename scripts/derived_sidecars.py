#!/usr/bin/env python
"""A sidecar for every derived file in a results directory.

The command every publish script records, kept as a thin wrapper: it runs ``python -m
engram_eval.analysis.derived_sidecars`` with the same arguments (see that module).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_eval.analysis.derived_sidecars import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
