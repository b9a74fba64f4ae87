"""Abstention on real data, the gate at session level: ``engram-eval production sweep``.

A thin wrapper kept for the commands that published results record (same arguments); see
``engram-eval production sweep --help``.
"""

from __future__ import annotations

import sys

import _common


def main(argv: list[str] | None = None) -> int:
    return _common.production("sweep", argv, __file__)


if __name__ == "__main__":
    sys.exit(main())
