"""The hashed source lists are generated from the import closure, and cannot go stale.

For each kind of run the import closure within ``engram_eval`` of what it executes is
computed from the source text with ``ast`` -- top-level imports and the lazy ones inside
functions alike; ``if TYPE_CHECKING:`` blocks never run and are skipped; importing
``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` too -- with the package data files
(schemas, calibration, lexicon) a module of it names, less the commented allow-list
:data:`~engram_eval.provenance.sources.NOT_HASHED`.

This file generates the lists (:data:`GENERATED`):
``python tests/provenance/test_source_closure.py`` rewrites the generated table of
:mod:`engram_eval.provenance.sources` and of :mod:`engram_eval.retrieval.sources`, and
:func:`test_the_generated_lists_are_current` fails, showing the difference, when a table is
not what the code gives. They are generated once, here, rather than at run time: computing
the closures costs about 1 s of CPU (parsing ~60 modules 0.2 s, walking them 0.2 s, finding
the data files they name 0.5 s), a tenth of the main job's cold time, on every run. The
other tests check what a run hashes against the closure of what it executes:

* a benchmark run: ``engram_eval.runs.runner`` and ``engram_eval.runs.merge`` plus each
  registered retriever's factory module; hashed: ``run_sources(retriever.source_modules())``;
* a production run: ``engram_eval.production_eval.runner`` and
  ``benchmarks/production_retrieval/run.py`` (with the script's sibling helpers); hashed:
  ``engram_eval.production_eval.runner.SOURCES``.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from pathlib import Path

import pytest

from engram_eval.provenance import sources as S
from engram_eval.retrieval import base
from engram_eval.retrieval import sources as RS
from engram_eval.runs.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "engram_eval"
RUN_ENTRIES = ("engram_eval.runs.runner", "engram_eval.runs.merge")
PRODUCTION_ENTRIES = ("engram_eval.production_eval.runner", "engram_eval.cli.production",
                      "benchmarks/production_retrieval/run.py")
#: Modules that *list* files to hash (they do not read them): not scanned for data files.
LISTS_FILES = ("engram_eval/provenance/sources.py", "engram_eval/retrieval/sources.py")
CACHE = "engram_eval/retrieval/cache.py"


# --------------------------------------------------------------------------- the closure
def module_file(module: str) -> Path | None:
    base_path = ROOT / module.replace(".", "/")
    for p in (base_path / "__init__.py", base_path.with_suffix(".py")):
        if p.is_file():
            return p
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def imported_names(tree: ast.AST, package: str) -> list[str]:
    """Every module name an import statement anywhere in ``tree`` may load (``from a import
    b`` gives ``a`` and ``a.b``: ``b`` may be a submodule), skipping ``if TYPE_CHECKING:``."""
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    visit_one(stmt)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                mod = ".".join(parts + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append(mod)
            out.extend(f"{mod}.{a.name}" for a in node.names)
        else:
            visit(node)

    visit(tree)
    return out


@functools.cache
def _parse(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def closure(entries: Iterable[str]) -> set[str]:
    """Repository-relative paths of every file executed by importing ``entries`` (module
    names, or repository-relative script paths whose sibling ``import x`` of ``x.py`` is
    followed too), within ``engram_eval``."""
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        entry = todo.pop()
        if entry.endswith(".py"):
            path, package, is_script = ROOT / entry, "", True
        else:
            found = module_file(entry)
            if found is None:
                continue
            path, is_script = found, False
            package = entry if path.name == "__init__.py" else entry.rpartition(".")[0]
            parts = entry.split(".")
            todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        rel = path.relative_to(ROOT).as_posix()
        if rel in seen:
            continue
        seen.add(rel)
        for name in imported_names(_parse(path), package):
            top = name.split(".")[0]
            if top == PACKAGE:
                while name and module_file(name) is None:
                    name = name.rpartition(".")[0]
                if name:
                    todo.append(name)
            elif is_script and (path.parent / f"{top}.py").is_file():
                todo.append((path.parent / f"{top}.py").relative_to(ROOT).as_posix())
    return seen


def package_data_files() -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / PACKAGE).rglob("*")
                  if p.is_file() and p.suffix in (".json", ".txt"))


def data_files_named(modules: Iterable[str]) -> set[str]:
    """Package data files (schemas, calibration) that a module names by an exact string
    constant: its full path, a path below the package, or its file name."""
    data = package_data_files()
    out: set[str] = set()
    for rel in modules:
        if rel in LISTS_FILES or not rel.endswith(".py"):
            continue
        for node in ast.walk(_parse(ROOT / rel)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
                s = node.value
                out.update(f for f in data if f == s or f.endswith("/" + s))
    return out


def required(entries: Iterable[str]) -> set[str]:
    mods = closure(entries)
    return mods | data_files_named(mods)


def missing(needed: Iterable[str], hashed: Iterable[str]) -> list[str]:
    """What ``needed`` holds that is neither hashed nor excused in ``NOT_HASHED``."""
    return sorted(set(needed) - set(hashed) - set(S.NOT_HASHED))


# --------------------------------------------------------------------------- the generated lists
RETRIEVAL = "engram_eval/retrieval/"
#: The lists this file generates: file -> (part kept, list name -> (its tag in the file's
#: table, what it is the closure of: module names, or repository-relative scripts)). Part
#: ``None``: the whole closure and the data files it names, less NOT_HASHED (what a kind of run
#: hashes); :data:`RETRIEVAL`: a retriever's own files (the ``engram_eval/retrieval/`` modules
#: of its closure and the data files they name), which the run machinery's list completes.
GENERATED: dict[str, tuple[str | None, dict[str, tuple[str, tuple[str, ...]]]]] = {
    "engram_eval/retrieval/sources.py": (RETRIEVAL, {
        "PIPELINE_SOURCES": ("pipeline", ("engram_eval.retrieval.hybrid",)),
        "SEARCH_SOURCES": ("search", ("engram_eval.production.search",)),
        "FLAT_BM25_SOURCES": ("flat-bm25", ("engram_eval.retrieval.bm25",)),
        "DUMMY_SOURCES": ("dummy", ("engram_eval.retrieval.dummy",)),
        "MEMO_LEXICAL_SOURCES": ("memo-lexical", ("engram_eval.retrieval.memo_lexical",)),
        "SYSTEM_SOURCES": ("system", ("engram_eval.retrieval.systems",
                                      "engram_eval.retrieval.http_system")),
    }),
    "engram_eval/provenance/sources.py": (None, {
        "RUN_CORE_SOURCES": ("run", RUN_ENTRIES),
        "PRODUCTION_CORE_SOURCES": ("production", PRODUCTION_ENTRIES),
        "CONFIDENCE_SOURCES": ("confidence", (*PRODUCTION_ENTRIES,
                                              "benchmarks/production_retrieval/confidence.py")),
        "QA_CONTEXT_SOURCES": ("context", ("engram_eval.qa.context",)),
        "QA_ANSWER_SOURCES": ("answer", ("engram_eval.qa.answer",)),
        "QA_JUDGE_SOURCES": ("judge", ("engram_eval.qa.judge",)),
    }),
}
BEGIN = "# -- generated by tests/provenance/test_source_closure.py"
END = "# -- end of the generated table"


def generated_list(entries: Iterable[str], part: str | None) -> list[str]:
    if part is None:
        files = required(entries)
    else:
        own = {m for m in closure(entries) if m.startswith(part)}
        files = own | data_files_named(own)
    return sorted(files - set(S.NOT_HASHED))


def generated_block(part: str | None, lists: dict[str, tuple[str, tuple[str, ...]]]) -> str:
    """The file's table: every file a list hashes -> the tags of the lists that hash it."""
    import textwrap

    what = ("the import closure of the modules named for it, with the package data files "
            "they name, less NOT_HASHED" if part is None else
            f"the {part} files of the import closure of the module named for it, with the "
            "package data files they name")
    lines = textwrap.wrap(f"{BEGIN} (`python tests/provenance/test_source_closure.py` "
                          f"rewrites this block): every file hashed, and the tags of the lists that hash it; "
                          f"each list is {what}. Do not edit by hand.", 95,
                          subsequent_indent="# ", break_on_hyphens=False)
    tags: dict[str, list[str]] = {}
    for tag, entries in lists.values():
        lines += textwrap.wrap(f"#: {tag}: {', '.join(entries)}", 95, subsequent_indent="#:   ",
                               break_on_hyphens=False)
        for p in generated_list(entries, part):
            tags.setdefault(p, []).append(tag)
    lines.append("_HASHED_BY: dict[str, str] = {")
    for p in sorted(tags):
        line = f'    "{p}": "{" ".join(tags[p])}",'
        lines += [line] if len(line) <= 100 else [f'    "{p}":', f'        "{" ".join(tags[p])}",']
    lines += ["}", END]
    return "\n".join(lines) + "\n"


def current_block(text: str) -> tuple[int, int]:
    """Where the generated block of ``text`` starts and ends (after its last line)."""
    start = text.index(BEGIN)
    return start, text.index("\n", text.index(END, start)) + 1


def write_lists() -> list[str]:
    """Rewrite every generated block that is not current; the files changed."""
    changed = []
    for rel, (part, lists) in GENERATED.items():
        path = ROOT / rel
        text = path.read_text(encoding="utf-8")
        start, end = current_block(text)
        new = text[:start] + generated_block(part, lists) + text[end:]
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(rel)
    return changed


@pytest.mark.parametrize("rel", sorted(GENERATED))
def test_the_generated_lists_are_current(rel: str) -> None:
    import difflib

    part, lists = GENERATED[rel]
    text = (ROOT / rel).read_text(encoding="utf-8")
    start, end = current_block(text)
    want = generated_block(part, lists)
    shown = "".join(difflib.unified_diff(text[start:end].splitlines(keepends=True),
                                         want.splitlines(keepends=True), "committed",
                                         "generated"))
    assert text[start:end] == want, (f"{rel}: the hashed source lists are stale; run `python "
                                     "tests/provenance/test_source_closure.py` to rewrite "
                                     f"them:\n{shown}")


def test_the_lists_are_the_generated_ones() -> None:
    """What the package imports is the block (no hand-kept list shadows it)."""
    for rel, (part, lists) in GENERATED.items():
        module = S if rel.startswith("engram_eval/provenance/") else RS
        for name, (_, entries) in lists.items():
            assert list(getattr(module, name)) == generated_list(entries, part), name


# --------------------------------------------------------------------------- retrievers
@pytest.fixture(scope="module")
def fake_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A model directory that resolves (and hashes) without being loaded."""
    d = tmp_path_factory.mktemp("fake-model")
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"not loaded")  # a model directory holds weights
    return str(d)


def factory_module(name: str) -> str:
    return base._REGISTRY[name][0]


def make(name: str, model: str) -> base.Retriever:
    cfg = RunConfig(retriever=name, embedding_model=model, reranker_model=model,
                    embedding_backend="sentence_transformers",
                    reranker_backend="sentence_transformers", reranker_precision="fp32")
    return base.create(name, cfg)


RETRIEVERS = base.available()


def test_every_retriever_is_checked() -> None:
    assert {"hybrid", "bm25", "dense", "flat-bm25", "dummy"} <= set(RETRIEVERS)


@pytest.mark.parametrize("name", RETRIEVERS)
def test_a_retriever_names_its_own_modules(name: str, fake_model: str) -> None:
    """Every ``engram_eval.retrieval`` module the retriever's factory module imports (also
    lazily) is in its ``source_modules()``."""
    own = [m for m in closure([factory_module(name)]) if m.startswith("engram_eval/retrieval/")]
    absent = missing(own, make(name, fake_model).source_modules())
    assert not absent, f"retriever {name!r}: source_modules() lacks {absent}"


@pytest.mark.parametrize("name", RETRIEVERS)
def test_a_benchmark_run_hashes_its_whole_closure(name: str, fake_model: str) -> None:
    needed = required([*RUN_ENTRIES, factory_module(name)])
    hashed = S.run_sources(make(name, fake_model).source_modules())
    absent = missing(needed, hashed)
    assert not absent, (f"a {name!r} run executes {absent} but its sidecar does not hash them: "
                        "add them to engram_eval/provenance/sources.py (or the retriever's list "
                        "in engram_eval/retrieval/sources.py), or excuse them in NOT_HASHED")


def test_a_production_run_hashes_its_whole_closure() -> None:
    from engram_eval.production_eval.runner import SOURCES

    absent = missing(required(PRODUCTION_ENTRIES), SOURCES)
    assert not absent, (f"a production run executes {absent} but its manifest does not hash "
                        "them: add them to engram_eval/provenance/sources.py or excuse them "
                        "in NOT_HASHED")


def test_the_lists_hash_only_what_runs() -> None:
    """No stale entry: every hashed module is executed by its kind of run (a module hashed
    for nothing would refuse resumes and frozen manifests for no reason)."""
    run_needed = required([*RUN_ENTRIES, *(factory_module(n) for n in RETRIEVERS)])
    extra = sorted(set(S.RUN_CORE_SOURCES) - run_needed)
    assert not extra, f"RUN_CORE_SOURCES hashes {extra}, which no benchmark run executes"
    prod_needed = required(PRODUCTION_ENTRIES)
    extra = sorted(set(S.production_sources(RS.SEARCH_SOURCES)) - prod_needed)
    assert not extra, f"production hashes {extra}, which no production run executes"
    for label, lst, modules in (("PIPELINE_SOURCES", RS.PIPELINE_SOURCES, ["hybrid", "bm25",
                                                                            "dense"]),
                                ("FLAT_BM25_SOURCES", RS.FLAT_BM25_SOURCES, ["flat-bm25"]),
                                ("DUMMY_SOURCES", RS.DUMMY_SOURCES, ["dummy"])):
        ran = required([factory_module(n) for n in modules])  # modules and the data they name
        extra = sorted(set(lst) - ran)
        assert not extra, f"{label} hashes {extra}, which its retrievers never import"


def test_the_allow_list_is_explained_and_live() -> None:
    every = (set(S.RUN_CORE_SOURCES) | set(S.PRODUCTION_CORE_SOURCES) | set(RS.PIPELINE_SOURCES)
             | set(RS.FLAT_BM25_SOURCES) | set(RS.DUMMY_SOURCES))
    ran = required([*RUN_ENTRIES, *PRODUCTION_ENTRIES,
                    *(factory_module(n) for n in RETRIEVERS)])
    for path, why in S.NOT_HASHED.items():
        assert why.strip(), f"NOT_HASHED[{path!r}] gives no reason"
        assert path not in every, f"{path} is both hashed and excused"
        assert path in ran, f"NOT_HASHED names {path}, which no run executes (stale entry)"


def test_every_listed_path_exists() -> None:
    listed = [*S.RUN_CORE_SOURCES, *S.PRODUCTION_CORE_SOURCES, *RS.PIPELINE_SOURCES,
              *RS.FLAT_BM25_SOURCES, *RS.DUMMY_SOURCES, *S.NOT_HASHED,
              *(g for gens in S.COMMAND_GENERATORS.values() for g in gens),
              *S.FILE_GENERATORS.values(), *S.SUFFIX_GENERATORS.values()]
    absent = sorted({p for p in listed if not (ROOT / p).is_file()})
    assert not absent, f"listed source files that do not exist: {absent}"


def test_derived_sources() -> None:
    assert S.derived_sources("compare") == ["engram_eval/analysis/compare.py"]
    assert S.derived_sources("compare-plot")[0] == "engram_eval/analysis/plots.py"
    with pytest.raises(KeyError):
        S.derived_sources("run")
    assert S.file_generator("ABLATIONS.md") == "engram_eval/analysis/ablation_table.py"
    assert S.file_generator("holdout.frozen.json") == "engram_eval/provenance/frozen.py"
    assert S.file_generator("unknown.txt") is None


# --------------------------------------------------------------------------- the check bites
#: The lists as they were before this check (commit ff8012f): the retrieval list of
#: hybrid.py's SOURCE_MODULES and production/settings.py's SOURCE_MODULES, neither with
#: retrieval/cache.py, which decodes every cached vector a run uses.
OLD_HYBRID = [p for p in RS.PIPELINE_SOURCES
              if p not in (CACHE, "engram_eval/retrieval/pipeline.py",
                           "engram_eval/retrieval/sources.py",
                           "engram_eval/retrieval/__init__.py")]


@pytest.mark.parametrize("kind", ["run", "production"])
def test_a_list_without_cache_is_caught(kind: str) -> None:
    assert CACHE not in OLD_HYBRID
    if kind == "run":
        needed = required([*RUN_ENTRIES, factory_module("hybrid")])
        # the run core's own closure may reach the cache by now: take it out to rebuild the
        # list of a retriever that lacked it
        hashed = [p for p in S.run_sources(OLD_HYBRID) if p != CACHE]
    else:  # the production list as it was then: its own files and the retrieval list
        needed = required(PRODUCTION_ENTRIES)
        hashed = [*(p for p in S.PRODUCTION_CORE_SOURCES if not p.startswith(RETRIEVAL)),
                  *OLD_HYBRID]
    assert CACHE in needed
    assert CACHE in missing(needed, hashed)
    assert CACHE not in missing(needed, [*hashed, CACHE])


def test_closure_follows_lazy_imports_and_skips_type_checking() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from engram_eval.runs import config\n"
                     "def f():\n    from engram_eval.retrieval import cache\n"
                     "    from . import sibling\n")
    names = imported_names(tree, "engram_eval.retrieval")
    assert "engram_eval.retrieval.cache" in names
    assert "engram_eval.retrieval.sibling" in names
    assert not any(n.startswith("engram_eval.runs") for n in names)
    # importing a submodule runs its packages' __init__ files
    assert {"engram_eval/__init__.py", "engram_eval/retrieval/__init__.py"} <= closure(
        ["engram_eval.retrieval.fusion"])


# --------------------------------------------------------------------------- the answer step
@pytest.mark.parametrize("entry,listed", [
    ("engram_eval.qa.context", "QA_CONTEXT_SOURCES"),
    ("engram_eval.qa.answer", "QA_ANSWER_SOURCES"),
    ("engram_eval.qa.judge", "QA_JUDGE_SOURCES")])
def test_an_answer_step_hashes_its_whole_closure(entry: str, listed: str) -> None:
    """export-context, answer and judge record the sha256 of every module they execute."""
    absent = missing(required([entry]), getattr(S, listed))
    assert not absent, f"{entry} executes {absent} but {listed} does not hash them"


if __name__ == "__main__":  # the generator: rewrite the lists from this checkout's code
    if Path(S.__file__).resolve() != ROOT / "engram_eval" / "provenance" / "sources.py":
        raise SystemExit(f"engram_eval is imported from {Path(S.__file__).parents[2]}, not "
                         f"this checkout; run it as PYTHONPATH={ROOT} python {__file__}")
    written = write_lists()
    print("rewrote " + ", ".join(written) if written else "the lists are current")
