"""``verify``: recompute and re-check everything a published run claims.

Every check is reported as ``ok``, ``FAIL`` or ``not checked``. A result is *verified* only
when every check ran and passed, which needs ``--dataset``: the dataset is re-hashed and every
row's gold re-derived from it. Without it the gold stored in the rows is trusted, and the
report says so. The recorded source hashes are compared with the installed package, or
(``--sources-at COMMIT``) with the files committed at the revision that published the run, so
that later code changes do not make an old result unverifiable.

The run is read through :mod:`engram_eval.runs.reader`, one step at a time, so that each
problem becomes a failed check rather than an exception.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_eval.data.datasets import load_questions
from engram_eval.errors import ProvenanceError
from engram_eval.io import sha256_file
from engram_eval.provenance.sidecar import (
    fingerprint_of,
    git_source_hashes,
    source_hashes,
    summary_path,
)
from engram_eval.runs.reader import read_metadata, read_rows, read_summary
from engram_eval.runs.rows import order_rows
from engram_eval.scoring import protocols as P
from engram_eval.scoring.summary import summarize_rows

OK, FAIL, NOT_CHECKED = "ok", "FAIL", "not checked"


def floats_equal(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


@dataclass
class VerifyReport:
    """Checks as ``(name, status, detail)``; status is ``ok``, ``FAIL`` or ``not checked``."""

    checks: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks.append((name, OK if ok else FAIL, detail))

    def skip(self, name: str, why: str) -> None:
        self.checks.append((name, NOT_CHECKED, why))

    @property
    def ok(self) -> bool:
        """No check failed (some may not have been run)."""
        return all(status != FAIL for _, status, _ in self.checks)

    @property
    def not_checked(self) -> list[str]:
        return [name for name, status, _ in self.checks if status == NOT_CHECKED]

    @property
    def verified(self) -> bool:
        """Every check ran and passed (the dataset was re-hashed and the gold re-derived)."""
        return self.ok and not self.not_checked and bool(self.checks)

    def format(self) -> str:
        return "\n".join(f"[{status}] {n}" + (f": {d}" if d else "")
                         for n, status, d in self.checks)

    def verdict(self) -> str:
        if not self.ok:
            return "NOT VERIFIED (a check failed)"
        if self.not_checked:
            return "NOT VERIFIED (nothing failed, but not checked: " + \
                ", ".join(self.not_checked) + ")"
        return "VERIFIED"

    @property
    def exit_code(self) -> int:
        """0 verified, 1 a check failed, 3 nothing failed but something was not checked."""
        return 0 if self.verified else (1 if not self.ok else 3)


def _cmp_metrics(stored: Any, fresh: Any) -> list[str]:
    if stored is None or fresh is None:
        return [] if stored is None and fresh is None else ["null vs value"]
    bad = []
    for k in sorted(set(stored) | set(fresh)):
        if k not in stored or k not in fresh or not floats_equal(stored[k], fresh[k]):
            bad.append(f"{k}: stored {stored.get(k)} recomputed {fresh.get(k)}")
    return bad


def _cmp_summary(stored: Any, fresh: Any, path: str = "") -> list[str]:
    if isinstance(stored, dict) and isinstance(fresh, dict):
        out = []
        for k in sorted(set(stored) | set(fresh)):
            if k not in stored or k not in fresh:
                out.append(f"{path}.{k}: present on one side only")
            else:
                out.extend(_cmp_summary(stored[k], fresh[k], f"{path}.{k}"))
        return out
    if isinstance(stored, (int, float)) and isinstance(fresh, (int, float)):
        return [] if floats_equal(float(stored), float(fresh)) else [f"{path}: {stored} vs {fresh}"]
    return [] if stored == fresh else [f"{path}: {stored!r} vs {fresh!r}"]


def _short_list(items: Sequence[str]) -> str:
    return "; ".join(items[:5]) + (f" (+{len(items) - 5} more)" if len(items) > 5 else "")


DATASET_HASH = "dataset sha256"
GOLD = "gold re-derived from the dataset"
ROWS_HASH = "rows sha256 matches the summary and sidecar"


def verify(result: str | Path, dataset: str | Path | None = None, *,
           sources_at: str | None = None, repo: str | Path | None = None) -> VerifyReport:
    """Recompute and re-check everything a published run claims (see the module docstring).

    The recorded source hashes are compared with the installed package, or with the files
    committed at git revision ``sources_at`` (in ``repo``, default the checkout holding the
    package) for a run published before later code changes."""
    result = Path(result)
    rep = VerifyReport()
    try:
        meta = read_metadata(result)
        rep.add("sidecar schema", True)
    except ProvenanceError as e:
        rep.add("sidecar schema", False, str(e))
        return rep
    fp = fingerprint_of(meta)
    rep.add("fingerprint", fp == meta["fingerprint"],
            "" if fp == meta["fingerprint"] else f"recorded {meta['fingerprint'][:16]}…, "
            f"recomputed from the sidecar fields {fp[:16]}…")
    ids = meta["selection"]["ids"]
    protocols = meta["protocols"]
    try:
        scan = read_rows(result, allowed_ids=ids)
        rows = scan.rows
        got = {r["question_id"] for r in rows}
        missing = [i for i in ids if i not in got]
        rep.add("rows: every selected question exactly once", not missing,
                f"{len(missing)} missing, e.g. {missing[:3]}" if missing else f"{len(rows)} rows")
    except ProvenanceError as e:
        rep.add("rows: every selected question exactly once", False, str(e))
        return rep
    spath = summary_path(result)
    stored: dict[str, Any] | None = None
    try:
        stored = read_summary(result)
    except ProvenanceError as e:
        rep.add("summary readable", False, str(e))
    _check_rows_hash(rep, scan.sha256, stored, meta)
    questions: dict[str, Any] = {}
    if dataset is not None:
        digest = sha256_file(dataset)
        same = digest == meta["dataset"]["sha256"]
        rep.add(DATASET_HASH, same, "" if same else
                f"{dataset} has {digest[:16]}…, the run used {meta['dataset']['sha256'][:16]}…")
        if same:
            _, qs = load_questions(dataset, meta["dataset_format"])
            questions = {q.question_id: q for q in qs}
        else:
            rep.skip(GOLD, "the dataset given is not the one the run used")
    else:
        rep.skip(DATASET_HASH, "no --dataset given")
        rep.skip(GOLD, "no --dataset given; the gold stored in the rows was trusted")
    bad_gold: list[str] = []
    bad_rows: list[str] = []
    for r in rows:
        q = questions.get(r["question_id"])
        entries = r.get("haystack_entries") or {}
        if q is not None:
            if set(r["ranked_session_ids"]) != set(q.session_ids):
                bad_gold.append(f"{r['question_id']}: ranking does not cover the corpus")
            if entries != P.entry_counts(q):
                bad_gold.append(f"{r['question_id']}: haystack_entries differs from the "
                                "dataset")
        for p in protocols:
            gold = r.get("gold", {}).get(p)
            if q is not None:
                g = P.gold_for(q, p)
                expect = list(g) if g is not None else None
                if expect != gold:
                    bad_gold.append(f"{r['question_id']}: gold[{p}] differs from the dataset")
            try:
                fresh = None if gold is None else P.metrics_for_gold(
                    p, gold, r["ranked_session_ids"], entries)
            except (ValueError, TypeError) as e:
                bad_rows.append(f"{r['question_id']}: metrics[{p}] cannot be recomputed: {e}")
                continue
            for b in _cmp_metrics(r["metrics"].get(p), fresh):
                bad_rows.append(f"{r['question_id']}: metrics[{p}] {b}")
    if questions:
        rep.add(GOLD, not bad_gold, _short_list(bad_gold))
    rep.add("per-question metrics recomputed", not bad_rows, _short_list(bad_rows))
    if stored is not None:
        fresh_summary = summarize_rows(order_rows(rows, ids), protocols)
        diffs = _cmp_summary(stored.get("protocols"), fresh_summary["protocols"], "protocols")
        if stored.get("temporal_windows") != fresh_summary.get("temporal_windows"):
            diffs.append(f"temporal_windows {stored.get('temporal_windows')!r} vs recomputed "
                         f"{fresh_summary.get('temporal_windows')!r}")
        if stored.get("fingerprint") != meta["fingerprint"]:
            diffs.append("summary fingerprint differs from the sidecar's")
        for key, want in (("dataset", meta["dataset"]["name"]),
                          ("dataset_sha256", meta["dataset"]["sha256"]),
                          ("retriever", meta["config"]["retriever"]), ("n_questions", len(ids))):
            if stored.get(key) != want:
                diffs.append(f"summary {key} {stored.get(key)!r} differs from the sidecar's "
                             f"{want!r}")
        rep.add("summary recomputed from rows", not diffs, "; ".join(diffs[:5]))
    elif not spath.exists():
        rep.add("summary recomputed from rows", False, f"{spath} is missing")
    _check_sources(rep, meta["sources"], sources_at, repo)
    return rep


SOURCES_INSTALLED = "source hashes match the installed package"
SOURCES_AT_HINT = " (a run published at an earlier commit: --sources-at COMMIT)"


def _check_sources(rep: VerifyReport, recorded: dict[str, str], sources_at: str | None,
                   repo: str | Path | None) -> None:
    """Recorded source hashes against the installed package or, with ``sources_at``, against
    the files committed at that git revision (for a run published before later changes)."""
    if sources_at is None:
        name = SOURCES_INSTALLED
        try:
            current: dict[str, str | None] = dict(source_hashes(list(recorded)))
        except ProvenanceError as e:
            rep.add(name, False, f"{e}{SOURCES_AT_HINT}")
            return
    else:
        try:
            commit, current = git_source_hashes(list(recorded), sources_at, repo)
        except ProvenanceError as e:
            rep.add(f"source hashes match git {sources_at}", False, str(e))
            return
        name = f"source hashes match git {sources_at} ({commit[:12]})"
    absent = [k for k in recorded if current.get(k) is None]
    changed = [k for k, v in recorded.items() if k not in absent and current.get(k) != v]
    detail = "; ".join(part for part in (
        ("differ: " + ", ".join(changed)) if changed else "",
        ("absent: " + ", ".join(absent)) if absent else "") if part)
    if detail and sources_at is None:
        detail += SOURCES_AT_HINT
    rep.add(name, not detail, detail)


def _check_rows_hash(rep: VerifyReport, digest: str, stored: dict[str, Any] | None,
                     meta: dict[str, Any]) -> None:
    """The rows bytes must hash to what the summary and the sidecar's last finished run
    recorded (an edited row is caught even when its metrics were edited to match)."""
    recorded = [r["rows_sha256"] for r in meta.get("runs", []) if r.get("rows_sha256")]
    in_summary = (stored or {}).get("rows_sha256")
    if not recorded and not in_summary:
        rep.skip(ROWS_HASH, "no rows hash recorded (result written before rows hashes)")
        return
    problems = []
    if not recorded:
        problems.append("the sidecar's runs list records no rows hash")
    elif recorded[-1] != digest:
        problems.append(f"rows hash {digest[:16]}… differs from the sidecar's "
                        f"{recorded[-1][:16]}…")
    if stored is None:
        pass  # a missing summary is its own failed check
    elif not in_summary:
        problems.append("the summary records no rows hash")
    elif in_summary != digest:
        problems.append(f"rows hash {digest[:16]}… differs from the summary's "
                        f"{in_summary[:16]}…")
    rep.add(ROWS_HASH, not problems, "; ".join(problems))
