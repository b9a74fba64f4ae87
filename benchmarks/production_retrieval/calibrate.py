"""Fit the offline confidence calibration on a development fixture: ``engram-eval production calibrate``.

A thin wrapper kept for the commands that published results record (same arguments); see
``engram-eval production calibrate --help``.
"""

from __future__ import annotations

import sys

import _common


def main(argv: list[str] | None = None) -> int:
    return _common.production("calibrate", argv, __file__)


if __name__ == "__main__":
    sys.exit(main())
