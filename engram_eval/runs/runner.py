"""The per-question loop behind every benchmark script.

``run()`` validates the config, detects the dataset format, builds the retriever (resolving
its model files without loading them, so a bad ``--retriever`` or a missing reranker fails
before the dataset is parsed), validates and indexes the dataset (a LongMemEval file is
streamed: a first pass checks every record and keeps only ids and types, see
:mod:`engram_eval.data.datasets`), hashes it, assembles the provenance sidecar, then either claims a
fresh output or verifies a resume, ranks every selected question that has no row yet — fed
one at a time from a second streamed pass, so memory does not grow with the file — appends
one row per question in selection order, and finally writes ``<output>.summary.json`` from
the rows on disk.

Loading lives in :mod:`engram_eval.data.datasets`, rows in :mod:`engram_eval.runs.rows`, summaries and
tables in :mod:`engram_eval.scoring.summary`, progress in :mod:`engram_eval.runs.progress`; the names
other code imports from here (``run``, ``format_summary``, ``TABLE_METRICS``, ``read_json``,
``load_questions`` …) are re-exported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import read_json
from engram_eval.data.datasets import (
    QuestionSource,
    detect_format,
    load_questions,
    open_source,
    resolve_format,
    select,
    select_ids,
)
from engram_eval.data.translations import (
    load_question_translations,
    plan_replacement,
    replace_texts,
)
from engram_eval.errors import ConfigError, DataError, ProvenanceError, StorageError
from engram_eval.io import (
    already_exists,
    atomic_write,
    dump_json,
    input_problem,
    refuse_links,
    sha256_file,
    storage_errors,
)
from engram_eval.provenance.guard import CONTAINS_HELDOUT, LABEL_FIELD, key_of, question_key
from engram_eval.provenance.records import (
    RESUMABLE_HINT,
    RowRecord,
    claim_rows,
    finish_rows,
    resume_rows,
    run_entry,
)
from engram_eval.provenance.sidecar import (
    build_metadata,
    compare_for_resume,
    read_sidecar,
    sidecar_path,
    summary_path,
)
from engram_eval.runs.config import RunConfig
from engram_eval.runs.executors import make_executor
from engram_eval.runs.known_fields import check_sidecar_fields, system_ids_label
from engram_eval.runs.progress import Progress
from engram_eval.runs.rows import (
    REQUIRED_FIELDS,
    RESUME_HINT,
    is_compressed,
    make_row,
    order_rows,
)
from engram_eval.runs.shard import apply_shard, apply_to_metadata, parse_shard
from engram_eval.runs.verify import check_kept_rows
from engram_eval.scoring.protocols import check_protocols, default_protocols
from engram_eval.scoring.summary import (
    DENOMINATORS,
    TABLE_METRICS,
    build_summary,
    evidence_unresolved,
    evidence_unresolved_message,
    format_summary,
    gold_absent_message,
    summarize_rows,
)

__all__ = [
    "DENOMINATORS",
    "TABLE_METRICS",
    "RunOutcome",
    "default_protocols",
    "detect_format",
    "format_summary",
    "load_questions",
    "make_row",
    "open_source",
    "read_json",
    "run",
    "select",
    "select_ids",
    "sha256_file",
    "summarize_rows",
]


_log = logging.getLogger(__name__)


@dataclass
class RunOutcome:
    output: Path
    fingerprint: str
    n_written: int
    n_total: int
    summary: dict[str, Any]
    repaired_torn_line: bool


def run(config: RunConfig, dataset: str | Path, output: str | Path, *, resume: bool = False,
        echo: Callable[[str], None] = print, command: Sequence[str] | None = None,
        frozen_source: str | Path | None = None, freeze_source: str | Path | None = None,
        validate_only: bool = False, gold_overlay: str | Path | None = None) -> RunOutcome:
    """Run (or resume) one provenance-locked retrieval run; see the module docstring.

    ``command`` (the argv that started the run) is recorded in the sidecar's ``runs`` list
    for PROVENANCE.md; it is not part of the fingerprint. ``gold_overlay``: a LoCoMo
    corrections file (:mod:`engram_eval.data.gold_overlay`), recorded with its hash in the
    sidecar's ``selection.gold_overlay``; the summary then carries the metrics on the
    corrected gold too (:mod:`engram_eval.scoring.audited`)."""
    from engram_eval.retrieval import base as retrieval_base
    from engram_eval.runs.config import with_system_settings

    config = with_system_settings(config.validate())  # --system-config FILE: its settings
    t_start = time.time()
    dataset = Path(dataset)
    output = Path(output)
    if resume and output.exists() and is_compressed(output):
        raise ProvenanceError(f"{output} is gzip-compressed; a compressed result is final and "
                              "cannot be resumed")
    if output.name.endswith(".gz"):
        raise ConfigError(f"--output {output}: results are written uncompressed; write "
                          f"{output.name[:-3]} and then run `engram-eval compress` on it")
    if not validate_only:  # a link at the result, sidecar or summary: refused before any work
        refuse_links(output, sidecar_path(output), summary_path(output))
    why = input_problem(dataset)
    if why:
        raise DataError(dataset, "(file)", "(file)", f"dataset {why}")
    fmt = resolve_format(dataset, config.dataset_format)
    protocols = list(config.protocols) or default_protocols(fmt)
    check_protocols(fmt, protocols)
    # Built before the dataset is parsed: a bad name or a missing model fails first.
    retriever = retrieval_base.create(config.retriever, config)  # resolves models, loads none
    from engram_eval.retrieval.temporal import unparsable_date_counts, unparsable_dates

    bad_dates: dict[str, tuple[int, int]] = {}  # question id -> unparsable (question, sessions)

    keys: dict[str, str] = {}  # question id -> question key, for the held-out guard
    answers: dict[str, Any] = {}  # question id -> answer (keys with --questions texts)

    absent_gold: dict[str, tuple[str, ...]] = {}  # question id -> answer ids not in haystack
    no_gold: dict[str, list[str]] = {}  # LoCoMo question id -> evidence resolving to no turn

    def _observe(q: Any) -> None:
        keys[q.question_id] = key_of(q)
        answers[q.question_id] = q.answer
        if q.gold_absent:
            absent_gold[q.question_id] = q.gold_absent
        no_gold.update(evidence_unresolved([q]))
        counts = unparsable_dates(q)
        if any(counts):
            bad_dates[q.question_id] = counts

    # every record checked; ids and types kept
    source = open_source(dataset, fmt, observe=_observe)
    if source.n == 0:
        raise DataError(dataset, "(file)", "(root)", "the dataset holds no questions; a run "
                        "needs at least one (nothing was written)")
    all_ids = select_ids(source.ids, config, dataset)
    ids = apply_shard(all_ids, all_ids, parse_shard(config.shard))  # --shard I/N
    if not ids:
        _log.warning("%s: --shard %s selects none of the %d questions; its result will have "
                     "0 rows (it only completes a merge)", dataset, config.shard, len(all_ids))
    absent = {i: absent_gold[i] for i in ids if i in absent_gold}
    if absent:  # never retrievable: scored as missed, which the user should know
        _log.warning("%s", gold_absent_message(dataset, absent))
    unresolved = {i: no_gold[i] for i in ids if i in no_gold}
    if unresolved:  # no gold: out of every denominator, which the user should know
        _log.warning("%s", evidence_unresolved_message(dataset, unresolved))
    dates = unparsable_date_counts(bad_dates[i] for i in ids if i in bad_dates)
    if any(dates.values()):
        _log.warning("%s: %d question date(s) and %d session date(s) are not empty but "
                     "cannot be parsed; the temporal step cannot use them (counted in the "
                     "summary's unparsable_dates)", dataset, dates["question_date"],
                     dates["session_dates"])
    meta = build_metadata(dataset_path=dataset, dataset_sha256=sha256_file(dataset),
                          dataset_format=fmt, retriever=retriever, config=config,
                          protocols=protocols, selected_ids=ids)
    texts = _question_texts(config, meta, source.ids, all_ids)  # --questions FILE (all shards alike)
    overlay = _gold_overlay(gold_overlay, meta, source, ids, protocols, dataset)
    source.check_unchanged()  # the hashed bytes are the validated ones
    meta = apply_to_metadata(meta, all_ids, parse_shard(config.shard))
    # Frozen-source checks (engram_eval.provenance.frozen), before any model is loaded.
    from engram_eval.provenance.frozen import benchmark_gate

    if not (resume or validate_only) and output.exists():
        raise ProvenanceError(already_exists(output, f"refusing to overwrite ({RESUMABLE_HINT})"))
    # the held-out guard also sees the texts --questions puts in (a part with placeholder
    # texts, the real ones in that file, is still the part)
    replaced = {q: question_key(t, answers[q]) for q, t in texts.items() if q in answers}
    gate = benchmark_gate(meta, dataset, frozen_source=frozen_source,
                          freeze_to=freeze_source if validate_only else None,
                          record=not (resume or validate_only), output=str(output),
                          heldout_ids=source.ids, question_keys=keys, replaced_keys=replaced)
    label = gate.heldout_questions  # a split's source: runs, labelled not a measurement
    if label is not None:
        echo(f"{dataset}: {label['label']}: it holds {label['n_heldout_questions']} of its "
             f"{label['n_questions']} questions from the held-out {label['heldout_part']}; "
             "commands that choose settings refuse this run")
    if validate_only:
        return RunOutcome(output, meta["fingerprint"], 0, len(ids),
                          {"validated": True, "frozen_source": gate.frozen_source,
                           **({LABEL_FIELD: label} if label else {})}, False)
    if gate.frozen_source is not None:
        meta["frozen_source"] = gate.frozen_source
    if label is not None:
        meta[LABEL_FIELD] = label
    if resume:
        def check_meta(out: Path) -> dict[str, Any]:
            old = read_sidecar(out)
            compare_for_resume(old, meta, sidecar_path(out))
            if (old.get(LABEL_FIELD) is None) != (label is None):
                was, now = (("yes", "no") if label is None else ("no", "yes"))
                raise ProvenanceError(
                    f"{sidecar_path(out)}: whether {dataset} holds held-out questions changed "
                    f"since this run started (labelled {CONTAINS_HELDOUT!r}: then {was}, now "
                    f"{now}; the held-out registry changed); start a new run instead of "
                    "resuming")
            check_sidecar_fields(old, sidecar_path(out))  # no key the package never writes
            return old

        def check_rows(rows: list[dict[str, Any]]) -> None:
            # Every kept row passes verify's per-row checks against the dataset before
            # anything (even the torn-line repair) is written.
            kept = {r["question_id"] for r in rows}
            check_kept_rows(output, rows,
                            replace_texts(source.iter_questions(
                                [i for i in source.ids if i in kept]), texts),
                            protocols, trace_sessions=config.trace_sessions,
                            retriever=config.retriever)

        record = resume_rows(output, check_meta=check_meta, allowed_ids=ids,
                             required=REQUIRED_FIELDS, check_rows=check_rows, echo=echo)
        echo(f"resuming {output}: {len(record.done)}/{len(ids)} questions already done "
             f"(fingerprint {record.fingerprint[:16]}…)")
    else:
        record = claim_rows(output, meta)
    try:
        return _loop(config, retriever, source, ids, protocols, meta, record,
                     started_wall=t_start, command=command, dates=dates, texts=texts,
                     absent=len(absent),
                     unresolved=unresolved if fmt == "locomo" else None,
                     overlay=overlay)
    finally:
        record.close()


def _question_texts(config: RunConfig, meta: dict[str, Any], dataset_ids: Sequence[str],
                    ids: Sequence[str]) -> dict[str, str]:
    """``--questions FILE``: the replacement texts by question id (empty without the
    option), checked against the dataset and the selection
    (:func:`engram_eval.data.translations.plan_replacement`); the file's sha256, name and
    counts go into the fingerprinted ``selection.questions`` of ``meta`` (absent without the
    option, so other runs' fingerprints do not change)."""
    if not config.questions:
        if config.allow_missing:
            raise ConfigError("--allow-missing goes with --questions FILE")
        return {}
    from engram_eval.provenance.sidecar import fingerprint_of

    path = Path(config.questions)
    texts = load_question_translations(path)
    counts = plan_replacement(texts, dataset_ids, ids, allow_missing=config.allow_missing,
                              source=path)
    meta["selection"]["questions"] = {"name": path.name, "sha256": sha256_file(path),
                                      "allow_missing": config.allow_missing, **counts}
    meta["fingerprint"] = fingerprint_of(meta)
    return texts


def _gold_overlay(path: str | Path | None, meta: dict[str, Any], source: QuestionSource,
                  ids: Sequence[str], protocols: Sequence[str],
                  dataset: Path) -> dict[str, Any] | None:
    """``--gold-overlay FILE``: read it against every question of the dataset (file order:
    the audit's keys count conversations and items), record it in the fingerprinted
    ``selection.gold_overlay`` of ``meta`` (absent without the option, so other runs'
    fingerprints do not change) and return the summary's ``gold_overlay`` block over the
    selected ``ids`` (:func:`engram_eval.scoring.audited.overlay_block`); None without it."""
    if path is None:
        return None
    from engram_eval.data.gold_overlay import read_gold_overlay
    from engram_eval.provenance.sidecar import fingerprint_of
    from engram_eval.scoring.audited import overlay_block

    overlay = read_gold_overlay(path, list(source.iter_questions(source.ids)), dataset=dataset)
    meta["selection"]["gold_overlay"] = overlay.record()
    meta["fingerprint"] = fingerprint_of(meta)
    block = overlay_block(overlay, source.iter_questions(ids), protocols)
    said = []
    if block["unresolved"]:
        said.append(f"{len(block['unresolved'])} corrected item(s) name turns that do not "
                    f"exist ({', '.join(list(block['unresolved'])[:5])})")
    if block["no_gold"]:
        said.append(f"{len(block['no_gold'])} item(s) are left with no corrected gold "
                    f"({', '.join(block['no_gold'][:5])}) and leave every audited denominator")
    if said:
        _log.warning("%s: %s (listed in the summary's gold_overlay)", path, "; ".join(said))
    return block


def _loop(config: RunConfig, retriever: Any, source: QuestionSource, ids: list[str],
          protocols: list[str], meta: dict[str, Any], record: RowRecord, *,
          started_wall: float, command: Sequence[str] | None,
          dates: dict[str, int] | None = None, texts: Mapping[str, str] | None = None,
          absent: int | None = None,
          unresolved: Mapping[str, Sequence[str]] | None = None,
          overlay: Mapping[str, Any] | None = None) -> RunOutcome:
    # One question at a time (a streamed second pass for LongMemEval), in selection order.
    done, output = record.done, record.output
    todo = replace_texts(source.iter_questions([i for i in ids if i not in done]), texts or {})
    started = datetime.now(UTC).isoformat(timespec="seconds")
    n_written = 0
    finished = False
    scan = None
    progress = Progress(len(ids), len(done), enabled=config.progress)
    executor = make_executor(config, retriever, protocols, meta)  # local or ray
    try:
        with record.writer() as writer:
            for row in executor.rows(todo):  # in selection order; only this process writes
                writer.write(row)
                n_written += 1
                progress.update(1)
        finished = True
    finally:
        progress.close()
        stats = executor.stats()
        executor.close()
        entry: dict[str, Any] = {
            **run_entry(resume=record.resume, command=command, started=started_wall,
                        started_at=started),
            "questions_written": n_written, "repaired_torn_line": record.repaired,
            "use_cache": config.use_cache, "cache_dir": config.cache_dir,
            "model_stats": stats, **executor.describe()}
        scan = finish_rows(record, entry, finished=finished, ids=ids, required=REQUIRED_FIELDS)
    assert scan is not None
    # unparsable_dates, gold_absent_from_haystack, evidence_unresolved: from the dataset, not
    # the rows (verify --dataset re-derives them)
    rows = order_rows(scan.rows, ids)
    audited = None
    if overlay is not None:
        from engram_eval.scoring.audited import AUDITED_KEY, OVERLAY_KEY, audited_protocols

        audited = {OVERLAY_KEY: dict(overlay),
                   AUDITED_KEY: audited_protocols(rows, overlay, protocols)}
    summary = build_summary(rows, protocols, fingerprint=record.fingerprint,
                            dataset=meta["dataset"]["name"],
                            dataset_sha256=meta["dataset"]["sha256"],
                            retriever=config.retriever, rows_sha256=scan.sha256,
                            unparsable_dates=dates, gold_absent_from_haystack=absent,
                             evidence_unresolved=unresolved,
                             frozen_source=meta.get("frozen_source"),
                             heldout_questions=meta.get(LABEL_FIELD),
                             system_ids=system_ids_label(meta), audited=audited)
    with storage_errors(summary_path(output), "write", RESUME_HINT, cls=StorageError):
        atomic_write(summary_path(output), dump_json(summary))
    return RunOutcome(output, record.fingerprint, n_written, len(ids), summary, record.repaired)
