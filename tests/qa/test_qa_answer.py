"""answer: through the real ``openai`` client against a scripted server on 127.0.0.1 —
the hypothesis contract, retries on rate limits / server errors / malformed replies, a clear
stop on a refused key, a missing key, the key never written anywhere, refusal to
overwrite, resume refusing a changed run, and resume after a kill (torn line repaired)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY_LONGMEMEVAL
from fake_openai import FakeServer, Raw, error
from run_files import edit_line

from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.provenance.sidecar import sidecar_path
from engram_eval.qa.answer import AnswerConfig, answer
from engram_eval.qa.client import AuthError, EndpointError, RetryPolicy
from engram_eval.qa.context import ContextConfig, export_context
from engram_eval.runs.rows import scan_rows

pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-DO-NOT-LEAK-5b1e9c7a3f"
FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


@pytest.fixture(scope="module")
def context(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ctx") / "ctx.jsonl"
    export_context(pristine, TINY_LONGMEMEVAL, out, ContextConfig(3), echo=lambda m: None,
                   progress=False)
    return out


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def question_of(body: dict) -> str:
    text = body["messages"][-1]["content"]
    return text.split("Question: ", 1)[1].split("\n", 1)[0]


def echo_reply(body: dict, n: int) -> str:
    return f"Notes: ...\nAnswer: re {question_of(body)}"


def config(server: FakeServer, **kw: object) -> AnswerConfig:
    kw.setdefault("retry", FAST)
    return AnswerConfig(base_url=server.base_url, model="reader-1", progress=False,
                        **kw)  # type: ignore[arg-type]


def assert_key_absent(directory: Path, *texts: str) -> None:
    for p in directory.rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), p
    for t in texts:
        assert KEY not in t


def test_writes_the_hypothesis_contract(context: Path, tmp_path: Path) -> None:
    out = tmp_path / "hyp.jsonl"
    with FakeServer(echo_reply) as server:
        got = answer(context, out, config(server, concurrency=3), echo=lambda m: None)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert got.n_written == 12 and len(rows) == 12
    # the hypothesis contract, plus the content hashes a resume re-checks
    assert all(list(r) == ["question_id", "hypothesis", "prompt_sha256", "hypothesis_sha256"]
               for r in rows)
    ctx = {r["question_id"]: r for r in scan_rows(context, required=("question_id",)).rows}
    for r in rows:
        assert r["hypothesis"].endswith("re " + ctx[r["question_id"]]["question"])
    body = server.seen[0].body
    assert body["model"] == "reader-1" and body["temperature"] == 0.0
    assert server.seen[0].authorization == f"Bearer {KEY}"  # sent, never written
    meta = json.loads(sidecar_path(out).read_text())
    assert meta["context"]["fingerprint"] == json.loads(
        sidecar_path(context).read_text())["fingerprint"]
    assert meta["endpoint"]["api_key_env"] == "OPENAI_API_KEY"
    assert meta["runs"][-1]["rows_sha256"] == scan_rows(out, required=("question_id",)).sha256
    assert_key_absent(tmp_path)
    with pytest.raises(ProvenanceError, match="already exists"):
        answer(context, out, config(server), echo=lambda m: None)


def test_retries_rate_limits_server_errors_and_malformed_replies(context: Path,
                                                                 tmp_path: Path) -> None:
    script = {1: error(429, "slow down", {"Retry-After": "0"}), 2: error(500, "boom"),
              3: Raw(200, b"{not json", {"Content-Type": "application/json"}),
              4: Raw(200, json.dumps({"id": "x", "object": "chat.completion", "created": 0,
                                      "model": "m", "choices": []}).encode(),
                     {"Content-Type": "application/json"}),
              5: error(503, "unavailable")}

    def reply(body: dict, n: int) -> str | Raw:
        return script.get(n) or echo_reply(body, n)

    out = tmp_path / "hyp.jsonl"
    with FakeServer(reply) as server:
        answer(context, out, config(server, concurrency=1, limit=3,
                                    retry=RetryPolicy(attempts=6, base_delay=0.01)),
               echo=lambda m: None)
    assert len(out.read_text().splitlines()) == 3
    usage = json.loads(sidecar_path(out).read_text())["runs"][-1]["usage"]
    assert usage["retries"] == {"malformed_reply": 2, "rate_limit": 1, "server_error": 2}
    assert usage["requests"] == 3


def test_gives_up_after_the_attempts_keeping_rows_then_resumes(context: Path,
                                                               tmp_path: Path) -> None:
    broken = {"on": True}

    def reply(body: dict, n: int) -> str | Raw:
        if n > 2 and broken["on"]:
            return Raw(200, b"<html>gateway</html>", {"Content-Type": "text/html"})
        return echo_reply(body, n)

    out = tmp_path / "hyp.jsonl"
    with FakeServer(reply) as server:
        with pytest.raises(EndpointError, match="gave up after 4 attempt"):
            answer(context, out, config(server, concurrency=1), echo=lambda m: None)
        assert len(out.read_text().splitlines()) == 2
        broken["on"] = False
        msgs: list[str] = []
        answer(context, out, config(server, concurrency=1), resume=True, echo=msgs.append)
    assert any("2 row(s) already written" in m for m in msgs)
    ids = [json.loads(x)["question_id"] for x in out.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 12


def test_refused_key_stops_at_once_and_is_never_echoed(context: Path, tmp_path: Path) -> None:
    def reply(body: dict, n: int) -> Raw:  # a server that echoes what it was sent
        return error(401, f"Incorrect API key provided: {KEY}")

    out = tmp_path / "hyp.jsonl"
    with FakeServer(reply) as server:
        with pytest.raises(AuthError) as e:
            answer(context, out, config(server, concurrency=1), echo=lambda m: None)
    assert len(server.seen) == 1  # not retried
    assert "refused the API key from $OPENAI_API_KEY" in str(e.value)
    assert_key_absent(tmp_path, str(e.value))


def test_missing_key_is_a_clear_error_before_any_file(context: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    with FakeServer(echo_reply) as server:
        with pytest.raises(ConfigError, match="set the environment variable OPENAI_API_KEY"):
            answer(context, tmp_path / "hyp.jsonl", config(server), echo=lambda m: None)
    assert not server.seen and not (tmp_path / "hyp.jsonl").exists()


def test_resume_refuses_another_model(context: Path, tmp_path: Path) -> None:
    out = tmp_path / "hyp.jsonl"
    with FakeServer(echo_reply) as server:
        answer(context, out, config(server, limit=2), echo=lambda m: None)
        other = AnswerConfig(base_url=server.base_url, model="reader-2", retry=FAST,
                             progress=False, limit=2)
        with pytest.raises(ProvenanceError, match=r"chat\.model: \"reader-1\" -> \"reader-2\""):
            answer(context, out, other, resume=True, echo=lambda m: None)


def test_cli_resume_after_a_kill_repairs_the_torn_line(context: Path, tmp_path: Path) -> None:
    out = tmp_path / "hyp.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": KEY}
    with FakeServer(echo_reply, delay=0.15) as server:
        cmd = [sys.executable, "-m", "engram_eval.cli.main", "answer", str(context),
               "--model", "reader-1", "--base-url", server.base_url, "--output", str(out),
               "--concurrency", "1", "--no-progress"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 60
        while time.time() < deadline:
            if out.exists() and out.read_bytes().count(b"\n") >= 3:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kept = out.read_bytes().count(b"\n")
        assert 3 <= kept < 12
        with open(out, "ab") as f:
            f.write(b'{"question_id": "lme_t1')  # a torn last line
        asked = len(server.seen)
        done = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 0, done.stderr
    assert "removed a torn last line" in done.stderr
    rows = scan_rows(out, required=("question_id", "hypothesis")).rows
    assert len(rows) == 12 and len({r["question_id"] for r in rows}) == 12
    assert len(server.seen) - asked == 12 - kept  # only the missing questions were asked
    assert_key_absent(tmp_path, done.stdout, done.stderr)


def test_concurrency_is_bounded(context: Path, tmp_path: Path) -> None:
    with FakeServer(echo_reply, delay=0.05) as server:
        answer(context, tmp_path / "hyp.jsonl", config(server, concurrency=3),
               echo=lambda m: None)
    assert 2 <= server.max_in_flight <= 3
    assert len(server.seen) == 12


def test_without_openai_the_error_says_how_to_install(context: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai -> ImportError
    with pytest.raises(ConfigError, match=r"pip install 'engram-eval\[qa\]'"):
        answer(context, tmp_path / "hyp.jsonl",
               AnswerConfig(base_url="http://127.0.0.1:9/v1", model="m", progress=False),
               echo=lambda m: None)
    assert not (tmp_path / "hyp.jsonl").exists()


# --------------------------------------------------------------------------- secrets
def test_a_key_echoed_in_a_reply_is_never_written(context: Path, tmp_path: Path) -> None:
    """A server that puts the key into its answer (whole, and broken by a line break)."""
    half = len(KEY) // 2

    def reply(body: dict, n: int) -> str:
        return f"the key is {KEY}; again {KEY[:half]}\n{KEY[half:]}"

    out = tmp_path / "hyp.jsonl"
    with FakeServer(reply) as server:
        answer(context, out, config(server, limit=2), echo=lambda m: None)
    hyps = [json.loads(x)["hypothesis"] for x in out.read_text().splitlines()]
    assert hyps and all(h.count("[redacted]") == 2 for h in hyps)
    assert_key_absent(tmp_path)


def test_an_error_body_is_redacted_before_it_is_cut(context: Path, tmp_path: Path) -> None:
    """The key sits across the 300-character cut and across a line break: neither half of it
    may reach the message."""
    from engram_eval.net.secrets import redact

    pad = "x" * (300 - 10)
    msg = redact(pad + KEY + " tail", KEY)
    assert KEY not in msg and KEY[:10] not in msg[:300]

    def reply(body: dict, n: int) -> Raw:
        return error(400, pad + KEY[:7] + "\n" + KEY[7:] + " was wrong")

    out = tmp_path / "hyp.jsonl"
    with FakeServer(reply) as server:
        with pytest.raises(EndpointError) as e:
            answer(context, out, config(server, concurrency=1), echo=lambda m: None)
    text = str(e.value)
    assert KEY[:7] not in text.split(pad, 1)[-1] and KEY[7:] not in text
    assert_key_absent(tmp_path, text)


def test_an_oversized_reply_is_malformed(context: Path, tmp_path: Path) -> None:
    from engram_eval.qa.client import MAX_REPLY_CHARS

    def reply(body: dict, n: int) -> str:
        return "y" * (MAX_REPLY_CHARS + 1)

    out = tmp_path / "hyp.jsonl"
    with FakeServer(reply) as server:
        with pytest.raises(EndpointError, match="characters"):
            answer(context, out, config(server, concurrency=1), echo=lambda m: None)
    assert not out.exists() or out.read_text() == ""


def test_url_credentials_never_reach_the_recorded_command() -> None:
    from engram_eval.net.secrets import public_argv

    argv = ["engram-eval", "answer", "c.jsonl", "--base-url",
            f"https://user:{KEY}@host.example:8443/v1?token={KEY}#x",
            f"--base-url=http://u:{KEY}@h/v1", "--model", "m"]
    clean = public_argv(argv)
    assert KEY not in " ".join(clean)
    assert clean[4] == "https://host.example:8443/v1" and clean[5] == "--base-url=http://h/v1"
    assert clean[:4] == argv[:4] and clean[-2:] == argv[-2:]


def test_verbose_logs_carry_no_credentials(context: Path, tmp_path: Path) -> None:
    """``-v`` turns on the HTTP client's own log lines (every request's URL, the request
    options): the key is in none of the lines the command line lets out; the run still
    works. (A URL that holds a credential is refused before any request:
    ``test_qa_secrets.py``.)"""
    out = tmp_path / "hyp.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": KEY}
    with FakeServer(echo_reply) as server:
        done = subprocess.run([sys.executable, "-m", "engram_eval.cli.main", "-v", "answer",
                               str(context), "--model", "m", "--base-url", server.base_url,
                               "--output", str(out), "--limit", "2", "--no-progress"],
                              env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    logged = done.stdout + done.stderr
    assert "HTTP Request: POST http://127.0.0.1:" in logged  # the lines are there
    assert KEY not in logged
    assert_key_absent(tmp_path)


# --------------------------------------------------------------------------- resume re-checks
def _swap_question_ids(path: Path) -> None:
    ls = [json.loads(x) for x in path.read_text().splitlines()]
    ls[0]["question_id"], ls[1]["question_id"] = ls[1]["question_id"], ls[0]["question_id"]
    path.write_text("".join(json.dumps(r) + "\n" for r in ls))


@pytest.mark.parametrize(("edit", "match"), [
    (lambda p: edit_line(p, 1, lambda r: r.__setitem__("hypothesis", "forged")),
     r"line 2 \(question '[^']+'\): field 'hypothesis': does not match its hypothesis_sha256"),
    (_swap_question_ids, r"line 1 \(question '[^']+'\): field 'prompt_sha256': not the sha256 "
     "of this question's messages"),
    (lambda p: edit_line(p, 0, lambda r: r.__setitem__("note", "x")),
     r"line 1 .*field 'note': not a field engram-eval writes"),
    (lambda p: edit_line(p, 2, lambda r: r.__setitem__("question_id", "lme_t99")),
     r"line 3: question_id 'lme_t99' is not in the run's selection"),
    (lambda p: edit_line(p, 0, lambda r: (r.pop("prompt_sha256"),
                                           r.pop("hypothesis_sha256"))),
     r"field 'prompt_sha256': missing: rows written before engram-eval recorded content "
     r"hashes .* start a new output"),
    (lambda p: edit_sidecar(p, lambda m: m.__setitem__("approved_by", "x")),
     r"field 'approved_by' is not one engram-eval writes"),
])
def test_resume_refuses_a_kept_row_whose_content_changed(context: Path, tmp_path: Path,
                                                         edit, match: str) -> None:
    out = tmp_path / "hyp.jsonl"
    with FakeServer(echo_reply) as server:
        answer(context, out, config(server, limit=4), echo=lambda m: None)
        out.write_text("".join(out.read_text().splitlines(keepends=True)[:3]))  # interrupted
        edit(out)
        before = out.read_bytes()
        asked = len(server.seen)
        with pytest.raises(ProvenanceError, match=match) as e:
            answer(context, out, config(server, limit=4), resume=True, echo=lambda m: None)
        assert len(server.seen) == asked and out.read_bytes() == before  # nothing asked/written
    assert str(out) in str(e.value)


def edit_sidecar(path: Path, fn) -> None:
    side = sidecar_path(path)
    meta = json.loads(side.read_text())
    fn(meta)
    side.write_text(json.dumps(meta))


def test_resume_keeps_untouched_rows(context: Path, tmp_path: Path) -> None:
    out = tmp_path / "hyp.jsonl"
    with FakeServer(echo_reply) as server:
        answer(context, out, config(server, limit=4), echo=lambda m: None)
        kept = out.read_text().splitlines(keepends=True)[:2]
        out.write_text("".join(kept))
        answer(context, out, config(server, limit=4), resume=True, echo=lambda m: None)
    assert out.read_text().splitlines(keepends=True)[:2] == kept
    assert len(out.read_text().splitlines()) == 4
