"""The catalogue of published results: every file under ``results/`` as data.

One entry per published file (a run, a derived table/figure/analysis, a frozen manifest, a
settings file, a document, the held-out ledger), built from what the tree already records:

* ``id``: the file's path under ``results/`` (a run's without ``.jsonl`` / ``.jsonl.gz``);
* ``path``, ``sha256``: the file as published;
* ``type``: ``run`` (a ranking run: sidecar + summary beside it), ``production-run``,
  ``derived`` (a ``.metadata.json`` sidecar naming its generator and inputs), ``ledger`` or
  ``document`` (no sidecar: README/ABLATIONS pages);
* ``command``: the command that made it, as its sidecar records it (a run resumed or made in
  steps: every command, in order);
* ``inputs``: the data by name and sha256, the models by role, name and sha256, other
  published files by path and sha256, and a run's frozen source manifest;
* ``commit``: the commit whose sources it was made with: the commit that added the file, or,
  where a publication ran its steps at several commits, the one :data:`SOURCES_AT` names (the
  same commit ``verify --sources-at`` checks the recorded source hashes against);
* ``role``: a run's standing under the held-out discipline: ``held-out measurement`` or
  ``regression check`` (its frozen source's label, as the held-out ledger records it),
  ``tuning`` (its data is a tuning part of a published split), ``contains held-out
  questions`` (a split's source, labelled so by the run), else ``run``; other files
  ``derived``, ``ledger`` or ``document``;
* ``sections``: the PROVENANCE.md sections that discuss its folder (the contents table).

:func:`build` makes the catalogue from a checkout; :func:`check` holds a written catalogue
against the tree (every published file listed, every listed file present, hashes equal).

The ``archive`` holds entries whose files left the tree (:func:`archive`): each as it was
catalogued, plus ``at``, the commit that holds the file and its companions; the check reads
each back from git history and compares its sha256, and ``engram-eval reproduce ID`` takes the
file from there.
A frozen manifest's command is the validate-only freeze of the run made under it
(:func:`freeze_commands`).

The ``planned`` list holds results declared before they exist, each with the fields above
(its ``command`` the recipe, ``inputs.entries`` the catalogue ids it reads);
``engram-eval publish ID`` makes one at HEAD, verifies it, moves it into ``results/`` and
catalogues it (:mod:`engram_eval.provenance.publish`); :func:`check_planned` holds them.
``engram-eval catalog --makefile`` writes the Make rules the checkout's ``Makefile`` includes
(:mod:`engram_eval.provenance.makefile`): Make orders the publications by their inputs.
``engram-eval catalog`` writes or checks ``results/catalog.yaml``; ``engram-eval reproduce ID``
re-executes an entry (:mod:`engram_eval.runs.reproduce`).
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError
from engram_eval.io import sha256_file

KIND = "engram-eval/catalog"
VERSION = 1
#: The catalogue's place in a checkout.
CATALOG = Path("results") / "catalog.yaml"

#: Runs whose package sources are those of a commit before the one that added them (a
#: publication that ran its steps at several commits): ``results/``-relative glob -> the commit
#: whose sources they hash (PROVENANCE.md section 14, History, and the sections named).
SOURCES_AT: dict[str, str] = {
    "lexical/tune_*.jsonl.gz": "3fc137d",
    "lexical/fold?_none.jsonl.gz": "8012952",
    "lexical/fold?_d15_*.jsonl.gz": "8012952",
    "lexical/fold?_d2?_*.jsonl.gz": "e5e84cc",
    "lexical/heldout_*.jsonl.gz": "7784ff5",
    "rerank_retrain/fold?_*.jsonl.gz": "fe62a1b",
    "turn_top_m/topm_loc_*.jsonl.gz": "8c05107",
    "turn_top_m/topm_lme_*.jsonl.gz": "08c99cf",
    "turn_top_m/heldout_topm_lme_v3*.jsonl.gz": "188f844",
    "turn_top_m/fold?_absent_*.jsonl.gz": "99b48bf",
    "confidence_v5/locomo_tune_default.jsonl.gz": "4d1e35a",
    "rerank_prior/fold?_score_*.jsonl.gz": "15028a5",
    "rerank_prior/heldout_prior_lme_v4.jsonl.gz": "2ee10c4",
    "confidence_v6/locomo_tune_default.jsonl.gz": "f594cca",
    # archived by the retention rule and restored (a README figure, §23; the behaviour
    # check's recorded production settings, §4): git names the
    # restoring commit as the one that added them; their code is that of their publication
    "systems_leak/prefix_leak_*.jsonl.gz": "693aad0",
    "systems_leak/compare_prefix_leak_real_vs_opaque.*": "693aad0",
    "production/dev.json": "3725f65",  # restored too: the behaviour check reads its settings
    "production/dev.frozen.json": "3725f65",
}

#: The real data beside a checkout (README: ``../shared/data``).
_DATA = "../shared/data"
_LME_LABEL = ("development split of LongMemEval_S (not held out: the data was looked at while "
              "building the retriever)")
_LOC_LABEL = ("LoCoMo10, all 10 conversations (not held out: the data was looked at while "
              "building the retriever)")
#: The command of a derived file whose sidecar records none (a script's output, sidecarred by
#: ``engram_eval.analysis.derived_sidecars``): ``results/``-relative path -> the command the
#: publication ran, in the checkout's root (before issue 46 a step of a publish script).
SCRIPT_COMMANDS: dict[str, list[str]] = {
    "longmemeval_s_dev/ABLATIONS.md": [
        "python", "scripts/ablation_table.py", "results/longmemeval_s_dev", "--label",
        _LME_LABEL, "--output", "results/longmemeval_s_dev/ABLATIONS.md"],
    "locomo10/ABLATIONS.md": [
        "python", "scripts/ablation_table.py", "results/locomo10", "--label", _LOC_LABEL,
        "--output", "results/locomo10/ABLATIONS.md"],
    "longmemeval_s_dev/MISSES_hybrid_default.md": [
        "python", "scripts/misses.py", "results/longmemeval_s_dev/hybrid_default.jsonl.gz",
        "--output", "results/longmemeval_s_dev/MISSES_hybrid_default.md"],
    "lexical/lexical_choice.json": [
        "python", "-m", "engram_eval.analysis.lexical_choice", "results/lexical", "plain stem",
        "plain_none stem_none plain_prefix stem_prefix"],
    "lexical/heldout_config.yaml": [
        "python", "-m", "engram_eval.analysis.first_stage",
        "results/lexical/tuned_first_stage.yaml", "results/lexical/heldout_config.yaml"],
    "longmemeval_s_dev/dense_pieces.json": [
        "python", "benchmarks/longmemeval/dense_pieces.py",
        f"{_DATA}/longmemeval/longmemeval_s_cleaned.dev.json.gz", "--output",
        "results/longmemeval_s_dev/dense_pieces.json"],
    **{f"production/abstention_{name}.{ext}": [
        "python", "benchmarks/production_retrieval/abstention_sweep.py", "--settings",
        "engram_eval/production/data/settings_v1.json", f"{_DATA}/{data}", "--dataset-label",
        label, "--output", f"results/production/abstention_{name}.json"]
       for name, data, label in (
           ("longmemeval_s_dev", "longmemeval/longmemeval_s_cleaned.dev.json.gz",
            "LongMemEval S cleaned, development split"),
           ("locomo10", "locomo/locomo10.json", "LoCoMo10"))
       for ext in ("json", "png")},
    "confidence_v7/gate_choice.json": [
        "python", "scripts/choose_gate.py", "--candidate",
        "c1=results/confidence_v7/cand_c1.report.json", "--candidate",
        "c0.1=results/confidence_v7/cand_c0.1.report.json", "--output",
        "results/confidence_v7/gate_choice.json"],
}

_RUN_SUFFIXES = (".jsonl.gz", ".jsonl")
_CONTEXT_SUFFIXES = (".context.jsonl", ".context.jsonl.gz")
#: Files under results/ that are not catalogued: companions of a catalogued file, the
#: catalogue itself and a ledger's lock file.
_COMPANION_SUFFIXES = (".metadata.json", ".summary.json")


def _is_run(p: Path) -> bool:
    return p.name.endswith(_RUN_SUFFIXES) and not p.name.endswith(_CONTEXT_SUFFIXES)


def entry_id(rel: str) -> str:
    """The id of the file at ``rel`` (its path under ``results/``)."""
    for suffix in _RUN_SUFFIXES:
        if rel.endswith(suffix) and not rel.endswith(_CONTEXT_SUFFIXES):
            return rel[: -len(suffix)]
    return rel


def published_files(results: Path) -> list[Path]:
    """Every catalogued file under ``results`` (sorted): all but sidecars, summaries beside
    their file, the catalogue and lock files."""
    out = []
    for p in sorted(results.rglob("*")):
        if p.is_dir() or p.suffix == ".lock" or p.name in (CATALOG.name,
                                                           CATALOG.name + ".metadata.json"):
            continue
        if p.name.endswith(_COMPANION_SUFFIXES):
            owner = Path(str(p).removesuffix(".metadata.json").removesuffix(".summary.json"))
            if owner.is_file():
                continue
        out.append(p)
    return out


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=False)
    except OSError:
        return None
    return done.stdout if done.returncode == 0 else None


def adding_commits(root: Path) -> dict[str, str]:
    """``results/``-relative path -> the (abbreviated) commit that last added it (or renamed it
    there), from one
    ``git log`` over ``results/``; empty where git history is not available."""
    out = _git(root, "log", "--diff-filter=AR", "--format=@%h", "--name-only", "--", "results")
    found: dict[str, str] = {}
    commit = ""
    for line in (out or "").splitlines():
        if line.startswith("@"):
            commit = line[1:]
        elif line.startswith("results/") and line not in found:
            found[line.removeprefix("results/")] = commit  # newest first: the last add
    return found


def sources_commit(rel: str, added: Mapping[str, str]) -> str | None:
    """The commit whose sources the file at ``rel`` was made with (:data:`SOURCES_AT`, else
    the commit that added it)."""
    for pattern, commit in SOURCES_AT.items():
        if fnmatch.fnmatch(rel, pattern):
            return commit
    return added.get(rel)


def folder_sections(provenance: Path) -> dict[str, list[str]]:
    """``results/`` folder -> the PROVENANCE.md sections its contents-table rows name."""
    out: dict[str, list[str]] = {}
    if not provenance.is_file():
        return out
    row = re.compile(r"^\| \[([0-9a-z]+)\]\(#[^)]*\) \| (.*?) \|")
    for line in provenance.read_text(encoding="utf-8").splitlines():
        m = row.match(line)
        if not m:
            continue
        for folder in re.findall(r"`results/([^`]*?)/?`", m.group(2)):
            out.setdefault(folder.rstrip("/"), []).append(m.group(1))
    return out


def tuning_parts(results: Path) -> set[str]:
    """The sha256 of every tuning part a published split manifest names."""
    found: set[str] = set()
    for manifest in results.rglob("*split_manifest.json"):
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for node in _walk(doc):
            parts = node.get("parts") if isinstance(node, Mapping) else None
            tune = parts.get("tune") if isinstance(parts, Mapping) else None
            if isinstance(tune, Mapping) and tune.get("sha256"):
                found.add(str(tune["sha256"]))
    return found


def _walk(doc: Any) -> Iterable[Any]:
    yield doc
    if isinstance(doc, Mapping):
        for v in doc.values():
            yield from _walk(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _walk(v)


def _normalise(p: Path) -> str:
    """``p`` with ``..`` folded, without resolving links."""
    import os

    return os.path.normpath(str(p))


def _read_json(p: Path) -> dict[str, Any]:
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{p}: not a readable JSON sidecar ({e})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{p}: a sidecar must be a JSON object")
    return doc


def _run_entry(meta: Mapping[str, Any], tune: set[str]) -> dict[str, Any]:
    data = meta.get("dataset") or {}
    frozen = meta.get("frozen_source") or {}
    inputs: dict[str, Any] = {
        "data": {"name": data.get("name"), "sha256": data.get("sha256")},
        "models": [{"role": m.get("role"), "name": m.get("name"), "sha256": m.get("sha256")}
                   for m in meta.get("models") or []],
    }
    if frozen:
        inputs["frozen_source"] = frozen.get("path")
    if frozen.get("label"):
        role = str(frozen["label"])
    elif data.get("sha256") in tune:
        role = "tuning"
    elif meta.get("heldout_questions"):
        role = "contains held-out questions"
    else:
        role = "run"
    commands = [list(r.get("command") or []) for r in meta.get("runs") or []]
    return {"type": "run", "command": commands[-1] if len(commands) == 1 else commands,
            "inputs": inputs, "role": role}


def _derived_entry(p: Path, meta: Mapping[str, Any], root: Path) -> dict[str, Any]:
    inputs: dict[str, Any] = {}
    if meta.get("dataset"):
        d = meta["dataset"]
        inputs["data"] = {"name": d.get("name"), "sha256": d.get("sha256")}
    files = []
    for inp in meta.get("inputs") or []:
        src = Path(*(p.parent / str(inp.get("file", ""))).parts)
        try:  # a published input by its path in the checkout; an outside one as recorded
            shown = Path(_normalise(src)).relative_to(root).as_posix()
        except ValueError:
            shown = str(inp.get("file"))
        files.append({"file": shown, "sha256": inp.get("sha256")})
    if files:
        inputs["files"] = files
    if "output_sha256" in meta:  # a production run's own sidecar
        return {"type": "production-run", "command": meta.get("command"), "inputs": inputs,
                "role": "run"}
    return {"type": "derived", "command": meta.get("command"), "inputs": inputs,
            "role": "derived"}


def build(root: str | Path, archive: Iterable[Mapping[str, Any]] = (),
          added: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The catalogue of the checkout at ``root`` (module docstring), carrying ``archive``
    (the entries of a written catalogue's archive: files that live in git history only);
    ``added``: :func:`adding_commits` of ``root`` when already read."""
    root = Path(_normalise(Path(root).absolute()))
    results = root / "results"
    if not results.is_dir():
        raise ConfigError(f"{results}: no results folder to catalogue")
    added = adding_commits(root) if added is None else added
    sections = folder_sections(root / "PROVENANCE.md")
    tune = tuning_parts(results)
    entries = []
    for p in published_files(results):
        rel = p.relative_to(results).as_posix()
        side = Path(str(p) + ".metadata.json")
        if _is_run(p) and side.is_file():
            body = _run_entry(_read_json(side), tune)
        elif p.name == "heldout_ledger.json":
            body = {"type": "ledger", "command": None, "inputs": {}, "role": "ledger"}
        elif side.is_file():
            body = _derived_entry(p, _read_json(side), root)
        else:
            body = {"type": "document", "command": None, "inputs": {}, "role": "document"}
        folder = rel.split("/", 1)[0] if "/" in rel else ""
        entries.append({"id": entry_id(rel), "path": f"results/{rel}", "sha256": sha256_file(p),
                        **body, "commit": sources_commit(rel, added),
                        "sections": sections.get(folder, [])})
    archived = [dict(a) for a in archive]
    fill_commands([*entries, *archived])
    return {"kind": KIND, "version": VERSION, "entries": entries, "archive": archived}


def fill_commands(entries: list[dict[str, Any]]) -> None:
    """The commands sidecars do not record, in place, for published and archived entries
    alike: a frozen manifest's (:func:`freeze_commands`), a script-made file's
    (:data:`SCRIPT_COMMANDS`)."""
    freeze_commands(entries)
    for e in entries:
        if e.get("command") is None and e["id"] in SCRIPT_COMMANDS:
            e["command"] = list(SCRIPT_COMMANDS[e["id"]])


def freeze_commands(entries: list[dict[str, Any]]) -> None:
    """A frozen manifest's command, where the sidecar records none: the validate-only freeze of
    the run made under it (that run's command, ``--output`` and ``--frozen-source`` dropped,
    ``--validate-only --freeze-source MANIFEST`` added) and that run's data."""
    by_path = {e["path"]: e for e in entries}
    for e in entries:
        manifest = by_path.get(str((e.get("inputs") or {}).get("frozen_source")))
        cmd = e.get("command")
        if e.get("type") != "run" or manifest is None or manifest.get("command") is not None or \
                not isinstance(cmd, list) or not all(isinstance(a, str) for a in cmd):
            continue
        keep: list[str] = []
        skip = False
        for a in cmd:
            if skip:
                skip = False
            elif a in ("--output", "--frozen-source"):
                skip = True
            else:
                keep.append(a)
        manifest["command"] = [*keep, "--validate-only", "--freeze-source", manifest["path"]]
        manifest["inputs"] = {**(manifest.get("inputs") or {}), "data": e["inputs"]["data"]}


def commands(entry: Mapping[str, Any]) -> list[list[str]]:
    """The entry's recipe as a list of commands (one command, or several in order)."""
    cmd = entry.get("command")
    if isinstance(cmd, list) and cmd and all(isinstance(c, list) for c in cmd):
        out = [list(map(str, c)) for c in cmd]
    elif isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd):
        out = [list(cmd)]
    else:
        raise ConfigError(f"{entry.get('id')}: field command must be a command (a list of "
                          "strings) or a list of commands")
    return out


#: Fields a planned entry must have.
PLANNED_FIELDS = ("id", "path", "type", "role", "command")


def check_planned(catalog: Mapping[str, Any]) -> list[str]:
    """Problems of the catalogue's ``planned`` entries: a missing field, a path outside
    ``results/``, an id already catalogued or planned twice, an input entry that is neither
    catalogued nor planned. Empty when they are well formed."""
    known = {e["id"] for e in catalog.get("entries", [])}
    planned = {p.get("id") for p in catalog.get("planned", [])}
    problems = []
    for i, p in enumerate(catalog.get("planned", [])):
        where = f"planned[{i}] ({p.get('id')})"
        missing = [f for f in PLANNED_FIELDS if not p.get(f)]
        if missing:
            problems.append(f"{where}: field(s) {', '.join(missing)} missing")
            continue
        if not str(p["path"]).startswith("results/") or ".." in Path(p["path"]).parts:
            problems.append(f"{where}: field path must lie under results/")
        if entry_id(str(p["path"]).removeprefix("results/")) != p["id"]:
            problems.append(f"{where}: field id must be its path under results/ (a run's "
                            "without .jsonl/.jsonl.gz)")
        if p["id"] in known:
            problems.append(f"{where}: already published (an entry of that id is catalogued)")
        if [q.get("id") for q in catalog.get("planned", [])].count(p["id"]) > 1:
            problems.append(f"{where}: planned twice")
        try:
            commands(p)
        except ConfigError as e:
            problems.append(str(e))
        for dep in (p.get("inputs") or {}).get("entries") or []:
            if dep not in known and dep not in planned:
                problems.append(f"{where}: input entry {dep!r} is neither catalogued nor "
                                "planned")
    return problems


def dump(catalog: Mapping[str, Any]) -> str:
    import yaml

    head = ("# The catalogue of published results (engram-eval catalog --write; "
            "engram_eval/provenance/catalog.py).\n# One entry per file under results/; "
            "engram-eval reproduce ID re-executes an entry.\n")
    class Dumper(yaml.SafeDumper):  # every entry written out in full: no anchors, no aliases
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return head + yaml.dump(dict(catalog), Dumper=Dumper, sort_keys=False, width=100,
                            allow_unicode=True)


def load(path: str | Path) -> dict[str, Any]:
    """A written catalogue, checked for its kind and version; entries by id must be unique."""
    import yaml

    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{p}: not a readable catalogue ({e})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND or doc.get("version") != VERSION:
        raise ConfigError(f"{p}: not an {KIND} version {VERSION} file")
    doc.setdefault("archive", [])
    doc.setdefault("planned", [])
    planned = doc["planned"]
    if not isinstance(planned, list) or not all(
            isinstance(x, dict) and isinstance(x.get("id"), str) for x in planned):
        raise ConfigError(f"{p}: field planned must be a list of entries, each with a string id")
    seen: set[str] = set()
    for field in ("entries", "archive"):
        items = doc.get(field)
        if not isinstance(items, list):
            raise ConfigError(f"{p}: field {field} must be a list")
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                raise ConfigError(f"{p}: {field}[{i}]: field id must be a string")
            if item["id"] in seen:
                raise ConfigError(f"{p}: {field}[{i}]: id {item['id']!r} is listed twice")
            if field == "archive" and not (isinstance(item.get("at"), str)
                                           and isinstance(item.get("path"), str)):
                raise ConfigError(f"{p}: archive[{i}]: fields at (the commit holding the "
                                  "file) and path must be strings")
            seen.add(item["id"])
    return doc


def find(catalog: Mapping[str, Any], entry: str) -> dict[str, Any]:
    """The entry of id ``entry`` (or of that path); one clear error naming close ids."""
    entries = [*catalog["entries"], *catalog.get("archive", [])]
    for e in entries:
        if entry in (e["id"], e.get("path"), f"results/{e['id']}"):
            return dict(e)
    import difflib

    close = difflib.get_close_matches(entry, [e["id"] for e in entries], n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"no catalogue entry {entry!r}{hint}")


def check(root: str | Path, catalog: Mapping[str, Any]) -> list[str]:
    """Problems of ``catalog`` against the tree at ``root``: a published file not listed, a
    listed file absent, a hash that differs, an entry that differs from the one the tree gives
    now (its command, inputs, role, commit or sections). Empty when they agree."""
    added = adding_commits(Path(root))
    fresh = {e["id"]: e for e in build(root, added=added)["entries"]}
    listed = {e["id"]: e for e in catalog["entries"]}
    # without git history (a shallow clone, an export) the commits cannot be re-derived: they
    # are then taken as written, everything else still checked
    history = bool(added)
    problems = [f"{fresh[i]['path']}: published but not in the catalogue"
                for i in sorted(set(fresh) - set(listed))]
    problems += [f"{listed[i].get('path', i)}: in the catalogue but not under results/"
                 for i in sorted(set(listed) - set(fresh))]
    for i in sorted(set(fresh) & set(listed)):
        a, b = listed[i], fresh[i]
        if a.get("sha256") != b["sha256"]:
            problems.append(f"{b['path']}: sha256 {b['sha256'][:16]}…, the catalogue says "
                            f"{str(a.get('sha256'))[:16]}…")
            continue
        differ = sorted(k for k in b if a.get(k) != b[k] and (history or k != "commit"))
        if differ:
            problems.append(f"{b['path']}: the catalogue's {', '.join(differ)} differ from "
                            "what the tree records now")
    problems += check_planned({**catalog, "entries": list(fresh.values())})
    for a in catalog.get("archive", []):
        if a["id"] in fresh:
            problems.append(f"{a['path']}: archived, and published in the tree too")
            continue
        if not history:
            continue
        blob = git_blob(Path(root), str(a["at"]), str(a["path"]))
        if blob is None:
            problems.append(f"{a['path']}: archived at {a['at']}, but git history has no such "
                            "file there")
        elif _sha(blob) != a.get("sha256"):
            problems.append(f"{a['path']}: archived at {a['at']} with another sha256 than the "
                            "catalogue's")
    return problems


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def git_blob(root: Path, commit: str, path: str) -> bytes | None:
    """The bytes of ``path`` at ``commit`` in the repository at ``root`` (None: absent)."""
    try:
        done = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{path}"],
                              capture_output=True, check=False)
    except OSError:
        return None
    return done.stdout if done.returncode == 0 else None


def companions(path: str) -> list[str]:
    """The files published beside ``path`` (its sidecar, a run's summary)."""
    return [path + ".metadata.json", path + ".summary.json"]


def archive(root: str | Path, catalog: Mapping[str, Any], ids: Iterable[str]
            ) -> dict[str, Any]:
    """``catalog`` with the entries ``ids`` moved to its archive, each naming the commit
    (HEAD) that holds the file; the files and their companions are removed from the working
    tree only after git holds each byte for byte (commit the removal next). A file with
    uncommitted changes is refused."""
    root = Path(root)
    head = head_commit(root)
    moved: list[dict[str, Any]] = []
    remove: list[Path] = []
    for wanted in ids:
        e = find({"entries": catalog["entries"]}, wanted)
        if e["id"] in {m["id"] for m in moved}:
            continue
        for rel in [e["path"], *companions(e["path"])]:
            f = root / rel
            if not f.is_file():
                continue
            blob = git_blob(root, head, rel)
            if blob is None or _sha(blob) != sha256_file(f):
                raise ConfigError(f"{rel}: not committed as it is in the tree; commit it before "
                                  "archiving (git must hold the file byte for byte)")
            remove.append(f)
        moved.append({**e, "at": head})
    kept = [e for e in catalog["entries"] if e["id"] not in {m["id"] for m in moved}]
    for f in remove:
        f.unlink()
    return {**catalog, "entries": kept, "archive": [*catalog.get("archive", []), *moved]}


def head_commit(root: Path) -> str:
    """The commit checked out at ``root`` (full hash); one clear error outside git."""
    head = (_git(root, "rev-parse", "HEAD") or "").strip()
    if not head:
        raise ConfigError(f"{root}: not a git checkout with a commit: nothing can be archived")
    return head
