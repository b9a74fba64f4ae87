"""Embedding backends behind one interface, plus caching.

Backends (``--embedding-backend``): ``sentence_transformers`` (default),
``flag_embedding`` (FlagEmbedding's ``FlagModel`` for BGE models) and ``onnx`` (ONNX Runtime
over a graph exported offline from the same model files, see :mod:`.onnx_export`). All
return L2-normalised float32 vectors. Precision ``bf16`` runs the torch forward pass under
CPU bfloat16 autocast; ``fp32`` runs it in float32; ``int8`` (``onnx`` only) runs a
dynamically quantised graph whose scheme is chosen for the CPU's instruction set. Heavy
libraries are imported on first use.

:class:`CachedEncoder` encodes each distinct text once per process (memory) and across
processes (the on-disk :class:`~engram_eval.retrieval.cache.VectorCache`), and accounts the time
spent inside the model so benchmarks can report inference vs everything else.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, Protocol

import numpy as np

from engram_eval.data._jsonio import read_json_document
from engram_eval.retrieval.cache import VectorCache, content_key, library_versions
from engram_eval.retrieval.models import ModelRef


def _import(module: str, package: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{module} is required for this backend: pip install {package}") from e


class Embedder(Protocol):
    ref: ModelRef
    precision: str

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return an (n, dim) float32 array of L2-normalised embeddings, in input order."""
        ...


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(x / norms, dtype=np.float32)


def _autocast(precision: str) -> Any:
    if precision == "bf16":
        torch = _import("torch", "torch")
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return nullcontext()


class _LocalEmbedder:
    """Shared state of the embedding backends: the resolved model, precision, batch size;
    the model itself is loaded on first use by the subclass's ``load``."""

    def __init__(self, ref: ModelRef, precision: str = "fp32", batch_size: int = 64) -> None:
        self.ref = ref
        self.precision = precision
        self.batch_size = batch_size
        self._model: Any = None


class SentenceTransformersEmbedder(_LocalEmbedder):
    """sentence-transformers ``SentenceTransformer`` loaded from a local directory."""

    backend = "sentence_transformers"

    def load(self) -> Any:
        if self._model is None:
            st = _import("sentence_transformers", "sentence-transformers")
            self._model = st.SentenceTransformer(self.ref.path, device="cpu",
                                                 local_files_only=True)
        return self._model

    @property
    def max_seq_length(self) -> int:
        return int(self.load().max_seq_length)

    def tokenizer(self) -> Any:
        return self.load().tokenizer

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        model = self.load()
        if not texts:
            return np.zeros((0, model.get_sentence_embedding_dimension()), dtype=np.float32)
        torch = _import("torch", "torch")
        with torch.inference_mode(), _autocast(self.precision):
            out = model.encode(list(texts), batch_size=self.batch_size, convert_to_tensor=True,
                               show_progress_bar=False, normalize_embeddings=False)
        return _normalise(out.float().cpu().numpy())


def pooling_method(model_dir: str) -> str:
    """The pooling a sentence-transformers model directory declares (``1_Pooling``), as
    FlagEmbedding names it: ``mean`` or ``cls``. BGE models (no pooling file) use ``cls``."""
    from pathlib import Path

    cfg = Path(model_dir) / "1_Pooling" / "config.json"
    if cfg.is_file():
        conf = read_json_document(cfg)
        if conf.get("pooling_mode_mean_tokens"):
            return "mean"
    return "cls"


class FlagEmbeddingEmbedder(_LocalEmbedder):
    """FlagEmbedding ``FlagModel`` (BGE embedding models) loaded from a local directory."""

    backend = "flag_embedding"

    def load(self) -> Any:
        if self._model is None:
            fe = _import("FlagEmbedding", "FlagEmbedding")
            self._model = fe.FlagModel(self.ref.path, use_fp16=False, devices=["cpu"],
                                       normalize_embeddings=True,
                                       pooling_method=pooling_method(self.ref.path))
        return self._model

    @property
    def max_seq_length(self) -> int:
        return int(getattr(self.load(), "passage_max_length", 512))

    def tokenizer(self) -> Any:
        return self.load().tokenizer

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        model = self.load()
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        torch = _import("torch", "torch")
        with torch.inference_mode(), _autocast(self.precision):
            out = model.encode(list(texts), batch_size=self.batch_size,
                               convert_to_numpy=True)
        return _normalise(np.asarray(out, dtype=np.float32))


class OnnxEmbedder(_LocalEmbedder):
    """ONNX Runtime over the transformer exported from a sentence-transformers model
    directory (:func:`engram_eval.retrieval.onnx_export.export_onnx`), with the model's own
    tokenizer (``tokenizer.json``, truncated at its ``max_seq_length``) and pooling (mean or
    CLS) computed here. ``ref`` is the *exported* model (its hash is what the cache keys
    and the run records); ``source`` is the model it was exported from."""

    backend = "onnx"

    def __init__(self, ref: ModelRef, precision: str = "fp32", batch_size: int = 64,
                 source: ModelRef | None = None, threads: int = 0,
                 isolated: bool = False) -> None:
        super().__init__(ref, precision, batch_size)
        self.source = source
        # int8 graphs quantise activations per call: one text per call makes its vector
        # independent of the texts beside it (``embedding_batch_isolated``)
        self.isolated = isolated and precision == "int8"
        self.threads = threads
        self._tok: Any = None
        self._info: dict[str, Any] = {}

    def load(self) -> Any:
        if self._model is None:
            from pathlib import Path

            ort = _import("onnxruntime", "'onnxruntime>=1.17'")
            tokenizers = _import("tokenizers", "tokenizers")
            d = Path(self.ref.path)
            self._info = read_json_document(d / "export.json")
            opts = ort.SessionOptions()
            if self.threads:
                opts.intra_op_num_threads = self.threads
            self._model = ort.InferenceSession(str(d / "model.onnx"), opts,
                                               providers=["CPUExecutionProvider"])
            tok = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
            tok.enable_truncation(max_length=int(self._info["max_seq_length"]))
            tok.no_padding()
            self._tok = tok
        return self._model

    @property
    def max_seq_length(self) -> int:
        self.load()
        return int(self._info["max_seq_length"])

    def tokenizer(self) -> Any:
        self.load()
        return self._tok

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        session = self.load()
        dim = int(self._info["dim"])
        if not texts:
            return np.zeros((0, dim), dtype=np.float32)
        names = {i.name for i in session.get_inputs()}
        enc = self._tok.encode_batch([str(t).strip() for t in texts])
        out = np.zeros((len(enc), dim), dtype=np.float32)
        size = 1 if self.isolated else self.batch_size
        for idx, feeds, mask in padded_batches(enc, size, names):
            hidden = session.run(["last_hidden_state"], feeds)[0]
            out[idx] = _pool(hidden, mask, self._info["pooling"])
        return _normalise(out)


def padded_batches(enc: Sequence[Any], batch_size: int, names: set[str]
                   ) -> Iterator[tuple[list[int], dict[str, np.ndarray], np.ndarray]]:
    """ONNX Runtime feeds for tokenizer encodings ``enc``, ``batch_size`` at a time, longest
    first (as sentence-transformers does, so each batch pads little): ``(rows of enc, feeds,
    attention mask)``, the feeds (``input_ids``, ``attention_mask``, ``token_type_ids``) kept
    only where the graph has that input (``names``). Shared by the ONNX embedder and
    cross-encoder."""
    order = sorted(range(len(enc)), key=lambda i: -len(enc[i].ids))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        width = max(len(enc[i].ids) for i in idx)
        ids = np.zeros((len(idx), width), dtype=np.int64)
        mask = np.zeros((len(idx), width), dtype=np.int64)
        types = np.zeros((len(idx), width), dtype=np.int64)
        for r, i in enumerate(idx):
            n = len(enc[i].ids)
            ids[r, :n] = enc[i].ids
            mask[r, :n] = 1
            types[r, :n] = enc[i].type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        yield idx, {k: v for k, v in feeds.items() if k in names}, mask


def _pool(hidden: np.ndarray, mask: np.ndarray, method: str) -> np.ndarray:
    if method == "cls":
        return np.asarray(hidden[:, 0, :], dtype=np.float32)
    m = mask[:, :, None].astype(np.float32)
    summed = (hidden.astype(np.float32) * m).sum(axis=1)
    return summed / np.clip(m.sum(axis=1), 1e-9, None)


def make_embedder(backend: str, ref: ModelRef, precision: str, batch_size: int,
                  onnx_ref: ModelRef | None = None, isolated: bool = False) -> Embedder:
    """The embedder of ``backend``; for ``onnx``, ``onnx_ref`` is the exported model
    (:func:`engram_eval.retrieval.onnx_export.prepare_embedding_backend`), exported on the
    spot when not given. ``isolated``: an int8 graph encodes one text per call
    (``embedding_batch_isolated``)."""
    if precision == "int8" and backend != "onnx":
        from engram_eval.errors import ConfigError

        raise ConfigError("config field embedding_precision=int8 needs "
                          "embedding_backend=onnx (dynamic int8 quantisation)")
    if backend == "sentence_transformers":
        return SentenceTransformersEmbedder(ref, precision, batch_size)
    if backend == "flag_embedding":
        return FlagEmbeddingEmbedder(ref, precision, batch_size)
    if backend == "onnx":
        from engram_eval.retrieval.onnx_export import export_onnx, preexported_precision

        if onnx_ref is None and preexported_precision(ref) is not None:
            onnx_ref = ref  # a shipped encoder: already the graph (checked by its card)
        if onnx_ref is None:
            onnx_ref = export_onnx(ref, precision)
        return OnnxEmbedder(onnx_ref, precision, batch_size, source=ref, isolated=isolated)
    raise ValueError(f"unknown embedding backend {backend!r}")


class CachedEncoder:
    """Encode texts through an embedder, each distinct text at most once.

    Lookup order: process memory, then the on-disk cache (when given), then the model.
    Counters: ``n_model`` texts encoded by the model, ``n_disk`` found on disk,
    ``n_memory`` found in memory; ``model_seconds`` wall time inside the model.
    """

    def __init__(self, embedder: Embedder, cache: VectorCache | None = None,
                 backend: str = "") -> None:
        self.embedder = embedder
        self.cache = cache
        self._prefix: tuple[str, ...] = (embedder.ref.sha256, embedder.precision, backend or "",
                                         library_versions(backend or "sentence_transformers"))
        if getattr(embedder, "isolated", False):  # other vectors than a batched int8 graph's
            self._prefix += ("isolated",)
        self._memory: dict[str, np.ndarray] = {}
        self._dim: int | None = None  # the model's, once it has encoded something
        self.n_model = 0
        self.n_disk = 0
        self.n_memory = 0
        self.model_seconds = 0.0

    def key(self, text: str) -> str:
        return content_key(*self._prefix, text)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) vectors of ``texts``. The disk cache validates what it returns
        (:meth:`VectorCache.get_vectors`, with the model's dimension once known); a cached
        vector whose dimension turns out to differ from the model's is rejected there
        (a warning) and encoded again, never stacked with the model's."""
        keys = [self.key(t) for t in texts]
        text_of = dict(zip(keys, texts, strict=False))
        found: dict[str, np.ndarray] = {}
        todo: list[str] = []
        for k in dict.fromkeys(keys):
            if k in self._memory:
                found[k] = self._memory[k]
                self.n_memory += 1
            else:
                todo.append(k)
        if todo and self.cache is not None:
            disk = self.cache.get_vectors(todo, dim=self._dim)
            self.n_disk += len(disk)
            found.update(disk)
            self._memory.update(disk)
            todo = [k for k in todo if k not in disk]
        if todo:
            found.update(self._compute(todo, text_of))
            odd = {k: f"dimension {v.shape[0]}, the model's is {self._dim}"
                   for k, v in found.items() if v.shape[0] != self._dim}
            if odd:  # read from the cache before the model's dimension was known
                if self.cache is not None:
                    self.cache.reject("vec", odd)
                found.update(self._compute(list(odd), text_of))
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    def _compute(self, todo: list[str], text_of: Mapping[str, str]) -> dict[str, np.ndarray]:
        """Encode the texts of ``todo`` with the model (learning its dimension), and keep
        the vectors in memory and in the disk cache."""
        t0 = time.perf_counter()
        vecs = self.embedder.encode([text_of[k] for k in todo])
        self.model_seconds += time.perf_counter() - t0
        self.n_model += len(todo)
        self._dim = int(vecs.shape[1])
        fresh = {k: vecs[i] for i, k in enumerate(todo)}
        if self.cache is not None:
            self.cache.put_vectors(fresh)
        self._memory.update(fresh)
        return fresh
