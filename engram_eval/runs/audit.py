"""Auditing and neutral scoring: ``verify`` a published run, ``score`` any system's
rankings on identical definitions, ``export`` rankings without conversation text, and
``compress`` a finished result into ``x.jsonl.gz`` (sidecar and summary renamed with it).

``verify`` reports every check as ``ok``, ``FAIL`` or ``not checked``. A result is
*verified* only when every check ran and passed, which needs ``--dataset``: the dataset is
re-hashed and every row's gold re-derived from it. Without it the gold stored in the rows is
trusted, and the report says so. The recorded source hashes are compared with the
installed package, or (``--sources-at COMMIT``) with the files committed at the revision
that published the run, so that later code changes do not make an old result unverifiable.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import open_text
from engram_eval.data.datasets import load_questions
from engram_eval.errors import DataError, ProvenanceError
from engram_eval.io import dump_json, exclusive_write, sha256_file
from engram_eval.provenance.sidecar import (
    fingerprint_of,
    git_source_hashes,
    read_sidecar,
    sidecar_path,
    source_hashes,
    summary_path,
)
from engram_eval.runs.rows import open_rows, order_rows, read_rows_bytes, scan_rows
from engram_eval.scoring import protocols as P
from engram_eval.scoring.protocols import default_protocols
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
        meta = read_sidecar(result)
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
        scan = scan_rows(result, allowed_ids=ids)
        if scan.torn_bytes:
            raise ProvenanceError(f"{result}: last line is torn ({scan.torn_bytes} bytes)")
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
    if spath.exists():
        try:
            stored = json.loads(spath.read_text(encoding="utf-8"))
        except ValueError as e:
            rep.add("summary readable", False, f"{spath}: {e}")
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


# -- neutral scoring ----------------------------------------------------------------------
def read_rankings(path: str | Path, known: Collection[str] | None = None
                  ) -> dict[str, list[str]]:
    """Parse ``{question_id, ranked_session_ids}`` lines; with ``known``, a question id
    outside it is an error naming its line."""
    out: dict[str, list[str]] = {}
    with open_text(path) as f:  # plain or gzipped
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise DataError(path, f"line {n}", "(json)", f"not valid JSON: {e}") from None
            if not isinstance(obj, dict):
                raise DataError(path, f"line {n}", "(row)", "must be a JSON object")
            qid = obj.get("question_id")
            ranked = obj.get("ranked_session_ids")
            if not isinstance(qid, str):
                raise DataError(path, f"line {n}", "question_id", "missing or not a string")
            if not isinstance(ranked, list) or not all(isinstance(x, str) for x in ranked):
                raise DataError(path, f"line {n} (question_id={qid})", "ranked_session_ids",
                                "missing or not a list of strings")
            if known is not None and qid not in known:
                raise DataError(path, f"line {n} (question_id={qid})", "question_id",
                                "not a question of the dataset")
            if qid in out:
                raise DataError(path, f"line {n} (question_id={qid})", "question_id",
                                "duplicate question id")
            if len(set(ranked)) != len(ranked):
                raise DataError(path, f"line {n} (question_id={qid})", "ranked_session_ids",
                                "repeats a session id")
            out[qid] = ranked
    return out


def score_rankings(rankings_path: str | Path, dataset: str | Path,
                   protocols: Sequence[str] | None = None, *, strict: bool = False
                   ) -> tuple[dict[str, Any], dict[str, int]]:
    """Score ``{question_id, ranked_session_ids}`` lines against a dataset.

    A question of the dataset with no ranking scores as an empty ranking (0 on every
    recall, 1 on recall_all only for no-gold questions) and is counted as ``missing``;
    with ``strict`` it is an error. Rankings for unknown question ids are always an error.
    """
    fmt, questions = load_questions(dataset)
    protocols = list(protocols or default_protocols(fmt))
    known = {q.question_id for q in questions}
    ranks = read_rankings(rankings_path, known)  # unknown question ids raise, naming the line
    missing = [q.question_id for q in questions if q.question_id not in ranks]
    if missing and strict:
        raise DataError(rankings_path, f"question_id={missing[0]}", "question_id",
                        f"no ranking for {len(missing)} question(s) of the dataset")
    rows = []
    foreign = 0
    for q in questions:
        ranked = ranks.get(q.question_id, [])
        foreign += len(set(ranked) - set(q.session_ids))
        rows.append({"question_id": q.question_id, "question_type": q.question_type,
                     "ranked_session_ids": ranked,
                     "gold": {p: (list(g) if (g := P.gold_for(q, p)) is not None else None)
                              for p in protocols},
                     "metrics": {p: P.score_question(q, ranked, p) for p in protocols}})
    summary = summarize_rows(rows, protocols)
    counts = {"questions": len(questions), "rankings": len(ranks), "missing": len(missing),
              "session_ids_not_in_corpus": foreign}
    return summary, counts


def side_by_side(summary: dict[str, Any], metric_names: Sequence[str]) -> str:
    protos = list(summary["protocols"])
    head = f"{'metric':<16}" + "".join(
        f"{p + ' (n=' + str(summary['protocols'][p]['n']) + ')':>22}" for p in protos)
    lines = [head]
    for m in metric_names:
        lines.append(f"{m:<16}" + "".join(
            f"{summary['protocols'][p]['metrics'].get(m, float('nan')):>22.4f}" for p in protos))
    return "\n".join(lines)


# -- exports ------------------------------------------------------------------------------
def export_public(result: str | Path, out: str | Path) -> int:
    """Ids and scores only (no conversation text, no traces); refuses to overwrite."""
    meta = read_sidecar(result)
    rows = scan_rows(result, allowed_ids=meta["selection"]["ids"]).rows
    lines = [json.dumps({"question_id": r["question_id"], "question_type": r["question_type"],
                         "ranked_session_ids": r["ranked_session_ids"], "scores": r["scores"]},
                        ensure_ascii=False) for r in rows]
    exclusive_write(out, "".join(line + "\n" for line in lines))
    return len(lines)


def export_official_log(result: str | Path, out: str | Path, dataset: str | Path) -> int:
    """A retrieval log in the LongMemEval reference layout (``run_retrieval.py`` output), read
    by the reference ``print_retrieval_metrics.py`` as is.

    One JSON object per question (``_abs`` ones included, as the reference writes them), with
    ``retrieval_results.ranked_items[].corpus_id`` and ``metrics.session`` holding *every*
    metric (``recall_any@k``, ``recall_all@k``, ``ndcg_any@k`` for k in 1, 3, 5, 10, 30, 50)
    computed with the reference rule (:func:`~engram_eval.scoring.metrics.reference_entry_metrics`
    on :func:`~engram_eval.scoring.protocols.reference_gold`), also for questions with no gold (0, 1,
    0). Ids follow the reference indexer: an answer session without a user ``has_answer``
    turn is relabelled ``answer`` -> ``noans``, and a session id listed ``n`` times in the
    haystack is listed ``n`` times (adjacent, same score). The printer's means over the
    non-``_abs`` questions are therefore exactly this package's ``official`` summary."""
    meta = read_sidecar(result)
    rows = scan_rows(result, allowed_ids=meta["selection"]["ids"]).rows
    _, qs = load_questions(dataset, meta["dataset_format"])
    by_id = {q.question_id: q for q in qs}
    lines = []
    for r in rows:
        q = by_id.get(r["question_id"])
        if q is None:
            raise DataError(dataset, f"question_id={r['question_id']}", "question_id",
                            f"question of {result} is not in the dataset")
        sess = {s.session_id: s for s in q.sessions}
        entries = P.entry_counts(q)
        gold = P.reference_gold(q)
        ranking = r["ranked_session_ids"]
        metrics = P.metrics_for_gold("official", gold, ranking, entries)
        items: list[dict[str, Any]] = []
        for sid, sc in zip(ranking, r["scores"], strict=True):
            cid = P.reference_corpus_id(sess[sid])
            items.extend({"corpus_id": cid, "score": sc} for _ in range(entries.get(sid, 1)))
        session = {k: v for k, v in metrics.items()
                   if k.split("@")[0] in ("recall_any", "recall_all", "ndcg_any")}
        lines.append(json.dumps({
            "question_id": q.question_id, "question_type": q.question_type,
            "question": q.question, "answer": q.answer, "question_date": q.question_date,
            "answer_session_ids": list(q.answer_session_ids),
            "retrieval_results": {
                "query": q.question,
                "ranked_items": items,
                "metrics": {"session": session, "turn": {}},
            }}, ensure_ascii=False))
    exclusive_write(out, "".join(line + "\n" for line in lines))
    return len(lines)


# -- compression ----------------------------------------------------------------------------
def compress_result(result: str | Path) -> Path:
    """Write ``RESULT.gz`` (gzip, mtime 0, so the bytes are deterministic) with its sidecar
    ``RESULT.gz.metadata.json`` and summary ``RESULT.gz.summary.json`` (copied unchanged: the
    rows hash is over the uncompressed bytes), verify the new file, and only then remove the
    uncompressed result, sidecar and summary. Refuses to overwrite; on a failed verification
    the new files are removed and the original kept."""
    src = Path(result)
    dst = Path(str(src) + ".gz")
    if src.name.endswith(".gz"):
        raise ProvenanceError(f"{src} already ends in .gz")
    for p in (src, sidecar_path(src), summary_path(src)):
        if not p.is_file():
            raise ProvenanceError(f"{p} is missing; compress needs the result, its sidecar and "
                                  "its summary")
    with open_rows(src) as f:
        head = f.read(2)
    if head == b"\x1f\x8b":
        raise ProvenanceError(f"{src} is already gzip-compressed")
    before = verify(src)
    if not before.ok:
        raise ProvenanceError(f"{src} does not verify; refusing to compress it:\n"
                              + before.format())
    raw = read_rows_bytes(src)
    data = gzip.compress(raw, compresslevel=9, mtime=0)
    created: list[Path] = []
    try:
        for path, content in ((dst, data),
                              (sidecar_path(dst), sidecar_path(src).read_bytes()),
                              (summary_path(dst), summary_path(src).read_bytes())):
            exclusive_write(path, content)
            created.append(path)
        after = verify(dst)
        if not after.ok or after.checks != before.checks:
            raise ProvenanceError(f"{dst} does not verify like {src}:\n" + after.format())
    except BaseException:
        for path in created:
            os.unlink(path)
        raise
    for p in (summary_path(src), sidecar_path(src), src):
        os.unlink(p)
    return dst


def write_json_new(path: str | Path, obj: Any) -> None:
    exclusive_write(path, dump_json(obj))


