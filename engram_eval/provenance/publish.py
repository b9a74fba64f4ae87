"""``engram-eval publish ID...``: make planned catalogue entries at HEAD and publish them.

A result is **planned** before it exists: an entry in the catalogue's ``planned`` list
(``results/catalog.yaml``, written by hand, kept by ``engram-eval catalog --write``) with the
fields every catalogue entry has:

* ``id``, ``path`` (under ``results/``; a run's ``path`` ends ``.jsonl.gz`` or ``.jsonl``),
  ``type`` (``run`` or ``derived``), ``role`` (for a run: ``held-out measurement`` or
  ``regression check`` put it through the frozen protocol, as they do a production run or
  measurement; ``tuning``, ``run``), ``sections``;
* ``command``: its recipe, one command (a list of arguments) or several (a list of them), in
  order: ``engram-eval ...``, ``python FILE.py ...`` or a repository script ``PATH.py ...``.
  Paths are as they are in a checkout (``results/...``); ``{data}`` stands for the entry's
  data file (``inputs.data``, found by its sha256 under the ``--data`` paths);
* ``inputs``: ``data`` (``name``, ``sha256``) and ``entries``, the catalogue ids whose files
  the command reads (a comparison's runs): they must be published first (``engram-eval catalog
  --makefile`` orders them by Make).

``publish`` takes the planned entries named, with every planned entry that shares a command
with one of them (a comparison's ``.json`` and its ``.png``), and:

1. refuses, before anything runs, when a file it would write is already under ``results/``
   (published files are never overwritten), when an input entry is not published, or when the
   sources differ from HEAD (a published file must be re-executable from a commit);
2. runs every command in a scratch folder beside ``results/`` (``.publish/``), where the input
   entries' files are linked at their ``results/`` paths, so the recorded commands and the
   held-out ledger name the published paths. A held-out entry goes through the frozen
   protocol: every held-out manifest of the batch frozen first (its ``engram-eval run`` or
   ``production run|measure`` command without ``--output``, with ``--validate-only
   --freeze-source results/.../NAME.frozen.json``), then each made once under its own
   (``--frozen-source``); the ledger (``results/heldout_ledger.json``) records the run as
   every run records it, whether or not it later verifies (the held-out part was seen);
3. verifies every run (``verify RUN --dataset D --rerun 3 --rerun-seed 0``) and compresses
   the ones planned ``.jsonl.gz``; a derived file without a sidecar gets one
   (``engram_eval.analysis.derived_sidecars``); every file written must be planned (or be a
   planned file's sidecar, summary or frozen manifest);
4. only then moves the files into ``results/``: each created exclusively and whole
   (``io.exclusive_write``), chmod 644; a failure removes the ones already placed,
   so ``results/`` holds all of the batch or none of it;
5. rewrites the catalogue: the new files catalogued from their sidecars, the published
   entries out of ``planned`` (the checkout's ``Makefile`` remakes its rules from it). Commit
   the results, then ``engram-eval catalog --write`` (the new entries' commit is the one that
   adds them).

Any failure before step 4 leaves ``results/`` as it was (but for the ledger's record of a
held-out run that started); the scratch folder is removed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.io import atomic_write, exclusive_write, file_lock, sha256_file
from engram_eval.provenance import catalog as C

#: Data file suffixes searched under the ``data`` folders.
DATA_SUFFIXES = (".json", ".json.gz", ".jsonl", ".jsonl.gz")
#: Planned roles that put a run through the frozen protocol.
FROZEN_ROLES = ("held-out measurement", "regression check")
#: Questions ``verify --rerun`` re-ranks per published run (seed 0).
VERIFY_RERUN = 3
#: The scratch folder's parent, beside ``results/`` (ignored by git).
SCRATCH = ".publish"


def find_data(sha256: str, name: str, paths: Iterable[str | Path]) -> Path:
    """The file of ``sha256`` under ``paths`` (files, or folders searched recursively; a
    file named ``name`` is hashed first). One clear error naming the file when none matches."""
    candidates: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            candidates.append(p)
        elif p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file()
                           and q.name.endswith(DATA_SUFFIXES))
            candidates += sorted(found, key=lambda q: q.name != name)
    for c in candidates:
        if sha256_file(c) == sha256:
            return c
    raise ConfigError(f"the entry needs the data file {name!r} (sha256 {sha256[:16]}…), found "
                      "under none of the --data paths given: pass the file or its folder (a "
                      "split part: engram-eval split SOURCE with its split manifest's holdout "
                      "and salt)")


@dataclass(frozen=True)
class Published:
    """What ``publish`` placed under ``results/`` (paths relative to the checkout) and the
    ids it took out of ``planned``."""

    ids: tuple[str, ...]
    files: tuple[str, ...]


def batch(catalog: Mapping[str, Any], ids: Sequence[str]) -> list[dict[str, Any]]:
    """The planned entries ``ids`` and every planned entry that shares a command with one of
    them (in the catalogue's order); an id already published, or unknown, is one clear error."""
    planned = [dict(p) for p in catalog.get("planned", [])]
    chosen: list[dict[str, Any]] = []
    for wanted in ids:
        hit = [p for p in planned if wanted in (p.get("id"), p.get("path"))]
        if not hit:
            try:
                e = C.find({"entries": catalog["entries"], "archive": catalog.get("archive", [])},
                           wanted)
            except ConfigError:
                raise ConfigError(f"no planned catalogue entry {wanted!r} (declare it under "
                                  "planned: in results/catalog.yaml)") from None
            raise ConfigError(f"{e['path']}: already published (catalogue entry {e['id']}); "
                              "a published file is never overwritten: plan a new id, or "
                              f"re-execute this one with engram-eval reproduce {e['id']}")
        chosen += hit
    same = {json.dumps(p.get("command")) for p in chosen}
    return [p for p in planned if json.dumps(p.get("command")) in same]


def frozen_path(entry: Mapping[str, Any]) -> str:
    """The frozen manifest a held-out entry is published with: its path, its suffix
    (``.jsonl.gz``, ``.jsonl``, ``.json``) replaced by ``.frozen.json``."""
    path = str(entry["path"])
    for suffix in (".jsonl.gz", ".jsonl", ".json"):
        if path.endswith(suffix):
            return path[: -len(suffix)] + ".frozen.json"
    return path + ".frozen.json"


def frozen(entry: Mapping[str, Any]) -> bool:
    """Whether the entry is published by the frozen protocol (its planned role)."""
    return entry.get("role") in FROZEN_ROLES


def outputs(entry: Mapping[str, Any]) -> list[str]:
    """Every file the entry may place under ``results/``: its own, its sidecar and summary
    (and a run's uncompressed form's), a held-out run's frozen manifest."""
    path = str(entry["path"])
    out = [path, *C.companions(path)]
    if entry["type"] == "run" and path.endswith(".gz"):
        out += [path[:-3], *C.companions(path[:-3])]
    if frozen(entry):
        out.append(frozen_path(entry))
    return out


def _script(arg: str, root: Path) -> str | None:
    """The ``.py`` file ``arg`` names: in the checkout, else in the package's own checkout
    (the code that runs); None when ``arg`` names none."""
    from engram_eval.io import package_root

    if not arg.endswith(".py"):
        return None
    for base in (root, package_root()):
        if (base / arg).is_file():
            return str(base / arg)
    return None


def _launcher(argv: Sequence[str], root: Path) -> list[str]:
    """A recipe command as it is executed: ``engram-eval`` is this environment's console
    script (or ``python -m engram_eval.cli.main``), ``python`` this interpreter, a ``.py`` file
    of the checkout run by this interpreter."""
    head, rest = argv[0], list(argv[1:])
    if Path(head).name == "engram-eval":
        script = Path(sys.executable).parent / "engram-eval"
        return [str(script), *rest] if script.is_file() else \
            [sys.executable, "-m", "engram_eval.cli.main", *rest]
    if Path(head).name.startswith("python"):
        return [sys.executable, *[_script(a, root) or a for a in rest]]
    found = _script(head, root)
    if found:
        return [sys.executable, found, *rest]
    raise ConfigError(f"a recipe command runs engram-eval, python or a .py file of the "
                      f"checkout; not {head!r}")


def _freezable(argv: Sequence[str]) -> bool:
    """A command that takes ``--validate-only --freeze-source`` and ``--frozen-source``:
    ``engram-eval run``, ``engram-eval production run|measure``."""
    if Path(argv[0]).name != "engram-eval" or len(argv) < 2:
        return False
    return argv[1] == "run" or (argv[1] == "production" and len(argv) > 2
                                and argv[2] in ("run", "measure"))


def _freeze_args(argv: Sequence[str], frozen: str) -> list[str]:
    """A run command as its validate-only freeze: ``--output X`` dropped, ``--validate-only
    --freeze-source FROZEN`` added."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--output":
            skip = True
            continue
        if a.startswith("--output="):
            continue
        out.append(a)
    return [*out, "--validate-only", "--freeze-source", frozen]


def sources_clean(root: Path) -> str | None:
    """``None`` when the tracked files outside ``results/`` equal HEAD (or ``root`` is no git
    checkout), else the first changed paths."""
    done = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                           "--untracked-files=no", "--", ".", ":(exclude)results"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return ", ".join(line[3:] for line in done.stdout.splitlines()[:5])


def _exec(argv: Sequence[str], root: Path, cwd: Path, env: Mapping[str, str],
          echo: Callable[[str], None], what: str) -> None:
    echo(f"== {what}: {' '.join(argv)}")
    done = subprocess.run(_launcher(argv, root), cwd=cwd, env=dict(env), capture_output=True,
                          text=True, check=False)
    tail = (done.stdout + done.stderr).strip().splitlines()
    for line in tail[-6:]:
        echo(f"   {line}")
    if done.returncode != 0:
        raise ProvenanceError(f"{what} failed (exit {done.returncode}): {' '.join(argv)}; "
                              "nothing was published" + (f" ({tail[-1]})" if tail else ""))


def publish(root: str | Path, ids: Sequence[str], *, data: Sequence[str | Path] = (),
            rerun: int = VERIFY_RERUN, allow_changed_sources: bool = False,
            echo: Callable[[str], None] = print) -> Published:
    """Make and publish the planned entries ``ids`` of the checkout at ``root`` (module
    docstring)."""
    root = Path(root).resolve()
    path = root / C.CATALOG
    cat = C.load(path)
    problems = C.check_planned(cat)
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    entries = batch(cat, ids)
    published = {e["id"]: e for e in cat["entries"]}
    # 1. refusals, before anything runs
    clash = [f for e in entries for f in outputs(e) if (root / f).exists() or
             (root / f).is_symlink()]
    if clash:
        raise ConfigError(f"refusing to publish: results/ already holds {len(clash)} file(s) "
                          f"this would write (e.g. {clash[0]}); published files are never "
                          "overwritten (nothing was run)")
    batch_ids = {e["id"] for e in entries}
    for e in entries:
        for dep in (e.get("inputs") or {}).get("entries") or []:
            if dep not in published and dep not in batch_ids:
                raise ConfigError(f"{e['id']}: its input entry {dep!r} is not published yet: "
                                  f"publish it first (make {e['path']} publishes the "
                                  "inputs in order)")
            if dep in published and not (root / published[dep]["path"]).is_file():
                raise ConfigError(f"{e['id']}: its input {published[dep]['path']} is absent "
                                  "(restore it: git checkout, or engram-eval reproduce)")
    changed = None if allow_changed_sources else sources_clean(root)
    if changed:
        raise ConfigError(f"refusing to publish: the sources differ from HEAD ({changed}); "
                          "commit them first (a published file is re-executed from the commit "
                          "that adds it)")
    (root / SCRATCH).mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="publish-", dir=root / SCRATCH))
    try:
        made = _make(root, scratch, entries, published, data, rerun, echo)
        placed = _place(root, scratch, made)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for f in placed:
        echo(f"published {f}")
    _record(root, batch_ids)
    echo(f"catalogued {len(batch_ids)} entr{'y' if len(batch_ids) == 1 else 'ies'} in "
         f"{C.CATALOG}: commit results/, then engram-eval catalog --write (their commit)")
    return Published(tuple(e["id"] for e in entries), tuple(placed))


def _make(root: Path, scratch: Path, entries: Sequence[Mapping[str, Any]],
          published: Mapping[str, Mapping[str, Any]], data: Sequence[str | Path], rerun: int,
          echo: Callable[[str], None]) -> list[str]:
    """Steps 2-3 in ``scratch``: the files made, relative to the checkout."""
    for e in entries:  # the inputs, linked at their published paths
        for dep in (e.get("inputs") or {}).get("entries") or []:
            if dep in published:
                for rel in [published[dep]["path"], *C.companions(published[dep]["path"])]:
                    if (root / rel).is_file() and not (scratch / rel).exists():
                        (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
                        (scratch / rel).symlink_to(root / rel)
        (scratch / str(e["path"])).parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ENGRAM_EVAL_LEDGER": os.environ.get(
        "ENGRAM_EVAL_LEDGER", str(root / "results" / "heldout_ledger.json"))}
    datafile: dict[str, Path] = {}

    def resolved(e: Mapping[str, Any], argv: Sequence[str]) -> list[str]:
        if not any("{data}" in a for a in argv):
            return list(argv)
        if e["id"] not in datafile:
            d = (e.get("inputs") or {}).get("data") or {}
            if not d.get("sha256"):
                raise ConfigError(f"{e['id']}: its command names {{data}} but inputs.data has "
                                  "no sha256")
            datafile[e["id"]] = find_data(str(d["sha256"]), str(d.get("name")), data).resolve()
        return [a.replace("{data}", str(datafile[e["id"]])) for a in argv]

    seen: set[str] = set()
    steps = []  # (entry, argv), each distinct command once
    for e in entries:
        key = json.dumps(e["command"])
        if key not in seen:
            seen.add(key)
            steps += [(e, resolved(e, argv)) for argv in C.commands(e)]
    held = {e["id"] for e in entries if frozen(e)}
    if held:
        echo("== every held-out manifest frozen before any held-out run")
        for e in entries:
            if e["id"] in held and not any(_freezable(argv) for argv in C.commands(e)):
                raise ConfigError(f"{e['id']}: planned as a {e['role']}, but no command of its "
                                  "recipe takes a frozen manifest (engram-eval run, production "
                                  "run or measure)")
    for e, argv in steps:
        if e["id"] in held and _freezable(argv):
            _exec(_freeze_args(argv, frozen_path(e)), root, scratch, env, echo,
                  f"{e['id']}: freeze")
    for e, argv in steps:
        if e["id"] in held and _freezable(argv):
            argv = [*argv, "--frozen-source", frozen_path(e)]
        _exec(argv, root, scratch, env, echo, f"{e['id']}: make")
    for e in entries:
        if e["type"] == "run" and e["id"] not in datafile:
            d = (e.get("inputs") or {}).get("data") or {}
            if d.get("sha256"):
                datafile[e["id"]] = find_data(str(d["sha256"]), str(d.get("name")),
                                              data).resolve()
        _finish(root, scratch, e, env, rerun, echo, datafile.get(e["id"]), data)
    made = sorted(p.relative_to(scratch).as_posix() for p in scratch.rglob("*")
                  if p.is_file() and not p.is_symlink())
    allowed = {f for e in entries for f in outputs(e)}
    stray = [f for f in made if f not in allowed]
    if stray:
        raise ProvenanceError(f"the recipe wrote {stray[0]}, which no planned entry of the batch "
                              "names (declare every file a command writes); nothing was "
                              "published")
    return made


def _overlay_args(run: Path, data: Iterable[str | Path]) -> list[str]:
    """``--gold-overlay FILE`` for ``verify`` when the run recorded a gold overlay
    (``selection.gold_overlay``, by name and sha256; the file found under the --data paths as
    a data part is), else nothing."""
    from engram_eval.provenance.records import read_meta

    try:
        meta = read_meta(run)
    except ProvenanceError:
        return []  # verify itself names a missing or unreadable sidecar
    overlay = (meta.get("selection") or {}).get("gold_overlay")
    if not isinstance(overlay, dict) or not overlay.get("sha256"):
        return []
    found = find_data(str(overlay["sha256"]), str(overlay.get("name")), data)
    return ["--gold-overlay", str(found.resolve())]


def _finish(root: Path, scratch: Path, e: Mapping[str, Any], env: Mapping[str, str],
            rerun: int, echo: Callable[[str], None], datafile: Path | None,
            data: Iterable[str | Path] = ()) -> None:
    """Verify (with the run's gold overlay, when it recorded one) and compress a run; a
    sidecar for a derived file without one."""
    path = str(e["path"])
    if not (scratch / path).is_file() and not (scratch / path.removesuffix(".gz")).is_file():
        raise ProvenanceError(f"{e['id']}: the recipe did not write {path}; nothing was "
                              "published")
    if e["type"] == "run":
        plain = path.removesuffix(".gz")
        if datafile is None:
            raise ConfigError(f"{e['id']}: a run names its data (inputs.data, by sha256): "
                              "verify re-ranks it")
        if (scratch / plain).is_file():
            overlay = _overlay_args(scratch / plain, data)
            _exec(["engram-eval", "verify", plain, "--dataset", str(datafile), "--rerun",
                   str(rerun), "--rerun-seed", "0", *overlay], root, scratch, env, echo,
                  f"{e['id']}: verify")
            if path.endswith(".gz"):
                _exec(["engram-eval", "compress", plain], root, scratch, env, echo,
                      f"{e['id']}: compress")
        return
    if not (scratch / (path + ".metadata.json")).is_file():
        _exec(["python", "-m", "engram_eval.analysis.derived_sidecars",
               str(Path(path).parent)], root, scratch, env, echo, f"{e['id']}: sidecars")
    if not (scratch / (path + ".metadata.json")).is_file():
        raise ProvenanceError(f"{e['id']}: no sidecar for {path} (its generator writes none and "
                              "engram_eval.analysis.derived_sidecars knows no inputs for it); "
                              "nothing was published")


def _place(root: Path, scratch: Path, made: Sequence[str]) -> list[str]:
    """Step 4: every made file created exclusively under the checkout, or none of them."""
    placed: list[Path] = []
    try:
        for rel in made:
            dst = root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            exclusive_write(dst, (scratch / rel).read_bytes())  # complete, or not at all
            placed.append(dst)
            dst.chmod(0o644)
    except BaseException as e:
        for p in placed:
            p.unlink(missing_ok=True)
        if isinstance(e, FileExistsError):
            raise ConfigError(f"refusing to publish: {e} (it appeared meanwhile); nothing "
                              "was published") from None
        raise
    return [p.relative_to(root).as_posix() for p in placed]


def _record(root: Path, done: set[str]) -> None:
    """Step 5: the catalogue rebuilt from the tree, the published entries out of planned (read
    and written under the catalogue's lock: publications running at once each keep the
    other's)."""
    path = root / C.CATALOG
    with file_lock(path):
        cat = C.load(path)
        fresh = C.build(root, cat.get("archive", []))
        fresh["planned"] = [p for p in cat.get("planned", []) if p.get("id") not in done]
        atomic_write(path, C.dump(fresh))
