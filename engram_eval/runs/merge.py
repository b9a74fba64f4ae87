"""``engram-eval merge OUT_1 ... --output OUT``: join the shards of one run.

Each input must be a finished shard of the same run (:mod:`engram_eval.runs.shard`):

* its sidecar passes the schema and its fingerprint matches its recorded fields;
* all inputs name the same shard count N and together hold every shard index 0..N-1
  exactly once;
* with the shard selection replaced by the whole selection (``all_ids``), every input has
  the same fingerprint (the differing fields are named otherwise): same dataset, sources,
  models, packages, settings, protocols;
* every shard holds exactly its own questions (its ids are the ``all_ids`` that hash to
  its index), complete, no torn line; every question appears exactly once overall.

The output is what the unsharded run would have written: rows in the selection's order
(byte for byte the same rows, since each row is re-serialised as the runner writes it),
a sidecar whose fingerprint is the unsharded run's, with a ``runs`` entry ``mode: merge``
naming every input (path, rows hash, shard, and the shard's own runs) and the merged rows
hash, and a summary recomputed from the rows; so ``engram-eval verify`` checks it as any
run. Nothing is written unless every check passes; the rows and the sidecar are created
exclusively (an existing output is refused).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.errors import ProvenanceError
from engram_eval.io import atomic_write, dump_json, exclusive_write, streaming_write
from engram_eval.provenance.sidecar import (
    FINGERPRINT_FIELDS,
    _fingerprint_view,
    diff,
    fingerprint_of,
    read_sidecar,
    sidecar_path,
    summary_path,
)
from engram_eval.runs.rows import order_rows, scan_rows
from engram_eval.runs.shard import shard_of, unsharded_selection


def _row_line(row: dict[str, Any]) -> bytes:
    # the runner's RowWriter serialisation
    return (json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def merged_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """A shard's sidecar as the unsharded run's (selection widened, fingerprint redone)."""
    out = json.loads(json.dumps(meta))
    out["selection"] = unsharded_selection(meta["selection"])
    if isinstance(out.get("config_recorded"), dict) and "shard" in out["config_recorded"]:
        out["config_recorded"]["shard"] = ""
    out["fingerprint"] = fingerprint_of(out)
    return out


def merge(inputs: Sequence[str | Path], output: str | Path, *,
          command: Sequence[str] | None = None) -> dict[str, Any]:
    """Check and merge shard results (module docstring); returns the merged summary."""
    from engram_eval.scoring.summary import build_summary

    if not inputs:
        raise ProvenanceError("merge: give at least one shard result")
    out = Path(output)
    for p in (out, sidecar_path(out), summary_path(out)):
        if p.exists():
            raise ProvenanceError(f"{p} already exists; refusing to overwrite")
    metas: list[dict[str, Any]] = []
    for path in inputs:
        meta = read_sidecar(path)
        if meta["fingerprint"] != fingerprint_of(meta):
            raise ProvenanceError(f"{sidecar_path(path)}: recorded fingerprint does not match "
                                  "the recorded fields (the sidecar was edited)")
        if not meta["selection"].get("shard"):
            raise ProvenanceError(f"{path}: not a sharded result (its selection records no "
                                  "shard; run with --shard I/N)")
        metas.append(meta)

    count = {m["selection"]["shard"]["count"] for m in metas}
    if len(count) != 1:
        raise ProvenanceError(f"merge: the inputs use different shard counts {sorted(count)}")
    n_shards = count.pop()
    seen: dict[int, str] = {}
    for path, m in zip(inputs, metas, strict=True):
        i = m["selection"]["shard"]["index"]
        if i in seen:
            raise ProvenanceError(f"merge: shard {i}/{n_shards} given twice ({seen[i]} and "
                                  f"{path})")
        seen[i] = str(path)
    missing = [i for i in range(n_shards) if i not in seen]
    if missing:
        raise ProvenanceError(f"merge: shard(s) {', '.join(f'{i}/{n_shards}' for i in missing)}"
                              " missing; every shard of the run is needed")

    merged = [merged_metadata(m) for m in metas]
    ref = merged[0]
    for path, m in zip(inputs[1:], merged[1:], strict=True):
        if m["fingerprint"] != ref["fingerprint"]:
            diffs: list[str] = []
            for k in FINGERPRINT_FIELDS:
                diffs.extend(diff(_fingerprint_view(k, ref.get(k)),
                                  _fingerprint_view(k, m.get(k)), k))
            shown = "\n  ".join(diffs[:20]) or "(no field differs: fingerprint fields edited)"
            raise ProvenanceError(f"merge: {path} is not a shard of the same run as "
                                  f"{inputs[0]} (fingerprints differ apart from the shard "
                                  f"selection; {len(diffs)} field(s), first -> this):\n  "
                                  f"{shown}")
    all_ids: list[str] = ref["selection"]["ids"]

    rows_by_id: dict[str, dict[str, Any]] = {}
    shard_entries = []
    for path, meta in zip(inputs, metas, strict=True):
        sh = meta["selection"]["shard"]
        want = [i for i in all_ids if shard_of(i, n_shards) == sh["index"]]
        if meta["selection"]["ids"] != want:
            raise ProvenanceError(f"{path}: its selection is not shard {sh['index']}/"
                                  f"{n_shards} of the run's questions (assignment differs)")
        scan = scan_rows(path, allowed_ids=want)
        if scan.torn_bytes:
            raise ProvenanceError(f"{path}: last line is torn; finish the shard with --resume")
        got = {r["question_id"] for r in scan.rows}
        lacking = [i for i in want if i not in got]
        if lacking:
            raise ProvenanceError(f"{path}: shard {sh['index']}/{n_shards} is incomplete "
                                  f"({len(lacking)} of {len(want)} questions missing, e.g. "
                                  f"{lacking[:3]}); finish it with --resume")
        for r in scan.rows:
            if r["question_id"] in rows_by_id:  # pragma: no cover - excluded by the checks
                raise ProvenanceError(f"{path}: question {r['question_id']!r} appears in "
                                      "more than one shard")
            rows_by_id[r["question_id"]] = r
        shard_entries.append({"path": str(Path(path).resolve()), "shard": sh["index"],
                              "rows_sha256": scan.sha256, "runs": meta.get("runs", [])})
    absent = [i for i in all_ids if i not in rows_by_id]
    if absent:  # pragma: no cover - each shard was checked complete
        raise ProvenanceError(f"merge: {len(absent)} question(s) have no row, e.g. {absent[:3]}")

    # Write: rows (temporary file, linked into place exclusively), sidecar, summary.
    out.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    try:
        with streaming_write(out, exclusive=True) as f:
            for i in all_ids:
                line = _row_line(rows_by_id[i])
                h.update(line)
                f.write(line)
    except FileExistsError:
        raise ProvenanceError(f"{out} already exists; refusing to overwrite") from None
    digest = h.hexdigest()
    side = dict(ref)
    side["runs"] = [{"mode": "merge", "host": socket.gethostname(),
                     "command": list(command) if command is not None else None,
                     "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
                     "questions_written": len(all_ids), "shards": sorted(
                         shard_entries, key=lambda e: e["shard"]),
                     "rows_sha256": digest}]
    try:
        exclusive_write(sidecar_path(out), json.dumps(side, indent=2, ensure_ascii=False) + "\n")
    except FileExistsError:
        os.unlink(out)
        raise ProvenanceError(f"{sidecar_path(out)} already exists; refusing to overwrite"
                              ) from None
    rows = order_rows(list(rows_by_id.values()), all_ids)
    summary = build_summary(rows, ref["protocols"], fingerprint=ref["fingerprint"],
                            dataset=ref["dataset"]["name"],
                            dataset_sha256=ref["dataset"]["sha256"],
                            retriever=ref["config"]["retriever"], rows_sha256=digest)
    atomic_write(summary_path(out), dump_json(summary))
    return summary
