"""``verify``: recompute and re-check everything a published run claims.

Every check is reported as ``ok``, ``FAIL`` or ``not checked``. A result is *verified* only
when every check ran and passed, which needs ``--dataset``: the dataset is re-hashed and every
row's gold re-derived from it. Without it the gold stored in the rows is trusted, and the
report says so. The recorded source hashes are compared with the installed package, or
(``--sources-at COMMIT``) with the files committed at the revision that published the run, so
that later code changes do not make an old result unverifiable.

The per-row checks (:func:`check_row`: ranking a permutation of the haystack, gold, every
other field that derives from the dataset or the run, metrics, scores never increasing, the
traces against the ranking, the scores and the dataset, and no key the package never writes)
are the ones ``--resume`` runs on every row it keeps, and ``merge`` runs all of ``verify`` on
every shard. The summary and the sidecar are held to their writers' allow-lists too
(:mod:`engram_eval.runs.known_fields`). Re-reading cannot catch rows forged consistently, or a
run served forged cache entries: ``rerun`` K (``--rerun K``) re-ranks K sampled questions with
the recorded settings and models and the cache off (:func:`check_rerun`).

The run is read through :mod:`engram_eval.runs.reader`, one step at a time, so that each
problem becomes a failed check rather than an exception.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_eval.data.datasets import load_questions
from engram_eval.data.records import Question
from engram_eval.errors import ProvenanceError
from engram_eval.io import sha256_file
from engram_eval.provenance.sidecar import (
    fingerprint_of,
    git_source_hashes,
    sidecar_path,
    source_hashes,
    summary_path,
)
from engram_eval.runs.known_fields import (
    sidecar_problems,
    summary_shape_problems,
    summary_unknown_fields,
    system_ids_label,
)
from engram_eval.runs.reader import read_metadata, read_rows, read_summary
from engram_eval.runs.row_checks import (
    config_problems,
    described_settings,
    field_problems,
    metric_key_problems,
    row_shape_problems,
    trace_problems,
    trace_settings_problems,
)
from engram_eval.runs.rows import order_rows
from engram_eval.scoring import protocols as P
from engram_eval.scoring.summary import (
    EVIDENCE_UNRESOLVED,
    GOLD_ABSENT,
    cost_summary,
    evidence_unresolved,
    gold_absent,
    summarize_rows,
)

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
SELECTION = "rows are exactly the questions the recorded selection takes from the dataset"
GOLD = "gold re-derived from the dataset"
ROWS_HASH = "rows sha256 matches the summary and sidecar"
METRICS = "per-question metrics recomputed"
SCORES = "scores never increase down each ranking"
FIELDS = "row fields: only known keys, each as the dataset and the run give it"
TRACE = "traces agree with the ranking, the scores and the dataset"
SUMMARY = "summary recomputed from rows"
AUDITED = "corrected gold re-derived from the gold overlay and the dataset"
SETTINGS = "recorded settings agree with each other and with every row's trace"


def selection_rule(selection: Mapping[str, Any]) -> str:
    """The recorded selection in words, as ``run`` was told it: ``--question-id`` (how many),
    ``--limit``, ``--shard``, or every question."""
    parts = []
    if selection.get("question_ids"):
        parts.append(f"--question-id x{len(selection['question_ids'])}")
    if selection.get("limit") is not None:
        parts.append(f"--limit {selection['limit']}")
    shard = selection.get("shard")
    if isinstance(shard, Mapping):
        parts.append(f"--shard {shard.get('index')}/{shard.get('count')}")
    return " ".join(parts) or "every question (no --question-id, --limit or --shard)"


def _recorded_shard(meta: Mapping[str, Any]) -> tuple[tuple[int, int] | None, list[str]]:
    """``((index, count) or None, problems)``: the sidecar's ``selection.shard`` checked for
    shape (its ``rule`` the package's, ``all_ids`` a list of ids) and against the recorded
    ``shard`` setting (``config_recorded.shard``: ``I/N``, "" once merged)."""
    from engram_eval.runs.shard import RULE

    shard = meta["selection"].get("shard")
    setting = (meta.get("config_recorded") or {}).get("shard", "")
    if shard is None:
        return None, ([] if setting in ("", None) else [
            f"config_recorded.shard is {setting!r}, but the selection records no shard"])
    index, count = (shard.get("index"), shard.get("count")) if isinstance(shard, Mapping) \
        else (None, None)
    if not (type(index) is int and type(count) is int and 0 <= index < count) or \
            shard.get("rule") != RULE or not isinstance(shard.get("all_ids"), list) or \
            not all(isinstance(i, str) for i in shard["all_ids"]):
        return None, [f"selection.shard is not a shard this package records (index, count, "
                      f"rule {RULE!r}, all_ids): {str(shard)[:200]}"]
    if setting != f"{index}/{count}":
        return None, [f"selection.shard is {index}/{count}, but config_recorded.shard is "
                      f"{setting!r}"]
    return (index, count), []


def _sequence_problems(what: str, got: Sequence[str], want: Sequence[str]) -> list[str]:
    """``got`` against ``want`` (ordered ids): the ids missing, those extra, or else the
    first position where the order differs; [] when equal."""
    if list(got) == list(want):
        return []
    have, need = set(got), set(want)
    missing = [i for i in want if i not in have]
    extra = [i for i in got if i not in need]
    out = []
    if missing:
        out.append(f"{what} lacks {len(missing)} question(s) the selection takes: "
                   f"{_short_list(missing)}")
    if extra:
        out.append(f"{what} holds {len(extra)} question(s) the selection does not take: "
                   f"{_short_list(extra)}")
    if not out:
        at = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
        out.append(f"{what} is in another order: position {at + 1} holds {got[at]!r}, the "
                   f"selection takes {want[at]!r} there")
    return out


def selection_problems(meta: Mapping[str, Any], row_ids: Sequence[str],
                       dataset_ids: Sequence[str] | None, dataset: str | Path | None = None
                       ) -> list[str]:
    """Whether the rows are exactly the questions the sidecar's recorded selection takes
    from the dataset: ``question_ids`` (file order kept) then ``limit``
    (:func:`engram_eval.data.datasets.select_ids`, what ``run`` applies), then ``--shard``
    (:func:`engram_eval.runs.shard.apply_shard`), each setting recorded the same in
    ``config`` / ``config_recorded``, ``selection.n`` the number of ids, and the rows
    (``row_ids``, in file order) the selected ids in the order ``run`` and ``merge`` write
    them. ``dataset_ids``: the dataset's question ids in file order (None without
    ``--dataset``: only what the sidecar and the rows determine is checked). A run with its
    worst questions deleted from the rows and from ``selection.ids`` (hashes and fingerprint
    recomputed) fails here: the rule still selects them."""
    from types import SimpleNamespace

    from engram_eval.data.datasets import select_ids
    from engram_eval.errors import ConfigError
    from engram_eval.runs.shard import apply_shard

    sel = meta["selection"]
    config = meta.get("config") or {}
    out = [f"config.{k} is {config.get(k)!r}, but selection.{k} is {sel.get(k)!r}"
           for k in ("question_ids", "limit") if k in config and config[k] != sel.get(k)]
    if sel["n"] != len(sel["ids"]):
        out.append(f"selection.n is {sel['n']}, but selection.ids holds {len(sel['ids'])}")
    shard, bad = _recorded_shard(meta)
    out += bad
    out += _sequence_problems("the rows file", row_ids, sel["ids"])
    if dataset_ids is None or out:
        return out
    try:
        chosen = select_ids(dataset_ids, SimpleNamespace(question_ids=sel["question_ids"],
                                                         limit=sel["limit"]),
                            dataset or "the dataset")
    except ConfigError as e:
        return [str(e)]
    if shard is not None:
        out += _sequence_problems("selection.shard.all_ids", sel["shard"]["all_ids"], chosen)
        chosen = apply_shard(chosen, chosen, shard)
    return out + _sequence_problems(f"the run ({selection_rule(sel)})", sel["ids"], chosen)


def check_row(row: Mapping[str, Any], question: Question | None,
              protocols: Sequence[str], *, trace_sessions: int | None = None,
              text_known: bool = True, retriever: str | None = None
              ) -> dict[str, list[str]]:
    """The per-row checks of ``verify``, which ``--resume`` also runs on every row it keeps
    (:func:`check_kept_rows`): ``{check name: [problem, ...]}``, every list empty for a good
    row.

    * :data:`GOLD` (only with the dataset's ``question``): the ranking is a permutation of the
      question's haystack (each session exactly once), ``haystack_entries`` and every
      ``gold[protocol]`` equal what the dataset gives;
    * :data:`FIELDS`: no key the package does not write, and every field that derives from
      the dataset or the run (question type and date, session count, the protocols that key
      gold and metrics) as they give it (:func:`engram_eval.runs.row_checks.field_problems`);
    * :data:`METRICS`: every protocol's metrics recomputed from the row's gold and ranking;
    * :data:`SCORES`: one finite number per ranked session, never increasing down the ranking
      (standard IR tools re-sort by score, so a score that goes up would silently reorder);
    * :data:`TRACE`: the traces that summaries, ``analyze`` and ``tune`` read agree with the
      ranking, the scores and the dataset (:func:`engram_eval.runs.row_checks.trace_problems`;
      ``trace_sessions`` is the run's setting, ``text_known`` False when the question's text
      was replaced by a file not given)."""
    qid = row.get("question_id")
    out: dict[str, list[str]] = {GOLD: [], FIELDS: [], METRICS: [], SCORES: [], TRACE: []}
    shape = row_shape_problems(row)
    if shape:  # a row no check below can read
        out[FIELDS] = shape
        return out
    out[FIELDS] = field_problems(row, question, protocols, retriever)
    ranking = row.get("ranked_session_ids")
    if not isinstance(ranking, list) or not all(isinstance(s, str) for s in ranking):
        out[METRICS].append(f"{qid}: ranked_session_ids is not a list of session ids")
        return out
    out[TRACE] = trace_problems(row, question, trace_sessions=trace_sessions,
                                text_known=text_known)
    entries = row.get("haystack_entries") or {}
    if question is not None:
        if len(set(ranking)) != len(ranking):
            dup = next(s for i, s in enumerate(ranking) if s in ranking[:i])
            out[GOLD].append(f"{qid}: ranking repeats session {dup!r}")
        want = set(question.session_ids)
        if set(ranking) != want:
            out[GOLD].append(f"{qid}: ranking does not cover the corpus (missing "
                             f"{sorted(want - set(ranking))[:3]}, unexpected "
                             f"{sorted(set(ranking) - want)[:3]})")
        if entries != P.entry_counts(question):
            out[GOLD].append(f"{qid}: haystack_entries differs from the dataset")
    golds = row.get("gold")
    metrics = row.get("metrics")
    if not isinstance(golds, dict) or not isinstance(metrics, dict):
        out[METRICS].append(f"{qid}: gold and metrics must be objects keyed by protocol")
        return out
    for p in protocols:
        gold = golds.get(p)
        if question is not None:
            g = P.gold_for(question, p)
            expect = list(g) if g is not None else None
            if expect != gold:
                out[GOLD].append(f"{qid}: gold[{p}] differs from the dataset")
        try:
            fresh = None if gold is None else P.metrics_for_gold(p, gold, ranking, entries)
        except (ValueError, TypeError) as e:
            out[METRICS].append(f"{qid}: metrics[{p}] cannot be recomputed: {e}")
            continue
        try:
            bad = _cmp_metrics(metrics.get(p), fresh)
        except (TypeError, AttributeError):
            bad = ["not an object of numbers"]
        out[METRICS].extend(f"{qid}: metrics[{p}] {b}" for b in bad)
    scores = row.get("scores")
    if not isinstance(scores, list) or len(scores) != len(ranking):
        n = len(scores) if isinstance(scores, list) else "no list of"
        out[SCORES].append(f"{qid}: {n} scores for {len(ranking)} ranked sessions")
        return out
    for i, s in enumerate(scores):
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            out[SCORES].append(f"{qid}: the score at rank {i + 1} ({s!r}) is not a finite "
                               "number")
            break
        if i and s > scores[i - 1]:
            out[SCORES].append(f"{qid}: rank {i + 1} scores {s!r} > rank {i} "
                               f"{scores[i - 1]!r}")
            break
    return out


def check_kept_rows(path: str | Path, rows: Sequence[Mapping[str, Any]],
                    questions: Iterable[Question], protocols: Sequence[str], *,
                    trace_sessions: int | None = None, retriever: str | None = None) -> None:
    """``--resume``: run :func:`check_row` (exactly what ``verify`` checks per row) on every
    row already in ``path`` against its dataset ``question`` (``questions`` yields one per
    row, any order, with the texts the run ranked), and raise one :class:`ProvenanceError`
    naming the file, the line, the question and the check (and the field) at the first row
    that fails, before anything is written. ``trace_sessions``, ``retriever``: the run's
    settings."""
    line_of = {r["question_id"]: n for n, r in enumerate(rows, start=1)}
    by_id = {r["question_id"]: r for r in rows}
    done: set[str] = set()
    for q in questions:
        row = by_id.get(q.question_id)
        if row is None:
            continue
        done.add(q.question_id)
        for name, problems in check_row(row, q, protocols, trace_sessions=trace_sessions,
                                        retriever=retriever).items():
            if problems:
                raise ProvenanceError(
                    f"{path}: line {line_of[q.question_id]} (question {q.question_id!r}) "
                    f"fails the check '{name}': {problems[0]}. Refusing to resume; nothing "
                    "was written. The row was changed after the run wrote it: restore the "
                    "file, or start a fresh run under a new output name.")
    lacking = [qid for qid in by_id if qid not in done]
    if lacking:
        raise ProvenanceError(f"{path}: line {line_of[lacking[0]]} (question {lacking[0]!r}) "
                              "has no question in the dataset; refusing to resume, nothing "
                              "was written")


def verify(result: str | Path, dataset: str | Path | None = None, *,
           sources_at: str | None = None, repo: str | Path | None = None,
           questions: Mapping[str, Question] | None = None, rerun: int = 0,
           rerun_seed: int | None = None,
           questions_file: str | Path | None = None,
           gold_overlay: str | Path | None = None) -> VerifyReport:
    """Recompute and re-check everything a published run claims (see the module docstring).

    The recorded source hashes are compared with the installed package, or with the files
    committed at git revision ``sources_at`` (in ``repo``, default the checkout holding the
    package) for a run published before later code changes. ``questions``: the questions of
    ``dataset`` already loaded (``merge`` loads them once for every shard). ``rerun`` K > 0:
    re-rank K questions sampled with ``random.Random(rerun_seed)`` (a fresh seed when None,
    printed) and require the recorded rankings and scores (:func:`check_rerun`).
    ``questions_file``: the ``--questions`` file of a run that replaced question texts
    (``selection.questions``), checked by sha256 and applied to the re-ranked questions.
    ``gold_overlay``: the ``--gold-overlay`` file of a run that recorded one
    (``selection.gold_overlay``), checked by sha256; with the dataset it re-derives the
    summary's ``gold_overlay`` block (:data:`AUDITED`), and ``protocols_audited`` is
    recomputed from the rows either way."""
    result = Path(result)
    rep = VerifyReport()
    try:
        meta = read_metadata(result)
    except ProvenanceError as e:
        rep.add("sidecar schema", False, str(e))
        return rep
    unknown = sidecar_problems(meta)
    rep.add("sidecar schema", not unknown,
            f"{sidecar_path(result)}: " + _short_list(unknown) if unknown else "")
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
        rep.add("rows: every selected question exactly once", bool(rows) and not missing,
                f"{len(missing)} missing, e.g. {missing[:3]}" if missing else f"{len(rows)} rows"
                if rows else "zero rows: an empty run verifies nothing")
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
    given, questions = questions, {}
    if dataset is not None:
        digest = sha256_file(dataset)
        same = digest == meta["dataset"]["sha256"]
        rep.add(DATASET_HASH, same, "" if same else
                f"{dataset} has {digest[:16]}…, the run used {meta['dataset']['sha256'][:16]}…")
        if same and given is not None:
            questions = dict(given)
        elif same:
            _, qs = load_questions(dataset, meta["dataset_format"])
            questions = {q.question_id: q for q in qs}
        else:
            rep.skip(GOLD, "the dataset given is not the one the run used")
    else:
        rep.skip(DATASET_HASH, "no --dataset given")
        rep.skip(GOLD, "no --dataset given; the gold stored in the rows was trusted")
    _check_selection(rep, meta, [r["question_id"] for r in rows], questions, dataset)
    replaced = meta["selection"].get("questions")
    texts_problem = _texts_problem(replaced, questions_file) if replaced and questions else ""
    if replaced and questions:
        _check_texts(rep, replaced, questions_file, texts_problem)
    dataset_questions = questions  # the dataset's texts (an audit entry names them)
    if replaced and questions and not texts_problem:
        questions = _with_texts(questions, questions_file)
    text_known = not replaced or (bool(questions) and not texts_problem)
    trace_sessions = _trace_sessions(meta)
    bad: dict[str, list[str]] = {GOLD: [], FIELDS: [], METRICS: [], SCORES: [], TRACE: []}
    for r in rows:
        q = questions.get(r["question_id"])
        if questions and q is None:
            bad[GOLD].append(f"{r['question_id']}: no such question in the dataset")
        for name, problems in check_row(r, q, protocols, trace_sessions=trace_sessions,
                                        text_known=text_known,
                                        retriever=meta["config"]["retriever"]).items():
            bad[name].extend(problems)
    if questions:
        rep.add(GOLD, not bad[GOLD], _short_list(bad[GOLD]))
    rep.add(FIELDS, not bad[FIELDS], f"{result}: {_short_list(bad[FIELDS])}" if bad[FIELDS]
            else "" if questions else "without --dataset: keys and counts only")
    rep.add(METRICS, not bad[METRICS], _short_list(bad[METRICS]))
    rep.add(SCORES, not bad[SCORES], _short_list(bad[SCORES]))
    rep.add(TRACE, not bad[TRACE], f"{result}: {_short_list(bad[TRACE])}" if bad[TRACE]
            else "" if questions and text_known else
            "without --dataset: against the ranking and scores only" if not questions else
            "time windows not re-derived: the run replaced question texts (pass that file "
            "with --questions)")
    _check_settings(rep, meta, rows)
    unreadable = [p for r in rows for p in row_shape_problems(r)] or metric_key_problems(rows)
    if stored is not None and unreadable:
        rep.add(SUMMARY, False, "not recomputed: " + _short_list(unreadable))
    elif stored is not None:
        fresh_summary = summarize_rows(order_rows(rows, ids), protocols)
        diffs = [f"summary field {k!r} is not one engram-eval writes"
                 for k in summary_unknown_fields(stored)]
        diffs += [f"summary {d}" for d in summary_shape_problems(stored)]
        diffs += _cmp_summary(stored.get("protocols"), fresh_summary["protocols"], "protocols")
        if "cost" in stored and stored["cost"] != cost_summary(order_rows(rows, ids)):
            diffs.append("summary cost differs from the one recomputed from the rows' timing")
        if stored.get("system_ids") != system_ids_label(meta):
            diffs.append(f"summary system_ids {stored.get('system_ids')!r} differs from the "
                         f"sidecar's {system_ids_label(meta)!r}")
        for key in ("frozen_source", "heldout_questions"):  # the sidecar's records, copied
            if stored.get(key) != meta.get(key):
                diffs.append(f"summary {key} {stored.get(key)!r} differs from the sidecar's "
                             f"{meta.get(key)!r}")
        if stored.get("temporal_windows") != fresh_summary.get("temporal_windows"):
            diffs.append(f"temporal_windows {stored.get('temporal_windows')!r} vs recomputed "
                         f"{fresh_summary.get('temporal_windows')!r}")
        if questions and "unparsable_dates" in stored:  # counted from the dataset
            from engram_eval.retrieval.temporal import unparsable_date_counts, unparsable_dates

            fresh_dates = unparsable_date_counts(unparsable_dates(questions[i])
                                                 for i in ids if i in questions)
            if stored["unparsable_dates"] != fresh_dates:
                diffs.append(f"unparsable_dates {stored['unparsable_dates']!r} vs recounted "
                             f"from the dataset {fresh_dates!r}")
        if questions and GOLD_ABSENT in stored:  # counted from the dataset (older runs lack it)
            fresh_absent = len(gold_absent(questions[i] for i in ids if i in questions))
            if type(stored[GOLD_ABSENT]) is not int or stored[GOLD_ABSENT] != fresh_absent:
                diffs.append(f"{GOLD_ABSENT} {stored[GOLD_ABSENT]!r} vs recounted from the "
                             f"dataset {fresh_absent!r}")
        if questions and EVIDENCE_UNRESOLVED in stored:  # named from the dataset
            fresh_unresolved = evidence_unresolved(questions[i] for i in ids if i in questions)
            if stored[EVIDENCE_UNRESOLVED] != fresh_unresolved:
                diffs.append(f"{EVIDENCE_UNRESOLVED} {stored[EVIDENCE_UNRESOLVED]!r} vs "
                             f"re-derived from the dataset {fresh_unresolved!r}")
        if stored.get("fingerprint") != meta["fingerprint"]:
            diffs.append("summary fingerprint differs from the sidecar's")
        for key, want in (("dataset", meta["dataset"]["name"]),
                          ("dataset_sha256", meta["dataset"]["sha256"]),
                          ("retriever", meta["config"]["retriever"]), ("n_questions", len(ids))):
            if stored.get(key) != want:
                diffs.append(f"summary {key} {stored.get(key)!r} differs from the sidecar's "
                             f"{want!r}")
        diffs += _audited_diffs(stored, rows, ids, protocols)
        rep.add(SUMMARY, not diffs, "; ".join(diffs[:5]))
    elif not spath.exists():
        rep.add(SUMMARY, False, f"{spath} is missing")
    _check_overlay(rep, meta, stored, dataset_questions, ids, protocols, gold_overlay)
    _check_sources(rep, meta["sources"], sources_at, repo)
    if rerun:
        if texts_problem:
            name = rerun_name(min(rerun, len(ids)), rerun_seed if rerun_seed is not None else 0)
            if questions_file is None:
                rep.skip(name, texts_problem)
            else:
                rep.add(name, False, texts_problem)
            return rep
        check_rerun(rep, meta, rows, questions, rerun, rerun_seed)
    return rep


def _audited_diffs(stored: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                   ids: Sequence[str], protocols: Sequence[str]) -> list[str]:
    """``protocols_audited`` recomputed from the rows and the summary's ``gold_overlay``
    items (:func:`engram_eval.scoring.audited.audited_protocols`); the block and its items
    go together."""
    from engram_eval.scoring.audited import AUDITED_KEY, OVERLAY_KEY, audited_protocols

    block, audited = stored.get(OVERLAY_KEY), stored.get(AUDITED_KEY)
    if block is None and audited is None:
        return []
    if not isinstance(block, Mapping) or not isinstance(block.get("items"), Mapping) or \
            audited is None:
        return [f"summary {OVERLAY_KEY} and {AUDITED_KEY} come together (one is missing or "
                "malformed)"]
    try:
        fresh = audited_protocols(order_rows(rows, ids), block, protocols)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        return [f"summary {OVERLAY_KEY} items cannot be applied to the rows: {e!r}"]
    return _cmp_summary(audited, fresh, AUDITED_KEY)


def _check_overlay(rep: VerifyReport, meta: Mapping[str, Any], stored: Mapping[str, Any] | None,
                   questions: Mapping[str, Question], ids: Sequence[str],
                   protocols: Sequence[str], path: str | Path | None) -> None:
    """:data:`AUDITED` for a run that recorded a gold overlay: the file given is the recorded
    one (sha256), and the summary's ``gold_overlay`` block is what it gives on the dataset's
    selected questions. A run without one: a file given is an error; nothing to check."""
    from engram_eval.data.gold_overlay import read_gold_overlay
    from engram_eval.scoring.audited import OVERLAY_KEY, overlay_block

    recorded = meta["selection"].get("gold_overlay")
    if recorded is None:
        if path is not None:
            rep.add(AUDITED, False, f"--gold-overlay {path} given, but the run recorded no "
                    "gold overlay")
        elif stored is not None and OVERLAY_KEY in stored:
            rep.add(AUDITED, False, f"the summary has {OVERLAY_KEY} but the sidecar records "
                    "no gold overlay")
        return
    if path is None:
        rep.skip(AUDITED, f"the run recorded gold overlay {recorded.get('name')} (sha256 "
                 f"{str(recorded.get('sha256'))[:16]}…): pass it with --gold-overlay FILE")
        return
    digest = sha256_file(path)
    if digest != recorded.get("sha256"):
        rep.add(AUDITED, False, f"{path} has sha256 {digest[:16]}…, the run recorded "
                f"{str(recorded.get('sha256'))[:16]}…")
        return
    if not questions:
        rep.skip(AUDITED, "needs the dataset the run used (--dataset) to resolve the "
                 "corrected evidence")
        return
    from engram_eval.errors import EngramEvalError

    try:
        overlay = read_gold_overlay(path, list(questions.values()))
    except EngramEvalError as e:
        rep.add(AUDITED, False, str(e))
        return
    fresh = overlay_block(overlay, [questions[i] for i in ids if i in questions], protocols)
    problems = []
    if overlay.record() != dict(recorded):
        problems.append(f"the sidecar's selection.gold_overlay {recorded!r} differs from the "
                        f"file's {overlay.record()!r}")
    got = (stored or {}).get(OVERLAY_KEY)
    if got != fresh:
        diff_keys = sorted(k for k in set(fresh) | set(got or {})
                           if (got or {}).get(k) != fresh.get(k))
        problems.append(f"summary {OVERLAY_KEY} differs from the one re-derived from "
                        f"{path} and the dataset in {', '.join(diff_keys)}")
    rep.add(AUDITED, not problems, "; ".join(problems) or
            f"{fresh['n_evidence_changed']} item(s) with corrected evidence, "
            f"{fresh['n_gold_changed']} with changed gold")


def _check_selection(rep: VerifyReport, meta: Mapping[str, Any], row_ids: Sequence[str],
                     questions: Mapping[str, Question], dataset: str | Path | None) -> None:
    """:data:`SELECTION` (:func:`selection_problems`); ``questions``: the dataset's, in file
    order (empty without ``--dataset``, or with another file: then only the sidecar and the
    rows are checked, and the check is *not checked* unless that already fails)."""
    sel = meta["selection"]
    problems = selection_problems(meta, row_ids, list(questions) if questions else None,
                                  dataset)
    if problems:
        rep.add(SELECTION, False, _short_list(problems))
    elif questions:
        rep.add(SELECTION, True, f"{sel['n']} of the dataset's {len(questions)} questions, "
                f"selected by {selection_rule(sel)}, in the order run writes them")
    else:
        rep.skip(SELECTION, "needs the dataset the run used (--dataset): the recorded rule "
                 f"({selection_rule(sel)}) is re-applied to its questions")


def _check_settings(rep: VerifyReport, meta: Mapping[str, Any],
                    rows: Sequence[Mapping[str, Any]]) -> None:
    """:data:`SETTINGS`: the sidecar's ``config`` against its ``retriever`` section
    (:func:`~engram_eval.runs.row_checks.config_problems`) and, for a run of the pipeline,
    the settings each row's question trace records against them
    (:func:`~engram_eval.runs.row_checks.trace_settings_problems`): a sidecar edited to
    claim other settings (rrf fusion, other weights, another boost or retriever) than the
    rows were ranked with fails here, without ``--rerun``."""
    from engram_eval.errors import ConfigError

    problems = config_problems(meta)
    try:
        settings = described_settings(meta.get("retriever") or {})
    except ConfigError as e:
        settings = None
        problems.append(f"sidecar field 'retriever': {e}")
    if settings is not None:
        problems += [p for r in rows if not row_shape_problems(r)
                     for p in trace_settings_problems(r, settings)]
    rep.add(SETTINGS, not problems, _short_list(problems))


TEXTS = "question texts the run ranked (run --questions FILE)"


def _check_texts(rep: VerifyReport, replaced: Mapping[str, Any],
                 questions_file: str | Path | None, problem: str) -> None:
    """:data:`TEXTS`, for a run that replaced question texts (``selection.questions``): ok
    when ``questions_file`` is that file (its texts then re-derive the time windows and
    re-rank), FAIL for another file, and *not checked* without one: the windows the
    traces record then go unchecked, so the run is not VERIFIED (exit 3)."""
    if not problem:
        rep.add(TEXTS, True, f"{questions_file} (sha256 {replaced['sha256'][:16]}…) applied")
    elif questions_file is None:
        rep.skip(TEXTS, f"the run replaced question texts from {replaced['name']} (sha256 "
                 f"{replaced['sha256'][:16]}…); without that file (--questions) the time "
                 "windows its traces record are not re-derived and no question can be "
                 "re-ranked")
    else:
        rep.add(TEXTS, False, problem)


def _texts_problem(replaced: Mapping[str, Any], questions_file: str | Path | None) -> str:
    """Why the question texts a run ranked (``selection.questions``) cannot be applied: no
    file given, or one with another sha256; "" when ``questions_file`` is that file."""
    if questions_file is None:
        return (f"the run replaced question texts from {replaced['name']} (sha256 "
                f"{replaced['sha256'][:16]}…): pass that file with --questions to re-rank")
    digest = sha256_file(questions_file)
    if digest != replaced["sha256"]:
        return (f"{questions_file} has sha256 {digest[:16]}…, the run used "
                f"{replaced['sha256'][:16]}…")
    return ""


def _with_texts(questions: Mapping[str, Question],
                questions_file: str | Path | None) -> dict[str, Question]:
    """``questions`` with the texts of ``questions_file`` (checked by :func:`_texts_problem`)."""
    from engram_eval.data.translations import load_question_translations, replace_texts

    assert questions_file is not None
    texts = load_question_translations(questions_file)
    return {q.question_id: q for q in replace_texts(questions.values(), texts)}


def _trace_sessions(meta: Mapping[str, Any]) -> int | None:
    """The run's ``trace_sessions`` setting (None for a run that predates it)."""
    for part in ("config", "config_recorded"):
        value = (meta.get(part) or {}).get("trace_sessions")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


#: ``verify --rerun``: a re-ranked score must satisfy |rerun - recorded| <= RERUN_TOLERANCE *
#: max(1, |recorded|); the ranking must be identical. CPU inference (torch, ONNX Runtime) is
#: deterministic for one batch on one machine, but a run encodes each text once, in the batch
#: of the first question that holds it, and a rerun of a sample encodes it in another batch
#: (other padding length, other summation order; other machines and thread counts too): float32
#: cosines move by up to ~1e-6 (measured: 1.1e-7 over 8 questions of the published MiniLM
#: hybrid run, 3.1e-6 over the tiny random test model's 12 questions),
#: and the per-question min-max normalisation of fusion can enlarge that. 1e-4 is ~30 times
#: the measured drift; the metrics depend on the ranking alone, which must not change at all.
RERUN_TOLERANCE = 1e-4


def rerun_name(k: int, seed: int) -> str:
    return (f"rerun K={k} (seed {seed}, cache off): same rankings, scores within "
            f"{RERUN_TOLERANCE:g} x max(1, |recorded|)")


def rerun_retriever(meta: Mapping[str, Any]) -> Any:
    """The run's retriever rebuilt from the sidecar's recorded config, the way the runner
    builds it (:func:`engram_eval.retrieval.base.create`), with the vector cache off. Raises
    :class:`ProvenanceError` when the model files that resolve now differ from the recorded
    ones (sha256), or when the rebuilt retriever describes other settings than the recorded."""
    from engram_eval.errors import ConfigError
    from engram_eval.provenance.sidecar import diff
    from engram_eval.retrieval import base as retrieval_base
    from engram_eval.retrieval.settings import recorded_values
    from engram_eval.runs.config import RunConfig

    # a field the run predates takes the value that reproduces it, not today's default
    recorded = recorded_values(meta)
    recorded.update(use_cache=False, cache_dir="", progress=False, shard="",
                    executor="local")
    if "system_config" in recorded:  # the recorded settings, not the file read again
        recorded["system_config"] = ""
    config = RunConfig.from_mapping(recorded, source="the sidecar's recorded config")
    system = (meta.get("retriever") or {}).get("system")
    try:
        retriever = retrieval_base.create(config.retriever, config)  # resolves models only
    except ConfigError as e:
        if not isinstance(system, Mapping):
            raise
        from engram_eval.retrieval.systems import NOT_INSTALLED, SystemUnavailableError

        dist = system.get("distribution") or "no distribution"
        raise SystemUnavailableError(
            f"the run's system {config.retriever} ({dist} {system.get('version') or ''}) "
            f"{NOT_INSTALLED}, so it cannot be re-executed: {e}") from None
    if isinstance(system, Mapping):  # a system from outside the package: its code, exactly
        from engram_eval.retrieval.systems import identity_difference

        differs = identity_difference(system, retriever.describe().get("system") or {})
        if differs:
            raise ProvenanceError(f"refusing to re-run {config.retriever}: the system "
                                  "installed here is not the one the run used: "
                                  + "; ".join(differs))
    now = {(m.role, m.name): m for m in retriever.models()}
    then = {(m["role"], m["name"]): m for m in meta.get("models") or []}
    problems = []
    for key in sorted(set(now) | set(then)):
        if key not in now or key not in then:
            problems.append(f"{key[0]} model {key[1]!r}: "
                            + ("recorded, but not used now" if key in then else
                               "used now, but not recorded"))
            continue
        m, rec = now[key], then[key]
        if m.sha256 != rec.get("sha256"):
            files = rec.get("files_sha256") or {}
            differ = sorted(f for f in set(files) | set(m.files_sha256)
                            if files.get(f) != m.files_sha256.get(f))
            problems.append(f"{key[0]} model {key[1]!r} at {m.path}: sha256 {m.sha256[:16]}…,"
                            f" recorded {str(rec.get('sha256'))[:16]}… (files differing: "
                            f"{', '.join(differ[:5]) or 'none listed'})")
    if problems:
        raise ProvenanceError("refusing to re-run: the model files that resolve now are not "
                              "the recorded ones: " + "; ".join(problems))
    recorded_described = meta.get("retriever")
    described = diff(recorded_described,
                     _restricted(retriever.describe(), recorded_described), "retriever")
    if described:
        raise ProvenanceError("refusing to re-run: the retriever built from the recorded "
                              "config describes other settings (recorded -> now): "
                              + "; ".join(described[:5]))
    return retriever


def _restricted(now: Any, recorded: Any) -> Any:
    """``now`` without the mapping keys ``recorded`` lacks (settings added to the code since
    the run, at their defaults; whether they change a ranking is what the rerun measures)."""
    if isinstance(now, Mapping) and isinstance(recorded, Mapping):
        return {k: _restricted(v, recorded[k]) for k, v in now.items() if k in recorded}
    return now


def _rerun_difference(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, float]:
    """(first difference, largest |score difference|) between a recorded and a re-ranked
    row; the first is empty when they agree (see :data:`RERUN_TOLERANCE`)."""
    a, b = list(old["ranked_session_ids"]), list(new["ranked_session_ids"])
    sa, sb = list(old["scores"]), list(new["scores"])
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            return (f"rank {i + 1}: recorded {x!r} (score {sa[i] if i < len(sa) else None!r}),"
                    f" rerun {y!r} (score {sb[i] if i < len(sb) else None!r})", math.inf)
    worst = 0.0
    for i, (x, y) in enumerate(zip(sa, sb, strict=True)):
        d = abs(float(x) - float(y))
        worst = max(worst, d)
        if d > RERUN_TOLERANCE * max(1.0, abs(float(x))):
            return (f"rank {i + 1} ({a[i]!r}): recorded score {x!r}, rerun {y!r} (difference "
                    f"{d:.3g} > tolerance)", worst)
    return "", worst


def check_rerun(rep: VerifyReport, meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                questions: Mapping[str, Question], k: int, seed: int | None = None) -> None:
    """Re-rank ``k`` of the run's questions, sampled with ``random.Random(seed)`` from its
    selection, with the recorded settings and models and the cache off
    (:func:`rerun_retriever`), and add one check: ok when every re-ranked row has the
    recorded ranking and scores (:data:`RERUN_TOLERANCE`), else FAIL naming the first
    question that differs and how."""
    import random

    from engram_eval.errors import EngramEvalError
    from engram_eval.runs.executors import compute_row

    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    ids = list(meta["selection"]["ids"])
    k = min(k, len(ids))
    name = rerun_name(k, seed)
    if not questions:
        rep.skip(name, "needs --dataset (the file the run used): the questions are re-ranked "
                 "from it")
        return
    sample = random.Random(seed).sample(ids, k)
    by_id = {r["question_id"]: r for r in rows}
    try:
        retriever = rerun_retriever(meta)
        worst = 0.0
        for qid in sample:
            if qid not in questions or qid not in by_id:
                rep.add(name, False, f"question {qid!r}: no " + (
                    "row in the result" if qid in questions else "such question in the "
                    "dataset"))
                return
            fresh = compute_row(retriever, questions[qid], list(meta["protocols"]))
            problem, d = _rerun_difference(by_id[qid], fresh)
            worst = max(worst, d)
            if problem:
                stale = [n for n, status, _ in rep.checks
                         if n.startswith("source hashes match the installed") and status != OK]
                rep.add(name, False, f"question {qid!r}: {problem}" + (
                    " (the installed code differs from the run's recorded sources; see the "
                    "source check)" if stale else "") + _int8_cpu_note(meta))
                return
    except EngramEvalError as e:
        rep.add(name, False, str(e))
        return
    rep.add(name, True, f"{', '.join(sample)}: same rankings; largest score difference "
            f"{worst:.3g}")


def _int8_cpu_note(meta: Mapping[str, Any]) -> str:
    """For a run reranked by an int8 ONNX cross-encoder on a CPU whose vector instructions
    (:data:`~engram_eval.provenance.sidecar.VECTOR_CPU_FLAGS`) differ from this one's, or were
    not recorded (sidecars before they were): why its scores may not reproduce here. Empty
    otherwise."""
    from engram_eval.provenance.sidecar import cpu

    config = meta.get("config") or {}
    if not (config.get("rerank") and config.get("reranker_backend") == "onnx"
            and config.get("reranker_precision") == "int8"):
        return ""
    recorded = ((meta.get("environment") or {}).get("cpu") or {}).get("vector_flags")
    here = cpu()["vector_flags"]
    if recorded is not None and here is not None and sorted(recorded) == sorted(here):
        return ""

    def shown(flags: Any) -> str:
        return "not recorded" if flags is None else ", ".join(flags) or "none"

    return (f" (the run reranked with an int8 ONNX cross-encoder: ONNX Runtime picks its "
            f"kernels by the CPU's vector instructions, and dynamic quantisation can turn their "
            f"last-bit differences into other scores; vector instructions: the run's "
            f"{shown(recorded)}, this CPU's {shown(here)}; re-check on a CPU with the run's)")


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
