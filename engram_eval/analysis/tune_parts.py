"""``engram-eval tune RUN_A RUN_B ...``: choose fusion settings over several tuning parts,
separately for each chat structure.

Each run is one tuning part (for example the tune part of the LongMemEval dev split and the
tune conversations of a LoCoMo split). :func:`engram_eval.analysis.tune.load_part` reads it and
proves that the pipeline reproduces every stored ranking from the traced signals. Runs are
grouped by their haystacks' chat structure (``chat``: user and assistant roles; ``people``:
no assistant role, as decided by :func:`engram_eval.data.records.has_chat_roles` and traced
per question); each group is tuned on its own parts by
:func:`engram_eval.analysis.tune.search`, the one grid search (single-run ``tune`` is this
search given one part), which states each step:

1. **Candidates**: the grid of :func:`engram_eval.analysis.tune.candidates` around the
   group's first run's own settings and the signals its runs traced.
2. **Objective per part**: the mean over the part's questions (under its protocol) of the
   mean of the objective metrics.
3. **Combined** (stated in the report): ``worst-ratio`` (default) = the smallest, over the
   group's parts, of the part's score divided by the best score any candidate reaches on
   that part; ``mean`` = the unweighted mean of the parts' scores. Ties: grid order.
4. **Estimate**: ``folds``-fold cross-validation within every part at once (fold ``f`` of
   each part held out together; the choice is made on the other folds of every part); with
   ``cluster="id-prefix"`` the unit is the question id's prefix before ``:`` (a LoCoMo
   conversation), so no conversation is split between choosing and scoring.

Output: ``CONFIG.yaml`` whose top-level fusion/temporal fields are the ``chat`` choice (or
the ``people`` one when only people parts were given) and whose ``people_overrides`` hold the
``people`` choice's fields that differ, so one config serves both structures (and the people
runs' own analyser, speaker and turn top-m fields where the runs differ in them: runs made
with each analyser are compared by their tune estimates, then the chosen runs are tuned
together); a signal is switched on when either structure gives it weight.
``CONFIG.yaml.tuning.json`` says, per field, whether it is shared or per structure, and records every part (path, fingerprint,
dataset hash, rows hash, protocol, counts), the grid, the objective and combination rule,
each part's in-sample score of the choice and of its own settings, and the estimates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engram_eval.analysis import tune as T
from engram_eval.errors import ConfigError
from engram_eval.retrieval import fusion as F
from engram_eval.retrieval.settings import (
    LEGACY_VALUES,
    STRUCTURE_DENSE_FIELDS,
    STRUCTURE_LEXICAL_FIELDS,
    STRUCTURE_TURN_FIELDS,
    RetrievalSettings,
)

STRUCTURE_FIELDS = ("fusion", "normalisation", "rrf_k", "temporal", "temporal_boost")


def _choose(parts: list[T.TunedPart], grid: dict[str, Any], objective: Sequence[str],
            rule: str, folds: int, seed: int, cluster: str | None) -> dict[str, Any]:
    """:func:`engram_eval.analysis.tune.search` over one structure's parts, as reported."""
    found = T.search(parts, grid, objective, rule, folds, seed, cluster)
    best, chosen = found.best, found.chosen
    own_scores = [float(ev.per_question(p.own).mean())
                  for p, ev in zip(parts, found.evaluators, strict=True)]
    # per part and fold: the fold's pick scored on the folds it was chosen on, and on the fold
    part_folds = [[{"fold": f, "n": int((fold_k == f).sum()),
                    "train_score": float(tab[pick, fold_k != f].mean() if (fold_k != f).any()
                                         else tab[pick].mean()),
                    "held_out_score": (float(tab[pick, fold_k == f].mean())
                                       if (fold_k == f).any() else None)}
                   for f, pick in enumerate(found.picks)]
                  for tab, fold_k in zip(found.tables, found.folds, strict=True)]
    return {
        "chosen": chosen, "signals": found.signals, "n_candidates": len(found.candidates),
        "combined_score": float(found.combined[best]),
        "parts": [{"path": p.path, "fingerprint": p.meta.get("fingerprint"),
                   "dataset": p.meta.get("dataset"), "rows_sha256": p.rows_sha256,
                   "protocol": p.protocol, "n_questions": len(p.questions),
                   "in_sample_score": float(found.per_part[k, best]),
                   "best_possible_score": float(found.per_part[k].max()),
                   "run_settings": p.own.to_json(), "run_settings_score": own_scores[k],
                   "cv_estimate": float(found.held[k].mean()),
                   "cv_per_fold": part_folds[k],
                   "in_sample_metrics": found.evaluators[k].metric_means(chosen)}
                  for k, p in enumerate(parts)],
        "cross_validation": {"folds": folds, "seed": seed, "unit": cluster or "question",
                             "per_fold": [{"fold": f, "chosen": found.candidates[pick].to_json()}
                                          for f, pick in enumerate(found.picks)]},
    }


def _fields(c: F.FusionSetting) -> dict[str, Any]:
    d = {k: getattr(c, k) for k in STRUCTURE_FIELDS}
    for name, w in c.weights:
        d[T.WEIGHT_FIELD[name]] = float(w)
    return d


def tune_parts(runs: Sequence[str | Path], grid_path: str | Path, output: str | Path, *,
               protocols: Sequence[str] | None = None,
               objective: Sequence[str] = T.DEFAULT_OBJECTIVE, rule: str = "worst-ratio",
               folds: int = 5, seed: int = 0, cluster: str | None = "id-prefix"
               ) -> T.TuneResult:
    """See the module docstring. ``protocols``: one per run (default: ``answerable`` for a
    LongMemEval run, ``locomo_no_adversarial`` for a LoCoMo run when it was scored so, else
    ``locomo``)."""
    t0 = time.perf_counter()
    out, report_path = T.output_paths(output, folds)
    if rule not in T.COMBINE:
        raise ConfigError(f"tune: --combine must be one of {T.COMBINE}")
    if protocols is not None and len(protocols) not in (1, len(runs)):
        raise ConfigError("tune: give one --protocol, or one per run")
    objective = T.check_request(objective, protocols or [])
    T.units_of([], cluster)  # an unknown unit is refused before the runs are read
    grid = T.load_grid(grid_path)
    parts: list[T.TunedPart] = []
    for k, r in enumerate(runs):
        proto = (protocols[0] if protocols and len(protocols) == 1
                 else protocols[k] if protocols else _default_protocol(r))
        parts.append(T.load_part(r, proto))
    T.check_grid_signals(grid, parts, grid_path)
    groups: dict[str, list[T.TunedPart]] = {}
    for part in parts:
        groups.setdefault("chat" if part.chat_roles else "people", []).append(part)
    chosen = {s: _choose(g, grid, objective, rule, folds, seed, cluster)
              for s, g in groups.items()}
    main = "chat" if "chat" in chosen else "people"
    base_cfg = groups[main][0].run_cfg
    signals = [n for n in F.SIGNAL_ORDER if any(n in c["signals"] for c in chosen.values())]
    config = T.output_config(base_cfg, chosen[main]["chosen"], signals)
    on = {n for c in chosen.values() for n, w in c["chosen"].weights if w > 0}
    for n in signals:  # a signal either structure fuses must be computed
        config[T.USE_FIELD[n]] = config[T.USE_FIELD[n]] or n in on
    field_report: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    main_fields = _fields(chosen[main]["chosen"])
    if "people" in chosen and main == "chat":
        people_fields = _fields(chosen["people"]["chosen"])
        for name in sorted(set(main_fields) | set(people_fields)):
            a, b = main_fields.get(name), people_fields.get(name)
            if b is not None and a != b:
                overrides[name] = b
                field_report[name] = {"chat": a, "people": b}
            else:
                field_report[name] = {"shared": a}
    else:
        field_report = {k: {main: v} for k, v in main_fields.items()}
    if "people" in chosen and main == "chat":  # the people runs' own analyser, turn
        # aggregation and encoder, where they differ
        # each side as its run recorded it, a field the run predates at its legacy value
        # (never a later default): a field both runs had at that value is no override
        people_cfg = RetrievalSettings.of(
            _as_recorded(groups["people"][0].run_cfg)).for_chat_roles(False)
        for name in (*STRUCTURE_LEXICAL_FIELDS, *STRUCTURE_TURN_FIELDS,
                     *STRUCTURE_DENSE_FIELDS):
            a, b = _as_recorded(config).get(name), getattr(people_cfg, name)
            if a != b:
                overrides[name] = b
                field_report[name] = {"chat": a, "people": b, "from": "the runs"}
    config["people_overrides"] = overrides
    RetrievalSettings.of(config)  # the written config must validate
    report = {
        "kind": "engram-eval/tuning-parts", "objective": {"metrics": list(objective),
                                                          "per_part": "mean over questions of "
                                                          "the mean of these metrics",
                                                          "combined": rule},
        "grid": grid, "structures": {s: {**{k: v for k, v in c.items() if k != "chosen"},
                                         "chosen": c["chosen"].to_json()}
                                     for s, c in chosen.items()},
        "fields": field_report, "config": config,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    from engram_eval.io import exclusive_write

    exclusive_write(report_path, json.dumps(report, indent=2, sort_keys=True) + "\n")
    exclusive_write(out, _yaml(config, report, report_path))
    return T.TuneResult(out, report_path, report)


def _as_recorded(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` (a run's recorded config, or the config written from it) with every field it
    lacks that has a legacy value (:data:`LEGACY_VALUES`: added after runs were published) at
    that value, the one the run was made with."""
    return {**{k: v for k, v in LEGACY_VALUES.items() if k not in cfg}, **cfg}


def _default_protocol(run: str | Path) -> str:
    from engram_eval.runs.reader import read_run

    meta = read_run(run, require_sidecar=True).metadata
    from engram_eval.scoring.protocols import default_protocols

    fmt = str(meta.get("dataset_format") or "longmemeval")
    recorded = list((meta.get("config") or {}).get("protocols") or default_protocols(fmt))
    if fmt == "locomo":
        return "locomo_no_adversarial" if "locomo_no_adversarial" in recorded else "locomo"
    return "answerable"


def _yaml(config: dict[str, Any], report: dict[str, Any], report_path: Path) -> str:
    import yaml

    head = ["# engram-eval tune over several tuning parts; load with engram-eval run --config"]
    for s, c in report["structures"].items():
        for p in c["parts"]:
            head.append(f"# {s}: {p['path']} ({p['protocol']}, {p['n_questions']} questions; "
                        f"rows sha256 {p['rows_sha256']}): in-sample {p['in_sample_score']:.4f}"
                        f", own settings {p['run_settings_score']:.4f}, CV estimate "
                        f"{p['cv_estimate']:.4f}")
    head.append(f"# combined by {report['objective']['combined']}; full report: "
                f"{report_path.name}")
    return "\n".join(head) + "\n" + yaml.safe_dump(dict(config), sort_keys=False)
