"""Production-confidence check of a fixture: ``engram-eval production run``.

A thin wrapper kept for the commands that published results record (same arguments); see
``engram-eval production run --help``.
"""

from __future__ import annotations

import sys

import _common


def main(argv: list[str] | None = None) -> int:
    return _common.production("run", argv, __file__)


if __name__ == "__main__":
    sys.exit(main())
