"""``engram-eval merge OUT_1 ... --output OUT``: join the shards of one run.

Each input must be a finished shard of the same run (:mod:`engram_eval.runs.shard`):

* its sidecar passes the schema and its fingerprint matches its recorded fields;
* all inputs name the same shard count N and together hold every shard index 0..N-1
  exactly once;
* with the shard selection replaced by the whole selection (``all_ids``), every input has
  the same fingerprint (the differing fields are named otherwise): same dataset, sources,
  models, packages, settings, protocols;
* every shard holds exactly its own questions (its ids are the ``all_ids`` that hash to
  its index), complete, no torn line; every question appears exactly once overall;
* every shard passes ``engram-eval verify`` against the dataset it was run on (``--dataset``,
  required): rows hash, summary, dataset hash, gold re-derived, each ranking a permutation of
  its haystack, scores never increasing, metrics recomputed, source hashes (installed package,
  or ``--sources-at COMMIT``); otherwise the shard and its failed checks are named, since the
  merged rows get a fresh rows hash and summary that would no longer show the failure.

The output is what the unsharded run would have written: rows in the selection's order
(byte for byte the same rows, since each row is re-serialised as the runner writes it),
a sidecar whose fingerprint is the unsharded run's, with a ``runs`` entry ``mode: merge``
naming every input (path, rows hash, shard, and the shard's own runs) and the merged rows
hash, and a summary recomputed from the rows; so ``engram-eval verify`` checks it as any
run. Nothing is written unless every check passes; the rows and the sidecar are created
exclusively (an existing output is refused).

Writing goes through one temporary directory beside the output, ``.OUT.merging/``
(:class:`Staging`): the rows, sidecar and summary are written there, then linked into place
(sidecar, summary, rows last; a link never overwrites) and the directory is removed. The
directory is owned by the process holding the lock on its ``owner`` file (which records its
pid); a merge killed mid-way (``kill -9``) leaves it unlocked, and the next merge into the
same output removes it -- and the sidecar or summary the killed merge had already linked into
place (the very files the directory holds under the same names; the rows, linked last, never
are) -- and says so on stderr. A failure while writing (disk full, ...) removes it at once
and leaves no output. Every removal stays inside the output's directory and never follows a
symbolic link (:func:`engram_eval.io.remove_contained`); a symbolic link at an output path or
at ``.OUT.merging`` (dangling or not) is refused before anything is done.

A finished output is never removed: an existing rows file (a merge links it last, so one
that exists is a finished result, whatever the temporary directory holds: a hard link to it
left by a merge killed inside its release step, or put there by hand), or a sidecar or
summary that is not the temporary directory's own file, is refused before anything is
cleaned (:func:`refuse_existing_output`), and the cleanup checks it again under the lock. The
``owner`` file must be a plain file with one name: a link there (symbolic, or a hard link
whose truncation would empty another file) is one clear error and nothing is changed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.data.records import Question
from engram_eval.errors import ProvenanceError, StorageError
from engram_eval.io import (
    already_exists,
    atomic_write,
    check_name_lengths,
    describe_os_error,
    dump_json,
    is_storage_error,
    link_problem,
    make_parent,
    refuse_links,
    remove_contained,
    storage_errors,
    streaming_write,
)
from engram_eval.provenance.records import meta_text
from engram_eval.provenance.sidecar import (
    FINGERPRINT_FIELDS,
    _fingerprint_view,
    diff,
    fingerprint_of,
    read_sidecar,
    sidecar_path,
    summary_path,
)
from engram_eval.runs.rows import order_rows, row_line, scan_rows
from engram_eval.runs.shard import shard_of, unsharded_selection

#: What to do after a failed write: nothing of the output is left behind.
RETRY_HINT = ("nothing was written to the output (the merge's temporary files were removed); "
              "free space (or fix the file system), then merge again")
_STAGED = ("metadata.json", "summary.json", "rows")  # linked into place in this order


@contextmanager
def _writing(final: Path) -> Iterator[None]:
    """A write failure of a staged file, named as the output file it becomes."""
    try:
        yield
    except OSError as e:
        if not is_storage_error(e) or isinstance(e, StorageError):
            raise
        raise StorageError(final, f"cannot write {final}: "
                           f"{describe_os_error(e, getattr(e, 'path', None) or final)}; "
                           f"{RETRY_HINT}", e.errno) from None


def staging_dir(output: str | Path) -> Path:
    """The one temporary directory of a merge into ``output``: ``.NAME.merging`` beside it."""
    out = Path(output)
    return out.parent / f".{out.name}.merging"


def _finals(out: Path) -> dict[str, Path]:
    return {"metadata.json": sidecar_path(out), "summary.json": summary_path(out), "rows": out}


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are two names of one file (never following a symbolic link:
    a link in the temporary directory pointing at an output is not that output)."""
    try:
        return os.path.samestat(os.lstat(a), os.lstat(b))
    except OSError:
        return False


def _half_published(out: Path, name: str) -> bool:
    """Whether the output file ``name`` (``metadata.json`` or ``summary.json``) is what a
    merge killed inside :meth:`Staging.publish` leaves: the very file its temporary
    directory holds under that name, while the rows (linked last) are absent."""
    return (name != "rows" and not os.path.lexists(out)
            and _same_file(staging_dir(out) / name, _finals(out)[name]))


def refuse_existing_output(out: Path) -> None:
    """Refuse an existing output before anything is cleaned or written: one
    ProvenanceError naming it, and nothing is changed (a stale temporary directory is left as
    it is, and said). The only output files let through are a half-published sidecar and
    summary (:func:`_half_published`), which the cleanup of the stale directory removes."""
    for name in ("rows", "metadata.json", "summary.json"):  # the output itself first
        final = _finals(out)[name]
        if os.path.lexists(final) and not _half_published(out, name):
            stage = staging_dir(out)
            note = (f" (the temporary directory {stage} of an interrupted merge is left as it "
                    "is; remove it by hand when no merge into this output runs)"
                    if os.path.lexists(stage) else "")
            raise ProvenanceError(already_exists(final) + "; nothing was changed" + note)


class Staging:
    """The temporary directory of a merge into ``out`` (:func:`staging_dir`), held through an
    exclusive ``flock`` on its ``owner`` file, which records the holder's pid and host.

    :meth:`acquire` takes it; a directory left by a merge that is no longer running (its
    lock free) is cleaned first: a half-published sidecar and summary (:func:`_half_published`)
    are removed, an existing output refused (:func:`refuse_existing_output`: a finished
    output is never removed), its temporary files are removed, and ``echo`` says so. A live
    holder is refused. :meth:`publish` links the staged files
    into place; :meth:`release` removes the directory."""

    def __init__(self, out: Path, echo: Callable[[str], None] = _stderr) -> None:
        self.out = out
        self.dir = staging_dir(out)
        self.echo = echo
        self._fd: int | None = None

    def acquire(self) -> Staging:
        import fcntl

        owner = self.dir / "owner"
        fd = -1
        for _ in range(10):  # a finishing merge may remove the directory under us: retry
            if not self.dir.is_symlink():
                with storage_errors(self.dir, "create", RETRY_HINT, cls=StorageError):
                    try:
                        self.dir.mkdir()
                    except FileExistsError:
                        pass
            if self.dir.is_symlink() or not self.dir.is_dir():
                # its cleanup would empty whatever it points to: never follow it
                raise ProvenanceError(f"{self.dir}: the merge's temporary directory is a "
                                      "symbolic link or not a directory; remove it (nothing "
                                      "was changed)")
            fd = self._open_owner(owner)
            if fd < 0:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
                os.close(fd)
                raise ProvenanceError(f"{self.out}: another merge into it is running ({holder}, "
                                      f"holding {owner}); wait for it to finish") from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(owner))
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                break
            os.close(fd)
        else:  # pragma: no cover - ten lost races in a row
            raise ProvenanceError(f"{self.dir}: could not take the merge's temporary directory")
        previous = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
        try:
            self._clean_stale(previous)
        except BaseException:
            self._drop()
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        return self

    def _open_owner(self, owner: Path) -> int:
        """Open (or create) the ``owner`` file for the lock: a descriptor, or -1 when the
        directory vanished under us (a finishing merge removed it). A symbolic link, a hard
        link (another name of some file, which taking the lock would truncate) or anything
        but a plain file there is one ProvenanceError, and nothing is changed."""
        import stat

        def refuse(what: str) -> ProvenanceError:
            return ProvenanceError(f"{owner}: the merge's owner file {what}; it must be a plain "
                                   f"file of its own (or absent): remove it, or the whole "
                                   f"directory {self.dir} when no merge into {self.out} runs "
                                   "(nothing was changed)")

        problem = link_problem(owner)
        if problem is not None:
            raise refuse(problem)
        with storage_errors(self.dir, "create", RETRY_HINT, cls=StorageError):
            try:
                fd = os.open(owner, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                             0o644)
            except FileNotFoundError:
                return -1
            except IsADirectoryError:
                raise refuse("is a directory") from None
            except OSError as e:
                if e.errno == errno.ELOOP:  # became a link between the check and the open
                    raise refuse("is a symbolic link") from None
                raise
        st = os.fstat(fd)
        why = (None if stat.S_ISREG(st.st_mode) else "is not a regular file") or (
            f"is a hard link ({st.st_nlink} names of one file)" if st.st_nlink > 1 else None)
        if why is not None:
            os.close(fd)
            raise refuse(why)
        return fd

    def _drop(self) -> None:
        """Let go of the lock without removing anything."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _clean_stale(self, previous: str) -> None:
        left = sorted(x for x in os.listdir(self.dir) if x != "owner")
        if not left:
            return
        refuse_existing_output(self.out)  # again, under the lock: a finished output stays
        linked = [final for name, final in _finals(self.out).items()
                  if _half_published(self.out, name)]
        who = f"({previous})" if previous else "(owner unknown)"
        if linked:
            for final in linked:
                remove_contained(final, self.out.parent, recursive=False)
            self.echo(f"merge: removed {', '.join(map(str, linked))}: partly published by an "
                      f"interrupted merge into {self.out} {who}")
        self._remove_contents()
        self.echo(f"merge: removed the stale temporary directory {self.dir} left by an "
                  f"interrupted merge {who} (it held: {', '.join(left)})")

    def _remove_contents(self) -> None:
        """Remove everything in the directory but ``owner``, contained in the output's own
        directory (:func:`engram_eval.io.remove_contained`: a link in it is removed as a
        link; the directory itself, were it a link, is refused)."""
        for name in os.listdir(self.dir):
            if name != "owner":
                remove_contained(self.dir / name, self.out.parent, ignore_errors=True)

    def path(self, name: str) -> Path:
        return self.dir / name

    def publish(self) -> None:
        """Link the staged sidecar, summary and rows into place (rows last); an existing
        output file is refused and what this call linked is removed again."""
        done: list[Path] = []
        try:
            for name in _STAGED:
                final = _finals(self.out)[name]
                with storage_errors(final, "create", RETRY_HINT, cls=StorageError):
                    os.link(self.dir / name, final)
                done.append(final)
        except FileExistsError as e:
            self._unpublish(done)
            raise ProvenanceError(already_exists(e.filename2 or e.filename or self.out)
                                  ) from None
        except BaseException:
            self._unpublish(done)
            raise

    def _unpublish(self, done: list[Path]) -> None:
        """Remove the output files this merge linked into place a moment ago."""
        for p in done:
            remove_contained(p, self.out.parent, recursive=False)

    def release(self) -> None:
        """Remove the directory (its files first, the owner file last) and drop the lock."""
        if self._fd is None:
            return
        try:
            self._remove_contents()
            try:
                remove_contained(self.dir / "owner", self.out.parent, recursive=False)
                remove_contained(self.dir, self.out.parent, recursive=False)  # empty only
            except OSError:
                pass  # another merge already waits on it and cleans up after us
        finally:
            os.close(self._fd)
            self._fd = None


def merged_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """A shard's sidecar as the unsharded run's (selection widened, fingerprint redone)."""
    out = json.loads(json.dumps(meta))
    out["selection"] = unsharded_selection(meta["selection"])
    if isinstance(out.get("config_recorded"), dict) and "shard" in out["config_recorded"]:
        out["config_recorded"]["shard"] = ""
    out["fingerprint"] = fingerprint_of(out)
    return out


def merge(inputs: Sequence[str | Path], output: str | Path, *,
          command: Sequence[str] | None = None, dataset: str | Path | None = None,
          sources_at: str | None = None, questions_file: str | Path | None = None,
          echo: Callable[[str], None] | None = None,
          gold_overlay: str | Path | None = None) -> dict[str, Any]:
    """Check and merge shard results (module docstring); returns the merged summary.

    ``dataset`` (required) is the file the shards were run on: every shard must pass
    ``verify`` against it (``sources_at``: compare the recorded sources with that git
    revision instead of the installed package, as ``verify --sources-at``;
    ``questions_file``: the ``--questions`` file of shards that replaced question texts, as
    ``verify --questions``; ``gold_overlay``: the ``--gold-overlay`` file of shards that
    recorded one, as ``verify --gold-overlay``, whose block the merged summary recomputes
    over the whole selection). ``echo``
    (default: stderr) receives the note about a stale temporary directory removed."""
    from engram_eval.retrieval.temporal import unparsable_date_counts, unparsable_dates
    from engram_eval.runs.known_fields import system_ids_label
    from engram_eval.scoring.summary import build_summary, evidence_unresolved, gold_absent

    if not inputs:
        raise ProvenanceError("merge: give at least one shard result")
    if dataset is None:
        raise ProvenanceError("merge: the dataset the shards were run on is required "
                              "(--dataset FILE on the command line, dataset= in Python): "
                              "every shard is verified against it before it is merged")
    out = Path(output)
    echo = echo or _stderr
    with storage_errors(out, "create", RETRY_HINT, cls=StorageError):
        check_name_lengths((out, sidecar_path(out), summary_path(out), staging_dir(out)),
                           hint="choose a shorter output name (the sidecar adds "
                                "'.metadata.json' to it)")
    # a link at an output (or at the temporary directory) is refused before anything else
    refuse_links(out, sidecar_path(out), summary_path(out), staging_dir(out))
    refuse_existing_output(out)  # before any cleanup: a finished output is never removed
    if staging_dir(out).is_dir():  # left by an interrupted merge: clean it (or refuse)
        Staging(out, echo).acquire().release()
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
    questions = _verify_shards(inputs, metas, dataset, sources_at, questions_file,
                               gold_overlay)

    # Write: rows, sidecar and summary into the temporary directory, then link them into
    # place (rows last); nothing of the output exists until every file is complete.
    with storage_errors(out, "create", RETRY_HINT, cls=StorageError):
        make_parent(out)
    staging = Staging(out, echo).acquire()
    try:
        h = hashlib.sha256()
        with _writing(out):
            with streaming_write(staging.path("rows"), exclusive=True) as f:
                for i in all_ids:
                    line = row_line(rows_by_id[i])  # as the runner wrote it
                    h.update(line)
                    f.write(line)
        digest = h.hexdigest()
        side = dict(ref)
        side["runs"] = [{"mode": "merge", "host": socket.gethostname(),
                         "command": list(command) if command is not None else None,
                         "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
                         "questions_written": len(all_ids), "shards": sorted(
                             shard_entries, key=lambda e: e["shard"]),
                         "rows_sha256": digest}]
        rows = order_rows(list(rows_by_id.values()), all_ids)
        # counted from the dataset, as the runner does (verify --dataset re-counts them)
        selected = [questions[i] for i in all_ids]
        audited = None
        if ref["selection"].get("gold_overlay") is not None and gold_overlay is not None:
            from engram_eval.data.gold_overlay import read_gold_overlay
            from engram_eval.scoring.audited import audited_summary

            audited = audited_summary(rows, read_gold_overlay(
                gold_overlay, list(questions.values()), dataset=dataset), selected,
                ref["protocols"])
        summary = build_summary(rows, ref["protocols"], fingerprint=ref["fingerprint"],
                                dataset=ref["dataset"]["name"],
                                dataset_sha256=ref["dataset"]["sha256"],
                                retriever=ref["config"]["retriever"], rows_sha256=digest,
                                unparsable_dates=unparsable_date_counts(
                                    unparsable_dates(q) for q in selected),
                                gold_absent_from_haystack=len(gold_absent(selected)),
                                evidence_unresolved=(evidence_unresolved(selected)
                                                     if ref["dataset_format"] == "locomo"
                                                     else None),
                                system_ids=system_ids_label(ref),
                                heldout_questions=ref.get("heldout_questions"),
                                audited=audited)
        with _writing(sidecar_path(out)):
            atomic_write(staging.path("metadata.json"), meta_text(side))
        with _writing(summary_path(out)):
            atomic_write(staging.path("summary.json"), dump_json(summary))
        staging.publish()
    finally:
        staging.release()
    return summary


def _verify_shards(inputs: Sequence[str | Path], metas: Sequence[dict[str, Any]],
                   dataset: str | Path, sources_at: str | None,
                   questions_file: str | Path | None = None,
                   gold_overlay: str | Path | None = None) -> dict[str, Question]:
    """Every shard passes ``verify`` against ``dataset`` (every check run and passed), else
    one ProvenanceError naming the shard and its failed (or unchecked) checks; returns the
    dataset's questions by id."""
    from engram_eval.data.datasets import load_questions
    from engram_eval.runs.verify import verify

    _, qs = load_questions(dataset, metas[0]["dataset_format"])
    questions = {q.question_id: q for q in qs}
    for path, meta in zip(inputs, metas, strict=True):
        rep = verify(path, dataset, sources_at=sources_at, questions=questions,
                     questions_file=questions_file, gold_overlay=gold_overlay)
        if rep.verified:
            continue
        sh = meta["selection"]["shard"]
        bad = [f"[{status}] {name}" + (f": {detail}" if detail else "")
               for name, status, detail in rep.checks if status != "ok"]
        raise ProvenanceError(
            f"merge: shard {sh['index']}/{sh['count']} {path} does not verify against "
            f"{dataset}: " + "; ".join(bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3
                                                  else "")
            + f". Refusing to merge; nothing was written (see `engram-eval verify {path} "
            f"--dataset {dataset}`)")
    return questions
