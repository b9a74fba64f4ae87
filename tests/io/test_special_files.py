"""Special files as inputs (issue 28, "hang or unbounded memory"): a FIFO with no writer,
``/dev/zero`` or a directory given where a dataset, config, result, sidecar, frozen manifest
or questions file is read ends in one clear error naming it, within a bounded time, and
writes nothing. Each command runs in a subprocess with a timeout, so a hang fails the test
instead of stalling the suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import special_files

ROOT = Path(__file__).resolve().parents[2]
LME = ROOT / "fixtures" / "longmemeval_tiny.json"
TIMEOUT = 60


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "engram_eval.cli.main", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    return special_files.make("fifo", tmp_path / "pipe.json")


@pytest.fixture
def flat_run(tmp_path: Path) -> Path:
    out = tmp_path / "run" / "r.jsonl"
    out.parent.mkdir()
    done = _cli("run", str(LME), "--retriever", "flat-bm25", "--output", str(out),
                "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return out


def _one_error(done: subprocess.CompletedProcess[str], path: Path,
               says: str = special_files.SAYS["fifo"]) -> None:
    assert done.returncode != 0
    errors = [x for x in done.stderr.splitlines() if "error" in x.lower()]
    assert len(errors) == 1, done.stderr
    assert str(path) in errors[0] and says in errors[0], errors[0]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("kind", special_files.KINDS)
def test_a_special_dataset_is_refused(kind: str, tmp_path: Path) -> None:
    src = special_files.make(kind, tmp_path / "ds.json")
    out = tmp_path / "o.jsonl"
    done = _cli("run", str(src), "--retriever", "flat-bm25", "--output", str(out),
                "--no-progress", cwd=tmp_path)
    _one_error(done, src, special_files.SAYS[kind])
    assert not out.exists()


@pytest.mark.parametrize("option", ["--config", "--frozen-source", "--questions"])
def test_a_fifo_run_input_is_refused(option: str, fifo: Path, tmp_path: Path) -> None:
    """A config file, a frozen manifest or a questions file that is a FIFO."""
    out = tmp_path / "o.jsonl"
    done = _cli("run", str(LME), "--retriever", "flat-bm25", option, str(fifo),
                "--output", str(out), "--no-progress", cwd=tmp_path)
    _one_error(done, fifo)
    assert not out.exists()


def _not_verified(done: subprocess.CompletedProcess[str], path: Path) -> None:
    """verify reports a failing check (stdout) or one error line (stderr); never hangs."""
    assert done.returncode != 0 and "Traceback" not in done.stderr + done.stdout
    lines = [x for x in (done.stdout + done.stderr).splitlines()
             if str(path) in x and "not a regular file" in x]
    assert lines, done.stdout + done.stderr
    assert "VERIFIED" not in done.stdout.replace("NOT VERIFIED", "")


def test_a_fifo_result_or_sidecar_under_verify_is_refused(flat_run: Path,
                                                          tmp_path: Path) -> None:
    rows = tmp_path / "fifo_rows.jsonl"
    special_files.make("fifo", rows)
    shutil.copy(str(flat_run) + ".metadata.json", str(rows) + ".metadata.json")
    _not_verified(_cli("verify", str(rows), "--dataset", str(LME), cwd=tmp_path), rows)
    side = Path(str(flat_run) + ".metadata.json")
    side.unlink()
    special_files.make("fifo", side)
    _not_verified(_cli("verify", str(flat_run), "--dataset", str(LME), cwd=tmp_path), side)


def test_production_inputs_that_are_fifos_are_refused(fifo: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = str(ROOT / "benchmarks" / "production_retrieval" / "run.py")
    fixture = ROOT / "fixtures" / "production" / "dev.json"
    for args in (["--fixture", str(fifo)], ["--fixture", str(fixture), "--settings", str(fifo)],
                 ["--fixture", str(fixture), "--calibration", str(fifo)]):
        out = tmp_path / "p.json"
        done = subprocess.run([sys.executable, script, *args, "--source-root", str(ROOT),
                               "--output", str(out), "--work-dir", str(tmp_path / "w")],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT)
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert str(fifo) in done.stderr and "not a regular file" in done.stderr, done.stderr
        assert not out.exists()


#: The commands that read a finished run, each given the special result ``res.jsonl``.
RESULT_READERS = {
    "verify": ["verify", "res.jsonl", "--dataset", str(LME)],
    "merge": ["merge", "res.jsonl", "--dataset", str(LME), "--output", "m.jsonl"],
    "export": ["export", "res.jsonl", "--public", "p.jsonl"],
    "compress": ["compress", "res.jsonl"],
    "analyze": ["analyze", "res.jsonl"],
    "trec": ["trec", "res.jsonl", "--trec-run", "t.run"],
}
_DRIVER = """
import contextlib, io, json, sys
from engram_eval.cli import main as cli
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    err, std = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
        code = cli.main(argv)
    out[name] = [code, err.getvalue(), std.getvalue()]
print(json.dumps(out))
"""


@pytest.mark.parametrize("kind", special_files.KINDS)
def test_a_special_result_is_said_to_be_what_it_is(kind: str, tmp_path: Path) -> None:
    """A result that is a FIFO, /dev/zero, a directory, a dangling link or a loop of links:
    every command that reads a finished run says what it is -- not "its sidecar is missing",
    "no such result file" alone, or "is missing" for a directory -- and writes nothing."""
    import json

    special_files.make(kind, tmp_path / "res.jsonl")
    before = sorted(os.listdir(tmp_path))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(RESULT_READERS)],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    for name, (code, err, std) in json.loads(done.stdout).items():
        said = (err + std).strip().splitlines()
        assert code != 0 and "Traceback" not in err, (name, err)
        lines = [x for x in said if "res.jsonl" in x and special_files.SAYS[kind] in x]
        assert lines, (name, said)
        assert "sidecar is missing" not in err + std and " is missing;" not in err, (name, said)
    assert sorted(os.listdir(tmp_path)) == before
