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

from engram_eval.errors import ConfigError, ModelUnavailableError
from engram_eval.io import atomic_write
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
        for m in json.loads(modules.read_text(encoding="utf-8")):
            kind = str(m.get("type", ""))
            if kind.endswith("Transformer"):
                transformer = model_dir / m.get("path", "")
            elif kind.endswith("Pooling"):
                pooling_dir = model_dir / m.get("path", "")
    pooling = "mean"
    if pooling_dir is not None and (pooling_dir / "config.json").is_file():
        conf = json.loads((pooling_dir / "config.json").read_text(encoding="utf-8"))
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
            max_len = int(json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length", 512))
            break
    conf = json.loads((transformer / "config.json").read_text(encoding="utf-8"))
    max_len = min(max_len, int(conf.get("max_position_embeddings", max_len)))
    dim = int(conf.get("hidden_size") or conf.get("dim") or 0)
    if not (transformer / "tokenizer.json").is_file():
        raise ModelUnavailableError(f"{transformer}: tokenizer.json is missing; the onnx "
                                    "backend needs a fast-tokenizer file")
    return transformer, pooling, max_len, dim


def recipe(precision: str, scheme: str | None) -> dict[str, Any]:
    """Everything that shapes the exported bytes, besides the source model."""
    r: dict[str, Any] = {"recipe_version": RECIPE_VERSION, "opset": OPSET,
                         "exporter": "torch.onnx.export(dynamo=False)",
                         "torch": _version("torch"), "onnx": _version("onnx"),
                         "onnxruntime": _version("onnxruntime"),
                         "transformers": _version("transformers"), "precision": precision}
    if precision == "int8":
        r["int8_scheme"] = scheme
        r["quantization"] = {"method": "onnxruntime.quantization.quantize_dynamic",
                             **QUANT_SETTINGS[str(scheme)]}
    return r


def export_dir(source: ModelRef, precision: str, cache_root: str | Path | None = None,
               scheme: str | None = None) -> Path:
    from engram_eval.retrieval.cache import default_cache_dir

    if precision == "int8" and scheme is None:
        scheme = int8_scheme()
    rec = recipe(precision, scheme)
    key = hashlib.sha256(json.dumps(rec, sort_keys=True).encode()).hexdigest()[:16]
    variant = "fp32" if precision == "fp32" else f"int8-{scheme}"
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


def _quantize(src: Path, target: Path, scheme: str) -> None:
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as e:
        raise ImportError("onnxruntime is required for the onnx backend: "
                          "pip install 'onnxruntime>=1.17'") from e
    s = QUANT_SETTINGS[scheme]
    quantize_dynamic(str(src), str(target), weight_type=getattr(QuantType, s["weight_type"]),
                     reduce_range=s["reduce_range"], per_channel=s["per_channel"],
                     op_types_to_quantize=["MatMul", "Gemm"])


def export_onnx(source: ModelRef, precision: str = "fp32",
                cache_root: str | Path | None = None, scheme: str | None = None) -> ModelRef:
    """Export (once; cached) and return the ONNX model for ``source`` at ``precision``."""
    if precision not in ONNX_PRECISIONS:
        raise ConfigError(f"config field embedding_precision={precision!r}: the onnx backend "
                          f"supports {list(ONNX_PRECISIONS)}")
    for mod, pin in (("onnxruntime", "onnxruntime>=1.17"), ("onnx", "onnx>=1.15")):
        try:
            __import__(mod)
        except ImportError as e:
            raise ImportError(f"{mod} is required for the onnx embedding backend (a core "
                              f"dependency of engram-eval): pip install '{pin}'") from e
    if precision == "int8" and scheme is None:
        scheme = int8_scheme()
    final = export_dir(source, precision, cache_root, scheme)
    if not (final / "export.json").is_file():
        transformer, pooling, max_len, dim = _st_layout(Path(source.path))
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=final.parent))
        try:
            if precision == "fp32":
                _export_fp32(transformer, tmp / "model.onnx")
            else:
                base = export_onnx(source, "fp32", cache_root)
                _quantize(Path(base.path) / "model.onnx", tmp / "model.onnx", str(scheme))
            shutil.copyfile(transformer / "tokenizer.json", tmp / "tokenizer.json")
            info = {"source_sha256": source.sha256, "source_name": source.name,
                    "pooling": pooling, "max_seq_length": max_len, "dim": dim,
                    "recipe": recipe(precision, scheme)}
            atomic_write(tmp / "export.json", json.dumps(info, indent=2, sort_keys=True) + "\n")
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / "export.json").is_file():
                    raise
                # another process finished the same export first: keep theirs
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    files, combined = hash_model_dir(final)
    variant = final.name.rsplit("-", 1)[0]
    return ModelRef("embedding-onnx", f"{source.name} [onnx {variant}]", str(final),
                    f"onnx-export:{source.sha256}", final.name, files, combined)


def prepare_embedding_backend(backend: str, source: ModelRef | None, precision: str,
                              cache_root: str | Path | None = None) -> ModelRef | None:
    """Check backend/precision and, for ``onnx``, export (or find) the model *before* a run's
    provenance is assembled, so the exported file's hash is recorded. None otherwise."""
    if precision == "int8" and backend != "onnx":
        raise ConfigError("config field embedding_precision=int8 needs embedding_backend=onnx "
                          "(dynamic int8 quantisation)")
    if backend != "onnx" or source is None:
        return None
    return export_onnx(source, precision, cache_root or None)
