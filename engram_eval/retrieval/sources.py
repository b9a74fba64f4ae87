"""The retrieval layer's source files: what each retriever hashes into a run's provenance.

A retriever names its own modules (``Retriever.source_modules()`` returns one of these
lists); :mod:`engram_eval.provenance.sources` adds the run machinery (benchmark runs) or the
production modules (production manifests) around them. Retrieval never imports provenance,
so the lists are plain constants here: repository-relative paths, as recorded in sidecars.

Each list must cover every ``engram_eval.retrieval`` module its retriever imports, top-level
or lazily inside a function (e.g. :mod:`.cache`, which decodes every cached vector a run
uses): ``tests/provenance/test_source_closure.py`` computes the import closures and fails, naming the
module, when one is missing.
"""

from __future__ import annotations

#: Every retriever: the package, this file, the protocol/registry and model resolution.
_COMMON = (
    "engram_eval/retrieval/__init__.py",
    "engram_eval/retrieval/sources.py",
    "engram_eval/retrieval/base.py",
    "engram_eval/retrieval/models.py",
)

#: The retrieval pipeline's modules after the retriever class: what the ``hybrid``, ``bm25``
#: and ``dense`` retrievers (:data:`PIPELINE_SOURCES`) and production search
#: (:data:`SEARCH_SOURCES`, which builds no retriever) both execute.
_STAGES = (
    "engram_eval/retrieval/holder.py",
    "engram_eval/retrieval/pipeline.py",
    "engram_eval/retrieval/settings.py",
    "engram_eval/retrieval/fusion.py",
    "engram_eval/retrieval/feedback.py",
    "engram_eval/retrieval/bm25.py",
    "engram_eval/retrieval/analyzer.py",
    "engram_eval/lexicon/stopwords-en-v1.txt",
    "engram_eval/retrieval/dense.py",
    "engram_eval/retrieval/embeddings.py",
    "engram_eval/retrieval/onnx_export.py",
    "engram_eval/retrieval/cache.py",
    "engram_eval/retrieval/temporal.py",
    "engram_eval/retrieval/rerank.py",
    "engram_eval/retrieval/passages.py",
    "engram_eval/retrieval/coverage.py",
)

#: The retrieval pipeline behind the ``hybrid``, ``bm25`` and ``dense`` retrievers.
PIPELINE_SOURCES: tuple[str, ...] = (*_COMMON, "engram_eval/retrieval/hybrid.py", *_STAGES)

#: The retrieval pipeline as production search runs it: the stages and the model holder,
#: without the retriever class (:mod:`engram_eval.production.search` builds none).
SEARCH_SOURCES: tuple[str, ...] = (*_COMMON, *_STAGES)

#: ``flat-bm25`` (:class:`engram_eval.retrieval.bm25.FlatBM25`).
FLAT_BM25_SOURCES: tuple[str, ...] = (*_COMMON, "engram_eval/retrieval/bm25.py",
                                      "engram_eval/retrieval/analyzer.py",
                                      "engram_eval/lexicon/stopwords-en-v1.txt")

#: ``dummy`` (:class:`engram_eval.retrieval.dummy.DummyRetriever`).
DUMMY_SOURCES: tuple[str, ...] = (*_COMMON, "engram_eval/retrieval/dummy.py")

#: ``memo-lexical`` (:class:`engram_eval.retrieval.memo_lexical.MemoLexical`; its session
#: dates are read with :mod:`.temporal`'s parser when they are not in either dataset's layout).
MEMO_LEXICAL_SOURCES: tuple[str, ...] = (*_COMMON, "engram_eval/retrieval/memo_lexical.py",
                                         "engram_eval/retrieval/settings.py",
                                         "engram_eval/retrieval/temporal.py")
