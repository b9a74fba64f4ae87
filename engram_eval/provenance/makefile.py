"""The catalogue as a Makefile: GNU Make orders the publications (``engram-eval catalog
--makefile`` writes ``Makefile`` at the checkout's root from ``results/catalog.yaml``).

* every **planned** entry is a target (its file under ``results/``), its prerequisites the
  files of the entries it reads (``inputs.entries``), its recipe ``engram-eval publish ID``.
  Entries that share a command (a comparison's ``.json`` and ``.png``), and the held-out runs
  planned on one data part (every manifest frozen before any of them runs), are one grouped
  target (``&:``) published by one ``publish`` call;
* every **published** file is a target whose recipe only refuses (a published file is never
  made again: restore an absent one from git), and the published entries' inputs are written
  as their prerequisites, so the file shows what each result was made from;
* prerequisites are order-only (``|``): Make makes what is absent, in order, and never
  re-makes a file because another is newer (a checkout's file times say nothing).

``make planned DATA="FOLDER ..."`` publishes every planned entry; ``make results/X`` one and,
first, the planned entries it reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engram_eval.errors import ConfigError

#: The Makefile's place in a checkout (its root: ``make TARGET`` there).
MAKEFILE = "Makefile"
#: Planned roles published by the frozen protocol (as engram_eval.provenance.publish).
_FROZEN = ("held-out measurement", "regression check")

HEAD = """\
# The publications as Make targets: written by `engram-eval catalog --makefile` from
# results/catalog.yaml (engram_eval/provenance/makefile.py); do not edit, plan an entry there.
#   make planned DATA="FOLDER ..."   publish every planned entry, inputs first
#   make results/PATH DATA=...        publish one planned entry (and the planned ones it reads)
# Recipes are `engram-eval publish ID` (made at HEAD, verified, moved into results/, catalogued);
# prerequisites are order-only: a published file is never made again.
ENGRAM_EVAL ?= .venv/bin/engram-eval
DATA ?=
PUBLISH = $(ENGRAM_EVAL) publish $(addprefix --data ,$(DATA))

.PHONY: planned
"""


def _owner(path: str, paths: set[str]) -> str | None:
    """The catalogued file ``path`` belongs to (itself, or the file of a companion)."""
    for p in (path, path.removesuffix(".metadata.json"), path.removesuffix(".summary.json")):
        if p in paths:
            return p
    return None


def _safe(path: str) -> str:
    if any(c in path for c in " \t:#$%\\;=|&*?[]"):
        raise ConfigError(f"{path}: a catalogued path Make cannot name (a space or one of "
                          ":#$%\\;=|&*?[])")
    return path


def _groups(planned: list[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Planned entries published together: by command, and held-out runs by data part."""
    key: dict[str, str] = {}
    for p in planned:
        k = "cmd:" + json.dumps(p.get("command"))
        d = (p.get("inputs") or {}).get("data") or {}
        if p.get("type") == "run" and p.get("role") in _FROZEN and d.get("sha256"):
            k = "heldout:" + str(d["sha256"])
        key[p["id"]] = k
    order: dict[str, list[Mapping[str, Any]]] = {}
    for p in planned:
        order.setdefault(key[p["id"]], []).append(p)
    return list(order.values())


def makefile(catalog: Mapping[str, Any]) -> str:
    """The Makefile of ``catalog`` (module docstring)."""
    entries = catalog.get("entries", [])
    planned = catalog.get("planned", [])
    by_id = {e["id"]: str(e["path"]) for e in [*entries, *planned]}
    paths = set(by_id.values())
    lines = [HEAD.rstrip("\n")]
    targets = [_safe(str(p["path"])) for p in planned]
    lines.append("planned:" + "".join(f" \\\n  {t}" for t in targets))
    lines.append("")
    for group in _groups(planned):
        outs = [_safe(str(p["path"])) for p in group]
        outs += [f"results/{p['id']}.frozen.json" for p in group
                 if p.get("type") == "run" and p.get("role") in _FROZEN]
        deps = sorted({_safe(by_id[d]) for p in group
                       for d in (p.get("inputs") or {}).get("entries") or [] if d in by_id}
                      - set(outs))
        ids = " ".join(str(p["id"]) for p in group)
        lines.append(f"# planned: {ids}")
        lines.append(f"{' '.join(outs)} &:" + (f" | {' '.join(deps)}" if deps else ""))
        lines.append(f"\t$(PUBLISH) {ids}")
        lines.append("")
    lines.append("# published: what each was made from (inputs that are published files)")
    for e in entries:
        deps = sorted({o for f in (e.get("inputs") or {}).get("files") or []
                       if (o := _owner(str(f.get("file")), paths)) and o != e["path"]})
        if deps:
            lines.append(f"{_safe(str(e['path']))}: | {' '.join(map(_safe, deps))}")
    lines.append("")
    lines.append("# published files are never made again: restore an absent one from git")
    lines.append("PUBLISHED =" + "".join(f" \\\n  {_safe(str(e['path']))}" for e in entries))
    lines.append("$(PUBLISHED):")
    lines.append('\t@echo "$@: published (results/catalog.yaml) but absent: restore it with '
                 'git checkout -- $@" >&2; exit 1')
    return "\n".join(lines) + "\n"


def check(text: str, catalog: Mapping[str, Any]) -> str | None:
    """``None`` when ``text`` is the Makefile of ``catalog``, else what to do."""
    return None if text == makefile(catalog) else (
        f"{MAKEFILE} is not the catalogue's: rewrite it with engram-eval catalog --makefile")

