"""The HTTP adapter (--retriever http) against local servers: a good one, one slower than the
deadline, one that answers with wrong ids, one whose reply never ends, one that fails then
recovers; no credential in the URL; cost counted per question."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("httpx2")

import systems_helpers as H  # noqa: E402

from engram_eval.errors import ConfigError, EngramEvalError  # noqa: E402
from engram_eval.provenance.sidecar import sidecar_path, summary_path  # noqa: E402
from engram_eval.runs.config import RunConfig  # noqa: E402
from engram_eval.runs.rows import TIMING_FIELDS  # noqa: E402
from engram_eval.runs.runner import run  # noqa: E402
from engram_eval.runs.verify import verify  # noqa: E402


class _Handler(BaseHTTPRequestHandler):
    mode = "good"
    calls: list[str] = []
    ids: list[str] = []
    failures_left = 0

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _reply(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        type(self).calls.append(self.path)
        if self.path == "/describe" and self.mode != "no-describe":
            self._reply(200, json.dumps({"name": "test-server", "version": "7"}).encode())
        else:
            self._reply(404, b"{}")

    def do_POST(self) -> None:  # noqa: N802
        cls = type(self)
        cls.calls.append(self.path)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if cls.failures_left > 0:
            cls.failures_left -= 1
            self._reply(503, b'{"error": "busy"}')
            return
        if self.path == "/index":
            cls.ids = [s["id"] for s in body["sessions"]]
            self._reply(200, b"{}")
            return
        ranking = [{"id": i, "score": float(len(cls.ids) - n)} for n, i in enumerate(cls.ids)]
        if self.mode == "wrong":
            ranking[0] = {"id": "answer_made_up", "score": 99.0}
        if self.mode == "slow":  # a trickle: each byte well inside a read timeout, the whole late
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(1000):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.05)
            return
        if self.mode == "huge":  # a reply that never ends
            self.send_response(200)
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"[" * 65536)
            except OSError:
                return
        self._reply(200, json.dumps({"ranking": ranking}).encode())


@pytest.fixture()
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {"calls": [], "ids": [], "mode": "good",
                                      "failures_left": 0})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()


def _cfg(url: str, **kw: Any) -> RunConfig:
    return RunConfig(retriever="http", system_url=url, progress=False, system_backoff=0.01,
                     **kw)


def test_good_server_runs_verifies_and_counts_cost(server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url, handler = server
    out = tmp_path / "http.jsonl"
    run(_cfg(url, system_settings={"k": 1}), H.FIXTURE, out, echo=lambda m: None)
    meta = json.loads(sidecar_path(out).read_text())
    system = meta["retriever"]["system"]
    assert system["url"] == url and system["server"] == {"name": "test-server", "version": "7"}
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert all(set(r["timing"]) == set(TIMING_FIELDS) for r in rows)
    assert all(r["timing"]["requests"] == 2 for r in rows)  # index + search per question
    assert all(r["timing"]["bytes_sent"] > 0 and r["timing"]["bytes_received"] > 0 for r in rows)
    cost = json.loads(summary_path(out).read_text())["cost"]
    assert set(cost) == {"seconds", "requests", "bytes_sent", "bytes_received"}
    assert cost["requests"]["total"] == 24 and cost["requests"]["p50"] == 2
    rep = verify(out, H.FIXTURE, rerun=2, rerun_seed=0)
    assert rep.ok and rep.verified, rep.format()
    # the server's own description changed: verify --rerun says so
    handler.mode = "no-describe"
    text = verify(out, H.FIXTURE, rerun=2, rerun_seed=0).format()
    assert "server's description: the run's {'name': 'test-server', 'version': '7'}, now None" \
        in text


def test_a_server_slower_than_the_deadline_is_cut_and_retried(server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url, handler = server
    handler.mode = "slow"
    out = tmp_path / "slow.jsonl"
    with pytest.raises(EngramEvalError, match=r"gave up after 2 attempt.*within 0.5 s"):
        run(_cfg(url, system_deadline=0.5, system_attempts=2), H.FIXTURE, out,
            echo=lambda m: None)
    assert handler.calls.count("/search") == 2


def test_wrong_ids_and_an_endless_reply_stop_the_run(server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url, handler = server
    handler.mode = "wrong"
    with pytest.raises(EngramEvalError, match="'answer_made_up', which is not a session"):
        run(_cfg(url), H.FIXTURE, tmp_path / "wrong.jsonl", echo=lambda m: None)
    handler.mode = "huge"
    with pytest.raises(EngramEvalError, match="longer than 100000 bytes"):
        run(_cfg(url, system_max_bytes=100_000), H.FIXTURE, tmp_path / "huge.jsonl",
            echo=lambda m: None)
    assert handler.calls.count("/search") == 2  # neither retried: they would be again


def test_busy_server_is_retried_with_backoff(server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url, handler = server
    handler.failures_left = 2
    out = tmp_path / "busy.jsonl"
    run(_cfg(url, system_attempts=3, limit=1), H.FIXTURE, out, echo=lambda m: None)
    row = json.loads(out.read_text())
    assert row["timing"]["requests"] == 4  # index x3 (two 503s), search
    meta = json.loads(sidecar_path(out).read_text())
    assert meta["runs"][-1]["model_stats"]["system"]["retries"] == 2


@pytest.mark.parametrize("url", ["http://user:secret@127.0.0.1:1", "http://127.0.0.1:1/?token=secret",
                                 "ftp://127.0.0.1:1", ""])
def test_a_url_with_a_credential_is_refused_unprinted(url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--system-url|needs --system-url") as e:
        run(_cfg(url), H.FIXTURE, tmp_path / "x.jsonl", echo=lambda m: None)
    assert "secret" not in str(e.value)
    assert not (tmp_path / "x.jsonl").exists()
