"""PROVENANCE.md's generated blocks: every number the document states, read from the catalogue
and the published files (issue 46, point 3).

A block is the lines between a marker and its end::

    <!-- generated: KIND ARG ... -->
    (lines written by :func:`render`; never edited by hand)
    <!-- end generated -->

The marker says what to read; ``engram-eval catalog --tables`` rewrites every block from the
catalogue (``results/catalog.yaml``) and the files, and ``engram-eval catalog --check`` fails
while a block differs from what it would write (:func:`stale`). Kinds:

* ``fig ID [LABEL=]KEY ...``: one published result's figures, each KEY read from its file (a
  run: ``PROTOCOL:METRIC`` in its summary, ``PROTOCOL:n`` its denominator; any other JSON
  file: a dotted path, ``summary.auroc``, ``candidates[name=@chosen].objective``; a paired
  comparison's overall row: ``cmp:METRIC``, A -> B with the difference and its interval),
  with its role (and the file's own held-out label), data part (name and sha256) and commit;
  its id is what ``engram-eval reproduce ID`` takes. An archived entry is read from the
  commit the catalogue's archive names, so archiving an entry changes generated lines only.
* ``setting SCOPE FIELD ...``: the package defaults as the code holds them (``chat``,
  ``people``: the retrieval settings of each chat structure; ``production``: production
  search's), passed in by the caller (this layer imports no settings).
* ``files``: the catalogue as tables: per results folder, its entries grouped by role,
  command (or recipe) and commit; then the archive, by the commit that holds each file.
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError
from engram_eval.provenance import catalog as C

#: The document the blocks live in, in a checkout.
DOCUMENT = Path("PROVENANCE.md")
BEGIN = "<!-- generated: "
CLOSE = " -->"
END = "<!-- end generated -->"
#: Width generated prose is wrapped at (the documents' limit is 200 characters a line).
WIDTH = 160
FILES_WIDTH = 196


@dataclass(frozen=True)
class Block:
    """One generated block: its marker's spec, the line numbers (0-based) of its marker's last
    line and of its end, the lines between them as written, and the marker's first line."""

    spec: str
    begin: int
    end: int
    body: list[str]
    start: int


def blocks(text: str, where: str = str(DOCUMENT)) -> list[Block]:
    """Every generated block of ``text``; an unclosed or nested marker is an error naming
    ``where`` and its line."""
    out: list[Block] = []
    lines = text.splitlines()
    open_at: int | None = None
    spec = ""
    marker: list[str] | None = None  # a marker's lines while it spans several
    start = 0
    for i, line in enumerate(lines):
        if marker is not None:
            marker.append(line.strip())
            if line.endswith(CLOSE):
                open_at, spec, marker = i, " ".join(marker)[:-len(CLOSE)].strip(), None
            continue
        if line.startswith(BEGIN):
            if open_at is not None:
                raise ConfigError(f"{where}:{i + 1}: a generated block opens inside the one "
                                  f"opened at line {open_at + 1}")
            start = i
            if line.endswith(CLOSE):
                open_at, spec = i, line[len(BEGIN):-len(CLOSE)].strip()
            else:
                marker = [line[len(BEGIN):]]
        elif line == END:
            if open_at is None:
                raise ConfigError(f"{where}:{i + 1}: {END} without its marker")
            out.append(Block(spec, open_at, i, lines[open_at + 1:i], start))
            open_at = None
    if marker is not None:
        raise ConfigError(f"{where}: a generated block's marker is never closed ({CLOSE!r})")
    if open_at is not None:
        raise ConfigError(f"{where}:{start + 1}: generated block '{spec}' is never closed "
                          f"({END})")
    return out


class Sources:
    """What the blocks read: the checkout, its catalogue, and the defaults the code holds."""

    def __init__(self, root: str | Path, catalog: Mapping[str, Any],
                 settings: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.root = Path(root)
        self.catalog = catalog
        self.settings = settings or {}
        self._json: dict[str, Any] = {}

    def entry(self, entry_id: str) -> dict[str, Any]:
        return C.find(self.catalog, entry_id)

    def read(self, entry: Mapping[str, Any], path: str) -> bytes:
        """The bytes of ``path`` (the entry's file or a companion): from the tree, or for an
        archived entry from the commit that holds it."""
        if "at" in entry:
            blob = C.git_blob(self.root, str(entry["at"]), path)
            if blob is None:
                raise ConfigError(f"{path}: archived at {entry['at']}, but git history has no "
                                  "such file there")
            return blob
        p = self.root / path
        try:
            return p.read_bytes()
        except OSError as e:
            raise ConfigError(f"{p}: cannot read it ({e.strerror})") from None

    def document(self, entry: Mapping[str, Any]) -> Any:
        """The JSON an entry's figures are read from: a run's summary, else the file."""
        path = str(entry["path"])
        if entry.get("type") == "run":
            path += ".summary.json"
        if path not in self._json:
            try:
                self._json[path] = json.loads(self.read(entry, path))
            except ValueError as e:
                raise ConfigError(f"{path}: not JSON ({e}); a figure reads a run's summary or "
                                  "a JSON file") from None
        return self._json[path]


def _value(doc: Any, key: str, where: str) -> Any:
    """``key`` in ``doc``: ``PROTOCOL:METRIC`` / ``PROTOCOL:n`` (a run's summary) or a dotted
    path, whose parts may be a list index (``ci.0``), pick a list's element by a field
    (``candidates[name=a0.8]``; ``candidates[name=@chosen]``: the value of the field ``chosen``
    beside the list) or a mapping's entry named by a field beside it (``candidates[@chosen]``)."""
    if ":" in key:
        protocol, metric = key.split(":", 1)
        path = (["protocols", protocol, metric] if metric in ("n", "n_skipped")
                else ["protocols", protocol, "metrics", metric])
    else:
        path = re.findall(r"[^.\[]+(?:\[[^\]]*\])?", key)
    node = doc
    for part in path:
        keyed = re.fullmatch(r"(?P<key>[^\[]+)\[@(?P<field>[^\]=]+)\]", part)
        pick = re.fullmatch(r"(?P<key>[^\[]+)\[(?P<field>[^=\]]+)=(?P<value>[^\]]*)\]", part)
        if keyed and isinstance(node, Mapping):  # candidates[@chosen]: by the node's field
            inner = node.get(keyed.group("key"))
            name = node.get(keyed.group("field"))
            if not isinstance(inner, Mapping) or str(name) not in inner:
                raise ConfigError(f"{where}: {key!r}: no {keyed.group('key')!r} entry named by "
                                  f"{keyed.group('field')} ({name!r})")
            node = inner[str(name)]
        elif pick and isinstance(node, Mapping):  # candidates[name=a0.8], [name=@chosen]
            want: Any = pick.group("value")
            if want.startswith("@"):
                want = node.get(want[1:])
            found = [x for x in node.get(pick.group("key")) or [] if isinstance(x, Mapping)
                     and str(x.get(pick.group("field"))) == str(want)]
            if len(found) != 1:
                raise ConfigError(f"{where}: {key!r}: {len(found)} elements of "
                                  f"{pick.group('key')!r} with {pick.group('field')} {want!r}")
            node = found[0]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            raise ConfigError(f"{where}: no field {key!r} (missing {part!r})")
    return node


def fmt(value: Any) -> str:
    """A figure as the document prints it: floats to 4 decimals."""
    if isinstance(value, bool) or value is None:
        return str(value).lower() if isinstance(value, bool) else "none"
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, (int, str)):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", " "))


def _wrap(text: str, width: int = WIDTH, indent: str = "  ") -> list[str]:
    """``text`` wrapped at ``width``, never inside a backticked span."""
    glue = "\x00"
    protected = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", glue), text)
    lines = textwrap.wrap(protected, width=width, subsequent_indent=indent,
                          break_long_words=False, break_on_hyphens=False)
    return [line.replace(glue, " ") for line in lines]


def _data(entry: Mapping[str, Any], doc: Any) -> tuple[str, str] | None:
    """The data part a figure is on: the file's own record (``dataset`` / ``fixture`` with name
    and sha256; a report knows what it measured), else the catalogue entry's input."""
    for key in ("dataset", "fixture"):
        own = doc.get(key) if isinstance(doc, Mapping) else None
        if isinstance(own, Mapping) and own.get("name") and own.get("sha256"):
            return str(own["name"]), str(own["sha256"])
    data = (entry.get("inputs") or {}).get("data") or {}
    if data.get("name") and data.get("sha256"):
        return str(data["name"]), str(data["sha256"])
    return None


def render_fig(src: Sources, args: list[str]) -> list[str]:
    if not args:
        raise ConfigError("fig: needs an entry id and at least one field")
    entry = src.entry(args[0])
    doc = src.document(entry)
    figures = []
    for arg in args[1:]:
        if arg.startswith("cmp:"):  # a paired comparison's overall row: A -> B, delta [CI]
            metric = arg[4:]
            row = _value(doc, f"groups.overall.metrics.{metric}", str(entry["path"]))
            try:
                lo, hi = row["ci"]
                figures.append(f"{metric} {fmt(row['a'])} -> {fmt(row['b'])} "
                               f"({row['delta']:+.4f} [{lo:+.4f}, {hi:+.4f}])")
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"{entry['path']}: {metric}: not a paired comparison's "
                                  "row (a, b, delta, ci)") from None
            continue
        named = re.fullmatch(r"(?P<label>[\w@-]+)=(?P<key>.+)", arg)
        label, key = (named.group("label"), named.group("key")) if named else ("", arg)
        label = label or key.split(":")[-1].split(".")[-1]
        figures.append(f"{label} {fmt(_value(doc, key, str(entry['path'])))}")
    facts = [str(entry.get("role"))]
    label = doc.get("label") if isinstance(doc, Mapping) else None
    if isinstance(label, str) and label != facts[0]:  # a measurement's held-out label
        facts[0] += f", {label}"
    if any(a.startswith("cmp:") for a in args[1:]) and isinstance(doc, Mapping):
        names = [str((doc.get(k) or {}).get("label") or "?").removesuffix(".gz")
                 .removesuffix(".jsonl") for k in ("a", "b")]
        facts.append(f"A `{names[0]}`, B `{names[1]}`")
    data = _data(entry, doc)
    if data:
        facts.append(f"`{data[0]}` `{data[1][:8]}…`")
    if entry.get("commit"):
        facts.append(f"at `{entry['commit']}`")
    if "at" in entry:
        facts.append(f"archived at `{str(entry['at'])[:7]}`")
    text = f"- `{entry['id']}`: {', '.join(figures) or 'no figures'} ({'; '.join(facts)})"
    return _wrap(text)


def render_setting(src: Sources, args: list[str]) -> list[str]:
    if len(args) < 2:
        raise ConfigError("setting: needs a scope (chat, people, production) and fields")
    scope = src.settings.get(args[0])
    if scope is None:
        raise ConfigError(f"setting: no scope {args[0]!r} (known: "
                          f"{', '.join(sorted(src.settings)) or 'none given'})")
    parts = []
    for field in args[1:]:
        if field not in scope:
            raise ConfigError(f"setting {args[0]}: no field {field!r}")
        value = scope[field]  # a setting as the code holds it (0.25, not 0.2500)
        shown = fmt(value) if isinstance(value, bool) or not isinstance(value, (int, float, str)) \
            else str(value)
        parts.append(f"`{field}` `{shown}`")
    return _wrap(f"- {args[0]}: " + ", ".join(parts))


def command_head(entry: Mapping[str, Any]) -> str:
    """What made an entry, in a few words: its recipe where the catalogue names one, else its
    command's program and subcommand (``engram-eval run``), several commands counted."""
    if entry.get("recipe"):
        return str(entry["recipe"]) if isinstance(entry["recipe"], str) else "recipe"
    cmd = entry.get("command")
    if not cmd:
        return "none recorded"
    if isinstance(cmd, list) and cmd and isinstance(cmd[0], list):
        return f"{len(cmd)} commands"
    words = shlex.split(cmd) if isinstance(cmd, str) else [str(w) for w in cmd]
    if not words:
        return "none recorded"
    prog = words[0].rsplit("/", 1)[-1]
    if prog.startswith("python"):
        words = words[1:]
        if words[:1] == ["-m"]:
            return f"python -m {words[1]}" if len(words) > 1 else "python -m"
        prog = words[0] if words else prog
    if prog == "__main__.py":  # python -m PACKAGE, as the process recorded its argv
        package = words[0].replace("\\", "/").rsplit("/", 2)[-2] if "/" in words[0] else "?"
        return (f"engram-eval {words[1]}" if package == "engram_eval" and len(words) > 1
                else f"python -m {package}")
    if (prog == "engram-eval" or words[0].endswith("engram_eval/cli/main.py")) and len(words) > 1:
        return f"engram-eval {words[1]}"
    if prog.endswith(".py") and words and not words[0].startswith("/"):
        return words[0]  # a script by its path in the checkout
    return prog


def folded(ids: Iterable[str]) -> list[str]:
    """``ids`` with the files of one stem folded into a brace list (``a.json``, ``a.png`` ->
    ``a.{json,png}``), in the order of each stem's first id; an id without an extension (a
    run's) stays as it is."""
    stems: dict[str, list[str]] = {}
    for i in ids:
        stem, dot, ext = i.rpartition(".")
        if not dot or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", ext):  # a0.5 is no extension
            stems.setdefault(f"\0{i}", [])
            continue
        stems.setdefault(stem, []).append(ext)
    out = []
    for stem, exts in stems.items():
        out.append(stem[1:] if not exts else f"{stem}.{exts[0]}" if len(exts) == 1
                   else f"{stem}.{{{','.join(exts)}}}")
    return out


def render_files(src: Sources, args: list[str]) -> list[str]:
    entries = src.catalog["entries"]
    by_folder: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        by_folder.setdefault(e["id"].split("/", 1)[0] if "/" in e["id"] else "", []).append(e)
    out = [f"{len(entries)} published files in {len(by_folder)} folders, "
           f"{len(src.catalog.get('archive', []))} archived; each line: role · command "
           "(or recipe) · commit (count): ids.", ""]
    for folder in sorted(by_folder):
        items = by_folder[folder]
        sections = sorted({s for e in items for s in e.get("sections") or []},
                          key=lambda s: (len(s), s))
        where = ", ".join(f"[§{s}](#s{s})" for s in sections) or "no section"
        count = f"{len(items)} file{'s' if len(items) != 1 else ''}"
        out.append(f"- **`results/{folder}/`** ({where}; {count})" if folder
                   else f"- **`results/`** ({count})")
        groups: dict[tuple[str, str, str], list[str]] = {}
        for e in items:
            key = (str(e.get("role")), command_head(e), str(e.get("commit") or "uncommitted"))
            groups.setdefault(key, []).append(str(e["id"]))
        for (role, head, commit), ids in sorted(groups.items()):
            text = (f"  - {role} · `{head}` · `{commit}` ({len(ids)}): "
                    + ", ".join(f"`{i}`" for i in folded(ids)))
            out += _wrap(text, FILES_WIDTH, indent="    ")
    out.append("")
    archived = src.catalog.get("archive", [])
    out.append(f"**Archived** ({len(archived)} files; in git history at the commit named, "
               "`engram-eval reproduce ID` fetches them)")
    at: dict[str, list[str]] = {}
    for a in archived:
        at.setdefault(str(a["at"])[:7], []).append(str(a["id"]))
    for commit, ids in sorted(at.items()):
        out += _wrap(f"- at `{commit}` ({len(ids)}): " + ", ".join(f"`{i}`" for i in folded(ids)),
                     FILES_WIDTH)
    if not archived:
        out.append("- none")
    return out


RENDERERS = {"fig": render_fig, "setting": render_setting, "files": render_files}


def render(src: Sources, spec: str) -> list[str]:
    """The lines of the block ``spec`` (its marker's text after ``generated:``)."""
    kind, *args = spec.split()
    if kind not in RENDERERS:
        raise ConfigError(f"generated block '{spec}': unknown kind {kind!r} (known: "
                          f"{', '.join(RENDERERS)})")
    return RENDERERS[kind](src, args)


def rewrite(text: str, src: Sources, where: str = str(DOCUMENT)) -> str:
    """``text`` with every generated block rewritten; the rest kept byte for byte."""
    lines = text.splitlines()
    out: list[str] = []
    last = 0
    for b in blocks(text, where):
        out += lines[last:b.begin + 1]
        try:
            out += render(src, b.spec)
        except ConfigError as e:
            raise ConfigError(f"{where}:{b.start + 1}: {e}") from None
        out.append(END)
        last = b.end + 1
    out += lines[last:]
    return "\n".join(out) + ("\n" if text.endswith("\n") or not text else "")


def stale(text: str, src: Sources, where: str = str(DOCUMENT)) -> list[str]:
    """The blocks of ``text`` that differ from what :func:`rewrite` would write (each named
    by its line and marker); empty when every block is current."""
    problems = []
    for b in blocks(text, where):
        try:
            fresh = render(src, b.spec)
        except ConfigError as e:
            problems.append(f"{where}:{b.start + 1}: {e}")
            continue
        if fresh != b.body:
            problems.append(f"{where}:{b.start + 1}: generated block '{b.spec}' is stale "
                            "(engram-eval catalog --tables rewrites it)")
    return problems


def outside_blocks(text: str) -> Iterable[tuple[int, str]]:
    """``(line number, line)`` of every line of ``text`` outside the generated blocks (1-based):
    what a person wrote."""
    inside: set[int] = set()
    for b in blocks(text):
        inside.update(range(b.start, b.end + 1))
    return ((i + 1, line) for i, line in enumerate(text.splitlines()) if i not in inside)
