#!/usr/bin/env python
"""BEFORE/AFTER behaviour check of a refactor: same inputs, same rows.

Two subcommands::

    python scripts/behaviour_check.py produce --code-root ROOT --out DIR \\
        [--dev PATH] [--dev-limit 40] [--cross-encoder DIR] [--cache-dir DIR] [--fixtures DIR]
        [--run-args '--config BEFORE_DEFAULTS.yaml'] [--locomo-args ...]
    python scripts/behaviour_check.py defaults --before-root B --after-root A --output Y.yaml
    python scripts/behaviour_check.py compare BEFORE_DIR AFTER_DIR [--no-sidecar]
        [--drop-key KEY ...]

``produce`` runs ROOT's own code (each run is a subprocess of ``sys.executable``; the
benchmark scripts put their repository root first on ``sys.path``, and the production
worker does the same by hand), so running it once with the pre-refactor tree and once with
the refactored tree, under the same Python, gives two directories to ``compare``.

What is produced (one file set per combination, named ``<dataset>__<retriever>``):

* ranking runs: datasets ``longmemeval_tiny`` and ``locomo_tiny`` (the fixtures) and
  ``dev40`` (the first ``--dev-limit`` questions of ``--dev``; skipped when the file is
  absent) x retrievers ``hybrid``, ``bm25``, ``flat-bm25``, ``dense`` and ``rerank``
  (= default ``hybrid`` + ``--rerank --reranker-model CROSS_ENCODER``; skipped without
  ``--cross-encoder``). Each run writes ``X.jsonl`` with its ``.summary.json`` and
  ``.metadata.json`` sidecar through ROOT's ``benchmarks/{longmemeval,locomo}/run.py``. A run
  the code refuses (exit status 2, an ``error:`` line, e.g. a retriever that cannot handle
  a layout) writes ``X.refused.json`` (exit status and message, paths replaced by
  placeholders) instead: a refusal is behaviour too, and is compared.
* production: for each ``ROOT/fixtures/production/<name>.json``, the per-question search
  results under the settings recorded by the published run
  ``ROOT/results/production/<name>.json`` (its ``.metadata.json`` manifest), computed by
  calling the production runner's per-case search directly -- so the held-out / frozen
  guard and the ledger are never touched. Written as ``production__<name>.jsonl`` (one row
  per question: accepted ids and confidences, time window, every candidate's trace, gold and
  outcome), ``.summary.json`` (the runner's fixture score) and ``.metadata.json`` (the
  effective settings, model hashes, and whether they match the recorded run; also whether
  the rows equal the published rows -- informative only).

All ranking runs of one side share one fresh embedding/ONNX cache ``DIR/cache`` (or
``--cache-dir``), in a fixed order, so both sides see the same cache states and nothing leaks
from one side to the other. ``DIR/produce.json`` lists every combination, its status
(produced / refused / failed / skipped and why), command and wall time.

What ``compare`` compares, per combination present on either side:

* rows (``.jsonl``): same number of rows, same question order, and each row equal after
  dropping the volatile keys below, re-serialised canonically (sorted keys, no whitespace).
  It also reports whether the rows are byte-identical in their *written* key order once the
  volatile keys are dropped ("raw"), which also catches a change of key order.
* ``.summary.json``: every metric block, count and label, equal after dropping volatile keys.
* ``.metadata.json`` (skip with ``--no-sidecar``): the settings, config, retriever
  description, selection, protocols, model file hashes, package versions, dataset hash and
  the per-run counts (texts encoded, cache hits), after dropping volatile keys.
* ``.refused.json``: exit status and (placeholder-normalised) message.

What is ignored, and why (none of it can differ because of a ranking change that the rest
would not also show):

* timings -- rows: ``timing`` and any ``seconds``/``*_seconds`` key (per-question wall time);
  sidecar: ``wall_seconds``, ``model_seconds``, ``started_at``, ``finished_at``,
  ``created_at``. Key names that merely contain "time" are NOT dropped: ``time_window`` and
  the production trace's ``time`` signal are behaviour.
* hashes of source files and what is derived from them: ``sources`` (and a ``source`` that is
  a map of hashes), ``fingerprint``, ``manifest_fingerprint``, ``source_fingerprint``,
  ``frozen_source``. The refactor moves files, so these change by design.
* ``rows_sha256`` (summary and sidecar): the sha256 of the raw rows file, timings included.
* environment and paths: ``environment``, ``host``/``hostname``, ``command`` (script paths),
  ``path`` (dataset and model locations), ``cache_dir``, ``output``, ``engram_eval_file``
  (where the production worker imported the package from; checked by ``produce`` itself).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RETRIEVERS = ("hybrid", "bm25", "flat-bm25", "dense", "rerank")
DEFAULT_DEV = "/work/shared/data/longmemeval/longmemeval_s_cleaned.dev.json.gz"
PRODUCTION_FIXTURES = ("dev", "holdout", "validation_v2")

# --- volatile keys (see the module docstring) ---------------------------------------------
ROW_DROP = {"timing", "seconds"}
SIDECAR_DROP = {"sources", "fingerprint", "manifest_fingerprint", "source_fingerprint",
                "frozen_source", "rows_sha256", "environment", "host", "hostname", "command",
                "path", "cache_dir", "output", "created_at", "started_at", "finished_at",
                "wall_seconds", "model_seconds", "engram_eval_file"}
SUMMARY_DROP = {"fingerprint", "manifest_fingerprint", "source_fingerprint", "frozen_source",
                "rows_sha256", "sources"}


def strip(obj: Any, drop: set[str]) -> Any:
    """``obj`` without the keys in ``drop`` (at any depth), without keys ending in
    ``_seconds``, and without a ``source`` key whose value is a map (of file hashes)."""
    if isinstance(obj, dict):
        return {k: strip(v, drop) for k, v in obj.items()
                if k not in drop and not k.endswith("_seconds")
                and not (k == "source" and isinstance(v, dict))}
    if isinstance(obj, list):
        return [strip(v, drop) for v in obj]
    return obj


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Key path of the first difference between two JSON values (None when equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}.{k} (only {'after' if k not in a else 'before'})"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None if len(a) == len(b) else f"{path} (length {len(a)} vs {len(b)})"
    if canonical(a) != canonical(b):
        return f"{path or '(top)'}: {canonical(a)[:60]} vs {canonical(b)[:60]}"
    return None


# ===========================================================================================
# produce
# ===========================================================================================
def _placeholders(text: str, root: Path, out: Path) -> str:
    return text.replace(str(out), "<OUT>").replace(str(root), "<ROOT>")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_sources(sidecar: Path, root: Path) -> str | None:
    """The sidecar's source hashes are those of the files under ROOT (proves that ROOT's
    package ran); returns a problem or None."""
    meta = json.loads(sidecar.read_text(encoding="utf-8"))
    for rel, sha in meta.get("sources", {}).items():
        p = root / rel
        if not p.is_file() or _sha256(p) != sha:
            return f"sidecar source {rel} does not match {p}: another engram_eval ran"
    return None


def ranking_jobs(root: Path, fixtures: Path, dev: Path | None, dev_limit: int,
                 cross: Path | None, locomo_args: Sequence[str] = (),
                 run_args: Sequence[str] = ()) -> list[dict[str, Any]]:
    datasets: list[tuple[str, Path, str, list[str]]] = [
        ("longmemeval_tiny", fixtures / "longmemeval_tiny.json", "longmemeval", [*run_args]),
        ("locomo_tiny", fixtures / "locomo_tiny.json", "locomo", [*run_args, *locomo_args])]
    if dev is not None:
        datasets.append((f"dev{dev_limit}", dev, "longmemeval",
                         [*run_args, "--limit", str(dev_limit)]))
    jobs = []
    for name, data, layout, extra in datasets:
        for retr in RETRIEVERS:
            args = ["--retriever", "hybrid" if retr == "rerank" else retr]
            skip = None
            if retr == "rerank":
                if cross is None:
                    skip = "no --cross-encoder given"
                args += ["--rerank", "--reranker-model", str(cross)]
            jobs.append({"name": f"{name}__{retr}", "script": root / "benchmarks" / layout /
                         "run.py", "data": data, "args": [*extra, *args], "skip": skip})
    return jobs


def produce(args: argparse.Namespace) -> int:
    root = Path(args.code_root).resolve()
    out = Path(args.out).resolve()
    if out.exists() and any(out.iterdir()):
        sys.exit(f"produce: {out} exists and is not empty; choose a fresh --out")
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache_dir).resolve() if args.cache_dir else out / "cache"
    if cache.exists() and any(cache.iterdir()):
        sys.exit(f"produce: cache {cache} is not empty; give a fresh --cache-dir")
    fixtures = Path(args.fixtures).resolve() if args.fixtures else root / "fixtures"
    dev = Path(args.dev) if args.dev else None
    dev_note = None
    if dev is not None and not dev.is_file():
        dev_note, dev = f"dev data {dev} absent", None
    cross = Path(args.cross_encoder).resolve() if args.cross_encoder else None
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPATH", None)
    log = []
    t_all = time.time()
    for job in ranking_jobs(root, fixtures, dev, args.dev_limit, cross,
                            args.locomo_args.split() if args.locomo_args else (),
                            args.run_args.split() if args.run_args else ()):
        entry: dict[str, Any] = {"name": job["name"]}
        if job["skip"]:
            entry.update(status="skipped", why=job["skip"])
            log.append(entry)
            print(f"{job['name']:32s} skipped: {job['skip']}", flush=True)
            continue
        target = out / f"{job['name']}.jsonl"
        cmd = [sys.executable, str(job["script"]), str(job["data"]), "--output", str(target),
               "--cache-dir", str(cache), "--no-progress", *job["args"]]
        t0 = time.time()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out)
        entry.update(command=[_placeholders(c, root, out) for c in cmd[1:]],
                     returncode=done.returncode, wall_seconds=round(time.time() - t0, 1))
        err_lines = [ln for ln in done.stderr.splitlines() if ": error: " in ln]
        if done.returncode == 0:
            problem = _check_sources(Path(str(target) + ".metadata.json"), root)
            entry["status"] = "failed" if problem else "produced"
            if problem:
                entry["why"] = problem
        elif done.returncode == 2 and err_lines:
            entry["status"] = "refused"
            lines = done.stderr.strip().splitlines()
            first = next(i for i, ln in enumerate(lines) if ": error: " in ln)
            message = _placeholders("\n".join(lines[first:]), root, out)
            entry["why"] = message.splitlines()[-1]
            for p in (target, Path(str(target) + ".metadata.json")):
                p.unlink(missing_ok=True)
            (out / f"{job['name']}.refused.json").write_text(
                json.dumps({"returncode": done.returncode, "message": message}, indent=2) + "\n")
        else:
            entry.update(status="failed", why=done.stderr.strip()[-2000:])
        (out / "logs").mkdir(exist_ok=True)
        (out / "logs" / f"{job['name']}.stderr").write_text(done.stderr)
        log.append(entry)
        print(f"{job['name']:32s} {entry['status']:9s} {entry['wall_seconds']:7.1f}s"
              + (f"  {entry['why'][:150]}" if entry.get("why") else ""), flush=True)
    if dev_note:
        log.append({"name": f"dev{args.dev_limit}__*", "status": "skipped", "why": dev_note})
        print(f"dev{args.dev_limit}__*: skipped: {dev_note}")
    for name in PRODUCTION_FIXTURES:
        entry = {"name": f"production__{name}"}
        fixture = root / "fixtures" / "production" / f"{name}.json"
        recorded = root / "results" / "production" / f"{name}.json"
        if not fixture.is_file() or not recorded.is_file():
            entry.update(status="skipped", why=f"{fixture} or {recorded} absent")
        else:
            cmd = [sys.executable, str(Path(__file__).resolve()), "_production-worker",
                   "--code-root", str(root), "--fixture", str(fixture), "--recorded",
                   str(recorded), "--output", str(out / f"production__{name}.jsonl"),
                   "--work-dir", str(out / "work" / name)]
            t0 = time.time()
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out)
            (out / "logs").mkdir(exist_ok=True)
            (out / "logs" / f"production__{name}.stderr").write_text(done.stderr + done.stdout)
            entry.update(returncode=done.returncode, wall_seconds=round(time.time() - t0, 1),
                         status="produced" if done.returncode == 0 else "failed")
            if done.returncode:
                entry["why"] = done.stderr.strip()[-2000:]
            else:
                entry["note"] = done.stdout.strip().splitlines()[-1]
        log.append(entry)
        said = str(entry.get("why") or entry.get("note") or "")
        print(f"{entry['name']:32s} {entry['status']:9s} {entry.get('wall_seconds', 0):7.1f}s"
              + (f"  {said[:200]}" if said else ""), flush=True)
    total = round(time.time() - t_all, 1)
    (out / "produce.json").write_text(json.dumps(
        {"code_root": str(root), "python": sys.executable, "dev": str(args.dev),
         "dev_limit": args.dev_limit, "run_args": args.run_args,
         "locomo_args": args.locomo_args, "cross_encoder": str(cross), "cache_dir": str(cache),
         "fixtures": str(fixtures), "wall_seconds": total, "combinations": log},
        indent=2) + "\n")
    failed = [e["name"] for e in log if e["status"] == "failed"]
    print(f"produce: {sum(e['status'] == 'produced' for e in log)} produced, "
          f"{sum(e['status'] == 'refused' for e in log)} refused, "
          f"{sum(e['status'] == 'skipped' for e in log)} skipped, {len(failed)} failed "
          f"in {total}s -> {out}")
    return 1 if failed else 0


_DEFAULTS_CODE = """
import dataclasses, json, sys
sys.path.insert(0, sys.argv[1])
from engram_eval.retrieval import settings
s = settings.RetrievalSettings()
print(json.dumps({"defaults": {f.name: getattr(s, f.name) for f in dataclasses.fields(s)
                               if f.metadata.get("fingerprint")},
                  "legacy": getattr(settings, "LEGACY_VALUES", {})}))
"""


def _defaults_of(root: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _DEFAULTS_CODE, str(root)], capture_output=True,
                          text=True, check=True, cwd=root)
    return json.loads(done.stdout)


def defaults_yaml(args: argparse.Namespace) -> int:
    """A ``--config`` YAML that makes AFTER's code run with BEFORE's retrieval defaults: every
    field BEFORE has, at BEFORE's default; every field only AFTER has, at AFTER's legacy value
    (the value that reproduces a run made before the field existed)."""
    import yaml

    before, after = Path(args.before_root).resolve(), Path(args.after_root).resolve()
    b, a = _defaults_of(before), _defaults_of(after)
    config = dict(b["defaults"])
    added = [k for k in a["defaults"] if k not in config]
    missing = [k for k in added if k not in a["legacy"]]
    if missing:
        sys.exit(f"defaults: {after} has fields with no legacy value: {', '.join(missing)}")
    config.update({k: a["legacy"][k] for k in added})
    out = Path(args.output)
    if out.exists():
        sys.exit(f"defaults: {out} exists; refusing to overwrite")
    out.write_text(f"# retrieval defaults of {before}; fields added since ({', '.join(added) or 'none'})"
                   " at their legacy values\n" + yaml.safe_dump(config, sort_keys=False))
    print(f"defaults: {len(config)} fields ({len(added)} added since) -> {out}")
    return 0


# --- production worker: runs in its own process with ROOT first on sys.path ---------------
def _import_first(candidates: list[str], attr: str) -> Any:
    """``attr`` from the first of ``candidates`` (module names) that imports and has it: a
    refactor may move a module; list its new location first."""
    import importlib

    errors = []
    for mod in candidates:
        try:
            return getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            errors.append(f"{mod}.{attr}: {e}")
    raise ImportError("; ".join(errors))


def production_worker(args: argparse.Namespace) -> int:
    root = Path(args.code_root).resolve()
    sys.path.insert(0, str(root))
    import dataclasses

    import engram_eval

    assert Path(engram_eval.__file__).resolve().is_relative_to(root), engram_eval.__file__
    # Stable public pieces only. If the refactor moves a production module, put its new
    # package first in this list (e.g. ["engram_eval.new.place", "engram_eval.production"]).
    prod = ["engram_eval.production_eval", "engram_eval.production"]
    load_fixture = _import_first([f"{p}.fixture" for p in prod], "load_fixture")
    Engine = _import_first([f"{p}.search" for p in prod], "Engine")
    ProductionSettings = _import_first([f"{p}.settings" for p in prod], "ProductionSettings")
    DEFAULT_CALIBRATION = _import_first([f"{p}.settings" for p in prod], "DEFAULT_CALIBRATION")
    search_case = _import_first([f"{p}.runner" for p in prod], "search_case")
    score = _import_first([f"{p}.runner" for p in prod], "score")

    recorded_doc = json.loads(Path(args.recorded).read_text(encoding="utf-8"))
    sidecar = Path(args.recorded + ".metadata.json")
    recorded = (json.loads(sidecar.read_text(encoding="utf-8"))["manifest"]["settings"]
                if sidecar.is_file() else recorded_doc["settings"])
    if hasattr(ProductionSettings, "from_recorded"):
        # after the layout step: the recorded (older, flat) settings are mapped onto the
        # retrieval settings + gate, and name their calibration (calibration_v1.json) by path
        engine = Engine(ProductionSettings.from_recorded(recorded))
    else:
        names = {f.name for f in dataclasses.fields(ProductionSettings)}
        kwargs = {k: v for k, v in recorded.items() if k in names}
        if kwargs.get("calibration") == DEFAULT_CALIBRATION:
            kwargs["calibration"] = ""  # the packaged calibration (what the run used)
        engine = Engine(ProductionSettings(**kwargs))
    cal_sha = None
    # whether the gate applies the calibration (sources before production's calibrated
    # rerank gate: exactly when the rerank is off)
    applies = (engine.applies_calibration() if hasattr(engine, "applies_calibration")
               else not engine.settings.rerank)
    if applies:
        engine.calibration()  # checked against the model files and settings, as a run does
        cal_sha = _sha256(engine.calibration_path())
    view, gold = load_fixture(args.fixture)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=False)
    rows = []
    for case in view.cases:
        rows.extend(search_case(engine, case, work / f"{case.case_id}.sqlite"))
    summary = score(rows, gold)  # adds gold and outcome to each row
    published = {q["question_id"]: strip(q, ROW_DROP) for q in recorded_doc["questions"]}
    matches_published = all(canonical(strip(r, ROW_DROP)) == canonical(
        published.get(r["question_id"])) for r in rows) and len(rows) == len(published)
    effective_settings = _import_first([f"{p}.runner" for p in prod], "effective_settings")
    effective = effective_settings(engine, root)  # what a run records as its settings
    settings_match = effective == recorded
    out = Path(args.output)
    with out.open("x", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    Path(str(out) + ".summary.json").write_text(json.dumps(
        {"fixture_name": view.name, "heldout": view.heldout, "summary": summary},
        indent=2, ensure_ascii=False) + "\n")
    Path(str(out) + ".metadata.json").write_text(json.dumps(
        {"fixture_sha256": _sha256(Path(args.fixture)),
         "recorded_settings": recorded, "effective_settings": effective,
         "calibration_sha256": cal_sha, "settings_match_recorded": settings_match,
         "models": [m.to_json() for m in engine.models()],
         "rows_match_published": matches_published,
         "engram_eval_file": engram_eval.__file__}, indent=2, ensure_ascii=False) + "\n")
    print(f"{view.name}: {len(rows)} questions; settings match recorded: {settings_match}; "
          f"rows match published: {matches_published}")
    return 0


# ===========================================================================================
# compare
# ===========================================================================================
def _raw_rows(path: Path) -> tuple[list[str], list[Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines, [json.loads(ln) for ln in lines]


def _raw_stripped(line: str, row: Any, drop: set[str]) -> str | None:
    """The row in its written key order and separators, volatile keys dropped; None when the
    line does not round-trip through json (then "raw" cannot be judged)."""
    if json.dumps(row, ensure_ascii=False) != line:
        return None
    return json.dumps(strip(row, drop), ensure_ascii=False)


def compare_rows(a: Path, b: Path, extra: frozenset[str] = frozenset()) -> tuple[bool, str]:
    """Rows equal after dropping the volatile keys and ``extra`` (``--drop-key``)."""
    drop = ROW_DROP | extra
    la, ra = _raw_rows(a)
    lb, rb = _raw_rows(b)
    ids_a = [r.get("question_id") for r in ra]
    ids_b = [r.get("question_id") for r in rb]
    if ids_a != ids_b:
        i = next((i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=False)) if x != y),
                 min(len(ids_a), len(ids_b)))
        return False, f"rows: question order/count differs at row {i} ({len(ids_a)} vs " \
                      f"{len(ids_b)} rows)"
    raw_ok: bool | None = True
    for line_a, row_a, line_b, row_b in zip(la, ra, lb, rb, strict=True):
        sa, sb = strip(row_a, drop), strip(row_b, drop)
        if canonical(sa) != canonical(sb):
            return False, (f"rows: question {row_a.get('question_id')}: "
                           f"{first_difference(sa, sb)}")
        xa, xb = _raw_stripped(line_a, row_a, drop), _raw_stripped(line_b, row_b, drop)
        if xa is None or xb is None:
            raw_ok = None
        elif raw_ok and xa != xb:
            raw_ok, raw_first = False, row_a.get("question_id")
    if raw_ok is False:
        return False, (f"{len(ra)} rows canonically identical, but raw bytes differ (key "
                       f"order or formatting) from question {raw_first}")
    return True, f"{len(ra)} rows, " + ("raw bytes identical" if raw_ok else "raw n/a")


def compare_json(a: Path, b: Path, drop: set[str], what: str) -> tuple[bool, str]:
    da = strip(json.loads(a.read_text(encoding="utf-8")), drop)
    db = strip(json.loads(b.read_text(encoding="utf-8")), drop)
    if canonical(da) != canonical(db):
        return False, f"{what}: {first_difference(da, db)}"
    return True, ""


def combinations(d: Path) -> dict[str, dict[str, Any]]:
    doc = json.loads((d / "produce.json").read_text(encoding="utf-8"))
    return {e["name"]: e for e in doc["combinations"]}


def compare(args: argparse.Namespace) -> int:
    before, after = Path(args.before), Path(args.after)
    ca, cb = combinations(before), combinations(after)
    bad = 0
    for name in list(ca) + [n for n in cb if n not in ca]:
        ea, eb = ca.get(name) or {}, cb.get(name) or {}
        sa, sb = ea.get("status", "absent"), eb.get("status", "absent")
        if sa != sb:
            verdict, detail = "DIFFERENT", f"status {sa} vs {sb}"
        elif sa in ("skipped", "failed"):
            verdict, detail = sa.upper(), (ea.get("why") or "")[:120]
            bad += sa == "failed"
        elif sa == "refused":
            ok, detail = compare_json(before / f"{name}.refused.json",
                                      after / f"{name}.refused.json", set(), "refusal")
            verdict, detail = ("IDENTICAL", "refused on both: " + ea["why"][:120]) if ok \
                else ("DIFFERENT", detail)
        else:
            base = f"{name}.jsonl"
            extra = frozenset(args.drop_key or ())
            ok, detail = compare_rows(before / base, after / base, extra)
            checks = [(".summary.json", SUMMARY_DROP | extra, "summary")]
            if not args.no_sidecar:
                checks.append((".metadata.json", SIDECAR_DROP | extra, "sidecar"))
            for suffix, drop, what in checks:
                if ok:
                    ok, why = compare_json(before / (base + suffix), after / (base + suffix),
                                           drop, what)
                    detail = why or detail + f", {what} identical"
            verdict = "IDENTICAL" if ok else "DIFFERENT"
        bad += verdict == "DIFFERENT"
        print(f"{verdict:9s} {name:32s} {detail}")
    if args.drop_key:
        print(f"compare: keys also dropped on both sides: {', '.join(args.drop_key)}")
    print(f"compare: {'ALL IDENTICAL' if not bad else f'{bad} combination(s) differ or failed'}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    # not the package's ArgumentParser: this script imports no code of its own checkout
    p = argparse.ArgumentParser(description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("produce", help="run every combination with ROOT's code into DIR")
    pr.add_argument("--code-root", required=True, help="repository root whose code runs")
    pr.add_argument("--out", required=True, help="output directory (fresh)")
    pr.add_argument("--dev", default=DEFAULT_DEV, help="LongMemEval dev file (skipped if "
                    "absent; default %(default)s)")
    pr.add_argument("--dev-limit", type=int, default=40, help="first N dev questions (40)")
    pr.add_argument("--cross-encoder", help="small cross-encoder directory for the rerank "
                    "runs (without it they are skipped)")
    pr.add_argument("--cache-dir", help="fresh embedding cache (default OUT/cache)")
    pr.add_argument("--fixtures", help="fixture directory (default ROOT/fixtures)")
    pr.add_argument("--locomo-args", default="",
                    help="extra run arguments for the LoCoMo jobs, e.g. '--protocol locomo' "
                         "where a later default adds a protocol the earlier code lacked (the "
                         "rows must then still match; the sidecar records the selection)")
    pr.add_argument("--run-args", default="",
                    help="extra run arguments for every ranking job, e.g. '--config "
                         "BEFORE.yaml' naming every setting the other side's defaults had, where "
                         "the range between the sides changes defaults on purpose (the rows "
                         "must then match; compare with --no-sidecar, the sidecars record the "
                         "config)")
    d = sub.add_parser("defaults", help="a --config YAML of BEFORE's retrieval defaults for "
                       "AFTER's code (fields added since at their legacy values)")
    d.add_argument("--before-root", required=True)
    d.add_argument("--after-root", required=True)
    d.add_argument("--output", required=True)
    c = sub.add_parser("compare", help="compare two produce directories")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--no-sidecar", action="store_true",
                   help="compare rows and summaries only, not the .metadata.json sidecars")
    c.add_argument("--drop-key", action="append", metavar="KEY",
                   help="a key (at any depth of rows, summaries and sidecars) dropped on both "
                        "sides as well, for an addition the range makes on purpose (e.g. "
                        "gate_features, the traced confidence features of issue 30); "
                        "repeatable; printed")
    w = sub.add_parser("_production-worker")  # internal: one production fixture
    for a in ("--code-root", "--fixture", "--recorded", "--output", "--work-dir"):
        w.add_argument(a, required=True)
    args = p.parse_args(argv)
    return {"produce": produce, "compare": compare, "defaults": defaults_yaml,
            "_production-worker": production_worker}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
