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
:mod:`engram_eval.provenance.guard`), read fail-closed: a registry that exists but cannot be
read whole is an error for every command that asks (:mod:`engram_eval.provenance.registry`).
Under each root (recursively):

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
OR (c) any of its cases has the same *normalised* memories and questions as a case of a
known held-out fixture document, OR (d) any of its questions with gold has the same
normalised query and gold memories as such a question of a known held-out fixture.
Normalised (:func:`case_key`, :func:`fixture_question_key`): ids are dropped (the
``case_id``, each memory's ``id``, each question's ``question_id``; a question's ``gold``
ids become the normalised content of the memories they name, so ids renamed consistently
change nothing), whitespace in every string is collapsed (a trailing space is not an edit),
and the memories and the questions are each taken in canonical order; the fixture's
``name``, ``heldout`` and every other top-level field are ignored. (c) is what refuses an
edited copy of ``fixtures/production/holdout.json`` with ``"heldout": false`` (or another
name, its ids renamed, its cases reordered, or mixed into another fixture): editing the flag
changes the file's hash but not its cases; (d) still sees a held-out question moved into
another case, or a case given one more memory.

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
from engram_eval.provenance.registry import ENV_REGISTRY as ENV_REGISTRY
from engram_eval.provenance.registry import REGISTRY_KIND as REGISTRY_KIND
from engram_eval.provenance.registry import read_registry
from engram_eval.provenance.registry import registry_path as registry_path

ENV_ROOTS = "ENGRAM_EVAL_HELDOUT_ROOTS"
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
    #: sha256 of the file(s) the part was split from (its split manifest's or registry
    #: entry's ``source``): that file holds the part's questions
    sources: set[str] = field(default_factory=set)
    #: listed in the user's registry (``engram-eval heldout list|forget`` apply)
    registered: bool = False

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
              question_keys: Any = None, source: Any = None) -> None:
    if not isinstance(sha, str) or len(sha) != 64:
        return
    part = parts.get(sha)
    if part is None:
        part = parts[sha] = HeldoutPart(sha, name)
    if isinstance(source, str) and len(source) == 64:
        part.sources.add(source)
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
    # the user's registry first, read fail-closed (registry.read_registry): one that exists
    # but cannot be read whole is an error, never ignored
    _add_registered(parts, read_registry(), registry_path().absolute())
    for p in [*_files(search_roots(roots), datasets_only=True), *_ledgers(ledger)]:
        doc = _read_doc(p)
        if doc is None:
            continue
        kind = doc.get("kind")
        if kind == REGISTRY_KIND:
            continue  # a registry lying under a root: only the user's own one counts
        elif kind == SPLIT_KIND or (p.name == SPLIT_MANIFEST_NAME and "parts" in doc):
            held = (doc.get("parts") or {}).get("heldout")
            if isinstance(held, dict):
                fname = str(held.get("file") or "heldout part")
                _add_part(parts, held.get("sha256"), fname, p,
                          compression=str(held.get("compression") or "unknown"),
                          content_sha256=held.get("content_sha256"),
                          question_ids=held.get("question_ids"), beside=p.parent / fname,
                          source=(doc.get("source") or {}).get("sha256")
                          if isinstance(doc.get("source"), dict) else None)
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
    """The parts a registry lists (see :func:`registry_path`; checked by
    :func:`engram_eval.provenance.registry.read_registry`), with their question keys."""
    for sha, e in doc["parts"].items():
        _add_part(parts, sha, str(e.get("file") or "heldout part"), where,
                  compression=str(e.get("compression") or "unknown"),
                  content_sha256=e.get("content_sha256"),
                  question_ids=e.get("question_ids"),
                  question_keys=e.get("question_keys"), source=e.get("source_sha256"))
        part = parts[sha]
        part.registered = True
        for m in e.get("manifests") or ():
            if m not in part.where:
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


def _collapsed(value: Any) -> Any:
    """``value`` with the whitespace of every string in it collapsed (recursively)."""
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, list):
        return [_collapsed(v) for v in value]
    if isinstance(value, dict):
        return {k: _collapsed(v) for k, v in value.items()}
    return value


def _memory_key(memory: Any) -> str:
    """sha256 of a fixture memory's normalised content (its ``id`` dropped)."""
    from engram_eval.io import sha256_json

    if isinstance(memory, dict):
        memory = {k: v for k, v in memory.items() if k != "id"}
    return sha256_json(_collapsed(memory))


def _normal_case(case: Mapping[str, Any]) -> tuple[list[str], list[Any]]:
    """A case's memories (their keys, sorted) and questions (ids dropped, ``gold`` as the
    named memories' keys, whitespace collapsed; in canonical order)."""
    from engram_eval.io import canonical_json

    raw = case.get("memories")
    memories = raw if isinstance(raw, list) else []
    by_id = {m.get("id"): _memory_key(m) for m in memories if isinstance(m, dict)}
    questions: list[Any] = []
    for q in case.get("questions") or ():
        if not isinstance(q, dict):
            questions.append(_collapsed(q))
            continue
        out = {k: _collapsed(v) for k, v in q.items() if k not in ("question_id", "gold")}
        gold = q.get("gold")
        if isinstance(gold, list):
            out["gold"] = sorted(by_id.get(g, f"unresolved:{g}") if isinstance(g, str)
                                 else canonical_json(g) for g in gold)
        elif gold is not None:
            out["gold"] = _collapsed(gold)
        questions.append(out)
    return sorted(_memory_key(m) for m in memories), sorted(questions, key=canonical_json)


def case_key(case: Mapping[str, Any]) -> str:
    """sha256 of a fixture case's normalised memories and questions (module docstring: ids
    dropped, gold by memory content, whitespace collapsed, order ignored)."""
    from engram_eval.io import sha256_json

    memories, questions = _normal_case(case)
    return sha256_json({"memories": memories, "questions": questions})


def fixture_question_key(query: Any, gold_memories: Sequence[Any]) -> str:
    """sha256 of a question's normalised query and the normalised content of its gold
    memories (in any order): the question whatever its id, case or date."""
    from engram_eval.io import sha256_json

    return sha256_json({"query": _collapsed(query),
                        "gold": sorted(_memory_key(m) for m in gold_memories)})


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


def _question_keys(doc: Mapping[str, Any]) -> list[str]:
    """:func:`fixture_question_key` of every question whose gold names memories of its case."""
    cases = doc.get("cases")
    out = []
    for c in cases if isinstance(cases, list) else ():
        if not isinstance(c, dict) or not isinstance(c.get("memories"), list):
            continue
        by_id = {m.get("id"): m for m in c["memories"] if isinstance(m, dict)}
        for q in c.get("questions") or ():
            gold = q.get("gold") if isinstance(q, dict) else None
            if not isinstance(gold, list) or not gold or \
                    not all(isinstance(g, str) and g in by_id for g in gold):
                continue
            try:
                out.append(fixture_question_key(q.get("query"), [by_id[g] for g in gold]))
            except (TypeError, ValueError):
                continue
    return out


@dataclass
class HeldoutFixtures:
    """Known held-out fixtures: file sha256 -> (name, where); case key and question key ->
    (fixture sha256, name, where)."""

    files: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    cases: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    questions: dict[str, tuple[str, str, str]] = field(default_factory=dict)

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
            for k in _question_keys(doc):
                known.questions.setdefault(k, (sha, p.name, str(p)))
    return known


def fixture_heldout(path: str | Path, doc: Mapping[str, Any] | None = None, *,
                    roots: Iterable[str | Path] | None = None,
                    ledger: str | Path | None = None) -> HeldoutMatch | None:
    """Why the production fixture at ``path`` is held out -- (a) its own ``heldout`` field,
    (b) its file's sha256, (c) a case equal to a known held-out fixture's case, (d) a
    question with gold equal to one of a known held-out fixture's (see the module
    docstring) -- or None. ``doc``: the parsed fixture (read from ``path`` if not given). A
    match by (b), (c) or (d) is keyed by the known fixture's sha256; by (a) alone, by the
    file's own."""
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
    for k in _question_keys(doc):
        if k in known.questions:
            ksha, kname, kwhere = known.questions[k]
            return HeldoutMatch(ksha, f"fixture {kname}", (kwhere,),
                                "question query and gold memories")
    if doc.get("heldout") is True:
        return HeldoutMatch(sha, f"fixture {p.name}", (str(path),), "own 'heldout' field")
    return None
