"""What a report shows, gathered from a finished run: :func:`build_report` -> document.

The document (a JSON-able dict) has these parts; :mod:`engram_eval.report.page` renders it.

* ``run`` (and ``against``): what was run, from the sidecar and summary: dataset name and
  sha256, the split part (from the part's file name, as the figures say it,
  :func:`engram_eval.analysis.plots.split_label`) and the ledger label of its frozen
  manifest, the retriever and every recorded setting that differs from the installed
  package's defaults (``RunConfig()``; with ``settings_sources`` where the run records
  them), the models (name, revision, sha256), the package version, the sources fingerprint
  (a run records file hashes, not a commit) and the command.
* ``verify`` (and ``verify_against``): with the dataset, the result of
  :func:`engram_eval.runs.verify.verify` (every check, the verdict); without, "not
  verified".
* ``metrics``: per protocol the run scored, the summary's means overall and per question
  type with n, its random baseline, and per type the random baseline of that type's rows
  computed by :func:`engram_eval.scoring.summary.summarize_rows` (the summary file records
  it overall only). The summary file is the source; a run without one is summarised from
  its rows by the same function, and the page says so.
* ``compare`` (with ``against``): :func:`engram_eval.analysis.compare.compare_runs` with the
  report's run as B and ``against`` as A (delta = run - against), as ``engram-eval compare
  AGAINST RUN`` prints it.
* ``misses`` (and ``misses_against``): :func:`engram_eval.analysis.analyze.analyze_rows` at
  the report's ``k`` (what ``engram-eval analyze --k K`` reports), per class and type.
* ``questions``: :func:`engram_eval.report.questions.question_entries`.
* ``note`` (optional): a line of text the page shows under its title (``--note``).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError, DataError, ProvenanceError
from engram_eval.runs.reader import FinishedRun, read_run

KIND = "engram-eval run report"
DEFAULT_DEPTH = 10
SHOWN_METRICS = ("recall_any@1", "recall_any@3", "recall_any@5", "recall_any@10",
                 "recall_all@5", "recall_all@10", "ndcg_any@5", "ndcg_any@10", "mrr")
#: Config fields that are not settings of the ranking (shown elsewhere, or runtime).
NOT_SETTINGS = frozenset({"protocols", "question_ids", "limit", "dataset_format", "retriever",
                          "settings_sources", "confidence_filter"})


def _question_metrics(k: int) -> list[str]:
    names = ["recall_any@1", f"recall_any@{k}", f"recall_all@{k}", f"ndcg_any@{k}", "mrr"]
    return list(dict.fromkeys(names))


def compare_metrics(k: int, available: Sequence[str]) -> list[str]:
    """The metrics the comparison table shows: compare's headline ones and those at k."""
    from engram_eval.analysis.compare import HEADLINE

    names = list(dict.fromkeys([*HEADLINE, f"recall_any@{k}", f"recall_all@{k}",
                                f"ndcg_any@{k}"]))
    return [n for n in names if n in available]


def build_report(run_path: str | Path | FinishedRun, *,
                 against: str | Path | FinishedRun | None = None,
                 dataset: str | Path | None = None, k: int = 5, protocol: str | None = None,
                 depth: int = DEFAULT_DEPTH, sources_at: str | None = None,
                 against_sources_at: str | None = None, note: str | None = None,
                 n_boot: int = 10000, seed: int = 0, alpha: float = 0.05,
                 cluster: str = "question", turn_chars: int | None = None,
                 gold_overlay: str | Path | None = None) -> dict[str, Any]:
    """The report document of the run at ``run_path`` (module doc; a path, or the run already
    read by :func:`engram_eval.runs.reader.read_run`). ``against``: a second
    run over the same questions (the baseline A of the comparison); ``dataset``: the file
    the run used (verify, question and turn texts); ``k``: the cut-off of hit/miss, flips
    and the miss analysis; ``depth``: sessions listed per question (0: all traced);
    ``turn_chars``: turn texts are cut after this many characters (default
    :data:`engram_eval.report.questions.TURN_CHARS`; 0: never); ``sources_at``: verify's
    ``--sources-at`` for the run, ``against_sources_at`` for ``against`` (default
    ``sources_at``; two runs published by different commits need one each); ``note``: a
    line of text shown under the title (e.g. what the dataset is); ``gold_overlay``: a
    LoCoMo corrections file (with ``dataset``): the page's "Audited labels" block
    (:mod:`engram_eval.report.audited`; a run made with ``--gold-overlay`` shows it from its
    summary without one, and verifies only with it)."""
    from engram_eval.report.questions import TURN_CHARS, question_entries

    if k < 1:
        raise ConfigError("report: --k must be >= 1")
    if depth < 0:
        raise ConfigError("report: --trace-depth must be >= 0")
    if turn_chars is None:
        turn_chars = TURN_CHARS
    if turn_chars < 0:
        raise ConfigError("report: --turn-chars must be >= 0")
    t0 = time.perf_counter()
    run = run_path if isinstance(run_path, FinishedRun) else read_run(run_path)
    other = (against if isinstance(against, FinishedRun) or against is None
             else read_run(against))
    protocol = protocol or run.default_protocol
    if not any(isinstance(r.get("metrics"), dict) and protocol in r["metrics"]
               for r in run.rows):
        raise ConfigError(f"report: no row of {run.path} is scored under protocol "
                          f"{protocol!r}")
    if other is not None:  # refuse incomparable runs before the slow part (verify)
        from engram_eval.analysis.compare import check_comparable

        check_comparable(other, run, protocol)
    doc: dict[str, Any] = {"kind": KIND, "protocol": protocol, "k": k, "depth": depth,
                           "run": describe_run(run), "generator": generator(),
                           "metric_columns": list(SHOWN_METRICS)}
    if note:
        doc["note"] = note
    questions = None
    if dataset is not None:
        questions, doc["dataset_given"] = _load_dataset(dataset, run)
        doc["verify"] = run_verify(run, dataset, questions, sources_at,
                                   _recorded_overlay(run, gold_overlay))
        if other is not None:
            doc["verify_against"] = run_verify(
                other, dataset, questions,
                sources_at if against_sources_at is None else against_sources_at,
                _recorded_overlay(other, gold_overlay))
    else:
        doc["dataset_given"] = None
        doc["verify"] = not_verified()
        if other is not None:
            doc["verify_against"] = not_verified()
    doc["metrics"] = metrics_tables(run)
    flips = None
    rep = None
    settings: dict[str, Any] = {"protocol": protocol, "n_boot": n_boot, "seed": seed, "alpha": alpha,
                "cluster": cluster}
    if other is not None:
        from engram_eval.analysis.compare import compare_runs

        doc["against"] = describe_run(other)
        rep = compare_runs(other, run, **settings)
        shown = compare_metrics(k, rep["metrics"])
        doc["compare"] = compare_view(rep, shown)
        flips = rep["flips"].get(f"recall_all@{k}")
    from engram_eval.report.audited import audited_view, overlay_for_report

    block = overlay_for_report(run, gold_overlay, dataset,
                               list(questions.values()) if questions else None, protocol)
    if block is not None:
        doc["audited"] = audited_view(run, other, block, protocol, k, rep, settings)
    doc["misses"], misses = miss_analysis(run, protocol, k)
    misses_against = None
    if other is not None:
        doc["misses_against"], misses_against = miss_analysis(other, protocol, k)
    doc["questions"] = question_entries(
        run.rows, protocol=protocol, k=k, depth=depth, questions=questions, misses=misses,
        against_rows=other.rows if other is not None else None,
        misses_against=misses_against, flips=flips, metric_names=_question_metrics(k),
        turn_chars=turn_chars)
    doc["types"] = sorted({str(r["question_type"]) for r in run.rows})
    doc["build_seconds"] = round(time.perf_counter() - t0, 3)
    return doc


# -- header ---------------------------------------------------------------------------------------
def describe_run(run: FinishedRun) -> dict[str, Any]:
    """What was run (module doc), from the sidecar (when present) and the summary."""
    from engram_eval.analysis.plots import split_label
    from engram_eval.io import sha256_json

    meta = run.sidecar or {}
    ds, cfg = _obj(meta, "dataset"), _obj(meta, "config")
    frozen = meta.get("frozen_source") or (run.summary or {}).get("frozen_source")
    sources = _obj(meta, "sources")
    runs = meta.get("runs") if isinstance(meta.get("runs"), list) else []
    last = runs[-1] if runs and isinstance(runs[-1], dict) else {}
    packages, sel = _obj(meta, "packages"), _obj(meta, "selection")
    models = []
    for m in meta.get("models") or []:
        if isinstance(m, dict):
            models.append({"role": m.get("role"), "name": m.get("name"),
                           "revision": m.get("revision"), "source": m.get("source"),
                           "sha256": m.get("sha256")})
    return {
        "path": str(run.path), "file": run.path.name, "rows_sha256": run.rows_sha256,
        "fingerprint": run.fingerprint, "retriever": run.retriever, "n_rows": len(run.rows),
        "has_sidecar": run.sidecar is not None, "has_summary": run.summary is not None,
        "dataset": {"name": run.dataset_name, "sha256": run.dataset_sha256,
                    "format": meta.get("dataset_format"), "size": ds.get("size")},
        "split": split_label(run.dataset_name),
        "ledger": _ledger(frozen),
        "settings": settings_diff(cfg) if cfg else None,
        "settings_sources": cfg.get("settings_sources") or None,
        "models": models,
        "version": packages.get("engram-eval"),
        "packages": packages,
        "sources": {"n": len(sources), "fingerprint": sha256_json(sources)} if sources
        else None,
        "protocols": meta.get("protocols") or sorted(
            {p for r in run.rows for p in (r.get("metrics") or {})}),
        "selection": {"n": sel.get("n"), "limit": sel.get("limit"),
                      "question_ids": len(sel.get("question_ids") or [])} if sel else None,
        "created_at": meta.get("created_at"),
        "command": last.get("command"), "wall_seconds": last.get("wall_seconds"),
        "system": system_card(meta),
        "cost": run_cost(run),
    }


def system_card(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """A system from outside the package as its sidecar records it (entry, distribution and
    version or URL, how many files were hashed and the hash of their list, its settings, the
    ids it saw); None for the package's own retrievers."""
    from engram_eval.io import sha256_json

    described = _obj(meta, "retriever")
    system, ids = _obj(described, "system"), _obj(described, "ids")
    if not system:
        return None
    files = _obj(system, "files_sha256")
    return {"entry": system.get("entry"), "distribution": system.get("distribution"),
            "version": system.get("version"), "url": system.get("url"),
            "server": system.get("server"), "n_files": len(files),
            "files_fingerprint": sha256_json(files) if files else None,
            "settings": system.get("settings"), "settings_sha256": system.get("settings_sha256"),
            "ids": ids.get("label"), "id_salt": ids.get("id_salt"), "id_seed": ids.get("id_seed")}


def run_cost(run: FinishedRun) -> dict[str, Any]:
    """The run's per-question cost: its summary's ``cost``, or for a run whose summary
    predates it, the same computed from its rows' ``timing``
    (:func:`engram_eval.scoring.summary.cost_summary`)."""
    from engram_eval.scoring.summary import cost_summary

    cost = (run.summary or {}).get("cost")
    return cost if isinstance(cost, dict) else cost_summary(run.rows)


def _obj(meta: Mapping[str, Any], key: str) -> dict[str, Any]:
    v = meta.get(key)
    return v if isinstance(v, dict) else {}


def _ledger(frozen: Any) -> dict[str, Any] | None:
    if not isinstance(frozen, dict):
        return None
    match = _obj(frozen, "heldout_match")
    return {"label": frozen.get("label"), "manifest": frozen.get("path"),
            "manifest_fingerprint": frozen.get("manifest_fingerprint"),
            "source_fingerprint": frozen.get("source_fingerprint"),
            "frozen_at": frozen.get("created_at"), "heldout_part": match.get("name")}


def settings_diff(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every recorded fingerprinted setting whose value differs from the installed
    package's default (``RunConfig()``), with where it came from when the run records it."""
    from engram_eval.runs.config import RunConfig

    defaults = RunConfig().to_json()
    sources = _obj(config, "settings_sources")
    out = []
    for key, value in config.items():
        if key in NOT_SETTINGS:
            continue
        default = defaults.get(key, "(not a setting of the installed package)")
        if value != default:
            out.append({"setting": key, "value": value, "default": default,
                        "source": sources.get(key)})
    return out


def generator() -> dict[str, Any]:
    """The installed package version and, in a git checkout, its commit (read-only git)."""
    from importlib.metadata import PackageNotFoundError, version

    from engram_eval.io import package_root

    try:
        v: str | None = version("engram-eval")
    except PackageNotFoundError:  # pragma: no cover - an uninstalled checkout
        v = None
    import os

    commit = dirty = None
    root = package_root()
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # status never rewrites the index
    if (root / ".git").exists():
        try:
            done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                                  capture_output=True, text=True, timeout=10, check=False,
                                  env=env)
            if done.returncode == 0:
                commit = done.stdout.strip()
                st = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                     "--untracked-files=no", "--", "engram_eval"],
                                    capture_output=True, text=True, timeout=10, check=False,
                                    env=env)
                dirty = bool(st.stdout.strip()) if st.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            commit = None
    return {"module": "engram_eval/report", "version": v, "commit": commit,
            "commit_dirty": dirty}


# -- verify ---------------------------------------------------------------------------------------
def _load_dataset(dataset: str | Path, run: FinishedRun) -> tuple[dict[str, Any] | None,
                                                                  dict[str, Any]]:
    """The dataset's questions by id when it is the file the run used (same sha256),
    else None (its texts would not be the run's)."""
    from engram_eval.data.datasets import load_questions
    from engram_eval.io import sha256_file

    digest = sha256_file(dataset)
    given = {"path": str(dataset), "sha256": digest, "matches": digest == run.dataset_sha256}
    if not given["matches"]:
        return None, given
    fmt = (run.sidecar or {}).get("dataset_format") or "auto"
    _, qs = load_questions(dataset, fmt)
    return {q.question_id: q for q in qs}, given


def _recorded_overlay(run: FinishedRun, path: str | Path | None) -> str | Path | None:
    """``path`` for a run that recorded a gold overlay (verify checks it), else None."""
    recorded = ((run.sidecar or {}).get("selection") or {}).get("gold_overlay")
    return path if recorded is not None else None


def run_verify(run: FinishedRun, dataset: str | Path, questions: Mapping[str, Any] | None,
               sources_at: str | None, gold_overlay: str | Path | None = None
               ) -> dict[str, Any]:
    """``verify RUN --dataset DATA [--sources-at C] [--gold-overlay F]``: every check and
    the verdict."""
    from engram_eval.runs.verify import verify

    rep = verify(run.path, dataset, sources_at=sources_at,
                 questions=questions if questions else None, gold_overlay=gold_overlay)
    return {"ran": True, "verified": rep.verified, "verdict": rep.verdict(),
            "checks": [list(c) for c in rep.checks], "dataset": str(dataset),
            "sources_at": sources_at}


def not_verified() -> dict[str, Any]:
    return {"ran": False, "verified": False,
            "verdict": "not verified (no --dataset given: verify needs the dataset file to "
                       "re-hash it and re-derive the gold)", "checks": []}


# -- metrics --------------------------------------------------------------------------------------
def metrics_tables(run: FinishedRun) -> dict[str, Any]:
    """Per protocol: the summary's means (overall, per type), random baselines (module
    doc)."""
    from engram_eval.scoring.summary import DENOMINATORS, summarize_rows

    protocols = list((run.sidecar or {}).get("protocols") or []) or sorted(
        {p for r in run.rows for p in (r.get("metrics") or {})})
    summary = run.summary
    source = "summary"
    if not summary or not isinstance(summary.get("protocols"), dict):
        summary = summarize_rows(run.rows, protocols)
        source = "rows"
    out: dict[str, Any] = {"source": source, "protocols": {}}
    for p, s in summary["protocols"].items():
        by_type = {}
        for t, v in sorted(s.get("by_type", {}).items()):
            rows_t = [r for r in run.rows if r["question_type"] == t]
            rb = summarize_rows(rows_t, [p])["protocols"][p].get("random_baseline", {})
            by_type[t] = {"n": v["n"], "metrics": v["metrics"], "random_baseline": rb}
        out["protocols"][p] = {
            "n": s["n"], "n_skipped": s.get("n_skipped", 0),
            "denominator": s.get("denominator", DENOMINATORS.get(p, p)),
            "metrics": s["metrics"], "random_baseline": s.get("random_baseline", {}),
            "by_type": by_type}
    for key in ("temporal_windows", "unparsable_dates"):
        if summary.get(key):
            out[key] = summary[key]
    return out


# -- compare and misses ---------------------------------------------------------------------------
def compare_view(rep: Mapping[str, Any], shown: Sequence[str]) -> dict[str, Any]:
    """The parts of compare's report the page shows (its numbers unchanged)."""
    from engram_eval.analysis.compare import format_report

    return {"protocol": rep["protocol"], "direction": rep["direction"], "n": rep["n"],
            "a": rep["a"], "b": rep["b"], "settings": rep["settings"], "metrics": list(shown),
            "groups": {g: {**{k: v for k, v in gv.items() if k != "metrics"},
                           "metrics": {m: gv["metrics"][m] for m in shown}}
                       for g, gv in rep["groups"].items()},
            "flips": {m: rep["flips"][m] for m in shown if m in rep["flips"]},
            "segment_consistency": {
                "segments": rep["segment_consistency"]["segments"],
                "by_metric": {m: rep["segment_consistency"]["by_metric"][m] for m in shown}},
            "verdict": rep["verdict"], "text": format_report(rep, shown)}


def miss_analysis(run: FinishedRun, protocol: str, k: int
                  ) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """``analyze --k K`` on the run (the window as ``analyze`` takes it: the run's
    ``rerank_candidates``, else 35): the report without its question list, and the missed
    gold sessions per question id. A run whose rows cannot be analysed (no session traces)
    gives ``{"error": why}``."""
    from engram_eval.analysis.analyze import DEFAULT_WINDOW, analyze_rows, sidecar_window

    side = sidecar_window(run.sidecar)
    window = side if side is not None else DEFAULT_WINDOW
    try:
        rep = analyze_rows(run.rows, k=k, protocol=protocol, window=window, source=run.path)
    except (DataError, ConfigError, ProvenanceError) as e:
        return {"error": str(e)}, {}
    per_q = {q["question_id"]: q["missed"] for q in rep["questions"]}
    rep = {key: v for key, v in rep.items() if key != "questions"}
    rep["window_source"] = ("sidecar rerank_candidates" if side is not None
                            else f"default {DEFAULT_WINDOW}")
    return rep, per_q
