#!/usr/bin/env python
"""Ship a trained cross-encoder inside the package (engram_eval/models/NAME/).

    python scripts/ship_reranker.py MODEL_DIR TRAINING_CARD NAME --version V \
        --settings SETTINGS.json --chosen-by TEXT [--precision int8|fp32]
    python scripts/ship_reranker.py --weights-from BASE NAME --version V \
        --settings SETTINGS.json --chosen-by TEXT

MODEL_DIR and TRAINING_CARD: a `train-reranker` output and its card. SETTINGS.json: the rerank
fields the model was chosen with (see engram_eval.analysis.ship_reranker). With
--weights-from, NAME is a settings-only version of the shipped model BASE (one card, BASE's
weights). Refuses an existing NAME.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engram_eval.analysis.ship_reranker import ship, ship_settings_version
from engram_eval.retrieval.flags import ArgumentParser
from engram_eval.retrieval.models import SHIPPED_ROOT


def main(argv: list[str]) -> int:
    ap = ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("args", nargs="+", metavar="MODEL_DIR TRAINING_CARD NAME | NAME")
    ap.add_argument("--weights-from", help="a shipped model: NAME is a settings-only version")
    ap.add_argument("--version", required=True)
    ap.add_argument("--settings", required=True, help="JSON file of the chosen settings")
    ap.add_argument("--chosen-by", required=True, help="what the settings rest on")
    ap.add_argument("--precision", default="int8", choices=("int8", "fp32"))
    a = ap.parse_args(argv)
    settings = json.loads(Path(a.settings).read_text(encoding="utf-8"))
    if len(a.args) != (1 if a.weights_from else 3):
        ap.error("give MODEL_DIR TRAINING_CARD NAME, or NAME with --weights-from")
    name = a.args[-1]
    if a.weights_from:
        card = ship_settings_version(a.weights_from, SHIPPED_ROOT / name, name=name,
                                     version=a.version, settings=settings,
                                     chosen_by=a.chosen_by)
    else:
        card = ship(a.args[0], a.args[1], SHIPPED_ROOT / name, name=name, version=a.version,
                    settings=settings, chosen_by=a.chosen_by, precision=a.precision)
    size = sum(p.stat().st_size for p in (SHIPPED_ROOT / name).iterdir())
    print(f"wrote {SHIPPED_ROOT / name} ({size / 2**20:.1f} MiB): "
          + ", ".join(f"{k} {v[:12]}" for k, v in card["files"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
