"""Every repository path the documents name exists: README.md, PROVENANCE.md, HISTORY.md and
any results/**/README.md (fast; reads text only). A published file that left the tree resolves
through the catalogue's archive (``results/catalog.yaml``: the commit that holds it), and
HISTORY.md, which tells how every result was made, may also name a file that git history holds
(a script of its time, since replaced).

A *repository path* is a word inside backticks (inline code or a fenced block) whose first
segment is a top-level entry of the repository (``engram_eval/...``, ``scripts/...``,
``results/...``, ``README.md``). Rules, so that the check stays exact:

* brace lists are expanded (``scale.{json,png}`` names two files);
* ``path::test_name`` and ``path:line`` name the file; a module attribute
  (``tests/tiny_models.build_cross_encoder``) names its ``.py`` file;
* a word with a placeholder is a pattern, not a path, and is skipped: ``$``, ``*``, ``<``, a
  brace without a list, a one-character name (``results/x.jsonl``: any output you choose), or
  a name in capitals that does not exist (``results/z/NAME.json``, ``DATA``; an existing
  capitalised file such as ``ABLATIONS.md`` is still checked);
* anything outside the repository is external by rule and never checked: ``../shared/data``,
  ``/tmp/...``, ``~/...``, URLs.
"""

from __future__ import annotations

import functools
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "PROVENANCE.md", ROOT / "HISTORY.md",
               *(ROOT / "results").rglob("README.md")])
TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} - {"__pycache__"}

_FENCE = re.compile(r"^\s*```.*?$(.*?)^\s*```", re.S | re.M)
_INLINE = re.compile(r"`([^`\n]+)`")
_WORD = re.compile(r"(?:\{[^{}\s]*\}|[^\s'\"(),;=\[\]])+")
_PATTERN = re.compile(r"[$*<>{}]")
_CAPS = re.compile(r"[A-Z][A-Z0-9_]*")


def _placeholder(path: str) -> bool:
    """A pattern or stand-in rather than a named file (see the module docstring)."""
    if _PATTERN.search(path):
        return True
    stems = [s.split(".")[0] for s in path.split("/") if s]
    return any(len(s) == 1 for s in stems) or (
        any(_CAPS.fullmatch(s) for s in stems) and not (ROOT / path).exists()
        and path not in _archived())


def _expand(word: str) -> list[str]:
    """``a{b,c}d`` -> ``abd``, ``acd`` (each brace list); a brace without a comma stays."""
    parts = re.split(r"(\{[^{}]*,[^{}]*\})", word)
    choices = [p[1:-1].split(",") if p.startswith("{") and "," in p else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def named_paths(text: str) -> set[str]:
    """The repository paths named in backticks in ``text`` (see the module docstring)."""
    spans = [m.group(1) for m in _FENCE.finditer(text)]
    spans += _INLINE.findall(_FENCE.sub("", text))
    out: set[str] = set()
    for span in spans:
        for word in _WORD.findall(span):
            word = word.rstrip(".:,`").split("::")[0]
            word = re.sub(r":\d+$", "", word)
            if "/" not in word and word not in TOP:
                continue
            if word.split("/")[0] not in TOP:  # ../shared, /tmp, ~/, http://, a:b
                continue
            for path in _expand(word):
                if _placeholder(path):
                    continue
                out.add(path)
    return out


@functools.cache
def _archived() -> set[str]:
    """Every path the catalogue's archive holds in git history: the files, their companions,
    an archived model's directory and files, and the folders above them."""
    from engram_eval.provenance import catalog as C

    out: set[str] = set()
    for a in C.load(ROOT / C.CATALOG).get("archive", []):
        paths = [a["path"], *C.companions(a["path"])]
        if a.get("type") == "model":
            folder = a["path"].rpartition("/")[0]
            paths += [f"{folder}/{f}" for f in a.get("files") or {}]
        for path in paths:
            out.add(path)
            parts = path.split("/")
            out.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return out


def _in_history() -> set[str]:
    """Every path git history has held (one ``git log``); empty without history."""
    import subprocess

    done = subprocess.run(["git", "-C", str(ROOT), "log", "--all", "--format=", "--name-only"],
                          capture_output=True, text=True, check=False)
    out: set[str] = set()
    for path in done.stdout.splitlines() if done.returncode == 0 else []:
        parts = path.split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def _exists(path: str, elsewhere: set[str] | None = None) -> bool:
    p = ROOT / path
    if p.exists() or path.rstrip("/") in (elsewhere or set()):
        return True
    head, _, attr = path.rpartition(".")  # tests/tiny_models.build_cross_encoder
    return bool(head) and attr.isidentifier() and (ROOT / f"{head}.py").is_file()


def test_the_rule_reads_paths_and_skips_patterns_and_external_paths() -> None:
    text = ("see `results/xy/scale.{json,png}`, `scripts/pub.sh lme|locomo DATA`, "
            "`tests/tt.py::test_x`, `tests/tiny_models.build_cross_encoder`, "
            "`../shared/data/xy.json`, `/tmp/w/ce_tune`, `results/xy/fold*_d*`, "
            "`results/$OUT/yy.json`, `results/xy/{run}.jsonl`, `results/x.jsonl`, "
            "`X.jsonl.gz`, `results/longmemeval_s_dev/ABLATIONS.md`\n"
            "```bash\nscripts/b2.sh results/zz/NAME.json --output results/zz/k5.json\n```\n")
    assert named_paths(text) == {"results/xy/scale.json", "results/xy/scale.png",
                                 "scripts/pub.sh", "tests/tt.py",
                                 "tests/tiny_models.build_cross_encoder", "scripts/b2.sh",
                                 "results/zz/k5.json", "results/longmemeval_s_dev/ABLATIONS.md"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_repository_path_a_document_names_exists(doc: Path) -> None:
    """HISTORY.md, and the generated blocks of PROVENANCE.md (the commands the catalogue
    records), may name what git history holds; the rest must be in the tree or archived."""
    from engram_eval.provenance import tables as T

    text = doc.read_text(encoding="utf-8")
    archived, history = set(_archived()), _in_history()
    written = "\n".join(line for _, line in T.outside_blocks(text))
    generated = "\n".join(line for b in T.blocks(text) for line in b.body)
    if doc.name == "HISTORY.md":
        written, generated = "", text
    missing = sorted({p for p in named_paths(written) if not _exists(p, archived)}
                     | {p for p in named_paths(generated) if not _exists(p, archived | history)})
    assert not missing, f"{doc.relative_to(ROOT)} names paths the repository does not have: " \
                        f"{missing}"
