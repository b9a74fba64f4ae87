"""The models of one set of retrieval settings, held apart from any retriever.

:class:`ModelHolder` resolves (and hashes) the embedding model and the cross-encoder that
:class:`~engram_eval.retrieval.settings.RetrievalSettings` name at construction, exporting
the ONNX graphs a backend needs, and loads each model on first use, so provenance can be
checked before anything is loaded. It holds:

* the encoder (:class:`~engram_eval.retrieval.embeddings.CachedEncoder`): text -> unit
  vectors, behind the vector cache;
* the cross-encoder (:class:`~engram_eval.retrieval.rerank.CachedCrossEncoder`): raw logits
  of (query, document) pairs, behind the same cache unless the model is batch-dependent;
* the token counter of the embedding model (:func:`token_counter`), with which dense pieces
  are cut;
* the vector cache (the one handed in, else the one ``use_cache`` / ``cache_dir`` name).

Retrievers (:class:`~engram_eval.retrieval.hybrid.HybridRetriever`) and production search
(:class:`engram_eval.production.search.Engine`) take a holder as a dependency, so both encode
and score exactly alike and neither reaches into the other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engram_eval.data._jsonio import read_json_document
from engram_eval.retrieval.models import ModelRef, resolve_model
from engram_eval.retrieval.settings import RetrievalSettings

#: The token limit of dense pieces when the embedding model has no tokenizer files (word
#: windows only).
DEFAULT_TOKEN_LIMIT = 256


def token_counter(model_dir: str) -> tuple[Callable[[str], int], int] | None:
    """(count_tokens, limit) from the model's ``tokenizer.json`` and its sentence-transformers
    ``max_seq_length``, read with the light ``tokenizers`` library so that a fully cached run
    never loads the model. None when the files are absent (word windows only)."""
    from pathlib import Path

    d = Path(model_dir)
    tok_file = d / "tokenizer.json"
    if not tok_file.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - a dependency of transformers
        return None
    tok = Tokenizer.from_file(str(tok_file))
    tok.no_truncation()
    limit = 512
    cfg = d / "sentence_bert_config.json"
    if cfg.is_file():
        limit = int(read_json_document(cfg).get("max_seq_length", limit))

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count, limit - 2  # room for [CLS] and [SEP]


class ModelHolder:
    """See the module docstring. ``vector_cache``: an open cache to use instead of the one
    ``use_cache`` / ``cache_dir`` name. ``encoder`` / ``cross_encoder``: already loaded
    models to hold instead of loading the resolved ones (a service that keeps models warm, a
    test's counting fake); the resolved references still name and hash the model files."""

    def __init__(self, settings: RetrievalSettings, *, vector_cache: Any = None,
                 encoder: Any = None, cross_encoder: Any = None) -> None:
        self.settings = s = RetrievalSettings.of(settings)
        self.embedding_ref: ModelRef | None = (resolve_model(s.embedding_model, "embedding")
                                               if s.use_dense else None)
        self.reranker_ref: ModelRef | None = (resolve_model(s.reranker_model, "reranker")
                                              if s.reranks_any() else None)
        from engram_eval.retrieval.onnx_export import (
            prepare_embedding_backend,
            prepare_reranker_backend,
        )

        # the exported ONNX models (backend onnx), recorded with the run's models
        self.onnx_ref = prepare_embedding_backend(s.embedding_backend, self.embedding_ref,
                                                  s.embedding_precision, s.cache_dir)
        self.reranker_onnx_ref = (prepare_reranker_backend(s.reranker_backend, self.reranker_ref,
                                                           s.reranker_precision, s.cache_dir)
                                  if s.reranks_any() else None)
        self._cache: Any = vector_cache
        self._encoder: Any = encoder
        self._cross: Any = cross_encoder
        self._counter: tuple[Callable[[str], int] | None, int] | None = None

    def models(self) -> list[ModelRef]:
        """Every resolved model file set (embedding, its ONNX export, cross-encoder, its
        export), in that order: what a run's provenance records."""
        return [r for r in (self.embedding_ref, self.onnx_ref, self.reranker_ref,
                            self.reranker_onnx_ref) if r is not None]

    def vector_cache(self) -> Any:
        if self._cache is None and self.settings.use_cache:
            from engram_eval.retrieval.cache import VectorCache, default_cache_dir

            self._cache = VectorCache(self.settings.cache_dir or default_cache_dir())
        return self._cache

    def encoder(self) -> Any:
        """The cached encoder (loaded on first use)."""
        if self._encoder is None:
            from engram_eval.retrieval.embeddings import CachedEncoder, make_embedder

            s = self.settings
            assert self.embedding_ref is not None
            emb = make_embedder(s.embedding_backend, self.embedding_ref, s.embedding_precision,
                                s.batch_size, onnx_ref=self.onnx_ref)
            self._encoder = CachedEncoder(emb, self.vector_cache(), s.embedding_backend)
        return self._encoder

    def cross_encoder(self) -> Any:
        """The cached cross-encoder (loaded on first use)."""
        if self._cross is None:
            from engram_eval.retrieval.rerank import CachedCrossEncoder, make_cross_encoder

            s = self.settings
            assert self.reranker_ref is not None
            model = make_cross_encoder(s.reranker_backend, self.reranker_ref,
                                       s.rerank_max_length, s.batch_size,
                                       onnx_ref=self.reranker_onnx_ref,
                                       precision=s.reranker_precision)
            self._cross = CachedCrossEncoder(
                model, self.vector_cache(), s.reranker_backend, s.rerank_max_length,
                batch_dependent=s.reranker_precision == "int8")
        return self._cross

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Raw cross-encoder scores; the model loads on the first call, so a run whose
        haystacks are never reranked (people's chats by default) never loads it."""
        return list(self.cross_encoder().raw_scores(pairs))

    def token_counter(self) -> tuple[Callable[[str], int] | None, int]:
        """(count_tokens, token limit) of the embedding model's tokenizer, with which dense
        pieces are cut; ``(None, DEFAULT_TOKEN_LIMIT)`` without the dense signal or without
        tokenizer files (word windows only)."""
        if self._counter is None:
            found = (token_counter(self.embedding_ref.path)
                     if self.embedding_ref is not None else None)
            self._counter = found if found is not None else (None, DEFAULT_TOKEN_LIMIT)
        return self._counter

    def stats(self) -> dict[str, Any]:
        """Per-model counts of this holder's use (texts encoded, cache hits, model time),
        for the models that were loaded."""
        out: dict[str, Any] = {}
        if self._encoder is not None:
            e = self._encoder
            out["embedding"] = {"model_seconds": e.model_seconds, "texts_encoded": e.n_model,
                                "disk_cache_hits": e.n_disk, "memory_cache_hits": e.n_memory}
        if self._cross is not None:
            x = self._cross
            out["rerank"] = {"model_seconds": x.model_seconds, "pairs_scored": x.n_model,
                             "cache_hits": x.n_cached}
        return out
