"""Deterministic tuning / held-out split of a dataset file, in the dataset's own schema.

``engram-eval split DATA --holdout 0.3 --salt S --output-dir DIR`` writes::

    DIR/<stem>.tune.json[.gz]              records of the tuning part
    DIR/<stem>.heldout.json[.gz]           records of the held-out part
    DIR/split_manifest.json                salt, fraction, source hash, ids and counts per part
    DIR/<part file>.split.json             one marker beside each part (see part_marker)

``<stem>`` is the source name without ``.gz`` and ``.json`` (``longmemeval_s_cleaned.dev``).

Rule (a pure function of the source bytes, the salt and the fraction):

* **LongMemEval** (a JSON list of question records): stratified by ``question_type``. Within
  each type the question ids are ordered by ``sha256(salt + question_id)`` (UTF-8, hex digest,
  ties impossible in practice, broken by id) and the first ``h(n) = floor(holdout * n + 0.5)``
  (round half up) are held out, where ``n`` is the number of questions of that type.
* **LoCoMo** (a JSON list of conversations): the unit is the conversation, because its QA items
  share one corpus (stratifying QA items would leak a conversation into both parts).
  Conversations are ordered by ``sha256(salt + sample_id)`` and the first
  ``h(n_conversations)`` are held out. Per-category counts of QA items are reported, not
  balanced.

Both parts must be non-empty. Each part keeps the source's record order, and each record's
bytes are copied verbatim from the source (no re-serialisation): the part file is the source's
own opening (``[`` plus whitespace), its separator between records and its closing, around the
chosen records' original text. Splitting with every record in one part would give back the
source's (uncompressed) bytes. A gzipped source gives gzipped parts (``--compress auto``);
gzip is written with ``mtime=0`` and no file name so the bytes depend only on the content (and
on the zlib version; ``--compress none`` avoids even that).

Every file is created exclusively (``io.exclusive_write``: complete or absent, never
overwritten); all targets are checked before anything is written, and on a failure the files
this call created are removed.

Markers: ``<part file>.split.json`` = ``{"split_manifest_sha256", "part": "tune"|"heldout",
"part_sha256", "content_sha256", "source_sha256", "salt"}``. Each part's ``sha256`` is of the
file's bytes, its ``content_sha256`` of the decompressed bytes (manifests written before this
field existed lack it; :mod:`engram_eval.provenance.heldout` copes). :func:`part_marker`
reads the marker beside a dataset file and checks that the file is the part it describes, so
the runner can refuse a held-out part without a frozen manifest (and
:mod:`engram_eval.provenance.heldout` recognises a renamed, recompressed or linked copy of a
held-out part by its content).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import (
    MAX_DATASET_BYTES,
    MAX_DOCUMENT_BYTES,
    UTF8_BOM,
    check_limits,
    gunzip_capped,
    json_text,
    parse_json_text,
    read_json_document,
    read_stored_bytes,
)
from engram_eval.errors import ConfigError, DataError, ProvenanceError
from engram_eval.io import (
    check_output_dir,
    dump_json,
    exclusive_write,
    make_output_dir,
    remove_contained,
    sha256_file,
)

MANIFEST_NAME = "split_manifest.json"
MARKER_SUFFIX = ".split.json"
PARTS = ("tune", "heldout")
MANIFEST_KIND = "engram-eval split manifest"
MARKER_KIND = "engram-eval split part marker"
VERSION = 1
GZIP_MAGIC = b"\x1f\x8b"


# -- reading the source with each record's byte span -----------------------------------------
@dataclass(frozen=True)
class SourceLayout:
    """A top-level JSON list: its records (parsed), their raw text, and the framing text."""

    records: list[Any]
    raw: list[str]
    opening: str  # "[" plus any whitespace before the first record (and text before "[")
    separator: str  # text between the first two records (", " when there are fewer than two)
    closing: str  # whitespace after the last record, "]" and anything after it


def _decode_text(path: Path, data: bytes) -> str:
    """The text of a dataset's (decompressed) bytes, checked as every loader checks it
    (:func:`json_text`: UTF-8, no lone surrogate escape); a byte order mark is kept as part
    of the framing."""
    data = gunzip_capped(path, data, MAX_DATASET_BYTES, "a dataset")
    text = json_text(path, data)
    return "\ufeff" + text if data.startswith(UTF8_BOM) else text


def _record_end(text: str, start: int) -> int:
    """Where the record starting at ``start`` ends: the bracket matching its first one
    (strings skipped), found without recursion; the end of ``text`` when unbalanced."""
    import re

    depth = 0
    for m in re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]').finditer(text, start):
        tok = m.group()
        if tok in "[{":
            depth += 1
        elif tok in "]}":
            depth -= 1
        if depth == 0:
            return m.end()
    return len(text)


def read_layout(path: str | Path, data: bytes | None = None) -> SourceLayout:
    """Parse a top-level JSON list keeping every record's exact source text."""
    p = Path(path)
    text = _decode_text(p, read_stored_bytes(p, MAX_DATASET_BYTES, "a dataset")
                        if data is None else data)
    dec = json.JSONDecoder()
    i = 0
    n = len(text)
    while i < n and (text[i].isspace() or (i == 0 and text[i] == "\ufeff")):  # BOM: framing
        i += 1
    if i >= n or text[i] != "[":
        raise DataError(p, "(file)", "(root)", "expected a JSON list of records")
    i += 1
    records: list[Any] = []
    raw: list[str] = []
    spans: list[tuple[int, int]] = []
    while True:
        j = i
        while j < n and text[j].isspace():
            j += 1
        if j < n and text[j] == "]" and not records:
            i = j
            break
        try:
            obj, end = dec.raw_decode(text, j)
        except json.JSONDecodeError as e:
            raise DataError(p, f"index {len(records)}", "(root)",
                            f"not valid JSON: {e.msg} at char {e.pos}") from None
        except RecursionError:  # nested too deep: the bounded parser names where
            parse_json_text(p, text[j:_record_end(text, j)], f"index {len(records)}")
            raise  # pragma: no cover - parse_json_text raised
        except ValueError as e:  # e.g. an integer with more digits than Python converts
            raise DataError(p, f"index {len(records)}", "(root)",
                            f"not valid JSON: {str(e)[:200]}") from None
        check_limits(p, obj, source=text[j:end], record=f"index {len(records)}")
        records.append(obj)
        raw.append(text[j:end])
        spans.append((j, end))
        k = end
        while k < n and text[k].isspace():
            k += 1
        if k < n and text[k] == ",":
            i = k + 1
            continue
        if k < n and text[k] == "]":
            i = end
            break
        raise DataError(p, f"index {len(records) - 1}", "(root)",
                        "expected ',' or ']' after the record")
    tail = text[i:]
    if tail.strip() != "]":
        raise DataError(p, "(file)", "(root)", "unexpected text after the JSON list")
    if not records:
        raise DataError(p, "(file)", "(root)", "the dataset has no records")
    opening = text[: spans[0][0]]
    separator = text[spans[0][1]: spans[1][0]] if len(spans) > 1 else ", "
    return SourceLayout(records, raw, opening, separator, tail)


def render_part(layout: SourceLayout, indices: Sequence[int]) -> str:
    """The JSON text of a part: the source's framing around the chosen records' raw text."""
    return layout.opening + layout.separator.join(layout.raw[i] for i in indices) + layout.closing


# -- the split rule ----------------------------------------------------------------------------
def salted_key(salt: str, ident: str) -> str:
    return hashlib.sha256((salt + ident).encode("utf-8")).hexdigest()


def n_held_out(holdout: float, n: int) -> int:
    """``floor(holdout * n + 0.5)``: round half up (Python's round() is half-to-even)."""
    return int(math.floor(holdout * n + 0.5))


def choose_held_out(ids: Sequence[str], holdout: float, salt: str) -> list[str]:
    """The ids held out from one stratum: first ``n_held_out`` in salted-hash order."""
    order = sorted(ids, key=lambda i: (salted_key(salt, i), i))
    return order[: n_held_out(holdout, len(ids))]


def detect_format(records: Sequence[Any]) -> str:
    first = records[0]
    if isinstance(first, dict) and "qa" in first and "conversation" in first:
        return "locomo"
    return "longmemeval"


def _str_field(path: Path, idx: int, rec: Any, field: str, ident: str | None = None) -> str:
    who = f"{ident} (index {idx})" if ident else f"index {idx}"
    if not isinstance(rec, dict):
        raise DataError(path, who, "(record)", "expected an object")
    v = rec.get(field)
    if not isinstance(v, str) or not v:
        raise DataError(path, who, field, "required non-empty string is missing or not a string")
    return v


@dataclass(frozen=True)
class Unit:
    """One splittable record: LongMemEval question or LoCoMo conversation."""

    index: int
    unit_id: str
    stratum: str  # question type (LongMemEval) or "" (LoCoMo: one stratum)
    question_ids: tuple[str, ...]
    question_types: tuple[str, ...]


def units_of(path: Path, records: Sequence[Any], fmt: str) -> list[Unit]:
    out: list[Unit] = []
    seen: dict[str, int] = {}
    for idx, rec in enumerate(records):
        if fmt == "longmemeval":
            qid = _str_field(path, idx, rec, "question_id")
            qtype = _str_field(path, idx, rec, "question_type", f"question_id={qid}")
            unit = Unit(idx, qid, qtype, (qid,), (qtype,))
        else:
            sid = _str_field(path, idx, rec, "sample_id")
            qa = rec.get("qa")
            who = f"sample_id={sid} (index {idx})"
            if not isinstance(qa, list):
                raise DataError(path, who, "qa", "expected an array of QA items")
            types = []
            for j, item in enumerate(qa):
                if not isinstance(item, dict) or "category" not in item:
                    raise DataError(path, who, f"qa[{j}].category", "required field is missing")
                types.append(str(item["category"]))
            # question ids as the LoCoMo loader makes them: "{sample_id}:q{i}"
            unit = Unit(idx, sid, "", tuple(f"{sid}:q{j}" for j in range(len(qa))),
                        tuple(types))
        if unit.unit_id in seen:
            field = "question_id" if fmt == "longmemeval" else "sample_id"
            raise DataError(path, f"index {idx}", field,
                            f"duplicate {unit.unit_id!r} (first at index {seen[unit.unit_id]})")
        seen[unit.unit_id] = idx
        out.append(unit)
    return out


def assign(units: Sequence[Unit], holdout: float, salt: str) -> dict[str, list[int]]:
    """Record indices of each part (source order), by the stratified salted-hash rule."""
    strata: dict[str, list[str]] = {}
    for u in units:
        strata.setdefault(u.stratum, []).append(u.unit_id)
    held: set[str] = set()
    for ids in strata.values():
        held.update(choose_held_out(ids, holdout, salt))
    return {"tune": [u.index for u in units if u.unit_id not in held],
            "heldout": [u.index for u in units if u.unit_id in held]}


# -- writing -------------------------------------------------------------------------------------
def stem_of(name: str) -> str:
    for suffix in (".gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def _gzip(data: bytes) -> bytes:
    # mtime=0 and no file name: the bytes depend only on the content (and zlib's version)
    return gzip.compress(data, compresslevel=6, mtime=0)


def marker_path(dataset_path: str | Path) -> Path:
    p = Path(dataset_path)
    return p.with_name(p.name + MARKER_SUFFIX)


@dataclass(frozen=True)
class SplitOutcome:
    manifest_path: Path
    manifest: dict[str, Any]
    part_paths: dict[str, Path]


def split_dataset(source: str | Path, *, holdout: float, salt: str, output_dir: str | Path,
                  compress: str = "auto") -> SplitOutcome:
    """Split ``source`` into tuning and held-out parts under ``output_dir`` (see module doc)."""
    src = Path(source)
    check_output_dir(output_dir)  # a link or a file there: refused before any work
    if not isinstance(holdout, float | int) or not 0.0 < float(holdout) < 1.0:
        raise ConfigError(f"--holdout must be a fraction strictly between 0 and 1, got {holdout}")
    holdout = float(holdout)
    if not salt:
        raise ConfigError("--salt must be a non-empty string (it is recorded in the manifest)")
    if compress not in ("auto", "gzip", "none"):
        raise ConfigError(f"--compress must be auto, gzip or none, got {compress!r}")
    data = src.read_bytes()
    source_sha = hashlib.sha256(data).hexdigest()
    layout = read_layout(src, data)
    fmt = detect_format(layout.records)
    units = units_of(src, layout.records, fmt)
    parts = assign(units, holdout, salt)
    for name, idx in parts.items():
        if not idx:
            raise ConfigError(f"--holdout {holdout}: the {name} part of {src} would be empty "
                              f"({len(units)} {'questions' if fmt == 'longmemeval' else 'conversations'})")

    gz = compress == "gzip" or (compress == "auto" and data[:2] == GZIP_MAGIC)
    stem = stem_of(src.name)
    ext = ".json.gz" if gz else ".json"
    out_dir = make_output_dir(output_dir)
    part_paths = {name: out_dir / f"{stem}.{name}{ext}" for name in PARTS}
    manifest_path = out_dir / MANIFEST_NAME
    targets = [manifest_path, *part_paths.values(), *(marker_path(p) for p in part_paths.values())]
    existing = [str(t) for t in targets if t.exists() or t.is_symlink()]
    if existing:
        raise FileExistsError(f"split: {', '.join(existing)} already exist(s); refusing to "
                              "overwrite (choose another --output-dir)")

    blobs: dict[str, bytes] = {}
    for name in PARTS:
        raw = render_part(layout, parts[name]).encode("utf-8")
        blobs[name] = _gzip(raw) if gz else raw
    manifest = build_manifest(src, source_sha, fmt, holdout, salt, units, parts, layout,
                              {n: (part_paths[n].name, blobs[n]) for n in PARTS}, gz)
    manifest_bytes = dump_json(manifest).encode("utf-8")
    manifest_sha = hashlib.sha256(manifest_bytes).hexdigest()

    created: list[Path] = []
    try:
        for name in PARTS:
            exclusive_write(part_paths[name], blobs[name])
            created.append(part_paths[name])
        exclusive_write(manifest_path, manifest_bytes)
        created.append(manifest_path)
        for name in PARTS:
            marker = {"kind": MARKER_KIND, "version": VERSION,
                      "split_manifest": MANIFEST_NAME,
                      "split_manifest_sha256": manifest_sha, "part": name,
                      "part_sha256": manifest["parts"][name]["sha256"],
                      "content_sha256": manifest["parts"][name]["content_sha256"],
                      "source_sha256": source_sha, "salt": salt}
            mp = marker_path(part_paths[name])
            exclusive_write(mp, dump_json(marker))
            created.append(mp)
        for c in created:  # readable like any data file (the temp file was created 0600)
            os.chmod(c, 0o644 & ~_umask())
    except BaseException:
        for c in created:  # ours, created a moment ago
            remove_contained(c, out_dir, recursive=False)
        raise
    return SplitOutcome(manifest_path, manifest, part_paths)


def build_manifest(src: Path, source_sha: str, fmt: str, holdout: float, salt: str,
                   units: Sequence[Unit], parts: dict[str, list[int]], layout: SourceLayout,
                   files: dict[str, tuple[str, bytes]], gz: bool) -> dict[str, Any]:
    by_index = {u.index: u for u in units}
    out_parts: dict[str, Any] = {}
    for name in PARTS:
        chosen = [by_index[i] for i in parts[name]]
        fname, blob = files[name]
        qids = [q for u in chosen for q in u.question_ids]
        types = Counter(t for u in chosen for t in u.question_types)
        entry: dict[str, Any] = {
            "file": fname,
            "sha256": hashlib.sha256(blob).hexdigest(),
            # sha256 of the decompressed bytes: the held-out guard matches copies by content
            # whatever their compression (engram_eval.provenance.heldout)
            "content_sha256": hashlib.sha256(gzip.decompress(blob) if gz else blob).hexdigest(),
            "size": len(blob),
            "compression": "gzip" if gz else "none",
            "n_records": len(chosen),
            "n_questions": len(qids),
            "by_type": dict(sorted(types.items())),
        }
        if fmt == "locomo":
            entry["conversation_ids"] = [u.unit_id for u in chosen]
        entry["question_ids"] = qids
        out_parts[name] = entry
    rule = ("within each question_type, ids ordered by sha256(salt + question_id); the first "
            "floor(holdout * n_type + 0.5) are held out" if fmt == "longmemeval" else
            "conversations ordered by sha256(salt + sample_id); the first "
            "floor(holdout * n_conversations + 0.5) are held out (QA items follow their "
            "conversation)")
    all_types = Counter(t for u in units for t in u.question_types)
    return {
        "kind": MANIFEST_KIND,
        "version": VERSION,
        "format": fmt,
        "unit": "question" if fmt == "longmemeval" else "conversation",
        "stratified_by": "question_type" if fmt == "longmemeval" else None,
        "rule": rule,
        "salt": salt,
        "holdout": holdout,
        "source": {"name": src.name, "sha256": source_sha, "size": src.stat().st_size,
                   "n_records": len(units), "n_questions": sum(all_types.values()),
                   "by_type": dict(sorted(all_types.items()))},
        "parts": out_parts,
        "generator": {"module": "engram_eval/data/split.py",
                      "sha256": sha256_file(Path(__file__))},
    }


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- markers ------------------------------------------------------------------------------------
def part_marker(dataset_path: str | Path) -> dict[str, Any] | None:
    """The split marker beside ``dataset_path`` (``<file>.split.json``), or None if absent.

    Raises ProvenanceError when the marker exists but is malformed or its ``part_sha256`` is
    not the sha256 of the dataset file's bytes (the file is not the part it claims to be).
    """
    p = Path(dataset_path)
    mp = marker_path(p)
    if not mp.exists():
        return None
    try:
        marker = read_json_document(mp, what="a split marker")
    except OSError as e:
        raise ProvenanceError(f"{mp}: unreadable split marker ({e})") from None
    need = ("split_manifest_sha256", "part", "part_sha256", "source_sha256", "salt")
    if not isinstance(marker, dict) or any(k not in marker for k in need):
        raise ProvenanceError(f"{mp}: split marker must be an object with {', '.join(need)}")
    if marker["part"] not in PARTS:
        raise ProvenanceError(f"{mp}: field 'part' must be 'tune' or 'heldout', got "
                              f"{marker['part']!r}")
    actual = sha256_file(p)
    if actual != marker["part_sha256"]:
        raise ProvenanceError(f"{p}: its split marker {mp.name} records part_sha256 "
                              f"{marker['part_sha256']} but the file hashes to {actual}; the "
                              "part was changed after the split, refusing")
    return dict(marker)


def verify_split(manifest_path: str | Path, source: str | Path | None = None) -> list[str]:
    """Problems found re-checking a split directory (empty list = consistent): part hashes,
    markers, and, with ``source``, the source hash and a re-derivation of the ids."""
    mp = Path(manifest_path)
    data = read_stored_bytes(mp, MAX_DOCUMENT_BYTES, "a split manifest")
    manifest = parse_json_text(mp, data)
    msha = hashlib.sha256(data).hexdigest()
    problems = []
    for name in PARTS:
        part = manifest["parts"][name]
        pp = mp.parent / part["file"]
        if not pp.exists():
            problems.append(f"{pp}: missing")
            continue
        if sha256_file(pp) != part["sha256"]:
            problems.append(f"{pp}: sha256 differs from the manifest")
        try:
            marker = part_marker(pp)
        except ProvenanceError as e:
            problems.append(str(e))
            continue
        if marker is None:
            problems.append(f"{pp}: no split marker")
        elif marker["split_manifest_sha256"] != msha or marker["part"] != name:
            problems.append(f"{marker_path(pp)}: does not point to this manifest/part")
    if source is not None:
        src = Path(source)
        if sha256_file(src) != manifest["source"]["sha256"]:
            problems.append(f"{src}: sha256 differs from the manifest's source")
        else:
            layout = read_layout(src)
            units = units_of(src, layout.records, manifest["format"])
            parts = assign(units, float(manifest["holdout"]), manifest["salt"])
            by_index = {u.index: u for u in units}
            for name in PARTS:
                ids = [q for i in parts[name] for q in by_index[i].question_ids]
                if ids != manifest["parts"][name]["question_ids"]:
                    problems.append(f"part {name}: re-derived question ids differ")
    return problems
