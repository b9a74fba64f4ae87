"""Choose the rerank blend out of fold: pool k-fold runs of a tuning part, one candidate at a
time, and pick the candidate with the best stated objective.

    python -m engram_eval.analysis.choose_rerank \\
        --candidate none  f0_none.jsonl f1_none.jsonl \\
        --candidate a0.3  f0_a0.3.jsonl f1_a0.3.jsonl \\
        --candidate a0.5  f0_a0.5.jsonl f1_a0.5.jsonl \\
        --objective recall_any@1,recall_all@5,ndcg_any@5 --protocol answerable \\
        --output rerank_choice.json

(``benchmarks/longmemeval/choose_rerank.py``, the command the catalogue and
PROVENANCE.md record, runs this module with the same arguments.)

Each candidate is the same settings run once per fold (``run --shard I/K``); a reranked fold
run must use a reranker whose card (``MODEL.card.json``, written by ``train-reranker``) says it
was trained on the same part with exactly that shard left out (``--exclude-shard I/K``), so
every question is scored by a model that never saw it. Folds by conversation (LoCoMo) are
runs of one fold's questions (``question_ids`` in the run's config) scored by a reranker
trained with ``--exclude-fold I/K``: every question of the run must fall in fold I. A
reranker trained on other parts only (say, another dataset's tune part; a shipped model by the
training card its settings card carries) may score a whole part or any shard of it, when its
card's ``trained_question_ids`` share no id with the run. The folds of one candidate must be
disjoint, and every candidate must cover the same questions. A candidate's score is the mean
over its pooled questions of the mean of the objective's metrics (per-question metrics from
the rows, averaged by ``engram_eval.scoring.summary.summarize_rows``, the runner's own
summary); the highest wins, ties going to the candidate listed first. The report (JSON, with a
derived-file sidecar) gives every candidate's pooled means, per fold n, and the choice.

With ``--cluster``, each candidate after the first is also paired with the first (the
baseline, e.g. no rerank) question by question: the mean difference of the objective and of
each of its metrics, with a 95% percentile interval from a bootstrap that resamples
questions (``--cluster question``) or whole conversations (``--cluster id-prefix``: the id
before ``:``, LoCoMo's folds), the resampling of ``engram-eval compare`` (10,000 replicates, seed 0), and the count of questions
better and worse; ``adopted`` names the chosen candidate where its interval lies above zero,
else the first (the choice above stays the highest objective).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.errors import EngramEvalError, ProvenanceError
from engram_eval.io import atomic_write, dump_json, sha256_file
from engram_eval.provenance.derived import write_derived_sidecar
from engram_eval.provenance.guard import refuse_heldout_run
from engram_eval.retrieval.flags import ArgumentParser, output_file
from engram_eval.runs.reader import FinishedRun, read_run
from engram_eval.scoring.summary import summarize_rows

#: The module recorded as the report sidecar's generator.
GENERATOR = "engram_eval/analysis/choose_rerank.py"
#: The metrics every candidate's pooled means list (besides the objective's).
REPORTED = ("recall_any@1", "recall_any@5", "recall_all@5", "ndcg_any@5", "recall_all@10",
            "mrr")
DEFAULT_OBJECTIVE = "recall_any@1,recall_all@5,ndcg_any@5"


@dataclass(frozen=True)
class Choice:
    """The published report (JSON-ready, keys in their published order) and every run it
    read (the sidecar's inputs)."""

    report: dict[str, Any]
    runs: list[FinishedRun]


def reranker_card_path(reranker_model: str) -> Path:
    """The card ``train-reranker`` wrote beside a reranker: ``MODEL.card.json``."""
    return Path(str(reranker_model) + ".card.json")


def _training_card(reranker_model: str, run: FinishedRun) -> tuple[dict[str, Any], Path]:
    """The training card of a run's reranker: ``MODEL.card.json`` beside a trained model, or
    for a model the package ships by name, the ``training_card`` its settings card carries."""
    card_path = reranker_card_path(reranker_model)
    if card_path.is_file():
        return json.loads(card_path.read_text(encoding="utf-8")), card_path
    from engram_eval.retrieval.models import CARD_FILE, SHIPPED_ROOT, shipped_models

    if reranker_model in shipped_models():
        shipped = SHIPPED_ROOT / reranker_model / CARD_FILE
        training = json.loads(shipped.read_text(encoding="utf-8")).get("training_card")
        if isinstance(training, dict):
            return training, shipped
    raise ProvenanceError(f"{run.path}: its reranker {reranker_model} has no card "
                          f"({card_path}); cannot prove it never saw this fold")


def reranks(run: FinishedRun) -> bool:
    """Whether the run reranked any of its questions: its chats when ``rerank`` is on, its
    people's chats when ``people_overrides`` switch it on (each question's haystack structure
    read from its trace, ``chat_roles``; a row without one counts as either)."""
    cfg = run.metadata["config"]
    roles = {((r.get("trace") or {}).get("question") or {}).get("chat_roles") for r in run.rows}
    chats = bool(cfg.get("rerank")) and bool(roles & {True, None})
    people = bool((cfg.get("people_overrides") or {}).get("rerank", cfg.get("rerank")))
    return chats or (people and bool(roles & {False, None}))


def fold_check(run: FinishedRun) -> dict[str, Any]:
    """The fold of ``run`` (its shard, '' for a whole part) and, for a reranked run, proof
    that its reranker never trained on the run's questions: either it was trained on the same
    part with exactly that shard left out, or on other parts only and its card's
    ``trained_question_ids`` share no id with the run."""
    cfg = run.metadata["config"]
    sh = run.metadata["selection"].get("shard")
    shard = f"{sh['index']}/{sh['count']}" if sh else ""
    reranked = reranks(run)
    out: dict[str, Any] = {"file": str(run.path), "shard": shard, "n": len(run.rows),
                           "fingerprint": run.fingerprint, "rerank": reranked}
    if reranked:
        card, card_path = _training_card(cfg["reranker_model"], run)
        parts = card.get("parts") or [card["part"]]
        unit_fold = card["settings"].get("exclude_fold") or ""
        same_part = any(p["sha256"] == run.dataset_sha256 for p in parts)
        if same_part and unit_fold:
            from engram_eval.analysis.folds import in_fold, parse_fold

            fold = parse_fold(unit_fold)
            outside = [r["question_id"] for r in run.rows if not in_fold(r["question_id"], fold)]
            if outside:
                raise ProvenanceError(
                    f"{run.path}: {len(outside)} of its questions (first {outside[0]!r}) are "
                    f"outside fold {unit_fold}, the only one its reranker left out; it may "
                    "have seen them")
            out["fold"] = unit_fold
            out["unseen_by"] = "the same part with this fold's conversations left out"
        elif same_part:
            if not shard:
                raise ProvenanceError(f"{run.path}: not a fold run (no --shard in its config) "
                                      "but its reranker was trained on this part")
            if card["settings"].get("exclude_shard") != shard:
                raise ProvenanceError(
                    f"{run.path}: fold {shard} is scored by a reranker trained with "
                    f"exclude_shard={card['settings'].get('exclude_shard')!r}; it may have seen "
                    "these questions")
            out["unseen_by"] = "the same part with this fold left out"
        else:
            if any("trained_question_ids" not in p for p in parts):
                raise ProvenanceError(f"{run.path}: its reranker was trained on another part "
                                      f"and its card ({card_path}) does not list the questions "
                                      "it trained on; cannot prove it never saw these")
            trained = {q for p in parts for q in p["trained_question_ids"]}
            seen = sorted(trained & {r["question_id"] for r in run.rows})
            if seen:
                raise ProvenanceError(f"{run.path}: its reranker trained on {len(seen)} of its "
                                      f"questions (first {seen[0]!r})")
            out["unseen_by"] = "other parts only (no trained question id in this run)"
        out["reranker_card"] = {"file": str(card_path), "sha256": sha256_file(card_path)}
    return out


#: Bootstrap replicates and seed of the paired intervals (those of ``engram-eval compare``).
PAIRED_BOOTSTRAP = 10_000
PAIRED_SEED = 0


def _per_question(rows: Sequence[dict[str, Any]], protocol: str, objective: Sequence[str]
                  ) -> dict[str, list[float]]:
    """question id -> its objective metrics (in ``objective`` order), for the rows in the
    protocol's denominator."""
    out: dict[str, list[float]] = {}
    for r in rows:
        m = r["metrics"].get(protocol)
        if m is not None and all(k in m for k in objective):
            out[r["question_id"]] = [float(m[k]) for k in objective]
    return out


def paired(base: Mapping[str, Sequence[float]], cand: Mapping[str, Sequence[float]],
           objective: Sequence[str], cluster: str) -> dict[str, Any]:
    """Candidate minus baseline over their common questions: the mean difference of the
    objective (the mean of its metrics) and of each metric, each with its 95% interval
    (clusters resampled as ``engram-eval compare`` does), and questions better / worse on
    the objective."""
    import numpy as np

    from engram_eval.analysis.compare import (
        cluster_bootstrap_deltas,
        cluster_of,
        cluster_sums,
        percentile_interval,
    )

    ids = [q for q in base if q in cand]
    d = np.array([cand[q] for q in ids]) - np.array([base[q] for q in ids])
    d = np.column_stack([d.mean(axis=1), d])  # the objective first, then its metrics
    labels = [cluster_of(q) if cluster == "id-prefix" else q for q in ids]
    _, sums, sizes = cluster_sums(d, labels)
    lo, hi = percentile_interval(cluster_bootstrap_deltas(sums, sizes, PAIRED_BOOTSTRAP,
                                                          PAIRED_SEED), 0.05)
    names = ["objective", *objective]
    interval = {k: [float(lo[j]), float(hi[j])] for j, k in enumerate(names)}
    return {"n": len(ids), "cluster": cluster, "clusters": int(len(sizes)),
            "difference": {k: float(d[:, j].mean()) for j, k in enumerate(names)},
            "interval_95": interval,
            "better": int((d[:, 0] > 0).sum()), "worse": int((d[:, 0] < 0).sum()),
            "interval_excludes_zero": bool(lo[0] > 0 or hi[0] < 0)}


def choose(candidates: Sequence[tuple[str, Sequence[Path]]], objective: Sequence[str],
           protocol: str, cluster: str | None = None) -> Choice:
    """The report of the module docstring: every candidate's folds pooled and scored, the
    highest objective chosen (ties: the first listed). ProvenanceError when a fold may have
    been seen by its reranker, folds overlap, runs are on other data, or candidates cover
    other questions; EngramEvalError when an objective metric is not in the rows."""
    report: dict[str, Any] = {"kind": "engram-eval/rerank-choice", "protocol": protocol,
                              "objective": {"metrics": list(objective),
                                            "rule": "mean over pooled questions of the mean "
                                                    "of these metrics; highest wins, ties to "
                                                    "the first listed"},
                              "candidates": []}
    if cluster:  # (reports made before the pairing have none, and stay as they were)
        report["paired"] = {"against": candidates[0][0] if candidates else None,
                            "cluster": cluster, "bootstrap": PAIRED_BOOTSTRAP,
                            "seed": PAIRED_SEED,
                            "rule": "a candidate is adopted over the first only where the 95% "
                                    "interval of its paired objective difference excludes "
                                    "zero"}
    per_question: dict[str, dict[str, list[float]]] = {}
    question_sets: dict[str, frozenset[str]] = {}
    runs: list[FinishedRun] = []
    dataset = None
    for name, paths in candidates:
        folds: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        for p in paths:
            run = read_run(p, within_selection=True)
            refuse_heldout_run(run.metadata, p, "the rerank blend is chosen on tuning parts "
                               "only")
            runs.append(run)
            dataset = dataset or run.dataset()
            if run.dataset_sha256 != dataset["sha256"]:
                raise ProvenanceError(f"{p}: made on other data than the first run")
            folds.append(fold_check(run))
            ids = {r["question_id"] for r in run.rows}
            if ids & seen:
                raise ProvenanceError(f"{p}: its questions overlap another fold of {name}")
            seen |= ids
            rows.extend(run.rows)
        question_sets[name] = frozenset(seen)
        per_question[name] = _per_question(rows, protocol, objective)
        summ = summarize_rows(rows, [protocol])["protocols"][protocol]
        means = summ["metrics"]
        missing = [m for m in objective if m not in means]
        if missing:
            raise EngramEvalError(f"candidate {name}: metrics {missing} not in its rows")
        score = sum(means[m] for m in objective) / len(objective)
        report["candidates"].append({"name": name, "folds": folds, "n": summ["n"],
                                     "objective": score,
                                     "metrics": {m: means[m] for m in REPORTED if m in means},
                                     "by_type": summ["by_type"]})
    first = next(iter(question_sets.values()))
    for name, covered in question_sets.items():
        if covered != first:
            raise ProvenanceError(f"candidate {name} covers other questions than "
                                  f"{candidates[0][0]}; candidates must be compared on the same "
                                  "questions")
    first_name = candidates[0][0]
    for c in report["candidates"][1:] if cluster else []:
        c["paired"] = paired(per_question[first_name], per_question[c["name"]], objective,
                             str(cluster))
    best = max(report["candidates"], key=lambda c: c["objective"])  # first of equals
    report["chosen"] = best["name"]
    if cluster:  # the rule of report["paired"]: the chosen only where it is clear of zero
        clear = best["name"] == first_name or (best["paired"]["interval_95"]["objective"][0] > 0)
        report["adopted"] = best["name"] if clear else first_name
    report["dataset"] = dataset
    return Choice(report, runs)


def write_choice(out: Path, choice: Choice) -> None:
    """The report JSON at ``out`` and its derived-file sidecar (generator, dataset, runs)."""
    atomic_write(out, dump_json(choice.report))
    write_derived_sidecar(out, generators=[GENERATOR], dataset=choice.report["dataset"],
                          runs=choice.runs)


def format_choice(report: dict[str, Any], objective: str) -> str:
    """One line per candidate (n, objective, reported means), then the choice."""
    lines = []
    for c in report["candidates"]:
        ms = "  ".join(f"{k}={v:.4f}" for k, v in c["metrics"].items())
        lines.append(f"{c['name']:>10}  n={c['n']}  objective={c['objective']:.4f}  {ms}")
        if "paired" in c:
            p = c["paired"]
            lo, hi = p["interval_95"]["objective"]
            lines.append(f"{'':>10}  vs {report['paired']['against']}: "
                         f"{p['difference']['objective']:+.4f} [{lo:+.4f}, {hi:+.4f}] "
                         f"({p['better']} better, {p['worse']} worse; {p['clusters']} "
                         f"clusters)")
    lines.append(f"chosen: {report['chosen']} (protocol {report['protocol']}, objective mean "
                 f"of {objective})")
    if "adopted" in report:
        lines.append(f"adopted: {report['adopted']} (over {report['paired']['against']} only "
                     "where the paired interval excludes zero)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--candidate", nargs="+", action="append", required=True,
                    metavar=("NAME", "RUN"), help="a name and its fold runs")
    ap.add_argument("--objective", default=DEFAULT_OBJECTIVE,
                    help="comma-separated metrics averaged into the objective")
    ap.add_argument("--protocol", default="answerable", help="denominator (protocol)")
    ap.add_argument("--cluster", choices=("question", "id-prefix"), default=None,
                    help="pair every candidate with the first, resampling questions or the id "
                         "before ':' (a LoCoMo conversation) for the intervals (default: no "
                         "pairing)")
    ap.add_argument("--output", required=True, type=output_file,
                    help="report JSON (never overwritten)")
    a = ap.parse_args(argv)
    out = Path(a.output)
    if out.exists():
        print(f"error: {out} exists; refusing to overwrite", file=sys.stderr)
        return 2
    cands = []
    for c in a.candidate:
        if len(c) < 2:
            ap.error(f"--candidate {c[0]}: give at least one run")
        cands.append((c[0], [Path(x) for x in c[1:]]))
    try:
        choice = choose(cands, a.objective.split(","), a.protocol, a.cluster)
    except (EngramEvalError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_choice(out, choice)
    print(f"{format_choice(choice.report, a.objective)}; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
