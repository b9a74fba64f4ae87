"""Cross-encoder rerank backends and score conversion.

Backends (``--reranker-backend``): ``sentence_transformers`` (``CrossEncoder``),
``flag_embedding`` (``FlagReranker``) and ``onnx`` (ONNX Runtime over the model exported by
:func:`engram_eval.retrieval.onnx_export.export_reranker_onnx`, fp32 or int8). All return the
model's *raw* logit per
(query, document) pair; :func:`sigmoid` turns it into the [0, 1] score used for ranking
and for the passage-fallback floor (shared with production search). Models load from a
local directory only (see :mod:`engram_eval.retrieval.models`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Protocol

from engram_eval.retrieval.cache import VectorCache, content_key, library_versions
from engram_eval.retrieval.models import ModelRef


def sigmoid(x: float) -> float:
    """Numerically stable logistic function."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


class CrossEncoderBackend(Protocol):
    ref: ModelRef

    def raw_scores(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Raw logits, one per (query, document) pair, in input order."""
        ...


class _LocalCrossEncoder:
    """Shared state of the cross-encoder backends; the model loads on first use."""

    def __init__(self, ref: ModelRef, max_length: int = 512, batch_size: int = 16) -> None:
        self.ref = ref
        self.max_length = max_length
        self.batch_size = batch_size
        self._model: Any = None


class SentenceTransformersCrossEncoder(_LocalCrossEncoder):
    backend = "sentence_transformers"

    def load(self) -> Any:
        if self._model is None:
            try:
                from sentence_transformers import CrossEncoder
            except ImportError as e:  # pragma: no cover
                raise ImportError("pip install sentence-transformers") from e
            self._model = CrossEncoder(self.ref.path, max_length=self.max_length, device="cpu",
                                       local_files_only=True)
        return self._model

    def raw_scores(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        import torch

        model = self.load()
        with torch.inference_mode():
            out = model.predict([list(p) for p in pairs], batch_size=self.batch_size,
                                activation_fn=torch.nn.Identity(), convert_to_numpy=True,
                                show_progress_bar=False)
        return [float(x) for x in out.reshape(len(pairs), -1)[:, 0]]


class FlagCrossEncoder(_LocalCrossEncoder):
    backend = "flag_embedding"

    def load(self) -> Any:
        if self._model is None:
            try:
                from FlagEmbedding import FlagReranker
            except ImportError as e:  # pragma: no cover
                raise ImportError("pip install FlagEmbedding") from e
            self._model = FlagReranker(self.ref.path, use_fp16=False, devices=["cpu"],
                                       max_length=self.max_length, batch_size=self.batch_size)
        return self._model

    def raw_scores(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        import torch

        with torch.inference_mode():
            out = self.load().compute_score([list(p) for p in pairs], normalize=False,
                                            max_length=self.max_length,
                                            batch_size=self.batch_size)
        if isinstance(out, (int, float)):
            out = [out]
        return [float(x) for x in out]


class OnnxCrossEncoder(_LocalCrossEncoder):
    """ONNX Runtime (CPU) over an exported cross-encoder. ``ref`` is the *exported* model
    (role ``reranker-onnx``; its hash keys the score cache), ``source`` the model it came
    from. Pairs are encoded with the model's ``tokenizer.json`` (``tokenizers``), truncated
    to ``max_length`` with ``longest_first`` as sentence-transformers' ``CrossEncoder``
    does; within one call they are sorted by length so each batch of ``batch_size`` pads
    little, and the logits come back in input order."""

    backend = "onnx"

    def __init__(self, ref: ModelRef, max_length: int = 512, batch_size: int = 16,
                 source: ModelRef | None = None, threads: int = 0) -> None:
        super().__init__(ref, max_length, batch_size)
        self.source = source
        self.threads = threads
        self._tok: Any = None
        self._inputs: set[str] = set()

    def load(self) -> Any:
        if self._model is None:
            from pathlib import Path

            try:
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as e:  # pragma: no cover - core dependencies
                raise ImportError("pip install 'onnxruntime>=1.17' tokenizers") from e
            d = Path(self.ref.path)
            opts = ort.SessionOptions()
            if self.threads:
                opts.intra_op_num_threads = self.threads
            session = ort.InferenceSession(str(d / "model.onnx"), opts,
                                           providers=["CPUExecutionProvider"])
            tok = Tokenizer.from_file(str(d / "tokenizer.json"))
            tok.enable_truncation(max_length=self.max_length, strategy="longest_first")
            tok.no_padding()
            self._tok = tok
            self._inputs = {i.name for i in session.get_inputs()}
            self._model = session
        return self._model

    def raw_scores(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        import numpy as np

        from engram_eval.retrieval.embeddings import padded_batches

        session = self.load()
        enc = self._tok.encode_batch([(str(q), str(d)) for q, d in pairs])
        out = np.zeros(len(enc), dtype=np.float64)
        for idx, feeds, _ in padded_batches(enc, self.batch_size, self._inputs):
            logits = session.run(["logits"], feeds)[0]
            out[idx] = np.asarray(logits, dtype=np.float64).reshape(len(idx), -1)[:, 0]
        return [float(x) for x in out]


def make_cross_encoder(backend: str, ref: ModelRef, max_length: int, batch_size: int = 16,
                       onnx_ref: ModelRef | None = None,
                       precision: str = "fp32") -> CrossEncoderBackend:
    """The cross-encoder of ``backend``; for ``onnx``, ``onnx_ref`` is the exported model
    (:func:`engram_eval.retrieval.onnx_export.prepare_reranker_backend`), exported on the
    spot at ``precision`` when not given."""
    if backend == "sentence_transformers":  # (torch backends keep their batch of 16)
        return SentenceTransformersCrossEncoder(ref, max_length)
    if backend == "flag_embedding":
        return FlagCrossEncoder(ref, max_length)
    if backend == "onnx":
        from engram_eval.retrieval.onnx_export import export_reranker_onnx, preexported_precision

        if onnx_ref is None and preexported_precision(ref) is not None:
            return OnnxCrossEncoder(ref, max_length, batch_size, source=ref)  # pre-exported
        if onnx_ref is None:
            onnx_ref = export_reranker_onnx(ref, precision)
        return OnnxCrossEncoder(onnx_ref, max_length, batch_size, source=ref)
    raise ValueError(f"unknown reranker backend {backend!r}")


class CachedCrossEncoder:
    """Raw scores cached by (model files hash, backend, max_length, library versions, query,
    document).

    ``batch_dependent``: the model's score of a pair depends on the other pairs of its batch
    (an int8 graph with dynamic quantisation takes one activation scale per batch tensor, and
    batches are formed by length), so a score computed in another run's batch is not what a
    fresh run computes: nothing is cached, neither on disk nor across calls, and every call
    scores its own pairs together, as a re-execution (``verify --rerun``) does."""

    def __init__(self, model: CrossEncoderBackend, cache: VectorCache | None,
                 backend: str, max_length: int, *, batch_dependent: bool = False) -> None:
        self.model = model
        self.batch_dependent = batch_dependent
        self.cache = None if batch_dependent else cache
        self._prefix = (model.ref.sha256, backend, str(max_length), library_versions(backend))
        self._memory: dict[str, float] = {}
        self.n_model = 0
        self.n_cached = 0
        self.model_seconds = 0.0

    def raw_scores(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        keys = [content_key(*self._prefix, q, d) for q, d in pairs]
        found = {k: self._memory[k] for k in keys if k in self._memory}
        todo = [k for k in dict.fromkeys(keys) if k not in found]
        if todo and self.cache is not None:
            disk = self.cache.get_scores(todo)
            found.update(disk)
            todo = [k for k in todo if k not in disk]
        self.n_cached += len(set(keys)) - len(todo)
        if todo:
            pair_of = dict(zip(keys, pairs, strict=False))
            t0 = time.perf_counter()
            vals = self.model.raw_scores([pair_of[k] for k in todo])
            self.model_seconds += time.perf_counter() - t0
            self.n_model += len(todo)
            fresh = dict(zip(todo, vals, strict=False))
            if self.cache is not None:
                self.cache.put_scores(fresh)
            found.update(fresh)
        if not self.batch_dependent:
            self._memory.update(found)
        return [found[k] for k in keys]
