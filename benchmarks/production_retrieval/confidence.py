"""The production confidence on real sessions (issue 18): ``fit`` = ``engram-eval production
calibrate-sessions``, ``measure`` = ``engram-eval production measure``.

A thin wrapper kept for the commands that published results record (same arguments):

    python benchmarks/production_retrieval/confidence.py fit --part LABEL=PATH ... \\
        --output CAL.json --settings-output SETTINGS.json --report REPORT.json
    python benchmarks/production_retrieval/confidence.py measure PART --source-root . \\
        --settings SETTINGS.json [--validate-only --freeze-source M | --frozen-source M ...]
"""

from __future__ import annotations

import sys

import _common

SUBCOMMANDS = {"fit": "calibrate-sessions", "measure": "measure"}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in SUBCOMMANDS:
        print(f"usage: {sys.argv[0]} {{fit,measure}} ...  (engram-eval production "
              "calibrate-sessions | measure)", file=sys.stderr)
        return 2
    return _common.production(SUBCOMMANDS[args[0]], args[1:], __file__)


if __name__ == "__main__":
    sys.exit(main())
