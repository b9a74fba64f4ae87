"""The hashed source lists cannot go stale: every module a run executes is hashed.

For each kind of run the import closure within ``engram_eval`` of what it executes is
computed from the source text with ``ast`` -- top-level imports and the lazy ones inside
functions alike; ``if TYPE_CHECKING:`` blocks never run and are skipped; importing
``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` too -- and every module in it must
be in the list that kind hashes (:mod:`engram_eval.provenance.sources`), or be excused in
its commented allow-list :data:`~engram_eval.provenance.sources.NOT_HASHED`. Package data
files (schemas, calibration) named by a module of the closure must be hashed too.

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


# --------------------------------------------------------------------------- retrievers
@pytest.fixture(scope="module")
def fake_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A model directory that resolves (and hashes) without being loaded."""
    d = tmp_path_factory.mktemp("fake-model")
    (d / "config.json").write_text("{}")
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
        hashed = S.run_sources(OLD_HYBRID)
    else:
        needed = required(PRODUCTION_ENTRIES)
        hashed = S.production_sources(OLD_HYBRID)
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
