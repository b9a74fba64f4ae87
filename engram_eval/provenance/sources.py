"""Which source files are hashed into provenance records: the one place the lists are composed.

Paths are relative to the repository root (``engram_eval/runs/runner.py``), exactly as run
sidecars, production manifests and derived-file sidecars record them; ``verify
--sources-at COMMIT`` compares a run's *recorded* paths, so changing these lists never
changes how a published run is checked.

* A benchmark run: :func:`run_sources` = :data:`RUN_CORE_SOURCES` (the run machinery, the
  dataset loaders, scoring) + the retriever's own list (``Retriever.source_modules()``, from
  :mod:`engram_eval.retrieval.sources`).
* A production run: :func:`production_sources` = :data:`PRODUCTION_CORE_SOURCES` (the
  production runtime and its evaluation modules, the ``engram-eval production`` command
  line and its wrapper scripts, calibration and schema) + the retrieval pipeline's list
  (:data:`engram_eval.retrieval.sources.SEARCH_SOURCES`, passed in by the caller:
  provenance and retrieval are independent layers and never import each other).
* A derived file (a report, table or plot made from runs): its generator files, per
  ``engram-eval`` subcommand (:func:`derived_sources`, :data:`COMMAND_GENERATORS`) or per file
  name in a results directory (:func:`file_generator`, :data:`FILE_GENERATORS`,
  :data:`SUFFIX_GENERATORS`; ``scripts/derived_sidecars.py``).

``tests/test_source_closure.py`` computes, from the source text, the import closure (top-level
and lazy imports inside functions) of what each kind of run executes and fails, naming the
module, when one is neither hashed here nor excused in :data:`NOT_HASHED`. Non-Python files
the code reads and that can change a result (schemas, the calibration) are listed too.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Imported by everything: the package itself, its error types and file helpers.
_BASE = (
    "engram_eval/__init__.py",
    "engram_eval/errors.py",
    "engram_eval/io.py",
)

#: ``engram_eval.data`` as any import of it executes it (the package re-exports the
#: loaders), with the record schemas the loaders validate against.
_DATA = (
    "engram_eval/data/__init__.py",
    "engram_eval/data/_jsonio.py",
    "engram_eval/data/records.py",
    "engram_eval/data/locomo.py",
    "engram_eval/data/longmemeval.py",
    "engram_eval/data/translations.py",
    "engram_eval/data/split.py",
    "engram_eval/schemas/locomo.schema.json",
    "engram_eval/schemas/longmemeval.schema.json",
)

_PROVENANCE = (
    "engram_eval/provenance/__init__.py",
    "engram_eval/provenance/sources.py",
    "engram_eval/provenance/sidecar.py",
    "engram_eval/provenance/frozen.py",
    # the content-keyed held-out guard: whether a run is refused, its ledger entry and label
    "engram_eval/provenance/heldout.py",
    "engram_eval/provenance/guard.py",
)

#: Files that can change a benchmark run's rows or metrics, whatever the retriever.
RUN_CORE_SOURCES: tuple[str, ...] = (
    *_BASE,
    *_DATA,
    "engram_eval/data/datasets.py",
    *_PROVENANCE,
    "engram_eval/scoring/__init__.py",
    "engram_eval/scoring/metrics.py",
    "engram_eval/scoring/protocols.py",
    "engram_eval/scoring/summary.py",
    "engram_eval/runs/__init__.py",
    "engram_eval/runs/runner.py",
    "engram_eval/runs/config.py",
    "engram_eval/runs/executors.py",
    "engram_eval/runs/rows.py",
    "engram_eval/runs/shard.py",
    "engram_eval/runs/merge.py",
    # the run machinery's own retrieval imports: the registry and the settings a
    # RunConfig inherits (a retriever's list names them too)
    "engram_eval/retrieval/__init__.py",
    "engram_eval/retrieval/base.py",
    "engram_eval/retrieval/settings.py",
    # unparsable dates counted into every run's summary (retrieval.temporal.unparsable_dates)
    "engram_eval/retrieval/temporal.py",
    # the run's options, generated from the settings fields (runs.config.add_arguments)
    "engram_eval/retrieval/flags.py",
)

#: Files that can change a production result (hashed into manifests and outputs), besides
#: the retrieval pipeline's.
PRODUCTION_CORE_SOURCES: tuple[str, ...] = (
    *_BASE,
    *_DATA,
    *_PROVENANCE,
    "engram_eval/data/datasets.py",  # the held-out guard reads a fixture's source through it
    # the runtime (engram_eval.production) and its package data
    "engram_eval/production/__init__.py",
    "engram_eval/production/settings.py",
    "engram_eval/production/store.py",
    "engram_eval/production/search.py",
    "engram_eval/production/confidence.py",
    "engram_eval/production/features.py",  # calibration v3's per-candidate features
    "engram_eval/production/data/calibration_v2.json",  # DEFAULT_CALIBRATION
    # the published runs' recorded settings and the calibration fitted under them
    "engram_eval/production/data/calibration_v1.json",
    "engram_eval/production/data/settings_v1.json",
    # its evaluation (engram_eval.production_eval): the fixture runner and the command
    # bodies of `engram-eval production`, which one module dispatches (so the other
    # commands' modules are in a run's closure too)
    "engram_eval/production_eval/__init__.py",
    "engram_eval/production_eval/fixture.py",
    "engram_eval/production_eval/runner.py",
    "engram_eval/production_eval/commands.py",
    "engram_eval/production_eval/calibrate.py",
    "engram_eval/production_eval/calibrate_real.py",
    "engram_eval/production_eval/sessions.py",
    "engram_eval/scoring/__init__.py",
    "engram_eval/scoring/metrics.py",
    "engram_eval/scoring/protocols.py",
    "engram_eval/scoring/selective.py",
    "engram_eval/schemas/production_fixture.schema.json",
    # the command line (`engram-eval production`, its options generated from the settings)
    # and the scripts that wrap it
    "engram_eval/cli/__init__.py",
    "engram_eval/cli/production.py",
    "engram_eval/retrieval/flags.py",
    "benchmarks/production_retrieval/run.py",
    "benchmarks/production_retrieval/_common.py",
)

#: The answer step (``engram-eval export-context | answer | judge``, :mod:`engram_eval.qa`):
#: the files hashed into each step's sidecar (each step's whole import closure, checked by
#: tests/test_source_closure.py).
_QA_CORE = (
    *_BASE, *_DATA, "engram_eval/data/datasets.py",
    "engram_eval/provenance/__init__.py", "engram_eval/provenance/sources.py",
    "engram_eval/provenance/sidecar.py",
    "engram_eval/runs/__init__.py", "engram_eval/runs/rows.py",
    # the bundled tokenizer's resolution, and the session dates' parser
    "engram_eval/retrieval/__init__.py", "engram_eval/retrieval/models.py",
    "engram_eval/retrieval/temporal.py",
    "engram_eval/scoring/__init__.py", "engram_eval/scoring/metrics.py",
    "engram_eval/scoring/protocols.py",
    "engram_eval/qa/__init__.py", "engram_eval/qa/prompts.py", "engram_eval/qa/files.py",
    "engram_eval/qa/context.py", "engram_eval/qa/tokens.py",
)
QA_CONTEXT_SOURCES: tuple[str, ...] = _QA_CORE
QA_ANSWER_SOURCES: tuple[str, ...] = (*_QA_CORE, "engram_eval/qa/answer.py",
                                      "engram_eval/qa/client.py")
QA_JUDGE_SOURCES: tuple[str, ...] = (*_QA_CORE, "engram_eval/qa/judge.py",
                                     "engram_eval/qa/client.py", "engram_eval/qa/report.py")
#: Besides a production run's files, what the selective-retrieval measurement of the
#: confidence on real sessions executes (issue 18: ``engram-eval production measure``, wrapped
#: by benchmarks/production_retrieval/confidence.py).
CONFIDENCE_EXTRA_SOURCES: tuple[str, ...] = (
    "engram_eval/data/datasets.py",
    "engram_eval/scoring/__init__.py",
    "engram_eval/scoring/metrics.py",
    "engram_eval/scoring/protocols.py",
    "engram_eval/scoring/selective.py",
    "engram_eval/production_eval/sessions.py",
    "engram_eval/production_eval/calibrate_real.py",
    "engram_eval/production_eval/commands.py",
    "benchmarks/production_retrieval/confidence.py",
)

#: Imported by a run but provably unable to change a ranking, a row or a metric, so not
#: hashed (editing them must not invalidate a resume or a frozen manifest). Path -> why.
#: Only here, never silently: the closure test accepts a module it finds unhashed only if it
#: is listed here.
NOT_HASHED: dict[str, str] = {
    "engram_eval/runs/progress.py":
        "progress display only (a bar or log lines on stderr); receives counts, returns nothing",
    "engram_eval/runs/reader.py":
        "reads a finished run's rows and sidecar back (resume's row check, merge's shard check, "
        "verify); it parses and refuses, and never writes a row, a ranking or a metric",
    "engram_eval/runs/verify.py":
        "re-checks rows already written (resume keeps a row only if it passes; merge refuses a "
        "shard that fails); it accepts or refuses and never changes a row, ranking or metric",
    "engram_eval/runs/known_fields.py":
        "compares the keys of a run's rows, summary and sidecar with the writers' allow-lists "
        "(resume, merge, verify); it accepts or refuses and never writes a row or a metric",
    "engram_eval/runs/row_checks.py":
        "re-derives a kept or published row's fields and traces from the dataset and compares "
        "them (resume, merge, verify); it accepts or refuses and never changes a row",
    "engram_eval/schemas/sidecar.schema.json":
        "validates a sidecar's metadata when it is read back (resume, merge, verify); it "
        "accepts or refuses metadata and never touches rows, rankings or metrics",
}


def _shipped_model_files() -> dict[str, str]:
    """The JSON files of the models shipped in ``engram_eval/models/`` (card, config,
    tokenizer, export record): model files, not sources. (The closure check reads JSON files
    under the package as data a module may name; the weights are never named.)"""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "models"
    why = ("a shipped model's file: hashed as a model file into the run's `models` record "
           "(files_sha256, part of the fingerprint) and checked against the model's card on "
           "every use")
    return {f"engram_eval/models/{p.relative_to(root).as_posix()}": why
            for p in sorted(root.rglob("*.json")) if p.is_file()} if root.is_dir() else {}


NOT_HASHED.update(_shipped_model_files())

#: ``engram-eval`` subcommand -> the modules that generate its derived file (recorded as the
#: derived sidecar's ``generators``; the first is its ``generator``).
COMMAND_GENERATORS: dict[str, tuple[str, ...]] = {
    "compare": ("engram_eval/analysis/compare.py",),
    "compare-plot": ("engram_eval/analysis/plots.py", "engram_eval/analysis/compare.py"),
    "plot": ("engram_eval/analysis/plots.py",),
    "analyze": ("engram_eval/analysis/analyze.py",),
    "confidence-study": ("engram_eval/production_eval/confidence_study.py",),
    "trec": ("engram_eval/runs/trec.py",),
    "split": ("engram_eval/data/split.py",),
    "report": ("engram_eval/report/build.py", "engram_eval/report/questions.py",
               "engram_eval/report/page.py", "engram_eval/report/assets.py",
               "engram_eval/analysis/compare.py", "engram_eval/analysis/analyze.py",
               "engram_eval/scoring/summary.py", "engram_eval/runs/verify.py"),
}

#: Derived file name in a results directory -> its generator (scripts/derived_sidecars.py).
FILE_GENERATORS: dict[str, str] = {
    "ABLATIONS.md": "scripts/ablation_table.py",
    "MISSES_hybrid_default.md": "scripts/misses.py",
    "dense_pieces.json": "benchmarks/longmemeval/dense_pieces.py",
    "speed_variants_full.json": "benchmarks/longmemeval/speed_variants.py",
    "scale.json": "benchmarks/longmemeval/scale.py",
    "scale.png": "benchmarks/longmemeval/scale.py",
    # results/longmemeval_s_dev_split (scripts/publish_tuning.sh)
    "tuned.yaml": "engram_eval/analysis/tune.py",
    "tuned.yaml.tuning.json": "engram_eval/analysis/tune.py",
    # results/longmemeval_s_dev_rerank (scripts/publish_rerank.sh)
    "rerank_choice.json": "benchmarks/longmemeval/choose_rerank.py",
    # the unit and blend chosen together out of fold (scripts/publish_rerank_unit.sh)
    "rerank_unit_choice.json": "benchmarks/longmemeval/choose_rerank.py",
    # results/rerank_retrain (scripts/publish_retrain.sh): blend grid and retrained folds
    "retrain_choice.json": "benchmarks/longmemeval/choose_rerank.py",
    "speed_rerank_tune30.json": "benchmarks/longmemeval/speed_rerank.py",
    # results/locomo_rerank: the same measurement on LoCoMo tune conversations
    "speed_rerank_locomo_tune30.json": "benchmarks/longmemeval/speed_rerank.py",
    # results/shipped_reranker (scripts/publish_shipped.sh): the shipped form's cost
    "speed_shipped_tune30.json": "benchmarks/longmemeval/speed_rerank.py",
    # results/longmemeval_s_dev (scripts/publish_memo.sh)
    "speed_memo.json": "benchmarks/longmemeval/speed_memo.py",
    # results/structure (scripts/publish_structure.sh)
    "tuned_by_structure.yaml": "engram_eval/analysis/tune_parts.py",
    "tuned_by_structure.yaml.tuning.json": "engram_eval/analysis/tune_parts.py",
    # results/production (scripts/publish_production.sh)
    "calibration_v1.report.json": "engram_eval/production_eval/commands.py",
    "calibration_v1.report.png": "engram_eval/production_eval/calibrate.py",
    "abstention_longmemeval_s_dev.json": "engram_eval/production_eval/commands.py",
    "abstention_longmemeval_s_dev.png": "engram_eval/production_eval/commands.py",
    "abstention_locomo10.json": "engram_eval/production_eval/commands.py",
    "abstention_locomo10.png": "engram_eval/production_eval/commands.py",
    # results/longmemeval_s_dev_context (PROVENANCE.md, "From retrieval to answers")
    "context_tokens.json": "benchmarks/longmemeval/context_tokens.py",
    # results/confidence (scripts/publish_confidence.sh, issue 18)
    "calibration_v3_chat.report.json": "engram_eval/production_eval/commands.py",
    "calibration_v3_chat.report.png": "engram_eval/production_eval/commands.py",
    "calibration_v3_people.report.json": "engram_eval/production_eval/commands.py",
    "calibration_v3_people.report.png": "engram_eval/production_eval/commands.py",
    # results/confidence/full: the same fit on every tune question
    "calibration_v3_chat_full.report.json": "engram_eval/production_eval/commands.py",
    "calibration_v3_chat_full.report.png": "engram_eval/production_eval/commands.py",
    "calibration_v3_people_full.report.json": "engram_eval/production_eval/commands.py",
    "calibration_v3_people_full.report.png": "engram_eval/production_eval/commands.py",
    # results/lexical (scripts/publish_lexical.sh, issue 27): each analyser and speaker
    # variant tuned on its own part, the choice, the two chosen runs tuned together
    "tune_lme_plain.yaml": "engram_eval/analysis/tune.py",
    "tune_lme_plain.yaml.tuning.json": "engram_eval/analysis/tune.py",
    "tune_lme_stem.yaml": "engram_eval/analysis/tune.py",
    "tune_lme_stem.yaml.tuning.json": "engram_eval/analysis/tune.py",
    "tune_loc_plain_none.yaml": "engram_eval/analysis/tune.py",
    "tune_loc_plain_none.yaml.tuning.json": "engram_eval/analysis/tune.py",
    "tune_loc_stem_none.yaml": "engram_eval/analysis/tune.py",
    "tune_loc_stem_none.yaml.tuning.json": "engram_eval/analysis/tune.py",
    "tune_loc_plain_prefix.yaml": "engram_eval/analysis/tune.py",
    "tune_loc_plain_prefix.yaml.tuning.json": "engram_eval/analysis/tune.py",
    "tune_loc_stem_prefix.yaml": "engram_eval/analysis/tune.py",
    "tune_loc_stem_prefix.yaml.tuning.json": "engram_eval/analysis/tune.py",
    "tuned_first_stage.yaml": "engram_eval/analysis/tune_parts.py",
    "tuned_first_stage.yaml.tuning.json": "engram_eval/analysis/tune_parts.py",
    # written by the script itself: the choice per structure and the frozen config
    "lexical_choice.json": "scripts/publish_lexical.sh",
    "heldout_config.yaml": "scripts/publish_lexical.sh",
    "speed_tune30.json": "benchmarks/longmemeval/speed_rerank.py",
    "speed_tune30_before.json": "benchmarks/longmemeval/speed_rerank.py",
    "speed_locomo_tune.json": "benchmarks/longmemeval/speed_rerank.py",
    "speed_locomo_tune_before.json": "benchmarks/longmemeval/speed_rerank.py",
}
#: Derived file name suffix -> its generator (frozen manifests, ``*.frozen.json``).
SUFFIX_GENERATORS: dict[str, str] = {
    ".frozen.json": "engram_eval/provenance/frozen.py",
    # a selective-retrieval measurement of the confidence and its figure (issue 18)
    ".selective.json": "engram_eval/production_eval/commands.py",
    ".selective.png": "engram_eval/production_eval/commands.py",
    # a trained reranker's model card (train-reranker; the weights are not published)
    ".card.json": "engram_eval/analysis/train_reranker.py",
}


def _unique(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(paths))


def run_sources(retriever_sources: Iterable[str]) -> list[str]:
    """The files hashed into a benchmark run's sidecar: the run core + the retriever's list
    (``retriever.source_modules()``)."""
    return _unique([*RUN_CORE_SOURCES, *retriever_sources])


def production_sources(retrieval_sources: Iterable[str]) -> list[str]:
    """The files hashed into a production manifest: the production core + the retrieval
    pipeline's list (:data:`engram_eval.retrieval.sources.SEARCH_SOURCES`)."""
    return _unique([*PRODUCTION_CORE_SOURCES, *retrieval_sources])


def confidence_sources(retrieval_sources: Iterable[str]) -> list[str]:
    """The files hashed into a confidence measurement's manifest: a production run's files
    plus :data:`CONFIDENCE_EXTRA_SOURCES`."""
    return _unique([*production_sources(retrieval_sources), *CONFIDENCE_EXTRA_SOURCES])


def derived_sources(command: str) -> list[str]:
    """The generator files of the derived file an ``engram-eval`` subcommand writes
    (:data:`COMMAND_GENERATORS`; the first is the sidecar's ``generator``). KeyError for a
    command that writes none."""
    return list(COMMAND_GENERATORS[command])


def file_generator(name: str) -> str | None:
    """The generator of a derived file in a results directory, by its file name
    (:data:`FILE_GENERATORS`, then :data:`SUFFIX_GENERATORS`); None when none is known."""
    if name in FILE_GENERATORS:
        return FILE_GENERATORS[name]
    for suffix, gen in SUFFIX_GENERATORS.items():
        if name.endswith(suffix):
            return gen
    return None
