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

Sections owned by a retriever (``retriever``, the per-question and per-session traces) or by
another record (``frozen_source``, ``selection.questions``) are not listed here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import fields
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


def row_unknown_fields(row: Mapping[str, Any]) -> list[str]:
    """The row keys :func:`~engram_eval.runs.rows.make_row` never writes (its ``trace`` and
    ``timing`` objects included)."""
    return [*unknown_keys(row, ROW_FIELDS), *unknown_keys(row.get("trace"), TRACE_FIELDS,
                                                            "trace"),
            *unknown_keys(row.get("timing"), TIMING_FIELDS, "timing")]
