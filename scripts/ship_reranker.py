#!/usr/bin/env python
"""Ship a trained cross-encoder inside the package (engram_eval/models/NAME/).

    python scripts/ship_reranker.py MODEL_DIR TRAINING_CARD NAME --version V \
        --settings SETTINGS.json --chosen-by TEXT [--precision int8|fp32]

MODEL_DIR and TRAINING_CARD: a `train-reranker` output and its card. SETTINGS.json: the rerank
fields the model was chosen with (see engram_eval.analysis.ship_reranker). Refuses an
existing NAME.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engram_eval.analysis.ship_reranker import ship
from engram_eval.retrieval.models import SHIPPED_ROOT


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("training_card")
    ap.add_argument("name")
    ap.add_argument("--version", required=True)
    ap.add_argument("--settings", required=True, help="JSON file of the chosen settings")
    ap.add_argument("--chosen-by", required=True, help="what the settings rest on")
    ap.add_argument("--precision", default="int8", choices=("int8", "fp32"))
    a = ap.parse_args(argv)
    settings = json.loads(Path(a.settings).read_text(encoding="utf-8"))
    card = ship(a.model_dir, a.training_card, SHIPPED_ROOT / a.name, name=a.name,
                version=a.version, settings=settings, chosen_by=a.chosen_by,
                precision=a.precision)
    size = sum(p.stat().st_size for p in (SHIPPED_ROOT / a.name).iterdir())
    print(f"wrote {SHIPPED_ROOT / a.name} ({size / 2**20:.1f} MiB): "
          + ", ".join(f"{k} {v[:12]}" for k, v in card["files"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
