"""The models of one set of retrieval settings, held apart from any retriever.

:class:`ModelHolder` resolves (and hashes) the embedding model and the cross-encoder that
:class:`~engram_eval.retrieval.settings.RetrievalSettings` name at construction, exporting
the ONNX graphs a backend needs, and loads each model on first use, so provenance can be
checked before anything is loaded. It holds:

* the encoder (:class:`~engram_eval.retrieval.embeddings.CachedEncoder`): text -> unit
  vectors, behind the vector cache; one per chat structure where ``people_overrides`` name
  another encoder for people's chats (``embedding_model``, ``embedding_backend``,
  ``embedding_precision``), each resolved and hashed at construction and loaded only when a
  haystack of its structure is encoded;
* the cross-encoder (:class:`~engram_eval.retrieval.rerank.CachedCrossEncoder`): raw logits
  of (query, document) pairs, behind the same cache unless the model is batch-dependent;
* the token counter of each embedding model (:func:`token_counter`), with which dense pieces
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
from engram_eval.retrieval.settings import STRUCTURE_DENSE_FIELDS, RetrievalSettings

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


class _Dense:
    """One encoder of a holder: its resolved model files, their ONNX export and the settings
    it runs with; the encoder and token counter once loaded."""

    def __init__(self, settings: RetrievalSettings) -> None:
        from engram_eval.retrieval.onnx_export import prepare_embedding_backend

        self.backend = settings.embedding_backend
        self.precision = settings.embedding_precision
        self.ref: ModelRef = resolve_model(settings.embedding_model, "embedding")
        # the exported ONNX model (backend onnx), recorded with the run's models
        self.onnx_ref = prepare_embedding_backend(self.backend, self.ref, self.precision,
                                                  settings.cache_dir)
        self.encoder: Any = None
        self.counter: tuple[Callable[[str], int] | None, int] | None = None


class ModelHolder:
    """See the module docstring. ``vector_cache``: an open cache to use instead of the one
    ``use_cache`` / ``cache_dir`` name. ``encoder`` / ``cross_encoder``: already loaded
    models to hold instead of loading the resolved ones (a service that keeps models warm, a
    test's counting fake; ``encoder`` serves the chat structure); the resolved references
    still name and hash the model files.

    Every method taking ``chat_roles`` serves the encoder of that structure
    (:func:`engram_eval.data.records.has_chat_roles` of the haystack): True, the settings'
    own encoder; False, the one ``people_overrides`` name (the same one when they name none).
    Production memories are single user texts, so production search always asks for True."""

    def __init__(self, settings: RetrievalSettings, *, vector_cache: Any = None,
                 encoder: Any = None, cross_encoder: Any = None) -> None:
        self.settings = s = RetrievalSettings.of(settings)
        self._dense: dict[bool, _Dense] = {}
        if s.use_dense:
            chat = _Dense(s)
            people_settings = s.for_chat_roles(False)
            people = (_Dense(people_settings)
                      if not _same_encoder(s, people_settings) else chat)
            self._dense = {True: chat, False: people}
            chat.encoder = encoder
        self.embedding_ref: ModelRef | None = self._dense[True].ref if s.use_dense else None
        self.onnx_ref: ModelRef | None = self._dense[True].onnx_ref if s.use_dense else None
        self.reranker_ref: ModelRef | None = (resolve_model(s.reranker_model, "reranker")
                                              if s.reranks_any() else None)
        from engram_eval.retrieval.onnx_export import prepare_reranker_backend

        self.reranker_onnx_ref = (prepare_reranker_backend(s.reranker_backend, self.reranker_ref,
                                                           s.reranker_precision, s.cache_dir)
                                  if s.reranks_any() else None)
        self._cache: Any = vector_cache
        self._cross: Any = cross_encoder

    def embedding_ref_for(self, chat_roles: bool) -> ModelRef | None:
        """The embedding model a haystack of this structure is encoded with (None without
        the dense signal)."""
        d = self._dense.get(chat_roles)
        return d.ref if d is not None else None

    def people_encoder_differs(self) -> bool:
        """Whether people's chats are encoded by another model than chats."""
        return bool(self._dense) and self._dense[False] is not self._dense[True]

    def models(self) -> list[ModelRef]:
        """Every resolved model file set (embedding, its ONNX export, the people's chats'
        embedding and its export where it differs, cross-encoder, its export), in that order:
        what a run's provenance records."""
        dense: list[ModelRef | None] = []
        for d in dict.fromkeys(self._dense.values()):  # chat first; people's once
            dense += [d.ref, d.onnx_ref]
        return [r for r in (*dense, self.reranker_ref, self.reranker_onnx_ref)
                if r is not None]

    def vector_cache(self) -> Any:
        if self._cache is None and self.settings.use_cache:
            from engram_eval.retrieval.cache import VectorCache, default_cache_dir

            self._cache = VectorCache(self.settings.cache_dir or default_cache_dir())
        return self._cache

    def encoder(self, chat_roles: bool = True) -> Any:
        """The cached encoder of the structure (loaded on first use)."""
        d = self._dense[chat_roles]
        if d.encoder is None:
            from engram_eval.retrieval.embeddings import CachedEncoder, make_embedder

            emb = make_embedder(d.backend, d.ref, d.precision, self.settings.batch_size,
                                onnx_ref=d.onnx_ref,
                                isolated=self.settings.embedding_batch_isolated)
            d.encoder = CachedEncoder(emb, self.vector_cache(), d.backend)
        return d.encoder

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

    def token_counter(self, chat_roles: bool = True) -> tuple[Callable[[str], int] | None, int]:
        """(count_tokens, token limit) of the structure's embedding model's tokenizer, with
        which dense pieces are cut; ``(None, DEFAULT_TOKEN_LIMIT)`` without the dense signal
        or without tokenizer files (word windows only)."""
        d = self._dense.get(chat_roles)
        if d is None:
            return None, DEFAULT_TOKEN_LIMIT
        if d.counter is None:
            found = token_counter(d.ref.path)
            d.counter = found if found is not None else (None, DEFAULT_TOKEN_LIMIT)
        return d.counter

    def stats(self) -> dict[str, Any]:
        """Per-model counts of this holder's use (texts encoded, cache hits, model time),
        for the models that were loaded."""
        out: dict[str, Any] = {}
        for chat_roles, key in ((True, "embedding"), (False, "embedding_people")):
            d = self._dense.get(chat_roles)
            if d is None or d.encoder is None or (not chat_roles and not
                                                   self.people_encoder_differs()):
                continue
            e = d.encoder
            out[key] = {"model_seconds": e.model_seconds, "texts_encoded": e.n_model,
                        "disk_cache_hits": e.n_disk, "memory_cache_hits": e.n_memory}
        if self._cross is not None:
            x = self._cross
            out["rerank"] = {"model_seconds": x.model_seconds, "pairs_scored": x.n_model,
                             "cache_hits": x.n_cached}
        return out


def _same_encoder(a: RetrievalSettings, b: RetrievalSettings) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in STRUCTURE_DENSE_FIELDS)
