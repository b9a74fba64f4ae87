"""The judge's and the reader's inputs beyond an output's own sidecar (issue 28, "hang or
unbounded memory" and "traceback or misleading error"): a FIFO, ``/dev/zero``, a
directory or a dangling symbolic link where ``judge`` reads its hypotheses, their sidecar,
the dataset, the context export or its sidecar, or where ``answer`` reads its context
export, ends in one error line naming that file, within a bounded time (a subprocess with a
timeout), before any model is asked (the endpoint is a closed port), writing nothing. A
dangling link at an optional sidecar is not taken for "no sidecar"."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import special_files
from conftest import TINY_LONGMEMEVAL
from fake_openai import FakeServer

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60
CLOSED = "http://127.0.0.1:9/v1"  # nothing listens: reaching the model would fail slowly

pytest.importorskip("openai")


@pytest.fixture(scope="module")
def qa_dir(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A context export of the pristine run and a reader's hypotheses over it."""
    from engram_eval.qa.answer import AnswerConfig, answer
    from engram_eval.qa.client import RetryPolicy
    from engram_eval.qa.context import ContextConfig, export_context

    d = tmp_path_factory.mktemp("qa_special")
    export_context(pristine, TINY_LONGMEMEVAL, d / "ctx.jsonl", ContextConfig(2),
                   echo=lambda m: None, progress=False)
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENAI_API_KEY", "sk-special-test")
    with FakeServer(lambda body, n: "Answer: something") as server:
        answer(d / "ctx.jsonl", d / "hyp.jsonl",
               AnswerConfig(base_url=server.base_url, model="reader-1",
                            retry=RetryPolicy(attempts=1, base_delay=0.01), progress=False),
               echo=lambda m: None)
    mp.undo()
    return d


DS = "ds.json"
#: case -> (the file made special, the command)
CASES: dict[str, tuple[str, list[str]]] = {
    "judge-hypotheses": ("hyp.jsonl", []),
    "judge-hypotheses-sidecar": ("hyp.jsonl.metadata.json", []),
    "judge-dataset": (DS, []),
    "judge-context": ("ctx.jsonl", ["--context", "ctx.jsonl"]),
    "judge-context-sidecar": ("ctx.jsonl.metadata.json", ["--context", "ctx.jsonl"]),
    "answer-context": ("ctx.jsonl", []),
}


@pytest.mark.parametrize("kind", special_files.KINDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_special_qa_input_is_one_error_line(case: str, kind: str, qa_dir: Path,
                                              tmp_path: Path) -> None:
    work = tmp_path / "w"
    shutil.copytree(qa_dir, work)
    shutil.copyfile(TINY_LONGMEMEVAL, work / DS)
    name, extra = CASES[case]
    target = work / name
    if target.exists():
        target.unlink()
    special_files.make(kind, target)
    says = special_files.SAYS[kind]
    if case.startswith("judge"):
        args = ["judge", "hyp.jsonl", "--dataset", DS, "--judge-model", "j",
                "--base-url", CLOSED, "--output", "out.jsonl", *extra]
    else:
        args = ["answer", "ctx.jsonl", "--output", "h2.jsonl", "--model", "m",
                "--base-url", CLOSED]
    before = sorted(os.listdir(work))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-special-test"}
    done = subprocess.run([sys.executable, "-m", "engram_eval.cli.main", *args], cwd=work,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert name in lines[0] and says in lines[0], lines[0]
    assert sorted(os.listdir(work)) == before
