"""Secrets (issue 43): what a server can send back, and what a user can type, never lets
the API key or a URL credential out.

Against a real server on 127.0.0.1 that echoes the key it was sent (``fake_openai.
sent_key``): the key split by a zero-width character or a soft hyphen, written in
full-width letters, wrapped over two lines or cut short by the token limit
(``finish_reason: "length"``) reaches no hypothesis, judgement, log line, error message or
file. A ``--base-url`` holding a credential (``user:pass@``, ``?token=``, ``?key=``,
``?api_key=``) or that cannot be taken apart (no scheme, a bad port, an unbalanced bracket)
is one usage error that does not quote it, before any request (so no Basic auth is ever
sent and nothing is written); ``--api-key-env`` given the key itself, and ``--timeout`` of
-1 or 0, are usage errors at parse time.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TINY_LONGMEMEVAL
from fake_openai import FakeServer, Raw, cut_short, error, sent_key

from engram_eval.cli.main import main
from engram_eval.errors import ConfigError
from engram_eval.net.secrets import MIN_KEY_PREFIX, public_argv, redact
from engram_eval.qa.answer import AnswerConfig, answer
from engram_eval.qa.client import ChatClient, ChatSettings, EndpointError, RetryPolicy
from engram_eval.qa.context import ContextConfig, export_context
from engram_eval.qa.judge import JudgeConfig, judge

pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-proj-SECRETx9Qm2Lw7Vb4Nc8Zt1Kd5"
HIDDEN = "\u200b\u200c\u200d\u2060\ufeff\u00ad"  # zero-width space/joiners, word joiner, BOM, soft hyphen
FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.02)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


@pytest.fixture(scope="module")
def context(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ctx") / "ctx.jsonl"
    export_context(pristine, TINY_LONGMEMEVAL, out, ContextConfig(2), echo=lambda m: None,
                   progress=False)
    return out


def readable(text: str) -> str:
    """``text`` as a reader sees it: NFKC, whitespace and invisible characters gone."""
    return "".join(c for c in unicodedata.normalize("NFKC", text)
                   if not c.isspace() and unicodedata.category(c) != "Cf")


def assert_no_key(*texts: str, directory: Path | None = None) -> None:
    """No text (and no file under ``directory``, its JSON decoded) holds the key or a
    prefix of it of ``MIN_KEY_PREFIX`` characters, however it is split or written."""
    texts_all = list(texts)
    if directory is not None:
        for p in directory.rglob("*"):
            if p.is_file():
                raw = p.read_text(encoding="utf-8", errors="replace")
                texts_all.append(raw)
                docs = ([json.loads(line) for line in raw.splitlines() if line.strip()]
                        if p.suffix == ".jsonl" else [json.loads(raw)] if p.suffix == ".json"
                        else [])
                texts_all.extend(json.dumps(d, ensure_ascii=False) for d in docs)
    for t in texts_all:
        assert KEY[:MIN_KEY_PREFIX] not in readable(t), t[:300]


def disguises(key: str) -> dict[str, str]:
    """The key as a server may echo it back."""
    third = len(key) // 3
    out = {f"split U+{ord(c):04X}": key[:third] + c + key[third:2 * third] + c + key[2 * third:]
           for c in HIDDEN}
    out["every char split"] = "\u200b".join(key)
    out["full-width"] = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in key)
    out["wrapped"] = key[:third] + "\n  " + key[third:]
    return out


# --------------------------------------------------------------------------- redact itself
@pytest.mark.parametrize("name", sorted(disguises(KEY)))
def test_redact_finds_the_key_however_it_is_disguised(name: str) -> None:
    shown = disguises(KEY)[name]
    out = redact(f"before {shown} after", KEY)
    assert out == "before [redacted] after"


@pytest.mark.parametrize("n", [MIN_KEY_PREFIX, MIN_KEY_PREFIX + 1, len(KEY) // 2, len(KEY) - 1])
def test_redact_finds_a_prefix_of_the_key_cut_short(n: int) -> None:
    assert redact(f"the key is {KEY[:n]}", KEY) == "the key is [redacted]"
    split = KEY[:n // 2] + "\u00ad" + KEY[n // 2:n]
    assert redact(f"the key is {split}", KEY) == "the key is [redacted]"


def test_redact_keeps_what_is_not_the_key() -> None:
    """Text shorter than the safe prefix, or another string, is left alone (the answers
    stay readable)."""
    text = f"sk-proj is a prefix; {KEY[:MIN_KEY_PREFIX - 1]} too short; café ﬁne"
    assert redact(text, KEY) == text
    assert redact("EMPTY set, \u200bEMPTY", "EMPTY") == "[redacted] set, \u200b[redacted]"


# --------------------------------------------------------------------------- echoing server
def echoed(kind: str) -> Callable[[dict, int], str | Raw]:
    """A reply echoing the key it was sent, disguised as ``kind``."""
    def reply(body: dict, n: int) -> str | Raw:
        key = sent_key()
        if kind.startswith("cut"):
            return cut_short("Answer: the key you sent is " + key[:int(kind[3:])])
        return f"Answer: your key {disguises(key)[kind]} and again {key}"
    return reply


ECHOES = [*sorted(disguises(KEY)), f"cut{MIN_KEY_PREFIX}", f"cut{len(KEY) // 2}",
          f"cut{len(KEY) - 1}"]


@pytest.mark.parametrize("kind", ECHOES)
def test_an_echoed_key_reaches_no_hypothesis_or_file(kind: str, context: Path,
                                                     tmp_path: Path) -> None:
    out = tmp_path / "hyp.jsonl"
    with FakeServer(echoed(kind)) as server:
        answer(context, out, AnswerConfig(base_url=server.base_url, model="r", limit=2,
                                          retry=FAST, progress=False), echo=lambda m: None)
        assert all(s.authorization == f"Bearer {KEY}" for s in server.seen)  # it was echoed
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2 and all("[redacted]" in r["hypothesis"] for r in rows)
    assert_no_key(directory=tmp_path)


def test_an_echoed_key_reaches_no_judgement_or_report(context: Path, tmp_path: Path) -> None:
    hyp = tmp_path / "hyp.jsonl"
    with FakeServer(lambda body, n: "Answer: something") as server:
        answer(context, hyp, AnswerConfig(base_url=server.base_url, model="r", retry=FAST,
                                          progress=False), echo=lambda m: None)
    said: list[str] = []
    with FakeServer(lambda body, n: cut_short("yes " + "\u2060".join(sent_key()[:12]))) \
            as server:
        judge(hyp, TINY_LONGMEMEVAL, tmp_path / "j.jsonl",
              JudgeConfig(base_url=server.base_url, judge_model="judge", retry=FAST,
                          progress=False), echo=said.append)
    rows = [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert rows and all(r["reply"] == "yes [redacted]" and r["label"] for r in rows)
    assert_no_key(*said, directory=tmp_path)


@pytest.mark.parametrize("status", [400, 401, 500])
def test_an_echoed_key_reaches_no_error_or_log_line(status: int, context: Path,
                                                    tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """An error body (a refused key, a bad request, a server error retried and logged)
    echoing the key split by a soft hyphen, then cut: the error and every log line are
    clean."""
    def reply(body: dict, n: int) -> Raw:
        key = sent_key()
        return error(status, f"bad key {key[:9]}\u00ad{key[9:]} / {key[:MIN_KEY_PREFIX + 2]}")

    out = tmp_path / "hyp.jsonl"
    caplog.set_level(logging.DEBUG)
    with FakeServer(reply) as server, pytest.raises(EndpointError) as e:
        answer(context, out, AnswerConfig(base_url=server.base_url, model="r", concurrency=1,
                                          retry=FAST, progress=False), echo=lambda m: None)
    assert "[redacted]" in str(e.value)
    if status == 500:
        assert "retry 1/2" in caplog.text
    assert_no_key(str(e.value), caplog.text, directory=tmp_path)


# --------------------------------------------------------------------------- --base-url
#: case -> the URL (``{port}``: the fake server's) and what the one error says
BAD_URLS = {
    "user-and-password": ("http://user:{secret}@127.0.0.1:{port}/v1", "holds user info"),
    "user-only": ("http://{secret}@127.0.0.1:{port}/v1", "holds user info"),
    "token-query": ("http://127.0.0.1:{port}/v1?token={secret}", "holds a query"),
    "key-query": ("http://127.0.0.1:{port}/v1?key={secret}", "holds a query"),
    "api_key-query": ("http://127.0.0.1:{port}/v1?api_key={secret}", "holds a query"),
    "fragment": ("http://127.0.0.1:{port}/v1#{secret}", "holds a query or fragment"),
    "no-scheme": ("{secret}@127.0.0.1:{port}/v1", "must start with http:// or https://"),
    "no-scheme-host-port": ("127.0.0.1:{port}/{secret}", "must start with http://"),
    "other-scheme": ("ftp://127.0.0.1:{port}/{secret}", "must start with http://"),
    "bad-port": ("http://127.0.0.1:99999/{secret}", "has an invalid host or port"),
    "port-text": ("http://127.0.0.1:{secret}/v1", "has an invalid host or port"),
    "port-zero": ("http://127.0.0.1:0/{secret}", "has an invalid port"),
    "unbalanced-bracket": ("http://[::1:{port}/{secret}", "has an unbalanced '['"),
    "closing-bracket": ("http://::1]:{port}/{secret}", "has an unbalanced '['"),
    "no-host": ("http:///{secret}", "has no host"),
}
SECRET = "pw-DO-NOT-LEAK-77"


@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_a_bad_base_url_is_one_usage_error_that_quotes_nothing(
        case: str, context: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template, says = BAD_URLS[case]
    out = tmp_path / "hyp.jsonl"
    with FakeServer(lambda body, n: "Answer: x") as server:
        port = server.httpd.server_address[1]
        url = template.format(secret=SECRET, port=port)
        with pytest.raises(SystemExit) as e:
            main(["answer", str(context), "--model", "m", "--base-url", url,
                  "--output", str(out), "--no-progress"])
        assert server.seen == []  # no request, so no Basic auth, no query sent
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert f"engram-eval answer: error: argument --base-url: {says}" in err
    assert "not printed" in err and SECRET not in err and "OPENAI_API_KEY" not in err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("case", ["user-and-password", "token-query", "bad-port"])
def test_the_library_refuses_the_same_urls(case: str) -> None:
    """``ChatClient`` (what ``answer`` and ``judge`` build) refuses them too, before the key
    is read or a request is made."""
    url = BAD_URLS[case][0].format(secret=SECRET, port=8000)
    with pytest.raises(ConfigError, match="^--base-url ") as e:
        ChatClient(url, ChatSettings("m"))
    assert SECRET not in str(e.value)


def test_a_url_holding_the_key_itself_is_refused(context: Path, tmp_path: Path) -> None:
    with FakeServer(lambda body, n: "Answer: x") as server:
        with pytest.raises(ConfigError, match="holds the API key") as e:
            answer(context, tmp_path / "h.jsonl",
                   AnswerConfig(base_url=f"{server.base_url}/{KEY}", model="m",
                                progress=False), echo=lambda m: None)
        assert server.seen == []
    assert_no_key(str(e.value), directory=tmp_path)


def test_a_refused_url_in_a_real_process_is_one_line(context: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": KEY}
    done = subprocess.run([sys.executable, "-m", "engram_eval.cli.main", "judge",
                           str(context), "--dataset", str(TINY_LONGMEMEVAL), "--judge-model",
                           "j", "--base-url", f"https://u:{SECRET}@example.invalid/v1",
                           "--output", str(tmp_path / "j.jsonl")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("engram-eval judge: error: argument --base-url: holds user info")
    assert "Traceback" not in done.stderr and SECRET not in done.stderr + done.stdout
    assert list(tmp_path.iterdir()) == []


def test_recorded_command_lines_never_hold_url_credentials() -> None:
    argv = ["engram-eval", "answer", "--base-url", f"http://u:{SECRET}@h:1/v1?k={SECRET}",
            f"--base-url=http://[::1]:8000/v1#{SECRET}", "http://h:bad/" + SECRET]
    clean = public_argv(argv)
    assert SECRET not in " ".join(clean)
    assert clean[3] == "http://h:1/v1" and clean[4] == "--base-url=http://[::1]:8000/v1"


# --------------------------------------------------------------------------- other flags
@pytest.mark.parametrize("value", [KEY, "sk-abc=def", "OPENAI API KEY"])
def test_the_key_given_as_its_variable_name_is_not_printed(
        value: str, context: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["answer", str(context), "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
              "--api-key-env", value, "--output", str(tmp_path / "h.jsonl")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --api-key-env: takes the NAME" in err
    assert value not in err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["-1", "0", "nan", "-inf"])
def test_a_timeout_that_is_not_positive_is_refused_at_parse_time(
        value: str, context: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["answer", str(context), "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
              f"--timeout={value}", "--output", str(tmp_path / "h.jsonl")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --timeout:" in err
    assert "malformed" not in err and list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match="--timeout must be a positive number"):
        ChatClient("http://127.0.0.1:9/v1", ChatSettings("m"), timeout=float(value))
