"""The one held-out guard every command that reads a dataset asks (issue 28 item 4).

:mod:`engram_eval.provenance.heldout` knows the held-out parts (split manifests, markers,
ledgers under the search roots, and the user's registry) and matches a *whole* part by its
bytes or decompressed content. This module adds what a whole-part match misses, and is what
the commands call:

* **links first**: the input is resolved before anything is read, and the split marker is
  read beside the link *and* beside its target (a link to a marked part anywhere is that
  part); the split manifest beside the target is read as a search root too;
* **by question content**: each question of a known held-out part has a key,
  :func:`question_key` (sha256 of its whitespace-collapsed question text and answer, through
  the package's own loader), so a subset of a part, a part mixed with other data, a
  re-serialised or re-compressed copy and a stress set padded from a part are recognised:
  an input that holds *any* held-out question is held-out data, whatever else it holds.
  The keys come from the registry (below) or from a part file lying beside its manifest or
  marker (checked against the recorded sha256 first);
* **the registry**: ``engram-eval split`` registers the held-out part it writes
  (:func:`register_split`) in the user-level file
  :func:`engram_eval.provenance.heldout.registry_path` (``$ENGRAM_EVAL_HELDOUT_REGISTRY``,
  else ``$XDG_STATE_HOME/engram-eval/heldout_registry.json``): its file name, sha256s,
  question ids and question keys, and the manifest that lists it. Copies anywhere are then
  recognised, with or without the split directory.

Two ways to ask:

* :func:`refuse_heldout` (split, make-stress, train-reranker, the calibration, the
  abstention sweep): any held-out content is one :class:`ProvenanceError` naming the file
  and the held-out part;
* :func:`gate_heldout` (``run``, the confidence measurement): the held-out part *itself*
  (by marker, bytes, content or exactly its questions) is returned, to run once under a
  frozen manifest; anything else holding held-out questions is refused outright -- except,
  for ``run`` (``label_source``), the very file a split was made from (its recorded source
  sha256): it runs, labelled :data:`CONTAINS_HELDOUT` in its sidecar and summary
  (:func:`source_label`), and every command that chooses settings refuses such a run
  (:func:`refuse_heldout_run`). A user who split the bundled fixture once can still run the
  README's main job on it; its numbers say they are no measurement.

``run --questions FILE`` replaces question texts: the guard is also asked with the texts the
run will use (``replaced``), so a held-out part whose texts were swapped for placeholders,
the real texts in the questions file, is still the held-out part.

A refusal caused by the user's registry names the registered part and the commands that
show and forget it (``engram-eval heldout list|forget``, :mod:`engram_eval.provenance.registry`).

What it cannot see: a question whose text or answer was edited (its key changes), and a
held-out part known only through a manifest that predates question keys (the published
LongMemEval dev split) without the part file beside it: that part is recognised whole
(bytes or content), not question by question.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.errors import DataError, EngramEvalError, ProvenanceError
from engram_eval.provenance import heldout as H
from engram_eval.provenance import registry as R

#: How many held-out question ids an error message names.
SHOWN_IDS = 3
#: The frozen-source labels of a held-out run (engram_eval.provenance.frozen.HELDOUT and
#: REGRESSION; frozen imports this module, so they are repeated here and a test pins them).
HELDOUT_RUN_LABELS = ("held-out measurement", "regression check")
#: The label of a run whose dataset is a split's source (it holds held-out questions), in
#: its sidecar and summary under :data:`LABEL_FIELD`.
CONTAINS_HELDOUT = "contains held-out questions: not a measurement"
LABEL_FIELD = "heldout_questions"


# --------------------------------------------------------------------------- question keys


def _text(value: Any) -> str:
    return " ".join(str(value).split())


def question_key(question: Any, answer: Any) -> str:
    """sha256 of a question's content: its text and its answer, each with whitespace
    collapsed, as canonical JSON. Ids, dates, types and haystacks are left out, so a renamed
    question or a padded haystack keeps its key; an edited question text does not."""
    from engram_eval.io import canonical_json

    doc = canonical_json({"answer": _text(answer), "question": _text(question)})
    return hashlib.sha256(doc.encode("utf-8")).hexdigest()


def key_of(q: Any) -> str:
    """:func:`question_key` of a loaded :class:`engram_eval.data.records.Question`."""
    return question_key(q.question, q.answer)


_KEY_CACHE: dict[tuple[str, int, int, int], dict[str, str]] = {}


def dataset_keys(path: str | Path) -> dict[str, str]:
    """``question_id -> question_key`` of every question of a dataset file (LongMemEval or
    LoCoMo, plain or gzipped), read through the package's loader (streamed for LongMemEval).
    Cached per file (size, mtime, inode) for the process."""
    from engram_eval.data.datasets import open_source

    p = Path(path).resolve()
    st = p.stat()
    ck = (str(p), st.st_size, st.st_mtime_ns, st.st_ino)
    if ck not in _KEY_CACHE:
        keys: dict[str, str] = {}

        def observe(q: Any) -> None:
            keys[q.question_id] = key_of(q)

        open_source(p, observe=observe)
        _KEY_CACHE[ck] = keys
    return dict(_KEY_CACHE[ck])


def _part_keys(part: H.HeldoutPart) -> frozenset[str] | None:
    """The part's question keys: recorded (registry), else read from its file beside its
    manifest or marker when that file still has the recorded sha256."""
    if part.question_keys is not None:
        return part.question_keys
    f = part.part_file
    if f is None:
        return None
    try:
        if H.content_hashes(f).sha256 != part.sha256:
            return None
        part.question_keys = frozenset(dataset_keys(f).values())
    except (OSError, ValueError, EngramEvalError):  # unreadable beside a manifest: no keys
        return None
    return part.question_keys


def question_index(parts: Mapping[str, H.HeldoutPart]) -> dict[str, H.HeldoutPart]:
    """``question_key -> held-out part`` over every part whose keys are known."""
    index: dict[str, H.HeldoutPart] = {}
    for part in parts.values():
        for k in _part_keys(part) or ():
            index.setdefault(k, part)
    return index


# --------------------------------------------------------------------------- findings


@dataclass(frozen=True)
class HeldoutFinding:
    """Why a dataset file is held-out data.

    ``whole``: the file is the held-out part itself (by its marker, its bytes or content, or
    exactly the part's questions); ``match``: the known part (its ``key`` is the sha256 the
    ledger keeps it under; None when only a marker says so); ``held_ids``: the input's
    question ids that are held-out questions (empty for a whole-part match by bytes);
    ``registered``: the key of the part in the user's registry when the registry is what
    makes the file held-out data; ``source_of``: the file is the recorded source of a split
    of that part."""

    path: str
    target: Path
    whole: bool
    part: str
    how: str
    match: H.HeldoutMatch | None = None
    marker: Mapping[str, Any] | None = None
    held_ids: tuple[str, ...] = ()
    n_questions: int = 0
    registered: str | None = None
    source_of: bool = False

    def describe(self) -> str:
        """One line: the file (and its link target), what it holds, the held-out part and,
        when the registry is the reason, the commands that show and forget it."""
        who = f"{self.path}{_link_note(self.path, self.target)}"
        hint = "" if self.registered is None else registry_hint(self.registered)
        if self.whole:
            return f"{who}: is the held-out {self.part}, by {self.how}{hint}"
        shown = ", ".join(self.held_ids[:SHOWN_IDS])
        more = "" if len(self.held_ids) <= SHOWN_IDS else ", …"
        source = " (the file it was split from)" if self.source_of else ""
        return (f"{who}: holds {len(self.held_ids)} of its {self.n_questions} question(s) "
                f"({shown}{more}) from the held-out {self.part}{source}, by {self.how}{hint}")


def _link_note(path: str | Path, target: Path) -> str:
    """`` (a link to T)`` when ``path`` is a symbolic link, `` (resolves to T)`` when a
    directory on its way is one, else nothing: a relative path to a plain file is no link."""
    import os

    if os.path.islink(path):
        return f" (a link to {target})"
    if Path(os.path.abspath(path)) != target:
        return f" (resolves to {target})"
    return ""


def registry_hint(key: str) -> str:
    """Where a registered part is listed and how to see or forget it (for refusals)."""
    return (f" (registered by `engram-eval split` in {R.registry_path()}: `engram-eval heldout "
            f"list` shows it; `engram-eval heldout forget {key[:16]} --reason TEXT` forgets it "
            "if that split was not meant to hold it out)")


def _describe_part(part: H.HeldoutPart) -> str:
    m = H._match_part(part, "")
    return f"part {part.name} (sha256 {part.sha256[:16]}…) listed in {', '.join(m.where)}"


def _marker(path: str | Path, target: Path) -> tuple[Path, dict[str, Any]] | None:
    """The split marker saying ``heldout`` beside the path as given or beside its resolved
    target (ProvenanceError when a marker there does not describe the file)."""
    from engram_eval.data.split import marker_path, part_marker

    for p in dict.fromkeys((Path(path), target)):
        marker = part_marker(p)
        if marker is not None and marker.get("part") == "heldout":
            return marker_path(p), marker
    return None


def _extra_roots(target: Path) -> list[Path]:
    manifest = target.parent / H.SPLIT_MANIFEST_NAME
    return [manifest] if manifest.is_file() else []


def _registered(match: H.HeldoutMatch | None, parts: Mapping[str, H.HeldoutPart]) -> str | None:
    if match is None or match.key not in parts or not parts[match.key].registered:
        return None
    return match.key


def _is_source(target: Path, part: H.HeldoutPart) -> bool:
    """Whether ``target`` is (by bytes or content) a file ``part`` was split from."""
    if not part.sources:
        return False
    h = H.content_hashes(target)
    return bool({h.sha256, h.content_sha256} & part.sources)


def inspect_dataset(path: str | Path, *, roots: Iterable[str | Path] | None = None,
                    ledger: str | Path | None = None,
                    keys: Mapping[str, str] | None = None,
                    ids: Iterable[str] | None = None,
                    replaced: Mapping[str, str] | None = None) -> HeldoutFinding | None:
    """What held-out data the dataset file ``path`` holds, or None (module docstring).

    ``keys``: the file's ``question_id -> question_key`` when the caller already read its
    questions (else read here, only when some held-out part's question keys are known);
    ``ids``: its question ids (the keys' ids when not given), which keep the whole-part
    match cheap (:func:`engram_eval.provenance.heldout.find_heldout`); ``replaced``: the
    keys of the questions whose texts a run replaces (``run --questions FILE``), with the
    texts it will use: a question is held out by either key."""
    target = Path(path).resolve()
    found = _marker(path, target)
    all_roots = [*(roots or ()), *_extra_roots(target)]
    if ids is None and keys is not None:
        ids = list(keys)
    match = H.find_heldout(target, roots=all_roots, ids=ids, ledger=ledger)
    if found is not None:
        mp, marker = found
        manifest = mp.parent / str(marker.get("split_manifest") or H.SPLIT_MANIFEST_NAME)
        sha = str(marker.get("split_manifest_sha256"))[:16]
        return HeldoutFinding(str(path), target, True,
                              f"part {mp.name.removesuffix(H.MARKER_SUFFIX)} of the split "
                              f"{manifest} (sha256 {sha}…)", f"its split marker {mp}",
                              match=match, marker=marker)
    parts = H.heldout_parts(all_roots, ledger=ledger)
    if match is not None:
        return HeldoutFinding(str(path), target, True,
                              f"{match.name} (sha256 {match.key[:16]}…) listed in "
                              f"{', '.join(match.where)}", f"its {match.how}", match=match,
                              registered=_registered(match, parts))
    index = question_index(parts)
    if not index:
        return None
    try:
        own = dict(keys) if keys is not None else dataset_keys(target)
    except DataError:  # not a dataset the loader reads: the command's own loader says so
        return None
    alt = dict(replaced or {})
    # each question by the key that is held out: its own, or with the text the run uses
    eff = {q: (alt[q] if k not in index and alt.get(q) in index else k)
           for q, k in own.items()}
    held = [qid for qid, k in eff.items() if k in index]
    if not held:
        return None
    part = index[eff[held[0]]]
    whole = len(held) == len(eff) == len(_part_keys(part) or ()) and \
        all(index[eff[q]] is part for q in held)
    m = H._match_part(part, "question content")
    how = "question content (text and answer)"
    if any(eff[q] != own[q] for q in held):
        how += ", with the question texts the run replaces (--questions)"
    return HeldoutFinding(str(path), target, whole, _describe_part(part), how,
                          match=m if whole else None, held_ids=tuple(held),
                          n_questions=len(own),
                          registered=part.sha256 if part.registered else None,
                          source_of=not whole and _is_source(target, part))


# --------------------------------------------------------------------------- the two ways to ask


def refuse_heldout(path: str | Path, purpose: str, *, roots: Iterable[str | Path] | None = None,
                   ledger: str | Path | None = None,
                   keys: Mapping[str, str] | None = None) -> None:
    """ProvenanceError when ``path`` holds any held-out data (:func:`inspect_dataset`): one
    line naming the file, the held-out part and ``purpose`` (why this command refuses)."""
    f = inspect_dataset(path, roots=roots, ledger=ledger, keys=keys)
    if f is not None:
        raise ProvenanceError(f"{f.describe()}; {purpose}")


def gate_heldout(path: str | Path, *, roots: Iterable[str | Path] | None = None,
                 ledger: str | Path | None = None, keys: Mapping[str, str] | None = None,
                 ids: Iterable[str] | None = None, replaced: Mapping[str, str] | None = None,
                 label_source: bool = False) -> HeldoutFinding | None:
    """For commands that run a held-out part once under a frozen manifest: the finding when
    ``path`` is the held-out part itself (the caller then requires the frozen manifest),
    None when it holds no held-out data; ProvenanceError when it holds held-out questions
    without being the part (a subset, or a mixture with other data). With
    ``label_source`` (``run``), the file a split was made from is returned too (``whole``
    False, ``source_of`` True): the caller runs it labelled (:func:`source_label`).
    ``replaced``: as :func:`inspect_dataset`."""
    f = inspect_dataset(path, roots=roots, ledger=ledger, keys=keys, ids=ids,
                        replaced=replaced)
    if f is not None and not f.whole and not (label_source and f.source_of):
        raise ProvenanceError(
            f"{f.describe()}; only the held-out part itself runs, once, under a frozen "
            "manifest: run the part, or remove its questions from this file")
    return f


def source_label(f: HeldoutFinding) -> dict[str, Any]:
    """What the sidecar and summary of a run of a split's source record under
    :data:`LABEL_FIELD`: the label, the held-out part and how many questions it holds."""
    return {"label": CONTAINS_HELDOUT, "heldout_part": f.part, "registered": f.registered,
            "n_heldout_questions": len(f.held_ids), "n_questions": f.n_questions}


def refuse_heldout_run(meta: Mapping[str, Any], run: str | Path, purpose: str) -> None:
    """ProvenanceError when the finished run ``run`` (sidecar ``meta``) was made on held-out
    data: its frozen source is labelled held-out, it is labelled :data:`CONTAINS_HELDOUT`,
    or its dataset's sha256 is a known held-out part's (bytes or content) or the recorded
    source of a split of one (a run made before the label, or with it edited away)."""
    fs = meta.get("frozen_source")
    if isinstance(fs, Mapping) and (fs.get("heldout_match") or
                                    fs.get("label") in HELDOUT_RUN_LABELS):
        raise ProvenanceError(f"{run}: a run of a held-out part (its frozen source is "
                              f"labelled {fs.get('label')!r}); {purpose}")
    lab = meta.get(LABEL_FIELD)
    if isinstance(lab, Mapping):
        key = lab.get("registered")
        hint = registry_hint(key) if isinstance(key, str) else ""
        raise ProvenanceError(f"{run}: labelled {CONTAINS_HELDOUT!r} (its dataset holds "
                              f"{lab.get('n_heldout_questions')} question(s) of the held-out "
                              f"{lab.get('heldout_part')}){hint}; {purpose}")
    ds = meta.get("dataset")
    sha = ds.get("sha256") if isinstance(ds, Mapping) else None
    if not isinstance(sha, str):
        return
    for part in H.heldout_parts().values():
        hint = registry_hint(part.sha256) if part.registered else ""
        if sha in (part.sha256, part.content_sha256):
            raise ProvenanceError(f"{run}: a run of the held-out {_describe_part(part)}"
                                  f"{hint}; {purpose}")
        if sha in part.sources:
            raise ProvenanceError(f"{run}: a run of the file the held-out "
                                  f"{_describe_part(part)} was split from (it holds that "
                                  f"part's questions){hint}; {purpose}")


# --------------------------------------------------------------------------- split


def check_split(source: str | Path, *, holdout: float, salt: str) -> None:
    """Refuse to split ``source`` when that would launder held-out data: the source is a
    held-out part, or the tuning part it would get holds a held-out question (a re-split
    with the recorded salt and fraction keeps every held-out question held out, and passes).
    Invalid arguments are left to :func:`engram_eval.data.split.split_dataset`."""
    from engram_eval.data import split as S

    why = "splitting it would put held-out questions into a tuning part"
    f = inspect_dataset(source)
    if f is None:
        return
    if f.whole or not 0.0 < float(holdout) < 1.0 or not salt:
        raise ProvenanceError(f"{f.describe()}; {why}")
    src = Path(source)
    layout = S.read_layout(src)
    units = S.units_of(src, layout.records, S.detect_format(layout.records))
    parts = S.assign(units, float(holdout), salt)
    tune_ids = {q for i in parts["tune"] for q in units[i].question_ids}
    leaked = tuple(q for q in f.held_ids if q in tune_ids)
    if leaked:
        shown = ", ".join(leaked[:SHOWN_IDS]) + (", …" if len(leaked) > SHOWN_IDS else "")
        raise ProvenanceError(f"{f.describe()}; with --salt {salt!r} --holdout {holdout} "
                              f"{len(leaked)} of them ({shown}) would land in the tuning "
                              f"part: {why}")


def file_identity(path: str | Path) -> R.FileIdentity:
    """The hashes and question keys ``heldout forget`` matches a given file by."""
    h = H.content_hashes(path)
    try:
        keys: frozenset[str] | None = frozenset(dataset_keys(path).values())
    except (ValueError, EngramEvalError):  # not a dataset: matched by its hashes only
        keys = None
    return R.FileIdentity(frozenset(x for x in (h.sha256, h.content_sha256) if x), keys)


def forget_part(given: str, reason: str) -> R.Forgotten:
    """``engram-eval heldout forget``: :func:`engram_eval.provenance.registry.forget`,
    ``given`` read as a file when one is there (else as a registry key)."""
    import os

    file = file_identity(given) if os.path.lexists(given) else None
    return R.forget(given, reason, file=file)


def register_split(manifest_path: str | Path, manifest: Mapping[str, Any],
                   heldout_file: str | Path) -> Path:
    """Record the held-out part a split wrote in the user's registry
    (:func:`engram_eval.provenance.heldout.registry_path`; created if absent, replaced
    atomically under a lock, entries keyed by the part's sha256, so registering the same
    part again changes nothing but the manifest list; a registry that cannot be read is
    refused before anything is written, :func:`engram_eval.provenance.registry.read_registry`).
    Returns the registry path."""
    held = manifest["parts"]["heldout"]
    keys = sorted(set(dataset_keys(heldout_file).values()))
    mp = str(Path(manifest_path).resolve())

    def change(doc: dict[str, Any]) -> None:
        entry = doc["parts"].setdefault(held["sha256"], {})
        manifests: list[str] = list(entry.get("manifests") or [])
        if mp not in manifests:
            manifests.append(mp)
        entry.update({"file": held["file"], "compression": held.get("compression"),
                      "content_sha256": held.get("content_sha256"),
                      "source_sha256": manifest["source"]["sha256"],
                      "salt": manifest["salt"], "holdout": manifest["holdout"],
                      "question_ids": list(held["question_ids"]), "question_keys": keys,
                      "manifests": manifests})
        entry.setdefault("registered_at", R.now())

    return R.update_registry(change)


def guarded_split(source: str | Path, *, holdout: float, salt: str, output_dir: str | Path,
                  compress: str = "auto") -> tuple[Any, Path]:
    """``engram-eval split``: :func:`check_split`, the split itself
    (:func:`engram_eval.data.split.split_dataset`), then :func:`register_split`. Returns
    (the split's outcome, the registry path)."""
    from engram_eval.data.split import split_dataset

    check_split(source, holdout=holdout, salt=salt)
    out = split_dataset(source, holdout=holdout, salt=salt, output_dir=output_dir,
                        compress=compress)
    reg = register_split(out.manifest_path, out.manifest, out.part_paths["heldout"])
    return out, reg


def ids_and_keys(questions: Sequence[Any]) -> dict[str, str]:
    """``question_id -> question_key`` of loaded questions (for callers that hold them)."""
    return {q.question_id: key_of(q) for q in questions}
