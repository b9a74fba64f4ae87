"""Auditing and neutral scoring: ``verify`` a published run, ``score`` any system's
rankings on identical definitions, and ``export`` rankings without conversation text."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_eval import protocols as P
from engram_eval.errors import DataError, ProvenanceError
from engram_eval.io import dump_json, exclusive_write, sha256_file
from engram_eval.metrics import question_metrics
from engram_eval.provenance import (
    fingerprint_of,
    read_sidecar,
    source_hashes,
    summary_path,
)
from engram_eval.rows import scan_rows
from engram_eval.runner import floats_equal, load_questions, summarize_rows


@dataclass
class VerifyReport:
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks.append((name, ok, detail))

    @property
    def ok(self) -> bool:
        return all(ok for _, ok, _ in self.checks)

    def format(self) -> str:
        return "\n".join(f"[{'ok' if ok else 'FAIL'}] {n}" + (f": {d}" if d else "")
                         for n, ok, d in self.checks)


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


def verify(result: str | Path, dataset: str | Path | None = None) -> VerifyReport:
    """Recompute and re-check everything a published run claims (see README)."""
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
    questions: dict[str, Any] = {}
    if dataset is not None:
        digest = sha256_file(dataset)
        same = digest == meta["dataset"]["sha256"]
        rep.add("dataset sha256", same, "" if same else
                f"{dataset} has {digest[:16]}…, the run used {meta['dataset']['sha256'][:16]}…")
        if same:
            _, qs = load_questions(dataset, meta["dataset_format"])
            questions = {q.question_id: q for q in qs}
    bad_rows = []
    for r in rows:
        q = questions.get(r["question_id"])
        for p in protocols:
            gold = r.get("gold", {}).get(p)
            if q is not None:
                g = P.gold_for(q, p)
                expect = list(g) if g is not None else None
                if expect != gold:
                    bad_rows.append(f"{r['question_id']}: gold[{p}] differs from the dataset")
                    continue
                if set(r["ranked_session_ids"]) != set(q.session_ids):
                    bad_rows.append(f"{r['question_id']}: ranking does not cover the corpus")
            fresh = None if gold is None else question_metrics(gold, r["ranked_session_ids"])
            for b in _cmp_metrics(r["metrics"].get(p), fresh):
                bad_rows.append(f"{r['question_id']}: metrics[{p}] {b}")
    rep.add("per-question metrics recomputed", not bad_rows,
            "; ".join(bad_rows[:5]) + (f" (+{len(bad_rows) - 5} more)" if len(bad_rows) > 5 else ""))
    spath = summary_path(result)
    if spath.exists():
        stored = json.loads(spath.read_text(encoding="utf-8"))
        by = {r["question_id"]: r for r in rows}
        fresh = summarize_rows([by[i] for i in ids if i in by], protocols)
        diffs = _cmp_summary(stored.get("protocols"), fresh["protocols"], "protocols")
        if stored.get("fingerprint") != meta["fingerprint"]:
            diffs.append("summary fingerprint differs from the sidecar's")
        for key, want in (("dataset", meta["dataset"]["name"]),
                          ("dataset_sha256", meta["dataset"]["sha256"]),
                          ("retriever", meta["config"]["retriever"]), ("n_questions", len(ids))):
            if stored.get(key) != want:
                diffs.append(f"summary {key} {stored.get(key)!r} differs from the sidecar's "
                             f"{want!r}")
        rep.add("summary recomputed from rows", not diffs, "; ".join(diffs[:5]))
    else:
        rep.add("summary recomputed from rows", False, f"{spath} is missing")
    try:
        current = source_hashes(list(meta["sources"]))
        changed = [k for k, v in meta["sources"].items() if current.get(k) != v]
    except ProvenanceError as e:
        changed = [str(e)]
    rep.add("source hashes match the installed package", not changed,
            ("differ: " + ", ".join(changed)) if changed else "")
    return rep


# -- neutral scoring ----------------------------------------------------------------------
def read_rankings(path: str | Path, known: Collection[str] | None = None
                  ) -> dict[str, list[str]]:
    """Parse ``{question_id, ranked_session_ids}`` lines; with ``known``, a question id
    outside it is an error naming its line."""
    out: dict[str, list[str]] = {}
    with open(path, encoding="utf-8") as f:
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
    from engram_eval.runner import default_protocols

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
    """A retrieval log in the LongMemEval reference layout: one JSON object per line with
    ``retrieval_results.ranked_items[].corpus_id``. Answer sessions without any user
    ``has_answer`` turn are relabelled ``answer`` -> ``noans`` as the reference indexer
    does, so the reference scripts compute their own (``official``) gold from the ids."""
    meta = read_sidecar(result)
    rows = scan_rows(result, allowed_ids=meta["selection"]["ids"]).rows
    _, qs = load_questions(dataset, meta["dataset_format"])
    by_id = {q.question_id: q for q in qs}
    lines = []
    for r in rows:
        q = by_id[r["question_id"]]
        sess = {s.session_id: s for s in q.sessions}

        def corpus_id(sid: str, _sess: dict[str, Any] = sess) -> str:
            s = _sess[sid]
            user = [t for t in s.turns if t.role == "user"]
            if "answer" in sid and not any(t.has_answer for t in user):
                return sid.replace("answer", "noans")
            return sid

        lines.append(json.dumps({
            "question_id": q.question_id, "question_type": q.question_type,
            "question": q.question, "answer": q.answer, "question_date": q.question_date,
            "retrieval_results": {
                "query": q.question,
                "ranked_items": [{"corpus_id": corpus_id(sid), "score": sc}
                                 for sid, sc in zip(r["ranked_session_ids"], r["scores"], strict=False)],
                "metrics": {"session": r["metrics"].get("official") or {}},
            }}, ensure_ascii=False))
    exclusive_write(out, "".join(line + "\n" for line in lines))
    return len(lines)


def write_json_new(path: str | Path, obj: Any) -> None:
    exclusive_write(path, dump_json(obj))


