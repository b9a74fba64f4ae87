"""Which keys each record of a run may hold: a row, the summary and the sidecar are held to
the allow-lists their writers define, so a key the package never writes is refused by
``verify`` (a failed check) and by ``--resume`` (an error, before anything is written).

The allow-lists live beside the writers, so writer and checker cannot drift (and
tests/runs/test_verify.py checks that every key the writers produce is listed):

* a row: :data:`engram_eval.runs.rows.ROW_FIELDS` (:func:`~engram_eval.runs.rows.make_row`),
  with the keys of its ``trace`` and ``timing`` objects;
* the summary: :data:`engram_eval.scoring.summary.SUMMARY_FIELDS`
  (:func:`~engram_eval.scoring.summary.build_summary`; its ``protocols`` block is compared
  whole with the one recomputed from the rows);
* the sidecar: :data:`engram_eval.provenance.sidecar.SIDECAR_FIELDS` and its sections
  (``dataset``, ``selection`` and ``selection.shard``, ``environment``, ``packages``,
  ``runs`` entries), ``config`` / ``config_recorded`` (the fields of
  :class:`~engram_eval.runs.config.RunConfig`) and ``models`` entries (the fields of
  :class:`~engram_eval.retrieval.models.ModelRef`); ``fingerprint_fields`` must be the
  package's :data:`~engram_eval.provenance.sidecar.FINGERPRINT_FIELDS`.

* a row's traces (:func:`trace_keys`): ``trace.question``, each ``trace.sessions[i]`` and its
  ``gate_features``, by the retriever that wrote them; for the hybrid pipeline (``hybrid``,
  ``bm25``, ``dense``) the keys of :class:`~engram_eval.retrieval.pipeline.QuestionTrace` and
  :class:`~engram_eval.retrieval.pipeline.SessionTrace`, each signal's ``s``, ``s_rank``,
  ``s_turns`` and :data:`~engram_eval.retrieval.gate_features.GATE_FEATURES`; for the three
  small retrievers the keys their ``rank`` writes (:data:`SMALL_TRACE_KEYS`).

The ``retriever`` section (the backend's own description) and sections owned by another
record (``frozen_source``, ``selection.questions``) are not listed here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from engram_eval.errors import ProvenanceError
from engram_eval.provenance import sidecar as S
from engram_eval.runs.rows import ROW_FIELDS, TIMING_FIELDS, TRACE_FIELDS
from engram_eval.runs.shard import SHARD_FIELDS
from engram_eval.scoring.summary import SUMMARY_FIELDS


def unknown_keys(obj: Any, allowed: Collection[str], where: str = "") -> list[str]:
    """The dotted names of the keys of ``obj`` (a mapping; anything else has none) that are
    not in ``allowed``, in the object's order."""
    if not isinstance(obj, Mapping):
        return []
    return [f"{where}.{k}" if where else str(k) for k in obj if k not in allowed]


def _each(items: Any, allowed: Collection[str], where: str) -> list[str]:
    if not isinstance(items, list):
        return []
    return [k for i, x in enumerate(items) for k in unknown_keys(x, allowed, f"{where}[{i}]")]


def sidecar_unknown_fields(meta: Mapping[str, Any]) -> list[str]:
    """The sidecar keys no writer of the package produces (see the module docstring)."""
    from engram_eval.retrieval.models import ModelRef
    from engram_eval.runs.config import RunConfig

    config = {f.name for f in fields(RunConfig)}
    selection = meta.get("selection")
    return [*unknown_keys(meta, S.SIDECAR_FIELDS),
            *unknown_keys(meta.get("dataset"), S.DATASET_FIELDS, "dataset"),
            *unknown_keys(selection, S.SELECTION_FIELDS, "selection"),
            *unknown_keys(selection.get("shard") if isinstance(selection, Mapping) else None,
                          SHARD_FIELDS, "selection.shard"),
            *unknown_keys(meta.get("environment"), S.ENVIRONMENT_FIELDS, "environment"),
            *unknown_keys(meta.get("packages"), S.PACKAGES, "packages"),
            *unknown_keys(meta.get("config"), config, "config"),
            *unknown_keys(meta.get("config_recorded"), config, "config_recorded"),
            *_each(meta.get("models"), {f.name for f in fields(ModelRef)}, "models"),
            *_each(meta.get("runs"), S.RUN_ENTRY_FIELDS, "runs")]


def sidecar_problems(meta: Mapping[str, Any]) -> list[str]:
    """Unknown sidecar keys, and a ``fingerprint_fields`` other than the package's, each as
    ``field 'NAME': what is wrong``."""
    out = [f"field {k!r} is not one engram-eval writes in a run's sidecar"
           for k in sidecar_unknown_fields(meta)]
    if meta.get("fingerprint_fields") != list(S.FINGERPRINT_FIELDS):
        out.append(f"field 'fingerprint_fields' is {meta.get('fingerprint_fields')!r}, not the "
                   f"fields the package fingerprints {list(S.FINGERPRINT_FIELDS)!r}")
    return out


def check_sidecar_fields(meta: Mapping[str, Any], path: str | Path) -> None:
    """``--resume``: one :class:`ProvenanceError` naming the sidecar and its first problem
    (:func:`sidecar_problems`)."""
    problems = sidecar_problems(meta)
    if problems:
        raise ProvenanceError(f"{path}: {problems[0]}"
                              + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
                              + "; refusing to resume, nothing was written")


def summary_unknown_fields(summary: Mapping[str, Any]) -> list[str]:
    """The summary keys :func:`~engram_eval.scoring.summary.build_summary` never writes."""
    return unknown_keys(summary, SUMMARY_FIELDS)


@dataclass(frozen=True)
class TraceKeys:
    """The keys a retriever writes in a row's traces: ``trace.question``, each
    ``trace.sessions[i]``, and each session's ``gate_features``."""

    question: frozenset[str]
    session: frozenset[str]
    gate_features: frozenset[str] = frozenset()


#: The traces of the retrievers that are not the hybrid pipeline, as their ``rank`` writes
#: them (``flat-bm25``: :mod:`engram_eval.retrieval.bm25`, ``dummy``:
#: :mod:`engram_eval.retrieval.dummy`, ``memo-lexical``:
#: :mod:`engram_eval.retrieval.memo_lexical`; tests/runs/test_verify_hostile_rows.py runs
#: each and checks that every key written is listed and every key listed written).
SMALL_TRACE_KEYS: dict[str, TraceKeys] = {
    "flat-bm25": TraceKeys(frozenset(), frozenset({"bm25_user"})),
    "dummy": TraceKeys(frozenset(), frozenset({"hash_score"})),
    "memo-lexical": TraceKeys(frozenset({"retriever", "question_phrase_hits", "window",
                                         "phrases"}),
                              frozenset({"stage", "returned", "weight", "found_by"})),
}
#: The retrievers built on the hybrid pipeline (:mod:`engram_eval.retrieval.hybrid`).
PIPELINE_RETRIEVERS = ("hybrid", "bm25", "dense")


def system_ids_label(meta: Mapping[str, Any]) -> str | None:
    """What ids a system from outside the package saw ("opaque ids" or "ids visible"), from
    the sidecar's ``retriever.ids``; None for the package's own retrievers."""
    ids = (meta.get("retriever") or {}).get("ids")
    label = ids.get("label") if isinstance(ids, Mapping) else None
    return label if isinstance(label, str) else None


def trace_keys(retriever: Any) -> TraceKeys | None:
    """The trace keys the named retriever writes (None for a name the package does not
    have: its traces cannot be held to a list). The pipeline's lists are read from its
    trace types, imported only for a run of the pipeline."""
    if retriever in SMALL_TRACE_KEYS:
        return SMALL_TRACE_KEYS[retriever]
    if retriever not in PIPELINE_RETRIEVERS:
        return None
    from engram_eval.retrieval.gate_features import GATE_FEATURES
    from engram_eval.retrieval.pipeline import QuestionTrace, SessionTrace
    from engram_eval.retrieval.settings import SIGNALS

    signals = {f"{name}{suffix}" for name, _, _ in SIGNALS for suffix in ("", "_rank", "_turns")}
    return TraceKeys(frozenset(QuestionTrace.__annotations__),
                     frozenset(SessionTrace.__annotations__) | signals,
                     frozenset(GATE_FEATURES))


def _trace_unknown_fields(trace: Any, keys: TraceKeys) -> list[str]:
    """The keys of ``trace`` (a row's ``trace`` object) outside ``keys``."""
    if not isinstance(trace, Mapping):
        return []
    out = unknown_keys(trace.get("question"), keys.question, "trace.question")
    sessions = trace.get("sessions")
    for i, t in enumerate(sessions if isinstance(sessions, list) else []):
        out += unknown_keys(t, keys.session, f"trace.sessions[{i}]")
        if isinstance(t, Mapping):
            out += unknown_keys(t.get("gate_features"), keys.gate_features,
                                f"trace.sessions[{i}].gate_features")
    return out


def _counts(value: Any) -> bool:
    """An object of non-negative integer counts."""
    return isinstance(value, Mapping) and all(
        type(v) is int and v >= 0 for v in value.values())


def summary_shape_problems(summary: Mapping[str, Any]) -> list[str]:
    """The summary fields readers use, each of the type
    :func:`~engram_eval.scoring.summary.build_summary` writes, as ``field 'NAME': what is
    wrong``: ``n_questions`` and ``gold_absent_from_haystack`` non-negative integers,
    ``unparsable_dates`` and ``temporal_windows`` objects of such counts, ``protocols`` an
    object of objects, the names and hashes strings (whichever are present)."""
    from engram_eval.retrieval.settings import short_repr

    checks = {"n_questions": lambda v: type(v) is int and v >= 0,
              "gold_absent_from_haystack": lambda v: type(v) is int and v >= 0,
              "unparsable_dates": _counts, "temporal_windows": _counts,
              "protocols": lambda v: isinstance(v, Mapping) and all(
                  isinstance(x, Mapping) for x in v.values()),
              **{k: lambda v: isinstance(v, str) for k in ("fingerprint", "dataset",
                                                           "dataset_sha256", "retriever",
                                                           "rows_sha256")}}
    return [f"field {k!r} is {short_repr(summary[k], 60)}, not what engram-eval writes "
            "there" for k, ok in checks.items() if k in summary and not ok(summary[k])]


def row_unknown_fields(row: Mapping[str, Any], retriever: str | None = None) -> list[str]:
    """The row keys :func:`~engram_eval.runs.rows.make_row` never writes (its ``trace`` and
    ``timing`` objects included) and, given the run's ``retriever``, the trace keys it never
    writes (:func:`trace_keys`)."""
    keys = trace_keys(retriever) if retriever is not None else None
    return [*unknown_keys(row, ROW_FIELDS), *unknown_keys(row.get("trace"), TRACE_FIELDS,
                                                            "trace"),
            *(_trace_unknown_fields(row.get("trace"), keys) if keys is not None else []),
            *unknown_keys(row.get("timing"), TIMING_FIELDS, "timing")]
