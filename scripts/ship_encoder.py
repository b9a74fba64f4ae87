#!/usr/bin/env python
"""Ship a trained dense encoder inside the package (engram_eval/models/NAME/).

    python scripts/ship_encoder.py MODEL_DIR TRAINING_CARD NAME --version V \
        --chosen-by TEXT [--precision int8|fp32]

MODEL_DIR and TRAINING_CARD: a `train-encoder` output and its card (see
engram_eval.analysis.ship_encoder). Refuses an existing NAME.
"""

from __future__ import annotations

import sys

from engram_eval.analysis.ship_encoder import ship_encoder
from engram_eval.retrieval.flags import ArgumentParser
from engram_eval.retrieval.models import SHIPPED_ROOT


def main(argv: list[str]) -> int:
    ap = ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("training_card")
    ap.add_argument("name")
    ap.add_argument("--version", required=True)
    ap.add_argument("--chosen-by", required=True, help="what this version rests on")
    ap.add_argument("--precision", default="int8", choices=("int8", "fp32"))
    a = ap.parse_args(argv)
    out = SHIPPED_ROOT / a.name
    card = ship_encoder(a.model_dir, a.training_card, out, name=a.name, version=a.version,
                        chosen_by=a.chosen_by, precision=a.precision)
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"wrote {out} ({size / 2**20:.1f} MiB): "
          + ", ".join(f"{k} {v[:12]}" for k, v in card["files"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
