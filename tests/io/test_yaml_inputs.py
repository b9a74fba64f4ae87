"""Hostile YAML inputs (issue 28, "hang or unbounded memory" and "traceback or misleading
error"): a run config (``run --config``) and a tune grid (``tune --grid``) are read through
one bounded path (:func:`engram_eval.runs.config.read_yaml_mapping`: a regular file only,
at most ``MAX_YAML_BYTES``, nesting at most ``MAX_YAML_DEPTH``, no anchors or aliases,
string keys, text that UTF-8 can hold). Each case is a real file (a FIFO, ``/dev/zero``, a
directory, a dangling link, a huge, deep, alias-bomb, non-UTF-8 or surrogate file) read in a
subprocess with a timeout, so a hang fails the test instead of stalling the suite; each
ends in one ``ConfigError`` line naming the file, and nothing is written."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import special_files

from engram_eval.runs.config import MAX_YAML_BYTES, MAX_YAML_DEPTH

ROOT = Path(__file__).resolve().parents[2]
LME = ROOT / "fixtures" / "longmemeval_tiny.json"
TIMEOUT = 60
#: Memory for a reader subprocess (bytes of address space): a bomb expanded would pass it.
MEMORY = 1 << 30


def _special(kind: str) -> Callable[[Path], Path]:
    return lambda p: special_files.make(kind, p)


def _text(text: str) -> Callable[[Path], Path]:
    def make(p: Path) -> Path:
        p.write_text(text, encoding="utf-8")
        return p
    return make


def _bytes(raw: bytes) -> Callable[[Path], Path]:
    def make(p: Path) -> Path:
        p.write_bytes(raw)
        return p
    return make


def _alias_bomb() -> str:
    lines = ['a0: &a0 ["xxxxxxxxxx"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


#: name -> (how the file is made, what the one error line says)
CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "fifo": (_special("fifo"), special_files.SAYS["fifo"]),
    "dev-zero": (_special("dev-zero"), special_files.SAYS["dev-zero"]),
    "directory": (_special("directory"), special_files.SAYS["directory"]),
    "dangling-link": (_special("dangling-link"), special_files.SAYS["dangling-link"]),
    "link-loop": (_special("link-loop"), special_files.SAYS["link-loop"]),
    "huge": (_bytes(b"# " + b"x" * MAX_YAML_BYTES + b"\n"), f"over {MAX_YAML_BYTES} bytes"),
    "deep-flow": (_text("[" * 100_000 + "]" * 100_000), f"deeper than {MAX_YAML_DEPTH}"),
    "deep-block": (_text("".join(" " * i + f"k{i}:\n" for i in range(MAX_YAML_DEPTH + 5))),
                   f"deeper than {MAX_YAML_DEPTH}"),
    "alias-bomb": (_text(_alias_bomb()), "anchors or aliases"),
    "integer-key": (_text("1: 2\n"), "key 1 is not a field name"),
    "not-utf8": (_bytes(b"limit: \xff\xfe\n"), "not UTF-8 text"),
    "lone-surrogate": (_text('dummy_salt: "\\ud800"\n'), "lone surrogate"),
    "huge-integer": (_text("limit: " + "9" * 5000 + "\n"), "integer string conversion"),
    "two-documents": (_text("limit: 1\n---\nlimit: 2\n"), "line 2, column 1"),
}


def _read_in_subprocess(reader: str, path: Path) -> subprocess.CompletedProcess[str]:
    """``reader(path)`` in a fresh interpreter limited to ``MEMORY`` bytes; prints the error
    class and message it ends with."""
    code = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY}, {MEMORY}))\n"
        "from engram_eval.runs.config import RunConfig\n"
        "from engram_eval.analysis.tune import load_grid\n"
        "from engram_eval.errors import ConfigError\n"
        "try:\n"
        f"    {reader}(sys.argv[1])\n"
        "except ConfigError as e:\n"
        "    print(type(e).__name__ + ': ' + str(e)); sys.exit(3)\n"
        "print('read'); sys.exit(0)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code, str(path)], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.parametrize("reader", ["RunConfig.from_yaml", "load_grid"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_yaml_file_is_one_config_error(case: str, reader: str,
                                                 tmp_path: Path) -> None:
    make, says = CASES[case]
    path = make(tmp_path / "in.yaml")
    before = sorted(os.listdir(tmp_path))
    done = _read_in_subprocess(reader, path)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith(f"ConfigError: {path}"), lines[0]
    assert says in lines[0], lines[0]
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("case", ["fifo", "dev-zero", "alias-bomb", "lone-surrogate",
                                  "integer-key"])
def test_run_config_through_the_cli_is_one_error_line(case: str, tmp_path: Path) -> None:
    make, says = CASES[case]
    cfg = make(tmp_path / "cfg.yaml")
    out = tmp_path / "o.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "engram_eval.cli.main", "run", str(LME),
                           "--retriever", "flat-bm25", "--config", str(cfg), "--output",
                           str(out), "--no-progress"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and str(cfg) in errors[0] and says in errors[0], done.stderr
    assert not out.exists()


def test_a_validation_error_of_a_config_file_names_the_file(tmp_path: Path) -> None:
    """A value checked on construction (NaN where a number goes) names the file too."""
    from engram_eval.errors import ConfigError
    from engram_eval.runs.config import RunConfig

    cfg = tmp_path / "nan.yaml"
    cfg.write_text("rrf_k: .nan\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{cfg}: .*rrf_k"):
        RunConfig.from_yaml(cfg)
    with pytest.raises(ConfigError, match="not a string"):
        RunConfig.from_mapping({3: 1}, source="x")
