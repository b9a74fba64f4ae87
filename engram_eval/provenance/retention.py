"""The retention rule (issue 46): the tree keeps what backs a current claim, the rest lives in
git history, indexed by the catalogue's archive.

The rule. The tree keeps

1. the results behind a **current claim**: the files the README cites; the files behind each
   current default (:data:`CLAIMS`, each naming the PROVENANCE.md section that states it);
   each **held-out measurement** the ledger records (the once-only first run on a held-out
   input) with its **baseline** (the comparisons published beside it, in its folder, that take
   it as an input); the ledger, the split manifests that define the held-out parts;
2. closed over what they were made from: a kept entry keeps every published file its catalogue
   entry names as an input (a comparison its runs, a choice its tuning runs), every published
   file its recorded command names (a frozen source manifest, a settings file), and every
   file its own command wrote beside it (a comparison's plot, a tuned YAML's tuning report).
   What a kept *run* names (its config, its frozen source) is kept so the run re-executes, but
   not closed over in turn: the tuning runs that chose a held-out run's config back that
   choice, which stays only where a claim names it (:data:`RUN_TYPES`);
3. and the **models the current defaults use** (:func:`needed_models`: the shipped models the
   default settings name, with the model whose weights a settings-only version uses).

Everything else moves to the catalogue's archive (``engram-eval catalog --retain --apply``),
each entry naming the commit that holds its files; ``engram-eval reproduce ID`` re-executes it
from there. A kept run whose model left the tree re-executes the same way: ``reproduce`` runs
it in a clean worktree of its commit, which holds the model (an archived model resolved by name
is one error naming that commit, :data:`ARCHIVED_MODELS`).

:func:`plan` computes the kept set (each kept id with its reasons) and what to archive;
:func:`problems` is what ``engram-eval catalog --check`` adds: a kept-by-rule entry archived,
an entry in the tree no claim keeps, a shipped model no default needs or a needed one absent,
and an archived model missing from the package's index of archived models.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError

#: Where shipped models live in a checkout, and the package's index of the archived ones
#: (read by model resolution: an archived model by name is one error naming its commit).
MODELS = Path("engram_eval") / "models"
ARCHIVED_MODELS = MODELS / "archived.json"
ARCHIVED_MODELS_KIND = "engram-eval/archived-models"
#: The id prefix of an archived model's catalogue entry.
MODEL_PREFIX = "models/"


@dataclass(frozen=True)
class Claim:
    """A current claim and the catalogue ids (fnmatch patterns) behind it."""

    name: str
    why: str
    ids: tuple[str, ...]


#: The current defaults and what backs each (PROVENANCE.md's current-state sections). Decided
#: file by file where the rule is ambiguous; the ``why`` says so.
CLAIMS: tuple[Claim, ...] = (
    Claim("the default first stage (§18)",
          "turn-level top m per chat structure, chosen on the tuning parts (the choice table and "
          "the chosen YAML, whose inputs are the tuning runs), its held-out regression check "
          "without rerank (the figure the README quotes for --no-rerank)",
          ("turn_top_m/turn_top_m.json", "turn_top_m/topm_first_stage.yaml",
           "turn_top_m/topm_heldout_config.yaml", "turn_top_m/heldout_topm_lme_first_stage")),
    Claim("the default reranker engram-ce-minilm-v4 (§20)",
          "the prior chosen out of fold (prior_choice.json and its fold runs), the held-out "
          "regression check against the first stage and against v3 (the README's figures), the "
          "cost the README quotes, and the training card of v3's weights that v4 keeps; the "
          "comparisons with v2 and with §6 are history (their baselines used archived models)",
          ("rerank_prior/prior_choice.json", "rerank_prior/heldout_prior_lme_v4",
           "rerank_prior/compare_prior_lme_v4_vs_first_stage.*",
           "rerank_prior/compare_prior_lme_v4_vs_v3.*", "rerank_prior/speed_tune30.json",
           "turn_top_m/ce_topm_tune.card.json")),
    Claim("the people's encoder engram-minilm-conv-v1 (§22)",
          "the whole publication of the encoder now in use: the choice out of fold "
          "(encoder_choice.json, its fold runs, the fold encoders' cards), the held-out "
          "conversations once in the shipped int8 form and in fp32, its comparisons with "
          "MiniLM (the README's baseline figure) and with BM25 alone, and the batch fix's "
          "held-out run (the default embedding_batch_isolated: the README's held-out figure "
          "since) with its comparison; the fix's tune-part comparison is history (a "
          "correctness fix, adopted without a choice)",
          ("dense_encoder/encoder_choice.json", "dense_encoder/enc_f*", "dense_encoder/lme_f*",
           "dense_encoder/loc_f*", "dense_encoder/heldout_*", "dense_encoder/compare_conv_v1_*",
           "dense_encoder/compare_heldout_isolated_vs_batched.json")),
    Claim("the default gate, calibration v7 (§25)",
          "the whole publication of the gate now in use: both orders, the feature study, the "
          "candidates by nested cross-validation, the fit's report, the held-out regression "
          "checks and the production fixtures under it",
          ("confidence_v7/*",)),
    Claim("the analyser (§14)",
          "the README's analyser is §14's choice (lexical_choice.json holds its figures); the "
          "fusion of §14 was superseded by §18, so its tuning runs and held-out runs are history",
          ("lexical/lexical_choice.json",)),
    Claim("people's chats not reranked (§26)",
          "the default leaves people's chats unreranked: asked again on the trained encoder's "
          "first stage (§22), neither the shipped reranker nor one trained on people's chats "
          "out of fold by conversation gains beyond noise on the LoCoMo tune part "
          "(people_rerank_choice.json with its runs, the fold rerankers' training cards; the "
          "README cites §26 for it); §11's first check, on MiniLM's first stage, is history",
          ("people_rerank/people_rerank_choice.json", "people_rerank/people_f*.reranker.card.json")),
    Claim("the README's figures",
          "figures the README states, by the file that holds each: flat-bm25's official "
          "protocol equal to the reference printer's (Metrics and denominators; the real-data "
          "parity test reads it), the people gate's held-out AUROC under calibrations v5 and v6 "
          "(Production-confidence checks, why people's chats are ungated)",
          ("longmemeval_s_dev/flat_bm25", "confidence_v5/heldout_locomo.json",
           "confidence_v6/heldout_locomo.json",
           # Evaluate your own system: the prefix leak's recall_all@5 .99 with real ids and
           # chance with opaque ones (§23)
           "systems_leak/compare_prefix_leak_real_vs_opaque.json")),
    Claim("the behaviour check (§4)",
          "scripts/behaviour_check.py re-runs each production fixture under the settings its "
          "published run recorded (results/production/<fixture>.json): the dev fixture's run "
          "backs that check beside the two held-out measurements",
          ("production/dev.json",)),
    Claim("the held-out parts",
          "the split manifests define the held-out parts every held-out run is checked on, and "
          "the ledger records every use of them",
          ("longmemeval_s_dev_split/split_manifest.json", "structure/locomo_split_manifest.json",
           "heldout_ledger.json")),
)

#: Entry types that are runs: what a kept run names (its config, its frozen source) is kept so
#: that it re-executes, but not closed over in turn (the tuning runs that chose a held-out
#: run's config back a choice, kept only where a claim names that choice).
RUN_TYPES = ("run", "production-run")

#: The ledger's label of a first, once-only run on a held-out input.
MEASUREMENT = "held-out measurement"


@dataclass
class Plan:
    """What the rule keeps (id -> reasons) and archives, with the models it keeps."""

    keep: dict[str, list[str]] = field(default_factory=dict)
    archive: list[str] = field(default_factory=list)
    models_keep: dict[str, str] = field(default_factory=dict)
    models_archive: list[str] = field(default_factory=list)

    def add(self, entry_id: str, reason: str) -> bool:
        """Record ``reason`` for keeping ``entry_id``; True when it was not kept before."""
        new = entry_id not in self.keep
        self.keep.setdefault(entry_id, [])
        if reason not in self.keep[entry_id]:
            self.keep[entry_id].append(reason)
        return new


def _match(patterns: Iterable[str], ids: Iterable[str]) -> list[str]:
    ids = list(ids)
    return [i for i in ids if any(fnmatch.fnmatchcase(i, p) for p in patterns)]


def readme_ids(readme: str, ids: Iterable[str]) -> list[str]:
    """The catalogue ids the README cites (by id, or by path under ``results/``)."""
    known = set(ids)
    found: list[str] = []
    for token in re.findall(r"[A-Za-z0-9_./-]+", readme):
        t = token.rstrip(".").removeprefix("results/")
        for cand in (t, t.removesuffix(".jsonl.gz"), t.removesuffix(".jsonl")):
            if cand in known and cand not in found:
                found.append(cand)
    return found


def ledger_measurements(ledger: Mapping[str, Any]) -> list[str]:
    """The ``results/``-relative outputs the ledger labels held-out measurements."""
    out: list[str] = []
    for record in (ledger.get("inputs") or {}).values():
        for run in record.get("runs") or []:
            if run.get("label") == MEASUREMENT and isinstance(run.get("output"), str):
                rel = run["output"].removeprefix("results/")
                if rel not in out:
                    out.append(rel)
    return out


def _entry_for(rel: str, by_path: Mapping[str, str]) -> str | None:
    """The id of the entry published at ``rel`` (a ledger's ``.jsonl`` may be published
    compressed)."""
    for cand in (rel, rel + ".gz"):
        if f"results/{cand}" in by_path:
            return by_path[f"results/{cand}"]
    return None


def _written_together(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether ``b`` is a file the command that made ``a`` wrote too (the two share a recorded
    command): named among its arguments (``--output X --plot Y``), or named after ``a`` (a
    tuned YAML's ``X.yaml.tuning.json``) or ``a`` after it."""
    pa, pb = str(a.get("path")), str(b.get("path"))
    cmd = a.get("command") or []
    args = {str(x) for c in cmd for x in (c if isinstance(c, list) else [c])}
    return pb in args or pb.startswith(pa + ".") or pa.startswith(pb + ".")


def _command_key(entry: Mapping[str, Any]) -> str | None:
    cmd = entry.get("command")
    return json.dumps(cmd) if cmd else None


def _named_inputs(entry: Mapping[str, Any], by_path: Mapping[str, str]) -> list[str]:
    """The catalogue ids an entry was made from: its recorded input files, its frozen source,
    and the published files its command names (other than what it wrote)."""
    inputs = entry.get("inputs") or {}
    names = [str(f.get("file")) for f in inputs.get("files") or [] if isinstance(f, Mapping)]
    if inputs.get("frozen_source"):
        names.append(str(inputs["frozen_source"]))
    cmd = entry.get("command") or []
    flat = [a for c in cmd for a in (c if isinstance(c, list) else [c])]
    names += [str(a) for a in flat if isinstance(a, str)]
    out = []
    for n in names:
        i = by_path.get(n) or by_path.get(f"results/{n}")
        if i is not None and i != entry["id"] and i not in out:
            out.append(i)
    return out


def needed_models(root: Path, default_models: Iterable[str]) -> dict[str, str]:
    """Shipped model name -> why the tree keeps it: each model the current defaults name, and
    the model whose weights a settings-only version uses (its card's ``weights_from``)."""
    out: dict[str, str] = {}
    todo = [(m, "a current default names it") for m in default_models]
    while todo:
        name, why = todo.pop()
        if name in out:
            continue
        out[name] = why
        card = root / MODELS / name / "card.json"
        if card.is_file():
            base = json.loads(card.read_text(encoding="utf-8")).get("weights_from")
            if isinstance(base, str):
                todo.append((base, f"{name} uses its weights"))
    return out


def shipped_dirs(root: Path) -> list[str]:
    """The model directories shipped in the checkout at ``root`` (each with a card)."""
    d = root / MODELS
    return sorted(p.name for p in d.iterdir() if (p / "card.json").is_file()) if d.is_dir() else []


def plan(root: str | Path, catalog: Mapping[str, Any], default_models: Iterable[str],
         claims: Iterable[Claim] | None = None) -> Plan:
    """Apply the rule (module docstring) to the catalogue of the checkout at ``root``: every
    entry in the tree or the archive is kept (with its reasons) or to be archived.
    ``claims``: the current claims (default :data:`CLAIMS`, this repository's)."""
    root = Path(root)
    claims = CLAIMS if claims is None else claims
    entries = {e["id"]: e for e in [*catalog["entries"], *catalog.get("archive", [])]
               if not str(e["id"]).startswith(MODEL_PREFIX)}
    by_path = {str(e.get("path")): i for i, e in entries.items()}
    out = Plan()
    todo: list[str] = []
    closed: set[str] = set()  # kept with what it was made from
    needed: set[str] = set()  # kept only as what a run needs to re-execute

    def keep(ids: Iterable[str], reason: str, *, run_needs: bool = False) -> None:
        for i in ids:
            out.add(i, reason)
            if i in closed or (run_needs and i in needed):
                continue
            (needed if run_needs else closed).add(i)
            todo.append(i)

    readme = root / "README.md"
    if readme.is_file():
        keep(readme_ids(readme.read_text(encoding="utf-8"), entries), "the README cites it")
    for claim in claims:
        matched = _match(claim.ids, entries)
        missing = [p for p in claim.ids if not _match([p], entries)]
        if missing:
            raise ConfigError(f"retention claim {claim.name!r}: no catalogue entry matches "
                              f"{', '.join(missing)} (renamed? update "
                              "engram_eval/provenance/retention.py CLAIMS)")
        keep(matched, f"behind {claim.name}")
    ledger = root / "results" / "heldout_ledger.json"
    if ledger.is_file():
        doc = json.loads(ledger.read_text(encoding="utf-8"))
        keep(_match(["heldout_ledger.json"], entries), "the ledger of every held-out use")
        for rel in ledger_measurements(doc):
            i = _entry_for(rel, by_path)
            if i is None:
                continue
            keep([i], "a held-out measurement in the ledger")
            folder = i.rsplit("/", 1)[0]
            baseline = [e["id"] for e in entries.values()
                        if str(e["id"]).startswith(folder + "/") and i in
                        _named_inputs(e, by_path) and _args(e)[:1] == ["compare"]]
            keep(baseline, f"the baseline comparison of the held-out measurement {i}")
    siblings: dict[str, list[str]] = {}
    for i, e in entries.items():
        key = _command_key(e)
        if key is not None:
            siblings.setdefault(key, []).append(i)
    while todo:
        i = todo.pop()
        e = entries[i]
        if i in closed:  # a run's config and frozen source: kept, not what chose them
            keep(_named_inputs(e, by_path), f"an input of {i}",
                 run_needs=e.get("type") in RUN_TYPES)
        key = _command_key(e)
        if key is not None:
            keep([s for s in siblings[key] if s != i and _written_together(e, entries[s])],
                 f"written by the command that made {i}", run_needs=i not in closed)
    out.archive = sorted(i for i in entries if i not in out.keep)
    out.models_keep = needed_models(root, default_models)
    out.models_archive = [m for m in shipped_dirs(root) if m not in out.models_keep]
    return out


def _args(entry: Mapping[str, Any]) -> list[str]:
    """The arguments after ``engram-eval`` of an entry's command (empty if it is not one)."""
    cmd = entry.get("command")
    if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
        return []
    for k, a in enumerate(cmd):
        if Path(a).name == "engram-eval":
            return list(cmd[k + 1:])
        if a == "-m" and k + 1 < len(cmd) and cmd[k + 1].startswith("engram_eval"):
            return list(cmd[k + 2:])
    return []


def read_archived_models(root: Path) -> dict[str, dict[str, Any]]:
    """The package's index of archived models (name -> ``at``, ``path``); empty if none."""
    p = root / ARCHIVED_MODELS
    if not p.is_file():
        return {}
    doc = json.loads(p.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("kind") != ARCHIVED_MODELS_KIND:
        raise ConfigError(f"{p}: not an {ARCHIVED_MODELS_KIND} file")
    return dict(doc.get("models") or {})


def archived_models_index(archive: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The index of archived models written into the package, from the catalogue's archive."""
    models = {str(a["id"]).removeprefix(MODEL_PREFIX): {"at": a["at"],
                                                         "path": str(Path(a["path"]).parent)}
              for a in archive if str(a["id"]).startswith(MODEL_PREFIX)}
    return {"kind": ARCHIVED_MODELS_KIND,
            "note": "models that left the tree under the retention rule "
                    "(engram_eval/provenance/retention.py); each lives in git history at the "
                    "commit named",
            "models": dict(sorted(models.items()))}


def applies(root: str | Path) -> bool:
    """Whether the rule's :data:`CLAIMS` are about the checkout at ``root``: the package's own
    repository (it holds this module). A results tree elsewhere (a test's, a user's own
    publication) names no claims, and ``catalog --check`` holds it to the catalogue only."""
    return (Path(root) / "engram_eval" / "provenance" / "retention.py").is_file()


def problems(root: str | Path, catalog: Mapping[str, Any], default_models: Iterable[str],
             claims: Iterable[Claim] | None = None) -> list[str]:
    """Where the tree breaks the rule: a kept-by-rule entry archived, an entry in the tree no
    claim keeps, a shipped model no default needs, a needed model absent, and the package's
    index of archived models out of step with the catalogue."""
    root = Path(root)
    p = plan(root, catalog, default_models, claims)
    out: list[str] = []
    archived = {a["id"] for a in catalog.get("archive", [])}
    for i in sorted(archived & set(p.keep)):
        out.append(f"{i}: archived, but the retention rule keeps it ({'; '.join(p.keep[i])})")
    for e in catalog["entries"]:
        if e["id"] not in p.keep:
            out.append(f"{e['path']}: in the tree, but no current claim keeps it (archive it: "
                       "engram-eval catalog --retain --apply)")
    for m in p.models_archive:
        out.append(f"{MODELS / m}: shipped, but no current default needs it (archive it: "
                   "engram-eval catalog --retain --apply)")
    shipped = set(shipped_dirs(root))
    for m, why in p.models_keep.items():
        if m not in shipped:
            out.append(f"{MODELS / m}: absent, but the tree must keep it ({why})")
    want = archived_models_index(catalog.get("archive", []))["models"]
    if read_archived_models(root) != want:
        out.append(f"{ARCHIVED_MODELS}: does not list the catalogue's archived models "
                   f"({', '.join(sorted(want)) or 'none'}); rewrite it with engram-eval "
                   "catalog --retain --apply")
    return out


def archive_models(root: Path, names: Iterable[str]) -> list[dict[str, Any]]:
    """Catalogue archive entries for the shipped models ``names``, each naming the commit
    (HEAD) that holds its files; the directories are removed once git holds every file byte
    for byte (commit the removal next)."""
    import hashlib

    from engram_eval.provenance.catalog import git_blob, head_commit

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    head = head_commit(root)
    names = list(names)
    entries: list[dict[str, Any]] = []
    remove: list[Path] = []
    for name in names:
        d = root / MODELS / name
        files: dict[str, str] = {}
        for f in sorted(q for q in d.rglob("*") if q.is_file()):
            rel = f.relative_to(root).as_posix()
            blob = git_blob(root, head, rel)
            if blob is None or sha(blob) != sha(f.read_bytes()):
                raise ConfigError(f"{rel}: not committed as it is in the tree; commit it "
                                  "before archiving (git must hold the file byte for byte)")
            files[f.relative_to(d).as_posix()] = sha(blob)
            remove.append(f)
        card = (MODELS / name / "card.json").as_posix()
        entries.append({"id": MODEL_PREFIX + name, "path": card, "sha256": files["card.json"],
                        "type": "model", "command": None, "inputs": {}, "role": "model",
                        "commit": head, "sections": [], "files": files, "at": head})
    for f in remove:
        f.unlink()
    for name in names:
        for sub in sorted((root / MODELS / name).rglob("*"), reverse=True):
            if sub.is_dir():
                sub.rmdir()
        (root / MODELS / name).rmdir()
    return entries


def report(p: Plan, catalog: Mapping[str, Any], root: Path) -> list[str]:
    """Lines for ``engram-eval catalog --retain``: each kept entry with its reasons, what would
    be archived, the models, and the bytes the tree would hold in results/."""
    def size(e: Mapping[str, Any]) -> int:
        from engram_eval.provenance.catalog import companions

        return sum((root / q).stat().st_size for q in [e["path"], *companions(e["path"])]
                   if (root / q).is_file())

    in_tree = {e["id"]: e for e in catalog["entries"]}
    lines = [f"keep {i}: {'; '.join(r)}" for i, r in sorted(p.keep.items())]
    lines += [f"archive {i}" for i in p.archive if i in in_tree]
    lines += [f"keep model {m}: {why}" for m, why in sorted(p.models_keep.items())]
    lines += [f"archive model {m}" for m in p.models_archive]
    kept = sum(size(e) for i, e in in_tree.items() if i in p.keep)
    moved = sum(size(e) for i, e in in_tree.items() if i not in p.keep)
    models = sum(f.stat().st_size for m in p.models_keep
                 for f in (root / MODELS / m).rglob("*") if f.is_file())
    lines.append(f"{len(p.keep)} entries kept ({kept / 1e6:.1f} MB in the tree), "
                 f"{sum(1 for i in in_tree if i not in p.keep)} to archive ({moved / 1e6:.1f} MB), "
                 f"{len(p.models_keep)} model(s) kept ({models / 1e6:.1f} MB), "
                 f"{len(p.models_archive)} to archive")
    return lines


def apply(root: str | Path, catalog: Mapping[str, Any], p: Plan) -> dict[str, Any]:
    """``catalog`` with every entry in the tree that ``p`` does not keep, and every shipped
    model it archives, moved to the archive (:func:`engram_eval.provenance.catalog.archive`:
    files removed once git holds them byte for byte), and the package's index of archived
    models (:data:`ARCHIVED_MODELS`) rewritten from it. Commit the removal, the catalogue and
    the index next."""
    from engram_eval.io import atomic_write
    from engram_eval.provenance.catalog import archive

    root = Path(root)
    in_tree = {e["id"] for e in catalog["entries"]}
    moving = [i for i in p.archive if i in in_tree]
    out = archive(root, catalog, moving) if moving else dict(catalog)
    back = [a for a in out.get("archive", []) if a["id"] in p.keep]
    if back:
        out = restore(root, out, back)
    if p.models_archive:
        out = {**out, "archive": [*out.get("archive", []),
                                  *archive_models(root, p.models_archive)]}
    index = archived_models_index(out.get("archive", []))
    if index["models"] or (root / ARCHIVED_MODELS).is_file():
        atomic_write(root / ARCHIVED_MODELS, json.dumps(index, indent=2) + "\n")
    return out


def restore(root: Path, catalog: Mapping[str, Any], entries: Iterable[Mapping[str, Any]]
            ) -> dict[str, Any]:
    """``catalog`` with the archived ``entries`` back in the tree: each file and its
    companions written from git history at the entry's ``at`` (its sha256 checked), the entry
    listed again as it was catalogued. Its ``commit`` (the code that made it) must then be
    named in :data:`engram_eval.provenance.catalog.SOURCES_AT`, since git now names the
    restoring commit as the one that added it (``catalog --check`` says so)."""
    import hashlib

    from engram_eval.io import atomic_write
    from engram_eval.provenance.catalog import companions, git_blob

    entries = list(entries)
    for e in entries:
        for rel in [e["path"], *companions(e["path"])]:
            blob = git_blob(root, str(e["at"]), rel)
            if blob is None:
                if rel == e["path"]:
                    raise ConfigError(f"{rel}: archived at {e['at']}, but git history has no "
                                      "such file there")
                continue
            if rel == e["path"] and hashlib.sha256(blob).hexdigest() != e.get("sha256"):
                raise ConfigError(f"{rel}: archived at {e['at']} with another sha256 than the "
                                  "catalogue's")
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            atomic_write(root / rel, blob)
    ids = {e["id"] for e in entries}
    back = [{k: v for k, v in e.items() if k != "at"} for e in entries]
    return {**catalog, "entries": sorted([*catalog["entries"], *back], key=lambda e: e["path"]),
            "archive": [a for a in catalog.get("archive", []) if a["id"] not in ids]}
