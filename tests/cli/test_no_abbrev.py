"""No command line of the package abbreviates options (issue 43, "Secrets").

With argparse's default ``allow_abbrev=True``, ``--api-key sk-...`` is taken for
``--api-key-env sk-...`` and the key is then printed as a variable name. Every parser is
built with :class:`engram_eval.retrieval.flags.ArgumentParser` (``allow_abbrev=False``;
an unknown option named without its value), checked three ways: in the source of every
module and script (no other parser is made), on the live ``engram-eval`` parser and all
its subcommands, and by running the command line.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_eval.cli.main import build_parser, main
from engram_eval.retrieval.flags import ArgumentParser, unknown_arguments

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-proj-DO-NOT-ECHO-91c3"


def parser_calls() -> Iterator[tuple[Path, ast.Call]]:
    """Every call of something named ``ArgumentParser`` in the package, the benchmarks and
    the scripts."""
    for top in ("engram_eval", "benchmarks", "scripts"):
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                    if name == "ArgumentParser":
                        yield path, node


def test_every_parser_in_the_source_is_the_packages_or_refuses_abbreviations() -> None:
    """``ArgumentParser(...)`` is the package's class (imported from ``retrieval.flags``);
    ``argparse.ArgumentParser(...)`` only with ``allow_abbrev=False`` (a script that must
    not import its own checkout's code); no ``add_subparsers(parser_class=...)``."""
    calls = list(parser_calls())
    assert len(calls) >= 15  # every command line was found
    for path, call in calls:
        where = f"{path.relative_to(ROOT)}:{call.lineno}"
        if isinstance(call.func, ast.Attribute):  # argparse.ArgumentParser(...)
            kw = {k.arg: k.value for k in call.keywords}
            flag = kw.get("allow_abbrev")
            assert isinstance(flag, ast.Constant) and flag.value is False, where
        else:
            assert "ArgumentParser" in flags_imports(path), where
    for top in ("engram_eval", "benchmarks", "scripts"):
        for path in (ROOT / top).rglob("*.py"):
            assert "parser_class" not in path.read_text(encoding="utf-8"), path


def flags_imports(path: Path) -> set[str]:
    """The names ``path`` imports from ``engram_eval.retrieval.flags``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and node.module == "engram_eval.retrieval.flags" for a in node.names}


def all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from all_parsers(sub)


def test_no_parser_of_the_command_line_allows_abbreviations() -> None:
    parsers = list(all_parsers(build_parser()))
    assert len(parsers) > 25  # engram-eval, its commands, production's subcommands
    bad = [p.prog for p in parsers if p.allow_abbrev or not isinstance(p, ArgumentParser)]
    assert bad == []


@pytest.mark.parametrize("argv,named", [
    (["--api-key", SECRET], "--api-key"),
    ([f"--api-key={SECRET}"], "--api-key"),
    (["--api-key-e", SECRET], "--api-key-e"),  # a prefix of --api-key-env
    (["--base", SECRET], "--base"),  # a prefix of --base-url
])
def test_an_abbreviated_or_unknown_option_is_refused_without_its_value(
        argv: list[str], named: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["answer", str(tmp_path / "ctx.jsonl"), "--model", "m", "--base-url",
              "http://127.0.0.1:9/v1", "--output", str(tmp_path / "h.jsonl"), *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert f"error: unrecognized arguments: {named} (1 value(s) not shown" in err
    assert SECRET not in err and list(tmp_path.iterdir()) == []


def test_abbreviations_are_refused_in_a_real_process(tmp_path: Path) -> None:
    """``--outp`` (for ``--output``) and ``--api-key``, through the installed entry point's
    module, in a subprocess: exit 2, the secret nowhere in what it prints."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "engram_eval.cli.main", "judge", "h.jsonl",
                           "--dataset", "d.json", "--judge-model", "j", "--base-url",
                           "http://127.0.0.1:9/v1", "--outp", "x.jsonl", "--api-key", SECRET],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "engram-eval: error: unrecognized arguments: --outp --api-key (2 value(s) not "
        "shown: they may hold a secret)")
    assert SECRET not in done.stdout + done.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("script,argv", [
    ("benchmarks/bm25_engine.py", []),
    ("benchmarks/longmemeval/context_tokens.py", ["x.jsonl", "--output", "o.json"]),
])
def test_a_benchmark_script_refuses_an_abbreviation(script: str, argv: list[str],
                                                   tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / script), *argv, "--outp", SECRET],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(
        "error: unrecognized arguments: --outp (1 value(s) not shown: they may hold a secret)")
    assert SECRET not in done.stdout + done.stderr and list(tmp_path.iterdir()) == []


def test_unknown_arguments_hide_values_and_keep_other_words() -> None:
    assert unknown_arguments(["extra.json"]) == "extra.json"
    assert unknown_arguments(["--x", "v", "w", "--y=z", "-q"]) == (
        "--x w --y -q (2 value(s) not shown: they may hold a secret)")
