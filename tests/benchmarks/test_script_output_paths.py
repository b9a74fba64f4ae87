"""The benchmark scripts' and ``python -m engram_eval.analysis.X`` modules' own parsers refuse a directory given as an output file the way the
``engram-eval`` commands do (tests/io/test_output_paths.py): one usage error naming the
option, before any work. ``speed.py --output DIR`` used to say "DIR exists; refusing to
overwrite". The scripts are found by reading their source, so a new script whose output
option lacks the check fails here."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Options of the benchmark scripts that name a file to write.
OUTPUT_OPTIONS = ("--output", "--plot")


def _output_options(path: Path) -> list[tuple[str, bool]]:
    """(option, typed output_file) of each ``add_argument`` call in ``path`` naming one of
    :data:`OUTPUT_OPTIONS`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument" and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in OUTPUT_OPTIONS):
            typed = any(k.arg == "type" and isinstance(k.value, ast.Name)
                        and k.value.id == "output_file" for k in node.keywords)
            out.append((str(node.args[0].value), typed))
    return out


SCRIPTS = sorted(p for d in ("benchmarks", "engram_eval/analysis") for p in (ROOT / d).rglob("*.py")
                 if _output_options(p))


def _command(path: Path) -> list[str]:
    """How ``path`` is started: a benchmark by its path, a package module with ``-m``."""
    rel = path.relative_to(ROOT)
    if rel.parts[0] == "engram_eval":
        return [sys.executable, "-m", ".".join(rel.with_suffix("").parts)]
    return [sys.executable, str(path)]


def test_the_scripts_with_an_output_option_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in SCRIPTS}
    assert {"benchmarks/longmemeval/speed.py", "benchmarks/longmemeval/scale.py",
            "benchmarks/bm25_engine.py", "engram_eval/analysis/misses.py",
            "engram_eval/analysis/ablation_table.py", "engram_eval/analysis/choose_rerank.py"
            } <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_output_option_is_typed_output_file(script: Path) -> None:
    assert all(typed for _, typed in _output_options(script)), _output_options(script)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_directory_as_the_output_is_one_usage_error(script: Path, tmp_path: Path) -> None:
    (tmp_path / "D").mkdir()
    before = sorted(os.listdir(tmp_path))
    # a positional argument for the scripts that take one; parsing stops at the directory
    proc = subprocess.run([*_command(script), "x.json", "--output", "D"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.endswith("error: argument --output: 'D' is a directory; give the path of a "
                         "file to write"), proc.stderr
    assert "Traceback" not in proc.stderr and "refusing to overwrite" not in proc.stderr
    assert sorted(os.listdir(tmp_path)) == before and not os.listdir(tmp_path / "D")
