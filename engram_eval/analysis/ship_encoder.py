"""Turn a trained dense encoder into a shipped model: an ONNX graph in the package, with a card.

``ship_encoder(model_dir, training_card, output)`` takes a ``train-encoder`` output (a
sentence-transformers model directory and its ``DIR.card.json``), checks that the directory
holds exactly the files the training card hashed, exports its transformer to ONNX
(:func:`engram_eval.retrieval.onnx_export.export_onnx`: output ``last_hidden_state``, pooling
recorded in ``export.json`` and applied by the ``onnx`` embedding backend) at the stored
precision (int8: the shipped reranker's scheme, :data:`SHIPPED_INT8_SCHEME` over
:data:`SHIPPED_INT8_OPS`), and writes ``output/`` with ``model.onnx``, ``tokenizer.json``,
``export.json``, ``config.json`` and ``card.json`` (name, version, role ``embedding``, stored
form, the source model's file hashes, the whole training card, what the version rests on,
and the sha256 of every other file, which :func:`engram_eval.retrieval.models.resolve_model`
checks on every use). A shipped encoder runs with ``--embedding-backend onnx`` at its stored
precision (``--embedding-precision``); the embedding cache keys its vectors by the model's
hash, so they never mix with another model's.

Nothing is overwritten; the output directory must not exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engram_eval.analysis.ship_reranker import (
    SHIPPED_INT8_OPS,
    SHIPPED_INT8_SCHEME,
    check_trained_files,
    ship_graph,
)
from engram_eval.errors import ConfigError, ProvenanceError

__all__ = ["SHIPPED_INT8_OPS", "SHIPPED_INT8_SCHEME", "ship_encoder"]


def ship_encoder(model_dir: str | Path, training_card: str | Path, output: str | Path, *,
                 name: str, version: str, chosen_by: str,
                 precision: str = "int8") -> dict[str, Any]:
    """See the module docstring; returns the card written to ``output/card.json``."""
    from engram_eval.retrieval.onnx_export import ONNX_PRECISIONS

    out = Path(output)
    if out.exists() or out.is_symlink():
        raise ProvenanceError(f"{out}: exists; shipping never overwrites")
    if precision not in ONNX_PRECISIONS:
        raise ConfigError(f"ship-encoder: precision {precision!r}; one of "
                          f"{list(ONNX_PRECISIONS)}")
    source, train_card = check_trained_files(model_dir, training_card, "embedding")
    if train_card.get("kind") != "engram-eval/encoder-card":
        raise ProvenanceError(f"{training_card}: not a train-encoder card")
    return ship_graph(source, train_card, out, task="embedding", precision=precision,
                      name=name, version=version, settings={}, chosen_by=chosen_by)
