"""The held-out guard, keyed by content (not by a file's name, place, compression or flags).

A split marks its held-out part with a marker beside the file (``<part>.split.json``,
:mod:`engram_eval.data.split`), and a production fixture says ``"heldout": true``. Both are
easy to lose: a renamed copy, a gzip (or gunzipped) copy or a symlink of a held-out part has
no marker, and a copy of a held-out fixture can say ``"heldout": false``. This module
decides by content instead.

**Known held-out inputs** are read from the *search roots*: the package root's ``results/``
and ``fixtures/production/`` (``engram_eval.io.package_root()``), the directories listed in
the ``ENGRAM_EVAL_HELDOUT_ROOTS`` environment variable (``os.pathsep``-separated; added to,
never replacing, the defaults), any ``roots`` a caller passes, and the ledger in use
(``ENGRAM_EVAL_LEDGER`` / ``results/heldout_ledger.json``), and the user's held-out registry
(:func:`registry_path`: every part ``engram-eval split`` registered, with its question keys;
:mod:`engram_eval.provenance.guard`). Under each root (recursively):

* every split manifest (``split_manifest.json``): its ``heldout`` part;
* every split marker (``*.split.json``) whose part is ``heldout``;
* every held-out ledger: each input it lists (the ledger only records held-out inputs);
* every production-run output with ``"heldout": true``: the fixture it ran;
* every production fixture with ``"heldout": true``: its file and its cases.

**Datasets** (:func:`find_heldout`, :func:`is_heldout`). Symlinks are resolved first (a
symlink's content is its target's). A dataset is held-out when any of these equals a known
held-out part's:

1. the sha256 of its file bytes (the hash manifests, markers and ledgers record);
2. the sha256 of its *decompressed* bytes (a gzipped file is decompressed; a plain file's
   content is its bytes). New split manifests record it per part as ``content_sha256``;
   for a manifest or marker that does not (the published
   ``results/longmemeval_s_dev_split/split_manifest.json`` records only the sha256 of the
   gzipped part), it is derived from the part file when that file lies beside the manifest
   or marker and still has the recorded sha256;
3. for a part recorded gzip-compressed without a content hash: the sha256 of its content
   re-compressed exactly as ``engram-eval split`` compresses (gzip level 6, ``mtime=0``, no
   file name). The split's gzip bytes depend only on the content (and zlib), so a
   gunzipped or differently re-gzipped copy of the published part is still recognised.
   When the caller passes the dataset's question ids, this (costly) re-compression runs
   only for parts whose recorded question ids are the same set.

So matching is on the raw *or* the decompressed content, whichever the record allows; the
match names the manifest (or marker, ledger, registry) that lists the part. This is the
*whole-part* match; :mod:`engram_eval.provenance.guard` (what the commands ask) adds markers
beside a link's target and question-by-question matching (subsets, mixtures).

**Production fixtures** (:func:`fixture_heldout`). A fixture is held-out when (a) its own
``heldout`` field is true, OR (b) the sha256 of its file equals a known held-out fixture's
(a fixture marked held-out under a root, a held-out production-run output, a ledger entry),
OR (c) any of its cases has the same memories and questions (the ``case_id``, the fixture's
``name``, ``heldout`` and every other top-level field ignored; canonical JSON, the memories
and the questions each in canonical order, so reordering them changes nothing) as a case of a
known held-out fixture document. (c) is what refuses an edited copy of
``fixtures/production/holdout.json`` with ``"heldout": false`` (or another name, or its cases
reordered, or mixed into another fixture): editing the flag changes the file's hash but not
its cases.

A match's ``key`` is the sha256 the held-out input is recorded under (the part's or the
original fixture's file sha256), so a copy's runs go into the same ledger entry as the
original's and a rerun is labelled a regression check, as a rerun of the original would be.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import read_json_document
from engram_eval.io import open_regular

ENV_ROOTS = "ENGRAM_EVAL_HELDOUT_ROOTS"
#: Where ``engram-eval split`` registers the held-out parts it writes (see registry_path).
ENV_REGISTRY = "ENGRAM_EVAL_HELDOUT_REGISTRY"
REGISTRY_KIND = "engram-eval/heldout-registry"
PRODUCTION_RUN_KIND = "engram-eval/production-run"
LEDGER_KIND = "engram-eval/heldout-ledger"
SPLIT_MANIFEST_NAME = "split_manifest.json"
MARKER_SUFFIX = ".split.json"
#: JSON documents larger than this are not read while scanning (results, not records).
MAX_SCAN_BYTES = 8 << 20
GZIP_MAGIC = b"\x1f\x8b"
GZIP_LEVEL = 6  # as engram_eval.data.split._gzip
_CHUNK = 1 << 20


@dataclass
class HeldoutPart:
    """A held-out dataset part the package knows, keyed by its recorded file sha256."""

    sha256: str
    name: str
    compression: str = "unknown"  # "gzip" | "none" | "unknown"
    content_sha256: str | None = None
    question_ids: frozenset[str] | None = None
    where: list[str] = field(default_factory=list)
    #: sha256 of each held-out question's content (engram_eval.provenance.guard.question_key)
    question_keys: frozenset[str] | None = None
    #: the part's own file, found beside its manifest or marker (its sha256 is checked
    #: against ``sha256`` before its questions are read)
    part_file: Path | None = None

    def describe(self) -> str:
        return f"held-out part {self.name} (sha256 {self.sha256[:16]}…) listed in " + \
            ", ".join(self.where)


@dataclass(frozen=True)
class HeldoutMatch:
    """Why an input is held out: ``key`` is the sha256 its ledger entry is kept under."""

    key: str
    name: str
    where: tuple[str, ...]
    how: str

    def describe(self) -> str:
        return (f"by its {self.how} it is the held-out {self.name} (sha256 {self.key[:16]}…) "
                f"listed in {', '.join(self.where)}")


# --------------------------------------------------------------------------- roots


def default_roots() -> list[Path]:
    from engram_eval.io import package_root

    root = package_root()
    return [root / "results", root / "fixtures" / "production"]


def search_roots(roots: Iterable[str | Path] | None = None) -> list[Path]:
    """Default roots + ``ENGRAM_EVAL_HELDOUT_ROOTS`` + ``roots`` (resolved, deduplicated;
    roots that do not exist are skipped)."""
    out: list[Path] = []
    env = [p for p in os.environ.get(ENV_ROOTS, "").split(os.pathsep) if p.strip()]
    for r in [*default_roots(), *env, *(roots or ())]:
        p = Path(r).resolve()
        if p.exists() and p not in out:
            out.append(p)
    return out


def _ledgers(ledger: str | Path | None) -> list[Path]:
    # the ledger in use: as engram_eval.provenance.frozen.default_ledger (not imported:
    # frozen imports this module)
    env = os.environ.get("ENGRAM_EVAL_LEDGER")
    out = [Path(env) if env else Path("results") / "heldout_ledger.json"]
    if ledger is not None:
        out.append(Path(ledger))
    return [p.resolve() for p in out if p.is_file()]


def registry_path() -> Path:
    """The held-out registry ``engram-eval split`` writes and the guard reads:
    ``$ENGRAM_EVAL_HELDOUT_REGISTRY``, else ``$XDG_STATE_HOME/engram-eval/heldout_registry.json``
    (``~/.local/state/...`` when ``XDG_STATE_HOME`` is unset). A user-level file, so a copy
    of a part the user split is recognised wherever it lies and whatever the directory."""
    env = os.environ.get(ENV_REGISTRY)
    if env:
        return Path(env)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "engram-eval" / "heldout_registry.json"


def _registries() -> list[Path]:
    p = registry_path()
    try:
        return [p.resolve()] if p.is_file() else []
    except OSError:
        return []


def _is_dataset_record(p: Path) -> bool:
    """Names that can list a held-out dataset part: split manifests, markers, ledgers."""
    return (p.name == SPLIT_MANIFEST_NAME or p.name.endswith(MARKER_SUFFIX)
            or "ledger" in p.name)


def _files(roots: Sequence[Path], *, datasets_only: bool = False) -> list[Path]:
    seen: set[Path] = set()
    out: list[Path] = []
    for root in roots:
        found = [root] if root.is_file() else sorted(root.rglob("*.json"))
        for p in found:
            try:
                if not p.is_file():
                    continue
                rp = p.resolve()
            except OSError:
                continue
            if rp in seen or p.name.endswith((".metadata.json", ".summary.json")):
                continue
            if datasets_only and not _is_dataset_record(p):
                continue
            seen.add(rp)
            out.append(p)
    return out


def _read_doc(p: Path) -> Any:
    """A small JSON object document, or None (too big, not an object, unreadable)."""
    try:
        if p.stat().st_size > MAX_SCAN_BYTES:
            return None
        with open_regular(p) as f:
            head = f.read(64).lstrip()
            if not head.startswith(b"{"):
                return None
        doc = read_json_document(p, limit=MAX_SCAN_BYTES)
    except (OSError, ValueError):  # InputError is a ValueError
        return None
    return doc if isinstance(doc, dict) else None


# --------------------------------------------------------------------------- hashing


class _HashingReader:
    def __init__(self, f: Any, h: Any) -> None:
        self._f, self._h = f, h

    def read(self, n: int = -1) -> bytes:
        b = self._f.read(n)
        self._h.update(b)
        return b


@dataclass(frozen=True)
class ContentHashes:
    """``sha256`` of the file bytes, ``content_sha256`` of the decompressed bytes (None when
    a gzip file is not a valid gzip stream), ``canonical_gzip_sha256`` of the content
    gzipped as ``engram-eval split`` does (only when asked for)."""

    path: Path
    sha256: str
    content_sha256: str | None
    content_size: int
    canonical_gzip_sha256: str | None = None


def _gzip_header() -> bytes:
    return gzip.compress(b"", compresslevel=GZIP_LEVEL, mtime=0)[:10]


def content_hashes(path: str | Path, *, canonical_gzip: bool = False) -> ContentHashes:
    """Hash ``path`` (symlinks resolved) in one pass: file bytes, decompressed bytes and,
    with ``canonical_gzip``, the content re-compressed as the split writes gzip parts."""
    p = Path(path).resolve()
    raw = hashlib.sha256()
    content = hashlib.sha256()
    size = 0
    comp = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zlib.DEF_MEM_LEVEL, 0)
    canon = hashlib.sha256()
    if canonical_gzip:
        canon.update(_gzip_header())
    crc = 0
    ok = True
    with open_regular(p) as f:
        is_gz = f.read(2) == GZIP_MAGIC
        f.seek(0)
        reader = _HashingReader(f, raw)
        fileobj: Any = reader
        stream: Any = gzip.GzipFile(fileobj=fileobj, mode="rb") if is_gz else reader
        try:
            while block := stream.read(_CHUNK):
                content.update(block)
                size += len(block)
                if canonical_gzip:
                    canon.update(comp.compress(block))
                    crc = zlib.crc32(block, crc)
        except (OSError, EOFError, zlib.error):
            ok = False
        while reader.read(_CHUNK):  # whatever the decompressor left unread
            pass
    canon_hex = None
    if canonical_gzip and ok:
        canon.update(comp.flush())
        canon.update(crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little"))
        canon_hex = canon.hexdigest()
    return ContentHashes(p, raw.hexdigest(), content.hexdigest() if ok else None, size,
                         canon_hex)


# --------------------------------------------------------------------------- datasets


def _add_part(parts: dict[str, HeldoutPart], sha: Any, name: str, where: Path, *,
              compression: str = "unknown", content_sha256: Any = None,
              question_ids: Any = None, beside: Path | None = None,
              question_keys: Any = None) -> None:
    if not isinstance(sha, str) or len(sha) != 64:
        return
    part = parts.get(sha)
    if part is None:
        part = parts[sha] = HeldoutPart(sha, name)
    if str(where) not in part.where:
        part.where.append(str(where))
    if part.compression == "unknown" and compression != "unknown":
        part.compression = compression
    if part.compression == "unknown" and name.endswith(".gz"):
        part.compression = "gzip"
    if part.content_sha256 is None and isinstance(content_sha256, str):
        part.content_sha256 = content_sha256
    if part.question_ids is None and isinstance(question_ids, list):
        part.question_ids = frozenset(str(q) for q in question_ids)
    if part.question_keys is None and isinstance(question_keys, list):
        part.question_keys = frozenset(str(k) for k in question_keys)
    if part.compression == "none" and part.content_sha256 is None:
        part.content_sha256 = sha
    if part.content_sha256 is None and beside is not None and beside.is_file():
        try:
            h = content_hashes(beside)
        except OSError:
            return
        if h.sha256 == sha and h.content_sha256 is not None:
            part.content_sha256 = h.content_sha256
            part.part_file = beside
    elif part.part_file is None and beside is not None and beside.is_file():
        part.part_file = beside  # a candidate: its sha256 is checked before it is read


def heldout_parts(roots: Iterable[str | Path] | None = None, *,
                  ledger: str | Path | None = None) -> dict[str, HeldoutPart]:
    """Every held-out dataset part visible from the search roots (see the module docstring),
    keyed by the sha256 its manifest, marker or ledger records."""
    from engram_eval.data.split import MANIFEST_KIND as SPLIT_KIND
    from engram_eval.data.split import MARKER_KIND

    parts: dict[str, HeldoutPart] = {}
    for p in [*_files(search_roots(roots), datasets_only=True), *_ledgers(ledger),
              *_registries()]:
        doc = _read_doc(p)
        if doc is None:
            continue
        kind = doc.get("kind")
        if kind == REGISTRY_KIND:
            _add_registered(parts, doc, p)
        elif kind == SPLIT_KIND or (p.name == SPLIT_MANIFEST_NAME and "parts" in doc):
            held = (doc.get("parts") or {}).get("heldout")
            if isinstance(held, dict):
                fname = str(held.get("file") or "heldout part")
                _add_part(parts, held.get("sha256"), fname, p,
                          compression=str(held.get("compression") or "unknown"),
                          content_sha256=held.get("content_sha256"),
                          question_ids=held.get("question_ids"), beside=p.parent / fname)
        elif kind == MARKER_KIND or p.name.endswith(MARKER_SUFFIX):
            if doc.get("part") == "heldout":
                fname = p.name[: -len(MARKER_SUFFIX)]
                _add_part(parts, doc.get("part_sha256"), fname, p,
                          content_sha256=doc.get("content_sha256"), beside=p.parent / fname)
        elif kind == LEDGER_KIND:
            for sha, entry in (doc.get("inputs") or {}).items():
                inp = entry.get("input", {}) if isinstance(entry, dict) else {}
                if inp.get("kind") == "dataset":
                    _add_part(parts, sha, str(inp.get("name") or "dataset"), p)
    return parts


def _add_registered(parts: dict[str, HeldoutPart], doc: Mapping[str, Any], where: Path) -> None:
    """The parts a registry lists (see :func:`registry_path`), with their question keys."""
    entries = doc.get("parts")
    if not isinstance(entries, dict):
        return
    for sha, e in entries.items():
        if not isinstance(e, dict):
            continue
        _add_part(parts, sha, str(e.get("file") or "heldout part"), where,
                  compression=str(e.get("compression") or "unknown"),
                  content_sha256=e.get("content_sha256"),
                  question_ids=e.get("question_ids"),
                  question_keys=e.get("question_keys"))
        part = parts.get(sha)
        for m in e.get("manifests") or ():
            if part is not None and isinstance(m, str) and m not in part.where:
                part.where.append(m)  # the split manifests it was registered from


def _match_part(part: HeldoutPart, how: str) -> HeldoutMatch:
    # split manifests first, then markers, then ledgers
    where = sorted(part.where, key=lambda w: (not w.endswith(SPLIT_MANIFEST_NAME),
                                              not w.endswith(MARKER_SUFFIX), w))
    return HeldoutMatch(part.sha256, f"part {part.name}", tuple(where), how)


def find_heldout(path: str | Path, *, roots: Iterable[str | Path] | None = None,
                 ids: Iterable[str] | None = None,
                 ledger: str | Path | None = None) -> HeldoutMatch | None:
    """The known held-out part whose content ``path`` has (see the module docstring), or
    None. ``ids``: the dataset's question ids, when known (limits the costly re-compression
    to parts with the same ids)."""
    parts = heldout_parts(roots, ledger=ledger)
    if not parts:
        return None
    id_set = None if ids is None else frozenset(ids)
    need_canon = [p for p in parts.values()
                  if p.compression == "gzip" and p.content_sha256 is None
                  and (id_set is None or p.question_ids is None or p.question_ids == id_set)]
    h = content_hashes(path, canonical_gzip=bool(need_canon))
    if h.sha256 in parts:
        return _match_part(parts[h.sha256], "file bytes")
    if h.content_sha256 is not None:
        for part in parts.values():
            if h.content_sha256 in (part.content_sha256, part.sha256):
                return _match_part(part, "decompressed content")
    if h.canonical_gzip_sha256 is not None:
        for part in need_canon:
            if h.canonical_gzip_sha256 == part.sha256:
                return _match_part(part, "content gzip-compressed as the split does")
    return None


def is_heldout(path: str | Path, roots: Iterable[str | Path] | None = None) -> str | None:
    """A description of the held-out part ``path`` is a copy of (naming the manifest that
    lists it), or None. Symlinks are resolved; compression does not matter."""
    m = find_heldout(path, roots=roots)
    return None if m is None else m.describe()


# --------------------------------------------------------------------------- fixtures


def _sorted_canonical(items: Any) -> Any:
    """A list's elements in the order of their canonical JSON (anything else unchanged)."""
    from engram_eval.io import canonical_json

    if not isinstance(items, list):
        return items
    return sorted(items, key=canonical_json)


def case_key(case: Mapping[str, Any]) -> str:
    """sha256 of a fixture case's memories and questions (canonical JSON; ``case_id``
    ignored; the memories and the questions each taken in canonical order, so reordering
    either does not change the key)."""
    from engram_eval.io import sha256_json

    return sha256_json({"memories": _sorted_canonical(case.get("memories")),
                        "questions": _sorted_canonical(case.get("questions"))})


def _case_keys(doc: Mapping[str, Any]) -> list[str]:
    cases = doc.get("cases")
    if not isinstance(cases, list):
        return []
    out = []
    for c in cases:
        if isinstance(c, dict):
            try:
                out.append(case_key(c))
            except (TypeError, ValueError):
                continue
    return out


@dataclass
class HeldoutFixtures:
    """Known held-out fixtures: file sha256 -> (name, where); case key -> (fixture sha256,
    name, where)."""

    files: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    cases: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def add_file(self, sha: Any, name: str, where: Path) -> None:
        if isinstance(sha, str) and len(sha) == 64:
            entry = self.files.setdefault(sha, (name, []))
            if str(where) not in entry[1]:
                entry[1].append(str(where))


def heldout_fixtures(roots: Iterable[str | Path] | None = None, *,
                     ledger: str | Path | None = None) -> HeldoutFixtures:
    """Every held-out production fixture visible from the search roots (fixture documents
    with ``"heldout": true``, held-out production-run outputs, ledger entries)."""
    from engram_eval.io import sha256_file

    known = HeldoutFixtures()
    for p in [*_files(search_roots(roots)), *_ledgers(ledger)]:
        doc = _read_doc(p)
        if doc is None:
            continue
        kind = doc.get("kind")
        if kind == LEDGER_KIND:
            for sha, entry in (doc.get("inputs") or {}).items():
                inp = entry.get("input", {}) if isinstance(entry, dict) else {}
                if inp.get("kind") == "fixture":
                    known.add_file(sha, str(inp.get("name") or "fixture"), p)
        elif kind == PRODUCTION_RUN_KIND and doc.get("heldout") is True:
            inp = doc.get("fixture") or {}
            if isinstance(inp, dict):
                known.add_file(inp.get("sha256"), str(inp.get("name") or "fixture"), p)
        elif doc.get("heldout") is True and isinstance(doc.get("cases"), list):
            sha = sha256_file(p)
            known.add_file(sha, p.name, p)
            for k in _case_keys(doc):
                known.cases.setdefault(k, (sha, p.name, str(p)))
    return known


def fixture_heldout(path: str | Path, doc: Mapping[str, Any] | None = None, *,
                    roots: Iterable[str | Path] | None = None,
                    ledger: str | Path | None = None) -> HeldoutMatch | None:
    """Why the production fixture at ``path`` is held out -- (a) its own ``heldout`` field,
    (b) its file's sha256, (c) a case equal to a known held-out fixture's case (see the
    module docstring) -- or None. ``doc``: the parsed fixture (read from ``path`` if not
    given). A match by (b) or (c) is keyed by the known fixture's sha256; by (a) alone, by
    the file's own."""
    from engram_eval.io import sha256_file

    p = Path(path).resolve()
    if doc is None:
        doc = _read_doc(p) or {}
    sha = sha256_file(p)
    known = heldout_fixtures(roots, ledger=ledger)
    if sha in known.files:
        name, where = known.files[sha]
        return HeldoutMatch(sha, f"fixture {name}", tuple(where), "file bytes")
    for k in _case_keys(doc):
        if k in known.cases:
            ksha, kname, kwhere = known.cases[k]
            return HeldoutMatch(ksha, f"fixture {kname}", (kwhere,),
                                "case memories and questions")
    if doc.get("heldout") is True:
        return HeldoutMatch(sha, f"fixture {p.name}", (str(path),), "own 'heldout' field")
    return None
