"""A directory where an output file goes (issue 28, "traceback or misleading error"): every
option of every ``engram-eval`` subcommand that names a file to write refuses an existing
directory (or a path ending in ``/``, which names one) as one usage error naming the option,
before any work -- it used to say the directory "already exists" (and ``run`` offered
``--resume``). An output a command derives from the one given (a sidecar, the compressed
result, the judge's default output) that is a directory is said to be one by the writers
themselves. Nothing is written anywhere. Options that name a directory (``split
--output-dir``, ``train-reranker --output``, ``train-encoder --output``, ``production run --work-dir``, ``--cache-dir``)
are not output files and keep their own rules."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
from conftest import TINY_LONGMEMEVAL

from engram_eval.cli import main as cli
from engram_eval.retrieval.flags import output_file

LME = str(TINY_LONGMEMEVAL)
CLOSED = "http://127.0.0.1:9/v1"
D = "D"  # the directory, made in the test's working directory

#: (command path, option) -> a command line giving that option the directory ``D``.
OUTPUT_OPTIONS: dict[tuple[str, str], list[str]] = {
    ("run", "--output"): ["run", LME, "--retriever", "flat-bm25", "--output", D],
    ("run", "--freeze-source"): ["run", LME, "--validate-only", "--freeze-source", D],
    ("merge", "--output"): ["merge", "r.jsonl", "--dataset", LME, "--output", D],
    ("score", "--output"): ["score", "r.jsonl", "--dataset", LME, "--output", D],
    ("export", "--public"): ["export", "r.jsonl", "--public", D],
    ("export", "--official-log"): ["export", "r.jsonl", "--official-log", D, "--dataset", LME],
    ("trec", "--trec-run"): ["trec", "r.jsonl", "--trec-run", D],
    ("trec", "--trec-qrels"): ["trec", "r.jsonl", "--trec-qrels", D],
    ("compare", "--output"): ["compare", "r.jsonl", "r.jsonl", "--output", D],
    ("compare", "--plot"): ["compare", "r.jsonl", "r.jsonl", "--plot", D],
    ("plot", "--output"): ["plot", "r.jsonl", "--output", D],
    ("analyze", "--output"): ["analyze", "r.jsonl", "--output", D],
    ("confidence-study", "--output"): ["confidence-study", "r.jsonl", "--dataset", LME,
                                       "--output", D],
    ("confidence-study", "--plot"): ["confidence-study", "r.jsonl", "--dataset", LME,
                                     "--output", "x.json", "--plot", D],
    ("tune", "--output"): ["tune", "r.jsonl", "--grid", "g.yaml", "--output", D],
    ("make-stress", "--output"): ["make-stress", LME, "--sessions", "20", "--seed", "1",
                                  "--output", D],
    ("export-context", "--output"): ["export-context", "r.jsonl", "--dataset", LME,
                                     "--output", D, "--top-k", "2"],
    ("answer", "--output"): ["answer", "c.jsonl", "--model", "m", "--base-url", CLOSED,
                             "--output", D],
    ("judge", "--output"): ["judge", "h.jsonl", "--dataset", LME, "--judge-model", "j",
                            "--base-url", CLOSED, "--output", D],
    ("report", "--output"): ["report", "r.jsonl", "--output", D],
    ("production store", "store"): ["production", "store", D, "--memories", "m.json"],
    ("production run", "--freeze-source"): ["production", "run", "--fixture", "f.json",
                                            "--source-root", ".", "--validate-only",
                                            "--freeze-source", D],
    ("production run", "--output"): ["production", "run", "--fixture", "f.json",
                                     "--source-root", ".", "--output", D],
    ("production run", "--ledger"): ["production", "run", "--fixture", "f.json",
                                     "--source-root", ".", "--ledger", D],
    ("production calibrate", "--output"): ["production", "calibrate", "--fixture", "f.json",
                                           "--output", D],
    ("production calibrate", "--report"): ["production", "calibrate", "--fixture", "f.json",
                                           "--output", "c.json", "--report", D],
    ("production sweep", "--output"): ["production", "sweep", "x.json", "--dataset-label",
                                       "a", "--output", D],
    ("production calibrate-sessions", "--output"): [
        "production", "calibrate-sessions", "--part", "a=x.json", "--output", D],
    ("production calibrate-sessions", "--settings-output"): [
        "production", "calibrate-sessions", "--part", "a=x.json", "--output", "c.json",
        "--settings-output", D],
    ("production calibrate-sessions", "--report"): [
        "production", "calibrate-sessions", "--part", "a=x.json", "--output", "c.json",
        "--report", D],
    ("production measure", "--output"): ["production", "measure", "x.json", "--source-root",
                                         ".", "--output", D],
    ("production measure", "--freeze-source"): ["production", "measure", "x.json",
                                                "--source-root", ".", "--freeze-source", D],
    ("production measure", "--ledger"): ["production", "measure", "x.json", "--source-root",
                                         ".", "--ledger", D],
}
#: Options that name a directory to write (not output files).
DIRECTORY_OPTIONS = {("split", "--output-dir"), ("train-reranker", "--output"),
                     ("train-encoder", "--output"),
                     ("production run", "--work-dir")}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by its command path (``production store``, ...)."""
    out: dict[str, argparse.ArgumentParser] = {}
    todo = [("", cli.build_parser())]
    while todo:
        name, parser = todo.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend((f"{name} {sub}".strip(), p) for sub, p in action.choices.items())
        if name:
            out[name] = parser
    return out


def _option(action: argparse.Action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def _in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / D).mkdir()
    return {n: os.lstat(tmp_path / n).st_mtime_ns for n in os.listdir(tmp_path)}


def test_every_output_file_option_is_listed_here() -> None:
    """The options typed ``output_file`` are exactly the ones tested below, and every
    option whose help says it writes a file (or that it must not exist) is one of them or
    names a directory."""
    typed = {(name, _option(a)) for name, p in _parsers().items() for a in p._actions
             if a.type is output_file}
    assert typed == set(OUTPUT_OPTIONS)
    writes = {(name, _option(a)) for name, p in _parsers().items() for a in p._actions
              if a.help and any(w in a.help.lower() for w in ("write", "must not exist"))
              and a.nargs is None and a.type in (None, output_file)
              and not isinstance(a, argparse._StoreTrueAction)}
    assert writes <= typed | DIRECTORY_OPTIONS, sorted(writes - typed - DIRECTORY_OPTIONS)


@pytest.mark.parametrize("key", sorted(OUTPUT_OPTIONS), ids=" ".join)
def test_a_directory_as_an_output_file_is_one_usage_error(
        key: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    before = _in(tmp_path, monkeypatch)
    with pytest.raises(SystemExit) as info:
        cli.main(OUTPUT_OPTIONS[key])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    option = key[1] if key[1].startswith("--") else "store"
    assert err[-1].endswith(f"error: argument {option}: '{D}' is a directory; give the path "
                            "of a file to write"), err
    assert "already exists" not in "\n".join(err) and "Traceback" not in "\n".join(err)
    assert {n: os.lstat(tmp_path / n).st_mtime_ns for n in os.listdir(tmp_path)} == before
    assert os.listdir(tmp_path / D) == []


@pytest.mark.parametrize("argv", [
    ["run", LME, "--output", "new/"],
    ["score", "r.jsonl", "--dataset", LME, "--output", "new/"],
    ["judge", "h.jsonl", "--dataset", LME, "--judge-model", "j", "--base-url", CLOSED,
     "--output", "new/"],
], ids=["run", "score", "judge"])
def test_a_path_ending_in_a_separator_names_a_directory(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--output new/`` (nothing there yet) would have written a file named ``new``."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --output: 'new/' ends in '/', which names a directory" in err, err
    assert os.listdir(tmp_path) == []


@pytest.fixture
def run_copy(pristine: Path, tmp_path: Path) -> Path:
    from run_files import copy_run

    return copy_run(pristine, tmp_path / "r.jsonl")


@pytest.mark.parametrize("case", ["trec-sidecar", "compress", "run-sidecar", "run-summary",
                                  "export-context-sidecar"])
def test_a_directory_at_a_derived_output_is_said_to_be_one(
        case: str, run_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """What a command writes beside the output it was given: one error line saying the
    directory is one, nothing written."""
    monkeypatch.chdir(tmp_path)
    argv, blocked = {
        "trec-sidecar": (["trec", "r.jsonl", "--trec-run", "t.run"], "t.run.metadata.json"),
        "compress": (["compress", "r.jsonl"], "r.jsonl.gz"),
        "run-sidecar": (["run", LME, "--retriever", "flat-bm25", "--output", "n.jsonl",
                         "--no-progress"], "n.jsonl.metadata.json"),
        "run-summary": (["run", LME, "--retriever", "flat-bm25", "--output", "n.jsonl",
                         "--no-progress"], "n.jsonl.summary.json"),
        "export-context-sidecar": (["export-context", "r.jsonl", "--dataset", LME,
                                    "--output", "c.jsonl", "--top-k", "2", "--no-progress"],
                                   "c.jsonl.metadata.json"),
    }[case]
    (tmp_path / blocked).mkdir()
    before = sorted(os.listdir(tmp_path))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{blocked} is a directory where an output file goes" in err[0], err[0]
    assert sorted(os.listdir(tmp_path)) == before and os.listdir(tmp_path / blocked) == []


def test_the_writers_say_a_directory_is_one(tmp_path: Path) -> None:
    """The library API (no command line in front): the exclusive writers."""
    from engram_eval.io import exclusive_write, streaming_write

    d = tmp_path / "out.json"
    d.mkdir()

    def stream() -> None:
        with streaming_write(d) as f:
            f.write(b"x")

    for write in (lambda: exclusive_write(d, "{}"), stream):
        with pytest.raises(FileExistsError, match="is a directory where an output file goes"):
            write()
    assert os.listdir(tmp_path) == ["out.json"] and os.listdir(d) == []
