"""``engram-eval reproduce ID``: re-execute a catalogued result and compare it with the
published file (:mod:`engram_eval.provenance.catalog`).

* A **run** is re-ranked with its recorded settings and models, the cache off, and held to its
  published rows and summary by ``verify --dataset D --rerun K`` (every question unless
  ``--questions K`` asks for a seeded sample): the rankings exactly, the scores within
  verify's tolerance, the summary recomputed from the rows, the recorded sources against the
  commit the catalogue names.
* A **derived** file made by an ``engram-eval`` command or a Python script of the checkout
  (``python scripts/x.py``, ``python -m engram_eval...``) is made again with its recorded
  command, its outputs written to a scratch folder, and its sha256 compared with the published
  one's.

Where: by default in a clean, detached git worktree of the entry's commit (that commit's code,
run with this interpreter, so this environment's installed libraries), removed afterwards;
with ``here`` in this checkout, today's code (a regression check of today's code against the
published file). Data files are found by their sha256 under the ``data`` paths given (the
published runs name split parts and scratch paths: re-create parts with ``engram-eval split``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import read_json_document
from engram_eval.errors import ConfigError
from engram_eval.io import atomic_write, sha256_file
from engram_eval.provenance import catalog as C
from engram_eval.provenance.publish import find_data


@dataclass(frozen=True)
class Outcome:
    """What ``reproduce`` did: ``ok`` when the re-executed result equals the published one;
    ``lines`` the report (verify's checks, or the hash comparison)."""

    ok: bool
    lines: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def reproduce(root: str | Path, entry_id: str, *, data: Sequence[str | Path] = (),
              here: bool = False, questions: int | None = None,
              echo: Callable[[str], None] = print) -> Outcome:
    """Re-execute catalogue entry ``entry_id`` of the checkout at ``root`` (module docstring)."""
    root = Path(root).resolve()
    cat = C.load(root / C.CATALOG)
    entry = C.find(cat, entry_id)
    if entry.get("at"):  # archived: the file lives in git history
        blob = C.git_blob(root, str(entry["at"]), str(entry["path"]))
        import hashlib

        if blob is None or hashlib.sha256(blob).hexdigest() != entry["sha256"]:
            raise ConfigError(f"{entry['path']}: archived at {entry['at']}, but git history "
                              "does not hold it with the catalogue's sha256 (a shallow clone "
                              "lacks it: fetch the history)")
        echo(f"{entry['id']}: archived, read from git history at {str(entry['at'])[:12]}")
    else:
        published = root / entry["path"]
        if not published.is_file() or sha256_file(published) != entry["sha256"]:
            raise ConfigError(f"{entry['path']}: not the file the catalogue lists (absent or "
                              "another sha256): run engram-eval catalog --check")
    commit = entry.get("commit")
    if not here and not commit:
        raise ConfigError(f"{entry['id']}: the catalogue names no commit (a file not yet "
                          "committed): reproduce it with --here")
    if entry["type"] == "run":
        return _run(root, entry, data, here, questions, echo)
    if entry["type"] in ("derived", "production-run"):
        return _derived(root, entry, data, here, echo)
    raise ConfigError(f"{entry['id']}: a {entry['type']} is not made by a command; nothing to "
                      "re-execute")


def _in_checkout(root: Path, commit: str | None, here: bool,
                 action: Callable[[Path], Outcome], echo: Callable[[str], None]) -> Outcome:
    if here:
        return action(root)
    assert commit is not None
    with tempfile.TemporaryDirectory(prefix="engram-reproduce-") as tmp:
        tree = Path(tmp) / "tree"
        done = subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "-q",
                               str(tree), commit], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ConfigError(f"cannot check out commit {commit} (git worktree add: "
                              f"{done.stderr.strip() or done.returncode}); a shallow clone "
                              "lacks it: fetch the history, or use --here")
        echo(f"reproducing at {commit} in a clean worktree ({tree})")
        try:
            return action(tree)
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)],
                           capture_output=True, check=False)


def _cli(tree: Path, args: Sequence[str], cwd: Path | None = None, *, python: bool = False
         ) -> subprocess.CompletedProcess[str]:
    """``engram-eval ARGS`` (with ``python``: ``python ARGS``, a script or ``-m MODULE``) with
    the code of the checkout at ``tree``, this interpreter, in ``cwd`` (default: ``tree``)."""
    env = {**os.environ, "PYTHONPATH": str(tree) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    head = [sys.executable] if python else [sys.executable, "-m", "engram_eval.cli.main"]
    return subprocess.run([*head, *args],
                          cwd=cwd or tree, env=env, capture_output=True, text=True, check=False)


def _stage_inputs(root: Path, entry: Mapping[str, Any], stage: Path) -> None:
    """The published inputs of an archived derived ``entry`` (and their companions), at their
    paths under ``stage``: from the tree where they still are, else from git history at the
    entry's ``at``."""
    for inp in (entry.get("inputs") or {}).get("files") or []:
        rel = str(inp.get("file"))
        if not rel.startswith("results/"):
            continue
        for name in [rel, *C.companions(rel)]:
            here = root / name
            blob = (here.read_bytes() if here.is_file()
                    else C.git_blob(root, str(entry["at"]), name))
            if blob is not None:
                (stage / name).parent.mkdir(parents=True, exist_ok=True)
                atomic_write(stage / name, blob)


def _run(root: Path, entry: Mapping[str, Any], data: Sequence[str | Path], here: bool,
         questions: int | None, echo: Callable[[str], None]) -> Outcome:
    d = entry["inputs"]["data"]
    dataset = find_data(str(d["sha256"]), str(d["name"]), data)
    from engram_eval.runs.reader import read_run

    with tempfile.TemporaryDirectory(prefix="engram-reproduce-run-") as held:
        published = _published_run(root, entry, Path(held))
        selection = read_run(published, require_sidecar=True).metadata["selection"]
        n = selection.get("n")
        k = int(questions) if questions else int(n or 0)
        if k < 1:
            raise ConfigError(f"{entry['id']}: --questions must be at least 1")
        recorded = selection.get("gold_overlay")  # run --gold-overlay: verify needs the file
        overlay = (find_data(str(recorded["sha256"]), str(recorded["name"]), data)
                   if isinstance(recorded, Mapping) else None)
        return _verify_run(root, entry, published, dataset, k, here, echo, overlay)


def _published_run(root: Path, entry: Mapping[str, Any], held: Path) -> Path:
    """The run file of ``entry`` with its companions: in the tree, or, archived, written from
    git history into ``held``."""
    if not entry.get("at"):
        return root / entry["path"]
    out = held / Path(entry["path"]).name
    for rel in [entry["path"], *C.companions(entry["path"])]:
        blob = C.git_blob(root, str(entry["at"]), rel)
        if blob is not None:
            atomic_write(held / Path(rel).name, blob)
    return out


def _verify_run(root: Path, entry: Mapping[str, Any], published: Path, dataset: Path, k: int,
                here: bool, echo: Callable[[str], None],
                overlay: Path | None = None) -> Outcome:
    def action(tree: Path) -> Outcome:
        # the published file of this checkout (the catalogue's hash checked), verified by
        # the code at ``tree``: the entry's commit may precede the commit that added the file
        args = ["verify", str(published), "--dataset", str(dataset.resolve()),
                "--rerun", str(k), "--rerun-seed", "0"]
        if overlay is not None:  # a run made with --gold-overlay verifies only with it
            args += ["--gold-overlay", str(overlay.resolve())]
        if entry.get("commit"):
            args += ["--sources-at", str(entry["commit"])]
        if tree == root:  # today's code, in this process's package
            # the recorded sources against the entry's commit where this package's code is
            # that checkout's; a catalogue of another checkout: against the installed package
            from engram_eval.io import package_root
            from engram_eval.runs.verify import verify

            own = package_root().resolve() == root.resolve()
            rep = verify(published, dataset, rerun=k, rerun_seed=0,
                         sources_at=entry.get("commit") if own else None,
                         gold_overlay=overlay)
            return Outcome(rep.verified, (*rep.format().splitlines(), rep.verdict()))
        done = _cli(tree, args)
        lines = (done.stdout + done.stderr).strip().splitlines()
        return Outcome(done.returncode == 0 and any(x.startswith("VERIFIED") for x in lines),
                       tuple(x for x in lines if x.startswith(("[", "VERIFIED", "NOT", "FAIL",
                                                                "error"))) or tuple(lines[-20:]))

    return _in_checkout(root, entry.get("commit"), here, action, echo)


#: Flags of an ``engram-eval`` command that name a file it writes.
OUTPUT_FLAGS = ("--output", "--plot", "-o")


def engram_args(command: Sequence[str] | None) -> list[str] | None:
    """The arguments after ``engram-eval`` of a recorded command (``engram-eval ...``,
    ``.venv/bin/engram-eval ...``, ``python -m engram_eval.cli.main ...``, the module's path as
    ``python -m`` records it: ``/checkout/engram_eval/cli/main.py ...``), else None."""
    if not command or not all(isinstance(a, str) for a in command):
        return None
    cmd = list(command)
    if Path(cmd[0]).name == "engram-eval" or cmd[0].endswith("engram_eval/cli/main.py"):
        return cmd[1:]
    for i, a in enumerate(cmd[:-1]):
        if a == "-m" and cmd[i + 1] in ("engram_eval", "engram_eval.cli.main", "engram_eval.cli"):
            return cmd[i + 2:]
    return None


#: The folders of a checkout a recorded script path is read from (a path recorded in another
#: checkout, ``/elsewhere/engram_eval/analysis/x.py``, is that file of this one).
SCRIPT_FOLDERS = ("engram_eval", "benchmarks", "scripts")


def python_args(command: Sequence[str] | None) -> list[str] | None:
    """The arguments after the interpreter of a recorded Python command (``python FILE.py
    ...``, ``python -m MODULE ...``, ``FILE.py ...``), a script of another checkout named by its
    path in this repository; else None."""
    if not command or not all(isinstance(a, str) for a in command):
        return None
    cmd = list(command)
    if Path(cmd[0]).name.startswith("python"):
        cmd = cmd[1:]
    if len(cmd) > 1 and cmd[0] == "-m":
        return cmd
    if not cmd or not cmd[0].endswith(".py"):
        return None
    parts = Path(cmd[0]).parts
    for i, part in enumerate(parts):
        if part in SCRIPT_FOLDERS:
            return [Path(*parts[i:]).as_posix(), *cmd[1:]]
    return None


def _derived(root: Path, entry: Mapping[str, Any], data: Sequence[str | Path], here: bool,
             echo: Callable[[str], None]) -> Outcome:
    args = engram_args(entry.get("command"))
    python = args is None
    if args is None:
        args = python_args(entry.get("command"))
    if args is None:
        raise ConfigError(f"{entry['id']}: its recorded command is neither an engram-eval nor a "
                          f"Python invocation ({entry.get('command')!r}); re-run it as "
                          f"PROVENANCE.md section(s) "
                          f"{', '.join(entry.get('sections') or []) or '?'} say")
    target = Path(entry["path"])

    def action(tree: Path) -> Outcome:
        with tempfile.TemporaryDirectory(prefix="engram-reproduce-out-") as out_dir:
            out = Path(out_dir)
            made: Path | None = None
            new_args: list[str] = []
            i = 0
            while i < len(args):
                a = args[i]
                if a in OUTPUT_FLAGS and i + 1 < len(args):
                    dest = out / Path(args[i + 1]).name
                    if Path(args[i + 1]).name == target.name:
                        made = dest
                    new_args += [a, str(dest)]
                    i += 2
                    continue
                new_args.append(_data_arg(a, tree, entry, data))
                i += 1
            if made is None:
                raise ConfigError(f"{entry['id']}: its command writes no --output named "
                                  f"{target.name}; nothing to compare")
            cwd = None
            if tree == root and entry.get("at"):  # --here, archived: its inputs from history
                cwd = out / "stage"
                _stage_inputs(root, entry, cwd)
            if python and new_args[0] != "-m":  # the script of ``tree``, wherever it runs
                new_args[0] = str(tree / new_args[0])
            done = _cli(tree, new_args, cwd, python=python)
            if done.returncode != 0 or not made.is_file():
                tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
                return Outcome(False, (f"the command failed (exit {done.returncode}):",
                                       *tail))
            got = sha256_file(made)
            if got == entry["sha256"]:
                return Outcome(True, (f"[ok] {entry['path']}: made again, sha256 {got[:16]}… "
                                      "equals the published one",))
            published = out / ("published-" + target.name)
            blob = (C.git_blob(root, str(entry["at"]), str(entry["path"])) if entry.get("at")
                    else (root / entry["path"]).read_bytes())
            atomic_write(published, blob or b"")
            paths = json_differences(published, made)
            code_only = here and paths is not None and bool(paths) and all(
                set(x.split("/")) & CODE_KEYS for x in paths)
            shown = ", ".join((paths or [])[:8]) if paths is not None else "not JSON"
            if code_only:
                return Outcome(True, (f"[ok] {entry['path']}: made again with today's code, "
                                      "equal but for the recorded hashes of that code "
                                      f"({shown})",))
            return Outcome(False, (f"[FAIL] {entry['path']}: made again, sha256 {got[:16]}… "
                                   f"differs from the published {str(entry['sha256'])[:16]}… "
                                   f"(where: {shown})",))

    return _in_checkout(root, entry.get("commit"), here, action, echo)


#: Keys under which a derived file records the code that made it: with ``--here`` today's code
#: differs from the publishing commit's there and nowhere else when the result reproduces.
CODE_KEYS = {"generator", "generators", "sources"}


def json_differences(a: Path, b: Path) -> list[str] | None:
    """The paths (``/key/key[i]``) where the JSON documents ``a`` and ``b`` differ; None when
    either is not JSON."""
    import json

    try:
        x = json.loads(a.read_text(encoding="utf-8"))
        y = json.loads(b.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    out: list[str] = []

    def walk(u: Any, v: Any, path: str) -> None:
        if isinstance(u, dict) and isinstance(v, dict):
            for k in sorted(set(u) | set(v), key=str):
                if k not in u or k not in v:
                    out.append(f"{path}/{k}")
                else:
                    walk(u[k], v[k], f"{path}/{k}")
        elif isinstance(u, list) and isinstance(v, list) and len(u) == len(v):
            for i, (p, q) in enumerate(zip(u, v, strict=True)):
                walk(p, q, f"{path}[{i}]")
        elif u != v:
            out.append(path or "/")

    walk(x, y, "")
    return out


def _data_arg(arg: str, tree: Path, entry: Mapping[str, Any],
              data: Sequence[str | Path]) -> str:
    """A command argument as it runs here: a data file the entry names by hash (its dataset,
    or an input file outside the results, e.g. a ``--gold-overlay`` file), found under
    ``data`` when its recorded path is absent; any other argument as recorded."""
    p = Path(arg)
    if not arg.startswith("-") and p.suffix in (".json", ".gz", ".jsonl") and \
            not (tree / p).exists() and not p.exists():
        inputs = entry.get("inputs") or {}
        d = inputs.get("data") or {}
        if d.get("sha256") and d.get("name") == p.name:
            return str(find_data(str(d["sha256"]), p.name, data).resolve())
        for f in inputs.get("files") or []:  # a published input is staged, not searched
            if isinstance(f, Mapping) and f.get("sha256") and \
                    not str(f.get("file")).startswith("results/") and \
                    Path(str(f.get("file"))).name == p.name:
                return str(find_data(str(f["sha256"]), p.name, data).resolve())
    return arg


#: The shipped encoder whose int8 vectors depend on their batch (PROVENANCE.md section 22,
#: "Known defect"): a run that used it may fail a re-execution for that reason alone; such a
#: failure is reported apart, never hidden.
BATCH_DEPENDENT_ENCODER = "engram-minilm-conv-v1"


def batch_defect_applies(meta: Mapping[str, Any]) -> bool:
    """Whether a run (its sidecar ``meta``) may fail a re-execution for the known batch defect
    alone: it used :data:`BATCH_DEPENDENT_ENCODER` and encoded in batches (made before
    ``embedding_batch_isolated``, or with it off). An isolated run has no such excuse."""
    from engram_eval.retrieval.settings import recorded_values

    used = any(m.get("name") == BATCH_DEPENDENT_ENCODER for m in meta.get("models") or [])
    return used and not recorded_values(meta).get("embedding_batch_isolated", False)


@dataclass(frozen=True)
class KeptOutcome:
    """``reproduce --kept``: each kept run's outcome, by id; ``known_defect`` the failed ones
    that used :data:`BATCH_DEPENDENT_ENCODER` in batches (:func:`batch_defect_applies`); ``skipped`` those that cannot re-execute on
    this machine (a model trained by a publish step and never committed), with the reason;
    ``errors`` those that could not start (data absent, ...), with the reason."""

    outcomes: dict[str, Outcome]
    known_defect: tuple[str, ...]
    skipped: dict[str, str]
    errors: dict[str, str]

    @property
    def ok(self) -> bool:
        failed = [i for i, o in self.outcomes.items() if not o.ok]
        return not self.errors and all(i in self.known_defect for i in failed)


def kept_runs(root: str | Path) -> list[dict[str, Any]]:
    """The catalogue's runs in the tree (the ones the retention rule keeps, once applied), in
    catalogue order."""
    cat = C.load(Path(root) / C.CATALOG)
    return [dict(e) for e in cat["entries"] if e["type"] == "run"]


def absent_model(entry: Mapping[str, Any]) -> str | None:
    """Why a run cannot re-execute here, or None: a model it recorded by path (trained by a
    publish step, never committed) that is not on this machine."""
    for m in (entry.get("inputs") or {}).get("models") or []:
        name = str(m.get("name") or "")
        if m.get("role") in ("reranker", "embedding") and name.startswith("/") and \
                not Path(name).exists():
            return (f"its {m.get('role')} model {name} is not on this machine (trained by a "
                    "publish step and never committed; PROVENANCE.md names the command)")
    return None


def needs_its_commit(entry: Mapping[str, Any]) -> str | None:
    """The archived shipped model a run recorded (resolvable only in a worktree of a commit
    that holds it), or None."""
    from engram_eval.retrieval.models import archived_model

    for m in (entry.get("inputs") or {}).get("models") or []:
        name = str(m.get("name") or "")
        if "/" not in name and name and archived_model(name) is not None:
            return name
    return None


def reproduce_kept(root: str | Path, *, data: Sequence[str | Path] = (), here: bool = False,
                   questions: int | None = 3, only: Sequence[str] = (),
                   echo: Callable[[str], None] = print) -> KeptOutcome:
    """``verify --rerun K --rerun-seed 0`` on every kept published run (``only``: fnmatch
    patterns of ids): with today's code, the recorded sources checked against the run's
    commit (the data tier's re-execution), except a run that used an archived model, which
    runs in a clean worktree of its commit (that tree holds the model); ``here``: every run
    with today's code. :class:`KeptOutcome`."""
    import fnmatch

    outcomes: dict[str, Outcome] = {}
    errors: dict[str, str] = {}
    skipped: dict[str, str] = {}
    defect: list[str] = []
    for e in kept_runs(root):
        if only and not any(fnmatch.fnmatchcase(e["id"], p) for p in only):
            continue
        echo(f"== {e['id']}")
        why = absent_model(e)
        if why is not None:
            skipped[e["id"]] = why
            echo(f"   skipped: {why}")
            continue
        archived = None if here else needs_its_commit(e)
        if archived is not None:
            echo(f"   it used the archived model {archived}: at its commit {e.get('commit')}")
        try:
            out = reproduce(root, e["id"], data=data, here=archived is None,
                            questions=questions, echo=echo)
        except ConfigError as err:
            errors[e["id"]] = str(err)
            echo(f"   not run: {err}")
            continue
        outcomes[e["id"]] = out
        sidecar = Path(root) / f"{e['path']}.metadata.json"
        if not out.ok and sidecar.is_file() and batch_defect_applies(
                read_json_document(sidecar)):
            defect.append(e["id"])
        for line in out.lines:
            echo(f"   {line}")
        echo(f"   {'REPRODUCED' if out.ok else 'NOT REPRODUCED'}"
             + (" (known defect: the int8 people's encoder, PROVENANCE.md section 22)"
                if e["id"] in defect else ""))
    return KeptOutcome(outcomes, tuple(defect), skipped, errors)
