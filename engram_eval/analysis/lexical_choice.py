"""The lexical variant chosen per chat structure (issue 27): for each structure, the variant
whose ``engram-eval tune`` cross-validated estimate is highest, ties going to the one listed
first, read from the tuning reports ``tune_<prefix>_<variant>.yaml.tuning.json`` in one
directory; written as ``lexical_choice.json`` beside them.

    python -m engram_eval.analysis.lexical_choice results/lexical "plain stem" \\
        "plain_none stem_none plain_prefix stem_prefix"

The chat structure ("chat", reports ``tune_lme_*``) takes the first list of variants, people's
chats ("people", ``tune_loc_*``) the second. Prints the choice per structure as one JSON line.
(The catalogue entry ``lexical/lexical_choice.json`` records the command.)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engram_eval.io import exclusive_write

RULE = ("per structure, the variant whose `engram-eval tune` cross-validated estimate is "
        "highest (5 folds; by conversation on LoCoMo); ties: the one listed first")
#: (structure, report prefix) in argument order.
STRUCTURES = (("chat", "lme"), ("people", "loc"))
OUTPUT = "lexical_choice.json"


def choose_variant(estimates: dict[str, dict[str, Any]]) -> str:
    """The variant with the highest ``cv_estimate``; ties: the first in ``estimates``."""
    order = list(estimates)
    return max(order, key=lambda v: (estimates[v]["cv_estimate"], -order.index(v)))


def lexical_choice(reports: Path, variants: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The report: per structure of :data:`STRUCTURES` (``variants`` in that order), every
    variant's cross-validated estimate and its unit (``question`` or ``id-prefix``: by
    conversation), in-sample score and tuning report, and the chosen variant."""
    if len(variants) != len(STRUCTURES):
        raise ValueError(f"give {len(STRUCTURES)} lists of variants, one per structure")
    report: dict[str, Any] = {"rule": RULE, "structures": {}}
    for (kind, prefix), names in zip(STRUCTURES, variants, strict=True):
        est = {}
        for v in names:
            name = f"tune_{prefix}_{v}.yaml.tuning.json"
            t = json.loads((reports / name).read_text())
            cv = t["cross_validation"]
            # a report without a unit predates it: tune of one run then dealt folds by
            # question whatever --cluster said (PROVENANCE.md section 14)
            est[v] = {"cv_estimate": cv["estimate"], "cv_unit": cv.get("unit", "question"),
                      "in_sample": t["in_sample_score"], "report": name}
        report["structures"][kind] = {"variants": est, "chosen": choose_variant(est)}
    return report


def dump_choice(report: dict[str, Any]) -> str:
    """The published text (JSON, indent 1)."""
    return json.dumps(report, indent=1) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 + len(STRUCTURES):
        print("usage: python -m engram_eval.analysis.lexical_choice DIR 'CHAT VARIANTS' "
              "'PEOPLE VARIANTS'", file=sys.stderr)
        return 2
    out = Path(args[0])
    report = lexical_choice(out, [a.split() for a in args[1:]])
    exclusive_write(out / OUTPUT, dump_choice(report))
    print(json.dumps({k: v["chosen"] for k, v in report["structures"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
