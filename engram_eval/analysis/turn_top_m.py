"""How many of a session's best turns its turn-level signals add up (``dense_turn_top_m``,
``bm25_turn_top_m``; issue 27), chosen per chat structure on the tuning parts: for each
variant (one pair of values, its runs tuned by one multi-run ``engram-eval tune`` over the
LongMemEval tune part and the LoCoMo tune conversations, folds by conversation), every
structure's cross-validated estimate, per fold, read from the tuning reports
``topm_<variant>.yaml.tuning.json`` in one directory; written as ``turn_top_m.json`` beside
them.

    python -m engram_eval.analysis.turn_top_m results/turn_top_m "d1b1 d2b1 d3b1 d1b2 d1b3"
    python -m engram_eval.analysis.turn_top_m results/turn_top_m "d1b1 ..." topm_loc_ \
        turn_top_m_people.json      # the LoCoMo runs tuned alone (people only)

The first variant listed is the baseline: every other variant is compared with it fold by
fold (the folds are the same: same questions, same seed), and a tie goes to the variant
listed first. Per structure (``chat``, ``people``) the chosen variant is the one with the
highest cross-validated estimate. That choice of the variant is made on the same folds that
estimate it, so it is **not nested**; the report also gives the nested estimate, which is
exact and cheap here: in fold ``f`` the variant whose tuned pick scores best on the other
folds (each report's ``train_score``: the joint best over variants and fusion candidates,
since each structure has one part) is scored on fold ``f``. Prints the choice per structure
as one JSON line. (The catalogue's ``turn_top_m/`` entries record the command.)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError
from engram_eval.io import exclusive_write
from engram_eval.retrieval.settings import STRUCTURE_TURN_FIELDS

RULE = ("per chat structure, the variant whose cross-validated estimate (`engram-eval tune` "
        "over both tuning parts, 5 folds, by conversation on LoCoMo) is highest; ties: the "
        "one listed first (the baseline). Not nested: the variant is chosen on the folds that "
        "estimate it; nested_estimate chooses it inside each fold")
OUTPUT = "turn_top_m.json"


#: Reports of the variants tuned over both parts; ``topm_loc_`` names those of the LoCoMo
#: tune conversations tuned alone (catalogue: ``turn_top_m/``).
PREFIX = "topm_"


def report_name(variant: str, prefix: str = PREFIX) -> str:
    return f"{prefix}{variant}.yaml.tuning.json"


def _turn_values(config: dict[str, Any], structure: str) -> dict[str, int]:
    """The variant's turn fields for ``structure``, from the tuned config the report holds
    (people: ``people_overrides`` first)."""
    over = (config.get("people_overrides") or {}) if structure == "people" else {}
    return {k: int(over.get(k, config.get(k, 1))) for k in STRUCTURE_TURN_FIELDS}


def _part(report: dict[str, Any], structure: str, name: str) -> dict[str, Any]:
    parts = (report["structures"].get(structure) or {}).get("parts") or []
    if len(parts) != 1:
        raise ConfigError(f"{name}: structure {structure!r} must have exactly one tuning part "
                          f"(found {len(parts)})")
    part = parts[0]
    if "cv_per_fold" not in part:
        raise ConfigError(f"{name}: the report has no cv_per_fold (made before tune_parts "
                          "recorded the per-fold scores)")
    return part


def choose(variants: dict[str, dict[str, Any]]) -> str:
    """The variant with the highest ``cv_estimate``; ties: the first listed."""
    order = list(variants)
    return max(order, key=lambda v: (variants[v]["cv_estimate"], -order.index(v)))


def nested(variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The nested estimate: in each fold the variant with the best ``train_score`` (ties: the
    first listed), scored on that fold; the mean over questions."""
    order = list(variants)
    folds = [f["fold"] for f in variants[order[0]]["per_fold"]]
    total = n_all = 0.0
    picks = []
    for k, f in enumerate(folds):
        best = max(order, key=lambda v: (variants[v]["per_fold"][k]["train_score"],
                                         -order.index(v)))
        row = variants[best]["per_fold"][k]
        if row["n"]:
            total += row["n"] * row["held_out_score"]
            n_all += row["n"]
        picks.append({"fold": f, "variant": best, "n": row["n"],
                      "held_out_score": row["held_out_score"]})
    return {"estimate": total / n_all if n_all else None, "per_fold": picks}


def turn_top_m(reports: Path, names: Sequence[str], prefix: str = PREFIX) -> dict[str, Any]:
    """The report: per structure that every report tuned, every variant's turn fields,
    estimates (overall and per fold), its folds against the baseline (the first variant), the
    choice and the nested estimate."""
    if not names:
        raise ConfigError("turn_top_m: give at least one variant")
    loaded = {}
    for v in names:
        path = reports / report_name(v, prefix)
        loaded[v] = json.loads(path.read_text())
    present = [s for s in ("chat", "people")
               if all(s in loaded[v]["structures"] for v in names)]
    if not present:
        raise ConfigError("turn_top_m: no chat structure is tuned in every report")
    out: dict[str, Any] = {"rule": RULE, "baseline": names[0], "structures": {}}
    for structure in present:
        per: dict[str, dict[str, Any]] = {}
        for v in names:
            name = report_name(v, prefix)
            part = _part(loaded[v], structure, name)
            per[v] = {"turn_fields": _turn_values(loaded[v]["config"], structure),
                      "report": name, "part": part["path"], "protocol": part["protocol"],
                      "n_questions": part["n_questions"],
                      "cv_estimate": part["cv_estimate"],
                      "in_sample": part["in_sample_score"],
                      "per_fold": [{k: f[k] for k in ("fold", "n", "train_score",
                                                      "held_out_score")}
                                   for f in part["cv_per_fold"]]}
        base = per[names[0]]["per_fold"]
        for v in names:
            better = worse = 0
            for a, b in zip(per[v]["per_fold"], base, strict=True):
                if a["fold"] != b["fold"] or a["n"] != b["n"]:
                    raise ConfigError(f"turn_top_m: {report_name(v, prefix)} and "
                                      f"{report_name(names[0], prefix)} have different "
                                      "folds")
                if a["n"] and a["held_out_score"] > b["held_out_score"]:
                    better += 1
                elif a["n"] and a["held_out_score"] < b["held_out_score"]:
                    worse += 1
            per[v]["folds_vs_baseline"] = {"better": better, "worse": worse,
                                           "equal": len(base) - better - worse}
        out["structures"][structure] = {"variants": per, "chosen": choose(per),
                                        "nested": nested(per)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (2, 4):
        print("usage: python -m engram_eval.analysis.turn_top_m DIR 'VARIANTS (baseline "
              f"first)' [REPORT_PREFIX OUTPUT] (default {PREFIX} {OUTPUT})", file=sys.stderr)
        return 2
    d = Path(args[0])
    prefix, output = (args[2], args[3]) if len(args) == 4 else (PREFIX, OUTPUT)
    report = turn_top_m(d, args[1].split(), prefix)
    exclusive_write(d / output, json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v["chosen"] for k, v in report["structures"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
