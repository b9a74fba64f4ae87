"""The user's held-out registry: read fail-closed, listed, and parts forgotten on the record.

``engram-eval split`` registers the held-out part it writes in one user-level JSON file
(:func:`registry_path`), so that a copy of the part is recognised wherever it lies
(:mod:`engram_eval.provenance.guard`). Three rules make that file something a person can
live with:

* **Fail closed** (:func:`read_registry`). The guard cannot tell held-out data from other
  data without the registry, so a registry that exists but cannot be read whole -- a
  directory, a device (a link to ``/dev/zero``), a dangling link, over
  :data:`MAX_REGISTRY_BYTES`, truncated or invalid JSON, another kind of document (``[]``),
  an entry of the wrong shape -- is one :class:`ProvenanceError` naming the file and what to
  do, for every command that asks the guard, never a registry silently ignored. Only a
  registry that does not exist at all is empty.
* **Listed** (:func:`registered_parts`, ``engram-eval heldout list``): every registered
  part with its file name, hashes, split manifests and when it was registered.
* **Forgotten on the record** (:func:`forget`, ``engram-eval heldout forget PART --reason
  TEXT``): the entry leaves ``parts`` and is appended, whole, to the registry's
  ``forgotten`` list with the time and the reason (a reason is required). No file is
  deleted: a part's split marker still marks the part file itself as held out.

The registry is replaced atomically under a file lock (:func:`engram_eval.io.file_lock`).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.errors import EngramEvalError, ProvenanceError

#: Where ``engram-eval split`` registers the held-out parts it writes (see registry_path).
ENV_REGISTRY = "ENGRAM_EVAL_HELDOUT_REGISTRY"
REGISTRY_KIND = "engram-eval/heldout-registry"
#: A registry larger than this is refused (a part's entry is about 70 bytes per question).
MAX_REGISTRY_BYTES = 64 << 20
#: The shortest key prefix ``heldout forget`` accepts.
MIN_KEY_PREFIX = 8
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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


def empty_registry() -> dict[str, Any]:
    return {"kind": REGISTRY_KIND, "version": 1, "parts": {}}


def _refuse(path: Path, problem: str) -> ProvenanceError:
    return ProvenanceError(
        f"{path}: the held-out registry {problem}; without it the held-out guard cannot tell "
        "which data is held out, so no command that reads data runs: restore the file from a "
        "backup, or move it aside (the parts it registered are then no longer recognised, "
        f"until `engram-eval split` registers them again), or point ${ENV_REGISTRY} at "
        "another registry")


def _file_problem(p: Path) -> str | None:
    """What keeps ``p`` (which exists or is a link) from being read as a registry, or None."""
    from engram_eval.io import link_problem

    try:
        st = p.stat()
    except OSError as e:
        return link_problem(p) or f"cannot be read ({e.strerror or e})"
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(st.st_mode):
        link = link_problem(p)
        return (f"{link}, " if link else "") + "is not a regular file (a device, FIFO or socket)"
    if st.st_size > MAX_REGISTRY_BYTES:
        return f"is {st.st_size} bytes, over the limit of {MAX_REGISTRY_BYTES}"
    return None


def _entry_problem(key: Any, e: Any) -> str | None:
    if not isinstance(key, str) or not _SHA256.match(key):
        return f"has a part key {key!r} that is not a sha256"
    if not isinstance(e, dict):
        return f"part {key}: the entry is not an object"
    for name in ("file",):
        if not isinstance(e.get(name), str) or not e[name]:
            return f"part {key}: field {name!r} is missing or not a string"
    for name in ("question_ids", "question_keys", "manifests"):
        v = e.get(name)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            return f"part {key}: field {name!r} is not a list of strings"
    return None


def check_registry(doc: Any) -> str | None:
    """What is wrong with a parsed registry document, or None."""
    if not isinstance(doc, dict):
        return f"is not a JSON object (it holds {type(doc).__name__} {str(doc)[:20]})"
    if doc.get("kind") != REGISTRY_KIND:
        return f"has kind {doc.get('kind')!r}, not {REGISTRY_KIND!r}"
    parts = doc.get("parts")
    if not isinstance(parts, dict):
        return "has no 'parts' object"
    for key, e in parts.items():
        problem = _entry_problem(key, e)
        if problem:
            return problem
    if not isinstance(doc.get("forgotten", []), list):
        return "has a 'forgotten' field that is not a list"
    return None


def read_registry(path: str | Path | None = None) -> dict[str, Any]:
    """The registry at ``path`` (default :func:`registry_path`), checked; an empty one when
    no file (and no link) is there. Anything else that keeps it from being read whole is one
    :class:`ProvenanceError` naming the file and what to do (module docstring)."""
    from engram_eval.data._jsonio import read_json_document

    p = Path(path) if path is not None else registry_path()
    if not os.path.lexists(p):
        return empty_registry()
    problem = _file_problem(p)
    if problem is None:
        try:
            doc = read_json_document(p, what="the held-out registry", limit=MAX_REGISTRY_BYTES)
        except (OSError, EngramEvalError) as e:
            raise _refuse(p, f"cannot be read as JSON ({str(e).strip()})") from None
        problem = check_registry(doc)
    if problem is not None:
        raise _refuse(p, problem)
    return doc


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def update_registry(change: Any, path: str | Path | None = None) -> Path:
    """Read the registry under its lock, apply ``change(doc)`` (which edits it in place) and
    replace it atomically. A registry that cannot be read is refused before anything is
    written (:func:`read_registry`)."""
    from engram_eval.io import atomic_write, dump_json, file_lock

    reg = Path(path) if path is not None else registry_path()
    with file_lock(reg):
        doc = read_registry(reg)
        change(doc)
        atomic_write(reg, dump_json(doc))
    return reg


# --------------------------------------------------------------------------- list


@dataclass(frozen=True)
class RegisteredPart:
    """One registry entry as ``heldout list`` shows it."""

    key: str
    file: str
    content_sha256: str | None
    n_questions: int
    source_sha256: str | None
    salt: Any
    holdout: Any
    manifests: tuple[str, ...]
    registered_at: str | None

    def lines(self) -> list[str]:
        """What ``heldout list`` prints for the part (key first, then indented details)."""
        held = (f"salt {self.salt!r}, holdout {self.holdout}" if self.salt is not None
                else "split settings not recorded")
        when = self.registered_at or "(time not recorded: registered before times were kept)"
        return [f"{self.key}  {self.file}",
                f"  {self.n_questions} question(s); content sha256 "
                f"{self.content_sha256 or '(not recorded)'}",
                f"  split of source sha256 {self.source_sha256 or '(not recorded)'} ({held})",
                *(f"  split manifest {m}" + ("" if Path(m).is_file() else " (no longer there)")
                  for m in self.manifests),
                f"  registered {when}"]


def _part(key: str, e: Mapping[str, Any]) -> RegisteredPart:
    return RegisteredPart(key, str(e["file"]), e.get("content_sha256"),
                          len(e.get("question_ids") or e.get("question_keys") or ()),
                          e.get("source_sha256"), e.get("salt"), e.get("holdout"),
                          tuple(e.get("manifests") or ()), e.get("registered_at"))


def registered_parts(path: str | Path | None = None) -> list[RegisteredPart]:
    """Every part the registry lists, oldest registration first."""
    doc = read_registry(path)
    parts = [_part(k, e) for k, e in doc["parts"].items()]
    return sorted(parts, key=lambda p: (p.registered_at or "", p.key))


def forgotten_entries(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The registry's ledger of forgotten parts (each: key, file, forgotten_at, reason, and
    the entry as it was)."""
    return list(read_registry(path).get("forgotten") or [])


# --------------------------------------------------------------------------- forget


@dataclass(frozen=True)
class Forgotten:
    """What ``heldout forget`` did: the part it removed and where it is recorded; ``markers``
    are split markers that still mark a part file itself as held out."""

    part: RegisteredPart
    registry: Path
    reason: str
    forgotten_at: str
    markers: tuple[Path, ...]


def _by_key(parts: Mapping[str, Any], given: str) -> list[str]:
    g = given.strip().lower()
    if len(g) < MIN_KEY_PREFIX or not re.fullmatch(r"[0-9a-f]+", g):
        return []
    return [k for k in parts if k.startswith(g)]


@dataclass(frozen=True)
class FileIdentity:
    """What identifies a file given to ``forget``: the sha256 of its bytes and of its
    decompressed content, and its question keys (None when it is no dataset the loader
    reads); :func:`engram_eval.provenance.guard.file_identity` computes it."""

    hashes: frozenset[str]
    question_keys: frozenset[str] | None


def _by_file(parts: Mapping[str, Any], f: FileIdentity) -> tuple[list[str], list[str]]:
    """(keys of the parts the file is, by bytes, content or exactly its questions; keys of
    the parts whose split source the file is)."""
    same = [k for k, e in parts.items()
            if k in f.hashes or e.get("content_sha256") in f.hashes
            or (f.question_keys and frozenset(e.get("question_keys") or ()) == f.question_keys)]
    source = [k for k, e in parts.items() if e.get("source_sha256") in f.hashes]
    return same, source


def _resolve(parts: Mapping[str, Any], given: str, reg: Path,
             file: FileIdentity | None) -> str:
    """The one registered key ``given`` (a part file, identified by ``file``, or a key or
    key prefix) names."""
    if file is not None:
        same, source = _by_file(parts, file)
        if not same and source:
            named = ", ".join(k[:16] + "…" for k in source)
            raise ProvenanceError(
                f"{given}: is the file the registered part(s) {named} were split from, not a "
                "held-out part; forget a part by its file or key (`engram-eval heldout list` "
                f"shows them; registry {reg})")
        keys = same
        what = "no registered held-out part has this file's bytes, content or questions"
    else:
        keys = _by_key(parts, given)
        what = (f"neither a file nor a registered key (give the part file, or its sha256 or "
                f"at least {MIN_KEY_PREFIX} of its first hex digits)")
    if len(keys) > 1:
        raise ProvenanceError(f"{given}: names {len(keys)} registered parts "
                              f"({', '.join(k[:16] + '…' for k in keys)}); give a longer key")
    if not keys:
        raise ProvenanceError(f"{given}: {what}; `engram-eval heldout list` shows the "
                              f"registered parts (registry {reg})")
    return keys[0]


def _markers(part: RegisteredPart) -> tuple[Path, ...]:
    """Split markers beside the part's file in its split directories that still say
    ``heldout`` (they keep marking that file, which ``forget`` does not delete)."""
    from engram_eval.data.split import marker_path, part_marker

    out = []
    for m in part.manifests:
        f = Path(m).parent / part.file
        try:
            marker = part_marker(f) if f.is_file() else None
        except (OSError, EngramEvalError):
            marker = None
        if marker is not None and marker.get("part") == "heldout":
            out.append(marker_path(f))
    return tuple(out)


def forget(given: str, reason: str, *, file: FileIdentity | None = None,
           path: str | Path | None = None) -> Forgotten:
    """Remove the registered part ``given`` (a file, identified by ``file``; else its key
    or a unique key prefix of at least :data:`MIN_KEY_PREFIX` hex digits) from the
    registry, recording it in the registry's ``forgotten`` list with the time and
    ``reason`` (required, not blank). No file is deleted."""
    why = " ".join(reason.split()) if isinstance(reason, str) else ""
    if not why:
        raise ProvenanceError("heldout forget: --reason TEXT is required (why this part is no "
                              "longer held out; it is recorded with the time)")
    reg = Path(path) if path is not None else registry_path()
    done: dict[str, Any] = {}

    def change(doc: dict[str, Any]) -> None:
        key = _resolve(doc["parts"], given, reg, file)
        entry = doc["parts"].pop(key)
        done.update(part=_part(key, entry), at=now())
        doc.setdefault("forgotten", []).append(
            {"key": key, "file": entry.get("file"), "forgotten_at": done["at"],
             "reason": why, "given": str(given), "entry": entry})

    update_registry(change, reg)
    part: RegisteredPart = done["part"]
    return Forgotten(part, reg, why, done["at"], _markers(part))
