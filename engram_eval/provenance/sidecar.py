"""Run provenance: the metadata sidecar, its fingerprint, output claiming, resume checks.

Sidecar ``<output>.metadata.json`` (schema ``schemas/sidecar.schema.json``) records the
dataset (path, size, sha256), the sha256 of every source file that can change a ranking
or a metric (:func:`engram_eval.provenance.sources.run_sources`), the models (names,
revisions, per-file hashes), package versions, Python/platform/hardware, the full effective
configuration and the selection.

``fingerprint`` = sha256 of the canonical JSON (sorted keys, no whitespace) of the
*defining* parts, :data:`FINGERPRINT_FIELDS`:

* ``schema_version``, ``dataset.sha256`` and ``dataset.size``, ``dataset_format``;
* ``retriever`` (the backend's effective settings) and ``config`` restricted to the
  fields marked as defining (see :mod:`engram_eval.runs.config`);
* ``protocols``, ``selection`` (``question_ids``, ``limit`` and the resulting ordered ids);
* ``sources`` (relative path -> sha256), ``models`` (without their local paths),
  ``packages`` (versions).

Not in the fingerprint: dataset path, host name, timestamps, wall times, cache location
and use, batch size, Python build and platform (recorded under ``environment`` and
``runs``).
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import load_schema
from engram_eval.errors import ProvenanceError
from engram_eval.io import input_problem, package_root, sha256_file, sha256_json
from engram_eval.provenance.records import (  # noqa: F401  (re-exported: the record kernel)
    claim_output,
    diff,
    read_meta,
    record_run,
    refuse_other_run,
    sidecar_path,
    summary_path,
)
from engram_eval.provenance.sources import run_sources

SCHEMA_VERSION = 1
FINGERPRINT_FIELDS = ("schema_version", "dataset", "dataset_format", "retriever", "config",
                      "protocols", "selection", "sources", "models", "packages")
PACKAGES = ("engram-eval", "torch", "sentence-transformers", "faiss-cpu", "FlagEmbedding",
            "rank-bm25", "numpy", "transformers", "tokenizers", "jsonschema")

# Allow-lists: every key a run's sidecar may hold, by section. ``verify`` and ``--resume``
# refuse any other key (:mod:`engram_eval.runs.known_fields`); the writers are
# :func:`build_metadata` and the few places named below, and tests/runs/test_verify.py checks that
# everything they write is listed here.
#: Top level: what :func:`build_metadata` writes, plus ``frozen_source`` (the runner, for a
#: run under a frozen manifest) and ``heldout_questions`` (the runner, for a run of a split's
#: source: :func:`engram_eval.provenance.guard.source_label`).
SIDECAR_FIELDS = ("schema_version", "kind", "dataset", "dataset_format", "retriever",
                  "config", "config_recorded", "confidence_filter", "protocols", "selection",
                  "sources", "models", "packages", "environment", "created_at",
                  "fingerprint_fields", "runs", "fingerprint", "frozen_source",
                  "heldout_questions")
DATASET_FIELDS = ("path", "name", "size", "sha256")
#: ``selection``: :func:`build_metadata`'s, plus ``shard`` (``--shard``,
#: :mod:`engram_eval.runs.shard`), ``questions`` (``--questions FILE``, the runner) and
#: ``gold_overlay`` (``--gold-overlay FILE``: the overlay's name, sha256, layout and entry
#: count, :meth:`engram_eval.data.gold_overlay.GoldOverlay.record`; it changes no ranking but
#: the summary, so a resume or a shard must use the same file).
SELECTION_FIELDS = ("question_ids", "limit", "n", "ids", "shard", "questions", "gold_overlay")
#: :func:`environment`.
ENVIRONMENT_FIELDS = ("python", "implementation", "platform", "machine", "processor",
                      "cpu_count", "hostname", "cpu")
#: The CPU's vector instructions that decide which kernels ONNX Runtime dispatches to (x86:
#: AVX2, AVX-512, VNNI, AMX; ARM: the dot-product and i8mm instructions). Other kernels round
#: float sums differently in the last bit, and a dynamically quantised (int8) model can turn
#: that into another int8 step of an activation: an int8 reranker's scores move by up to
#: ~1e-2 on a CPU with another set, so ``verify --rerun`` names both sets.
VECTOR_CPU_FLAGS = ("fma", "avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni",
                    "avx_vnni_int8", "amx_int8", "asimddp", "i8mm")
#: An entry of ``runs`` (:func:`record_run`): a fresh run or a resume (the runner, with its
#: executor's ``describe()``: ``executor``, and for Ray ``workers`` and ``ray_address``) or a
#: merge (``shards``).
RUN_ENTRY_FIELDS = ("mode", "host", "command", "started_at", "finished_at", "wall_seconds",
                    "questions_written", "repaired_torn_line", "use_cache", "cache_dir",
                    "model_stats", "executor", "workers", "ray_address", "shards",
                    "rows_sha256")


def source_hashes(modules: Sequence[str], root: str | Path | None = None) -> dict[str, str]:
    """``relative path -> sha256`` for each file under ``root`` (default: :func:`package_root`),
    sorted and deduplicated; a missing file is a :class:`ProvenanceError`."""
    root = package_root() if root is None else Path(root)
    out = {}
    for rel in sorted(set(modules)):
        p = root / rel
        if not p.is_file():
            raise ProvenanceError(f"source file {rel} is missing from {root}")
        out[rel] = sha256_file(p)
    return out


def git_source_hashes(modules: Sequence[str], rev: str,
                      repo: str | Path | None = None) -> tuple[str, dict[str, str | None]]:
    """``(commit, relative path -> sha256)`` of each file as committed at git revision
    ``rev`` of ``repo`` (default: the checkout holding :func:`package_root`); a file absent
    at that commit maps to ``None``. A published run stays checkable after later code
    changes: its recorded source hashes are compared with the commit that published it
    rather than with whatever is installed now. Raises :class:`ProvenanceError` when git is
    missing, ``repo`` is not a git checkout or ``rev`` names no commit."""
    root = str(package_root() if repo is None else repo)

    def git(*args: str, stdin: bytes | None = None) -> bytes:
        try:
            done = subprocess.run(["git", "-C", root, *args], input=stdin, capture_output=True,
                                  check=False)
        except OSError as e:
            raise ProvenanceError(f"cannot run git to read sources at {rev!r}: {e}") from e
        if done.returncode != 0:
            err = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise ProvenanceError(f"git {' '.join(args[:2])} in {root} failed: "
                                  f"{err[-1] if err else 'exit ' + str(done.returncode)}")
        return done.stdout

    commit = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()
    paths = sorted(set(modules))
    # one git process for every file: each answer is "<id> <type> <size>\n<bytes>\n", or
    # "<name> missing\n" for a path that the commit does not hold
    out_bytes = git("cat-file", "--batch",
                    stdin="".join(f"{commit}:{rel}\n" for rel in paths).encode())
    out: dict[str, str | None] = {}
    pos = 0
    for rel in paths:
        end = out_bytes.index(b"\n", pos)
        header = out_bytes[pos:end].split()
        pos = end + 1
        if header[-1] == b"missing":
            out[rel] = None
            continue
        size = int(header[2])
        blob = out_bytes[pos:pos + size]
        pos += size + 1
        out[rel] = hashlib.sha256(blob).hexdigest() if header[1] == b"blob" else None
    return commit, out


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def environment() -> dict[str, Any]:
    return {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
            "platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor(), "cpu_count": os.cpu_count(),
            "hostname": socket.gethostname(), "cpu": cpu()}


def cpu(cpuinfo: str | Path = "/proc/cpuinfo") -> dict[str, Any]:
    """``{"model": ..., "vector_flags": [...]}``: the CPU's model name and which of
    :data:`VECTOR_CPU_FLAGS` it has, from ``cpuinfo`` (Linux); ``vector_flags`` is None where
    the file cannot be read (unknown, not empty)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {"model": platform.processor() or None, "vector_flags": None}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:
                break  # the first processor's block is enough
            continue
        fields.setdefault(key.strip(), value.strip())
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return {"model": fields.get("model name") or fields.get("CPU part")
            or platform.processor() or None,
            "vector_flags": [f for f in VECTOR_CPU_FLAGS if f in flags]}


def fingerprint_of(meta: Mapping[str, Any]) -> str:
    return sha256_json({k: _fingerprint_view(k, meta.get(k)) for k in FINGERPRINT_FIELDS})


def _fingerprint_view(key: str, value: Any) -> Any:
    if key == "dataset" and isinstance(value, Mapping):
        return {"sha256": value.get("sha256"), "size": value.get("size")}
    if key == "models" and isinstance(value, list):
        return [{k: v for k, v in m.items() if k != "path"} for m in value]
    return value


def build_metadata(*, dataset_path: str | Path, dataset_sha256: str, dataset_format: str,
                   retriever: Any, config: Any, protocols: Sequence[str],
                   selected_ids: Sequence[str]) -> dict[str, Any]:
    """Assemble the sidecar (without loading any model) and compute its fingerprint."""
    p = Path(dataset_path)
    sources = run_sources(retriever.source_modules())
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "engram-eval/run",
        "dataset": {"path": str(p.resolve()), "name": p.name, "size": p.stat().st_size,
                    "sha256": dataset_sha256},
        "dataset_format": dataset_format,
        "retriever": retriever.describe(),
        "config": config.fingerprint_part(),
        "config_recorded": {k: v for k, v in config.to_json().items()
                            if k not in config.fingerprint_part()},
        "confidence_filter": False,
        "protocols": list(protocols),
        "selection": {"question_ids": list(config.question_ids), "limit": config.limit,
                      "n": len(selected_ids), "ids": list(selected_ids)},
        "sources": source_hashes(sources),
        "models": [m.to_json() for m in retriever.models()],
        "packages": package_versions(),
        "environment": environment(),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "fingerprint_fields": list(FINGERPRINT_FIELDS),
        "runs": [],
    }
    meta["fingerprint"] = fingerprint_of(meta)
    return meta


def validate_sidecar(meta: Any, path: str | Path) -> None:
    import jsonschema

    try:
        jsonschema.validate(meta, load_schema("sidecar.schema.json"))
    except jsonschema.ValidationError as e:
        where = "/".join(str(x) for x in e.absolute_path) or "(top level)"
        raise ProvenanceError(f"{path}: sidecar field {where}: {e.message}") from None


def read_sidecar(output: str | Path) -> dict[str, Any]:
    """The run's sidecar (:func:`engram_eval.provenance.records.read_meta`), checked against
    the sidecar schema; where there is none, a result path that is not a file is named
    first (a directory, a FIFO, absent)."""
    path = sidecar_path(output)
    if not path.exists():
        why = input_problem(output)  # the result itself first: a directory, a FIFO, absent
        if why:
            raise ProvenanceError(f"{output}: {why} (a result file is expected there, its "
                                  f"sidecar {path.name} beside it)")
    meta = read_meta(output)
    validate_sidecar(meta, sidecar_path(output))
    return meta


def compare_for_resume(old: Mapping[str, Any], new: Mapping[str, Any], path: str | Path) -> None:
    """Refuse (naming every differing field) unless the defining parts are identical
    (:func:`engram_eval.provenance.records.refuse_other_run`)."""
    diffs: list[str] = []
    for k in FINGERPRINT_FIELDS:
        diffs.extend(diff(_fingerprint_view(k, old.get(k)), _fingerprint_view(k, new.get(k)), k))
    refuse_other_run(path, diffs, recorded=old.get("fingerprint"), recomputed=fingerprint_of(old))
