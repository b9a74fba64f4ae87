"""The Python face of the package: the few functions ``import engram_eval`` offers.

:mod:`engram_eval` re-exports them lazily (nothing here is imported by ``import engram_eval``),
together with :func:`engram_eval.scoring.score.score`, :func:`engram_eval.runs.reader.read_run`
and :class:`engram_eval.retrieval.settings.RetrievalSettings`. Each function is a thin entry
to the layer that does the work; the command line uses the same layers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engram_eval.data.records import Question
    from engram_eval.retrieval.base import Retriever
    from engram_eval.retrieval.settings import RetrievalSettings, SystemSettings
    from engram_eval.runs.runner import RunOutcome

log = logging.getLogger("engram_eval")


def load_dataset(path: str | Path, dataset_format: str = "auto") -> tuple[Question, ...]:
    """The questions of a LongMemEval (``.json``/``.json.gz``) or LoCoMo file, in file order
    (each with its haystack sessions and gold); the whole file is validated first
    (DataError naming the record and field)."""
    from engram_eval.data.datasets import load_questions

    return load_questions(path, dataset_format)[1]


def make_retriever(name: str = "hybrid", settings: RetrievalSettings | None = None, *,
                   system: SystemSettings | None = None) -> Retriever:
    """A registered retriever (``hybrid``, ``dense``, ``bm25``, ``flat-bm25``, ``dummy``)
    built from ``settings`` (default: :class:`RetrievalSettings()`, the published defaults),
    or a system from outside the package (an entry point's name, ``py:MODULE:FACTORY``,
    ``http``) built from ``system`` (its settings, the ids it sees; default
    :class:`SystemSettings()`: opaque ids). Model files are resolved, not loaded;
    ``index(sessions)`` then ``rank(question)``."""
    from engram_eval.retrieval.base import create, is_builtin
    from engram_eval.retrieval.settings import RetrievalSettings, SystemSettings

    if not is_builtin(name):
        return create(name, system if system is not None else SystemSettings())  # type: ignore[arg-type]
    return create(name, settings if settings is not None else RetrievalSettings())


def run(dataset: str | Path, output: str | Path, *, resume: bool = False,
        echo: Callable[[str], None] | None = None, gold_overlay: str | Path | None = None,
        **config_fields: Any) -> RunOutcome:
    """Rank and score every selected question of ``dataset`` into ``output`` (JSONL, with its
    sidecar and summary), exactly as ``engram-eval run`` does; returns the outcome
    (``output``, ``fingerprint``, ``n_written``, ``n_total``, ``summary``).

    ``config_fields`` are the run's config fields (``retriever="bm25"``, ``limit=5``,
    ``progress=False``, any :class:`RetrievalSettings` field, ...; the YAML keys of
    ``--config``). ``echo`` receives the runner's notices (default: the ``engram_eval``
    logger). ``threads`` is applied by the command line only (it changes the process).
    ``gold_overlay``: a LoCoMo corrections file, as ``run --gold-overlay``."""
    from engram_eval.runs.config import RunConfig, resolve_model_settings
    from engram_eval.runs.runner import run as run_config

    config = resolve_model_settings(
        RunConfig.from_mapping(config_fields, source="engram_eval.run()"), set(config_fields))
    return run_config(config, dataset, output, resume=resume, echo=echo or log.info,
                      gold_overlay=gold_overlay)
