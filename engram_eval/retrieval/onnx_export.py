"""Offline ONNX export (and int8 dynamic quantisation) of a sentence-transformers model.

The transformer of a local model directory (the bundled all-MiniLM-L6-v2, a path, a Hugging
Face cache snapshot: whatever :func:`engram_eval.retrieval.models.resolve_model` found) is exported
with ``torch.onnx`` to a graph whose output is ``last_hidden_state``; pooling stays in
:class:`~engram_eval.retrieval.embeddings.OnnxEmbedder`. Nothing is downloaded.

Exports are cached under ``<cache>/onnx/<source model sha256>/<variant>-<recipe>/`` where
``variant`` is ``fp32`` or ``int8-<scheme>`` and ``recipe`` hashes everything that shapes the
bytes (export code version, opset, torch/onnx/onnxruntime versions, quantisation settings).
Each directory holds ``model.onnx``, the source's ``tokenizer.json`` and a deterministic
``export.json``; it is created in a temporary directory and renamed into place, so readers
never see half an export and concurrent exporters do not clash. The directory is hashed
like any model directory and returned as a :class:`~engram_eval.retrieval.models.ModelRef` (role
``embedding-onnx``), which a run records among its models (so it is in the fingerprint).

A cross-encoder (``reranker-onnx``, :func:`export_reranker_onnx`): the model directory's
sequence-classification model (a sentence-transformers ``CrossEncoder`` directory is a Hugging
Face ``...ForSequenceClassification`` directory) exported whole, its output the ``logits``
``[batch, num_labels]``; same cache layout (variant ``cross-fp32`` / ``cross-int8-<scheme>``,
the recipe carrying ``task: sequence-classification``), same quantisation.

int8 scheme, from the CPU's instruction set (``/proc/cpuinfo`` flags):

* ``vnni`` (``avx512_vnni``, ``avx_vnni`` or ``amx_int8``): signed int8 weights (U8S8), the
  fast path of VNNI ``vpdpbusd``;
* ``avx2`` (AVX2 without VNNI): unsigned int8 weights (U8U8), which avoids the saturation of
  ``vpmaddubsw`` that ONNX Runtime's documentation warns about for U8S8 on such CPUs;
* ``generic``: unsigned int8 weights (U8U8).

Quantisation is dynamic (``onnxruntime.quantization.quantize_dynamic``, MatMul and Gemm
weights, per output channel); activations are quantised at run time. Per-channel weights
matter: on all-MiniLM-L6-v2 over 300 LongMemEval user turns (AVX2 machine), per-tensor
int8 vectors had mean cosine 0.87-0.98 to fp32, per-channel 0.993-0.994 (min 0.98).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import read_json_document
from engram_eval.errors import ConfigError, ModelUnavailableError
from engram_eval.io import atomic_write, remove_contained
from engram_eval.retrieval.models import ModelRef, hash_model_dir

#: Bump when the export or quantisation code changes what is written.
RECIPE_VERSION = 1
OPSET = 17
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
QUANT_SETTINGS: dict[str, dict[str, Any]] = {
    "vnni": {"weight_type": "QInt8", "reduce_range": False, "per_channel": True},
    "avx2": {"weight_type": "QUInt8", "reduce_range": False, "per_channel": True},
    "generic": {"weight_type": "QUInt8", "reduce_range": False, "per_channel": True},
}
ONNX_PRECISIONS = ("fp32", "int8")


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def int8_scheme(flags: frozenset[str] | None = None) -> str:
    """``vnni``, ``avx2`` or ``generic`` for the given (default: this machine's) CPU flags.
    ``ENGRAM_EVAL_INT8_SCHEME`` overrides (for reproducing another machine's variant)."""
    forced = os.environ.get("ENGRAM_EVAL_INT8_SCHEME")
    if forced:
        if forced not in QUANT_SETTINGS:
            raise ConfigError(f"ENGRAM_EVAL_INT8_SCHEME={forced!r}: must be one of "
                              f"{sorted(QUANT_SETTINGS)}")
        return forced
    flags = cpu_flags() if flags is None else flags
    if flags & VNNI_FLAGS:
        return "vnni"
    if "avx2" in flags:
        return "avx2"
    return "generic"


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "absent"


def _st_layout(model_dir: Path) -> tuple[Path, str, int, int]:
    """(transformer directory, pooling, max_seq_length, dim) of a sentence-transformers
    model directory; a plain transformers directory counts as mean pooling."""
    transformer = model_dir
    pooling_dir: Path | None = None
    modules = model_dir / "modules.json"
    if modules.is_file():
        for m in read_json_document(modules):
            kind = str(m.get("type", ""))
            if kind.endswith("Transformer"):
                transformer = model_dir / m.get("path", "")
            elif kind.endswith("Pooling"):
                pooling_dir = model_dir / m.get("path", "")
    pooling = "mean"
    if pooling_dir is not None and (pooling_dir / "config.json").is_file():
        conf = read_json_document(pooling_dir / "config.json")
        mode = conf.get("pooling_mode")  # sentence-transformers >= 6 writes one name
        mean = mode in ("mean", ["mean"]) or (mode is None
                                              and bool(conf.get("pooling_mode_mean_tokens")))
        cls = mode in ("cls", ["cls"]) or (mode is None
                                           and bool(conf.get("pooling_mode_cls_token")))
        if cls and not mean:
            pooling = "cls"
        elif not mean:
            raise ConfigError(f"{pooling_dir}/config.json: the onnx embedding backend supports "
                              "mean or CLS pooling only")
    max_len = 512
    for cfg in (transformer / "sentence_bert_config.json", model_dir / "sentence_bert_config.json"):
        if cfg.is_file():
            max_len = int(read_json_document(cfg).get("max_seq_length", 512))
            break
    conf = read_json_document(transformer / "config.json")
    max_len = min(max_len, int(conf.get("max_position_embeddings", max_len)))
    dim = int(conf.get("hidden_size") or conf.get("dim") or 0)
    if not (transformer / "tokenizer.json").is_file():
        raise ModelUnavailableError(f"{transformer}: tokenizer.json is missing; the onnx "
                                    "backend needs a fast-tokenizer file")
    return transformer, pooling, max_len, dim


def _ce_layout(model_dir: Path) -> tuple[Path, dict[str, Any]]:
    """(model directory, its config.json) of a cross-encoder: a Hugging Face
    sequence-classification directory, or a sentence-transformers directory whose only module
    is that Transformer."""
    transformer = model_dir
    modules = model_dir / "modules.json"
    if modules.is_file():
        mods = read_json_document(modules)
        other = [str(m.get("type", "")) for m in mods
                 if not str(m.get("type", "")).endswith("Transformer")]
        if other:
            raise ConfigError(f"{model_dir}: the onnx reranker backend supports "
                              f"sequence-classification cross-encoders only (modules {other})")
        for m in mods:
            transformer = model_dir / m.get("path", "")
    conf_file = transformer / "config.json"
    if not conf_file.is_file():
        raise ModelUnavailableError(f"{transformer}: config.json is missing")
    conf = read_json_document(conf_file)
    archs = [str(a) for a in conf.get("architectures") or []]
    if archs and not any(a.endswith("ForSequenceClassification") for a in archs):
        raise ConfigError(f"{transformer}: the onnx reranker backend needs a "
                          f"...ForSequenceClassification model, not {archs}")
    if not (transformer / "tokenizer.json").is_file():
        raise ModelUnavailableError(f"{transformer}: tokenizer.json is missing; the onnx "
                                    "backend needs a fast-tokenizer file")
    return transformer, conf


TASKS = ("embedding", "reranker")


def recipe(precision: str, scheme: str | None, task: str = "embedding") -> dict[str, Any]:
    """Everything that shapes the exported bytes, besides the source model."""
    r: dict[str, Any] = {"recipe_version": RECIPE_VERSION, "opset": OPSET,
                         "exporter": "torch.onnx.export(dynamo=False)",
                         "torch": _version("torch"), "onnx": _version("onnx"),
                         "onnxruntime": _version("onnxruntime"),
                         "transformers": _version("transformers"), "precision": precision}
    if task == "reranker":  # (embedding recipes keep their original keys, hence hashes)
        r["task"] = "sequence-classification"
    if precision == "int8":
        r["int8_scheme"] = scheme
        r["quantization"] = {"method": "onnxruntime.quantization.quantize_dynamic",
                             **QUANT_SETTINGS[str(scheme)]}
    return r


def export_dir(source: ModelRef, precision: str, cache_root: str | Path | None = None,
               scheme: str | None = None, task: str = "embedding") -> Path:
    from engram_eval.retrieval.cache import default_cache_dir

    if precision == "int8" and scheme is None:
        scheme = int8_scheme()
    rec = recipe(precision, scheme, task)
    key = hashlib.sha256(json.dumps(rec, sort_keys=True).encode()).hexdigest()[:16]
    variant = "fp32" if precision == "fp32" else f"int8-{scheme}"
    if task == "reranker":
        variant = f"cross-{variant}"
    root = Path(cache_root) if cache_root else default_cache_dir()
    return root / "onnx" / source.sha256 / f"{variant}-{key}"


def _export_fp32(transformer: Path, target: Path) -> None:
    import torch

    try:
        from transformers import AutoModel
    except ImportError as e:  # pragma: no cover - a dependency of sentence-transformers
        raise ImportError("transformers is required to export to ONNX") from e
    model = AutoModel.from_pretrained(str(transformer), local_files_only=True)
    model.eval()

    class _Hidden(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    ids = torch.ones((2, 8), dtype=torch.long)
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    axes = {"batch": 0, "sequence": 1}
    dyn = {n: {v: k for k, v in axes.items()}
           for n in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")}
    import warnings

    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent branches
        torch.onnx.export(_Hidden(model), args, str(target), dynamo=False,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], dynamic_axes=dyn,
                          opset_version=OPSET, do_constant_folding=True)


def _export_cross_fp32(model_dir: Path, target: Path) -> list[str]:
    """Export the sequence-classification model of ``model_dir`` (output ``logits``); returns
    the graph's input names (``token_type_ids`` only where the model takes it)."""
    import inspect
    import warnings

    import torch

    try:
        from transformers import AutoModelForSequenceClassification
    except ImportError as e:  # pragma: no cover - a dependency of sentence-transformers
        raise ImportError("transformers is required to export to ONNX") from e
    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir),
                                                               local_files_only=True)
    model.eval()
    params = inspect.signature(model.forward).parameters
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in params:
        names.append("token_type_ids")

    class _Logits(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            return self.inner(**dict(zip(names, inputs, strict=True))).logits

    ids = torch.ones((2, 8), dtype=torch.long)
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))[:len(names)]
    dyn: dict[str, dict[int, str]] = {n: {0: "batch", 1: "sequence"} for n in names}
    dyn["logits"] = {0: "batch"}
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent branches
        torch.onnx.export(_Logits(model), args, str(target), dynamo=False,
                          input_names=names, output_names=["logits"], dynamic_axes=dyn,
                          opset_version=OPSET, do_constant_folding=True)
    return names


#: Operators dynamic int8 quantisation covers: the weight matrices. A shipped graph also
#: quantises the token-embedding table (``Gather``), which is most of a small model's bytes.
QUANT_OPS = ("MatMul", "Gemm")


def _quantize(src: Path, target: Path, scheme: str,
              op_types: tuple[str, ...] = QUANT_OPS) -> None:
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as e:
        raise ImportError("onnxruntime is required for the onnx backend: "
                          "pip install 'onnxruntime>=1.17'") from e
    s = QUANT_SETTINGS[scheme]
    quantize_dynamic(str(src), str(target), weight_type=getattr(QuantType, s["weight_type"]),
                     reduce_range=s["reduce_range"], per_channel=s["per_channel"],
                     op_types_to_quantize=list(op_types))


def export_onnx(source: ModelRef, precision: str = "fp32",
                cache_root: str | Path | None = None, scheme: str | None = None,
                task: str = "embedding") -> ModelRef:
    """Export (once; cached) and return the ONNX model for ``source`` at ``precision``:
    ``task`` ``embedding`` (the transformer, role ``embedding-onnx``) or ``reranker`` (the
    sequence-classification model, role ``reranker-onnx``)."""
    if task not in TASKS:
        raise ValueError(f"unknown onnx export task {task!r}")
    field = "embedding_precision" if task == "embedding" else "reranker_precision"
    if precision not in ONNX_PRECISIONS:
        raise ConfigError(f"config field {field}={precision!r}: the onnx backend "
                          f"supports {list(ONNX_PRECISIONS)}")
    for mod, pin in (("onnxruntime", "onnxruntime>=1.17"), ("onnx", "onnx>=1.15")):
        try:
            __import__(mod)
        except ImportError as e:
            raise ImportError(f"{mod} is required for the onnx {task} backend (a core "
                              f"dependency of engram-eval): pip install '{pin}'") from e
    if precision == "int8" and scheme is None:
        scheme = int8_scheme()
    final = export_dir(source, precision, cache_root, scheme, task)
    if not (final / "export.json").is_file():
        info: dict[str, Any] = {"source_sha256": source.sha256, "source_name": source.name}
        if task == "embedding":
            transformer, pooling, max_len, dim = _st_layout(Path(source.path))
            info.update(pooling=pooling, max_seq_length=max_len, dim=dim)
        else:
            transformer, conf = _ce_layout(Path(source.path))
            info.update(task="sequence-classification",
                        num_labels=int(conf.get("num_labels")
                                       or len(conf.get("id2label") or {}) or 1),
                        max_position_embeddings=int(conf.get("max_position_embeddings", 512)))
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=final.parent))
        try:
            if precision == "fp32" and task == "embedding":
                _export_fp32(transformer, tmp / "model.onnx")
            elif precision == "fp32":
                info["input_names"] = _export_cross_fp32(transformer, tmp / "model.onnx")
            else:
                base = export_onnx(source, "fp32", cache_root, task=task)
                _quantize(Path(base.path) / "model.onnx", tmp / "model.onnx", str(scheme))
                if task == "reranker":
                    base_info = read_json_document(Path(base.path) / "export.json")
                    info["input_names"] = base_info["input_names"]
            shutil.copyfile(transformer / "tokenizer.json", tmp / "tokenizer.json")
            info["recipe"] = recipe(precision, scheme, task)
            atomic_write(tmp / "export.json", json.dumps(info, indent=2, sort_keys=True) + "\n")
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / "export.json").is_file():
                    raise
                # another process finished the same export first: keep theirs
        finally:  # our temporary directory, unless renamed into place
            remove_contained(tmp, final.parent, ignore_errors=True)
    files, combined = hash_model_dir(final)
    variant = final.name.rsplit("-", 1)[0]
    role = "embedding-onnx" if task == "embedding" else "reranker-onnx"
    return ModelRef(role, f"{source.name} [onnx {variant}]", str(final),
                    f"onnx-export:{source.sha256}", final.name, files, combined)


def export_reranker_onnx(source: ModelRef, precision: str = "fp32",
                         cache_root: str | Path | None = None,
                         scheme: str | None = None) -> ModelRef:
    """:func:`export_onnx` of a cross-encoder (role ``reranker-onnx``)."""
    return export_onnx(source, precision, cache_root, scheme, task="reranker")


def prepare_embedding_backend(backend: str, source: ModelRef | None, precision: str,
                              cache_root: str | Path | None = None) -> ModelRef | None:
    """Check backend/precision and, for ``onnx``, export (or find) the model *before* a run's
    provenance is assembled, so the exported file's hash is recorded. None otherwise, and
    for a model that already is an ONNX graph (a shipped encoder,
    :func:`preexported_precision`): it needs the ``onnx`` backend at its own precision and
    is recorded as itself."""
    stored = preexported_precision(source) if source is not None else None
    if stored is not None and source is not None:  # a shipped encoder: its graph as it is
        if backend != "onnx" or precision != stored:
            raise ConfigError(f"embedding model {source.name!r} is stored as an ONNX {stored} "
                              f"graph: it runs with --embedding-backend onnx "
                              f"--embedding-precision {stored} only (asked: {backend}, "
                              f"{precision})")
        return None
    if precision == "int8" and backend != "onnx":
        raise ConfigError("config field embedding_precision=int8 needs embedding_backend=onnx "
                          "(dynamic int8 quantisation)")
    if backend != "onnx" or source is None:
        return None
    return export_onnx(source, precision, cache_root or None)


def preexported_precision(model: ModelRef) -> str | None:
    """The precision of a model directory that already holds an exported ONNX graph
    (``model.onnx`` and its ``export.json``, as the shipped reranker does), else None."""
    d = Path(model.path)
    if not (d / "model.onnx").is_file():
        return None
    try:
        info = read_json_document(d / "export.json")
        return str(info["recipe"]["precision"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelUnavailableError(f"{d / 'export.json'}: cannot read the ONNX graph's "
                                    f"export record: {e}") from None


def prepare_reranker_backend(backend: str, source: ModelRef | None, precision: str,
                             cache_root: str | Path | None = None) -> ModelRef | None:
    """As :func:`prepare_embedding_backend`, for the cross-encoder (``reranker_backend``,
    ``reranker_precision``): the exported model for ``onnx``, None otherwise. A model that
    already is an ONNX graph (:func:`preexported_precision`) is used as it is: it needs the
    ``onnx`` backend and its own precision, and returns None (nothing else to record)."""
    stored = preexported_precision(source) if source is not None else None
    if stored is not None and source is not None:
        if backend != "onnx" or precision != stored:
            raise ConfigError(f"reranker model {source.name!r} is stored as an ONNX {stored} "
                              f"graph: it runs with reranker_backend=onnx and "
                              f"reranker_precision={stored} only (asked: {backend}, "
                              f"{precision})")
        return None
    if precision == "int8" and backend != "onnx":
        raise ConfigError("config field reranker_precision=int8 needs reranker_backend=onnx "
                          "(dynamic int8 quantisation)")
    if backend != "onnx" or source is None:
        return None
    return export_reranker_onnx(source, precision, cache_root or None)
