"""Hangs and memory of the answer and judge steps (issue 43), against a real server on
127.0.0.1 that misbehaves on purpose (``fake_openai.Trickle`` and ``Flood``):

* a server trickling its reply one byte at a time -- headers included, or only the body --
  is cut at ``--timeout`` seconds for the whole request (not per read): the server gets out
  only a few of the reply's bytes, and the run stops with one error saying so;
* a reply over the size cap (a declared 1.5 GB, an endless chunked reply) is cut at the cap
  while it is read, with one error, and not retried; a compressed reply (whose size in
  memory its size on the wire does not bound) is refused the same way.

Every server loop ends by itself (a bounded number of bytes), so a client that failed to
cut a reply would make its test fail, not hang. No timing threshold: what is asserted is
how many bytes the server got out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY_LONGMEMEVAL
from fake_openai import FakeServer, Flood, Trickle

from engram_eval.qa.answer import AnswerConfig, answer
from engram_eval.qa.client import MAX_REPLY_BYTES, EndpointError, RetryPolicy
from engram_eval.qa.context import ContextConfig, export_context
from engram_eval.qa.judge import JudgeConfig, judge

pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-hangs-test-4f1a"
ONCE = RetryPolicy(attempts=1, base_delay=0.01)
GB = 10**9
#: A reply trickled at INTERVAL s a byte takes TEXT's length times that (tens of seconds):
#: far past the 1 s deadline, yet finite should the deadline fail.
INTERVAL = 0.1
TEXT = "Answer: " + "slow " * 40


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


@pytest.fixture(scope="module")
def context(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ctx") / "ctx.jsonl"
    export_context(pristine, TINY_LONGMEMEVAL, out, ContextConfig(2), echo=lambda m: None,
                   progress=False)
    return out


def run_answer(server: FakeServer, context: Path, out: Path, **kw: object) -> EndpointError:
    kw.setdefault("retry", ONCE)
    config = AnswerConfig(base_url=server.base_url, model="r", concurrency=1, limit=1,
                          progress=False, **kw)  # type: ignore[arg-type]
    with pytest.raises(EndpointError) as e:
        answer(context, out, config, echo=lambda m: None)
    return e.value


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


# --------------------------------------------------------------------------- deadline
@pytest.mark.parametrize("headers", [True, False], ids=["headers-trickled", "body-trickled"])
def test_a_trickling_server_is_cut_at_the_deadline(headers: bool, context: Path,
                                                   tmp_path: Path) -> None:
    out = tmp_path / "hyp.jsonl"
    with FakeServer(lambda body, n: Trickle(TEXT, INTERVAL, headers=headers)) as server:
        err = run_answer(server, context, out, timeout=1.0, retry=RetryPolicy(
            attempts=2, base_delay=0.01, max_delay=0.01))
    assert "gave up after 2 attempt(s)" in str(err)
    assert "no complete reply within 1 s (--timeout, for the whole request)" in str(err)
    whole = len(json.dumps({"choices": [{"message": {"content": TEXT}}]}))
    assert len(server.sent) == 2 and all(sent < whole for sent in server.sent), server.sent
    assert rows(out) == []  # nothing answered, nothing written as an answer


def test_a_trickling_judge_server_is_cut_too(context: Path, tmp_path: Path) -> None:
    hyp = tmp_path / "hyp.jsonl"
    with FakeServer(lambda body, n: "Answer: x") as server:
        answer(context, hyp, AnswerConfig(base_url=server.base_url, model="r", limit=2,
                                          retry=ONCE, progress=False), echo=lambda m: None)
    with FakeServer(lambda body, n: Trickle("yes " * 50, INTERVAL)) as server:
        with pytest.raises(EndpointError, match="no complete reply within 1 s"):
            judge(hyp, TINY_LONGMEMEVAL, tmp_path / "j.jsonl",
                  JudgeConfig(base_url=server.base_url, judge_model="j", concurrency=1,
                              retry=ONCE, timeout=1.0, progress=False), echo=lambda m: None)
    assert server.sent and all(sent < 200 for sent in server.sent)
    assert rows(tmp_path / "j.jsonl") == []


def test_the_command_line_stops_a_trickle_with_one_error_line(context: Path,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "hyp.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": KEY}
    with FakeServer(lambda body, n: Trickle(TEXT, INTERVAL)) as server:
        done = subprocess.run([sys.executable, "-m", "engram_eval.cli.main", "answer",
                               str(context), "--model", "r", "--base-url", server.base_url,
                               "--output", str(out), "--limit", "1", "--attempts", "1",
                               "--timeout", "1", "--no-progress"],
                              env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("engram-eval answer: error: http://127.0.0.1:")
    assert "no complete reply within 1 s" in lines[-1]
    assert server.sent and server.sent[0] < len(TEXT)
    assert rows(out) == []


# --------------------------------------------------------------------------- size cap
#: case -> the flood (each ends by itself after ``limit`` bytes)
FLOODS = {
    "declared-1.5GB": Flood(b"x" * 65536, int(1.5 * GB), length=int(1.5 * GB)),
    "endless-chunked": Flood(b"y" * 65536, int(1.5 * GB)),
}


@pytest.mark.parametrize("case", sorted(FLOODS))
def test_a_huge_reply_is_cut_at_the_cap_while_it_is_read(case: str, context: Path,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "hyp.jsonl"
    with FakeServer(lambda body, n: FLOODS[case]) as server:
        err = run_answer(server, context, out, retry=RetryPolicy(attempts=4, base_delay=0.01))
    assert f"the reply is longer than {MAX_REPLY_BYTES} bytes" in str(err)
    assert str(err).endswith("; stopping")
    assert len(server.seen) == 1  # not retried: it would be as long again
    # the client stopped reading at the cap: the server got out only what the socket
    # buffers between them hold beyond it, nothing near 1.5 GB
    assert server.sent and server.sent[0] < MAX_REPLY_BYTES + 64 * 2**20, server.sent
    assert rows(out) == []


def test_a_compressed_reply_is_refused(context: Path, tmp_path: Path) -> None:
    """A gzip reply could be a bomb: its size on the wire bounds nothing. The client asks
    for none (``Accept-Encoding: identity``) and refuses one."""
    out = tmp_path / "hyp.jsonl"
    with FakeServer(lambda body, n: Flood(b"\x1f\x8b" + b"z" * 100, 10_000,
                                          encoding="gzip")) as server:
        err = run_answer(server, context, out)
    assert "the reply is compressed (Content-Encoding 'gzip')" in str(err)
    assert len(server.seen) == 1 and rows(out) == []
    assert server.seen[0].accept_encoding == "identity"
