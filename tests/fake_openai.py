"""A scripted OpenAI-style chat server on 127.0.0.1 for the answer and judge tests.

A real HTTP server (``http.server`` in a thread, port chosen by the OS), so the tests drive
the real ``openai`` client over a real socket. ``reply(request, n)`` — the parsed request body
and the 1-based count of requests so far — returns what to answer: a string (a completion
with that text), or a :class:`Raw` (status, body bytes, headers) for errors and malformed
replies. Every request is recorded with its Authorization header.
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


def completion(text: str | None, model: str = "m") -> dict[str, Any]:
    return {"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}}


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Raw:
    body = json.dumps({"error": {"message": message, "type": "x", "code": None}}).encode()
    return Raw(status, body, {"Content-Type": "application/json", **(headers or {})})


@dataclass
class Seen:
    path: str
    body: dict[str, Any]
    authorization: str | None


class FakeServer:
    def __init__(self, reply: Callable[[dict[str, Any], int], str | Raw],
                 delay: float = 0.0) -> None:
        self.reply = reply
        self.delay = delay
        self.seen: list[Seen] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests being served at once
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                with outer._lock:
                    outer.seen.append(Seen(self.path, body, self.headers.get("Authorization")))
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
                if isinstance(out, str):
                    out = Raw(200, json.dumps(completion(out, body.get("model", "m"))).encode(),
                              {"Content-Type": "application/json"})
                self.send_response(out.status)
                for k, v in out.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out.body)))
                self.end_headers()
                self.wfile.write(out.body)

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
        self.httpd.shutdown()
        self.httpd.server_close()

    def questions(self) -> list[str]:
        """The user message of every request, in arrival order."""
        return [s.body["messages"][-1]["content"] for s in self.seen]
