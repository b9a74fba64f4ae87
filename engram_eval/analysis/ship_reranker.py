"""Turn a trained cross-encoder into a shipped model: an ONNX graph in the package, with a card.

``ship(model_dir, training_card, output)`` takes a ``train-reranker`` output (a fine-tuned
sequence-classification model and its ``DIR.card.json``), checks that the directory holds
exactly the files the training card hashed (so the shipped model is the one the card
describes), exports it to ONNX at the stored precision (:mod:`engram_eval.retrieval.onnx_export`,
int8: dynamic quantisation with unsigned int8 weights per output channel, the scheme that is
correct on every x86 CPU, VNNI or not), and writes ``output/`` with:

* ``model.onnx``, ``tokenizer.json``, ``config.json`` and ``export.json`` (the export recipe:
  exporter, opset, library versions, quantisation settings);
* ``card.json``: the shipped model's name and version, its role, the stored form, the source
  model's file hashes, the whole training card (parts and their hashes, base model hash,
  settings, pair counts, loss curve, output file hashes), the ``settings`` it was chosen with
  (applied by ``run --rerank`` to every rerank field not given explicitly:
  :func:`engram_eval.retrieval.settings.apply_model_card`), what those choices rest on, and the
  sha256 of every other file in the directory, which
  :func:`engram_eval.retrieval.models.resolve_model` checks on every use.

Nothing is overwritten; the output directory must not exist.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import read_json_document
from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.io import atomic_write, remove_contained

#: The int8 scheme of a shipped graph: U8U8 (correct with and without VNNI).
SHIPPED_INT8_SCHEME = "generic"
#: What a shipped int8 graph quantises: the weight matrices and the token-embedding table
#: (MiniLM's 30,522 x 384 table is 45 MiB in fp32, the rest 11 MiB in int8).
SHIPPED_INT8_OPS = ("MatMul", "Gemm", "Gather")


def _check_new(out: Path, settings: Mapping[str, Any]) -> None:
    """Refuse an existing output and settings a card may not choose."""
    from engram_eval.retrieval.settings import CARD_FIELDS, STRUCTURE_RERANK_FIELDS

    if out.exists() or out.is_symlink():
        raise ProvenanceError(f"{out}: exists; shipping never overwrites")
    unknown = sorted(set(settings) - set(CARD_FIELDS) - {"people_overrides"})
    if unknown:
        raise ConfigError(f"ship: settings {unknown} are not rerank fields a card may choose "
                          f"({list(CARD_FIELDS)} and people_overrides)")
    bad_people = sorted(set(settings.get("people_overrides") or {})
                        - set(STRUCTURE_RERANK_FIELDS))
    if bad_people:
        raise ConfigError(f"ship: people_overrides {bad_people} are not per-structure rerank "
                          f"fields ({list(STRUCTURE_RERANK_FIELDS)})")


def ship_settings_version(base: str, output: str | Path, *, name: str, version: str,
                          settings: Mapping[str, Any], chosen_by: str) -> dict[str, Any]:
    """A new version of the shipped model ``base`` that changes only the settings it is run
    with: ``output/`` holds one ``card.json`` with ``weights_from: base``, ``base``'s form,
    source model, training card and file hashes (checked on every use against ``base``'s
    files, so the weights are exactly those), and its own ``settings`` and ``chosen_by``.
    ``base`` keeps its card, so runs made with it still re-execute."""
    from engram_eval.retrieval.models import SHIPPED_ROOT, read_card, resolve_model

    out = Path(output)
    _check_new(out, settings)
    resolve_model(base, "reranker")  # present and intact
    b = read_card(SHIPPED_ROOT / base)
    if b.get("weights_from"):
        raise ConfigError(f"ship: {base!r} is itself a settings-only version; name the model "
                          f"whose files it uses ({b['weights_from']!r})")
    kept = ("kind", "role", "form", "source_model", "training_card", "files")
    card: dict[str, Any] = {k: b[k] for k in kept if k in b}
    card.update({"name": name, "version": version, "weights_from": base,
                 "settings": dict(settings), "settings_chosen_by": chosen_by})
    return write_model_dir(out, lambda _tmp: card)


def ship(model_dir: str | Path, training_card: str | Path, output: str | Path, *, name: str,
         version: str, settings: Mapping[str, Any], chosen_by: str,
         precision: str = "int8") -> dict[str, Any]:
    """See the module docstring; returns the card written to ``output/card.json``."""
    out = Path(output)
    _check_new(out, settings)
    source, train_card = check_trained_files(model_dir, training_card, "reranker")
    return ship_graph(source, train_card, out, task="reranker", precision=precision,
                      name=name, version=version, settings=settings, chosen_by=chosen_by)


def ship_graph(source: Any, train_card: dict[str, Any], out: Path, *, task: str,
               precision: str, name: str, version: str, settings: Mapping[str, Any],
               chosen_by: str) -> dict[str, Any]:
    """Export the checked trained model ``source`` (task ``reranker`` or ``embedding``, also
    the card's role) to fp32 ONNX in scratch, then write ``out/`` whole: the graph at the
    stored precision, its tokenizer, export record and config, and the card."""
    from engram_eval.retrieval.models import SHIPPED_CARD_KIND, hash_model_dir
    from engram_eval.retrieval.onnx_export import export_onnx

    with tempfile.TemporaryDirectory(prefix="engram-ship-") as scratch:
        exported = Path(export_onnx(source, "fp32", scratch, task=task).path)

        def fill(tmp: Path) -> dict[str, Any]:
            form = write_onnx_files(exported, tmp, precision, task)
            shutil.copyfile(Path(source.path) / "config.json", tmp / "config.json")
            files, _ = hash_model_dir(tmp)
            return {
                "kind": SHIPPED_CARD_KIND, "name": name, "version": version,
                "role": task, "form": form,
                "source_model": source.to_json(with_path=False),
                "training_card": train_card,
                "settings": dict(settings), "settings_chosen_by": chosen_by,
                "files": files,
            }

        return write_model_dir(out, fill)


def check_trained_files(model_dir: str | Path, training_card: str | Path, role: str
                        ) -> tuple[Any, dict[str, Any]]:
    """(the resolved model, its training card) after checking that the directory holds
    exactly the files the training card hashed, so the shipped model is the one the card
    describes."""
    from engram_eval.retrieval.models import resolve_model

    train_card = read_json_document(Path(training_card))
    source = resolve_model(str(model_dir), role)
    trained = {k: v for k, v in (train_card.get("output_files") or {}).items()
               if k != "README.md"}  # sentence-transformers' README states the wall time
    hashed = {k: v for k, v in source.files_sha256.items() if k in trained}
    if not trained or hashed != trained:
        differ = sorted(k for k in set(trained) | set(hashed) if trained.get(k) != hashed.get(k))
        raise ProvenanceError(f"{model_dir}: its files are not the ones {training_card} "
                              f"hashed (differing: {', '.join(differ[:5]) or 'none listed'})")
    return source, train_card


def write_onnx_files(exported: Path, tmp: Path, precision: str, task: str) -> dict[str, Any]:
    """Copy an fp32 export (``model.onnx``, ``tokenizer.json``, ``export.json``) into ``tmp``
    at the stored ``precision`` (int8: :data:`SHIPPED_INT8_SCHEME` over
    :data:`SHIPPED_INT8_OPS`); returns the card's ``form``."""
    from engram_eval.retrieval.onnx_export import _quantize, recipe

    export_info = read_json_document(exported / "export.json")
    if precision == "int8":
        _quantize(exported / "model.onnx", tmp / "model.onnx", SHIPPED_INT8_SCHEME,
                  SHIPPED_INT8_OPS)
        rec = recipe("int8", SHIPPED_INT8_SCHEME, task)
        rec["quantization"]["op_types"] = list(SHIPPED_INT8_OPS)
        export_info["recipe"] = rec
    else:
        shutil.copyfile(exported / "model.onnx", tmp / "model.onnx")
    shutil.copyfile(exported / "tokenizer.json", tmp / "tokenizer.json")
    atomic_write(tmp / "export.json", json.dumps(export_info, indent=2, sort_keys=True) + "\n")
    return {"format": "onnx", "precision": precision, "recipe": export_info.get("recipe")}


def write_model_dir(out: Path, fill: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Create the shipped model directory ``out`` whole or not at all: a temporary sibling
    directory is filled by ``fill`` (which writes the model files and returns the card), the
    card is written into it, every file made readable by all users (package data), and the
    directory renamed into place. Returns the card."""
    from engram_eval.retrieval.models import CARD_FILE

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    tmp.chmod(0o755)
    try:
        card = fill(tmp)
        atomic_write(tmp / CARD_FILE, json.dumps(card, indent=2, sort_keys=True) + "\n")
        for f in tmp.iterdir():
            f.chmod(0o644)
        tmp.rename(out)
    finally:  # our temporary directory (already renamed into place: nothing to do)
        remove_contained(tmp, out.parent)
    return card
