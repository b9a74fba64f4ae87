"""Frozen-source manifests and the held-out ledger (one mechanism for every runner).

A *frozen manifest* pins everything that can change a result before a held-out input is
run: the sha256 of every source file that can change a number, the input file (a fixture
or a dataset), the model files (per file, without local paths), the effective settings and
the versions of the numeric packages. It is written once, with exclusive creation
(:func:`freeze`), and a later run rebuilds the same manifest from what it is about to use
and calls :func:`check_frozen`, which refuses -- naming every difference (a source, a model
file, a setting, the input) -- unless they agree. The check runs before any model is loaded.

Fingerprints:

* ``source_fingerprint`` = sha256 of the canonical JSON of ``sources`` (path -> sha256);
* ``fingerprint`` = sha256 of the canonical JSON of :data:`DEFINING_FIELDS` (the manifest
  minus its creation time, purpose text and local paths).

The *ledger* (a JSON file, by default ``results/heldout_ledger.json``, replaced atomically
under a file lock) records, per held-out input sha256, the first run (manifest fingerprint,
source fingerprint, when the manifest was frozen, when the run started) and every later run.
:func:`ledger_label` says what a run is:

* ``"held-out measurement"`` -- the input's first run, or any run under a manifest that was
  frozen *before* the input's first run (a pre-registered configuration);
* ``"regression check"`` -- every other run: the input has been run already and this
  manifest was frozen afterwards (its source or settings may have been chosen after seeing
  the held-out results), so its numbers are never a held-out measurement.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import read_json_document
from engram_eval.errors import ProvenanceError
from engram_eval.io import (
    already_exists,
    atomic_write,
    exclusive_write,
    file_lock,
    sha256_file,
    sha256_json,
)

MANIFEST_KIND = "engram-eval/frozen-source"
LEDGER_KIND = "engram-eval/heldout-ledger"
SCHEMA_VERSION = 1
DEFINING_FIELDS = ("schema_version", "kind", "runner", "input", "sources", "models", "settings",
                   "packages")
HELDOUT = "held-out measurement"
REGRESSION = "regression check"
DEFAULT_LEDGER = Path("results") / "heldout_ledger.json"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def hash_sources(relpaths: Sequence[str], root: str | Path) -> dict[str, str]:
    """``relative path -> sha256`` for each file under ``root`` (sorted, deduplicated); the
    lists are composed in :mod:`engram_eval.provenance.sources`."""
    from engram_eval.provenance.sidecar import source_hashes

    return source_hashes(relpaths, root)


def input_record(path: str | Path, kind: str) -> dict[str, Any]:
    """The held-out input: ``kind`` (``fixture``/``dataset``), file name, size, sha256."""
    p = Path(path)
    if not p.is_file():
        raise ProvenanceError(f"{p}: {kind} file not found")
    return {"kind": kind, "name": p.name, "size": p.stat().st_size, "sha256": sha256_file(p)}


def build_manifest(*, runner: str, input_path: str | Path, input_kind: str,
                   sources: Mapping[str, str], models: Sequence[Any],
                   settings: Mapping[str, Any], packages: Mapping[str, Any] | None = None,
                   purpose: str = "") -> dict[str, Any]:
    """Assemble a manifest. ``sources`` is path -> sha256 (see :func:`hash_sources`);
    ``models`` are :class:`~engram_eval.retrieval.models.ModelRef` or their JSON (paths dropped);
    ``settings`` the effective settings (JSON values); ``packages`` name -> version
    (default: :func:`engram_eval.provenance.sidecar.package_versions`)."""
    if packages is None:
        from engram_eval.provenance.sidecar import package_versions

        packages = package_versions()
    model_list = []
    for m in models:
        d = dict(m.to_json() if hasattr(m, "to_json") else m)
        d.pop("path", None)
        model_list.append(d)
    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": MANIFEST_KIND,
        "runner": runner,
        "purpose": purpose,
        "input": input_record(input_path, input_kind),
        "sources": dict(sorted(sources.items())),
        "models": sorted(model_list, key=lambda d: (d.get("role", ""), d.get("name", ""))),
        "settings": json.loads(json.dumps(dict(settings), sort_keys=True)),
        "packages": dict(sorted(packages.items())),
        "created_at": _now(),
    }
    manifest["source_fingerprint"] = source_fingerprint(manifest["sources"])
    manifest["fingerprint"] = manifest_fingerprint(manifest)
    return manifest


def source_fingerprint(sources: Mapping[str, str]) -> str:
    return sha256_json(dict(sources))


def manifest_fingerprint(manifest: Mapping[str, Any]) -> str:
    return sha256_json({k: manifest.get(k) for k in DEFINING_FIELDS})


def freeze(path: str | Path, manifest: Mapping[str, Any]) -> Path:
    """Write ``manifest`` to ``path`` with exclusive creation (never overwrites)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        exclusive_write(p, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    except FileExistsError:
        raise ProvenanceError(already_exists(p, "a frozen manifest is never overwritten "
                                             "(choose a new name)")) from None
    return p


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read a manifest, refusing a file that is not one or whose fingerprint does not match
    its fields (an edited manifest)."""
    p = Path(path)
    try:
        m = read_json_document(p, what="a frozen manifest")
    except FileNotFoundError:
        raise ProvenanceError(f"{p}: frozen manifest not found") from None
    except OSError as e:
        raise ProvenanceError(f"{p}: frozen manifest is not readable JSON: {e}") from None
    if not isinstance(m, dict) or m.get("kind") != MANIFEST_KIND:
        raise ProvenanceError(f"{p}: not a frozen-source manifest (kind must be {MANIFEST_KIND!r})")
    for k in (*DEFINING_FIELDS, "fingerprint", "created_at"):
        if k not in m:
            raise ProvenanceError(f"{p}: frozen manifest field {k!r} is missing")
    if m["fingerprint"] != manifest_fingerprint(m):
        raise ProvenanceError(f"{p}: frozen manifest fingerprint does not match its fields "
                              "(the manifest was edited)")
    return m


def differences(frozen: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Every difference, named: ``source X``, ``model ROLE NAME file F``, ``setting S``,
    ``<kind> input``, ``package P``, ``runner``."""
    from engram_eval.provenance.sidecar import diff

    out: list[str] = []

    def short(v: Any) -> str:
        return str(v)[:16] + "…" if isinstance(v, str) and len(v) > 20 else json.dumps(v)

    if frozen.get("runner") != current.get("runner"):
        out.append(f"runner: {frozen.get('runner')!r} (frozen) -> {current.get('runner')!r} (now)")
    fi, ci = frozen.get("input", {}), current.get("input", {})
    if fi.get("sha256") != ci.get("sha256") or fi.get("size") != ci.get("size"):
        out.append(f"{ci.get('kind', 'input')} {ci.get('name')}: sha256 {short(fi.get('sha256'))} "
                   f"(frozen {fi.get('name')}) -> {short(ci.get('sha256'))} (now)")
    fs, cs = frozen.get("sources", {}), current.get("sources", {})
    for rel in sorted(set(fs) | set(cs)):
        if rel not in cs:
            out.append(f"source {rel}: hashed when frozen, not hashed now")
        elif rel not in fs:
            out.append(f"source {rel}: not in the frozen manifest")
        elif fs[rel] != cs[rel]:
            out.append(f"source {rel}: sha256 {short(fs[rel])} (frozen) -> {short(cs[rel])} (now)")
    fm = {(m.get("role"), m.get("name")): m for m in frozen.get("models", [])}
    cm = {(m.get("role"), m.get("name")): m for m in current.get("models", [])}
    for key in sorted(set(fm) | set(cm), key=str):
        role, name = key
        if key not in cm:
            out.append(f"model {role} {name}: in the frozen manifest, not used now")
            continue
        if key not in fm:
            out.append(f"model {role} {name}: used now, not in the frozen manifest")
            continue
        ff, cf = fm[key].get("files_sha256", {}), cm[key].get("files_sha256", {})
        for f in sorted(set(ff) | set(cf)):
            if ff.get(f) != cf.get(f):
                out.append(f"model {role} {name} file {f}: sha256 {short(ff.get(f))} (frozen) "
                           f"-> {short(cf.get(f))} (now)")
        for k in ("revision", "source"):
            if fm[key].get(k) != cm[key].get(k):
                out.append(f"model {role} {name} {k}: {fm[key].get(k)!r} -> {cm[key].get(k)!r}")
    for d in diff(frozen.get("settings", {}), current.get("settings", {})):
        out.append("setting " + d)
    for d in diff(frozen.get("packages", {}), current.get("packages", {})):
        out.append("package " + d)
    return out


def check_frozen(path: str | Path, current: Mapping[str, Any]) -> dict[str, Any]:
    """Refuse unless the manifest at ``path`` matches ``current`` (built now with
    :func:`build_manifest`); the error lists every difference. Returns the frozen manifest."""
    frozen = load_manifest(path)
    diffs = differences(frozen, current)
    if diffs:
        shown = "\n  ".join(diffs[:40]) + ("\n  ..." if len(diffs) > 40 else "")
        raise ProvenanceError(f"{path}: the frozen manifest does not match this run "
                              f"({len(diffs)} difference(s)):\n  {shown}")
    return frozen


# --------------------------------------------------------------------------- ledger


_locked = file_lock  # the ledger's lock (engram_eval.io.file_lock)


def read_ledger(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        return {"schema_version": SCHEMA_VERSION, "kind": LEDGER_KIND, "inputs": {}}
    try:
        data = read_json_document(p, what="the held-out ledger")
    except OSError as e:
        raise ProvenanceError(f"{p}: held-out ledger is not readable JSON: {e}") from None
    if not isinstance(data, dict) or data.get("kind") != LEDGER_KIND:
        raise ProvenanceError(f"{p}: not a held-out ledger (kind must be {LEDGER_KIND!r})")
    return data


def _label(entry: Mapping[str, Any] | None, manifest: Mapping[str, Any]) -> str:
    if entry is None:
        return HELDOUT
    first = entry["first_run"]
    if str(manifest["created_at"]) < str(first["run_started_at"]):
        return HELDOUT  # frozen before the input was first run: pre-registered
    return REGRESSION


def ledger_label(ledger: str | Path, input_sha256: str, manifest: Mapping[str, Any]) -> str:
    """The label a run of the input under ``manifest`` gets (reads the ledger, writes
    nothing): see the module docstring."""
    return _label(read_ledger(ledger)["inputs"].get(input_sha256), manifest)


def ledger_record(ledger: str | Path, manifest: Mapping[str, Any], *, output: str = "",
                  started_at: str | None = None, key: str | None = None) -> str:
    """Record a run of ``manifest["input"]`` under ``manifest`` and return its label.

    ``key``: the sha256 the held-out input is kept under when the run's input is a copy of
    a known held-out input (:mod:`engram_eval.provenance.heldout`: a renamed, recompressed or
    linked part, a re-flagged fixture); its runs then share the original's entry, and the
    run records the copy's own sha256 as ``input_sha256``. Default: the input's sha256.

    Call once per run, before inference starts (a started run has seen the input). The
    ledger is replaced atomically under an exclusive file lock."""
    p = Path(ledger)
    started = started_at or _now()
    inp = manifest["input"]
    key = key or inp["sha256"]
    with _locked(p):
        data = read_ledger(p)
        entry = data["inputs"].get(key)
        label = _label(entry, manifest)
        run = {"manifest_fingerprint": manifest["fingerprint"],
               "source_fingerprint": manifest["source_fingerprint"],
               "manifest_created_at": manifest["created_at"], "run_started_at": started,
               "runner": manifest.get("runner"), "output": str(output), "label": label}
        if key != inp["sha256"]:
            run["input_sha256"] = inp["sha256"]
            run["input_name"] = inp.get("name")
        if entry is None:
            entry = {"input": {k: inp[k] for k in ("kind", "name", "size", "sha256")},
                     "first_run": run, "runs": []}
            data["inputs"][key] = entry
        entry["runs"].append(run)
        atomic_write(p, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return label


def default_ledger(root: str | Path | None = None) -> Path:
    """``<root>/results/heldout_ledger.json`` (root: the current directory); the
    ``ENGRAM_EVAL_LEDGER`` environment variable overrides it."""
    env = os.environ.get("ENGRAM_EVAL_LEDGER")
    if env:
        return Path(env)
    return Path(root or ".") / DEFAULT_LEDGER


# --------------------------------------------------------------------------- benchmark runs

BENCHMARK_RUNNER = "longmemeval_run"
NOT_HELDOUT = "not a held-out part"


def benchmark_manifest(meta: Mapping[str, Any], dataset: str | Path) -> dict[str, Any]:
    """The frozen manifest of a benchmark run, built from its sidecar metadata (sources,
    models, packages, retriever settings, config, protocols, selection) and the dataset."""
    settings = {k: meta.get(k) for k in ("dataset_format", "retriever", "config", "protocols")}
    sel = dict(meta.get("selection") or {})
    settings["selection"] = {k: sel.get(k) for k in ("question_ids", "limit", "n", "ids")}
    if "shard" in meta:
        settings["shard"] = meta["shard"]
    return build_manifest(runner=BENCHMARK_RUNNER, input_path=dataset, input_kind="dataset",
                          sources=meta["sources"], models=meta["models"], settings=settings,
                          packages=meta["packages"], purpose="benchmark ranking run")


def heldout_marker(dataset: str | Path) -> dict[str, Any] | None:
    """The split marker (``<file>.split.json``, :func:`engram_eval.data.split.part_marker`) when
    it says the dataset is the held-out part, else None; read beside the path as given and
    beside its resolved target (a link to a marked part is that part)."""
    from engram_eval.provenance.guard import _marker

    found = _marker(dataset, Path(dataset).resolve())
    return None if found is None else found[1]


@dataclass(frozen=True)
class BenchmarkGate:
    """What :func:`benchmark_gate` decided: ``frozen_source``, what the sidecar and summary
    record under that key (None when no manifest is involved); ``heldout_questions``, the
    label of a run of a split's source (:func:`engram_eval.provenance.guard.source_label`,
    recorded under :data:`engram_eval.provenance.guard.LABEL_FIELD`; None otherwise)."""

    frozen_source: dict[str, Any] | None
    heldout_questions: dict[str, Any] | None = None


def benchmark_gate(meta: Mapping[str, Any], dataset: str | Path, *,
                   frozen_source: str | Path | None = None, freeze_to: str | Path | None = None,
                   record: bool = True, output: str = "",
                   ledger: str | Path | None = None,
                   heldout_ids: Sequence[str] | None = None,
                   question_keys: Mapping[str, str] | None = None,
                   replaced_keys: Mapping[str, str] | None = None) -> BenchmarkGate:
    """Frozen-source checks of a benchmark run, before any model is loaded.

    * ``freeze_to``: write the manifest there (exclusive) and return its record;
    * the held-out guard first (:func:`engram_eval.provenance.guard.gate_heldout`; links
      resolved; ``replaced_keys``: the question keys with the texts of ``--questions FILE``):
      a file holding held-out questions without being the held-out part (a subset, a
      mixture) is refused, frozen manifest or not -- except the file a split was made from,
      which runs labelled (``heldout_questions``);
    * a held-out part refuses to run without ``frozen_source``: by its split marker (beside
      the file or its link target), or by its content matching a held-out part the package
      knows, whatever its name, place or compression, or by holding exactly its questions
      (``question_keys``, the dataset's ``question_id -> question_key``, and ``heldout_ids``,
      its question ids, spare the guard another pass over the file), its ledger entry then
      kept under the known part's sha256;
    * ``frozen_source``: refuse unless it matches (every difference named); for a held-out
      part, record the run in the ledger (``record``) or only read the label.

    Returns a :class:`BenchmarkGate`."""
    from engram_eval.provenance.guard import gate_heldout, source_label

    finding = gate_heldout(dataset, ledger=ledger, keys=question_keys, ids=heldout_ids,
                           replaced=replaced_keys, label_source=True)
    label = None
    if finding is not None and not finding.whole:  # a split's source: runs, labelled
        label, finding = source_label(finding), None
    manifest = benchmark_manifest(meta, dataset)
    if freeze_to is not None:
        freeze(freeze_to, manifest)
        return BenchmarkGate({"frozen_to": str(freeze_to),
                              "manifest_fingerprint": manifest["fingerprint"],
                              "source_fingerprint": manifest["source_fingerprint"]}, label)
    held = None if finding is None else finding.marker
    match = None if finding is None or held is not None else finding.match
    if finding is not None and frozen_source is None:
        raise ProvenanceError(
            f"{finding.describe()}; it runs only under a frozen manifest: freeze one first "
            "(--validate-only --freeze-source MANIFEST), then pass --frozen-source MANIFEST")
    if frozen_source is None:
        return BenchmarkGate(None, label)
    frozen_doc = check_frozen(frozen_source, manifest)
    if finding is None:
        run_label = NOT_HELDOUT
    else:
        lpath = ledger or default_ledger()
        key = match.key if match is not None else frozen_doc["input"]["sha256"]
        run_label = (ledger_record(lpath, frozen_doc, output=output, key=key) if record
                     else ledger_label(lpath, key, frozen_doc))
    out = {"path": str(frozen_source), "manifest_fingerprint": frozen_doc["fingerprint"],
           "source_fingerprint": frozen_doc["source_fingerprint"],
           "created_at": frozen_doc["created_at"], "label": run_label}
    if match is not None:
        out["heldout_match"] = {"key": match.key, "name": match.name,
                                "where": list(match.where), "how": match.how}
    return BenchmarkGate(out, label)
