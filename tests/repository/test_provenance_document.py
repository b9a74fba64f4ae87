"""PROVENANCE.md as a reference (issue 46, point 3) and HISTORY.md beside it (fast; reads
text, the catalogue and the published files' JSON):

* at most 1,000 lines, none over 200 characters;
* every generated block current (what ``engram-eval catalog --tables`` would write), and no
  figure typed by hand outside them;
* every catalogue id and ``results/`` path it names resolves in the catalogue (kept or
  archived); HISTORY.md's ``results/`` paths too;
* one section per results folder; the section anchors others cite (§1 … §25, §6b, §10b, the
  ledger, the file list) present in both documents under the same numbers, and every link
  into either document lands on an anchor.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_docs_paths import _expand

from engram_eval.cli.audit import table_sources
from engram_eval.provenance import catalog as C
from engram_eval.provenance import tables as T

ROOT = Path(__file__).resolve().parents[2]
PROVENANCE = ROOT / "PROVENANCE.md"
HISTORY = ROOT / "HISTORY.md"
MAX_LINES = 1000
MAX_WIDTH = 200
#: A figure as the generator prints one (3 or more decimals): typed by hand it would go stale.
TYPED_FIGURE = re.compile(r"(?<![\w.])[+-]?\d*\.\d{3,}(?![\w.])")


@pytest.fixture(scope="module")
def catalog() -> dict:
    return C.load(ROOT / C.CATALOG)


def _text(doc: Path) -> str:
    return doc.read_text(encoding="utf-8")


def test_provenance_is_short_and_narrow() -> None:
    lines = _text(PROVENANCE).splitlines()
    assert len(lines) <= MAX_LINES, f"PROVENANCE.md has {len(lines)} lines (at most {MAX_LINES})"
    wide = [(i, len(line)) for i, line in enumerate(lines, 1) if len(line) > MAX_WIDTH]
    assert not wide, f"PROVENANCE.md lines over {MAX_WIDTH} characters (line, length): {wide}"


def test_every_generated_block_is_current(catalog: dict) -> None:
    text = _text(PROVENANCE)
    assert len(T.blocks(text)) > 0
    problems = T.stale(text, table_sources(ROOT, catalog))
    assert not problems, "\n".join(problems)


def test_no_figure_is_typed_by_hand() -> None:
    typed = [(n, line) for n, line in T.outside_blocks(_text(PROVENANCE))
             if TYPED_FIGURE.search(line)]
    assert not typed, f"figures outside the generated blocks (read them from their file): {typed}"


def _resolver(catalog: dict) -> tuple[set[str], set[str]]:
    """Every id and path the catalogue resolves (kept or archived, with companions and the
    folders above them), and the results folders it knows."""
    known: set[str] = {C.CATALOG.as_posix()}
    for e in [*catalog["entries"], *catalog.get("archive", [])]:
        known.add(e["id"])
        for path in (e["path"], *C.companions(e["path"])):
            known.add(path)
            known.add(path.removeprefix("results/"))
            parts = path.split("/")
            known.update("/".join(parts[:i]) for i in range(1, len(parts)))
            known.update("/".join(parts[1:i]) for i in range(2, len(parts)))
    folders = {e["id"].split("/", 1)[0] for e in [*catalog["entries"], *catalog.get("archive", [])]
               if e["path"].startswith("results/") and "/" in e["id"]}
    return known, folders


def _named(text: str, folders: set[str], bare: bool) -> set[str]:
    """Backticked words that name a published file: ``results/…`` paths, and (``bare``)
    catalogue ids (``FOLDER/NAME``, FOLDER a results folder); patterns are skipped."""
    out = set()
    for span in re.findall(r"`([^`\n]+)`", text):
        for word in span.split():
            word = word.rstrip(".,:;)")
            head = word.split("/", 1)[0]
            if not (word.startswith("results/") or (bare and "/" in word and head in folders)):
                continue
            if re.search(r"[*$<>]|\{[^,}]*\}", word) or word.endswith("…"):
                continue
            out.update(_expand(word))
    return out


def test_every_id_and_results_path_resolves_in_the_catalogue(catalog: dict) -> None:
    known, folders = _resolver(catalog)
    named = _named(_text(PROVENANCE), folders, bare=True)
    assert len(named) > 100  # the tables name every published file
    missing = sorted(w for w in named if w.rstrip("/") not in known)
    assert not missing, f"PROVENANCE.md names ids/paths the catalogue does not hold: {missing}"
    history = _named(_text(HISTORY), folders, bare=False)
    gone = sorted(w for w in history if w.rstrip("/") not in known
                  and not (ROOT / w).exists())
    assert not gone, f"HISTORY.md names results paths neither kept nor archived: {gone}"


def _anchors(text: str) -> set[str]:
    return set(re.findall(r'<a id="([^"]+)"></a>', text))


def test_sections_keep_their_numbers_and_every_folder_has_one(catalog: dict) -> None:
    prov, hist = _text(PROVENANCE), _text(HISTORY)
    numbers = [*(str(i) for i in range(1, 26)), "6b", "10b"]
    for n in numbers:
        for name, text in (("PROVENANCE.md", prov), ("HISTORY.md", hist)):
            assert f'<a id="s{n}"></a>' in text, f"{name}: anchor s{n} is missing"
            assert re.search(rf"^## {n}\. ", text, re.M), f"{name}: no heading for §{n}"
    for anchor in ("ledger", "files", "verify", "reproduce", "data", "carries"):
        assert anchor in _anchors(prov) and anchor in _anchors(hist), anchor
    assert "defaults" in _anchors(prov)
    sections = C.folder_sections(PROVENANCE)
    folders = {e["id"].split("/", 1)[0] for e in catalog["entries"] if "/" in e["id"]}
    assert not folders - set(sections), f"results folders without a section: " \
                                        f"{sorted(folders - set(sections))}"


def test_every_link_lands_on_an_anchor() -> None:
    docs = {"PROVENANCE.md": _text(PROVENANCE), "HISTORY.md": _text(HISTORY)}
    anchors = {name: _anchors(text) for name, text in docs.items()}
    broken = []
    for name, text in docs.items():
        for target, anchor in re.findall(r"\]\(((?:PROVENANCE|HISTORY)\.md)?#([\w-]+)\)", text):
            if anchor not in anchors[target or name]:
                broken.append(f"{name} -> {target or name}#{anchor}")
    assert not broken, f"links to no anchor: {sorted(set(broken))}"
