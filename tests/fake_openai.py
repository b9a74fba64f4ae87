"""A scripted OpenAI-style chat server on 127.0.0.1 for the answer and judge tests.

A real HTTP server (``http.server`` in a thread, port chosen by the OS), so the tests drive
the real ``openai`` client over a real socket. ``reply(request, n)`` — the parsed request body
and the 1-based count of requests so far — returns what to answer: a string (a completion
with that text), a :class:`Raw` (status, body bytes, headers) for errors and malformed
replies, a :class:`Trickle` (a reply sent a byte at a time: a server slower than any
deadline) or a :class:`Flood` (a reply of ever more bytes, declared huge or chunked without
end). Every request is recorded with its Authorization header; :func:`sent_key` is the key
of the request being answered (a server that echoes it back), and ``FakeServer.sent`` the
bytes each trickle or flood got out before the client hung up (or it ended).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Raw:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Trickle:
    """A completion with ``text`` sent ``interval`` seconds per byte: the status line and
    headers too (``headers``), or only the body after them."""

    text: str
    interval: float
    headers: bool = True


@dataclass
class Flood:
    """A 200 reply whose body is ``chunk`` over and over, up to ``limit`` bytes or until the
    client hangs up: with ``Content-Length: length`` (a declared size), or chunked (no end
    declared) when ``length`` is None; ``encoding`` is sent as ``Content-Encoding``."""

    chunk: bytes
    limit: int
    length: int | None = None
    encoding: str | None = None


def completion(text: str | None, model: str = "m",
               finish_reason: str = "stop") -> dict[str, Any]:
    return {"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": finish_reason,
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}}


def cut_short(text: str) -> Raw:
    """A completion with ``text`` that ended at its token limit (``finish_reason: length``)."""
    return Raw(200, json.dumps(completion(text, finish_reason="length")).encode(),
               {"Content-Type": "application/json"})


_current = threading.local()


def sent_key() -> str:
    """The bearer token of the request being answered in this thread (for a server that
    echoes the key it was sent)."""
    auth = _current.seen.authorization or ""
    return auth.removeprefix("Bearer ")


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Raw:
    body = json.dumps({"error": {"message": message, "type": "x", "code": None}}).encode()
    return Raw(status, body, {"Content-Type": "application/json", **(headers or {})})


@dataclass
class Seen:
    path: str
    body: dict[str, Any]
    authorization: str | None
    accept_encoding: str | None = None


class FakeServer:
    def __init__(self, reply: Callable[[dict[str, Any], int], str | Raw | Trickle | Flood],
                 delay: float = 0.0) -> None:
        self.reply = reply
        self.delay = delay
        self.seen: list[Seen] = []
        self.sent: list[int] = []  # bytes out per Trickle or Flood reply
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests being served at once
        self._lock = threading.Lock()
        self._sending = threading.Condition()
        self._busy = 0  # Trickle or Flood replies being sent
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                seen = Seen(self.path, body, self.headers.get("Authorization"),
                            self.headers.get("Accept-Encoding"))
                _current.seen = seen
                with outer._lock:
                    outer.seen.append(seen)
                    count = len(outer.seen)
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    if outer.delay:
                        time.sleep(outer.delay)
                    out = outer.reply(body, count)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1
                if isinstance(out, Trickle | Flood):
                    self.close_connection = True
                    with outer._sending:
                        outer._busy += 1
                    sent = 0
                    try:
                        sent = (self._trickle(out, body) if isinstance(out, Trickle)
                                else self._flood(out))
                    finally:
                        with outer._sending:
                            outer.sent.append(sent)
                            outer._busy -= 1
                            outer._sending.notify_all()
                    return
                if isinstance(out, str):
                    out = Raw(200, json.dumps(completion(out, body.get("model", "m"))).encode(),
                              {"Content-Type": "application/json"})
                self.send_response(out.status)
                for k, v in out.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out.body)))
                self.end_headers()
                self.wfile.write(out.body)

            def _out(self, data: bytes) -> bool:
                """Write ``data`` now; False once the client has hung up."""
                try:
                    self.wfile.write(data)
                    self.wfile.flush()
                    return True
                except OSError:
                    return False

            def _trickle(self, t: Trickle, body: dict[str, Any]) -> int:
                data = json.dumps(completion(t.text, body.get("model", "m"))).encode()
                head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(data)}\r\n\r\n").encode()
                slow = head + data if t.headers else data
                if not t.headers and not self._out(head):
                    return 0
                sent = 0
                for i in range(len(slow)):
                    time.sleep(t.interval)
                    if not self._out(slow[i:i + 1]):
                        break
                    sent += 1
                return sent

            def _flood(self, f: Flood) -> int:
                head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                head += (f"Content-Length: {f.length}\r\n" if f.length is not None
                         else "Transfer-Encoding: chunked\r\n")
                if f.encoding:
                    head += f"Content-Encoding: {f.encoding}\r\n"
                if not self._out((head + "\r\n").encode()):
                    return 0
                piece = (f.chunk if f.length is not None
                         else b"%x\r\n%s\r\n" % (len(f.chunk), f.chunk))
                sent = 0
                while sent < f.limit and self._out(piece):
                    sent += len(f.chunk)
                return sent

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._sending:  # a trickle or flood ends by itself once its client hung up
            self._sending.wait_for(lambda: self._busy == 0, timeout=60)
        self.httpd.shutdown()
        self.httpd.server_close()

    def questions(self) -> list[str]:
        """The user message of every request, in arrival order."""
        return [s.body["messages"][-1]["content"] for s in self.seen]
